//! [`HistogramSnapshot`]: bucket counts at one moment, and the quantiles, means
//! and cumulative buckets read from them.

use std::time::Duration;

use super::{BOUND_NS, BOUNDS};

/// Bucket counts at one moment, from [`LatencyHistogram::snapshot`] or
/// [`LatencyHistogram::recent`].
///
/// [`LatencyHistogram::snapshot`]: super::LatencyHistogram::snapshot
/// [`LatencyHistogram::recent`]: super::LatencyHistogram::recent
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Per bucket (not cumulative); the last is `+Inf`.
    buckets: [u64; BOUNDS + 1],
    sum_ns: u64,
}

impl HistogramSnapshot {
    pub(super) fn empty() -> HistogramSnapshot {
        HistogramSnapshot { buckets: [0; BOUNDS + 1], sum_ns: 0 }
    }

    /// Adds one set of counts (`BOUNDS + 1` buckets) and its sum.
    pub(super) fn add(&mut self, buckets: impl Iterator<Item = u64>, sum_ns: u64) {
        for (into, n) in self.buckets.iter_mut().zip(buckets) {
            *into = into.wrapping_add(n);
        }
        self.sum_ns = self.sum_ns.wrapping_add(sum_ns);
    }

    /// The samples of `self` that are not in `earlier` (a copy of the same
    /// counts taken before), bucket by bucket. Counts only grow, so this
    /// never goes below zero; the sum is modular, like the sums it subtracts.
    pub(super) fn minus(mut self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        for (n, e) in self.buckets.iter_mut().zip(&earlier.buckets) {
            *n = n.saturating_sub(*e);
        }
        self.sum_ns = self.sum_ns.wrapping_sub(earlier.sum_ns);
        self
    }

    /// How many samples.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Their sum, kept modulo 2^64 nanoseconds (about 584 years): samples
    /// that add up to more than that wrap around.
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_ns)
    }

    /// Their mean, `None` without samples.
    pub fn mean(&self) -> Option<Duration> {
        let n = self.count();
        (n > 0).then(|| Duration::from_nanos(self.sum_ns / n))
    }

    /// The `q`-quantile (`0.5` for the median, `0.99` for p99), interpolated
    /// linearly inside its bucket, as Prometheus' `histogram_quantile` does; a
    /// quantile that falls in the `+Inf` bucket is reported as 30 s. `None`
    /// when there is no sample, or when `q` is not in `0.0..=1.0` (NaN included).
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let count = self.count();
        if !(0.0..=1.0).contains(&q) || count == 0 {
            return None;
        }
        let rank = q * count as f64;
        let mut below = 0u64;
        for (i, &n) in self.buckets[..BOUNDS].iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                let lower = if i == 0 { 0 } else { BOUND_NS[i - 1] } as f64;
                let upper = BOUND_NS[i] as f64;
                let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
                return Some(Duration::from_nanos((lower + (upper - lower) * within) as u64));
            }
            below += n;
        }
        // In the `+Inf` bucket: 30 s, its lower bound.
        Some(Duration::from_nanos(BOUND_NS[BOUNDS - 1]))
    }

    /// Cumulative counts at every `step`-th finite bound (`step` 1: all 74; 4:
    /// the 19 power-of-two multiples of 100 µs), then `(None, count)` for
    /// `+Inf`: the `le` buckets of a Prometheus histogram. A `step` of 0 is
    /// taken as 1.
    pub fn cumulative(&self, step: usize) -> Vec<(Option<Duration>, u64)> {
        let step = step.max(1);
        let mut out = Vec::with_capacity(BOUNDS / step + 2);
        let mut running = 0u64;
        for (i, &n) in self.buckets[..BOUNDS].iter().enumerate() {
            running += n;
            if i % step == 0 || i == BOUNDS - 1 {
                out.push((Some(Duration::from_nanos(BOUND_NS[i])), running));
            }
        }
        out.push((None, running + self.buckets[BOUNDS]));
        out
    }
}
