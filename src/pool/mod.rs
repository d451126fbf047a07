//! [`Pool`]: a fixed set of named worker threads behind a bounded queue, where
//! every job carries a deadline.
//!
//! - Submission never blocks: a full queue is [`Rejection::QueueFull`] at once,
//!   with the job handed back.
//! - The caller waits until the job's deadline and not a moment longer.
//! - A job whose deadline passed in the queue, or whose caller has gone, never
//!   starts.
//! - A job whose caller timed out keeps its worker until it returns
//!   (`abandoned`); the pool never runs more than `workers` jobs at once.
//! - A panicking job answers [`Error::Panicked`]; its worker lives on.
//! - [`shutdown`](Pool::shutdown) stops admitting, lets work finish within a
//!   grace period, answers every job it could not run, and joins the workers.
//!
//! How an answer travels from worker to caller, and how shutdown drains, is
//! described in `src/pool/README.md`; the reply slot's state machine is in
//! `slot.rs`.

mod builder;
mod call;
mod estimate;
mod stats;
mod worker;
// Public (and re-exported, hidden) only for the loom model in tests/loom_pool.rs.
#[cfg(loom)]
pub mod slot;
#[cfg(not(loom))]
mod slot;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed, Ordering::Release};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use parking_lot::{Mutex, RwLock};

pub use self::builder::PoolBuilder;
use self::call::{Call, QueuedJob};
pub use self::call::{CallContext, SubmitError, Ticket};
use self::estimate::ServiceTime;
pub use self::stats::PoolStats;
use self::stats::{PoolCounters, PoolLatency};
use self::worker::{hand_off, join_worker, wait_for_slot};

use crate::error::{Error, Rejection};
use crate::histogram::LatencyHistogram;

/// A bulkhead: `workers` fixed threads named `watertight-<name>-<i>` behind a
/// bounded queue of `queue` jobs.
///
/// `Pool` is a cheap handle (`Clone` shares it). When the last handle drops,
/// the pool shuts down with the builder's [`drop_grace`](PoolBuilder::drop_grace).
///
/// ```
/// use std::time::Duration;
/// use watertight::{Error, Pool, Rejection};
///
/// let pool = Pool::builder("fraud").workers(4).queue(2).build()?;
///
/// let score = pool.call_timeout(Duration::from_millis(500), |_ctx| Ok::<_, std::io::Error>(42));
/// assert_eq!(score.unwrap(), 42);
///
/// // A job that takes too long: the caller gets its answer at the deadline.
/// let slow = pool.call_timeout(Duration::from_millis(20), |ctx| {
///     std::thread::sleep(ctx.remaining() + Duration::from_millis(30));
///     Ok::<_, std::io::Error>(())
/// });
/// assert!(matches!(slow, Err(Error::Timeout { .. })));
///
/// pool.shutdown(Duration::from_secs(1));
/// let late = pool.call_timeout(Duration::from_millis(500), |_ctx| Ok::<_, std::io::Error>(()));
/// assert_eq!(late.unwrap_err().rejection(), Some(Rejection::ShuttingDown));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A job runs on another thread, so it must be `Send`:
///
/// ```compile_fail
/// # use std::time::Duration;
/// let pool = watertight::Pool::builder("x").build().unwrap();
/// let not_send = std::rc::Rc::new(1);
/// let _ = pool.call_timeout(Duration::from_secs(1), move |_| Ok::<_, ()>(*not_send));
/// ```
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Handle>,
}

/// Everything both the handles and the workers (and each call) share.
pub(crate) struct Shared {
    pub(crate) name: Box<str>,
    pub(crate) stats: PoolCounters,
    /// The recent mean run time of a job, timed on the workers.
    pub(crate) service: ServiceTime,
    /// Queue-wait and run-time histograms, recorded on the workers.
    pub(crate) latency: PoolLatency,
    /// Set when shutdown's grace period is over: a worker that dequeues a job
    /// after this answers it `ShuttingDown` instead of running it.
    pub(crate) grace_over: AtomicBool,
}

