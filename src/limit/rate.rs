//! [`RateLimiter`]: a rate and a burst (the generic cell rate algorithm),
//! where a caller waits for a permit only as long as its own deadline and
//! the limiter's `max_wait` allow, and is refused at once otherwise.
//!
//! # The algorithm
//!
//! One number is the whole state: the *theoretical arrival time* (`tat`) of
//! the next call at the configured rate. A permit at time `t` is free now
//! when `tat - t <= tolerance` (the burst: `tolerance = (burst - 1) x
//! interval`); a permit taken moves `tat` to `max(tat, t) + interval`. A
//! caller that would have to wait `wait = tat - tolerance - t` takes the
//! permit *and* the wait only when the wait fits both its deadline and
//! `max_wait`; otherwise it takes nothing and is told when a permit would be
//! free (its `retry_after`). So nobody waits for a permit it cannot
//! use in time (Resilience4j parks such a caller for its whole timeout), and
//! the limiter needs no refresher thread: a reconfiguration only changes
//! `interval` and `tolerance`, under the same lock, and a lower rate never
//! blocks anyone (it lengthens the waits it quotes).
//!
//! The lock is held for a few arithmetic operations; the wait itself is a
//! sleep outside it. Time comes from the injected [`Clock`], so a test walks
//! the limiter with a [`ManualClock`](crate::ManualClock).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::clock::{Clock, SystemClock};
use crate::error::ConfigError;

/// A rate limit's settings: `per_second` permits a second, `burst` of them
/// at once, and the longest a caller may wait for one. In a file (feature
/// `serde`): `rate_limit = { per_second = 1000.0, burst = 50, max_wait = "20ms" }`.
///
/// ```
/// use std::time::Duration;
/// use watertight::limit::RateLimit;
///
/// let limit = RateLimit::per_second(1000.0).burst(50).max_wait(Duration::from_millis(20));
/// assert_eq!(limit.interval(), Duration::from_millis(1));
/// assert!(limit.validate().is_ok());
/// assert_eq!(RateLimit::per_second(0.0).validate().unwrap_err().field(), "rate_limit.per_second");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct RateLimit {
    per_second: f64,
    #[cfg_attr(feature = "serde", serde(default = "one"))]
    burst: u32,
    #[cfg_attr(feature = "serde", serde(default, with = "crate::duration"))]
    max_wait: Duration,
}

#[cfg(feature = "serde")]
fn one() -> u32 {
    1
}

impl RateLimit {
    /// `per_second` permits a second, with a burst of 1 and no waiting.
    pub fn per_second(per_second: f64) -> Self {
        RateLimit { per_second, burst: 1, max_wait: Duration::ZERO }
    }

    /// How many permits may be taken at once after a quiet spell. Defaults to 1.
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst;
        self
    }

    /// The longest a caller waits for a permit (its own deadline may cut it
    /// shorter). Defaults to zero: refused at once when none is free.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// The rate, in permits a second.
    pub fn rate(&self) -> f64 {
        self.per_second
    }

    /// The burst.
    pub fn burst_size(&self) -> u32 {
        self.burst
    }

    /// The longest wait.
    pub fn max_wait_duration(&self) -> Duration {
        self.max_wait
    }

    /// The time between two permits at the rate.
    pub fn interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.per_second)
    }

    /// Checks every value; the error names the first one that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // `x > 0` is false for NaN: NaN is refused too.
        let ok = self.per_second > 0.0 && self.per_second <= 1e9;
        ConfigError::check(ok, "rate_limit.per_second", "in (0, 1e9] permits a second", self.per_second)?;
        ConfigError::check(self.burst > 0, "rate_limit.burst", "at least 1", self.burst)?;
        let (ok, wait) = (self.max_wait <= Duration::from_secs(60), format_args!("{:?}", self.max_wait));
        ConfigError::check(ok, "rate_limit.max_wait", "at most one minute", wait)
    }

    fn tolerance_ns(&self, interval_ns: u64) -> u64 {
        interval_ns.saturating_mul(u64::from(self.burst) - 1)
    }
}

struct State {
    config: RateLimit,
    interval_ns: u64,
    tolerance_ns: u64,
    /// The theoretical arrival time, in nanoseconds after `base`.
    tat_ns: u64,
}

