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

mod call;
// Public (and re-exported, hidden) only for the loom model in tests/loom_pool.rs.
#[cfg(loom)]
pub mod slot;
#[cfg(not(loom))]
mod slot;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::Release};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use parking_lot::{Mutex, RwLock};

use self::call::{Call, QueuedJob};
pub use self::call::{CallContext, SubmitError, Ticket};
use crate::error::{ConfigError, Error, Rejection};
use crate::sync::Backoff;

/// Most workers one pool may have: far beyond any sane bulkhead, low enough to
/// catch a typo before it spawns a million threads.
const MAX_WORKERS: usize = 4096;
/// Largest queue: the queue is allocated up front, and a bulkhead's queue
/// should be a handful of jobs anyway (see the crate's capacity notes).
const MAX_QUEUE: usize = 1 << 20;
/// Smallest stack accepted: room for the unwinding machinery of a panic.
const MIN_STACK: usize = 64 * 1024;
const DEFAULT_WORKERS: usize = 10;
const DEFAULT_DROP_GRACE: Duration = Duration::from_secs(1);

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
    pub(crate) stats: Counters,
    /// Set when shutdown's grace period is over: a worker that dequeues a job
    /// after this answers it `ShuttingDown` instead of running it.
    pub(crate) grace_over: AtomicBool,
}

/// The pool's counters, all `Relaxed`: each is a tally that publishes nothing
/// else. A caller that has its answer sees the counts its call caused, because
/// the worker counts before it settles the reply slot (a release), and the
/// caller sees the slot settled (an acquire).
///
/// Two cache lines: callers write the first, workers the second, so a call's
/// round trip does not bounce counters between the two sides.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) callers: CallerCounters,
    pub(crate) workers: WorkerCounters,
}

/// The counters callers write.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct CallerCounters {
    pub(crate) submitted: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    /// Raised by a caller that gives up on a running job, lowered by the
    /// worker when that job returns.
    pub(crate) abandoned: AtomicUsize,
}

/// The counters workers write.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct WorkerCounters {
    pub(crate) busy: AtomicUsize,
    pub(crate) completed: AtomicU64,
    pub(crate) expired: AtomicU64,
    pub(crate) panicked: AtomicU64,
    /// Worker threads started and not yet exited.
    pub(crate) live: AtomicUsize,
}

/// The handle side: the sender, and the threads to join. Dropping the last
/// `Pool` drops this, which shuts the pool down.
struct Handle {
    shared: Arc<Shared>,
    workers: usize,
    queue: usize,
    drop_grace: Duration,
    /// `None` once shutdown has begun. Submitters take the read lock for the
    /// length of one `try_send`; shutdown takes the write lock once, to drop
    /// the sender, which disconnects the queue: workers then drain what is
    /// left and exit. Readers never wait for each other, and wait for the
    /// writer only while it drops the sender.
    sender: RwLock<Option<Sender<QueuedJob>>>,
    /// Kept to read the queue length for `stats()` and to drain the queue at
    /// the end of shutdown's grace period.
    receiver: Receiver<QueuedJob>,
    control: Mutex<Control>,
}

/// The worker threads, for shutdown.
struct Control {
    /// `join` is `None` once joined.
    threads: Vec<WorkerThread>,
    /// Each worker sends its index here as it exits (capacity = workers, so
    /// that send never blocks).
    exits: Receiver<usize>,
}

struct WorkerThread {
    id: ThreadId,
    join: Option<JoinHandle<()>>,
}

/// A snapshot of a pool's gauges and counters.
///
/// Each field is read on its own from a relaxed atomic, without any lock the
/// workers need: reading stats never slows the pool down, and a snapshot taken
/// while calls are in flight can be off by the calls in flight.
///
/// # Accounting identity
///
/// Every accepted job is counted once in `submitted` and ends counted once in
/// `completed`, `panicked` or `expired`; until then it is `queued` or
/// `busy`. So, whenever no submission or job is in flight between two of its
/// steps (for instance after the callers have their answers and
/// [`Pool::shutdown`] has returned):
///
/// ```text
/// submitted == completed + panicked + expired + queued + busy
/// ```
///
/// `rejected` counts submissions turned away (never accepted, so not in
/// `submitted`); `timed_out` counts callers that gave up at the deadline (their
/// jobs are in the identity as whatever became of them); `abandoned` is the
/// part of `busy` that nobody waits for any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PoolStats {
    /// Worker threads alive: the configured number until shutdown, then fewer
    /// as they exit.
    pub workers: usize,
    /// Workers holding a job they took off the queue: running it (abandoned
    /// jobs included), or for a moment, deciding not to start it.
    pub busy: usize,
    /// Jobs waiting in the queue.
    pub queued: usize,
    /// Running jobs whose caller has timed out or gone: they hold a worker
    /// and nobody will read their answer.
    pub abandoned: usize,
    /// Jobs accepted into the queue.
    pub submitted: u64,
    /// Jobs that ran and returned (`Ok` or `Err`).
    pub completed: u64,
    /// Accepted jobs that never started: their deadline passed in the queue,
    /// their caller had gone, or shutdown discarded them (those callers got
    /// [`Rejection::ShuttingDown`]).
    pub expired: u64,
    /// Jobs that panicked.
    pub panicked: u64,
    /// Submissions turned away: queue full, shutting down, or a deadline
    /// already past.
    pub rejected: u64,
    /// Callers whose deadline passed before the answer came.
    pub timed_out: u64,
}

