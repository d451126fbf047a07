//! A worker thread's life: taking jobs until the queue closes, the guard that
//! reports its exit, and the hand-off retry of a queue-0 submission.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use crossbeam_channel::{Receiver, SendTimeoutError, Sender, TrySendError};

use super::Shared;
use super::WorkerThread;
use super::call::QueuedJob;
use super::stats::WorkerCounters;
use crate::error::Rejection;
use crate::sync::SpinWait;

/// Joins a worker that has reported its exit. `None` for the index of a
/// thread that failed to spawn (its guard reports too).
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
/// exit to shutdown.
pub(super) struct ExitGuard {
    pub(super) shared: Arc<Shared>,
    pub(super) index: usize,
    pub(super) tx: Sender<usize>,
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        self.shared.stats.workers.live.fetch_sub(1, Relaxed);
        // Capacity is one slot per worker: never blocks. Fails only when the
        // pool handle is already gone, and then nobody is waiting.
        let _ = self.tx.try_send(self.index);
    }
}

// A worker: take a job, run it, repeat, until the queue is disconnected and
// empty (shutdown).
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

pub(super) fn worker_main(jobs: Receiver<QueuedJob>, ready: Sender<()>, exit: ExitGuard) {
    WORKER_OF.set(Arc::as_ptr(&exit.shared) as usize);
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
pub(super) fn hand_off(
    tx: &Sender<QueuedJob>,
    mut job: QueuedJob,
    workers: &WorkerCounters,
) -> Option<(Rejection, QueuedJob)> {
    let mut backoff = SpinWait::new();
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

/// A submission found the pool full and may wait for room until `until`
/// (the earlier of `now + max_wait` and its deadline): a queue slot, or with
/// queue 0 a worker coming back to the queue. Counted in `waiting` while it
/// waits, so the hold it adds to its caller's thread shows in the stats.
pub(super) fn wait_for_slot(
    tx: &Sender<QueuedJob>,
    job: QueuedJob,
    until: Instant,
    waiting: &AtomicUsize,
) -> Option<(Rejection, QueuedJob)> {
    waiting.fetch_add(1, Relaxed);
    let sent = tx.send_deadline(job, until);
    waiting.fetch_sub(1, Relaxed);
    match sent {
        Ok(()) => None,
        Err(SendTimeoutError::Timeout(q)) => Some((Rejection::QueueFull, q)),
        Err(SendTimeoutError::Disconnected(q)) => Some((Rejection::ShuttingDown, q)),
    }
}
