//! [`Dependency`]: a circuit breaker, a dedicated bounded worker pool and a
//! timeout (and optionally retries), put together on the call path.
//!
//! # The call path
//!
//! ```text
//! caller ─► deadline ─► try_acquire ─► submit (+ admission) ─► wait until deadline ─► classify ─► record
//!              │ passed     │ not permitted   │ full, too late, shut down
//!              ▼            ▼                 ▼
//!     DeadlineUnmeetable  NotPermitted   QueueFull, DeadlineUnmeetable, ShuttingDown   (at once, never recorded)
//! ```
//!
//! An attempt's deadline is the earlier of `now + timeout` and the caller's
//! own deadline, if it gave one ([`Dependency::within`]).
//!
//! The breaker permit is held by the calling thread from `try_acquire` to the
//! end of the call, and only that thread ever records it, exactly once: with
//! the job's verdict, or [`Failure`](Verdict::Failure) for a timeout at the
//! dependency's own timeout or a panic. A rejection drops the permit
//! unrecorded (ignored; in half-open that hands the probe slot back), because
//! a full queue or an open breaker says nothing about the provider; so does a
//! timeout at the caller's deadline, which was the caller's budget running
//! out, not the provider failing. A job abandoned after a timeout finishes on
//! its worker without touching the breaker: its outcome was already recorded
//! as the timeout.
//!
//! A detached call ([`Dependency::spawn`], `detached.rs`) has no caller to
//! wait: an owned permit travels with its job, and the worker records it
//! once the job returns (or the job's `Drop`, if the pool drops it unrun).

mod attempt;
mod builder;
mod config;
mod counts;
mod detached;
mod events;
mod hang;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::builder::DependencyBuilder;
pub use self::config::DependencyConfig;
use self::config::Live;
pub(crate) use self::counts::Counters;
pub use self::counts::{CallCounts, DependencyLatency, DependencySnapshot, Percentiles};
pub use self::events::Event;
use crate::breaker::Breaker;
use crate::classify::{Classify, Verdict};
use crate::clock::Clock;
use crate::error::Error;
use crate::histogram::LatencyHistogram;
use crate::limit::Limiter;
use crate::listeners::Listeners;
use crate::pool::{CallContext, Pool};
use crate::retry::{Jitter, Retry, RetryBudget};

/// One downstream dependency: its own circuit breaker, its own bounded worker
/// pool, and a timeout on every call.
///
/// Cheap to clone (an `Arc` inside); clones share everything. The worker
/// threads stop when the last clone is dropped or at
/// [`shutdown`](Self::shutdown).
///
/// ```
/// use std::time::Duration;
/// use watertight::{BreakerConfig, CallContext, Dependency};
///
/// let fraud = Dependency::builder("fraud")
///     .workers(4)
///     .queue(2)
///     .timeout(Duration::from_secs(3))
///     .breaker(BreakerConfig::count_based(20).minimum_calls(10))
///     .build()?;
///
/// let answer = fraud.call(|ctx: &CallContext| -> Result<u32, std::io::Error> {
///     assert!(ctx.remaining() <= Duration::from_secs(3));
///     Ok(42)
/// });
/// assert_eq!(answer.unwrap(), 42);
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Dependency {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    /// The settings that `reconfigure` changes in place.
    live: Live,
    budget: RetryBudget,
    jitter: Jitter,
    counters: Counters,
    clock: Option<Arc<dyn Clock>>,
    listeners: Arc<Listeners<Event>>,
    breaker: Breaker,
    /// Always built; in force while `live.limit_on()`.
    limiter: Limiter,
    pool: Pool,
    /// Attempts that reached the pool, as their callers saw them.
    call_time: LatencyHistogram,
    /// The provider's normal latency, for the hang and stall thresholds.
    normal: self::hang::Normal,
}

impl Inner {
    /// The injected clock's time. `real_now` is a real instant the caller has
    /// just read: with the system clock (`clock` is `None`) it *is* the time,
    /// which saves the hot path a second clock read.
    #[inline]
    fn clock_now(&self, real_now: Instant) -> Instant {
        match &self.clock {
            None => real_now,
            Some(clock) => clock.now(),
        }
    }
}

fn classify_by_error<T, E: Classify>(result: &Result<T, E>) -> Verdict {
    match result {
        Ok(_) => Verdict::Success,
        Err(e) => e.classify(),
    }
}

impl Dependency {
    /// A builder with every default (see each setter).
    pub fn builder(name: impl Into<String>) -> DependencyBuilder {
        DependencyBuilder::new(name.into())
    }

    /// Runs `job` once on a worker, through the breaker and under the
    /// timeout. `Ok` is a success; an error is classified by its
    /// [`Classify`] implementation.
    ///
    /// Returns at once when rejected, and never later than the timeout
    /// (plus scheduling noise) otherwise. The job receives a [`CallContext`]
    /// whose [`remaining`](CallContext::remaining) time it should hand to its
    /// own I/O timeouts.
    pub fn call<T, E, F>(&self, job: F) -> Result<T, Error<E>>
    where
        E: Classify + Send + 'static,
        T: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    {
        self.call_with(classify_by_error::<T, E>, job)
    }

