//! [`Pool`]: a fixed set of named worker threads behind a bounded queue, where
//! every job carries a deadline. A [`Dependency`](crate::Dependency) puts one
//! behind its breaker; it also works alone, with one way in, [`Pool::submit`]
//! and its options ([`Submit`]) (`submit_timeout` and `call_timeout` are short
//! forms).
//!
//! # Pool and deadline
//!
//! - Workers are fixed, the queue is bounded, and submission never blocks: a
//!   full queue is [`QueueFull`](crate::Rejection::QueueFull) at once (the job
//!   handed back: [`SubmitError::into_job`]), unless the caller may wait.
//! - The deadline covers the queue wait and the run. A job whose deadline
//!   passed in the queue, or whose caller has gone, never starts (`expired`).
//!   A call whose deadline the queued work would outlast is refused at once
//!   ([`DeadlineUnmeetable`](crate::Rejection::DeadlineUnmeetable)).
//! - The job sees what is left ([`CallContext::remaining`]) and makes it its
//!   own I/O timeout (below). A worker cannot be killed: work whose caller
//!   timed out is *abandoned* (and counted so) and keeps its worker until it
//!   returns, so the pool never runs more than `workers` jobs.
//! - A panicking job answers [`Error::Panicked`](crate::Error::Panicked); its
//!   worker lives on. [`Pool::shutdown`] lets work finish within the grace
//!   and answers every caller still queued.
//!
//! # Waiting for room, by time
//!
//! A caller that finds every worker busy and the queue full waits for room when
//! the wait it can expect fits [`max_wait`](PoolBuilder::max_wait) and its
//! deadline: the recent mean run time times the rounds of `workers` calls ahead
//! of it. No count of waiters caps the line; a caller whose wait would pass
//! `max_wait` is refused `QueueFull` at once. A line that has stood longer than
//! `max_wait` is a standing queue, not a burst (a break shorter than one round
//! does not end it): then a caller joins only if room comes within one round.
//! So a healthy burst that drains within `max_wait` is let through (size it by
//! the drain time, `callers / workers x latency`), and in a brownout the line
//! empties back to `workers + queue`. A line where every worker has been inside
//! its call for three normal latencies, none finished, does not move: callers
//! are refused and waiters leave (the [hang rules](crate::dependency#a-hang-is-caught-within-one-timeout)).
//!
//! **A deadline is a timeout.** A caller whose own deadline ends a wait (for
//! room, a caller-thread permit or a rate permit) gets
//! [`Error::Timeout`](crate::Error::Timeout), recorded by no breaker: the
//! provider was never asked. `QueueFull` is a wait `max_wait` ended.
//!
//! # Clients that are not ureq
//!
//! With ureq, [`WithDeadline`](crate::http::WithDeadline) turns the call's
//! deadline into the request's own timeouts. Any other client needs the same,
//! or a hung provider holds the worker past the deadline.
//! [`CallContext::io_timeout`] is the time left, never zero (a zero socket
//! timeout means none), or an [`io::ErrorKind::TimedOut`](std::io::ErrorKind::TimedOut)
//! error once the call is late: set it before each blocking step.
//! [`CallContext::on_cancel`] runs a closure once, off the worker, when the
//! deadline passes or the caller leaves (a fan-out dropped the leg, a hedge
//! won) while the job still runs: a `shutdown` of a socket's clone wakes a
//! `read` blocked on it.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use std::net::{Shutdown, TcpStream};
//! use std::time::Duration;
//! use watertight::{CallContext, Dependency};
//!
//! let redis = Dependency::builder("redis").workers(4).timeout(Duration::from_millis(50)).build()?;
//! let reply = redis.call(|ctx: &CallContext| -> std::io::Result<Vec<u8>> {
//!     let mut conn = TcpStream::connect_timeout(&"127.0.0.1:6379".parse().unwrap(), ctx.io_timeout()?)?;
//!     let other = conn.try_clone()?;
//!     ctx.on_cancel(move || drop(other.shutdown(Shutdown::Both)));
//!     conn.set_write_timeout(Some(ctx.io_timeout()?))?;
//!     conn.write_all(b"GET alice\r\n")?;
//!     conn.set_read_timeout(Some(ctx.io_timeout()?))?;
//!     let mut reply = vec![0; 512];
//!     let n = conn.read(&mut reply)?;
//!     reply.truncate(n);
//!     Ok(reply)
//! });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **PostgreSQL.** A socket timeout frees the worker, but the server goes on:
//! set `statement_timeout` per query from what is left, and cancel the query
//! when the call is cancelled. Drop a connection whose call timed out (a reply
//! may be on its way), never hand it back to a pool. To ignore a violated
//! constraint (SQLSTATE `23...`) as a 4xx, give the call a classifier.
//!
//! ```no_run
//! use std::time::Duration;
//! use postgres::{Config, NoTls};
//! use watertight::{CallContext, Dependency};
//!
//! type BoxError = Box<dyn std::error::Error + Send + Sync>;
//! let orders = Dependency::builder("orders-db").workers(4).timeout(Duration::from_millis(800)).build()?;
//! let count = orders.call(|ctx: &CallContext| -> Result<i64, BoxError> {
//!     let mut client = Config::new().host("db").user("app").connect_timeout(ctx.io_timeout()?).connect(NoTls)?;
//!     let token = client.cancel_token();
//!     ctx.on_cancel(move || drop(token.cancel_query(NoTls)));
//!     client.batch_execute(&format!("SET statement_timeout = {}", ctx.io_timeout()?.as_millis()))?;
//!     let row = client.query_one("SELECT count(*) FROM orders WHERE customer_id = $1", &[&42_i64])?;
//!     Ok(row.get(0))
//! }); // the connection is dropped with the job, whatever happened
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **A client's own connection pool** (r2d2...): give it at least as many
//! connections as workers, and a checkout wait (`connection_timeout`, 30 s by
//! default) shorter than the call's timeout, else a fast "connection refused"
//! becomes a timeout at the deadline, and a worker held past it.
//!
//! How an answer travels from worker to caller, and how shutdown drains, is
//! told in the notes beside this file (`src/pool/`); the reply slot's state
//! machine is in `slot.rs`.

