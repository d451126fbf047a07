//! One call through the pool: its single allocation ([`Call`]) and the
//! worker's end of it ([`Job`], [`QueuedJob`]). The caller's end is
//! [`Ticket`](super::Ticket) (`ticket.rs`); what the job sees is its
//! [`CallContext`], at the end of this file.
//!
//! A call costs one heap allocation: the `Arc<Call>` holds the job, its
//! context and its reply slot together. The queue carries it as
//! `Arc<dyn Job>` (type-erased over the job and its output) and the ticket as
//! `Arc<dyn Waitable<T, E>>` (erased over the job only); both point into the
//! same allocation.

use std::fmt;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::AcqRel, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::Shared;
use super::cancel::{Hook, fire_at};
use super::slot::Slot;
use super::stats::{Ran, RunningMark};
use crate::error::{Error, Rejection, panic_message};
use crate::time::saturating_nanos;

/// What the pool did with a call, in its own terms: nothing a pool cannot
/// do. The reply slot carries the first three; the ticket answers
/// `TimedOut` when none came by the deadline. [`Ticket::wait`](super::Ticket::wait)
/// says it in the public [`Error`]; a dependency settles it as its attempt's end.
#[derive(Debug)]
pub(crate) enum Answer<T, E> {
    /// A worker ran the job, and it returned this.
    Ran(Result<T, E>),
    /// The job panicked with this message; its worker lives on.
    Panicked(String),
    /// Shutdown discarded it unrun from the queue.
    Discarded,
    /// No answer by the deadline: the job expired in the queue, or is still
    /// running (abandoned, its answer dropped when it returns).
    TimedOut,
}

/// A job the pool did not accept, with the reason and the job itself.
///
/// `Debug` and `Display` do not need the job to be `Debug`.
pub struct SubmitError<F> {
    rejection: Rejection,
    job: F,
    /// Refused for lack of room while every worker had been inside its
    /// current job for longer than the threshold the submission gave: the
    /// provider is stuck, and room was not coming.
    pub(crate) stuck: bool,
}

impl<F> SubmitError<F> {
    pub(crate) fn new(rejection: Rejection, job: F, stuck: bool) -> Self {
        SubmitError { rejection, job, stuck }
    }

    /// Why the job was not accepted: [`Rejection::QueueFull`],
    /// [`Rejection::ShuttingDown`] or [`Rejection::DeadlineUnmeetable`] (the
    /// deadline had already passed).
    pub fn rejection(&self) -> Rejection {
        self.rejection
    }

    /// The job, never run, handed back.
    pub fn into_job(self) -> F {
        self.job
    }
}

impl<F> fmt::Debug for SubmitError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmitError").field("rejection", &self.rejection).finish_non_exhaustive()
    }
}

impl<F> fmt::Display for SubmitError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job not accepted: {}", self.rejection)
    }
}

// The reason is in `Display`, so there is no `source()` to print it twice.
impl<F> std::error::Error for SubmitError<F> {}

impl<F, E> From<SubmitError<F>> for Error<E> {
    fn from(e: SubmitError<F>) -> Self {
        Error::from(e.rejection)
    }
}

/// The single allocation of a call.
#[repr(C)]
pub(crate) struct Call<F, T, E> {
    /// First, so its padded state shares its line only with the `Arc`'s
    /// counts, which change at submission and at the very end.
    slot: Slot<Answer<T, E>>,
    /// Holds the pool's `Arc` (its counters and its queue) for the call.
    ctx: CallContext,
    /// `Some` until a worker takes it to run, or until a rejected submission
    /// takes it back (by value, through `Arc::try_unwrap`). The lock is taken
    /// once per call, by one thread: uncontended.
    job: parking_lot::Mutex<Option<F>>,
    /// When the call was submitted: the start of its queue wait.
    submitted: Instant,
    /// When a worker started the job, as nanoseconds after `submitted` plus
    /// one; 0 while it has not started. Written once by that worker, read by
    /// the caller after its wait, to tell how long the provider had the call.
    began: AtomicU64,
}

impl<F, T, E> Call<F, T, E> {
    pub(crate) fn new(
        shared: Arc<Shared>,
        submitted: Instant,
        deadline: Instant,
        attempt: u32,
        job: F,
    ) -> Self {
        Call {
            ctx: CallContext::new(Owner::Pool(shared), deadline, attempt),
            slot: Slot::new(),
            job: parking_lot::Mutex::new(Some(job)),
            submitted,
            began: AtomicU64::new(0),
        }
    }

