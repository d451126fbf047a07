//! Retries outside the breaker: [`Retry`] (attempts, backoff with full, equal
//! or no jitter, overall timeout), the retry budget that keeps retries from multiplying an
//! outage, and the small PRNG behind the jitter.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::ConfigError;

/// One-second buckets in the budget window.
const BUCKETS: usize = 10;

/// How a dependency retries transient failures, used by
/// [`CallBuilder::retry`](crate::CallBuilder::retry). Built by
/// [`Retry::builder`], whose setters set its fields; read back with getters
/// named like the setters.
///
/// The rules: a retry sits *outside* the breaker, so
/// every attempt asks the breaker for its own permit and is counted by it; only
/// transient outcomes are retried (transport errors, timeouts, 5xx:
/// whatever the classifier calls a [`Failure`](crate::Verdict::Failure));
/// a rejection ([`NotPermitted`](crate::Rejection::NotPermitted),
/// [`QueueFull`](crate::Rejection::QueueFull), ...), an ignored outcome
/// (a 4xx) and a panic (a bug in the job) are never retried.
///
/// # The budget
///
/// Backoff alone does not stop a fleet of callers from tripling the load on a
/// provider that is already failing: each caller backs off, but each still
/// sends up to `max_attempts` requests. The budget (after Finagle's
/// `RetryBudget` and Envoy's retry budgets) caps retries as a share of calls:
/// over any [`BUDGET_WINDOW`](Retry::BUDGET_WINDOW) (10 s), the retries a
/// dependency makes are at most `percent` % of the calls plus
/// `min_per_sec x 10`, where *calls* are the retried calls (`with().retry()`)
/// (first attempts), counted on the dependency's clock in one-second buckets.
/// The floor lets a caller with little traffic still retry now and then. When
/// the budget is spent, the last outcome is returned as it is.
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
/// With the `serde` feature a `Retry` is also a file section (every field
/// may be left out and takes its default, an unknown one is refused;
/// durations are strings, the budget a percentage), checked by
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

/// How much of each backoff is drawn at random ([`RetryBuilder::jitter`]).
///
/// Retries of callers that failed together should not arrive together; the
/// cap before retry `n` is `initial x multiplier^(n - 1)`, at most `max`.
/// In a file: `jitter = "full"`, `"equal"` or `"none"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Jitter {
    /// The sleep is drawn uniformly from zero to the cap: the widest spread,
    /// and on average half the cap.
    #[default]
    Full,
    /// Half the cap, plus a draw from zero to the other half: never less than
    /// half the cap, so a retry always waits, and still spread.
    Equal,
    /// The sleep is the cap itself: `200ms` doubling sleeps exactly 200 ms,
    /// 400 ms, 800 ms...
    None,
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
    /// until [`Config`](crate::config::Config) runs it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_attempts == 0 {
            return Err(ConfigError::new("retry.max_attempts", "at least 1", self.max_attempts));
        }
        if self.initial_backoff > self.max_backoff {
            return Err(ConfigError::new(
                "retry.backoff",
                "initial <= max",
                format_args!("initial {:?} > max {:?}", self.initial_backoff, self.max_backoff),
            ));
        }
        if !(self.backoff_multiplier.is_finite() && self.backoff_multiplier >= 1.0) {
            return Err(ConfigError::new(
                "retry.backoff_multiplier",
                "finite and >= 1",
                self.backoff_multiplier,
            ));
        }
        if !(self.budget_percent.is_finite() && (0.0..=100.0).contains(&self.budget_percent)) {
            return Err(ConfigError::new("retry.budget", "a percentage in [0, 100]", self.budget_percent));
        }
        if self.overall_timeout == Some(Duration::ZERO) {
            return Err(ConfigError::new("retry.overall_timeout", "greater than zero", "0ns"));
        }
        Ok(())
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
        let cap = self.backoff_cap(retry);
        match self.jitter {
            Jitter::Full => source.upto(cap),
            Jitter::Equal => {
                let half = cap / 2;
                half + source.upto(cap - half)
            }
            Jitter::None => cap,
        }
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
    /// (`max`). The actual sleep is jittered as [`jitter`](Self::jitter)
    /// says, so callers that failed together do not retry together.
    /// `initial` must not exceed `max`; a zero `initial` retries at once.
    /// Defaults to 50 ms and 1 s.
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

    /// How much of each backoff is drawn at random: [`Jitter::Full`] (from
    /// zero to the cap), [`Jitter::Equal`] (half the cap plus a draw up to
    /// the other half) or [`Jitter::None`] (the cap itself). Defaults to
    /// [`Jitter::Full`].
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.retry.jitter = jitter;
        self
    }

    /// The retry budget: retries may be at most `percent` % of the calls
    /// made, plus `min_per_sec` retries a second, over a 10-second window
    /// (see [the budget](Retry#the-budget)).
    /// `percent` is a percentage like every rate in this crate: 20.0 means
    /// 20 %, and it must be within `[0, 100]`. `budget(0.0, 0)` forbids
    /// retries outright. Defaults to 20.0 (%) and 10.
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

    /// Checks every field ([`Retry::validate`]); the error names the first
    /// bad one, as its setter spells it (`retry.max_attempts`,
    /// `retry.backoff`, ...).
    pub fn build(self) -> Result<Retry, ConfigError> {
        self.retry.validate()?;
        Ok(self.retry)
    }
}