mod builder;
mod call;
mod cancel;
mod stats;
mod submit;
mod ticket;
mod worker;
// Public (and re-exported, hidden) only for the loom models in tests/loom_pool.rs.
#[cfg(loom)]
pub mod queue;
#[cfg(not(loom))]
mod queue;
mod resize;
#[cfg(loom)]
pub mod slot;
#[cfg(not(loom))]
mod slot;

use crate::time::deadline_after;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::Release};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

pub use self::builder::PoolBuilder;
pub(crate) use self::builder::check_settings;
pub(crate) use self::call::Answer;
pub use self::call::CallContext;
pub(crate) use self::call::Owner;
use self::call::QueuedJob;
pub use self::call::SubmitError;
use self::queue::Queue;
pub use self::stats::PoolStats;
use self::stats::{PoolCounters, PoolLatency};
pub use self::submit::Submit;
pub(crate) use self::ticket::Left;
pub use self::ticket::Ticket;
use self::worker::join_worker;
use crate::latency::Latency;
pub use crate::room::{NoSeat, Room, RoomCounts, Seat};

use crate::histogram::LatencyHistogram;

/// A bulkhead: `workers` threads named `wt-<name>-<i>` behind a
/// bounded queue of `queue` jobs; both can be changed while it runs
/// ([`resize`](Pool::resize)).
///
/// `Pool` is a cheap handle (`Clone` shares it). When the last handle drops,
/// the pool shuts down with the builder's [`drop_grace`](PoolBuilder::drop_grace).
///
/// ```
/// use std::time::Duration;
/// use watertight::{Error, Rejection, pool::Pool};
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
/// let pool = watertight::pool::Pool::builder("x").build().unwrap();
/// let not_send = std::rc::Rc::new(1);
/// let _ = pool.call_timeout(Duration::from_secs(1), move |_| Ok::<_, ()>(*not_send));
/// ```
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Handle>,
}

/// Everything both the handles and the workers (and each call) share.
pub(crate) struct Shared {
    pub(crate) name: Arc<str>,
    pub(crate) stats: PoolCounters,
    /// The recent mean run time of a job, timed on the workers.
    pub(crate) service: Latency,
    /// Queue-wait and run-time histograms, recorded on the workers.
    pub(crate) latency: PoolLatency,
    /// Set when shutdown's grace period is over: a worker that dequeues a job
    /// after this answers it `ShuttingDown` instead of running it.
    pub(crate) grace_over: AtomicBool,
    /// The queued jobs, the idle workers and the hand-off (`queue.rs`).
    pub(crate) queue: Queue<QueuedJob>,
    /// Whether workers record the latency histograms (always, but for the
    /// bench that measures what recording costs).
    pub(crate) record_latency: bool,
    /// When each worker's current job started (`worker.rs`).
    pub(crate) running: self::stats::Running,
}

