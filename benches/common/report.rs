//! The figures a bench prints after criterion: percentiles over every recorded
//! request ([`Latencies`], an HdrHistogram), medians of paired rounds, and
//! criterion's own median next to them (criterion itself reports central figures
//! only).

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use hdrhistogram::Histogram;

/// The longest latency [`Latencies`] tells apart; a longer one is counted as an
/// hour. Every request of these benches gives up after seconds.
const LATENCY_CAP_US: u64 = 3_600_000_000;

/// Request latencies in an HdrHistogram, and their exact sum.
///
/// Precision: each latency is recorded in whole microseconds (rounded to the
/// nearest), with **3 significant digits**. Up to 2.048 ms every microsecond has
/// its own bucket, so a percentile is the exact sample to the microsecond (what
/// [`ms`] prints); above that a bucket is at most 1/1024 of its value wide, and
/// the percentile reported is its bucket's upper end, or the largest latency
/// recorded if that is lower: never below the sample it stands for, and at most
/// 0.1 % above it (a failure charged exactly 2 s reads 2000.000 ms).
///
/// [`percentile`](Self::percentile) is nearest-rank, as it was over sorted
/// vectors, so figures from before the histogram stay comparable. The
/// histogram grows to the largest latency recorded (auto-resizing), a few
/// hundred KiB at most.
#[derive(Clone, Debug)]
pub struct Latencies {
    hist: Histogram<u64>,
    sum: Duration,
    /// The largest latency recorded, in µs, exactly (the histogram's `max()` is
    /// its bucket's upper end).
    max_us: u64,
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies {
            hist: Histogram::new(3).expect("3 significant digits are within hdrhistogram's 0..=5"),
            sum: Duration::ZERO,
            max_us: 0,
        }
    }
}

impl Latencies {
    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from((d.as_nanos() + 500) / 1_000).unwrap_or(u64::MAX).min(LATENCY_CAP_US);
        // An auto-resizing histogram takes any value up to i64::MAX / 2; the cap is far below.
        self.hist.record(us).expect("an auto-resizing histogram records any value up to the cap");
        self.sum += d;
        self.max_us = self.max_us.max(us);
    }

    /// Adds every latency of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        self.hist.add(&other.hist).expect("an auto-resizing histogram takes any other");
        self.sum += other.sum;
        self.max_us = self.max_us.max(other.max_us);
    }

    /// How many latencies were recorded.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The nearest-rank `p`th percentile (`p` in 0..=100): the `ceil(p / 100 * n)`th
    /// smallest of `n` latencies (the smallest for `p` 0), within the precision above;
    /// zero when there is none.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.hist.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_micros(self.hist.value_at_percentile(p).min(self.max_us))
    }

    /// The exact mean (from the sum, not the buckets); zero when there is none.
    pub fn mean(&self) -> Duration {
        match u32::try_from(self.len()) {
            Ok(0) => Duration::ZERO,
            Ok(n) => self.sum / n,
            Err(_) => Duration::from_secs_f64(self.sum.as_secs_f64() / self.len() as f64),
        }
    }
}

/// The median of a handful of figures (one per paired round): the middle one, or
/// the mean of the two middle ones. Sorting a few values is exact; a histogram
/// would round them and has no "mean of the two middle ones".
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Criterion's own median (ns per iteration) from its `estimates.json`, when found.
pub fn criterion_median(group: &str, id: &str) -> Option<f64> {
    let root = std::env::var_os("CRITERION_HOME").map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| PathBuf::from("target"), PathBuf::from)
            .join("criterion")
    });
    let text = fs::read_to_string(root.join(group).join(id).join("new").join("estimates.json")).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value["median"]["point_estimate"].as_f64()
}

pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// How a goal line ends.
pub fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// `values`, each written by `show`, separated by spaces.
pub fn joined<T>(values: &[T], show: impl Fn(&T) -> String) -> String {
    values.iter().map(show).collect::<Vec<_>>().join(" ")
}