/// A time-bucketed count of calls and retries, the retry budget of one
/// dependency (see [`Retry`]).
///
/// Buckets are one second of the injected clock wide, in a ring of
/// [`BUCKETS`]; a bucket whose second has passed out of the window is reset
/// when its slot is reused, and ignored when summed.
///
/// A mutex guards the ring rather than atomics because a withdrawal is a
/// check-then-act over the whole window: with atomics, many threads could pass
/// the check together and overdraw the budget exactly when a provider fails
/// for everyone at once. The critical section is a few additions over ten
/// buckets and is taken only on the retry path.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    base: Instant,
    ring: Mutex<Ring>,
}

#[derive(Debug)]
struct Ring {
    /// The budget's percentage as a fraction of calls.
    ratio: f64,
    /// Retries the floor allows per window: `min_per_sec x window seconds`.
    floor: u64,
    buckets: [Bucket; BUCKETS],
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// The second (since `base`) this bucket counts; stale when it is not
    /// within the last `BUCKETS` seconds.
    second: u64,
    calls: u64,
    retries: u64,
}

impl RetryBudget {
    pub(crate) fn new(retry: &Retry, now: Instant) -> Self {
        let (ratio, floor) = Self::terms(retry);
        RetryBudget {
            base: now,
            ring: Mutex::new(Ring { ratio, floor, buckets: [Bucket::default(); BUCKETS] }),
        }
    }

    fn terms(retry: &Retry) -> (f64, u64) {
        let (percent, min_per_sec) = retry.budget();
        (percent / 100.0, u64::from(min_per_sec) * BUCKETS as u64)
    }