/// The handle side: the sender, and the threads to join. Dropping the last
/// `Pool` drops this, which shuts the pool down.
pub(super) struct Handle {
    pub(super) shared: Arc<Shared>,
    pub(super) workers: usize,
    pub(super) queue: usize,
    pub(super) drop_grace: Duration,
    /// Deadline-aware admission (see [`PoolBuilder::deadline_aware_admission`]).
    pub(super) admission: bool,
    /// How long a submission may wait for room (see [`PoolBuilder::max_wait`]).
    pub(super) max_wait: Duration,
    /// `None` once shutdown has begun. Submitters take the read lock for the
    /// length of one `try_send` (or, with `max_wait`, of one bounded
    /// `send_deadline`, so shutdown may wait up to `max_wait` for it); shutdown takes the write lock once, to drop
    /// the sender, which disconnects the queue: workers then drain what is
    /// left and exit. Readers never wait for each other, and wait for the
    /// writer only while it drops the sender.
    pub(super) sender: RwLock<Option<Sender<QueuedJob>>>,
    /// Kept to read the queue length for `stats()` and to drain the queue at
    /// the end of shutdown's grace period.
    pub(super) receiver: Receiver<QueuedJob>,
    pub(super) control: Mutex<Control>,
}

/// The worker threads, for shutdown.
pub(super) struct Control {
    /// `join` is `None` once joined.
    pub(super) threads: Vec<WorkerThread>,
    /// Each worker sends its index here as it exits (capacity = workers, so
    /// that send never blocks).
    pub(super) exits: Receiver<usize>,
}

pub(super) struct WorkerThread {
    pub(super) id: ThreadId,
    pub(super) join: Option<JoinHandle<()>>,
}

impl Pool {
    /// A builder for a pool called `name` (its threads are
    /// `watertight-<name>-<i>`; on Linux the kernel shows the first 15 bytes).
    pub fn builder(name: impl Into<String>) -> PoolBuilder {
        PoolBuilder::new(name.into())
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.inner.shared.name
    }

    /// The configured number of workers.
    pub fn workers(&self) -> usize {
        self.inner.workers
    }

    /// The configured queue capacity (0 = hand-off only).
    pub fn queue_capacity(&self) -> usize {
        self.inner.queue
    }

    /// How long a submission waits for room in a full pool before it is
    /// refused ([`PoolBuilder::max_wait`]).
    pub fn max_wait(&self) -> Duration {
        self.inner.max_wait
    }

    /// Whether deadline-aware admission is on (never with a queue of 0).
    pub fn deadline_aware_admission(&self) -> bool {
        self.inner.admission
    }

    /// What a call submitted now would wait for a worker: the jobs queued
    /// ahead of it, shared among the workers, each taking the recent mean
    /// run time ([`mean_service_time`](Self::mean_service_time)). `None`
    /// before the first job has been timed or while nothing is queued.
    ///
    /// Deadline-aware admission refuses a call whose deadline is nearer than
    /// this.
    pub fn estimated_wait(&self) -> Option<Duration> {
        self.inner.shared.service.wait_behind(self.inner.receiver.len(), self.inner.workers)
    }

    /// How long jobs waited in the queue, from submission to a worker
    /// taking them (jobs that never started are not in it).
    pub fn queue_wait_histogram(&self) -> &LatencyHistogram {
        &self.inner.shared.latency.queue_wait
    }

    /// How long jobs ran on a worker (abandoned ones included).
    pub fn run_histogram(&self) -> &LatencyHistogram {
        &self.inner.shared.latency.run
    }

    /// The recent mean time a job runs on a worker (an exponentially weighted
    /// moving average of finished jobs, abandoned ones included), `None`
    /// before the first job was timed.
    pub fn mean_service_time(&self) -> Option<Duration> {
        self.inner.shared.service.mean()
    }