/// Configures a [`Pool`]; [`Pool::builder`] makes one.
#[derive(Debug, Clone)]
pub struct PoolBuilder {
    name: String,
    workers: usize,
    queue: usize,
    stack_size: Option<usize>,
    drop_grace: Duration,
}

impl PoolBuilder {
    /// Number of worker threads, fixed for the pool's life. Default 10.
    /// Must be 1 to 4096.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Jobs that may wait for a worker. Default 0: direct hand-off, a job is
    /// accepted only when a worker is idle to take it. (A worker that has just
    /// answered a call is idle a few microseconds before it is back at the
    /// queue; a hand-off submission waits for it as long as a channel receive
    /// spins, and never when every worker is busy.) At most 2^20.
    pub fn queue(mut self, q: usize) -> Self {
        self.queue = q;
        self
    }

    /// Stack size of each worker thread, in bytes. Default: the standard
    /// library's (2 MiB unless `RUST_MIN_STACK` says otherwise). At least
    /// 64 KiB.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// How long dropping the last [`Pool`] handle waits for running and
    /// queued work, as [`Pool::shutdown`]'s grace. Default 1 s.
    pub fn drop_grace(mut self, grace: Duration) -> Self {
        self.drop_grace = grace;
        self
    }

    /// Checks the settings and starts the workers.
    ///
    /// Errors name the field: `name` (empty, or containing a NUL byte),
    /// `workers`, `queue`, `stack_size`; and `workers` again if the operating
    /// system refuses to start that many threads.
    pub fn build(self) -> Result<Pool, ConfigError> {
        if self.name.is_empty() || self.name.contains('\0') {
            return Err(ConfigError::new("name", "non-empty, without NUL bytes", format!("{:?}", self.name)));
        }
        if !(1..=MAX_WORKERS).contains(&self.workers) {
            return Err(ConfigError::new("workers", "between 1 and 4096", self.workers));
        }
        if self.queue > MAX_QUEUE {
            return Err(ConfigError::new("queue", "at most 1048576", self.queue));
        }
        if let Some(s) = self.stack_size
            && s < MIN_STACK
        {
            return Err(ConfigError::new("stack_size", "at least 65536 bytes", s));
        }

        let shared = Arc::new(Shared {
            name: self.name.clone().into_boxed_str(),
            stats: Counters::default(),
            grace_over: AtomicBool::new(false),
        });
        let (sender, receiver) = crossbeam_channel::bounded(self.queue);
        let (exit_tx, exits) = crossbeam_channel::bounded(self.workers);
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(self.workers);
        let mut threads = Vec::with_capacity(self.workers);
        let mut spawn_error = None;
        for index in 0..self.workers {
            let mut builder = thread::Builder::new().name(format!("watertight-{}-{}", self.name, index));
            if let Some(s) = self.stack_size {
                builder = builder.stack_size(s);
            }
            // Counted before the thread exists, so `stats().workers` is the
            // full number as soon as `build` returns.
            shared.stats.workers.live.fetch_add(1, Relaxed);
            let exit = ExitGuard { shared: shared.clone(), index, tx: exit_tx.clone() };
            let rx = receiver.clone();
            let ready = ready_tx.clone();
            match builder.spawn(move || worker_main(rx, ready, exit)) {
                Ok(join) => threads.push(WorkerThread { id: join.thread().id(), join: Some(join) }),
                Err(e) => {
                    // The closure (and its exit guard) was dropped unrun,
                    // which already uncounted it.
                    spawn_error = Some(e);
                    break;
                }
            }
        }
        drop((exit_tx, ready_tx));
        // Wait until every worker is about to take its first job, so that a
        // hand-off pool (queue 0) accepts work as soon as `build` returns.
        // Bounded: a thread that does not start within 10 s is the system's
        // problem, and the pool works without this wait anyway.
        let started_by = Instant::now() + Duration::from_secs(10);
        for _ in 0..threads.len() {
            if ready_rx.recv_deadline(started_by).is_err() {
                break;
            }
        }
        let handle = Handle {
            shared,
            workers: self.workers,
            queue: self.queue,
            drop_grace: self.drop_grace,
            sender: RwLock::new(Some(sender)),
            receiver,
            control: Mutex::new(Control { threads, exits }),
        };
        if let Some(e) = spawn_error {
            handle.shutdown_until(Instant::now() + Duration::from_secs(1));
            return Err(ConfigError::new(
                "workers",
                "a number of threads the system can start",
                format!("{} ({e})", self.workers),
            ));
        }
        Ok(Pool { inner: Arc::new(handle) })
    }
}

