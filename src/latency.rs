//! [`Latency`]: the one model of how long a provider takes, learned from
//! run times. The pool keeps one over every job (what a new call would wait
//! behind the queued work, for deadline-aware admission and
//! `Pool::estimated_wait`); a dependency keeps one over its successes (the
//! provider's normal latency: the hang and stuck thresholds of
//! `dependency/config.rs`, and the least time a hedge must have left).
//!
//! It is the retransmission-timeout estimator of RFC 6298: a smoothed mean
//! (`srtt`, gain 1/8) and a smoothed deviation (`rttvar`, gain 1/4), and
//! `srtt + 4 * rttvar` as the latency below which nearly every answer comes.
//! The two words are relaxed atomics updated without a lock; two samples
//! recorded at the same moment may lose one, which an estimate can afford.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::time::saturating_nanos;

/// A provider's latency, as run times have shown it (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Latency {
    /// Smoothed mean, in nanoseconds; 0 before the first sample.
    srtt: AtomicU64,
    /// Smoothed mean deviation, in nanoseconds.
    rttvar: AtomicU64,
}

impl Latency {
    /// Takes one run time (a zero-length one counts as 1 ns, so that the
    /// model never reads as empty once it has a sample).
    pub(crate) fn record(&self, run: Duration) {
        let r = saturating_nanos(run).max(1);
        let srtt = self.srtt.load(Relaxed);
        if srtt == 0 {
            self.srtt.store(r, Relaxed);
            self.rttvar.store(r / 2, Relaxed);
            return;
        }
        let var = self.rttvar.load(Relaxed);
        self.rttvar.store(var - var / 4 + srtt.abs_diff(r) / 4, Relaxed);
        self.srtt.store((srtt - srtt / 8 + r / 8).max(1), Relaxed);
    }

    /// The smoothed mean, `None` before the first sample.
    pub(crate) fn mean(&self) -> Option<Duration> {
        Some(self.srtt.load(Relaxed)).filter(|&ns| ns != 0).map(Duration::from_nanos)
    }

    /// `srtt + 4 * rttvar`: the time within which nearly every run ends.
    pub(crate) fn normal(&self) -> Option<Duration> {
        let srtt = self.srtt.load(Relaxed);
        (srtt != 0)
            .then(|| Duration::from_nanos(srtt.saturating_add(self.rttvar.load(Relaxed).saturating_mul(4))))
    }

    /// What a call would wait behind `queued` jobs shared among `workers`,
    /// each taking the mean; `None` before the first sample or while
    /// nothing is queued.
    pub(crate) fn wait_behind(&self, queued: usize, workers: usize) -> Option<Duration> {
        if queued == 0 {
            return None;
        }
        let mean = self.mean()?;
        let queued = u32::try_from(queued).unwrap_or(u32::MAX);
        let workers = u32::try_from(workers.max(1)).unwrap_or(u32::MAX);
        Some(mean.saturating_mul(queued) / workers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn empty_until_the_first_sample_then_smoothed() {
        let l = Latency::default();
        assert_eq!((l.mean(), l.normal()), (None, None));
        l.record(80 * MS);
        assert_eq!(l.mean(), Some(80 * MS));
        assert_eq!(l.normal(), Some(240 * MS), "80 + 4 * 40");
        l.record(160 * MS);
        assert_eq!(l.mean(), Some(90 * MS), "80 + (160 - 80) / 8");
        let z = Latency::default();
        z.record(Duration::ZERO);
        assert_eq!(z.mean(), Some(Duration::from_nanos(1)));
    }

    #[test]
    fn steady_runs_converge_and_spread_ones_widen_it() {
        let steady = Latency::default();
        (0..200).for_each(|_| steady.record(80 * MS));
        let n = steady.normal().unwrap();
        assert!(n >= 80 * MS && n < 81 * MS, "{n:?}");
        let spread = Latency::default();
        (0..200u64).for_each(|i| spread.record(if i % 2 == 0 { 20 * MS } else { 100 * MS }));
        // Mean 60 ms, deviation about 40 ms: well above the slowest run.
        let n = spread.normal().unwrap();
        assert!(n > 150 * MS && n < 300 * MS, "{n:?}");
    }

    #[test]
    fn wait_behind_shares_the_queue_among_workers() {
        let l = Latency::default();
        assert_eq!(l.wait_behind(4, 2), None, "no sample yet");
        l.record(10 * MS);
        assert_eq!(l.wait_behind(0, 2), None, "nothing queued");
        assert_eq!(l.wait_behind(4, 2), Some(20 * MS));
        assert_eq!(l.wait_behind(3, 0), Some(30 * MS), "0 workers reads as 1");
    }
}
