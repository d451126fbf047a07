//! [`BreakerConfig`]: the knobs of a breaker, their defaults (Resilience4j's,
//! so a configuration copied from a Java service behaves the same) and their
//! validation.

use std::time::Duration;

use super::State;
use crate::error::ConfigError;

/// The environment variable that can switch every breaker off at start-up:
/// `WATERTIGHT_BREAKER_ENABLED=false` builds breakers in [`State::Disabled`].
pub(crate) const ENABLED_ENV: &str = "WATERTIGHT_BREAKER_ENABLED";

/// The largest count-based window: one byte per call, so at most 1 MiB.
const MAX_COUNT_WINDOW: u32 = 1_000_000;
/// The largest time-based window, one day of one-second buckets.
const MAX_TIME_WINDOW_SECS: u32 = 86_400;

/// Which sliding window a breaker computes its rates over, and its size
/// ([`BreakerConfig::count_based`], [`BreakerConfig::time_based`]).
///
/// In a file: `window = { count = 20 }` or `window = { time = 30 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum WindowKind {
    /// The last `n` recorded (non-ignored) calls; in [1, 1000000].
    Count(u32),
    /// The calls recorded in the last `n` seconds, in one-second buckets; in
    /// [1, 86400].
    Time(u32),
}

/// How the open period grows with each consecutive opening
/// ([`BreakerConfig::open_backoff`]). In a file both fields are required:
/// `open_backoff = { multiplier = 2.0, max = "5m" }`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct OpenBackoff {
    /// Each consecutive opening lasts this many times the previous one;
    /// finite and at least 1.
    pub multiplier: f64,
    /// The longest an opening lasts; at least `open_for`.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    pub max: Duration,
}

/// The configuration of a [`Breaker`](crate::breaker::Breaker); `Default` is
/// Resilience4j's (each setter names its default). Every rate is a
/// percentage (50.0 = 50 %).
///
/// # A small service
///
/// At tens of calls a second a window of 100 calls takes seconds to fill,
/// and the breaker decides nothing until it has. Decide on the last 20 calls
/// (at least 10), open for 10-15 s, and probe with a few calls:
///
/// ```
/// use std::time::Duration;
/// use watertight::breaker::BreakerConfig;
///
/// let small = BreakerConfig::count_based(20)
///     .minimum_calls(10)
///     .failure_rate(50.0)
///     .slow_call_rate(80.0)
///     .slow_call_duration(Duration::from_secs(1))
///     .open_for(Duration::from_secs(10))
///     .half_open_calls(3);
/// assert!(small.validate().is_ok());
/// ```
///
/// ```
/// use std::time::Duration;
/// use watertight::breaker::BreakerConfig;
///
/// let config = BreakerConfig::time_based(30)
///     .minimum_calls(10)
///     .failure_rate(50.0)
///     .open_for(Duration::from_secs(15))
///     .half_open_calls(3)
///     .max_wait_in_half_open(Duration::from_secs(60));
/// assert!(config.validate().is_ok());
///
/// let err = BreakerConfig::default().failure_rate(101.0).validate().unwrap_err();
/// assert_eq!(err.to_string(), "failure_rate must be in (0, 100], got 101");
/// ```
///
/// # Reading it back, and files
///
/// Every setting is a public field named like its setter. With the `serde`
/// feature the same type is a file section (durations as strings, rates as
/// percentages), checked by [`validate`](Self::validate):
///
/// ```toml
/// window = { count = 20 }
/// open_for = "15s"
/// open_backoff = { multiplier = 2.0, max = "5m" }
/// after_max_wait = "closed"
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
pub struct BreakerConfig {
    /// [`count_based`](Self::count_based) or [`time_based`](Self::time_based).
    pub window: WindowKind,
    /// [`minimum_calls`](Self::minimum_calls).
    pub minimum_calls: u32,
    /// [`failure_rate`](Self::failure_rate), in percent.
    pub failure_rate: f64,
    /// [`slow_call_rate`](Self::slow_call_rate), in percent.
    pub slow_call_rate: f64,
    /// [`slow_call_duration`](Self::slow_call_duration).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    pub slow_call_duration: Duration,
    /// [`open_for`](Self::open_for).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    pub open_for: Duration,
    /// [`open_backoff`](Self::open_backoff); `None`: no growth.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub open_backoff: Option<OpenBackoff>,
    /// [`half_open_calls`](Self::half_open_calls).
    pub half_open_calls: u32,
    /// [`max_wait_in_half_open`](Self::max_wait_in_half_open); zero waits forever.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    pub max_wait_in_half_open: Duration,
    /// [`after_max_wait`](Self::after_max_wait): `open` or `closed`.
    pub after_max_wait: State,
    /// [`enabled`](Self::enabled).
    pub enabled: bool,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window: WindowKind::Count(100),
            minimum_calls: 100,
            failure_rate: 50.0,
            slow_call_rate: 100.0,
            slow_call_duration: Duration::from_secs(60),
            open_for: Duration::from_secs(60),
            open_backoff: None,
            half_open_calls: 10,
            max_wait_in_half_open: Duration::ZERO,
            after_max_wait: State::Open,
            enabled: true,
        }
    }
}

