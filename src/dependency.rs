//! [`Dependency`]: a circuit breaker, a dedicated bounded worker pool and a
//! deadline (and optionally retries), put together on the call path.
//!
//! # The call path
//!
//! ```text
//! caller ─► try_acquire ─► admission ─► submit ─► wait until deadline ─► classify ─► record
//!              │ open         │ too late    │ full, shut down
//!              ▼              ▼             ▼
//!         CircuitOpen   DeadlineUnmeetable  QueueFull, ShuttingDown   (all at once, never recorded)
//! ```
//!
//! The breaker permit is held by the calling thread from `try_acquire` to the
//! end of the call, and only that thread ever records it, exactly once: with
//! the job's verdict, or [`Failure`](Verdict::Failure) for a timeout or a
//! panic. A rejection drops the permit unrecorded (ignored; in half-open that
//! hands the probe slot back), because a full queue or an open breaker says
//! nothing about the provider. A job abandoned after a timeout finishes on its
//! worker without touching the breaker: its outcome was already recorded as
//! the timeout.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::breaker::{Breaker, BreakerConfig, Transition};
use crate::classify::{Classify, Verdict};
use crate::clock::{Clock, SystemClock};
use crate::error::{ConfigError, Error, Rejection};
use crate::metrics::{Counters, DependencySnapshot, Outcome};
use crate::pool::{CallContext, Pool};
use crate::retry::{Jitter, Retry, RetryBudget};

/// The longest deadline a dependency accepts. A request thread that waits
/// longer than this is not protected by anything.
const MAX_DEADLINE: Duration = Duration::from_secs(24 * 60 * 60);

/// Something that happened to a dependency, delivered to the listeners given
/// to [`DependencyBuilder::on_event`].
///
/// Listeners run on the thread where it happened (a request thread, or the
/// thread whose call moved the breaker), after every lock is released; keep
/// them short and never call the same dependency from one.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// The breaker changed state (also logged at `info` by the breaker).
    Transition(Transition),
    /// A call was turned away at once (also logged at `debug`).
    Rejected {
        /// The dependency's name.
        dependency: Arc<str>,
        /// Why.
        rejection: Rejection,
    },
    /// A caller stopped waiting at the deadline (also logged at `debug`).
    TimedOut {
        /// The dependency's name.
        dependency: Arc<str>,
        /// How long the caller waited.
        waited: Duration,
    },
}

type Listener = Arc<dyn Fn(&Event) + Send + Sync + 'static>;

/// Builds a [`Dependency`]; from [`Dependency::builder`].
#[must_use = "a builder does nothing until `build()` is called"]
pub struct DependencyBuilder {
    name: String,
    workers: usize,
    queue: usize,
    deadline: Duration,
    breaker: BreakerConfig,
    retry: Retry,
    /// `None` for the system clock, read directly (see [`Inner::clock`]).
    clock: Option<Arc<dyn Clock>>,
    stack_size: Option<usize>,
    admission: bool,
    listeners: Vec<Listener>,
}

impl fmt::Debug for DependencyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DependencyBuilder")
            .field("name", &self.name)
            .field("workers", &self.workers)
            .field("queue", &self.queue)
            .field("deadline", &self.deadline)
            .field("breaker", &self.breaker)
            .field("retry", &self.retry)
            .field("clock", self.clock.as_ref().map_or(&SystemClock as &dyn fmt::Debug, |c| c))
            .field("stack_size", &self.stack_size)
            .field("deadline_aware_admission", &self.admission)
            .field("listeners", &self.listeners.len())
            .finish()
    }
}

impl DependencyBuilder {
    /// Worker threads, named `watertight-<name>-<i>`. Default 10; must be
    /// 1 to 4096.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Jobs that may wait for a worker. Default 0: a call is handed straight
    /// to an idle worker or rejected with `QueueFull`. At most 2^20.
    pub fn queue(mut self, capacity: usize) -> Self {
        self.queue = capacity;
        self
    }

    /// How long a caller waits for one attempt, measured from the call, time
    /// in the queue included. The job sees what is left of it in
    /// [`CallContext::remaining`]. Default 1 s; must be greater than zero and
    /// at most one day.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The circuit breaker's configuration. Default [`BreakerConfig::default`]
    /// (Resilience4j's defaults).
    pub fn breaker(mut self, config: BreakerConfig) -> Self {
        self.breaker = config;
        self
    }