/// A rate limiter (see the module docs). Cheap to clone: clones share one
/// limiter.
///
/// ```
/// use std::time::{Duration, Instant};
/// use watertight::limit::{RateLimit, RateLimiter};
///
/// let limiter = RateLimiter::new(RateLimit::per_second(10.0).burst(2)).unwrap();
/// let deadline = Instant::now() + Duration::from_secs(1);
/// assert!(limiter.acquire(deadline).is_ok());
/// assert!(limiter.acquire(deadline).is_ok());
/// // The burst is spent and waiting is not allowed: refused at once, told when to come back.
/// let retry_after = limiter.acquire(deadline).unwrap_err();
/// assert!(retry_after <= Duration::from_millis(100));
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    base: Instant,
    state: Mutex<State>,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl RateLimiter {
    /// A limiter on the system clock.
    pub fn new(config: RateLimit) -> Result<RateLimiter, ConfigError> {
        Self::with_clock(config, Arc::new(SystemClock))
    }

    /// A limiter reading time from `clock`.
    pub fn with_clock(config: RateLimit, clock: Arc<dyn Clock>) -> Result<RateLimiter, ConfigError> {
        config.validate()?;
        let base = clock.now();
        let interval_ns = ns(config.interval()).max(1);
        let state = State { config, interval_ns, tolerance_ns: config.tolerance_ns(interval_ns), tat_ns: 0 };
        Ok(RateLimiter { inner: Arc::new(Inner { clock, base, state: Mutex::new(state) }) })
    }

    /// Takes a permit now, or after a wait that ends by `deadline` and is at
    /// most the limit's `max_wait`; the wait is slept here, on the caller's
    /// thread. Refused at once, taking nothing, when the wait would be
    /// longer (or `deadline` has passed), with how long after the refusal a
    /// permit would be free (the `retry_after` of the call's
    /// [`Rejection::RateLimited`](crate::Rejection::RateLimited)).
    pub fn acquire(&self, deadline: Instant) -> Result<(), Duration> {
        let wait = self.reserve(deadline.saturating_duration_since(Instant::now()))?;
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        Ok(())
    }

    /// The decision of [`acquire`](Self::acquire) without the sleep, for a
    /// caller that may wait at most `within` (what is left of its deadline):
    /// the permit is taken, to be used after the returned wait (zero: now).
    /// The limiter's own clock measures the rate; `within` is a plain
    /// duration, so it means the same on any clock. Refused as `acquire` is,
    /// with the wait a permit is away.
    pub fn reserve(&self, within: Duration) -> Result<Duration, Duration> {
        let inner = &*self.inner;
        let now_ns = ns(inner.clock.now().saturating_duration_since(inner.base));
        let mut st = inner.state.lock();
        let tat = st.tat_ns.max(now_ns);
        let free_at = tat.saturating_sub(st.tolerance_ns);
        let wait = Duration::from_nanos(free_at.saturating_sub(now_ns));
        if wait > st.config.max_wait.min(within) {
            return Err(wait);
        }
        st.tat_ns = tat.saturating_add(st.interval_ns);
        Ok(wait)
    }

    /// Gives back one permit taken at once by [`reserve`](Self::reserve)
    /// for a call that was then not made (a hedge with no worker to run it).
    pub(crate) fn give_back(&self) {
        let mut st = self.inner.state.lock();
        st.tat_ns = st.tat_ns.saturating_sub(st.interval_ns);
    }

    /// The settings in force.
    pub fn config(&self) -> RateLimit {
        self.inner.state.lock().config
    }

    /// Changes the settings while callers run: the permits already promised
    /// stand, the next ones follow the new rate. No thread is involved and
    /// nobody is blocked by it.
    pub fn reconfigure(&self, config: RateLimit) -> Result<(), ConfigError> {
        config.validate()?;
        let mut st = self.inner.state.lock();
        st.interval_ns = ns(config.interval()).max(1);
        st.tolerance_ns = config.tolerance_ns(st.interval_ns);
        st.config = config;
        Ok(())
    }
}

