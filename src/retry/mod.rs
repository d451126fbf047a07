//! Retries outside the breaker: [`Retry`] (attempts, backoff with full, equal
//! or no jitter, overall timeout), the retry budget that keeps retries from
//! multiplying an outage (`budget.rs`), the jitter with the small PRNG
//! behind it (`jitter.rs`), and the retry loop itself (`run.rs`).
//!
//! # Rules
//!
//! Each attempt takes its own breaker permit. Only transient failures are
//! retried (transport, timeout, 5xx: [`Error::is_transient`](crate::Error::is_transient)),
//! never a rejection or an ignored 4xx. Backoff is exponential. A retry budget
//! (at most 20 % of calls, plus 10 a second, shared with hedges) keeps retries
//! from multiplying an outage. A retry never sleeps past the deadline, asks the
//! breaker before it sleeps, and answers with the last real error. It holds
//! its caller between attempts: keep [`overall_timeout`](RetryBuilder::overall_timeout) within the request budget.

mod budget;
mod jitter;
mod run;

use std::time::Duration;

use self::budget::BUCKETS;
pub(crate) use self::budget::RetryBudget;
pub use self::jitter::Jitter;
pub(crate) use self::jitter::JitterSource;
pub(crate) use self::run::{Next, Retried, Retrier};
use crate::error::ConfigError;

/// How a dependency retries transient failures, used by
/// [`CallBuilder::retry`](crate::CallBuilder::retry). Built by
/// [`Retry::builder`], whose setters set its fields; read back with getters
/// named like the setters.
///
/// What is retried and how: the [module's rules](crate::retry#rules).
///
/// # The budget
///
/// Backoff alone does not stop a fleet of callers from multiplying the load
/// on a failing provider. The budget (after Finagle's `RetryBudget` and
/// Envoy's) caps retries over any [`BUDGET_WINDOW`](Retry::BUDGET_WINDOW) at
/// `percent` % of the calls plus `min_per_sec x 10`, where *calls* are the
/// first attempts of retried calls, counted on the dependency's clock in
/// one-second buckets. The floor lets a caller with little traffic still
/// retry. When the budget is spent, the last outcome is returned as it is.
///
/// ```
/// use std::time::Duration;
/// use watertight::retry::Retry;
///
/// let retry = Retry::builder()
///     .max_attempts(3)
///     .backoff(Duration::from_millis(50), Duration::from_secs(1))
///     .budget(20.0, 10) // 20 % of calls, plus 10 a second
///     .overall_timeout(Duration::from_secs(5))
///     .build()?;
/// assert_eq!(retry.max_attempts(), 3);
/// assert_eq!(retry.budget(), (20.0, 10));
/// # Ok::<(), watertight::ConfigError>(())
/// ```
///
/// # Files
///
/// With the `serde` feature a `Retry` is also a file section, checked by
/// [`validate`](Retry::validate) once read:
///
/// ```toml
/// max_attempts = 3
/// initial_backoff = "50ms"
/// max_backoff = "1s"
/// backoff_multiplier = 2.0
/// jitter = "equal"
/// budget_percent = 20.0
/// budget_min_per_sec = 10
/// overall_timeout = "5s"
/// ```
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
pub struct Retry {
    max_attempts: u32,
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    initial_backoff: Duration,
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    max_backoff: Duration,
    backoff_multiplier: f64,
    jitter: Jitter,
    budget_percent: f64,
    budget_min_per_sec: u32,
    #[cfg_attr(
        feature = "serde",
        serde(with = "crate::duration::option", skip_serializing_if = "Option::is_none")
    )]
    overall_timeout: Option<Duration>,
}

/// Sets the fields of a [`Retry`], one setter each; from [`Retry::builder`].
/// [`build`](Self::build) checks them.
#[derive(Debug, Clone, PartialEq, Default)]
#[must_use = "a builder does nothing until `build()` is called"]
pub struct RetryBuilder {
    retry: Retry,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            backoff_multiplier: 2.0,
            jitter: Jitter::Full,
            budget_percent: 20.0,
            budget_min_per_sec: 10,
            overall_timeout: None,
        }
    }
}