    /// The budget of a new `Retry`, keeping the calls and retries counted so far.
    pub(crate) fn retune(&self, retry: &Retry) {
        let (ratio, floor) = Self::terms(retry);
        let mut ring = self.ring.lock();
        ring.ratio = ratio;
        ring.floor = floor;
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.base).as_secs()
    }

    /// The bucket for `second`, reset first if it held an older second.
    fn bucket(ring: &mut [Bucket; BUCKETS], second: u64) -> &mut Bucket {
        let b = &mut ring[(second % BUCKETS as u64) as usize];
        if b.second != second {
            *b = Bucket { second, calls: 0, retries: 0 };
        }
        b
    }

    /// Counts one call (a first attempt).
    pub(crate) fn deposit(&self, now: Instant) {
        let second = self.second(now);
        let mut ring = self.ring.lock();
        Self::bucket(&mut ring.buckets, second).calls += 1;
    }

    /// Gives back a retry taken by [`try_withdraw`](Self::try_withdraw) at
    /// about `now` that was never made.
    pub(crate) fn refund(&self, now: Instant) {
        let second = self.second(now);
        let oldest = second.saturating_sub(BUCKETS as u64 - 1);
        let mut ring = self.ring.lock();
        // The newest bucket with a retry in it: the one the token came from.
        if let Some(b) = ring
            .buckets
            .iter_mut()
            .filter(|b| b.second >= oldest && b.second <= second && b.retries > 0)
            .max_by_key(|b| b.second)
        {
            b.retries -= 1;
        }
    }

    /// Takes one retry from the budget if it allows one, and says whether it did.
    pub(crate) fn try_withdraw(&self, now: Instant) -> bool {
        let second = self.second(now);
        let oldest = second.saturating_sub(BUCKETS as u64 - 1);
        let mut ring = self.ring.lock();
        let (mut calls, mut retries) = (0u64, 0u64);
        for b in ring.buckets.iter().filter(|b| b.second >= oldest && b.second <= second) {
            calls += b.calls;
            retries += b.retries;
        }
        // Ratio arithmetic in f64: exact for any count a window can hold.
        let allowed = ring.ratio * calls as f64 + ring.floor as f64;
        if (retries + 1) as f64 > allowed {
            return false;
        }
        Self::bucket(&mut ring.buckets, second).retries += 1;
        true
    }
}

/// A small, lock-free pseudo-random source for backoff jitter (SplitMix64).
///
/// Jitter needs spread, not cryptographic quality, and the core carries no
/// `rand` dependency. Every draw advances one shared atomic by a fixed odd
/// step (so concurrent callers never draw the same state) and mixes it;
/// `Relaxed` is enough because the state publishes no other memory.
#[derive(Debug)]
pub(crate) struct JitterSource {
    state: AtomicU64,
}

impl JitterSource {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// Seeded from the standard library's per-process random hasher keys.
    pub(crate) fn new() -> Self {
        let seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
        Self::with_seed(seed)
    }

    pub(crate) fn with_seed(seed: u64) -> Self {
        JitterSource { state: AtomicU64::new(seed) }
    }

