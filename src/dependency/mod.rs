//! [`Dependency`]: a circuit breaker, a dedicated bounded worker pool and a
//! timeout (and optionally retries, hedges, limits), put together on the
//! call path: [`call`](Dependency::call), [`spawn`](Dependency::spawn) and
//! [`with`](Dependency::with), a [`CallBuilder`] of options.
//!
//! # What counts as a failure
//!
//! Only what says the provider is unwell: connection errors, timeouts (our own
//! deadline included), 5xx and panics. A 4xx is *ignored*, one caller's or
//! tenant's problem: neither a failure (one tenant could open the circuit for
//! everyone) nor a success (it would dilute the failure rate). Rejections are
//! never recorded nor retried. The error type decides ([`Classify`];
//! ureq's: [`http`](crate::http)), or a [`Classifier`] given to
//! [`CallBuilder::classify`] judges the whole outcome, an `Ok(503)` included.
//!
//! # A hang is caught within one timeout
//!
//! - *A cut-short attempt still counts*: a timeout at a caller's shorter
//!   deadline is a failure once a worker had run it longer than the provider's
//!   normal latency (`srtt + 4 x rttvar` of recent runs, RFC 6298, within
//!   50 ms and `slow_call_duration`); a shorter one is ignored.
//! - *The stuck rule*: when a call finds no room, or a waiter gives up, and
//!   every worker has been inside its call for a quarter of the timeout (or
//!   twice the normal latency), the breaker opens at once, whatever its window
//!   holds. A stuck pool with half its workers abandoned is logged at `warn`.
//! - *Nobody waits in a line that does not move*: when every worker has been
//!   inside its call for three normal latencies (at least 20 ms), none
//!   finished, callers are refused `QueueFull` and waiters leave.
//!
//! # Fan-out, hedging, priorities
//!
//! [`FanOut::until`] (or `timeout`) is one deadline for several legs, started
//! with [`FanOut::start`] or [`CallBuilder::fan`], each admitted and settled as
//! any call, with its retry or hedge. No thread is spawned: the request thread
//! waiting in [`FanLeg::wait`] or [`FanOut::wait_all`] takes answers in and
//! starts retries and hedges when due, never past the deadline. Every leg
//! answers once, so a request can answer with what it has.
//!
//! A hedged call ([`DependencyBuilder::hedge`], `with().hedge()`) starts another
//! attempt after the [`Hedge`] delay, or at once when one fails, and answers the
//! first acceptable answer. A hedge starts only on a worker idle then, in
//! CLOSED, within the limits and the retry budget; the loser sees
//! [`is_cancelled`](crate::CallContext::is_cancelled) and is recorded when it
//! returns.
//!
//! [`CallBuilder::priority`]: with [`DependencyBuilder::reserved_for_critical`],
//! the last places of the pool are kept for [`Priority::Critical`] calls:
//! `Normal` ones are refused `Shed` once only those are left, `Sheddable` ones
//! as soon as they would queue.
//!
//! # Where calls run
//!
//! [`Mode::CallerThread`] runs each call on the caller's thread, at most
//! `workers` at once, with the same breaker, limits, retry and counts, at a
//! tenth of a hand-off's cost; but there the deadline is cooperative, a hung
//! job holds its caller, and there is no `spawn` and no hedging. Keep the pool
//! (the default) for what can hang.
//!
//! # The call path
//!
//! Every call is made of attempts, and every attempt is admitted by one
//! function and settled by one (`attempt.rs`): the kinds of call (once,
//! retried, hedged, detached, fanned out, on the caller's thread) are thin drivers over
//! them. One successful [`Dependency::call`] (pool mode, no cache), in call
//! order: each line a file of `src/`, the functions the call runs there
//! (up to a colon), and what they do. Besides these it reads the floor
//! (`error.rs`, `classify.rs`, `time.rs`, `sync.rs`, `latency.rs`,
//! `histogram/`, `priority.rs`, `shadow.rs`, `room.rs`, `window.rs`), which is
//! not counted. `tests/structure/call_path.rs` checks the list against the
//! imports of those functions and the types of the fields they read, and
//! holds it to at most 30 files.
//!
//! ```text
//! caller thread
//!   dependency/mod.rs        Dependency::call, Dependency::with: the entry
//!   dependency/call.rs       CallBuilder::new, CallBuilder::call: the classifier, the priority
//!   dependency/once.rs       Dependency::once, Dependency::attempt: the blocking driver
//!   dependency/attempt.rs    Deadline::new, Inner::admit, Attempt::carry: deadline, throttle, rate, breaker, limit, place
//!   dependency/config.rs     the live settings (timeout, limits, shares, thresholds)
//!   limit/throttle.rs        Throttler::is_on, Throttler::refuses_at: the adaptive throttle, if on
//!   retry/jitter.rs          the throttle's random draw
//!   limit/rate.rs            RateLimiter::reserve: the rate limit, if set
//!   limit/limiter.rs         Limiter::try_acquire: the adaptive limit, if set
//!   limit/rule.rs            the adaptive limit's rule
//!   limit/config.rs          the limits' settings
//!   breaker/mod.rs           the breaker's shared state
//!   breaker/config.rs        its settings (the slow-call duration)
//!   trace.rs                 capture, enter: the caller's span (feature `tracing`)
//!   breaker/acquire.rs       Breaker::try_acquire_owned: CLOSED is one atomic load
//!   breaker/state.rs         the state word
//!   dependency/priority.rs   Occupancy::take: the place (one compare-and-swap)
//!   pool/submit.rs           Submit::by, Pool::submit: deadline-aware admission, the queue
//!   pool/mod.rs              the pool's shared state
//!   pool/call.rs             the call's one allocation (job, context, reply slot)
//!   pool/queue.rs            Queue::push, Mailbox::post: hand-off to an idle worker (or queue)
//!   pool/ticket.rs           Ticket::wait_timed: spin, then park, until the answer or the deadline
//!   pool/slot.rs             the reply slot
//! worker thread
//!   pool/worker.rs           worker_main: take the call, mark the worker busy
//!   pool/call.rs             Job::run: the job, under catch_unwind; the answer in the slot
//!   pool/stats.rs            the run's timings and counts
//! caller thread
//!   dependency/attempt.rs    Attempt::settle: classify, late answer, cut short, the normal latency
//!   dependency/counts.rs     the counts
//!   limit/throttle.rs        Throttler::record_at: the answer, for the throttle
//!   breaker/acquire.rs       OwnedPermit::record: the outcome, into machine.rs and window.rs
//!   breaker/machine.rs       the state machine
//!   breaker/window.rs        the failure-rate window
//! ```
//!
//! What admission refuses and settlement records, and why, is told once, in
//! `attempt.rs`; each driver (`once.rs`, `retrying.rs`, `hedge.rs`,
//! `detached.rs`, `fanout.rs`) tells its own part in its file.