impl Retry {
    /// The span over which the retry budget compares retries with calls.
    pub const BUDGET_WINDOW: Duration = Duration::from_secs(BUCKETS as u64);

    /// The defaults: 3 attempts, backoff from 50 ms doubling up to 1 s with
    /// full jitter, a budget of 20 % of calls plus 10 retries a second, and no
    /// overall timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// No retries at all: one attempt per call.
    pub fn disabled() -> Self {
        Retry { max_attempts: 1, ..Retry::default() }
    }

    /// A builder starting from the defaults of [`Retry::new`].
    pub fn builder() -> RetryBuilder {
        RetryBuilder::default()
    }

    /// Attempts per call, the first one included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The `(initial, max)` backoff.
    pub fn backoff(&self) -> (Duration, Duration) {
        (self.initial_backoff, self.max_backoff)
    }

    /// The backoff multiplier.
    pub fn backoff_multiplier(&self) -> f64 {
        self.backoff_multiplier
    }

    /// How much of each backoff is drawn at random.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The budget: `(percent of calls, minimum retries per second)`.
    pub fn budget(&self) -> (f64, u32) {
        (self.budget_percent, self.budget_min_per_sec)
    }

    /// The overall timeout, if any.
    pub fn overall_timeout(&self) -> Option<Duration> {
        self.overall_timeout
    }

    /// Checks every field; the error names the first bad one, as its setter
    /// spells it (`retry.max_attempts`, `retry.backoff`, ...). A `Retry` from
    /// [`RetryBuilder::build`] has passed it; one read from a file has not
    /// until `watertight::config::Config` runs it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check(self.max_attempts > 0, "retry.max_attempts", "at least 1", self.max_attempts)?;
        let backoff = format_args!("initial {:?} > max {:?}", self.initial_backoff, self.max_backoff);
        let ok = self.initial_backoff <= self.max_backoff;
        ConfigError::check(ok, "retry.backoff", "initial <= max", backoff)?;
        let m = self.backoff_multiplier;
        ConfigError::check(m.is_finite() && m >= 1.0, "retry.backoff_multiplier", "finite and >= 1", m)?;
        let b = self.budget_percent;
        ConfigError::check((0.0..=100.0).contains(&b), "retry.budget", "a percentage in [0, 100]", b)?;
        let ok = self.overall_timeout != Some(Duration::ZERO);
        ConfigError::check(ok, "retry.overall_timeout", "greater than zero", "0ns")
    }

    /// The cap on the backoff before retry number `retry` (1 for the first
    /// retry): `initial x multiplier^(retry - 1)`, at most `max`.
    pub(crate) fn backoff_cap(&self, retry: u32) -> Duration {
        if self.initial_backoff.is_zero() || retry == 0 {
            return Duration::ZERO;
        }
        let exp = i32::try_from(retry - 1).unwrap_or(i32::MAX);
        let secs = self.initial_backoff.as_secs_f64() * self.backoff_multiplier.powi(exp);
        // `secs` may be +inf after many retries; `min` brings it back to the cap.
        let capped = secs.min(self.max_backoff.as_secs_f64());
        Duration::try_from_secs_f64(capped).unwrap_or(self.max_backoff).min(self.max_backoff)
    }

    /// The sleep before retry number `retry`: its cap, jittered as
    /// [`jitter`](Self::jitter) says, with draws from `source`.
    pub(crate) fn pause(&self, retry: u32, source: &JitterSource) -> Duration {
        self.jitter.draw(self.backoff_cap(retry), source)
    }
}

