//! The pool's live counters and [`PoolStats`], the snapshot read from them;
//! the timings of a job that ran ([`Ran`]); and each worker's mark of when
//! its job started, which hang detection reads ([`Running`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::histogram::LatencyHistogram;
use crate::time::saturating_nanos;

/// The pool's counters, all `Relaxed`: each is a tally that publishes nothing
/// else. A caller that has its answer sees the counts its call caused, because
/// the worker counts before it settles the reply slot (a release), and the
/// caller sees the slot settled (an acquire).
///
/// Two cache lines: callers write the first, workers the second, so a call's
/// round trip does not bounce counters between the two sides.
#[derive(Default)]
pub(crate) struct PoolCounters {
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
    /// Whether the warning of the present episode of abandoned work has been
    /// given: set by the first [`abandoned_alarm`](super::Pool::abandoned_alarm)
    /// that finds [`many_abandoned`], cleared by the worker whose return
    /// brings `abandoned` below it (the episode is over).
    pub(crate) abandoned_warned: AtomicBool,
    /// Submissions waiting (at most `max_wait`) for room in a full pool.
    pub(crate) waiting: AtomicUsize,
}

/// Whether `abandoned` jobs among `live` workers make an episode worth a
/// warning: at least half of the workers (and at least one) are running calls
/// whose callers have gone.
pub(crate) fn many_abandoned(abandoned: usize, live: usize) -> bool {
    abandoned > 0 && abandoned * 2 >= live
}

/// The counters workers write.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct WorkerCounters {
    /// Workers given a job and not yet done with it. Unlike the other
    /// counters it is part of a protocol: the queue reads it under its lock
    /// to count the workers coming back (`queue.rs`, invariant 3), and a
    /// worker lowers it outside that lock, so it is a `crate::sync` atomic,
    /// loom's under `cfg(loom)`, and the model checks see that step.
    pub(crate) busy: crate::sync::AtomicUsize,
    pub(crate) completed: AtomicU64,
    pub(crate) expired: AtomicU64,
    pub(crate) panicked: AtomicU64,
    /// Worker threads started and not yet exited.
    pub(crate) live: AtomicUsize,
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
/// [`Pool::shutdown`](crate::pool::Pool::shutdown) has returned):
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
    /// Submissions waiting, at most [`max_wait`](crate::pool::PoolBuilder::max_wait),
    /// for room in a full pool. Each holds its caller's thread while it waits.
    pub waiting: usize,
    /// Jobs accepted into the queue.
    pub submitted: u64,
    /// Jobs that ran and returned (`Ok` or `Err`).
    pub completed: u64,
    /// Accepted jobs that never started: their deadline passed in the queue,
    /// their caller had gone, or shutdown discarded them (those callers got
    /// [`Rejection::ShuttingDown`](crate::Rejection::ShuttingDown)).
    pub expired: u64,
    /// Jobs that panicked.
    pub panicked: u64,
    /// Submissions turned away: queue full, shutting down, or a deadline
    /// already past.
    pub rejected: u64,
    /// Callers whose deadline passed before the answer came.
    pub timed_out: u64,
}

/// The window of the pool's recent percentiles (see [`LatencyHistogram`]).
pub(crate) const RECENT_WINDOW: Duration = Duration::from_secs(30);

/// The pool's latency histograms, recorded by the workers after each answer.
pub(crate) struct PoolLatency {
    pub(crate) queue_wait: LatencyHistogram,
    pub(crate) run: LatencyHistogram,
}

impl Default for PoolLatency {
    fn default() -> Self {
        PoolLatency {
            queue_wait: LatencyHistogram::new(RECENT_WINDOW),
            run: LatencyHistogram::new(RECENT_WINDOW),
        }
    }
}

impl PoolLatency {
    /// Records one run's queue wait and run time, at the instant it ended.
    pub(crate) fn record(&self, ran: &Ran) {
        self.queue_wait.record_at(ran.queue_wait, ran.ended);
        self.run.record_at(ran.run, ran.ended);
    }
}

/// The timings of a job that ran: from submission to a worker starting it,
/// and from then to its end.
pub(crate) struct Ran {
    pub(crate) queue_wait: Duration,
    pub(crate) run: Duration,
    pub(crate) ended: Instant,
}