    /// Submits `job` to answer within `timeout` from now.
    /// See [`submit_deadline`](Pool::submit_deadline).
    pub fn submit_timeout<T, E, F>(&self, timeout: Duration, job: F) -> Result<Ticket<T, E>, SubmitError<F>>
    where
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let now = Instant::now();
        self.submit_at(now, deadline_after(now, timeout), 1, job)
    }

    /// Submits `job` to answer by `deadline`, without blocking (or, with a
    /// [`max_wait`](PoolBuilder::max_wait), blocking at most that long for
    /// room).
    ///
    /// On success the [`Ticket`] waits for the answer. Refused, with
    /// the job handed back, when the queue is full ([`Rejection::QueueFull`];
    /// with queue 0, when no worker is idle; with `max_wait`, when none came
    /// free within it or before the deadline), when the pool is shutting down
    /// ([`Rejection::ShuttingDown`]), or when `deadline` has already passed
    /// ([`Rejection::DeadlineUnmeetable`]). (With queue 0 and a worker idle
    /// but not yet back at the queue, it spins and yields for a few
    /// microseconds for that worker; see [`PoolBuilder::queue`].)
    pub fn submit_deadline<T, E, F>(&self, deadline: Instant, job: F) -> Result<Ticket<T, E>, SubmitError<F>>
    where
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.submit_at(Instant::now(), deadline, 1, job)
    }

    /// [`submit_deadline`](Pool::submit_deadline) for attempt number
    /// `attempt` (1-based) of a call, shown to the job by
    /// [`CallContext::attempt`].
    #[allow(dead_code)] // the dependency layer's entry point
    pub(crate) fn submit_attempt<T, E, F>(
        &self,
        deadline: Instant,
        attempt: u32,
        job: F,
    ) -> Result<Ticket<T, E>, SubmitError<F>>
    where
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.submit_at(Instant::now(), deadline, attempt.max(1), job)
    }

    fn submit_at<T, E, F>(
        &self,
        now: Instant,
        deadline: Instant,
        attempt: u32,
        job: F,
    ) -> Result<Ticket<T, E>, SubmitError<F>>
    where
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let h = &*self.inner;
        let stats = &h.shared.stats;
        // A deadline already past, or (with admission on) one nearer than the
        // wait behind the queued work: the job could only time out.
        if deadline <= now || (h.admission && self.estimated_wait().is_some_and(|w| w > deadline - now)) {
            stats.callers.rejected.fetch_add(1, Relaxed);
            return Err(SubmitError::new(Rejection::DeadlineUnmeetable, job));
        }
        // The call's one allocation: job, context and reply slot together.
        let call = Arc::new(Call::new(h.shared.clone(), now, deadline, attempt, job));
        let queued = QueuedJob::new(call.clone());
        let refused = {
            let sender = h.sender.read();
            match sender.as_ref() {
                Some(tx) => match tx.try_send(queued) {
                    Ok(()) => None,
                    Err(TrySendError::Full(q)) if !h.max_wait.is_zero() => {
                        let until = deadline.min(deadline_after(now, h.max_wait));
                        wait_for_slot(tx, q, until, &stats.callers.waiting)
                    }
                    Err(TrySendError::Full(q)) if h.queue == 0 => hand_off(tx, q, &stats.workers),
                    Err(TrySendError::Full(q)) => Some((Rejection::QueueFull, q)),
                    Err(TrySendError::Disconnected(q)) => Some((Rejection::ShuttingDown, q)),
                },
                None => Some((Rejection::ShuttingDown, queued)),
            }
        };
        match refused {
            None => {
                stats.callers.submitted.fetch_add(1, Relaxed);
                Ok(Ticket::new(call, now))
            }
            Some((rejection, queued)) => {
                stats.callers.rejected.fetch_add(1, Relaxed);
                // Defuse the queue wrapper (dropping it would answer the
                // call), so `call` is the only reference left again.
                drop(queued.take());
                let job = Arc::try_unwrap(call).ok().and_then(Call::into_job);
                Err(SubmitError::new(
                    rejection,
                    job.expect("a refused job is referenced only by its submitter"),
                ))
            }
        }
    }

    /// Runs `job` on the pool and waits for its answer for at most `timeout`.
    /// A refused submission is `Err(Rejected(_))` (the job is dropped).
    pub fn call_timeout<T, E, F>(&self, timeout: Duration, job: F) -> Result<T, Error<E>>
    where
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let now = Instant::now();
        self.submit_at(now, deadline_after(now, timeout), 1, job)?.wait()
    }

    /// Runs `job` on the pool and waits for its answer until `deadline`.
    pub fn call_deadline<T, E, F>(&self, deadline: Instant, job: F) -> Result<T, Error<E>>
    where
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.submit_deadline(deadline, job)?.wait()
    }

    /// A snapshot of the pool's gauges and counters; takes no lock.
    pub fn stats(&self) -> PoolStats {
        let s = &self.inner.shared.stats;
        PoolStats {
            workers: s.workers.live.load(Relaxed),
            busy: s.workers.busy.load(Relaxed),
            queued: self.inner.receiver.len(),
            abandoned: s.callers.abandoned.load(Relaxed),
            waiting: s.callers.waiting.load(Relaxed),
            submitted: s.callers.submitted.load(Relaxed),
            completed: s.workers.completed.load(Relaxed),
            expired: s.workers.expired.load(Relaxed),
            panicked: s.workers.panicked.load(Relaxed),
            rejected: s.callers.rejected.load(Relaxed),
            timed_out: s.callers.timed_out.load(Relaxed),
        }
    }

    /// `true` once [`shutdown`](Pool::shutdown) has begun.
    pub fn is_shut_down(&self) -> bool {
        self.inner.sender.read().is_none()
    }

    /// Stops the pool: admits nothing more, lets running and queued work
    /// finish within `grace`, answers every job still queued after that with
    /// [`Rejection::ShuttingDown`], and joins the workers.
    ///
    /// Returns `true` when every worker thread has been joined. A worker still
    /// inside a job when the grace period ends cannot be joined without
    /// blocking for as long as that job hangs, so it is left running
    /// (detached): it delivers its job's answer if anyone still waits, finds
    /// the queue empty and closed, and exits. Calling `shutdown` again (it is
    /// idempotent) waits for such stragglers once more, up to the new grace.
    ///
    /// Called from one of the pool's own jobs, it stops admitting and returns
    /// `false` at once: a worker cannot join itself, and waiting for the
    /// others (or for a concurrent `shutdown`) from inside a job would hold
    /// that job's caller for the whole grace period. The other workers still
    /// drain the queue and exit; a later `shutdown` from outside joins them.
    ///
    /// Never blocks longer than `grace` (plus the time to join threads that
    /// have already finished), except that concurrent calls run one after
    /// the other.
    pub fn shutdown(&self, grace: Duration) -> bool {
        let now = Instant::now();
        self.inner.shutdown_until(deadline_after(now, grace))
    }
}

