//! A worker thread's life: asking the queue for jobs until it is told to
//! exit (retired by a resize, or the queue closed and drained), how it waits
//! while idle (the pool's one spin-then-park policy, `crate::sync`), and the
//! guard that reports its exit; and each worker's mark of when its job
//! started, which hang detection reads.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::Shared;
use super::WorkerThread;
use super::call::{QueuedJob, Ran};
use super::queue::{Letter, Mailbox};
use crate::sync::{WORKER_SPIN, spin_until};
use crate::time::saturating_nanos;

/// Joins a worker that has reported its exit. `None` for an index with no
/// thread behind it.
pub(super) fn join_worker(w: Option<&mut WorkerThread>) {
    if let Some(join) = w.and_then(|w| w.join.take()) {
        // The worker catches every panic of its jobs; a join error could
        // only come from the worker loop itself, and there is nothing left
        // to clean up for it.
        let _ = join.join();
    }
}

/// Held by a worker thread for its whole life; dropping it (on exit, or with
/// the unrun closure if the spawn failed) uncounts the worker and reports its
/// exit to shutdown and resize.
pub(super) struct ExitGuard {
    pub(super) shared: Arc<Shared>,
    pub(super) index: usize,
    pub(super) tx: Sender<usize>,
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.shared.stats.workers.live.fetch_sub(1, Relaxed);
        // Unbounded: never blocks. Fails only when the pool handle is
        // already gone, and then nobody is waiting.
        let _ = self.tx.send(self.index);
    }
}

thread_local! {
    /// The address of the [`Shared`] of the pool this thread works for; 0 on
    /// threads that are no pool's worker. Only compared, never dereferenced.
    static WORKER_OF: Cell<usize> = const { Cell::new(0) };
}

/// Whether the current thread is one of the workers of the pool `shared`
/// belongs to.
pub(super) fn runs_on_worker_of(shared: &Arc<Shared>) -> bool {
    WORKER_OF.get() == Arc::as_ptr(shared) as usize
}

/// A worker: take a job, run it, repeat, until the queue says exit.
pub(super) fn worker_main(exit: ExitGuard) {
    WORKER_OF.set(Arc::as_ptr(&exit.shared) as usize);
    let shared = &*exit.shared;
    let busy = &shared.stats.workers.busy;
    let me = Mailbox::for_current_thread();
    let running = shared.running.join();
    while let Some(next) = shared.queue.next(&me, busy) {
        let job = match next {
            Ok(job) => job,
            // In the idle stack: poll the mailbox for the pool's one spin
            // budget, then park on it (`Mailbox::wait` checks `posted` before
            // each park, so a letter posted at any point is taken).
            Err(_idle) => {
                spin_until(WORKER_SPIN, || me.is_posted());
                match me.wait() {
                    Letter::Job(job) => job,
                    Letter::Retire | Letter::Close => break,
                }
            }
        };
        if let Some(ran) = run(job, &running)
            && shared.record_latency
        {
            shared.latency.record(&ran);
        }
    }
    shared.running.leave(&running);
    drop(exit);
}

/// Runs one job the queue handed over (the queue counted the worker busy;
/// `run` uncounts it), and returns its timings if it ran.
fn run(queued: QueuedJob, running: &RunningMark) -> Option<Ran> {
    let job = queued.take()?;
    // `run` catches the job's own panic; this catches a panic from a `Drop`
    // of the job's captures or result, so the worker survives even that.
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run(running))).ok().flatten();
    // Cleared by `run` when the job returns; again here for a panic in a `Drop`.
    running.clear();
    ran
}

// Whether every worker is stuck: each worker marks when its current job
// started, and a pool whose every worker has been inside one job for
// longer than a threshold is *stalled*.
//
// Only the cold paths read the marks (a submission refused for lack of
// room, a waiter giving up): they lock the list and look at every mark.
// A worker writes only its own mark, twice a job, with no lock.
//
// A job handed to a worker that has not started it yet leaves the mark at
// 0, so it reads as not stuck: the test errs towards "not stalled", never
// towards opening a breaker on a pool that has just been given work.

/// One worker's mark: 0 while it runs no job, else when its job started, in
/// nanoseconds after the pool's base instant, plus one.
pub(crate) struct RunningMark {
    base: Instant,
    at: Arc<AtomicU64>,
}

impl RunningMark {
    /// The job started at `began`.
    pub(crate) fn set(&self, began: Instant) {
        self.at
            .store(saturating_nanos(began.saturating_duration_since(self.base)).saturating_add(1), Relaxed);
    }

    /// The job returned.
    pub(crate) fn clear(&self) {
        self.at.store(0, Relaxed);
    }
}

/// Every live worker's mark.
pub(crate) struct Running {
    base: Instant,
    marks: Mutex<Vec<Arc<AtomicU64>>>,
}

impl Running {
    pub(crate) fn new() -> Self {
        Running { base: Instant::now(), marks: Mutex::new(Vec::new()) }
    }

    /// A mark for a worker that is starting; listed until [`leave`](Self::leave).
    pub(crate) fn join(&self) -> RunningMark {
        let at = Arc::new(AtomicU64::new(0));
        self.marks.lock().push(Arc::clone(&at));
        RunningMark { base: self.base, at }
    }

    /// The worker owning `mark` is exiting.
    pub(crate) fn leave(&self, mark: &RunningMark) {
        self.marks.lock().retain(|m| !Arc::ptr_eq(m, &mark.at));
    }

    /// If every live worker is inside a job: how long the youngest of those
    /// jobs has been running at `now`. `None` when a worker is idle (or
    /// between two jobs), or when there is no worker.
    pub(crate) fn all_busy_for(&self, now: Instant) -> Option<Duration> {
        let since_base = saturating_nanos(now.saturating_duration_since(self.base));
        let marks = self.marks.lock();
        let mut youngest: Option<u64> = None;
        for mark in marks.iter() {
            let at = mark.load(Relaxed);
            if at == 0 {
                return None;
            }
            let age = since_base.saturating_sub(at - 1);
            youngest = Some(youngest.map_or(age, |y| y.min(age)));
        }
        youngest.map(Duration::from_nanos)
    }
}
