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
use super::call::{QueuedJob, Ran};
use super::queue::{Letter, Mailbox};
use super::stall::RunningMark;

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

/// Longest a worker spins for its next job before parking. A caller that is
/// itself spinning for its answer submits its next call within a microsecond
/// or two of getting it; a caller that sleeps between calls comes back much
/// later, and spinning for it would only burn a core.
const SPIN_MAX: Duration = Duration::from_micros(5);

/// The worker's own record of how soon work comes after it goes idle (its
/// turnaround): an exponentially weighted mean, weight 1/4, of the time from
/// going idle to the submission of the next job. Local to the worker thread,
/// so keeping it costs no shared write. With the idle stack a LIFO, the worker
/// that keeps getting the calls is the one whose record is fresh.
struct Turnaround {
    /// `None` until the first sample: park at once.
    mean: Option<Duration>,
}

impl Turnaround {
    fn note(&mut self, gap: Duration) {
        self.mean = Some(match self.mean {
            None => gap,
            Some(old) if gap >= old => old + (gap - old) / 4,
            Some(old) => old - (old - gap) / 4,
        });
    }

    /// How long to spin before parking: twice the recent turnaround (at
    /// least 1 us, at most [`SPIN_MAX`]), or `None` (park at once) when work
    /// has been coming back more slowly than that.
    fn spin_budget(&self) -> Option<Duration> {
        let mean = self.mean?;
        (mean < SPIN_MAX).then(|| (mean * 2).clamp(Duration::from_micros(1), SPIN_MAX))
    }
}

/// A worker: take a job, run it, repeat, until the queue says exit.
pub(super) fn worker_main(exit: ExitGuard) {
    WORKER_OF.set(Arc::as_ptr(&exit.shared) as usize);
    let shared = &*exit.shared;
    let busy = &shared.stats.workers.busy;
    let me = Mailbox::for_current_thread();
    let mut turnaround = Turnaround { mean: None };
    let running = shared.running.join();
    while let Some(next) = shared.queue.next(&me, busy) {
        let job = match next {
            // Work was already waiting: it comes faster than we come back.
            Ok(job) => {
                turnaround.note(Duration::ZERO);
                job
            }
            Err(_idle) => {
                let idle_since = Instant::now();
                let mut caught = false;
                if let Some(budget) = turnaround.spin_budget()
                    && shared.queue.start_spinning(&me)
                {
                    caught = spin_for_letter(&me, idle_since + budget);
                    shared.queue.stop_spinning(&me);
                }
                let job = match me.wait() {
                    Letter::Job(job) => job,
                    Letter::Retire | Letter::Close => break,
                };
                if let Some(submitted) = job.submitted() {
                    turnaround.note(submitted.saturating_duration_since(idle_since));
                    if !caught {
                        // Woken from a park: how long that took, for callers
                        // deciding whether to spin for their answer.
                        shared.wake.record(Instant::now().saturating_duration_since(submitted));
                    }
                }
                job
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

/// Spins until a letter is posted (`true`) or `until` has passed.
fn spin_for_letter(me: &Mailbox<QueuedJob>, until: Instant) -> bool {
    crate::sync::spin_until_instant(|| me.is_posted(), until)
}