mod attempt;
mod builder;
mod call;
mod caller;
mod config;
mod counts;
mod detached;
mod events;
mod fanout;
mod hedge;
mod hedge_policy;
mod once;
mod priority;
mod quiet_log;
mod retrying;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(crate) use self::attempt::Judged;
pub use self::builder::DependencyBuilder;
pub use self::call::{CallBuilder, Hedging, Once, Retrying};
use self::caller::CallerThread;
pub use self::caller::Mode;
use self::config::Live;
pub(crate) use self::config::stuck_threshold;
pub use self::config::{CallShape, DependencyConfig};
pub(crate) use self::counts::Counters;
pub use self::counts::{CallCounts, DependencyLatency, DependencySnapshot, Percentiles};
pub use self::events::Event;
pub use self::events::{RecordedEvent, RecordedKind};
#[cfg(feature = "cache")]
pub(crate) use self::fanout::{FanAnswer, FanDrive};
pub use self::fanout::{FanLeg, FanOut};
pub use self::hedge_policy::Hedge;
use crate::breaker::Breaker;
use crate::classify::Classify;
pub use crate::classify::{ByError, Classifier};
use crate::clock::Clock;
use crate::error::{ConfigError, Error};
use crate::histogram::LatencyHistogram;
use crate::limit::Limiter;
use crate::listeners::Listeners;
use crate::pool::{CallContext, Pool, PoolStats};
pub use crate::priority::Priority;
use crate::retry::{JitterSource, Retry, RetryBudget};