impl BreakerConfig {
    /// The defaults, with a count-based window over the last `calls` recorded
    /// calls (in [1, 1000000]). Ignored calls never enter the window.
    /// [`BreakerConfig::default`]'s window is `count_based(100)`.
    ///
    /// As in Resilience4j, a count-based window never waits for more calls
    /// than it can hold: the effective minimum is
    /// `min(minimum_calls, calls)`.
    pub fn count_based(calls: u32) -> Self {
        BreakerConfig { window: WindowKind::Count(calls), ..Self::default() }
    }

    /// The defaults, with a time-based window over the calls recorded in the
    /// last `seconds` seconds, kept in one-second buckets (the current,
    /// partial second included); in [1, 86400].
    pub fn time_based(seconds: u32) -> Self {
        BreakerConfig { window: WindowKind::Time(seconds), ..Self::default() }
    }

    /// How many calls the window must hold before its rates count (and can
    /// open the breaker); at least 1. Defaults to 100.
    pub fn minimum_calls(mut self, calls: u32) -> Self {
        self.minimum_calls = calls;
        self
    }

    /// The failure rate, in percent, at or above which the breaker opens;
    /// in (0, 100]. Defaults to 50.
    pub fn failure_rate(mut self, percent: f64) -> Self {
        self.failure_rate = percent;
        self
    }

    /// The slow-call rate, in percent, at or above which the breaker opens;
    /// in (0, 100]. Defaults to 100.
    pub fn slow_call_rate(mut self, percent: f64) -> Self {
        self.slow_call_rate = percent;
        self
    }

    /// A call that took longer than this is slow, whether it succeeded or
    /// failed; greater than zero. Defaults to 60 s.
    pub fn slow_call_duration(mut self, duration: Duration) -> Self {
        self.slow_call_duration = duration;
        self
    }

    /// How long the breaker stays open before it lets probes through;
    /// greater than zero. Defaults to 60 s.
    pub fn open_for(mut self, duration: Duration) -> Self {
        self.open_for = duration;
        self
    }

    /// Makes the open period grow with each consecutive opening (a failed
    /// half-open round opens it again): the `n`-th consecutive opening lasts
    /// `open_for * multiplier^n`, capped at `max`. The count starts over once
    /// the breaker closes. `multiplier` must be finite and at least 1, and
    /// `max` at least `open_for`. Defaults to no growth.
    pub fn open_backoff(mut self, multiplier: f64, max: Duration) -> Self {
        self.open_backoff = Some(OpenBackoff { multiplier, max });
        self
    }

    /// How many probe calls half-open admits; once all of them have reported,
    /// their rates decide between open and closed; at least 1. Defaults to 10.
    pub fn half_open_calls(mut self, calls: u32) -> Self {
        self.half_open_calls = calls;
        self
    }

    /// The longest the breaker waits in half-open for its probes to report
    /// before it moves to [`after_max_wait`](Self::after_max_wait) (lazily,
    /// see the module docs of [`breaker`](crate::breaker)); zero means wait
    /// forever. Defaults to zero.
    pub fn max_wait_in_half_open(mut self, duration: Duration) -> Self {
        self.max_wait_in_half_open = duration;
        self
    }

    /// The state forced when half-open waited
    /// [`max_wait_in_half_open`](Self::max_wait_in_half_open) in vain.
    /// [`State::Open`] or [`State::Closed`]. Defaults to [`State::Open`].
    pub fn after_max_wait(mut self, state: State) -> Self {
        self.after_max_wait = state;
        self
    }

    /// `false` builds the breaker in [`State::Disabled`]: every call is
    /// permitted and nothing is recorded. `WATERTIGHT_BREAKER_ENABLED=false`
    /// (or `0`, `no`, `off`) at build time does the same; it never switches
    /// one back on. Defaults to `true`.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// The window as `(time-based, size)`: seconds for a time window, calls
    /// for a count window. For reading a configuration back.
    pub(crate) fn window_shape(&self) -> (bool, u32) {
        match self.window {
            WindowKind::Count(n) => (false, n),
            WindowKind::Time(s) => (true, s),
        }
    }

