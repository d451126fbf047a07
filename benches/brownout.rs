//! A provider in brownout: what a fixed pool, a slow-call breaker and the adaptive
//! limit each cost the server, second by second.
//!
//! The scenario (see `tests/support/brownout.rs`): a loopback provider answers in
//! 5 ms, then saturates for 20 s (it serves 4 requests at once, 125 ms each, and the
//! rest wait: about 500 ms for the 16 a fixed pool sends at once), then answers in
//! 5 ms again; 32 caller threads call it
//! through a dependency of 16 workers (no queue) with a 3 s timeout, guarded by
//!
//! | id                  | guard                                                       |
//! |---------------------|-------------------------------------------------------------|
//! | `fixed`             | the pool alone (its breaker opens on failures, and none come) |
//! | `slow_call_breaker` | the pool, its breaker also opening at 50 % calls over 250 ms |
//! | `adaptive`          | the pool behind a [`Limiter`] (`AdaptiveLimit::new()`)       |
//!
//! and a separate caller calls an unrelated healthy provider every 20 ms.
//!
//! Printed: the per-second CSV of all three, one summary line each, and the goals
//! (adaptive against fixed, over the brownout less its first second): request threads
//! held at most a quarter, goodput at least 0.9x, the full limit back within 10 s.
//! Written: `examples/brownout.csv` and the chart `examples/brownout.svg`.
//!
//! Criterion group `limiter` first measures what the limiter adds to a call:
//! `try_acquire` then `record`, uncontended.
//!
//! `cargo bench --bench brownout` (about 2 minutes). `WATERTIGHT_BROWNOUT=1,3,3`
//! runs shorter phases (healthy before, brownout, healthy after, in seconds).

#[path = "../tests/support/brownout.rs"]
mod brownout;

use std::error::Error;
use std::fs;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use plotters::coord::Shift;
use plotters::prelude::*;

use brownout::{Guard, Run, Scenario};
use watertight::testing::Fault;
use watertight::{
    Verdict,
    limit::{AdaptiveLimit, Limiter},
};

const CSV: &str = "examples/brownout.csv";
const SVG: &str = "examples/brownout.svg";

fn limiter_overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("limiter");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    let limiter = Limiter::new(AdaptiveLimit::new(), 16).expect("valid");
    group.bench_function("acquire_record", |b| {
        b.iter(|| {
            let permit = limiter.try_acquire(Instant::now()).expect("uncontended");
            permit.record(black_box(Duration::from_millis(5)), Verdict::Success);
        })
    });
    group.finish();
}

/// `WATERTIGHT_BROWNOUT=before,brownout,after` in seconds, or the full scenario.
fn scenario() -> Result<Scenario, Box<dyn Error>> {
    let Ok(spec) = std::env::var("WATERTIGHT_BROWNOUT") else { return Ok(Scenario::full()) };
    let secs: Vec<u64> =
        spec.split(',').map(|p| p.trim().parse::<u64>()).collect::<Result<_, _>>().map_err(|e| {
            format!("WATERTIGHT_BROWNOUT={spec:?}: {e}; want before,brownout,after in seconds")
        })?;
    match secs[..] {
        [b, d, a] if d > 0 && b + d + a <= 600 => {
            Ok(Scenario::scaled(Duration::from_secs(b), Duration::from_secs(d), Duration::from_secs(a)))
        }
        _ => Err(format!(
            "WATERTIGHT_BROWNOUT={spec:?}: want three whole seconds, brownout > 0, 600 s at most"
        )
        .into()),
    }
}

fn goals(fixed: &Run, adaptive: &Run) -> Vec<String> {
    let held = |r: &Run| r.brownout_mean(|s| s.held_p50 as f64);
    let goodput = |r: &Run| r.brownout_mean(|s| s.goodput as f64);
    let held_ratio = held(adaptive) / held(fixed).max(f64::MIN_POSITIVE);
    let goodput_ratio = goodput(adaptive) / goodput(fixed).max(f64::MIN_POSITIVE);
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    let back = adaptive.recovered_after;
    vec![
        format!(
            "held threads (p50, mean over the brownout): adaptive {:.1} / fixed {:.1} = {held_ratio:.2} (goal <= 0.25): {}",
            held(adaptive),
            held(fixed),
            mark(held_ratio <= 0.25)
        ),
        format!(
            "goodput: adaptive {:.1}/s / fixed {:.1}/s = {goodput_ratio:.2} (goal >= 0.9): {}",
            goodput(adaptive),
            goodput(fixed),
            mark(goodput_ratio >= 0.9)
        ),
        format!(
            "full limit back after recovery: {} (goal <= 10 s): {}",
            back.map_or("never".to_owned(), |d| format!("{d:.2?}")),
            mark(back.is_some_and(|d| d <= Duration::from_secs(10)))
        ),
    ]
}

const COLORS: [RGBColor; 3] = [RGBColor(214, 39, 40), RGBColor(255, 127, 14), RGBColor(31, 119, 180)];
const SHADE: RGBColor = RGBColor(253, 219, 199);

