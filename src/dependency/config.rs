//! A dependency's configuration: [`DependencyConfig`], every setting as one
//! plain value, and its validation; what a running dependency reads on its
//! call path ([`Live`]), with the hang and stuck thresholds read from it and
//! the provider's normal latency; and [`Dependency::reconfigure`], which
//! applies a new value while calls run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::Dependency;
use super::caller::Mode;
use super::hedge_policy::Hedge;
use crate::breaker::BreakerConfig;
use crate::error::ConfigError;
use crate::limit::{AdaptiveLimit, RateLimit, Throttle};
use crate::retry::Retry;
use crate::shadow::{LiveShadow, Shadow};
use crate::time::{MAX_TIMEOUT, saturating_nanos};

/// Every setting of a [`Dependency`](crate::Dependency), as one value: what a
/// [`DependencyBuilder`](crate::DependencyBuilder)'s setters set, one field
/// each (a field means what its setter says), what
/// [`Dependency::config`](crate::Dependency::config) reads and
/// [`Dependency::reconfigure`](crate::Dependency::reconfigure) applies.
///
/// With the `serde` feature it is also the file section of one dependency
/// (`[dependencies.fraud]` of a `watertight::config` file) and the JSON a
/// service can read and write live.
///
/// ```toml
/// workers = 6
/// queue = 2
/// max_wait = "100ms"
/// timeout = "3s"
///
/// [breaker]
/// window = { count = 20 }
/// minimum_calls = 8
/// open_for = "15s"
///
/// [retry]
/// jitter = "equal"
///
/// [adaptive_limit]
/// min_limit = 2
///
/// [throttle]
/// k = 2.0
/// window = "30s"
/// ```
///
/// ```
/// use std::time::Duration;
/// use watertight::Dependency;
///
/// let dep = Dependency::builder("pricing").workers(4).timeout(Duration::from_secs(1)).build()?;
/// let mut config = dep.config();
/// config.timeout = Duration::from_millis(300);
/// dep.reconfigure(config)?;
/// assert_eq!(dep.timeout(), Duration::from_millis(300));
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
pub struct DependencyConfig {
    /// Worker threads ([`DependencyBuilder::workers`](crate::DependencyBuilder::workers)).
    pub workers: usize,
    /// Jobs that may wait for a worker ([`DependencyBuilder::queue`](crate::DependencyBuilder::queue)).
    pub queue: usize,
    /// How long a call may wait for room in a full pool
    /// ([`DependencyBuilder::max_wait`](crate::DependencyBuilder::max_wait)).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    pub max_wait: Duration,
    /// The per-attempt timeout ([`DependencyBuilder::timeout`](crate::DependencyBuilder::timeout)).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    pub timeout: Duration,
    /// Whether deadline-aware admission is on
    /// ([`DependencyBuilder::deadline_aware_admission`](crate::DependencyBuilder::deadline_aware_admission)).
    pub deadline_aware_admission: bool,
    /// The breaker's configuration.
    pub breaker: BreakerConfig,
    /// How [`retry`](crate::CallBuilder::retry) retries.
    pub retry: Retry,
    /// The adaptive concurrency limit, if any; absent in a file: none.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub adaptive_limit: Option<AdaptiveLimit>,
    /// The rate limit, if any
    /// ([`DependencyBuilder::rate_limit`](crate::DependencyBuilder::rate_limit));
    /// absent in a file: none.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub rate_limit: Option<RateLimit>,
    /// The adaptive throttler, if any
    /// ([`DependencyBuilder::throttle`](crate::DependencyBuilder::throttle));
    /// absent in a file: none.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub throttle: Option<Throttle>,
    /// The hedging policy of [`hedge`](crate::CallBuilder::hedge)d calls, if any
    /// ([`DependencyBuilder::hedge`](crate::DependencyBuilder::hedge));
    /// absent in a file: none, and a hedged call makes one attempt.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub hedge: Option<Hedge>,
    /// Where calls run ([`DependencyBuilder::mode`](crate::DependencyBuilder::mode)).
    pub mode: Mode,
    /// Places kept for critical calls
    /// ([`DependencyBuilder::reserved_for_critical`](crate::DependencyBuilder::reserved_for_critical)).
    pub reserved_for_critical: usize,
    /// How its callers call it, for the capacity rule
    /// ([`DependencyBuilder::calls`](crate::DependencyBuilder::calls)); absent
    /// in a file: blocking.
    pub calls: CallShape,
    /// The policies in shadow ([`DependencyBuilder::shadow`](crate::DependencyBuilder::shadow)).
    /// In a file: `shadow = ["breaker", "rate_limit"]`; absent: none.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Shadow::is_empty"))]
    pub shadow: Shadow,
}

