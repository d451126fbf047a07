//! A worker thread's life: asking the queue for jobs until it is told to
//! exit (retired by a resize, or the queue closed and drained), how it waits
//! while idle (spin briefly or park at once), and the guard that reports its
//! exit.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::Shared;
use super::WorkerThread;
use super::call::QueuedJob;
use super::queue::{Idle, Letter, Mailbox};

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
    while let Some(next) = shared.queue.next(&me, busy) {
        let job = match next {
            Ok(job) => job,
            Err(idle) => {
                if let Idle::Spin(budget) = idle {
                    spin_for_letter(&me, budget);
                    shared.queue.stop_spinning();
                }
                match me.wait() {
                    Letter::Job(job) => job,
                    Letter::Retire | Letter::Close => break,
                }
            }
        };
        run(job);
    }
    drop(exit);
}

/// Runs one job the queue handed over (the queue counted the worker busy;
/// `run` uncounts it).
fn run(queued: QueuedJob) {
    if let Some(job) = queued.take() {
        // `run` catches the job's own panic; this catches a panic from a
        // `Drop` of the job's captures or result, so the worker survives
        // even that.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()));
    }
}

/// Spins until a letter is posted or `budget` has passed. Reads the clock
/// once every 64 polls: a poll of a line nobody writes is free, a clock read
/// is not.
fn spin_for_letter(me: &Mailbox<QueuedJob>, budget: Duration) {
    let until = Instant::now() + budget;
    loop {
        for _ in 0..64 {
            if me.is_posted() {
                return;
            }
            std::hint::spin_loop();
        }
        if Instant::now() >= until {
            return;
        }
    }
}