    /// Checks every value against its rule; the first one broken is named in
    /// the error.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.window {
            WindowKind::Count(n) => {
                ConfigError::check((1..=MAX_COUNT_WINDOW).contains(&n), "count_based", "in [1, 1000000]", n)?
            }
            WindowKind::Time(n) => {
                let ok = (1..=MAX_TIME_WINDOW_SECS).contains(&n);
                ConfigError::check(ok, "time_based", "in [1, 86400] seconds", n)?
            }
        }
        ConfigError::check(self.minimum_calls >= 1, "minimum_calls", "at least 1", self.minimum_calls)?;
        check_rate("failure_rate", self.failure_rate)?;
        check_rate("slow_call_rate", self.slow_call_rate)?;
        check_positive("slow_call_duration", self.slow_call_duration)?;
        check_positive("open_for", self.open_for)?;
        if let Some(b) = self.open_backoff {
            // `x >= 1.0` is false for NaN: NaN is refused as well.
            let ok = b.multiplier >= 1.0 && b.multiplier.is_finite();
            ConfigError::check(ok, "open_backoff", "a finite multiplier >= 1", b.multiplier)?;
            let max = format_args!("{:?}", b.max);
            ConfigError::check(b.max >= self.open_for, "open_backoff", "a max at least open_for", max)?;
        }
        ConfigError::check(self.half_open_calls >= 1, "half_open_calls", "at least 1", self.half_open_calls)?;
        let ok = matches!(self.after_max_wait, State::Open | State::Closed);
        ConfigError::check(ok, "after_max_wait", "open or closed", self.after_max_wait.as_str())
    }

    /// The number of calls the window must hold before its rates count.
    pub(crate) fn effective_minimum_calls(&self) -> u32 {
        match self.window {
            WindowKind::Count(n) => self.minimum_calls.min(n),
            WindowKind::Time(_) => self.minimum_calls,
        }
    }

    /// How long the `opens`-th consecutive opening (0-based) lasts.
    pub(crate) fn open_duration(&self, opens: u32) -> Duration {
        let Some(b) = self.open_backoff else { return self.open_for };
        if opens == 0 || b.multiplier == 1.0 {
            return self.open_for;
        }
        let exp = i32::try_from(opens).unwrap_or(i32::MAX);
        // `powi` may overflow to infinity; `min` then picks the cap, which is finite.
        let secs = (self.open_for.as_secs_f64() * b.multiplier.powi(exp)).min(b.max.as_secs_f64());
        Duration::try_from_secs_f64(secs).unwrap_or(b.max).clamp(self.open_for, b.max)
    }
}

fn check_rate(field: &'static str, percent: f64) -> Result<(), ConfigError> {
    // NaN fails both comparisons and is refused.
    ConfigError::check(percent > 0.0 && percent <= 100.0, field, "in (0, 100]", percent)
}

fn check_positive(field: &'static str, d: Duration) -> Result<(), ConfigError> {
    ConfigError::check(!d.is_zero(), field, "greater than zero", format_args!("{d:?}"))
}

/// Parses the value of `WATERTIGHT_BREAKER_ENABLED`: `Some(false)` for
/// `false`/`0`/`no`/`off`, `Some(true)` for `true`/`1`/`yes`/`on` (any case,
/// surrounding blanks ignored), `None` for anything else.
///
/// Pure, so that it can be tested without touching the process environment.
pub(crate) fn parse_enabled(value: &str) -> Option<bool> {
    let v = value.trim();
    const OFF: [&str; 4] = ["false", "0", "no", "off"];
    const ON: [&str; 4] = ["true", "1", "yes", "on"];
    if OFF.iter().any(|w| v.eq_ignore_ascii_case(w)) {
        Some(false)
    } else if ON.iter().any(|w| v.eq_ignore_ascii_case(w)) {
        Some(true)
    } else {
        None
    }
}