/// How a dependency's callers call it, declared for the capacity rule
/// ([`Registry::check_capacity`](crate::Registry::check_capacity)): how many
/// request threads its provider can hold while it hangs.
///
/// A declaration, not a restriction: a call of another form is still served
/// (and nothing is logged), but its hold is then not in the report.
///
/// In a file: `calls = "blocking"`, `calls = "detached"`, or
/// `calls = { fan_out = "search" }`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum CallShape {
    /// A request thread waits for each call
    /// ([`call`](crate::Dependency::call), a [`CallBuilder`](crate::CallBuilder)'s
    /// `call`): the dependency can hold `workers + queue` request threads.
    /// The default.
    #[default]
    Blocking,
    /// Only ever called detached ([`spawn`](crate::Dependency::spawn),
    /// `spawn_with`): admitted or refused at once, no request thread ever
    /// waits for it, so it holds none.
    Detached,
    /// A leg of the fan-out group of this name: one request thread waits for
    /// every leg together, so the group holds as many request threads as its
    /// largest leg (`workers + queue`), not their sum.
    FanOut(String),
}

impl CallShape {
    /// The fan-out group it is a leg of, if any.
    pub fn fan_out_group(&self) -> Option<&str> {
        match self {
            CallShape::FanOut(group) => Some(group),
            _ => None,
        }
    }
}

impl Default for DependencyConfig {
    /// The builder's defaults.
    fn default() -> Self {
        DependencyConfig {
            workers: 10,
            queue: 0,
            max_wait: Duration::ZERO,
            timeout: Duration::from_secs(1),
            deadline_aware_admission: true,
            breaker: BreakerConfig::default(),
            retry: Retry::default(),
            adaptive_limit: None,
            rate_limit: None,
            throttle: None,
            hedge: None,
            mode: Mode::Pool,
            reserved_for_critical: 0,
            calls: CallShape::Blocking,
            shadow: Shadow::none(),
        }
    }
}

impl DependencyConfig {
    /// Checks every setting without starting a thread; the error names the
    /// field as its setter spells it (`workers`, `timeout`, a breaker's
    /// `failure_rate`, `retry.backoff`, a limit's `min_limit`).
    /// [`DependencyBuilder::build`](crate::DependencyBuilder::build) and
    /// [`Dependency::reconfigure`](crate::Dependency::reconfigure) run it first.
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::pool::check_settings(self.workers, self.queue, self.max_wait)?;
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return Err(ConfigError::new(
                "timeout",
                "greater than zero and at most one day",
                format_args!("{:?}", self.timeout),
            ));
        }
        if self.max_wait > self.timeout {
            return Err(ConfigError::new(
                "max_wait",
                "at most the timeout",
                format_args!("{:?} > timeout {:?}", self.max_wait, self.timeout),
            ));
        }
        if self.mode == Mode::CallerThread && self.queue > 0 {
            return Err(ConfigError::new(
                "queue",
                "0 in caller_thread mode (callers wait, at most max_wait, for a permit)",
                self.queue,
            ));
        }
        if self.reserved_for_critical >= self.workers {
            return Err(ConfigError::new(
                "reserved_for_critical",
                "less than the workers (other calls need one at least)",
                format_args!("{} >= {}", self.reserved_for_critical, self.workers),
            ));
        }
        match &self.calls {
            CallShape::Detached if self.mode == Mode::CallerThread => {
                return Err(ConfigError::new(
                    "calls",
                    "blocking or a fan-out leg in caller_thread mode (it has no detached calls)",
                    "detached",
                ));
            }
            CallShape::FanOut(group) if group.trim().is_empty() => {
                return Err(ConfigError::new("calls.fan_out", "a group name that is not empty", "\"\""));
            }
            _ => {}
        }
        self.breaker.validate()?;
        self.retry.validate()?;
        if let Some(rate) = &self.rate_limit {
            rate.validate()?;
        }
        if let Some(throttle) = &self.throttle {
            throttle.validate()?;
        }
        if let Some(hedge) = &self.hedge {
            hedge.validate()?;
        }
        if let Some(limit) = &self.adaptive_limit {
            limit.validate()?;
            // The limit lives between its minimum and the worker count (which
            // the pool checks on its own).
            if limit.min_limit > self.workers {
                return Err(ConfigError::new(
                    "min_limit",
                    "at most the maximum (the worker count)",
                    format_args!("{} > {}", limit.min_limit, self.workers),
                ));
            }
        }
        Ok(())
    }
}

