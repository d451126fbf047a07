//! What the demo's clients measured: `/orders` latencies in an HdrHistogram.

use std::time::Duration;

use hdrhistogram::Histogram;

/// The longest latency told apart; a longer one is counted as an hour. The
/// demo's clients give up after seconds.
const CAP_US: u64 = 3_600_000_000;

/// Latencies in an HdrHistogram, one per second of the demo and one per phase.
///
/// Precision: each latency is recorded in whole microseconds (rounded to the
/// nearest), with **3 significant digits**. Up to 2.048 ms every microsecond
/// has its own bucket, so a percentile is the exact sample to the microsecond;
/// above that a bucket is at most 1/1024 of its value wide, and the percentile
/// reported is its bucket's upper end, or the largest latency recorded if that
/// is lower: never below the sample it stands for, and at most 0.1 % above it. The demo prints milliseconds to one decimal
/// (its CSV to three), so its figures read as they did over sorted vectors.
///
/// [`percentile_ms`](Self::percentile_ms) is nearest-rank, as it was over
/// sorted vectors: the `ceil(q n)`th smallest of `n` latencies.
///
/// Counts are `u32` (a second holds tens of requests, a phase at most an hour
/// of them) and the histogram grows only to the largest latency it holds: 8 KiB
/// for a second of fast answers, about 50 KiB for one with 2 s timeouts.
#[derive(Clone, Debug)]
pub struct Latencies {
    hist: Histogram<u32>,
    /// The largest latency recorded, in µs, exactly (the histogram's `max()` is
    /// its bucket's upper end).
    max_us: u64,
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies {
            hist: Histogram::new(3).expect("3 significant digits are within hdrhistogram's 0..=5"),
            max_us: 0,
        }
    }
}

impl Latencies {
    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from((d.as_nanos() + 500) / 1_000).unwrap_or(u64::MAX).min(CAP_US);
        // An auto-resizing histogram takes any value up to i64::MAX / 2; the cap is far below.
        self.hist.record(us).expect("an auto-resizing histogram records any value up to the cap");
        self.max_us = self.max_us.max(us);
    }

    /// Adds every latency of `other`.
    pub fn add(&mut self, other: &Latencies) {
        // Auto-resizing: it grows to hold the other's largest value.
        self.hist.add(&other.hist).expect("an auto-resizing histogram takes any other's values");
        self.max_us = self.max_us.max(other.max_us);
    }

    /// How many latencies were recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// The nearest-rank `q`-quantile (`0.5`, `0.99`) in milliseconds, within the
    /// precision above; `None` when there is no latency.
    pub fn percentile_ms(&self, q: f64) -> Option<f64> {
        (!self.hist.is_empty()).then(|| self.hist.value_at_quantile(q).min(self.max_us) as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_to_the_microsecond_below_2_ms() {
        let mut l = Latencies::default();
        assert_eq!(l.percentile_ms(0.5), None);
        for us in [900, 300, 100, 500, 700] {
            l.record(Duration::from_micros(us));
        }
        assert_eq!(l.len(), 5);
        // ceil(0.5 * 5) = 3rd smallest; ceil(0.99 * 5) = 5th.
        assert_eq!(l.percentile_ms(0.5), Some(0.5));
        assert_eq!(l.percentile_ms(0.99), Some(0.9));
        l.record(Duration::from_nanos(1_499_600));
        assert_eq!(l.percentile_ms(1.0), Some(1.5), "rounded to the nearest microsecond");
    }

    /// The nearest-rank percentile over a sorted vector, as the demo computed it
    /// before the histogram.
    fn sorted_percentile(sorted: &[f64], q: f64) -> f64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    #[test]
    fn figures_match_the_sorted_vectors_within_the_stated_precision() {
        // 2,000 latencies from 50 µs to about 4 s, spread over six decades
        // (a fixed linear congruential sequence, so every run is the same).
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut l = Latencies::default();
        let mut sorted = Vec::new();
        for _ in 0..2_000 {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let us = 50.0 * 10f64.powf((state >> 11) as f64 / (1u64 << 53) as f64 * 4.9);
            let d = Duration::from_nanos((us * 1000.0) as u64);
            l.record(d);
            sorted.push((d.as_nanos() as f64 / 1000.0).round() / 1000.0);
        }
        sorted.sort_by(f64::total_cmp);
        for q in [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0] {
            let (want, got) = (sorted_percentile(&sorted, q), l.percentile_ms(q).unwrap());
            if want < 2.048 {
                assert_eq!(got, want, "q {q}: exact to the microsecond below 2.048 ms");
            } else {
                assert!(got >= want && got <= want * (1.0 + 1.0 / 1024.0), "q {q}: {got} ms, want {want} ms");
            }
        }
    }

    #[test]
    fn above_2_ms_a_percentile_is_at_most_a_thousandth_high() {
        let mut l = Latencies::default();
        let sample = Duration::from_micros(1_234_567);
        l.record(sample);
        l.record(Duration::from_secs(7200));
        let p50 = l.percentile_ms(0.5).unwrap();
        assert!((1234.567..=1234.567 * (1.0 + 1.0 / 1024.0)).contains(&p50), "{p50}");
        assert_eq!(
            l.percentile_ms(1.0),
            Some(3_600_000.0),
            "two hours count as one, and the largest is exact"
        );
        // A constant at the top (a failure charged its full timeout) reads exactly.
        let mut charged = Latencies::default();
        charged.record(Duration::from_millis(1));
        (0..3).for_each(|_| charged.record(Duration::from_secs(2)));
        assert_eq!(charged.percentile_ms(0.5), Some(2000.0));
        let mut sum = Latencies::default();
        sum.add(&l);
        sum.add(&l);
        assert_eq!(sum.len(), 4);
        assert_eq!(sum.percentile_ms(0.5), Some(p50));
    }
}