impl fmt::Debug for RateLimiter {
    /// Never blocks: prints `<locked>` while the state is locked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.inner.state.try_lock() {
            Some(st) => f.debug_struct("RateLimiter").field("config", &st.config).finish(),
            None => f.write_str("RateLimiter(<locked>)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const MS: Duration = Duration::from_millis(1);
    const FAR: Duration = Duration::from_secs(10);

    fn limiter(config: RateLimit) -> (RateLimiter, ManualClock) {
        let clock = ManualClock::new();
        (RateLimiter::with_clock(config, Arc::new(clock.clone())).unwrap(), clock)
    }

    #[test]
    fn a_burst_then_one_permit_per_interval() {
        let (l, clock) = limiter(RateLimit::per_second(100.0).burst(3));
        for _ in 0..3 {
            assert_eq!(l.reserve(FAR), Ok(Duration::ZERO));
        }
        assert_eq!(l.reserve(FAR), Err(10 * MS));
        clock.advance(10 * MS);
        assert_eq!(l.reserve(FAR), Ok(Duration::ZERO));
        assert!(l.reserve(FAR).is_err());
        // A quiet second refills the burst, and no more.
        clock.advance(Duration::from_secs(1));
        for _ in 0..3 {
            assert_eq!(l.reserve(FAR), Ok(Duration::ZERO));
        }
        assert!(l.reserve(FAR).is_err());
    }

    #[test]
    fn a_caller_waits_only_as_long_as_its_deadline_and_max_wait_allow() {
        let (l, _clock) = limiter(RateLimit::per_second(100.0).max_wait(25 * MS));
        assert_eq!(l.reserve(FAR), Ok(Duration::ZERO));
        // The next permit is 10 ms away: taken with a 10 ms wait.
        assert_eq!(l.reserve(FAR), Ok(10 * MS));
        // 20 ms away: within max_wait, but not within 15 ms of deadline: refused, nothing taken.
        assert_eq!(l.reserve(15 * MS), Err(20 * MS));
        assert_eq!(l.reserve(FAR), Ok(20 * MS));
        // 30 ms away: past max_wait whatever the deadline.
        assert_eq!(l.reserve(FAR), Err(30 * MS));
        // A deadline already past never waits.
        assert_eq!(l.reserve(Duration::ZERO), Err(30 * MS));
    }

    #[test]
    fn a_refusal_takes_nothing() {
        let (l, clock) = limiter(RateLimit::per_second(10.0));
        assert!(l.reserve(MS).is_ok());
        for _ in 0..1000 {
            assert!(l.reserve(MS).is_err());
        }
        clock.advance(100 * MS);
        assert_eq!(l.reserve(MS), Ok(Duration::ZERO), "refusals did not push the next permit back");
    }

    #[test]
    fn reconfiguring_changes_the_rate_without_blocking_or_forgetting() {
        let (l, clock) = limiter(RateLimit::per_second(1000.0));
        assert!(l.reserve(FAR).is_ok());
        l.reconfigure(RateLimit::per_second(10.0)).unwrap();
        // The permit promised at the old rate stands (1 ms); the next follow 100 ms.
        assert_eq!(l.reserve(FAR), Err(MS));
        clock.advance(MS);
        assert!(l.reserve(FAR).is_ok());
        assert_eq!(l.reserve(FAR), Err(100 * MS));
        l.reconfigure(RateLimit::per_second(1000.0)).unwrap();
        assert_eq!(l.reserve(FAR), Err(100 * MS), "promised at 10/s");
        clock.advance(100 * MS);
        assert!(l.reserve(FAR).is_ok());
        assert_eq!(l.reserve(FAR), Err(MS));
        assert_eq!(
            l.reconfigure(RateLimit::per_second(f64::NAN)).unwrap_err().field(),
            "rate_limit.per_second"
        );
        assert_eq!(l.config().rate(), 1000.0, "a refused change changes nothing");
    }

    #[test]
    fn permits_over_a_long_run_match_the_rate_plus_the_burst() {
        let (l, clock) = limiter(RateLimit::per_second(1000.0).burst(20));
        let mut admitted = 0u64;
        // 16 callers taking turns, 10 s of manual time in 100 us steps.
        for _ in 0..100_000 {
            for _ in 0..16 {
                if l.reserve(MS).is_ok_and(|w| w.is_zero()) {
                    admitted += 1;
                }
            }
            clock.advance(Duration::from_micros(100));
        }
        assert!((10_000..=10_020).contains(&admitted), "{admitted}");
    }
}