impl RetryBuilder {
    /// Attempts per call, the first one included; 1 turns retries off. Must
    /// be at least 1. Defaults to 3.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.retry.max_attempts = n;
        self
    }

    /// The backoff before the first retry (`initial`) and the cap it grows to
    /// (`max`), jittered as [`jitter`](Self::jitter) says. `initial` must not
    /// exceed `max`; a zero `initial` retries at once. Defaults to 50 ms and 1 s.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.retry.initial_backoff = initial;
        self.retry.max_backoff = max;
        self
    }

    /// How the backoff cap grows from one retry to the next; must be finite
    /// and at least 1. Defaults to 2.0.
    pub fn backoff_multiplier(mut self, multiplier: f64) -> Self {
        self.retry.backoff_multiplier = multiplier;
        self
    }

    /// How much of each backoff is drawn at random (see [`Jitter`]). Defaults
    /// to [`Jitter::Full`].
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.retry.jitter = jitter;
        self
    }

    /// The retry budget (see [the budget](Retry#the-budget)): `percent` in
    /// `[0, 100]` of the calls made, plus `min_per_sec` retries a second.
    /// `budget(0.0, 0)` forbids retries outright. Defaults to 20.0 (%) and 10.
    pub fn budget(mut self, percent: f64, min_per_sec: u32) -> Self {
        self.retry.budget_percent = percent;
        self.retry.budget_min_per_sec = min_per_sec;
        self
    }

    /// The most one call may take, all attempts and backoffs included. With
    /// it set, no attempt's deadline lies past it, and a backoff that would
    /// end past it is not slept: the last outcome is returned instead. Must
    /// be non-zero. Defaults to none (each attempt still has the
    /// dependency's timeout).
    pub fn overall_timeout(mut self, timeout: Duration) -> Self {
        self.retry.overall_timeout = Some(timeout);
        self
    }

    /// Checks every field ([`Retry::validate`]).
    pub fn build(self) -> Result<Retry, ConfigError> {
        self.retry.validate()?;
        Ok(self.retry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_docs() {
        let r = Retry::new();
        assert_eq!(r.max_attempts(), 3);
        assert_eq!(r.backoff(), (Duration::from_millis(50), Duration::from_secs(1)));
        assert_eq!(r.backoff_multiplier(), 2.0);
        assert_eq!(r.budget(), (20.0, 10));
        assert_eq!(r.overall_timeout(), None);
        assert_eq!(Retry::builder().build().unwrap(), r);
        assert_eq!(Retry::disabled().max_attempts(), 1);
    }

    #[test]
    fn validation_names_the_field() {
        let field = |r: RetryBuilder| r.build().unwrap_err().field();
        let b = Retry::builder;
        assert_eq!(field(b().max_attempts(0)), "retry.max_attempts");
        assert_eq!(field(b().backoff(Duration::from_secs(2), Duration::from_secs(1))), "retry.backoff");
        assert_eq!(field(b().backoff_multiplier(0.5)), "retry.backoff_multiplier");
        assert_eq!(field(b().backoff_multiplier(f64::NAN)), "retry.backoff_multiplier");
        assert_eq!(field(b().budget(-0.1, 1)), "retry.budget");
        assert_eq!(field(b().budget(100.5, 1)), "retry.budget");
        assert_eq!(field(b().budget(f64::INFINITY, 1)), "retry.budget");
        assert_eq!(field(b().overall_timeout(Duration::ZERO)), "retry.overall_timeout");
    }

    #[test]
    fn backoff_cap_grows_then_saturates() {
        let r =
            Retry::builder().backoff(Duration::from_millis(50), Duration::from_millis(300)).build().unwrap();
        assert_eq!(r.backoff_cap(1), Duration::from_millis(50));
        assert_eq!(r.backoff_cap(2), Duration::from_millis(100));
        assert_eq!(r.backoff_cap(3), Duration::from_millis(200));
        assert_eq!(r.backoff_cap(4), Duration::from_millis(300));
        assert_eq!(r.backoff_cap(u32::MAX), Duration::from_millis(300));
        let zero = Retry::builder().backoff(Duration::ZERO, Duration::from_secs(1)).build().unwrap();
        assert_eq!(zero.backoff_cap(40), Duration::ZERO);
    }
}