/// The settings a running dependency reads on its call path, each changeable
/// on its own: timeouts and thresholds as relaxed atomics (a call reads the
/// value in force when it starts; none publishes other memory), the retry
/// policy under a mutex taken once per retried call.
pub(super) struct Live {
    timeout_ns: AtomicU64,
    slow_ns: AtomicU64,
    limit_on: AtomicBool,
    rate_on: AtomicBool,
    /// The configured deadline-aware admission (the pool's own reads as off
    /// with a queue of 0, whatever was asked).
    admission: AtomicBool,
    retry: Mutex<Retry>,
    hedge: Mutex<Option<Hedge>>,
    reserved: std::sync::atomic::AtomicUsize,
    /// Read by the capacity rule only, never on the call path.
    calls: Mutex<CallShape>,
    /// The policies in shadow, read once per attempt.
    pub(super) shadow: LiveShadow,
}

impl Live {
    pub(super) fn new(config: &DependencyConfig) -> Live {
        Live {
            timeout_ns: AtomicU64::new(saturating_nanos(config.timeout)),
            slow_ns: AtomicU64::new(saturating_nanos(config.breaker.slow_call_duration)),
            limit_on: AtomicBool::new(config.adaptive_limit.is_some()),
            rate_on: AtomicBool::new(config.rate_limit.is_some()),
            admission: AtomicBool::new(config.deadline_aware_admission),
            retry: Mutex::new(config.retry.clone()),
            hedge: Mutex::new(config.hedge),
            reserved: std::sync::atomic::AtomicUsize::new(config.reserved_for_critical),
            calls: Mutex::new(config.calls.clone()),
            shadow: LiveShadow::new(config.shadow),
        }
    }

    #[inline]
    pub(super) fn timeout(&self) -> Duration {
        Duration::from_nanos(self.timeout_ns.load(Ordering::Relaxed))
    }

    #[inline]
    pub(super) fn slow_call_duration(&self) -> Duration {
        Duration::from_nanos(self.slow_ns.load(Ordering::Relaxed))
    }

    #[inline]
    pub(super) fn is_slow(&self, elapsed: Duration) -> bool {
        saturating_nanos(elapsed) > self.slow_ns.load(Ordering::Relaxed)
    }

    #[inline]
    pub(super) fn limit_on(&self) -> bool {
        self.limit_on.load(Ordering::Relaxed)
    }

    #[inline]
    pub(super) fn rate_on(&self) -> bool {
        self.rate_on.load(Ordering::Relaxed)
    }

    pub(super) fn retry(&self) -> Retry {
        self.retry.lock().clone()
    }

    pub(super) fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Relaxed)
    }

    pub(super) fn hedge(&self) -> Option<Hedge> {
        *self.hedge.lock()
    }
}

impl Dependency {
    /// Every setting in force, as one value.
    pub fn config(&self) -> DependencyConfig {
        let inner = &*self.inner;
        DependencyConfig {
            workers: inner.exec.workers(),
            queue: inner.exec.queue_capacity(),
            max_wait: inner.exec.max_wait(),
            timeout: inner.live.timeout(),
            deadline_aware_admission: inner.live.admission.load(Ordering::Relaxed),
            breaker: inner.breaker.config(),
            retry: inner.live.retry(),
            adaptive_limit: inner.live.limit_on().then(|| inner.limiter.config()),
            rate_limit: inner.live.rate_on().then(|| inner.rate.config()),
            throttle: inner.throttle.in_force(),
            hedge: inner.live.hedge(),
            mode: inner.exec.mode(),
            reserved_for_critical: inner.live.reserved(),
            calls: inner.live.calls.lock().clone(),
            shadow: inner.live.shadow.get(),
        }
    }

