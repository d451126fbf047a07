//! The pool's service-time estimate: what a new call would wait behind the
//! queued work, for deadline-aware admission and for [`Pool::estimated_wait`](super::Pool::estimated_wait).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::duration_ns;

/// The recent mean time a job runs on a worker, for deadline-aware admission.
///
/// Workers time the job and update it when the job returns (abandoned jobs included: their run
/// time is exactly what the next caller would wait behind), callers read it.
/// It is an exponentially weighted moving average with weight 1/4 for each new
/// sample, kept as nanoseconds in one atomic; 0 means "no sample yet", and a
/// first sample replaces it. `Relaxed` throughout: it is a single value that
/// publishes nothing else, and a stale read only makes one estimate a little
/// older.
///
/// Every job that runs is a sample: the worker reads the clock before and
/// after the job anyway (the deadline check, the histograms), so a sample
/// costs the one update of this atomic, after the answer.
///
/// It cannot lock a pool out: admission consults it only while the queue
/// is non-empty, the queue drains as workers finish, and finished jobs bring
/// fresh samples.
#[derive(Debug, Default)]
pub(crate) struct ServiceTime {
    ewma_ns: AtomicU64,
}

impl ServiceTime {
    /// Adds one job's run time to the average.
    pub(crate) fn record(&self, sample: Duration) {
        let sample = duration_ns(sample).max(1);
        let _ = self.ewma_ns.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some(if old == 0 {
                sample
            } else {
                // old + (sample - old) / 4, in i128 to keep the sign and avoid overflow.
                let next = i128::from(old) + (i128::from(sample) - i128::from(old)) / 4;
                next.clamp(1, i128::from(u64::MAX)) as u64
            })
        });
    }

    /// What a call submitted now would wait for a worker: the jobs `queued`
    /// ahead of it, shared among `workers`, each taking the mean. `None`
    /// before the first sample or with nothing queued.
    pub(crate) fn wait_behind(&self, queued: usize, workers: usize) -> Option<Duration> {
        if queued == 0 {
            return None;
        }
        let mean = self.mean()?;
        let queued = u32::try_from(queued).unwrap_or(u32::MAX);
        let workers = u32::try_from(workers.max(1)).unwrap_or(u32::MAX);
        Some(mean.saturating_mul(queued) / workers)
    }

    pub(crate) fn mean(&self) -> Option<Duration> {
        match self.ewma_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_time_starts_empty_then_averages() {
        let s = ServiceTime::default();
        assert_eq!(s.mean(), None);
        s.record(Duration::from_millis(100));
        assert_eq!(s.mean(), Some(Duration::from_millis(100)));
        s.record(Duration::from_millis(500));
        assert_eq!(s.mean(), Some(Duration::from_millis(200)));
        s.record(Duration::from_millis(200));
        assert_eq!(s.mean(), Some(Duration::from_millis(200)));
        s.record(Duration::from_millis(40));
        assert_eq!(s.mean(), Some(Duration::from_millis(160)));
        // A zero-length job still counts (as 1 ns), so the mean never reads as "no sample".
        let z = ServiceTime::default();
        z.record(Duration::ZERO);
        assert_eq!(z.mean(), Some(Duration::from_nanos(1)));
    }

    #[test]
    fn wait_behind_shares_the_queue_among_workers() {
        let s = ServiceTime::default();
        assert_eq!(s.wait_behind(4, 2), None, "no sample yet");
        s.record(Duration::from_millis(10));
        assert_eq!(s.wait_behind(0, 2), None, "nothing queued");
        assert_eq!(s.wait_behind(4, 2), Some(Duration::from_millis(20)));
        assert_eq!(s.wait_behind(3, 0), Some(Duration::from_millis(30)), "0 workers reads as 1");
    }
}