/// The handle side: the live settings, and the threads to join. Dropping the
/// last `Pool` drops this, which shuts the pool down.
pub(super) struct Handle {
    pub(super) shared: Arc<Shared>,
    pub(super) drop_grace: Duration,
    /// The worker setting (the threads converge to it after a resize).
    pub(super) workers: AtomicUsize,
    /// The queue capacity setting (the queue's own copy, under its lock, is
    /// the one enforced).
    pub(super) queue: AtomicUsize,
    /// Deadline-aware admission as requested (see
    /// [`PoolBuilder::deadline_aware_admission`]); in effect only while the
    /// queue capacity is not 0.
    pub(super) admission: AtomicBool,
    /// How long a submission may wait for room, in nanoseconds (see
    /// [`PoolBuilder::max_wait`]).
    pub(super) max_wait_ns: AtomicU64,
    /// The threads; taken by resize and shutdown, one at a time.
    pub(super) control: Mutex<Control>,
}

/// The worker threads, for resize and shutdown.
pub(super) struct Control {
    /// Indexed by the number in the thread's name; `join` is `None` once
    /// joined, and such an index is free for a new worker.
    pub(super) threads: Vec<WorkerThread>,
    /// Each worker sends its index here as it exits.
    pub(super) exits: Receiver<usize>,
    pub(super) exit_tx: Sender<usize>,
    pub(super) stack_size: Option<usize>,
}

pub(super) struct WorkerThread {
    pub(super) id: ThreadId,
    pub(super) join: Option<JoinHandle<()>>,
}

impl Pool {
    /// A builder for a pool called `name` (its threads are
    /// `wt-<name>-<i>`, the name cut so that the whole fits the 15 bytes
    /// Linux keeps, index included).
    pub fn builder(name: impl Into<String>) -> PoolBuilder {
        PoolBuilder::new(name.into())
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.inner.shared.name
    }

    /// The worker setting (the builder's, or the last [`resize`](Pool::resize)'s).
    /// Right after a resize the threads may still be starting or finishing
    /// their jobs; [`stats`](Pool::stats)`().workers` counts the live ones.
    pub fn workers(&self) -> usize {
        self.inner.workers.load(Relaxed)
    }

    /// The queue capacity setting (0 = hand-off only).
    pub fn queue_capacity(&self) -> usize {
        self.inner.queue.load(Relaxed)
    }

    /// How long a submission waits for room in a full pool before it is
    /// refused ([`PoolBuilder::max_wait`]).
    pub fn max_wait(&self) -> Duration {
        Duration::from_nanos(self.inner.max_wait_ns.load(Relaxed))
    }

    /// Whether deadline-aware admission is on (never with a queue of 0).
    pub fn deadline_aware_admission(&self) -> bool {
        self.inner.admission.load(Relaxed) && self.queue_capacity() > 0
    }

    /// Turns deadline-aware admission on or off while the pool runs (see
    /// [`PoolBuilder::deadline_aware_admission`]). With a queue of 0 it stays
    /// off until a resize gives the pool a queue.
    pub fn set_deadline_aware_admission(&self, on: bool) {
        self.inner.admission.store(on, Relaxed);
    }

