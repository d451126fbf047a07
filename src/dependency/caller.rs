//! Where a dependency's calls run: on its own worker pool ([`Mode::Pool`],
//! the default), or on the caller's own thread under a bounded number of
//! permits ([`Mode::CallerThread`], a semaphore bulkhead).
//!
//! In caller-thread mode the breaker, the limits, retry, the budget, the
//! counters and the labels are the same; what differs is the deadline. A
//! job on the caller's own thread *is* the caller, so the deadline is
//! cooperative: the job must hand its [`CallContext`]'s to its I/O
//! ([`WithDeadline`](crate::http::WithDeadline) does for ureq). A job that
//! overruns it is answered [`Error::Timeout`](crate::Error::Timeout) once it
//! returns, and counted and recorded as a timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{ConfigError, Rejection};
use crate::pool::{CallContext, Owner, PoolStats};
use crate::room::{NoSeat, Room};

/// Where a dependency runs its calls. In a file (feature `serde`):
/// `mode = "pool"` or `mode = "caller_thread"`.
///
/// | | `Pool` | `CallerThread` |
/// |---|---|---|
/// | the job runs on | one of `workers` threads of its own | the caller's thread, at most `workers` at once |
/// | a caller waits for room | at most `max_wait`, `queue` places | at most `max_wait` (FIFO), no queue |
/// | the deadline | enforced: the caller leaves at it | cooperative: the job's I/O must honour it |
/// | a hung job | holds a worker; the caller is free | holds its caller |
/// | per call | a hand-off to a worker and back (a few µs) | a permit (tens of ns) |
/// | detached calls (`spawn`) | yes | no: refused `QueueFull` |
/// | hedging | yes | no: one attempt |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Mode {
    /// A worker pool of its own (the default).
    #[default]
    Pool,
    /// The caller's own thread, at most `workers` callers inside at once.
    CallerThread,
}

/// How a job run on its caller's thread ended (its outcome, or the panic it
/// raised), when it started, when it returned.
pub(crate) type OnCaller<T, E> = (std::thread::Result<Result<T, E>>, Instant, Instant);

/// Caller-thread mode's permits and counts.
pub(crate) struct CallerThread {
    pub(super) permits: Room,
    /// For the [`CallContext`]s of jobs run on callers.
    name: Arc<str>,
    pub(super) shut: AtomicBool,
}

impl CallerThread {
    pub(crate) fn new(name: &str, limit: usize, max_wait: Duration) -> Result<CallerThread, ConfigError> {
        Ok(CallerThread {
            // The dependency's config has checked both (`workers`, `max_wait`).
            permits: Room::new(limit, max_wait)?,
            name: Arc::from(name),
            shut: AtomicBool::new(false),
        })
    }

    /// Runs `job` on this thread once a permit is free (by `deadline`, after
    /// at most `max_wait`): how it ended; or the rejection. `now` was just
    /// read: a permit free at once costs no clock read before the job.
    pub(crate) fn run<T, E, F>(
        &self,
        now: Instant,
        deadline: Instant,
        attempt: u32,
        job: F,
    ) -> Result<OnCaller<T, E>, Rejection>
    where
        F: FnOnce(&CallContext) -> Result<T, E>,
    {
        if self.shut.load(Ordering::Acquire) {
            return Err(Rejection::ShuttingDown);
        }
        let (_permit, waited) = match self.permits.acquire_timed(0, deadline) {
            Ok(seat) => seat,
            Err(NoSeat::Deadline) => return Err(Rejection::DeadlineUnmeetable),
            Err(_) => return Err(Rejection::QueueFull),
        };
        // Shut down while this caller waited: it must not run after all.
        if waited && self.shut.load(Ordering::Acquire) {
            return Err(Rejection::ShuttingDown);
        }
        let began = if waited { Instant::now() } else { now };
        if began >= deadline {
            return Err(Rejection::DeadlineUnmeetable);
        }
        let ctx = CallContext::new(Owner::Caller(Arc::clone(&self.name)), deadline, attempt);
        // The permit is released by its guard when this returns, a panic included.
        let ran = ctx.run(job);
        Ok((ran, began, Instant::now()))
    }

    pub(super) fn stats(&self) -> PoolStats {
        PoolStats {
            workers: self.permits.limit(),
            busy: self.permits.in_use(),
            waiting: self.permits.waiting(),
            // The outcomes are the dependency's own counts (`CallCounts`).
            ..PoolStats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Caller-thread mode's permits are a room's seats: a second caller
    /// waits in the room's line until the first caller's job returns.
    #[test]
    fn a_caller_waits_for_a_permit_in_the_room() {
        let exec = Arc::new(CallerThread::new("inline", 1, Duration::from_secs(5)).unwrap());
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let far = || Instant::now() + Duration::from_secs(10);
        let first = {
            let exec = Arc::clone(&exec);
            std::thread::spawn(move || {
                exec.run(Instant::now(), far(), 1, |_| rx.recv().map_err(|_| ())).is_ok()
            })
        };
        let start = Instant::now();
        while exec.stats().busy == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "the first caller never ran");
            std::thread::yield_now();
        }
        let second = {
            let exec = Arc::clone(&exec);
            std::thread::spawn(move || {
                exec.run(Instant::now(), far(), 1, |_| Ok::<_, ()>(2)).map(|(ran, ..)| ran)
            })
        };
        while exec.stats().waiting == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "the second caller never waited");
            std::thread::yield_now();
        }
        tx.send(()).unwrap();
        assert!(first.join().unwrap());
        assert_eq!(second.join().unwrap().unwrap().unwrap(), Ok(2));
        let counts = exec.permits.counts();
        assert_eq!((counts.seated, counts.waited, counts.refused), (2, 1, 0), "{counts:?}");
        assert_eq!((exec.stats().busy, exec.stats().waiting), (0, 0));
    }
}