    /// Like [`call`](Self::call), with `classify` deciding what the job's
    /// outcome means to the breaker (for example a response whose 5xx status
    /// is not an `Err`). Timeouts and panics are always failures; rejections
    /// are never recorded. The classifier runs on the calling thread; if it
    /// panics, the attempt is counted as `panicked`, recorded as a failure,
    /// and answered [`Error::Panicked`].
    pub fn call_with<T, E, F, C>(&self, classify: C, job: F) -> Result<T, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        C: Fn(&Result<T, E>) -> Verdict,
    {
        self.once(None, &classify, job)
    }

    /// Calls `job` with the builder's [`Retry`]: up to `max_attempts`
    /// attempts, each through the breaker (so each is counted by it), retried
    /// only after a transient outcome (a failure verdict or a timeout; never a panic)
    /// and only while the retry budget allows, with exponential backoff and
    /// full jitter between them. Never retries a rejection or an ignored
    /// outcome, and never sleeps past [`Retry::overall_timeout`].
    ///
    /// The job is shared by every attempt; [`CallContext::attempt`] tells them
    /// apart. The last attempt's outcome is returned.
    pub fn call_retry<T, E, F>(&self, job: F) -> Result<T, Error<E>>
    where
        E: Classify + Send + 'static,
        T: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    {
        self.call_retry_with(classify_by_error::<T, E>, job)
    }

    /// [`call_retry`](Self::call_retry) with a classifier, as in
    /// [`call_with`](Self::call_with). An `Ok` the classifier calls a failure
    /// is retried too, and returned as it is once attempts or budget run out.
    pub fn call_retry_with<T, E, F, C>(&self, classify: C, job: F) -> Result<T, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
        C: Fn(&Result<T, E>) -> Verdict,
    {
        self.retrying(None, &classify, job)
    }

    /// The same four call forms, under the caller's own `deadline` (a
    /// request's budget, say): each attempt's deadline is the earlier of it
    /// and the dependency's [`timeout`](DependencyBuilder::timeout).
    ///
    /// - A call whose deadline has already passed, or that the queue cannot
    ///   meet (deadline-aware admission), is rejected at once with
    ///   [`DeadlineUnmeetable`](crate::Rejection::DeadlineUnmeetable),
    ///   without touching the provider.
    /// - A timeout at the caller's deadline, when it came before the
    ///   dependency's own timeout, is the caller's budget running out: it is
    ///   answered [`Error::Timeout`] and counted `timed_out`, but the breaker
    ///   records it as ignored, not as a provider failure.
    /// - Retries never start an attempt, nor sleep, past it.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use watertight::{CallContext, Dependency, Error, Outcome};
    ///
    /// let pricing = Dependency::builder("pricing").workers(2).timeout(Duration::from_secs(2)).build()?;
    /// // The request has 50 ms left: so has the call, queue wait included.
    /// let deadline = Instant::now() + Duration::from_millis(50);
    /// let quick = pricing.within(deadline).call(|ctx: &CallContext| {
    ///     assert!(ctx.remaining() <= Duration::from_millis(50));
    ///     Ok::<_, std::io::Error>(1999)
    /// });
    /// assert_eq!(quick.unwrap(), 1999);
    ///
    /// // A deadline already past: rejected at once, the provider never asked.
    /// let late = pricing.within(Instant::now()).call(|_: &CallContext| Ok::<_, std::io::Error>(0));
    /// assert_eq!(late.unwrap_err().outcome(), Outcome::DeadlineUnmeetable);
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn within(&self, deadline: Instant) -> Within<'_> {
        Within { dependency: self, deadline }
    }

    /// The dependency's name (also its breaker's and its pool's).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its circuit breaker, for manual transitions and metrics.
    pub fn breaker(&self) -> &Breaker {
        &self.inner.breaker
    }

    /// Its worker pool.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The per-attempt timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.live.timeout()
    }

    /// How long attempts that reached the pool took, as their callers saw
    /// them (the pool has the queue-wait and run-time histograms).
    pub fn call_histogram(&self) -> &LatencyHistogram {
        &self.inner.call_time
    }

    /// Its adaptive concurrency limit, if it has one.
    pub fn limiter(&self) -> Option<&Limiter> {
        self.inner.live.limit_on().then_some(&self.inner.limiter)
    }

    /// Its retry configuration.
    pub fn retry(&self) -> Retry {
        self.inner.live.retry()
    }

    /// Counters, breaker state and rates, and pool figures. The counters and
    /// pool figures are relaxed atomic reads; the rates come from the
    /// breaker, which holds its window lock for the few instructions it takes
    /// to copy them (the same lock a call's outcome takes to be recorded).
    pub fn snapshot(&self) -> DependencySnapshot {
        let inner = &*self.inner;
        let metrics = inner.breaker.metrics();
        let pool = inner.pool.stats();
        DependencySnapshot {
            name: inner.name.to_string(),
            state: metrics.state,
            failure_rate: metrics.failure_rate,
            slow_call_rate: metrics.slow_call_rate,
            calls: inner.counters.load(pool.expired),
            queue_capacity: inner.pool.queue_capacity(),
            pool,
            timeout: inner.live.timeout(),
            mean_service_time: inner.pool.mean_service_time(),
            estimated_wait: inner.pool.estimated_wait(),
            limit: self.limiter().map(Limiter::limit),
            latency: DependencyLatency {
                queue_wait: Percentiles::of(&inner.pool.queue_wait_histogram().recent()),
                run: Percentiles::of(&inner.pool.run_histogram().recent()),
                call: Percentiles::of(&inner.call_time.recent()),
            },
        }
    }

    /// Stops admitting calls (they are answered `ShuttingDown`, counted as
    /// `shutting_down` and never recorded by the breaker) and lets running and
    /// queued work finish within `grace`. Idempotent. Returns `true` when every
    /// worker thread has been joined. A worker still inside a job when the
    /// grace ends is *not* joined: it is left running detached, and `false`
    /// is returned (see [`Pool::shutdown`]).
    pub fn shutdown(&self, grace: Duration) -> bool {
        self.inner.pool.shutdown(grace)
    }
}