    /// What a call submitted now would wait for a worker: the jobs queued
    /// ahead of it, shared among the workers, each taking the recent mean
    /// run time ([`mean_service_time`](Self::mean_service_time)); what
    /// deadline-aware admission compares a deadline with. `None` before the
    /// first job has been timed or while nothing is queued.
    pub fn estimated_wait(&self) -> Option<Duration> {
        self.inner.shared.service.wait_behind(self.inner.shared.queue.queued(), self.workers())
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

    /// The recent mean time a job runs on a worker (the smoothed mean of
    /// RFC 6298, gain 1/8, over finished jobs, abandoned ones included), `None`
    /// before the first job was timed.
    pub fn mean_service_time(&self) -> Option<Duration> {
        self.inner.shared.service.mean()
    }

    /// Whether a worker is free right now, idle or starting (it may not be
    /// a moment later).
    pub(crate) fn has_idle_worker(&self) -> bool {
        self.inner.shared.queue.has_idle(&self.inner.shared.stats.workers.busy)
    }

    /// The workers running a job past its deadline (by more than
    /// [`OVERRUN_GRACE`](self::stats::OVERRUN_GRACE)) and the live workers,
    /// once per episode of abandoned work: when at least half of the workers
    /// are so, and no warning has been given since the count of abandoned
    /// calls last fell below that mark (`stats.rs`, `many_abandoned`).
    pub(crate) fn abandoned_alarm(&self, now: Instant) -> Option<(usize, usize)> {
        let s = &self.inner.shared.stats;
        let overdue = self.inner.shared.running.overdue(now);
        let live = s.workers.live.load(Relaxed);
        let first =
            self::stats::many_abandoned(overdue, live) && !s.callers.abandoned_warned.swap(true, Relaxed);
        first.then_some((overdue, live))
    }

    /// A snapshot of the pool's gauges and counters; takes no lock.
    pub fn stats(&self) -> PoolStats {
        let s = &self.inner.shared.stats;
        PoolStats {
            workers: s.workers.live.load(Relaxed),
            busy: s.workers.busy.load(Relaxed),
            queued: self.inner.shared.queue.queued(),
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
        self.inner.shared.queue.is_closed()
    }

    /// Stops the pool: admits nothing more, lets running and queued work
    /// finish within `grace`, answers every job still queued after that with
    /// [`Rejection::ShuttingDown`](crate::Rejection::ShuttingDown), and joins the workers.
    ///
    /// Returns `true` when every worker thread has been joined. A worker still
    /// inside a job when the grace ends is left running (detached: joining
    /// it would block as long as its job hangs); it delivers its answer if
    /// anyone still waits, then exits. Calling `shutdown` again (it is
    /// idempotent) waits for such stragglers once more, up to the new grace.
    ///
    /// Called from one of the pool's own jobs, it stops admitting and returns
    /// `false` at once: a worker cannot join itself, and waiting for the
    /// others would hold that job's caller for the whole grace. A later
    /// `shutdown` from outside joins them.
    ///
    /// Never blocks longer than `grace` (plus joining threads already
    /// finished), except that concurrent calls run one after the other.
    pub fn shutdown(&self, grace: Duration) -> bool {
        self.inner.shutdown_until(deadline_after(Instant::now(), grace))
    }
}

impl Handle {
    pub(super) fn shutdown_until(&self, grace_end: Instant) -> bool {
        // 1. Stop admitting, and close the queue. Submissions take the same
        //    lock: each either got its job in before the close (and a worker
        //    will answer it) or finds the queue closed and is refused. Idle
        //    workers are told to exit; busy ones drain the queue, then exit.
        self.shared.queue.close();
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
        while control.threads.iter().any(|w| w.join.is_some() && w.id != me) {
            match control.exits.recv_deadline(grace_end) {
                Ok(i) => join_worker(control.threads.get_mut(i)),
                Err(_) => break,
            }
        }
        // 3. Grace over: whatever is still queued will not run. Workers that
        //    dequeue a job from now on answer it `ShuttingDown`; we answer
        //    the rest here (dropping a `QueuedJob` answers it).
        self.shared.grace_over.store(true, Release);
        drop(self.shared.queue.drain());
        // 4. Join whoever exited meanwhile; the rest stay detached.
        control.reap();
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
        // Dropping the remaining `JoinHandle`s detaches stuck workers.
        self.shutdown_until(deadline_after(Instant::now(), self.drop_grace));
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
    use crate::error::Rejection;

    #[test]
    fn builder_validates_each_field() {
        assert_eq!(Pool::builder("p").workers(MAX_WORKERS + 1).build().unwrap_err().field(), "workers");
        assert_eq!(Pool::builder("p").queue(MAX_QUEUE + 1).build().unwrap_err().field(), "queue");
        assert_eq!(Pool::builder("").build().unwrap_err().field(), "name");
    }

    /// A full pool's waiter goes through the crate's one line for room
    /// (`room::Waiters`): counted there, and granted a place as a worker
    /// comes back; one refused on arrival never joins it.
    #[test]
    fn a_waiter_for_room_goes_through_the_one_line() {
        let pool =
            Pool::builder("line").workers(1).queue(0).max_wait(Duration::from_secs(5)).build().unwrap();
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let first = pool.submit_timeout(Duration::from_secs(10), move |_| rx.recv().map_err(|_| ())).unwrap();
        let waiter = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.call_timeout(Duration::from_secs(10), |_| Ok::<_, ()>(7)))
        };
        let start = Instant::now();
        while pool.stats().waiting == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "the caller never waited");
            std::thread::yield_now();
        }
        let no_wait = pool.submit(Submit::within(Duration::from_secs(1)).no_wait(), |_| Ok::<_, ()>(0));
        assert!(no_wait.is_err(), "a full pool refuses a caller that may not wait");
        tx.send(()).unwrap();
        first.wait().unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), 7);
        let counts = pool.inner.shared.queue.line_counts();
        assert_eq!((counts.waited, counts.refused), (1, 0), "{counts:?}");
        assert_eq!(pool.stats().waiting, 0);
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
    fn expired_deadline_is_refused_at_once() {
        let pool = Pool::builder("past").workers(1).build().unwrap();
        let err = pool.submit(Submit::by(Instant::now()), |_| Ok::<(), ()>(())).unwrap_err();
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
