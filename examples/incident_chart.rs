//! Draws the checkout demo's incident as one SVG: `/orders` p99 second by second
//! with and without bulkheads, and what the checkout clients got in each mode, with
//! the seconds the fraud provider hung shaded.
//!
//! The two CSVs come from the demo (`--demo-csv`, one row per second):
//!
//! ```text
//! cargo run --release --features testing,serde --example checkout -- --demo --demo-csv examples/checkout/incident-bulkhead.csv
//! cargo run --release --features testing,serde --example checkout -- --demo --no-bulkhead --demo-csv examples/checkout/incident-no-bulkhead.csv
//! cargo run --example incident_chart -- examples/checkout/incident-bulkhead.csv \
//!     examples/checkout/incident-no-bulkhead.csv examples/checkout/incident.svg
//! ```
//!
//! Without arguments it reads and writes those three paths.

use std::error::Error;
use std::fs;
use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;

const DEFAULT_BULKHEAD: &str = "examples/checkout/incident-bulkhead.csv";
const DEFAULT_NAIVE: &str = "examples/checkout/incident-no-bulkhead.csv";
const DEFAULT_SVG: &str = "examples/checkout/incident.svg";

/// The `/orders` axis: log scale up to 5 s (the demo's client timeout is 2 s); the
/// band below 0.1 ms is left empty for the legend.
const P99_AXIS: Range<f64> = 0.005..5000.0;
/// Where a second in which no `/orders` request completed is marked.
const NO_ANSWER_MS: f64 = 3500.0;

const BULKHEAD_COLOR: RGBColor = RGBColor(31, 119, 180);
const NAIVE_COLOR: RGBColor = RGBColor(214, 39, 40);
const HANG_SHADE: RGBColor = RGBColor(253, 219, 199);
const APPROVED_COLOR: RGBColor = RGBColor(44, 160, 44);
const REVIEW_COLOR: RGBColor = RGBColor(255, 127, 14);
const ERROR_COLOR: RGBColor = RGBColor(214, 39, 40);
const REJECTED_COLOR: RGBColor = RGBColor(127, 127, 127);

/// One second of a demo run, the columns the chart needs.
#[derive(Debug, Clone)]
struct Second {
    /// 1-based: the row covers the interval (second - 1, second].
    second: u32,
    hang: bool,
    /// `/orders` requests that completed in this second (errors included).
    orders: u32,
    orders_p99_ms: Option<f64>,
    approved: u32,
    rejected: u32,
    manual_review: u32,
    /// Client errors and timeouts plus 403/503 from the access gate: the checkout
    /// did not get a decision.
    errors: u32,
}

/// Reads one outcome count of a second.
type Count = fn(&Second) -> u32;

fn read_csv(path: &str) -> Result<Vec<Second>, Box<dyn Error>> {
    let text = fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or_else(|| format!("{path}: empty"))?.split(',').collect();
    let col = |name: &str| {
        header.iter().position(|h| h.trim() == name).ok_or_else(|| format!("{path}: no column {name:?}"))
    };
    let (second, fault, orders, p99) =
        (col("second")?, col("fraud_fault")?, col("orders")?, col("orders_p99_ms")?);
    let (approved, rejected, review) =
        (col("checkout_approved")?, col("checkout_rejected")?, col("checkout_manual_review")?);
    let (unavailable, errors) = (col("checkout_unavailable")?, col("checkout_errors")?);

    let mut rows = Vec::new();
    for (n, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let at = |i: usize| fields.get(i).copied().unwrap_or("");
        let int = |i: usize| -> Result<u32, String> {
            at(i).parse().map_err(|_| format!("{path}:{}: {:?} is not a count", n + 2, at(i)))
        };
        rows.push(Second {
            second: int(second)?,
            hang: at(fault).starts_with("hang"),
            orders: int(orders)?,
            orders_p99_ms: at(p99).parse().ok(),
            approved: int(approved)?,
            rejected: int(rejected)?,
            manual_review: int(review)?,
            errors: int(errors)? + int(unavailable)?,
        });
    }
    if rows.is_empty() {
        return Err(format!("{path}: no rows").into());
    }
    Ok(rows)
}

/// The hung stretches as x ranges: second `s` covers `(s - 1, s]`.
fn hang_spans(rows: &[Second]) -> Vec<Range<f64>> {
    let mut spans: Vec<Range<f64>> = Vec::new();
    for row in rows.iter().filter(|r| r.hang) {
        let (from, to) = (f64::from(row.second) - 1.0, f64::from(row.second));
        match spans.last_mut() {
            Some(last) if last.end == from => last.end = to,
            _ => spans.push(from..to),
        }
    }
    spans
}

fn legend_line(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
}