    /// The job back out of a call that was never queued.
    pub(crate) fn into_job(self) -> Option<F> {
        self.job.into_inner()
    }
}

/// The caller's view of a call, erased over the job's type.
pub(crate) trait Waitable<T, E>: Send + Sync {
    fn ctx(&self) -> &CallContext;
    fn slot(&self) -> &Slot<Answer<T, E>>;
    /// The pool the call was submitted to.
    fn shared(&self) -> &Shared {
        self.ctx().pool().expect("a pool's call has a pool's context")
    }
    /// When a worker started the job, if one did.
    fn began(&self) -> Option<Instant>;
}

/// The worker's view of a call, erased over the job's types.
pub(crate) trait Job: Send + Sync {
    /// Runs the job if it should run, and settles its slot. The worker has
    /// counted itself `busy` before calling this; `run` uncounts it. Never
    /// panics because of the job: a panic is caught and becomes the answer.
    /// Returns the job's timings if it ran, for the worker's histograms.
    /// `running` is the worker's own mark (see `Running` in `stats.rs`): set
    /// while the job runs, 0 again once it has returned.
    fn run(&self, running: &RunningMark) -> Option<Ran>;
    /// Answers a queued job that will never run with `ShuttingDown`.
    fn discard(&self);
}

impl<F, T, E> Job for Call<F, T, E>
where
    F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    fn run(&self, running: &RunningMark) -> Option<Ran> {
        let shared = self.shared();
        let stats = &shared.stats;
        // The worker counted itself `busy` when it took this call off the
        // queue. Every path below stops counting it, and counts the outcome,
        // before settling the slot: a caller that has its answer sees the
        // counts its call caused.
        let idle_again = || stats.workers.busy.fetch_sub(1, Relaxed);
        if shared.grace_over.load(std::sync::atomic::Ordering::Acquire) {
            idle_again();
            self.discard();
            return None;
        }
        // Never start what nobody can use: a passed deadline or a caller that
        // has gone.
        let began = Instant::now();
        let late = began >= self.ctx.deadline();
        // Only the one worker that dequeued this call takes the job.
        let job = self.job.lock().take();
        let job = match job {
            Some(job) if !late && self.slot.start() => job,
            job => {
                stats.workers.expired.fetch_add(1, Relaxed);
                idle_again();
                if late {
                    self.slot.expire();
                }
                drop_quietly(job);
                return None;
            }
        };
        self.began.store(
            saturating_nanos(began.saturating_duration_since(self.submitted)).saturating_add(1),
            Relaxed,
        );
        running.set(began, self.ctx.deadline());
        let ran = self.ctx.run(job);
        running.clear();
        let ended = Instant::now();
        let (reply, count) = match ran {
            Ok(returned) => (Answer::Ran(returned), &stats.workers.completed),
            Err(payload) => {
                let msg = panic_message(payload.as_ref());
                drop_quietly(payload);
                (Answer::Panicked(msg), &stats.workers.panicked)
            }
        };
        count.fetch_add(1, Relaxed);
        idle_again();
        if let Err(reply) = self.slot.complete(reply) {
            // The caller abandoned the job (and raised `abandoned` under the
            // slot lock before `complete` could see it): lower it again,
            // ending an episode of abandoned work that falls below its mark.
            let left = stats.callers.abandoned.fetch_sub(1, Relaxed).saturating_sub(1);
            if stats.callers.abandoned_warned.load(Relaxed)
                && !super::stats::many_abandoned(left, stats.workers.live.load(Relaxed))
            {
                stats.callers.abandoned_warned.store(false, Relaxed);
            }
            drop_quietly(reply);
        }
        // The bookkeeping of timings comes after the answer, off the caller's path.
        let run = ended.saturating_duration_since(began);
        shared.service.record(run);
        Some(Ran { queue_wait: began.saturating_duration_since(self.submitted), run, ended })
    }

    fn discard(&self) {
        self.shared().stats.workers.expired.fetch_add(1, Relaxed);
        if let Err(reply) = self.slot.answer(Answer::Discarded) {
            drop_quietly(reply);
        }
        let job = self.job.lock().take();
        drop_quietly(job);
    }
}

/// A queued call. Dropping one that no worker took (shutdown drains the queue
/// this way) answers its caller with `ShuttingDown`: nothing leaves the queue
/// unanswered.
pub(crate) struct QueuedJob(Option<Arc<dyn Job>>);

