//! Whether every worker is stuck: each worker marks when its current job
//! started, and a pool whose every worker has been inside one job for
//! longer than a threshold is *stalled*.
//!
//! Only the cold paths read the marks (a submission refused for lack of
//! room, a waiter giving up): they lock the list and look at every mark.
//! A worker writes only its own mark, twice a job, with no lock.
//!
//! A job handed to a worker that has not started it yet leaves the mark at
//! 0, so it reads as not stuck: the test errs towards "not stalled", never
//! towards opening a breaker on a pool that has just been given work.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::time::saturating_nanos;

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
