//! What a running dependency reads on its call path ([`Live`]), and
//! [`Dependency::reconfigure`], which changes it while calls run (the
//! settings themselves, [`DependencyConfig`], are `settings.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::{Dependency, Hedge};
use crate::error::ConfigError;
use crate::retry::Retry;
use crate::settings::{CallShape, DependencyConfig};
use crate::shadow::LiveShadow;
use crate::time::saturating_nanos;

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
    /// - `workers`, `queue`, `max_wait`: the pool grows or shrinks; see
    ///   [`Pool::resize`](crate::pool::Pool::resize) for how running and queued
    ///   calls are kept.
    /// - `timeout`: calls made from now on; a call already made keeps the
    ///   deadline it started with.
    /// - `breaker`: see [`Breaker::reconfigure`](crate::breaker::Breaker::reconfigure)
    ///   for what is kept and what starts afresh.
    /// - `retry`: calls made from now on; the budget keeps the calls and
    ///   retries it has counted.
    /// - `adaptive_limit`: a new configuration keeps what the limit has
    ///   learned; `None` turns the limit off (calls in flight under it finish
    ///   normally), and `Some` turns it on again.
    /// - `rate_limit`: the permits already promised stand and the next follow
    ///   the new rate ([`RateLimiter::reconfigure`](crate::limit::RateLimiter::reconfigure));
    ///   no thread is involved and nobody is blocked; `None` turns it off.
    /// - `throttle`: a new `k` or floor applies to the next call, on what the
    ///   window holds; a new window or bucket count starts an empty window;
    ///   `None` turns it off, and `Some` on again
    ///   ([`Throttler::reconfigure`](crate::limit::Throttler::reconfigure)).
    /// - `reserved_for_critical`: calls admitted from now on.
    /// - `hedge`: hedged calls made from now on; `None` makes them single attempts.
    /// - `calls`: the capacity rule's next check; calls are served as before.
    /// - `shadow`: the next call admitted; a policy switched from shadow to
    ///   enforce refuses from that call on, on the state it kept in shadow.
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