impl Pool {
    /// A builder for a pool called `name` (its threads are
    /// `watertight-<name>-<i>`; on Linux the kernel shows the first 15 bytes).
    pub fn builder(name: impl Into<String>) -> PoolBuilder {
        PoolBuilder {
            name: name.into(),
            workers: DEFAULT_WORKERS,
            queue: 0,
            stack_size: None,
            drop_grace: DEFAULT_DROP_GRACE,
        }
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

    /// Submits `job` to answer by `deadline`, without blocking.
    ///
    /// On success the [`Ticket`] waits for the answer. Refused at once, with
    /// the job handed back, when the queue is full ([`Rejection::QueueFull`];
    /// with queue 0, when no worker is idle), when the pool is shutting down
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
        if deadline <= now {
            stats.callers.rejected.fetch_add(1, Relaxed);
            return Err(SubmitError::new(Rejection::DeadlineUnmeetable, job));
        }
        // The call's one allocation: job, context and reply slot together.
        let call = Arc::new(Call::new(h.shared.clone(), deadline, attempt, job));
        let queued = QueuedJob::new(call.clone());
        let refused = {
            let sender = h.sender.read();
            match sender.as_ref() {
                Some(tx) => match tx.try_send(queued) {
                    Ok(()) => None,
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
    /// Called from one of the pool's own jobs, it cannot join the worker it
    /// runs on, and returns `false`.
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
    fn shutdown_until(&self, grace_end: Instant) -> bool {
        // 1. Stop admitting, and disconnect the queue. Taking the write lock
        //    waits for submissions in the middle of `try_send`: each either
        //    got its job in before the disconnect (and a worker will answer
        //    it) or finds `None` and is refused.
        drop(self.sender.write().take());

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

/// Joins a worker that has reported its exit. `None` for the index of a
/// thread that failed to spawn (its guard reports too).
fn join_worker(w: Option<&mut WorkerThread>) {
    if let Some(join) = w.and_then(|w| w.join.take()) {
        // The worker catches every panic of its jobs; a join error could
        // only come from the worker loop itself, and there is nothing left
        // to clean up for it.
        let _ = join.join();
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

/// Held by a worker thread for its whole life; dropping it (on exit, or with
/// the unrun closure if the spawn failed) uncounts the worker and reports its
/// exit to shutdown.
struct ExitGuard {
    shared: Arc<Shared>,
    index: usize,
    tx: Sender<usize>,
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.shared.stats.workers.live.fetch_sub(1, Relaxed);
        // Capacity is one slot per worker: never blocks. Fails only when the
        // pool handle is already gone, and then nobody is waiting.
        let _ = self.tx.try_send(self.index);
    }
}

/// A worker: take a job, run it, repeat, until the queue is disconnected and
/// empty (shutdown).
fn worker_main(jobs: Receiver<QueuedJob>, ready: Sender<()>, exit: ExitGuard) {
    let busy = &exit.shared.stats.workers.busy;
    // Tell `build` this worker is about to wait for its first job.
    let _ = ready.send(());
    drop(ready);
    while let Ok(queued) = jobs.recv() {
        // Busy from the moment the job leaves the queue, so that
        // `workers - busy` counts the workers that are idle or on their way
        // back to the queue (hand-off submission relies on it). `run` uncounts.
        busy.fetch_add(1, Relaxed);
        if let Some(job) = queued.take() {
            // `run` catches the job's own panic; this catches a panic from a
            // `Drop` of the job's captures or result, so the worker survives
            // even that.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()));
        } else {
            busy.fetch_sub(1, Relaxed);
        }
    }
    drop(exit);
}

/// A hand-off (queue 0) found no worker waiting. If a worker is idle but not
/// yet back at the queue (it has just answered a call, or has just started),
/// it will be within microseconds: retry for as long as a crossbeam receive
/// spins before parking, and only while some worker is idle. With every
/// worker busy this returns at once.
fn hand_off(
    tx: &Sender<QueuedJob>,
    mut job: QueuedJob,
    workers: &WorkerCounters,
) -> Option<(Rejection, QueuedJob)> {
    let mut backoff = Backoff::new();
    loop {
        let idle = workers.live.load(Relaxed) > workers.busy.load(Relaxed);
        if !idle || backoff.is_completed() {
            return Some((Rejection::QueueFull, job));
        }
        backoff.snooze();
        match tx.try_send(job) {
            Ok(()) => return None,
            Err(TrySendError::Full(q)) => job = q,
            Err(TrySendError::Disconnected(q)) => return Some((Rejection::ShuttingDown, q)),
        }
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
        assert_eq!(std::mem::size_of::<Counters>(), 256);
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