/// A [`Dependency`]'s call forms under a caller's deadline; from
/// [`Dependency::within`]. Each method is its namesake on `Dependency`, with
/// the deadline applied as `within` describes.
#[derive(Clone, Copy)]
pub struct Within<'a> {
    dependency: &'a Dependency,
    deadline: Instant,
}

impl Within<'_> {
    /// The caller's deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// [`Dependency::call`] under the caller's deadline.
    pub fn call<T, E, F>(&self, job: F) -> Result<T, Error<E>>
    where
        E: Classify + Send + 'static,
        T: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    {
        self.call_with(classify_by_error::<T, E>, job)
    }

    /// [`Dependency::call_with`] under the caller's deadline.
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// # use watertight::{CallContext, Dependency, Verdict};
    /// # let dep = Dependency::builder("d").workers(1).build()?;
    /// let deadline = Instant::now() + Duration::from_millis(200);
    /// let status = dep.within(deadline).call_with(
    ///     |r: &Result<u16, std::io::Error>| match r {
    ///         Ok(s) if *s >= 500 => Verdict::Failure,
    ///         Ok(_) => Verdict::Success,
    ///         Err(_) => Verdict::Failure,
    ///     },
    ///     |_ctx: &CallContext| Ok(200),
    /// );
    /// assert_eq!(status.unwrap(), 200);
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn call_with<T, E, F, C>(&self, classify: C, job: F) -> Result<T, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        C: Fn(&Result<T, E>) -> Verdict,
    {
        self.dependency.once(Some(self.deadline), &classify, job)
    }

    /// [`Dependency::call_retry`] under the caller's deadline: no attempt
    /// starts, and no backoff sleeps, past it.
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// # use watertight::{CallContext, Dependency};
    /// # let dep = Dependency::builder("d").workers(1).build()?;
    /// let deadline = Instant::now() + Duration::from_millis(300);
    /// let answer = dep.within(deadline).call_retry(|ctx: &CallContext| {
    ///     if ctx.attempt() == 1 {
    ///         Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
    ///     } else {
    ///         Ok(ctx.attempt())
    ///     }
    /// });
    /// assert_eq!(answer.unwrap(), 2);
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn call_retry<T, E, F>(&self, job: F) -> Result<T, Error<E>>
    where
        E: Classify + Send + 'static,
        T: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    {
        self.call_retry_with(classify_by_error::<T, E>, job)
    }

    /// [`Dependency::call_retry_with`] under the caller's deadline.
    ///
    /// ```
    /// # use std::time::{Duration, Instant};
    /// # use watertight::{CallContext, Dependency, Error, Verdict};
    /// # let dep = Dependency::builder("d").workers(1).build()?;
    /// // A budget that is already spent: not a single attempt starts.
    /// let spent = Instant::now();
    /// let answer = dep.within(spent).call_retry_with(
    ///     |_: &Result<(), std::io::Error>| Verdict::Success,
    ///     |_ctx: &CallContext| unreachable!("never runs"),
    /// );
    /// assert!(answer.unwrap_err().is_rejected());
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn call_retry_with<T, E, F, C>(&self, classify: C, job: F) -> Result<T, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
        C: Fn(&Result<T, E>) -> Verdict,
    {
        self.dependency.retrying(Some(self.deadline), &classify, job)
    }
}

impl fmt::Debug for Within<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Within")
            .field("dependency", &self.dependency.name())
            .field("remaining", &self.deadline.saturating_duration_since(Instant::now()))
            .finish()
    }
}

impl fmt::Debug for Dependency {
    /// Never blocks.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("Dependency")
            .field("name", &inner.name)
            .field("timeout", &inner.live.timeout())
            .field("state", &inner.breaker.state())
            .field("pool", &inner.pool)
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync + Clone + 'static>() {}
    is::<Dependency>();
    is::<Event>();
}