    pub(crate) fn next_u64(&self) -> u64 {
        let mut z = self.state.fetch_add(Self::GAMMA, Ordering::Relaxed).wrapping_add(Self::GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A duration drawn uniformly from `[0, cap]`.
    pub(crate) fn upto(&self, cap: Duration) -> Duration {
        let nanos = crate::time::saturating_nanos(cap);
        // Multiply-shift maps a 64-bit draw onto [0, nanos] without modulo bias worth
        // mentioning at these sizes.
        let scaled = (u128::from(self.next_u64()) * (u128::from(nanos) + 1)) >> 64;
        Duration::from_nanos(scaled as u64)
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

    #[test]
    fn jitter_stays_within_the_cap_and_spreads() {
        let j = JitterSource::with_seed(7);
        let cap = Duration::from_millis(100);
        let draws: Vec<Duration> = (0..1000).map(|_| j.upto(cap)).collect();
        assert!(draws.iter().all(|d| *d <= cap));
        let low = draws.iter().filter(|d| **d < cap / 2).count();
        assert!((350..650).contains(&low), "{low} of 1000 draws below half the cap");
        assert_eq!(j.upto(Duration::ZERO), Duration::ZERO);
    }

    fn exponential(jitter: Jitter) -> Retry {
        Retry::builder()
            .max_attempts(6)
            .backoff(Duration::from_millis(200), Duration::from_secs(2))
            .jitter(jitter)
            .build()
            .unwrap()
    }

    #[test]
    fn no_jitter_sleeps_the_cap_exactly() {
        let r = exponential(Jitter::None);
        let j = JitterSource::with_seed(7);
        let pauses: Vec<u64> = (1..=5).map(|n| r.pause(n, &j).as_millis() as u64).collect();
        assert_eq!(pauses, [200, 400, 800, 1600, 2000]);
    }

    #[test]
    fn full_jitter_draws_from_zero_to_the_cap() {
        let r = exponential(Jitter::Full);
        assert_eq!(Retry::new().jitter(), Jitter::Full, "the default");
        // The same seeded source gives the same draws as `upto` itself.
        let (a, b) = (JitterSource::with_seed(7), JitterSource::with_seed(7));
        for n in 1..=5 {
            assert_eq!(r.pause(n, &a), b.upto(r.backoff_cap(n)));
        }
        let j = JitterSource::with_seed(11);
        let cap = r.backoff_cap(1);
        let draws: Vec<Duration> = (0..1000).map(|_| r.pause(1, &j)).collect();
        assert!(draws.iter().all(|d| *d <= cap));
        let low = draws.iter().filter(|d| **d < cap / 2).count();
        assert!((350..650).contains(&low), "{low} of 1000 draws below half the cap");
    }

    #[test]
    fn equal_jitter_keeps_half_the_cap() {
        let r = exponential(Jitter::Equal);
        let j = JitterSource::with_seed(7);
        for n in 1..=5 {
            let cap = r.backoff_cap(n);
            let draws: Vec<Duration> = (0..400).map(|_| r.pause(n, &j)).collect();
            assert!(draws.iter().all(|d| *d >= cap / 2 && *d <= cap), "retry {n}: cap {cap:?}");
            let low = draws.iter().filter(|d| **d < cap * 3 / 4).count();
            assert!((120..280).contains(&low), "retry {n}: {low} of 400 below three quarters of the cap");
        }
        assert_eq!(exponential(Jitter::Equal).pause(0, &j), Duration::ZERO);
    }

    #[test]
    fn budget_allows_the_floor_then_the_ratio() {
        let clock = crate::ManualClock::new();
        use crate::Clock;
        let budget = RetryBudget::new(&Retry::builder().budget(20.0, 1).build().unwrap(), clock.now());
        // Floor: 1/s over a 10 s window = 10 retries with no calls at all.
        let granted = (0..50).filter(|_| budget.try_withdraw(clock.now())).count();
        assert_eq!(granted, 10);
        // 100 calls earn 20 more.
        for _ in 0..100 {
            budget.deposit(clock.now());
        }
        let granted = (0..50).filter(|_| budget.try_withdraw(clock.now())).count();
        assert_eq!(granted, 20);
    }

    #[test]
    fn budget_window_slides_with_the_clock() {
        let clock = crate::ManualClock::new();
        use crate::Clock;
        let budget = RetryBudget::new(&Retry::builder().budget(50.0, 0).build().unwrap(), clock.now());
        for _ in 0..10 {
            budget.deposit(clock.now());
        }
        assert_eq!((0..10).filter(|_| budget.try_withdraw(clock.now())).count(), 5);
        // Nine seconds on, the calls and retries are still in the window.
        clock.advance(Duration::from_secs(9));
        assert!(!budget.try_withdraw(clock.now()));
        // Ten seconds on, both have left it: nothing deposited, nothing allowed.
        clock.advance(Duration::from_secs(1));
        assert!(!budget.try_withdraw(clock.now()));
        budget.deposit(clock.now());
        budget.deposit(clock.now());
        assert!(budget.try_withdraw(clock.now()));
        assert!(!budget.try_withdraw(clock.now()));
    }

    #[test]
    fn budget_is_a_percentage_of_calls() {
        // 20.0 means 20 %: 100 calls earn 20 retries, not 2,000.
        let clock = crate::ManualClock::new();
        use crate::Clock;
        let budget = RetryBudget::new(&Retry::builder().budget(20.0, 0).build().unwrap(), clock.now());
        for _ in 0..100 {
            budget.deposit(clock.now());
        }
        let granted = (0..1000).filter(|_| budget.try_withdraw(clock.now())).count();
        assert_eq!(granted, 20);
    }

    #[test]
    fn zero_budget_forbids_retries() {
        let clock = crate::ManualClock::new();
        use crate::Clock;
        let budget = RetryBudget::new(&Retry::builder().budget(0.0, 0).build().unwrap(), clock.now());
        for _ in 0..100 {
            budget.deposit(clock.now());
        }
        assert!(!budget.try_withdraw(clock.now()));
    }
}