fn p99_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    x: Range<f64>,
    spans: &[Range<f64>],
    runs: [(&str, &[Second], RGBColor); 2],
) -> Result<(), Box<dyn Error>> {
    let mut chart = ChartBuilder::on(area)
        .caption("GET /orders/{id} (never calls fraud): p99 latency per second", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(70)
        .build_cartesian_2d(x.clone(), P99_AXIS.log_scale())?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("p99 (log scale)")
        .y_label_formatter(&|v| if *v >= 1000.0 { format!("{} s", v / 1000.0) } else { format!("{v} ms") })
        .light_line_style(WHITE)
        .draw()?;
    chart.draw_series(
        spans
            .iter()
            .map(|s| Rectangle::new([(s.start, P99_AXIS.start), (s.end, P99_AXIS.end)], HANG_SHADE.filled())),
    )?;
    if let Some(first) = spans.first() {
        chart.draw_series(std::iter::once(Text::new(
            "fraud hung",
            (first.start + 0.3, 1800.0),
            ("sans-serif", 14).into_font().color(&NAIVE_COLOR),
        )))?;
    }
    // The demo's client timeout: no /orders latency can exceed it.
    chart.draw_series(LineSeries::new([(x.start, 2000.0), (x.end, 2000.0)], BLACK.mix(0.3)))?;
    chart.draw_series(std::iter::once(Text::new(
        "client timeout 2 s",
        (x.start + 0.3, 1500.0),
        ("sans-serif", 12).into_font().color(&BLACK.mix(0.6)),
    )))?;

    for (label, rows, color) in runs {
        // Seconds in which nothing completed break the line; every second that has a
        // p99 also gets a dot, so that one standing alone still shows.
        let mut segments: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for row in rows {
            match row.orders_p99_ms.filter(|_| row.orders > 0) {
                Some(ms) => {
                    segments.last_mut().expect("never empty").push((f64::from(row.second), ms.max(0.1)))
                }
                None => segments.push(Vec::new()),
            }
        }
        let mut labelled = false;
        for segment in segments.into_iter().filter(|s| !s.is_empty()) {
            chart.draw_series(segment.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            let drawn = chart.draw_series(LineSeries::new(segment, color.stroke_width(2)))?;
            if !labelled {
                drawn.label(label).legend(legend_line(color));
                labelled = true;
            }
        }
        let silent: Vec<(f64, f64)> =
            rows.iter().filter(|r| r.orders == 0).map(|r| (f64::from(r.second), NO_ANSWER_MS)).collect();
        if !silent.is_empty() {
            chart
                .draw_series(silent.into_iter().map(|p| Cross::new(p, 5, color.stroke_width(2))))?
                .label(format!("{label}: no /orders request completed that second"))
                .legend(move |(x, y)| Cross::new((x + 10, y), 5, color.stroke_width(2)));
        }
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    Ok(())
}

/// Both panels' legend: boxed, over a nearly opaque background, at `position`.
fn draw_legend<'a, 'b: 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, CT>,
    position: SeriesLabelPosition,
) -> Result<(), Box<dyn Error>> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .draw()?;
    Ok(())
}

fn outcomes_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    x: Range<f64>,
    y_max: u32,
    spans: &[Range<f64>],
    rows: &[Second],
) -> Result<(), Box<dyn Error>> {
    // Head room above the data for the legend.
    let y_top = f64::from(y_max) * 1.7 + 1.0;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(70)
        .build_cartesian_2d(x, 0.0..y_top)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("checkouts per second")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE)
        .draw()?;
    chart.draw_series(
        spans.iter().map(|s| Rectangle::new([(s.start, 0.0), (s.end, y_top)], HANG_SHADE.filled())),
    )?;
    let series: [(&str, Count, RGBColor); 4] = [
        ("approved", |r| r.approved, APPROVED_COLOR),
        ("manual_review (fallback)", |r| r.manual_review, REVIEW_COLOR),
        ("errors / client timeouts", |r| r.errors, ERROR_COLOR),
        ("rejected by fraud", |r| r.rejected, REJECTED_COLOR),
    ];
    for (label, value, color) in series {
        chart
            .draw_series(LineSeries::new(
                rows.iter().map(|r| (f64::from(r.second), f64::from(value(r)))),
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(legend_line(color));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (bulkhead_csv, naive_csv, svg) = match args.as_slice() {
        [] => (DEFAULT_BULKHEAD, DEFAULT_NAIVE, DEFAULT_SVG),
        [a, b, c] => (a.as_str(), b.as_str(), c.as_str()),
        _ => return Err("usage: incident_chart [BULKHEAD.csv NO_BULKHEAD.csv OUT.svg]".into()),
    };
    let bulkhead = read_csv(bulkhead_csv)?;
    let naive = read_csv(naive_csv)?;

    let seconds = bulkhead.iter().chain(&naive).map(|r| r.second).max().unwrap_or(1);
    let x = 0.0..f64::from(seconds);
    // Both runs use the same phases; shade what each says, the first run's when equal.
    let spans = hang_spans(&bulkhead);
    let naive_spans = hang_spans(&naive);
    if spans != naive_spans {
        eprintln!("warning: the two runs' hung seconds differ; each panel shades its own");
    }
    let y_max = bulkhead
        .iter()
        .chain(&naive)
        .map(|r| r.approved.max(r.manual_review).max(r.errors).max(r.rejected))
        .max()
        .unwrap_or(1);

    let root = SVGBackend::new(svg, (1100, 1160)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "The checkout demo: a hung fraud provider (shaded), with and without watertight bulkheads",
        ("sans-serif", 22),
    )?;
    let (top, bottom) = root.split_vertically(440);
    let (middle, bottom) = bottom.split_vertically(330);
    p99_panel(
        &top,
        x.clone(),
        &spans,
        [
            ("with bulkheads (watertight)", &bulkhead, BULKHEAD_COLOR),
            ("without (--no-bulkhead)", &naive, NAIVE_COLOR),
        ],
    )?;
    outcomes_panel(
        &middle,
        "POST /checkout with bulkheads: outcomes per second",
        x.clone(),
        y_max,
        &spans,
        &bulkhead,
    )?;
    outcomes_panel(
        &bottom,
        "POST /checkout without bulkheads (--no-bulkhead): outcomes per second",
        x,
        y_max,
        &naive_spans,
        &naive,
    )?;
    root.present()?;
    println!("wrote {svg} ({} + {} seconds)", bulkhead.len(), naive.len());
    Ok(())
}
