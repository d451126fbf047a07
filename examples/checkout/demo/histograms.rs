//! The dependencies' own latency histograms, printed at the end of the demo:
//! what the crate recorded on its hot path, beside what the clients saw.

use std::fmt::Write as _;
use std::time::Duration;

use watertight::histogram::HistogramSnapshot;
use watertight::{Dependency, dependency::Percentiles};

/// One table: for each dependency and each of its three histograms, the p50
/// and p99 over the recent window (`Dependency::snapshot().latency`) and since
/// the dependency was built (`Pool::queue_wait_histogram`, `Pool::run_histogram`,
/// `Dependency::call_histogram`), with the number of samples since then.
pub fn report(deps: &[&Dependency]) -> String {
    let mut out = String::new();
    let window = deps.first().map(|d| d.call_histogram().window()).unwrap_or_default();
    let _ = writeln!(
        out,
        "\nlatency histograms (watertight's own: log buckets from 100 µs to 30 s, a quantile within \
         about 10 %; recent = the last {}-{} s)",
        window.as_secs(),
        2 * window.as_secs()
    );
    let _ = writeln!(
        out,
        "{:<15} {:<11} | {:>10} {:>10} | {:>8} {:>10} {:>10}",
        "dependency", "histogram", "recent p50", "recent p99", "total n", "total p50", "total p99"
    );
    for dep in deps {
        let recent = dep.snapshot().latency;
        let pool = dep.pool().unwrap();
        let rows = [
            ("queue_wait", recent.queue_wait, pool.queue_wait_histogram().snapshot()),
            ("run", recent.run, pool.run_histogram().snapshot()),
            ("call", recent.call, dep.call_histogram().snapshot()),
        ];
        for (name, recent, total) in rows {
            let _ = writeln!(out, "{}", row(dep.name(), name, recent, &total));
        }
    }
    out
}

fn row(dep: &str, histogram: &str, recent: Percentiles, total: &HistogramSnapshot) -> String {
    format!(
        "{:<15} {:<11} | {:>10} {:>10} | {:>8} {:>10} {:>10}",
        dep,
        histogram,
        dur(recent.p50),
        dur(recent.p99),
        total.count(),
        dur(total.quantile(0.5)),
        dur(total.quantile(0.99))
    )
}

/// `<100µs`, `570µs`, `4.2ms`, `310ms`, `12.5s`; `-` without samples. The
/// first bucket is 0 to 100 µs, and a quantile interpolated inside it says no
/// more than that.
fn dur(d: Option<Duration>) -> String {
    match d {
        None => "-".into(),
        Some(d) if d < Duration::from_micros(100) => "<100µs".into(),
        Some(d) if d < Duration::from_millis(1) => format!("{}µs", d.as_micros()),
        Some(d) if d < Duration::from_millis(100) => format!("{:.1}ms", d.as_secs_f64() * 1e3),
        Some(d) if d < Duration::from_secs(10) => format!("{:.0}ms", d.as_secs_f64() * 1e3),
        Some(d) => format!("{:.1}s", d.as_secs_f64()),
    }
}