    /// How [`Dependency::call_retry`] retries. Default [`Retry::new`] (3
    /// attempts, 50 ms to 1 s backoff, 20 % budget). Plain
    /// [`call`](Dependency::call) never retries.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// The clock of the breaker (open periods, time windows), of the elapsed
    /// times recorded on it (slow calls), and of the retry budget. Default
    /// [`SystemClock`].
    ///
    /// Deadlines, backoff sleeps and the service-time estimate stay on real
    /// time whatever the clock, because waiting is real: with a
    /// [`ManualClock`](crate::ManualClock), a test moves the breaker through
    /// its states without sleeping, and a hung job still times out at its
    /// real deadline.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = if (&clock as &dyn Any).is::<SystemClock>() { None } else { Some(Arc::new(clock)) };
        self
    }

    /// The clock, already shared. Default [`SystemClock`].
    pub fn clock_arc(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The stack size of each worker thread, in bytes. Default: the standard
    /// library's (2 MiB unless `RUST_MIN_STACK` says otherwise); at least
    /// 64 KiB.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Whether to reject at once, with
    /// [`Rejection::DeadlineUnmeetable`], a call whose estimated queue wait
    /// already exceeds its deadline. Default `true`.
    ///
    /// The estimate is `queued / workers x` the recent mean time a job runs
    /// (an exponentially weighted moving average of finished jobs), and it is
    /// consulted only while the queue is not empty. Such a call could only
    /// time out; rejecting it frees the request thread at once and adds no
    /// load. It is not a provider failure and is not recorded by the breaker.
    /// With a queue of 0 nothing ever waits, and the check is skipped.
    pub fn deadline_aware_admission(mut self, enabled: bool) -> Self {
        self.admission = enabled;
        self
    }

    /// Adds a listener for the dependency's [`Event`]s. Default none. May be
    /// called more than once; listeners run in the order they were added.
    pub fn on_event(mut self, listener: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// Validates every field and starts the worker threads.
    ///
    /// The error names the field as its setter spells it: `name` (empty),
    /// `workers`, `queue`, `deadline`, `stack_size`, the breaker's own fields
    /// (`failure_rate`, ...) and `retry.*`.
    pub fn build(self) -> Result<Dependency, ConfigError> {
        // `name`, `workers`, `queue` and `stack_size` are the pool's to check.
        if self.deadline.is_zero() || self.deadline > MAX_DEADLINE {
            return Err(ConfigError::new(
                "deadline",
                "greater than zero and at most one day",
                format_args!("{:?}", self.deadline),
            ));
        }
        self.breaker.validate()?;
        self.retry.validate()?;

        let mut pool = Pool::builder(self.name.clone()).workers(self.workers).queue(self.queue);
        if let Some(bytes) = self.stack_size {
            pool = pool.stack_size(bytes);
        }
        let pool = pool.build()?;
        let listeners: Arc<[Listener]> = self.listeners.into();
        let clock = self.clock.clone().unwrap_or_else(|| Arc::new(SystemClock));
        let breaker = Breaker::with_clock(self.name.clone(), self.breaker.clone(), clock)?;
        crate::trace::watch_transitions(&breaker);
        if !listeners.is_empty() {
            let listeners = Arc::clone(&listeners);
            breaker.on_transition(move |t| {
                let event = Event::Transition(t.clone());
                listeners.iter().for_each(|l| l(&event));
            });
        }
        let now = self.clock.as_ref().map_or_else(Instant::now, |c| c.now());
        Ok(Dependency {
            inner: Arc::new(Inner {
                name: self.name.as_str().into(),
                deadline: self.deadline,
                slow_call_duration: self.breaker.slow_call_duration,
                // A hand-off pool (queue 0) never has work queued: nothing to estimate.
                admission: self.admission && self.queue > 0,
                budget: RetryBudget::new(&self.retry, now),
                retry: self.retry,
                jitter: Jitter::new(),
                counters: Counters::default(),
                service: Arc::new(ServiceTime::default()),
                clock: self.clock,
                listeners,
                breaker,
                pool,
            }),
        })
    }
}

/// One downstream dependency: its own circuit breaker, its own bounded worker
/// pool, and a deadline on every call.
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
///     .deadline(Duration::from_secs(3))
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
    deadline: Duration,
    slow_call_duration: Duration,
    admission: bool,
    retry: Retry,
    budget: RetryBudget,
    jitter: Jitter,
    counters: Counters,
    service: Arc<ServiceTime>,
    clock: Option<Arc<dyn Clock>>,
    listeners: Arc<[Listener]>,
    breaker: Breaker,
    pool: Pool,
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

/// The recent mean time a job runs on a worker, for deadline-aware admission.
///
/// Workers update it when a job returns (abandoned jobs included: their run
/// time is exactly what the next caller would wait behind), callers read it.
/// It is an exponentially weighted moving average with weight 1/4 for each new
/// sample, kept as nanoseconds in one atomic; 0 means "no sample yet", and a
/// first sample replaces it. `Relaxed` throughout: it is a single value that
/// publishes nothing else, and a stale read only makes one estimate a little
/// older.
///
/// Timing a job costs two clock reads and an atomic update on the worker,
/// between the job and its answer. That is noise next to a slow job and a
/// third of the overhead of a fast one, so fast jobs are sampled: while the
/// mean is under [`SAMPLE_ALL_FROM`](Self::SAMPLE_ALL_FROM) one job in
/// [`SAMPLE_EVERY`](Self::SAMPLE_EVERY) is timed, and
/// from there on every job. A fast mean only matters to admission behind a
/// very deep queue, and a slowdown is caught by the next sample, which lifts
/// the mean over the threshold at once (a 1 s sample moves a 1 ms mean to
/// 250 ms), after which every job is timed.
///
/// It cannot lock a dependency out: admission consults it only while the queue
/// is non-empty, the queue drains as workers finish, and finished jobs bring
/// fresh samples.
#[derive(Debug, Default)]
struct ServiceTime {
    ewma_ns: AtomicU64,
    /// Calls made through this dependency, for sampling one in
    /// [`SAMPLE_EVERY`](Self::SAMPLE_EVERY). Per dependency, so that a caller
    /// alternating between two dependencies samples both.
    tick: AtomicU32,
}

impl ServiceTime {
    /// From this mean (in nanoseconds, 1 ms) on, every job is timed.
    const SAMPLE_ALL_FROM: u64 = 1_000_000;
    /// Below it, one job in this many is.
    const SAMPLE_EVERY: u32 = 8;

    /// Whether the job about to be submitted should be timed.
    fn should_sample(&self) -> bool {
        let mean = self.ewma_ns.load(Ordering::Relaxed);
        if mean == 0 || mean >= Self::SAMPLE_ALL_FROM {
            return true;
        }
        self.tick.fetch_add(1, Ordering::Relaxed).wrapping_add(1).is_multiple_of(Self::SAMPLE_EVERY)
    }

    fn record(&self, sample: Duration) {
        let sample = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX).max(1);
        let _ = self.ewma_ns.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some(if old == 0 {
                sample
            } else {
                // old + (sample - old) / 4, in i128 to keep the sign and avoid overflow.
                let next = i128::from(old) + (i128::from(sample) - i128::from(old)) / 4;
                next.clamp(1, i128::from(u64::MAX)) as u64
            })
        });
    }

    fn mean(&self) -> Option<Duration> {
        match self.ewma_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
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
        DependencyBuilder {
            name: name.into(),
            workers: 10,
            queue: 0,
            deadline: Duration::from_secs(1),
            breaker: BreakerConfig::default(),
            retry: Retry::default(),
            clock: None,
            stack_size: None,
            admission: true,
            listeners: Vec::new(),
        }
    }

    /// Runs `job` once on a worker, through the breaker and under the
    /// deadline. `Ok` is a success; an error is classified by its
    /// [`Classify`] implementation.
    ///
    /// Returns at once when rejected, and never later than the deadline
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
    /// are never recorded. The classifier runs on the calling thread and must
    /// not panic (the attempt would go uncounted).
    pub fn call_with<T, E, F, C>(&self, classify: C, job: F) -> Result<T, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        C: Fn(&Result<T, E>) -> Verdict,
    {
        let now = Instant::now();
        self.attempt(now, now + self.inner.deadline, 1, &classify, job).0
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
        let inner = &*self.inner;
        let retry = &inner.retry;
        let job = Arc::new(job);
        let mut now = Instant::now();
        let overall = retry.get_overall_timeout().and_then(|t| now.checked_add(t));
        inner.budget.deposit(inner.clock_now(now));

        let mut attempt = 1;
        loop {
            let mut deadline = now + inner.deadline;
            if let Some(overall) = overall {
                deadline = deadline.min(overall);
            }
            let shared = Arc::clone(&job);
            let (result, verdict) = self.attempt(now, deadline, attempt, &classify, move |ctx| shared(ctx));
            // A panic is a failure to the breaker, but a bug in the job, not a transient
            // fault of the provider: running it again would only panic again.
            let panicked = matches!(result, Err(Error::Panicked(_)));
            if verdict != Some(Verdict::Failure) || panicked || attempt >= retry.get_max_attempts() {
                return result;
            }
            let pause = inner.jitter.upto(retry.backoff_cap(attempt));
            now = Instant::now();
            // The overall deadline bounds the sleep *and* leaves the next attempt some time:
            // a backoff that ends at or past it would only buy an attempt with no time at all.
            if overall.is_some_and(|o| now.checked_add(pause).is_none_or(|end| end >= o)) {
                log::debug!("dependency {}: no retry, the overall timeout is near", inner.name);
                return result;
            }
            if !inner.budget.try_withdraw(inner.clock_now(now)) {
                log::debug!("dependency {}: no retry, the retry budget is spent", inner.name);
                return result;
            }
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
            now = Instant::now();
            // A sleep may overshoot: if it ate the rest of the overall timeout, the
            // failure that caused the retry is the answer, not a rejection of an
            // attempt that had no time left.
            if overall.is_some_and(|o| now >= o) {
                return result;
            }
            drop(result);
            attempt += 1;
            inner.counters.retried();
        }
    }

    /// One attempt: permit, admission, submit, wait, classify, record. `now`
    /// and `deadline` are real time; the elapsed time recorded on the breaker
    /// is the injected clock's. Returns the outcome and the verdict recorded
    /// on the breaker (`None` when the attempt was rejected and nothing was
    /// recorded).
    fn attempt<T, E, F, C>(
        &self,
        now: Instant,
        deadline: Instant,
        attempt: u32,
        classify: &C,
        job: F,
    ) -> (Result<T, Error<E>>, Option<Verdict>)
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        C: Fn(&Result<T, E>) -> Verdict,
    {
        let inner = &*self.inner;
        let start = inner.clock_now(now);
        let permit = match inner.breaker.try_acquire() {
            Ok(permit) => permit,
            Err(_) => return (Err(self.rejected(Rejection::CircuitOpen)), None),
        };
        if inner.admission && self.deadline_unmeetable(now, deadline) {
            // Dropping the permit releases it as ignored (and hands a half-open probe slot
            // back): the provider was never asked.
            drop(permit);
            return (Err(self.rejected(Rejection::DeadlineUnmeetable)), None);
        }

        let timer = inner.service.should_sample().then(|| Arc::clone(&inner.service));
        // Feature "tracing": the job runs in a span whose parent is the caller's span.
        let parent_span = crate::trace::capture();
        let timed = move |ctx: &CallContext| {
            let _span = crate::trace::enter(parent_span, ctx);
            let Some(timer) = timer else { return job(ctx) };
            let began = Instant::now();
            let result = job(ctx);
            timer.record(began.elapsed());
            result
        };
        let ticket = match inner.pool.submit_attempt(deadline, attempt, timed) {
            Ok(ticket) => ticket,
            Err(refused) => {
                drop(permit);
                return (Err(self.rejected(refused.rejection())), None);
            }
        };

        let answer = ticket.wait();
        let elapsed = inner.clock_now(Instant::now()).saturating_duration_since(start);
        let (result, verdict, outcome) = match answer {
            Ok(value) => Self::classified(classify, Ok(value)),
            Err(Error::Failed(e)) => Self::classified(classify, Err(e)),
            Err(Error::Timeout { waited }) => {
                log::debug!("dependency {}: no answer within {waited:?}", inner.name);
                crate::trace::timed_out(&inner.name, waited);
                (Err(Error::Timeout { waited }), Verdict::Failure, Outcome::TimedOut)
            }
            Err(Error::Panicked(msg)) => (Err(Error::Panicked(msg)), Verdict::Failure, Outcome::Panicked),
            Err(Error::Rejected(rejection)) => {
                // Shutdown answered a queued job: not the provider's doing.
                drop(permit);
                return (Err(self.rejected(rejection)), None);
            }
        };
        inner.counters.outcome(outcome);
        if verdict != Verdict::Ignore && elapsed > inner.slow_call_duration {
            inner.counters.slow();
        }
        // The only place this attempt's permit is recorded: on the calling thread, once.
        permit.record(verdict, elapsed);
        // Listeners hear of a timeout only once it is counted and recorded, so that
        // a slow or panicking listener cannot change what the breaker saw.
        if let Err(Error::Timeout { waited }) = &result {
            let waited = *waited;
            self.emit(|| Event::TimedOut { dependency: Arc::clone(&inner.name), waited });
        }
        (result, Some(verdict))
    }

    /// The job's own outcome, its verdict and its kind.
    fn classified<T, E, C>(classify: &C, result: Result<T, E>) -> (Result<T, Error<E>>, Verdict, Outcome)
    where
        C: Fn(&Result<T, E>) -> Verdict,
    {
        let verdict = classify(&result);
        let outcome = match verdict {
            Verdict::Success => Outcome::Successful,
            Verdict::Failure => Outcome::Failed,
            Verdict::Ignore => Outcome::Ignored,
        };
        (result.map_err(Error::Failed), verdict, outcome)
    }

    /// Counts, logs and announces a rejection, and returns it as an error.
    fn rejected<E>(&self, rejection: Rejection) -> Error<E> {
        let inner = &*self.inner;
        inner.counters.outcome(match rejection {
            Rejection::CircuitOpen => Outcome::NotPermitted,
            Rejection::QueueFull => Outcome::QueueFull,
            Rejection::DeadlineUnmeetable => Outcome::RejectedDeadline,
            Rejection::ShuttingDown => Outcome::ShuttingDown,
        });
        log::debug!("dependency {}: call rejected: {rejection}", inner.name);
        crate::trace::rejected(&inner.name, rejection);
        self.emit(|| Event::Rejected { dependency: Arc::clone(&inner.name), rejection });
        Error::Rejected(rejection)
    }

    /// Delivers an event to every listener. A panicking listener is logged and
    /// skipped: it must not unwind through a caller whose outcome is already
    /// decided.
    fn emit(&self, event: impl FnOnce() -> Event) {
        let listeners = &self.inner.listeners;
        if !listeners.is_empty() {
            let event = event();
            for listener in listeners.iter() {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| listener(&event))).is_err() {
                    log::error!("dependency {}: an event listener panicked", self.inner.name);
                }
            }
        }
    }

    /// `true` when work is queued and the estimated wait behind it is longer
    /// than what is left of the deadline.
    fn deadline_unmeetable(&self, now: Instant, deadline: Instant) -> bool {
        let inner = &*self.inner;
        // The mean first: one load, and no estimate at all before the first job ends.
        let Some(mean) = inner.service.mean() else { return false };
        let queued = inner.pool.stats().queued;
        if queued == 0 {
            return false;
        }
        let workers = inner.pool.workers().max(1);
        let wait = mean.saturating_mul(u32::try_from(queued).unwrap_or(u32::MAX)) / workers as u32;
        wait > deadline.saturating_duration_since(now)
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

    /// The per-attempt deadline.
    pub fn deadline(&self) -> Duration {
        self.inner.deadline
    }

    /// Its retry configuration.
    pub fn retry(&self) -> &Retry {
        &self.inner.retry
    }

    /// Whether deadline-aware admission is on (never with a queue of 0).
    pub fn deadline_aware_admission(&self) -> bool {
        self.inner.admission
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
            deadline: inner.deadline,
            mean_service_time: inner.service.mean(),
        }
    }

    /// Stops admitting calls (they are answered `ShuttingDown`, counted as
    /// `shutting_down` and never recorded by the breaker) and lets running and
    /// queued work finish within `grace`. Idempotent. Returns `true` when every
    /// worker thread has been joined (see [`Pool::shutdown`]).
    pub fn shutdown(&self, grace: Duration) -> bool {
        self.inner.pool.shutdown(grace)
    }
}