/// One panel: `value` per second for each run, the brownout shaded; with
/// `zoom`, the brownout's seconds alone, on their own scale.
#[allow(clippy::too_many_arguments)] // one per aspect of the panel
fn panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    y_desc: &str,
    runs: &[Run],
    value: impl Fn(&brownout::Second) -> Option<f64>,
    limit: bool,
    zoom: bool,
) -> Result<(), Box<dyn Error>> {
    let value = |s: &brownout::Second| if zoom && !s.brownout { None } else { value(s) };
    let inside: Vec<f64> = runs
        .first()
        .map(|r| r.seconds.iter().filter(|s| s.brownout).map(|s| s.second as f64).collect())
        .unwrap_or_default();
    let seconds = runs.iter().map(|r| r.seconds.len()).max().unwrap_or(1) as f64;
    let x_range = match (zoom, inside.first(), inside.last()) {
        (true, Some(from), Some(to)) => *from..to + 1.0,
        _ => 0.0..seconds,
    };
    let y_max = runs.iter().flat_map(|r| r.seconds.iter().filter_map(value)).fold(1.0, f64::max) * 1.25;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(60)
        .build_cartesian_2d(x_range, 0.0..y_max)?;
    chart.configure_mesh().x_desc("seconds").y_desc(y_desc).light_line_style(WHITE).draw()?;
    if !zoom && let (Some(from), Some(to)) = (inside.first(), inside.last()) {
        chart.draw_series(std::iter::once(Rectangle::new(
            [(*from, 0.0), (to + 1.0, y_max)],
            SHADE.filled(),
        )))?;
    }
    for (run, color) in runs.iter().zip(COLORS) {
        let points: Vec<(f64, f64)> =
            run.seconds.iter().filter_map(|s| value(s).map(|v| (s.second as f64 + 0.5, v))).collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(run.guard.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        if limit && run.guard == Guard::Adaptive {
            let points: Vec<(f64, f64)> =
                run.seconds.iter().map(|s| (s.second as f64 + 0.5, s.limit_min as f64)).collect();
            chart
                .draw_series(LineSeries::new(points, color.mix(0.5).stroke_width(1)))?
                .label("adaptive limit (lowest in the second)")
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.mix(0.5)));
        }
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.9)).draw()?;
    Ok(())
}

fn chart(runs: &[Run], s: &Scenario) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::new(SVG, (1100, 1400)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = format!(
        "A provider in brownout ({:?} -> {}, shaded): {} callers, {} workers, {:?} timeout",
        s.healthy,
        degraded(s),
        s.callers,
        s.workers,
        s.timeout
    );
    let root = root.titled(&title, ("sans-serif", 22))?;
    let areas = root.split_evenly((4, 1));
    panel(
        &areas[0],
        "request threads held by the dependency (p50 per second)",
        "threads",
        runs,
        |r| Some(r.held_p50 as f64),
        true,
        false,
    )?;
    panel(
        &areas[1],
        "goodput: successful calls per second",
        "calls/s",
        runs,
        |r| Some(r.goodput as f64),
        false,
        false,
    )?;
    panel(
        &areas[2],
        "goodput during the brownout alone (its own scale)",
        "calls/s",
        runs,
        |r| Some(r.goodput as f64),
        false,
        true,
    )?;
    panel(
        &areas[3],
        "an unrelated healthy dependency: p50 latency per second",
        "ms",
        runs,
        |r| r.unrelated_p50_ms,
        false,
        false,
    )?;
    root.present()?;
    Ok(())
}

/// The brownout fault in words, for the chart.
fn degraded(s: &Scenario) -> String {
    match s.degraded {
        Fault::Saturated { capacity, service } => format!("saturated: {capacity} at once, {service:?} each"),
        other => other.to_string(),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut c = Criterion::default().configure_from_args();
    limiter_overhead(&mut c);
    c.final_summary();

    let s = scenario()?;
    println!("\nbrownout: {s:?}");
    let runs: Vec<Run> = Guard::ALL.iter().map(|&g| brownout::run(&s, g)).collect();
    let mut csv = vec![brownout::CSV_HEADER.to_owned()];
    runs.iter().for_each(|r| csv.extend(r.csv_rows()));
    let csv = csv.join("\n") + "\n";
    print!("{csv}");
    fs::write(CSV, &csv)?;
    println!();
    runs.iter().for_each(|r| println!("{}", r.summary()));
    let fixed = runs.iter().find(|r| r.guard == Guard::Fixed).ok_or("no fixed run")?;
    let adaptive = runs.iter().find(|r| r.guard == Guard::Adaptive).ok_or("no adaptive run")?;
    goals(fixed, adaptive).iter().for_each(|g| println!("goal: {g}"));
    chart(&runs, &s)?;
    println!("wrote {CSV} and {SVG}");
    Ok(())
}
