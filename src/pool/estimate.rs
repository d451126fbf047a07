//! The pool's service-time estimate: what a new call would wait behind the
//! queued work, for deadline-aware admission and for [`Pool::estimated_wait`](super::Pool::estimated_wait).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

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
/// Timing a job costs two clock reads and an atomic update on the worker,
/// between the job and its answer. That is noise next to a slow job and a
/// third of the overhead of a fast one, so fast jobs are sampled: while the
/// mean is under [`SAMPLE_ALL_FROM`](Self::SAMPLE_ALL_FROM) one job in
/// [`SAMPLE_EVERY`](Self::SAMPLE_EVERY) is timed, and
/// from there on every job. A fast mean only matters to admission behind a
/// very deep queue, and a slowdown is caught by the next sample, which lifts
/// the mean over the threshold at once (a 1 s sample moves a 1 ms mean to
/// 250 ms), after which every job is timed.
///
/// It cannot lock a pool out: admission consults it only while the queue
/// is non-empty, the queue drains as workers finish, and finished jobs bring
/// fresh samples.
#[derive(Debug, Default)]
pub(crate) struct ServiceTime {
    ewma_ns: AtomicU64,
    /// Jobs started by this pool's workers, for sampling one in
    /// [`SAMPLE_EVERY`](Self::SAMPLE_EVERY).
    tick: AtomicU32,
}

impl ServiceTime {
    /// From this mean (in nanoseconds, 1 ms) on, every job is timed.
    const SAMPLE_ALL_FROM: u64 = 1_000_000;
    /// Below it, one job in this many is.
    const SAMPLE_EVERY: u32 = 8;

    /// Whether the job about to be submitted should be timed.
    pub(crate) fn should_sample(&self) -> bool {
        let mean = self.ewma_ns.load(Ordering::Relaxed);
        if mean == 0 || mean >= Self::SAMPLE_ALL_FROM {
            return true;
        }
        self.tick.fetch_add(1, Ordering::Relaxed).wrapping_add(1).is_multiple_of(Self::SAMPLE_EVERY)
    }

    pub(crate) fn record(&self, sample: Duration) {
        let sample = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX).max(1);
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

/// How long a job handed to a *parked* worker waits for that worker to wake
/// and start it: the pool's recent mean, for the caller's choice to spin or
/// park while it waits for the answer (see `Ticket::wait`).
///
/// Recorded by the worker (`start - submitted`, for jobs it did not catch
/// while spinning), read by callers. An exponentially weighted moving average
/// with weight 1/4, kept as nanoseconds; 0 means "no sample yet". Updated
/// with a plain load and store, not a read-modify-write loop: two workers
/// recording at once may lose one sample, which an average can spare, and
/// nothing contends on the line.
#[derive(Debug, Default)]
pub(crate) struct WakeTime {
    ewma_ns: AtomicU64,
}

impl WakeTime {
    pub(crate) fn record(&self, sample: Duration) {
        let sample = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX).max(1);
        let old = self.ewma_ns.load(Ordering::Relaxed);
        let next = if old == 0 {
            sample
        } else {
            (i128::from(old) + (i128::from(sample) - i128::from(old)) / 4).clamp(1, i128::from(u64::MAX))
                as u64
        };
        self.ewma_ns.store(next, Ordering::Relaxed);
    }

    /// The recent mean, `None` before the first sample.
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
    fn fast_jobs_are_sampled_slow_ones_all_timed() {
        let s = ServiceTime::default();
        assert!((0..20).all(|_| s.should_sample()), "no sample yet: time every job");
        s.record(Duration::from_micros(50));
        let sampled = (0..800).filter(|_| s.should_sample()).count();
        assert_eq!(sampled, 100, "one in eight below 1 ms");
        s.record(Duration::from_secs(1));
        assert!(s.mean().unwrap() >= Duration::from_millis(1));
        assert!((0..20).all(|_| s.should_sample()), "from 1 ms on: every job");
    }

    #[test]
    fn wake_time_averages_from_its_first_sample() {
        let w = WakeTime::default();
        assert_eq!(w.mean(), None);
        w.record(Duration::from_micros(8));
        assert_eq!(w.mean(), Some(Duration::from_micros(8)));
        w.record(Duration::from_micros(16));
        assert_eq!(w.mean(), Some(Duration::from_micros(10)));
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