    /// Applies `new` while calls run. Everything is checked first; an
    /// invalid setting is refused with a [`ConfigError`] naming its field,
    /// and then nothing has changed.
    ///
    /// - `workers`, `queue`, `max_wait`: the pool resizes in place
    ///   ([`Pool::resize`](crate::pool::Pool::resize)).
    /// - `breaker`, `rate_limit`, `throttle`: as
    ///   [`Breaker::reconfigure`](crate::breaker::Breaker::reconfigure),
    ///   [`RateLimiter::reconfigure`](crate::limit::RateLimiter::reconfigure)
    ///   and [`Throttler::reconfigure`](crate::limit::Throttler::reconfigure)
    ///   say; `None` turns a limit off (calls in flight under it finish
    ///   normally), `Some` on again.
    /// - `adaptive_limit`: keeps what the limit has learned; `None` and
    ///   `Some` as above.
    /// - `retry`: the budget keeps what it has counted.
    /// - `timeout`, `retry`, `hedge`, `reserved_for_critical`, `shadow`: from
    ///   the next call admitted (a call keeps the deadline it started with; a
    ///   policy switched from shadow to enforce refuses on the state it kept).
    /// - `calls`: the capacity rule's next check.
    ///
    /// Every call made at any moment of a reconfiguration gets exactly one
    /// answer, under the old settings or the new.
    /// [`Registry::reconfigure`](crate::Registry::reconfigure) also checks the
    /// change against the request pool's capacity rule.
    pub fn reconfigure(&self, new: DependencyConfig) -> Result<(), ConfigError> {
        new.validate()?;
        let inner = &*self.inner;
        if new.mode != inner.exec.mode() {
            return Err(ConfigError::new(
                "mode",
                "the mode the dependency was built with (it cannot change live)",
                format_args!("{:?} for a {:?} dependency", new.mode, inner.exec.mode()),
            ));
        }
        // The pool checks its own fields and changes nothing when it refuses,
        // so it goes first; nothing below can fail.
        inner.exec.resize(new.workers, new.queue, new.max_wait)?;
        if let Some(pool) = inner.exec.pool() {
            pool.set_deadline_aware_admission(new.deadline_aware_admission);
        }
        inner.live.admission.store(new.deadline_aware_admission, Ordering::Relaxed);
        let slow = new.breaker.slow_call_duration;
        inner.breaker.reconfigure(new.breaker).expect("checked above");
        match new.adaptive_limit {
            Some(limit) => {
                inner.limiter.reconfigure(limit, new.workers).expect("checked above");
                inner.live.limit_on.store(true, Ordering::Relaxed);
            }
            None => inner.live.limit_on.store(false, Ordering::Relaxed),
        }
        match new.rate_limit {
            Some(rate) => {
                inner.rate.reconfigure(rate).expect("checked above");
                inner.live.rate_on.store(true, Ordering::Relaxed);
            }
            None => inner.live.rate_on.store(false, Ordering::Relaxed),
        }
        inner.throttle.set(new.throttle).expect("checked above");
        *inner.live.hedge.lock() = new.hedge;
        inner.live.reserved.store(new.reserved_for_critical, Ordering::Relaxed);
        *inner.live.calls.lock() = new.calls;
        inner.live.shadow.set(new.shadow);
        inner.budget.retune(&new.retry);
        *inner.live.retry.lock() = new.retry;
        inner.live.slow_ns.store(saturating_nanos(slow), Ordering::Relaxed);
        inner.live.timeout_ns.store(saturating_nanos(new.timeout), Ordering::Relaxed);
        inner.ring.reconfigured(new.workers, new.queue, new.timeout);
        log::info!("dependency {}: reconfigured", inner.name);
        Ok(())
    }
}

/// The least hang threshold: below it, a caller's deadline says nothing.
const HANG_FLOOR: Duration = Duration::from_millis(50);

/// The per-call hang threshold: an attempt the *caller's* deadline cut short
/// counts as a failure of the provider once it had the call for longer than
/// this.
/// The `normal` latency, at least 50 ms, at most the slow-call duration
/// `slow`.
pub(crate) fn hang_threshold(normal: Option<Duration>, slow: Duration) -> Duration {
    normal.map_or(HANG_FLOOR, |l| l.max(HANG_FLOOR)).min(slow.max(HANG_FLOOR))
}

/// The whole-pool threshold: a pool whose every worker has been inside its
/// current job for this long is stuck, and the breaker opens at once. A
/// quarter of the `timeout`, or twice the hang threshold if longer.
pub(crate) fn stuck_threshold(normal: Option<Duration>, slow: Duration, timeout: Duration) -> Duration {
    (timeout / 4).max(hang_threshold(normal, slow) * 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::Latency;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn thresholds_start_at_the_floor_and_follow_the_normal_latency() {
        let slow = Duration::from_secs(60);
        let l = Latency::default();
        assert_eq!(hang_threshold(l.normal(), slow), HANG_FLOOR);
        assert_eq!(stuck_threshold(l.normal(), slow, Duration::from_secs(10)), 2500 * MS);
        assert_eq!(stuck_threshold(l.normal(), slow, 100 * MS), HANG_FLOOR * 2);
        (0..200).for_each(|_| l.record(80 * MS));
        let n = l.normal().unwrap();
        assert_eq!(hang_threshold(l.normal(), slow), n);
        assert_eq!(stuck_threshold(l.normal(), slow, 400 * MS), n * 2);
        // A fast provider stops at the floor; the slow-call duration caps a slow one.
        let fast = Latency::default();
        (0..50).for_each(|_| fast.record(MS));
        assert_eq!(hang_threshold(fast.normal(), slow), HANG_FLOOR);
        let sluggish = Latency::default();
        (0..50).for_each(|_| sluggish.record(Duration::from_secs(2)));
        assert_eq!(hang_threshold(sluggish.normal(), 500 * MS), 500 * MS);
        assert_eq!(hang_threshold(sluggish.normal(), MS), HANG_FLOOR);
    }
}