/// One downstream dependency: its own circuit breaker, its own bounded worker
/// pool, and a timeout on every call.
///
/// Cheap to clone (an `Arc` inside); clones share everything. The worker
/// threads stop when the last clone is dropped or at
/// [`shutdown`](Self::shutdown).
///
/// ```
/// use std::time::Duration;
/// use watertight::{CallContext, Dependency, breaker::BreakerConfig};
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
    jitter: JitterSource,
    counters: Counters,
    clock: Option<Arc<dyn Clock>>,
    listeners: Arc<Listeners<Event>>,
    breaker: Breaker,
    /// Always built; in force while `live.limit_on()`.
    limiter: Limiter,
    /// Always built; in force while `live.rate_on()`.
    rate: crate::limit::RateLimiter,
    /// Always built; in force while its configuration is set (`is_on`).
    throttle: crate::limit::Throttler,
    /// Its pool, or caller-thread mode's permits.
    exec: Exec,
    /// Attempts that reached the pool, as their callers saw them.
    call_time: LatencyHistogram,
    /// The provider's normal latency: its successes' run times, for the
    /// hang and stuck thresholds and the time a hedge must have left.
    normal: crate::latency::Latency,
    /// Calls admitted by priority and not done (`priority.rs`).
    occupancy: Arc<self::priority::Occupancy>,
    /// The last events, for `recent_events`.
    ring: Arc<self::events::EventRing>,
    /// Refusals and timeouts, logged in aggregate (`quiet_log.rs`).
    log: quiet_log::QuietLog,
    /// Failed detached calls with no callback, logged at `warn` in aggregate.
    detached_failures: crate::quiet::Quiet<1>,
    /// What the policies in shadow would have refused.
    shadow_counts: crate::shadow::ShadowCounters,
}

impl Inner {
    /// Logs a failed detached call (one without a callback) at `warn`, in
    /// aggregate as refusals are: the first at once, then at most a line a
    /// second with the last error and the count.
    fn detached_failed(&self, err: &dyn std::fmt::Display) {
        self.detached_failures.log(
            module_path!(),
            log::Level::Warn,
            0,
            format_args!("dependency {}: detached call failed: {err}", self.name),
        );
    }

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

impl Dependency {
    /// A builder with every default (see each setter).
    pub fn builder(name: impl Into<String>) -> DependencyBuilder {
        DependencyBuilder::new(name.into())
    }

    /// Runs `job` once on a worker, through the breaker and under the
    /// timeout, as [`CallBuilder::call`] does; an error is judged by its
    /// [`Classify`] implementation. The job should hand
    /// [`CallContext::remaining`] to its own I/O timeouts. For a caller's
    /// deadline, a classifier of your own or retries, see [`with`](Self::with).
    pub fn call<T, E, F>(&self, job: F) -> Result<T, Error<E>>
    where
        E: Classify + Send + 'static,
        T: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    {
        self.with().call(job)
    }

    /// A call with options: the caller's own deadline, a classifier, retries,
    /// or a detached call with a callback; see [`CallBuilder`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use watertight::{CallContext, Dependency};
    ///
    /// let account = Dependency::builder("account").workers(2).build()?;
    /// // Under the request's budget, retried while the retry budget allows.
    /// let answer = account
    ///     .with()
    ///     .timeout(Duration::from_millis(800))
    ///     .retry()
    ///     .call(|ctx: &CallContext| Ok::<_, std::io::Error>(ctx.attempt()));
    /// assert_eq!(answer.unwrap(), 1);
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn with(&self) -> CallBuilder<'_> {
        CallBuilder::new(self)
    }

    /// The dependency's name (also its breaker's and its pool's).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its circuit breaker, for manual transitions and metrics.
    pub fn breaker(&self) -> &Breaker {
        &self.inner.breaker
    }

    /// Its worker pool; `None` in [`Mode::CallerThread`].
    pub fn pool(&self) -> Option<&Pool> {
        self.inner.exec.pool()
    }