/// Whether a breaker built now starts enabled, given its configuration and
/// the raw value of the environment variable (if set). The variable can only
/// switch a breaker off; an unreadable value is logged and ignored.
pub(crate) fn starts_enabled(config_enabled: bool, env_value: Option<&str>) -> bool {
    let env = match env_value {
        None => None,
        Some(raw) => {
            let parsed = parse_enabled(raw);
            if parsed.is_none() {
                log::warn!("{ENABLED_ENV}={raw:?} is neither true nor false; ignored");
            }
            parsed
        }
    };
    config_enabled && env != Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_resilience4j() {
        let c = BreakerConfig::default();
        assert_eq!(c.window, WindowKind::Count(100));
        assert_eq!(c.minimum_calls, 100);
        assert_eq!(c.failure_rate, 50.0);
        assert_eq!(c.slow_call_rate, 100.0);
        assert_eq!(c.slow_call_duration, Duration::from_secs(60));
        assert_eq!(c.open_for, Duration::from_secs(60));
        assert_eq!(c.half_open_calls, 10);
        assert_eq!(c.max_wait_in_half_open, Duration::ZERO);
        assert_eq!(c.after_max_wait, State::Open);
        assert!(c.enabled && c.open_backoff.is_none());
        assert!(c.validate().is_ok());
    }

    #[test]
    fn every_rule_names_field_rule_and_value() {
        let d = BreakerConfig::default;
        let cases: Vec<(BreakerConfig, &str)> = vec![
            (d().failure_rate(101.0), "failure_rate must be in (0, 100], got 101"),
            (d().failure_rate(0.0), "failure_rate must be in (0, 100], got 0"),
            (d().failure_rate(f64::NAN), "failure_rate must be in (0, 100], got NaN"),
            (d().slow_call_rate(-1.0), "slow_call_rate must be in (0, 100], got -1"),
            (d().slow_call_rate(f64::NAN), "slow_call_rate must be in (0, 100], got NaN"),
            (BreakerConfig::count_based(0), "count_based must be in [1, 1000000], got 0"),
            (BreakerConfig::time_based(0), "time_based must be in [1, 86400] seconds, got 0"),
            (d().minimum_calls(0), "minimum_calls must be at least 1, got 0"),
            (d().half_open_calls(0), "half_open_calls must be at least 1, got 0"),
            (d().slow_call_duration(Duration::ZERO), "slow_call_duration must be greater than zero, got 0ns"),
            (d().open_for(Duration::ZERO), "open_for must be greater than zero, got 0ns"),
            (
                d().open_backoff(0.5, Duration::from_secs(600)),
                "open_backoff must be a finite multiplier >= 1, got 0.5",
            ),
            (
                d().open_backoff(f64::NAN, Duration::from_secs(600)),
                "open_backoff must be a finite multiplier >= 1, got NaN",
            ),
            (
                d().open_backoff(f64::INFINITY, Duration::from_secs(600)),
                "open_backoff must be a finite multiplier >= 1, got inf",
            ),
            (
                d().open_backoff(2.0, Duration::from_secs(1)),
                "open_backoff must be a max at least open_for, got 1s",
            ),
            (d().after_max_wait(State::HalfOpen), "after_max_wait must be open or closed, got half_open"),
        ];
        for (config, message) in cases {
            assert_eq!(config.validate().unwrap_err().to_string(), message);
        }
        assert!(d().failure_rate(100.0).slow_call_rate(0.001).validate().is_ok());
        assert!(d().max_wait_in_half_open(Duration::ZERO).after_max_wait(State::Closed).validate().is_ok());
    }

    #[test]
    fn count_window_caps_minimum_calls() {
        assert_eq!(BreakerConfig::count_based(20).effective_minimum_calls(), 20);
        assert_eq!(BreakerConfig::count_based(20).minimum_calls(5).effective_minimum_calls(), 5);
        assert_eq!(BreakerConfig::time_based(10).effective_minimum_calls(), 100);
    }

    #[test]
    fn open_duration_grows_and_caps() {
        let c = BreakerConfig::default()
            .open_for(Duration::from_secs(10))
            .open_backoff(2.0, Duration::from_secs(60));
        let got: Vec<u64> = (0..6).map(|n| c.open_duration(n).as_secs()).collect();
        assert_eq!(got, [10, 20, 40, 60, 60, 60]);
        assert_eq!(c.open_duration(u32::MAX), Duration::from_secs(60));
        assert_eq!(BreakerConfig::default().open_duration(7), Duration::from_secs(60));
    }

    #[test]
    fn env_value_parsing() {
        for off in ["false", "FALSE", " 0 ", "no", "Off"] {
            assert_eq!(parse_enabled(off), Some(false), "{off:?}");
        }
        for on in ["true", "1", "YES", "on\n"] {
            assert_eq!(parse_enabled(on), Some(true), "{on:?}");
        }
        for other in ["", "disabled", "flase", "2"] {
            assert_eq!(parse_enabled(other), None, "{other:?}");
        }
    }

    #[test]
    fn env_can_only_switch_off() {
        assert!(starts_enabled(true, None));
        assert!(!starts_enabled(true, Some("false")));
        assert!(starts_enabled(true, Some("true")));
        assert!(starts_enabled(true, Some("garbage")));
        assert!(!starts_enabled(false, Some("true")));
        assert!(!starts_enabled(false, None));
    }
}