impl fmt::Debug for Dependency {
    /// Never blocks.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("Dependency")
            .field("name", &inner.name)
            .field("deadline", &inner.deadline)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_time_starts_empty_then_averages() {
        let s = ServiceTime::default();
        assert_eq!(s.mean(), None);
        s.record(Duration::from_millis(100));
        assert_eq!(s.mean(), Some(Duration::from_millis(100)));
        s.record(Duration::from_millis(500));
        assert_eq!(s.mean(), Some(Duration::from_millis(200)));
        s.record(Duration::from_millis(200));
        assert_eq!(s.mean(), Some(Duration::from_millis(200)));
        s.record(Duration::from_millis(40));
        assert_eq!(s.mean(), Some(Duration::from_millis(160)));
        // A zero-length job still counts (as 1 ns), so the mean never reads as "no sample".
        let z = ServiceTime::default();
        z.record(Duration::ZERO);
        assert_eq!(z.mean(), Some(Duration::from_nanos(1)));
    }

    #[test]
    fn fast_jobs_are_sampled_slow_ones_all_timed() {
        let s = ServiceTime::default();
        assert!((0..20).all(|_| s.should_sample()), "no sample yet: time every job");
        s.record(Duration::from_micros(50));
        let sampled = (0..800).filter(|_| s.should_sample()).count();
        assert_eq!(sampled, 100, "one in eight below 1 ms");
        s.record(Duration::from_secs(1));
        assert!(s.mean().unwrap() >= Duration::from_millis(1));
        assert!((0..20).all(|_| s.should_sample()), "from 1 ms on: every job");
    }
}