impl Handle {
    pub(super) fn shutdown_until(&self, grace_end: Instant) -> bool {
        // 1. Stop admitting, and disconnect the queue. Taking the write lock
        //    waits for submissions in the middle of `try_send`: each either
        //    got its job in before the disconnect (and a worker will answer
        //    it) or finds `None` and is refused.
        drop(self.sender.write().take());
        if worker::runs_on_worker_of(&self.shared) {
            log::debug!(
                "pool {}: shutdown from one of its own jobs; not waiting for the workers",
                self.shared.name
            );
            return false;
        }

        let mut control = self.control.lock();
        let me = thread::current().id();
        // 2. Let workers drain the queue and exit, until the grace ends.
        //    Each exiting worker reports its index; join it right away.
        loop {
            let pending = control.threads.iter().any(|w| w.join.is_some() && w.id != me);
            if !pending {
                break;
            }
            match control.exits.recv_deadline(grace_end) {
                Ok(i) => join_worker(control.threads.get_mut(i)),
                Err(_) => break,
            }
        }
        // 3. Grace over: whatever is still queued will not run. Workers that
        //    dequeue a job from now on answer it `ShuttingDown`; we answer
        //    the rest here (dropping a `QueuedJob` answers it).
        self.shared.grace_over.store(true, Release);
        while let Ok(job) = self.receiver.try_recv() {
            drop(job);
        }
        // 4. Join whoever exited meanwhile; the rest stay detached.
        while let Ok(i) = control.exits.try_recv() {
            join_worker(control.threads.get_mut(i));
        }
        let stuck = control.threads.iter().filter(|w| w.join.is_some()).count();
        if stuck > 0 {
            log::warn!(
                "pool {}: {stuck} worker(s) still inside a job after the shutdown grace period; left running detached",
                self.shared.name
            );
        }
        stuck == 0
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let grace_end = deadline_after(Instant::now(), self.drop_grace);
        self.shutdown_until(grace_end);
        // Dropping the remaining `JoinHandle`s detaches stuck workers.
    }
}

impl fmt::Debug for Pool {
    /// Never blocks: reads the counters only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("name", &self.name())
            .field("workers", &self.workers())
            .field("queue", &self.queue_capacity())
            .field("stats", &self.stats())
            .finish()
    }
}