impl QueuedJob {
    pub(crate) fn new(job: Arc<dyn Job>) -> Self {
        QueuedJob(Some(job))
    }

    /// Takes the call out, so dropping the wrapper answers nothing.
    pub(crate) fn take(mut self) -> Option<Arc<dyn Job>> {
        self.0.take()
    }
}

impl Drop for QueuedJob {
    fn drop(&mut self) {
        if let Some(job) = self.0.take() {
            job.discard();
        }
    }
}

impl<F, T, E> Waitable<T, E> for Call<F, T, E>
where
    F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    fn ctx(&self) -> &CallContext {
        &self.ctx
    }

    fn slot(&self) -> &Slot<Answer<T, E>> {
        &self.slot
    }

    fn began(&self) -> Option<Instant> {
        match self.began.load(Relaxed) {
            0 => None,
            n => self.submitted.checked_add(Duration::from_nanos(n - 1)),
        }
    }
}

/// Drops a value whose `Drop` is user code, so a panic there cannot take a
/// worker (or shutdown) down with it.
pub(super) fn drop_quietly<V>(value: V) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(value)));
}

// [`CallContext`]: what a running job knows about its call.

/// What a running job knows about its call.
///
/// A job receives `&CallContext`. Use [`remaining`](CallContext::remaining)
/// as the job's own I/O timeout, so a hung provider frees the worker at the
/// deadline instead of holding it; check [`is_cancelled`](CallContext::is_cancelled)
/// between steps of a long job to stop work nobody waits for.
///
/// ```
/// use std::time::Duration;
/// use watertight::{CallContext, pool::Pool};
///
/// let pool = Pool::builder("inventory").workers(2).build()?;
/// let answer = pool.call_timeout(Duration::from_secs(1), |ctx: &CallContext| {
///     assert_eq!(ctx.dependency(), "inventory");
///     assert_eq!(ctx.attempt(), 1);
///     assert!(ctx.remaining() <= Duration::from_secs(1));
///     Ok::<_, std::io::Error>(ctx.remaining() > Duration::ZERO)
/// });
/// assert!(answer?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CallContext {
    deadline: Instant,
    attempt: u32,
    /// [`CANCELLED`]: set (after the slot has moved to `ABANDONED`) when the
    /// caller gives up while the job runs. [`DETACHED`]: nobody will wait
    /// for the answer. [`HOOKED`]: set once a cancel hook is in `hook`. Each
    /// side sets its bit with one read-modify-write and so sees the other's
    /// if it came first: whichever comes second schedules the hook on the
    /// watch (`cancel.rs`), so it is never missed.
    flags: AtomicU8,
    /// The cancel hook, once the job registers one ([`on_cancel`](Self::on_cancel)):
    /// empty, and never locked, for a job that does not.
    hook: parking_lot::Mutex<Option<Arc<Hook>>>,
    /// Whose call it is: a pool's (which also gives the call its counters,
    /// at no extra reference count per call), or a caller-thread
    /// dependency's, which has only a name.
    owner: Owner,
}

/// [`CallContext`]'s flags.
const CANCELLED: u8 = 1;
const HOOKED: u8 = 2;
const DETACHED: u8 = 4;

/// The owner of a [`CallContext`].
pub(crate) enum Owner {
    Pool(Arc<Shared>),
    Caller(Arc<str>),
}

impl CallContext {
    /// The context of one attempt: on a pool's worker, or on the caller's own
    /// thread (a dependency in caller-thread mode, which no caller can abandon).
    pub(crate) fn new(owner: Owner, deadline: Instant, attempt: u32) -> CallContext {
        CallContext { deadline, attempt, flags: AtomicU8::new(0), hook: parking_lot::Mutex::new(None), owner }
    }

    /// Runs the job on this context, catching its panic; once it has
    /// returned, its cancel hook (if any) is disarmed. The one place a job is
    /// run, on a worker or on its caller's thread.
    pub(crate) fn run<R>(&self, job: impl FnOnce(&CallContext) -> R) -> std::thread::Result<R> {
        let ran = catch_unwind(AssertUnwindSafe(|| job(self)));
        if self.flags.load(Relaxed) & HOOKED != 0
            && let Some(hook) = self.hook.lock().take()
        {
            hook.disarm();
        }
        ran
    }

    /// The pool of a call submitted to one (`None` on a caller's thread).
    pub(super) fn pool(&self) -> Option<&Shared> {
        match &self.owner {
            Owner::Pool(shared) => Some(shared),
            Owner::Caller(_) => None,
        }
    }

