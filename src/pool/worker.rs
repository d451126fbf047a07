//! A worker thread's life: asking the queue for jobs until it is told to
//! exit (retired by a resize, or the queue closed and drained), how it waits
//! while idle (the pool's one spin-then-park policy, `crate::sync`), and the
//! guard that reports its exit.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crossbeam_channel::Sender;

use super::Shared;
use super::WorkerThread;
use super::queue::{Letter, Mailbox};
use crate::sync::{WORKER_SPIN, spin_until};

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
        // The queue counted the worker busy; `run` uncounts it. `run` catches
        // the job's own panic; this catches a panic from a `Drop` of the
        // job's captures or result, so the worker survives even that.
        let ran = job.take().and_then(|job| catch_unwind(AssertUnwindSafe(|| job.run(&running))).ok());
        // Cleared by `run` when the job returns; again here for a panic in a `Drop`.
        running.clear();
        if let Some(ran) = ran.flatten()
            && shared.record_latency
        {
            shared.latency.record(&ran);
        }
    }
    shared.running.leave(&running);
    drop(exit);
}