    /// Where it runs its calls.
    pub fn mode(&self) -> Mode {
        self.inner.exec.mode()
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

    /// Its adaptive throttler, if it has one.
    pub fn throttler(&self) -> Option<&crate::limit::Throttler> {
        self.inner.throttle.is_on().then_some(&self.inner.throttle)
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
        let pool = inner.exec.stats();
        let on_pool = inner.exec.pool();
        DependencySnapshot {
            name: inner.name.to_string(),
            state: metrics.state,
            failure_rate: metrics.failure_rate,
            slow_call_rate: metrics.slow_call_rate,
            calls: inner.counters.load(pool.expired),
            queue_capacity: inner.exec.queue_capacity(),
            pool,
            timeout: inner.live.timeout(),
            mean_service_time: on_pool.and_then(Pool::mean_service_time),
            estimated_wait: on_pool.and_then(Pool::estimated_wait),
            limit: self.limiter().map(Limiter::limit),
            latency: DependencyLatency {
                queue_wait: on_pool
                    .map(|p| Percentiles::of(&p.queue_wait_histogram().recent()))
                    .unwrap_or_default(),
                run: on_pool.map(|p| Percentiles::of(&p.run_histogram().recent())).unwrap_or_default(),
                call: Percentiles::of(&inner.call_time.recent()),
            },
            hedge_lost_time: inner.counters.hedge_lost_time(),
            shadow_refused: inner.shadow_counts.load(),
        }
    }

    /// Its last 100 events, oldest first: breaker transitions,
    /// reconfigurations, and the summaries a sampler of its snapshots
    /// records ([`record_event`](Self::record_event)).
    /// A copy, taken under a short lock.
    pub fn recent_events(&self) -> Vec<RecordedEvent> {
        self.inner.ring.recent()
    }

    /// Records `kind` as happened `at` in the ring of
    /// [`recent_events`](Self::recent_events), numbered after the events
    /// before it: what a sampler of [`snapshot`](Self::snapshot)s records
    /// (a [`RecordedKind::Summary`]), so that a view opened later sees it.
    pub fn record_event(&self, at: std::time::SystemTime, kind: RecordedKind) {
        self.inner.ring.record(at, kind);
    }

    /// Stops admitting calls (they are answered `ShuttingDown`) and lets
    /// running and queued work finish within `grace`, as [`Pool::shutdown`]
    /// does: `true` when every worker thread has been joined. Idempotent.
    pub fn shutdown(&self, grace: Duration) -> bool {
        self.inner.exec.shutdown(grace)
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
            .field("pool", &inner.exec.pool())
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync + Clone + 'static>() {}
    is::<Dependency>();
    is::<Event>();
}

/// The compartment itself: its pool, or caller-thread mode's permits.
pub(crate) enum Exec {
    Pool(Pool),
    Caller(CallerThread),
}

impl Exec {
    pub(crate) fn pool(&self) -> Option<&Pool> {
        match self {
            Exec::Pool(pool) => Some(pool),
            Exec::Caller(_) => None,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        if self.pool().is_some() { Mode::Pool } else { Mode::CallerThread }
    }

    /// Workers, or the permits of caller-thread mode.
    pub(crate) fn workers(&self) -> usize {
        match self {
            Exec::Pool(pool) => pool.workers(),
            Exec::Caller(c) => c.permits.limit(),
        }
    }

    pub(crate) fn queue_capacity(&self) -> usize {
        self.pool().map_or(0, Pool::queue_capacity)
    }

    pub(crate) fn max_wait(&self) -> Duration {
        match self {
            Exec::Pool(pool) => pool.max_wait(),
            Exec::Caller(c) => c.permits.max_wait(),
        }
    }

    /// The pool's figures; in caller-thread mode, `workers` is the limit,
    /// `busy` the callers inside, `waiting` those waiting for a permit, and
    /// the rest zero (the outcomes are in the dependency's `CallCounts`).
    pub(crate) fn stats(&self) -> PoolStats {
        match self {
            Exec::Pool(pool) => pool.stats(),
            Exec::Caller(c) => c.stats(),
        }
    }

    pub(crate) fn resize(&self, workers: usize, queue: usize, max_wait: Duration) -> Result<(), ConfigError> {
        match self {
            Exec::Pool(pool) => pool.resize(workers, queue, max_wait),
            Exec::Caller(c) => c.permits.resize(workers, max_wait),
        }
    }

    pub(crate) fn shutdown(&self, grace: Duration) -> bool {
        match self {
            Exec::Pool(pool) => pool.shutdown(grace),
            Exec::Caller(c) => {
                c.shut.store(true, Ordering::Release);
                // Callers inside finish on their own threads: nothing to join.
                true
            }
        }
    }
}