    /// The instant by which the caller wants the answer. Queue wait counts:
    /// it was fixed when the call was submitted.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left until the deadline, zero once it has passed. Give it to the
    /// job's own I/O as its timeout.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// [`remaining`](Self::remaining) as an I/O timeout for a client that is
    /// not ureq: never zero (at least 1 ms, as `set_read_timeout` refuses
    /// zero), or `TimedOut` once the deadline has passed.
    ///
    /// ```no_run
    /// # fn job(ctx: &watertight::CallContext, stream: &std::net::TcpStream) -> std::io::Result<()> {
    /// stream.set_read_timeout(Some(ctx.io_timeout()?))?;
    /// # Ok(()) }
    /// ```
    pub fn io_timeout(&self) -> io::Result<Duration> {
        match self.remaining() {
            Duration::ZERO => Err(io::Error::new(io::ErrorKind::TimedOut, "the call's deadline has passed")),
            left => Ok(left.max(Duration::from_millis(1))),
        }
    }

    /// `true` once the caller has stopped waiting (it timed out or dropped
    /// its [`Ticket`](super::Ticket)). The answer will be dropped; a job may
    /// stop early.
    pub fn is_cancelled(&self) -> bool {
        self.flags.load(Relaxed) & CANCELLED != 0
    }

    /// Registers `f` to cancel the job from outside while it is blocked in
    /// one system call: a `TcpStream::shutdown` on a `try_clone` of its
    /// socket, a PostgreSQL `CancelToken::cancel_query`. `f` runs once, on
    /// the crate's cancel thread (never on a worker), when the call's
    /// deadline passes or its caller leaves (timed out, dropped its ticket,
    /// or another hedge won) while the job is still running; never once the
    /// job has returned (a hook running as it returns is waited for). For a
    /// detached call ([`Dependency::spawn`](crate::Dependency::spawn)) it is
    /// the deadline. Keep `f` short: hooks run one after the other. A second
    /// call replaces the first hook; a job that registers none pays nothing.
    ///
    /// ```no_run
    /// # fn job(ctx: &watertight::CallContext, stream: std::net::TcpStream) -> std::io::Result<()> {
    /// let clone = stream.try_clone()?;
    /// ctx.on_cancel(move || {
    ///     let _ = clone.shutdown(std::net::Shutdown::Both);
    /// });
    /// # Ok(()) }
    /// ```
    pub fn on_cancel(&self, f: impl FnOnce() + Send + 'static) {
        let hook = Hook::new(f);
        if let Some(old) = self.hook.lock().replace(Arc::clone(&hook)) {
            old.disarm();
        }
        let flags = self.flags.fetch_or(HOOKED, AcqRel);
        if flags & CANCELLED != 0 {
            fire_at(Instant::now(), &hook);
        } else if flags & DETACHED != 0 || self.pool().is_none() {
            // Nobody waits whose leaving would fire it: a detached call, or
            // a job on its caller's own thread. The deadline does.
            fire_at(self.deadline, &hook);
        }
    }

    /// Which attempt this is, starting at 1. Plain pool calls are always
    /// attempt 1; a retrying or hedged dependency counts up.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The name of the pool (the dependency) running the job.
    pub fn dependency(&self) -> &str {
        match &self.owner {
            Owner::Pool(shared) => &shared.name,
            Owner::Caller(name) => name,
        }
    }

    /// Tells a running job that its caller has gone, and fires its cancel
    /// hook now if it has registered one.
    pub(super) fn cancel(&self) {
        self.mark(CANCELLED, Instant::now());
    }

    /// Nobody will wait for the call: its cancel hook, if it has registered
    /// one, fires at the deadline.
    pub(super) fn detach(&self) {
        self.mark(DETACHED, self.deadline);
    }

    fn mark(&self, flag: u8, fire: Instant) {
        if self.flags.fetch_or(flag, AcqRel) & HOOKED != 0
            && let Some(hook) = self.hook.lock().clone()
        {
            fire_at(fire, &hook);
        }
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("dependency", &self.dependency())
            .field("attempt", &self.attempt)
            .field("remaining", &self.remaining())
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_error_debug_and_display_without_job_debug() {
        struct NotDebug;
        let e = SubmitError::new(Rejection::QueueFull, NotDebug, false);
        assert!(format!("{e:?}").contains("QueueFull"));
        assert!(e.to_string().contains("queue"));
        let _job: NotDebug = e.into_job();
    }
}