// Whether every worker is stuck: each worker marks when its current job
// started, and a pool whose every worker has been inside one job for
// longer than a threshold is *stuck*. The mark also holds the job's
// deadline, so that a job still running well past it can be told from one
// that honours it and ends a moment late ([`Running::overdue`]).
//
// Only the cold paths read the marks (a submission refused for lack of
// room, a waiter giving up): they lock the list and look at every mark.
// A worker writes only its own mark, with no lock.
//
// A job handed to a worker that has not started it yet leaves the mark at
// 0, so it reads as not stuck: the test errs towards "not stuck", never
// towards opening a breaker on a pool that has just been given work.

/// How long past its deadline a job may still be running and count as one
/// that honours it: a socket or statement timeout set to the deadline ends
/// a few milliseconds after it (2 to 5 ms, seen on real drivers). Only a job
/// running longer past its deadline is warned of as abandoned work that
/// does not end at its deadline.
pub(crate) const OVERRUN_GRACE: Duration = Duration::from_millis(25);

/// One worker's mark, in nanoseconds after the pool's base instant, plus
/// one: when its job started (0 while it runs none), and that job's deadline.
#[derive(Default)]
struct Mark {
    began: AtomicU64,
    deadline: AtomicU64,
}

/// A worker's own handle on its [`Mark`].
pub(crate) struct RunningMark {
    base: Instant,
    at: Arc<Mark>,
}

impl RunningMark {
    /// The job started at `began`, to end by `deadline`.
    pub(crate) fn set(&self, began: Instant, deadline: Instant) {
        self.at.deadline.store(nanos_since(self.base, deadline) + 1, Relaxed);
        self.at.began.store(nanos_since(self.base, began) + 1, Relaxed);
    }

    /// The job returned.
    pub(crate) fn clear(&self) {
        self.at.began.store(0, Relaxed);
    }
}

/// `at` in nanoseconds after `base` (0 before it; saturating far after).
fn nanos_since(base: Instant, at: Instant) -> u64 {
    saturating_nanos(at.saturating_duration_since(base)).min(u64::MAX - 1)
}

/// Every live worker's mark.
pub(crate) struct Running {
    base: Instant,
    marks: Mutex<Vec<Arc<Mark>>>,
}

impl Running {
    pub(crate) fn new() -> Self {
        Running { base: Instant::now(), marks: Mutex::new(Vec::new()) }
    }

    /// A mark for a worker that is starting; listed until [`leave`](Self::leave).
    pub(crate) fn join(&self) -> RunningMark {
        let at = Arc::new(Mark::default());
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
        let since_base = nanos_since(self.base, now);
        let ages = self.marks.lock().iter().try_fold(None, |youngest: Option<u64>, mark| {
            let age = since_base.saturating_sub(mark.began.load(Relaxed).checked_sub(1)?);
            Some(Some(youngest.map_or(age, |y| y.min(age))))
        });
        ages.flatten().map(Duration::from_nanos)
    }

    /// The workers whose job, at `now`, is still running more than
    /// [`OVERRUN_GRACE`] past its deadline.
    pub(crate) fn overdue(&self, now: Instant) -> usize {
        let since_base = nanos_since(self.base, now);
        let grace = saturating_nanos(OVERRUN_GRACE);
        let marks = self.marks.lock();
        let late = |m: &Arc<Mark>| {
            m.began.load(Relaxed) != 0 && since_base > (m.deadline.load(Relaxed) - 1).saturating_add(grace)
        };
        marks.iter().filter(|m| late(m)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job a few milliseconds past its deadline honours it; one past the
    /// grace does not.
    #[test]
    fn overdue_counts_only_jobs_past_the_grace() {
        let running = Running::new();
        let (a, b) = (running.join(), running.join());
        let start = running.base + Duration::from_secs(1);
        let deadline = start + Duration::from_millis(100);
        a.set(start, deadline);
        b.set(start, deadline);
        assert_eq!(running.overdue(deadline + Duration::from_millis(4)), 0);
        assert_eq!(running.overdue(deadline + OVERRUN_GRACE), 0);
        assert_eq!(running.overdue(deadline + OVERRUN_GRACE + Duration::from_millis(1)), 2);
        b.clear();
        assert_eq!(running.overdue(deadline + Duration::from_secs(1)), 1);
    }
}