/// `now + d`, or a far-future instant when that overflows `Instant`.
fn deadline_after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or_else(|| {
        // About 30 years: effectively no deadline, and still representable.
        now.checked_add(Duration::from_secs(30 * 365 * 24 * 3600)).unwrap_or(now)
    })
}

fn _assert_send_sync() {
    fn send_sync<X: Send + Sync>() {}
    send_sync::<Pool>();
    send_sync::<CallContext>();
    send_sync::<Ticket<u8, std::io::Error>>();
    send_sync::<PoolStats>();
}

#[cfg(test)]
mod tests {
    use super::builder::{MAX_QUEUE, MAX_WORKERS};
    use super::stats::CallerCounters;
    use super::*;

    #[test]
    fn builder_validates_each_field() {
        let e = Pool::builder("p").workers(0).build().unwrap_err();
        assert_eq!(e.field(), "workers");
        let e = Pool::builder("p").workers(MAX_WORKERS + 1).build().unwrap_err();
        assert_eq!(e.field(), "workers");
        let e = Pool::builder("p").queue(MAX_QUEUE + 1).build().unwrap_err();
        assert_eq!(e.field(), "queue");
        let e = Pool::builder("p").stack_size(1024).build().unwrap_err();
        assert_eq!(e.field(), "stack_size");
        let e = Pool::builder("").build().unwrap_err();
        assert_eq!(e.field(), "name");
    }

    #[test]
    fn deadline_after_never_overflows() {
        let now = Instant::now();
        assert!(deadline_after(now, Duration::MAX) > now + Duration::from_secs(3600));
        assert_eq!(deadline_after(now, Duration::from_millis(5)), now + Duration::from_millis(5));
    }

    #[test]
    fn stats_default_is_zero_and_counters_split_cache_lines() {
        assert_eq!(PoolStats::default().submitted, 0);
        assert_eq!(std::mem::align_of::<CallerCounters>(), 128);
        assert_eq!(std::mem::size_of::<PoolCounters>(), 256);
    }

    #[test]
    fn attempt_reaches_the_job() {
        let pool = Pool::builder("att").workers(1).queue(1).build().unwrap();
        let t = pool
            .submit_attempt(Instant::now() + Duration::from_secs(5), 3, |ctx| Ok::<_, ()>(ctx.attempt()))
            .unwrap();
        assert_eq!(t.wait().unwrap(), 3);
    }

    #[test]
    fn expired_deadline_is_refused_at_once() {
        let pool = Pool::builder("past").workers(1).build().unwrap();
        let err = pool.submit_deadline(Instant::now(), |_| Ok::<(), ()>(())).unwrap_err();
        assert_eq!(err.rejection(), Rejection::DeadlineUnmeetable);
        assert_eq!(pool.stats().rejected, 1);
        assert_eq!(pool.stats().submitted, 0);
    }

    #[test]
    fn shutdown_from_inside_a_job_does_not_deadlock() {
        let pool = Pool::builder("self").workers(2).queue(1).build().unwrap();
        let inner = pool.clone();
        let joined_all = pool
            .call_timeout(Duration::from_secs(10), move |_| {
                Ok::<_, ()>(inner.shutdown(Duration::from_millis(200)))
            })
            .unwrap();
        // It cannot join the worker it runs on.
        assert!(!joined_all);
        assert!(pool.is_shut_down());
        // Now from outside, everything joins.
        assert!(pool.shutdown(Duration::from_secs(10)));
        assert_eq!(pool.stats().workers, 0);
    }

    #[test]
    fn last_handle_dropped_inside_a_job_does_not_deadlock() {
        let pool =
            Pool::builder("lasthd").workers(1).queue(1).drop_grace(Duration::from_secs(5)).build().unwrap();
        let (tx, rx) = crossbeam_channel::bounded::<Pool>(1);
        let ticket = pool
            .submit_timeout(Duration::from_secs(10), move |_| {
                let last = rx.recv().map_err(|_| ())?;
                let started = Instant::now();
                // Shuts the pool down from its only worker: must not wait
                // for itself.
                drop(last);
                Ok::<_, ()>(started.elapsed())
            })
            .unwrap();
        tx.send(pool).unwrap();
        let took = ticket.wait().unwrap();
        assert!(took < Duration::from_secs(2), "dropping the last handle in a job took {took:?}");
    }
}
