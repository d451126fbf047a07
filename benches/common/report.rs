//! The figures a bench prints after criterion: percentiles over every recorded
//! request, medians of paired rounds, and criterion's own median next to them
//! (criterion itself reports central figures only).

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The nearest-rank `p`th percentile of `sorted`; zero when it is empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
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
