//! What does the hop to a dependency's pool cost when nothing is wrong?
//!
//! The server of the `isolation` bench (`benches/common`): tiny_http on loopback, a
//! fixed request pool of 16 threads, `POST /checkout` asking a fake fraud provider
//! that is healthy throughout. Group `http`, `/checkout` throughput at 16 concurrent
//! kept-alive connections:
//!
//! - `direct`: the fraud call on the request thread, with a 1 s client timeout;
//! - `watertight`: the fraud call through its `Dependency` (8 workers, a queue of 16
//!   so that no call is turned away, 1 s deadline).
//!
//! After criterion, a paired comparison runs outside it: both servers up at once and
//! measured in turn, round by round, so that the other builds sharing a small machine
//! weigh on both sides alike. Its per-round ratios and medians close the summary.
//!
//! Every id starts from nothing and is torn down before the next: clients joined,
//! the server and the pools shut down, and the process's thread count back where it
//! was.
//!
//! `cargo bench --features testing --bench http`

mod common;

use std::collections::HashMap;
use std::time::Duration;

use criterion::{Criterion, Throughput};

use common::app::Mode;
use common::gang::Gang;
use common::report::{criterion_median, joined, median, verdict};
use common::scenario::{Scenario, teardown_side_by_side};
use common::{FRAUD_DEADLINE, PAIRED_ROUNDS, round_order};
use watertight::testing::Fault;

/// Concurrent connections in the `http` group.
const HTTP_CONNECTIONS: usize = 16;
/// How long a client waits for an answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// Requests per id per round (about half a second at 2,000 requests/s).
const PAIRED_REQUESTS: u64 = 1_000;

/// The two ways of calling fraud in the `http` group.
const HTTP_IDS: [(&str, Mode); 2] = [
    ("direct", Mode::Direct { fraud_timeout: Some(FRAUD_DEADLINE) }),
    // The queue holds every offered call (16 connections, one call each), so no
    // call is turned away: this measures the hop, not rejections.
    ("watertight", Mode::Watertight { fraud_queue: HTTP_CONNECTIONS, job_deadline: true }),
];

#[derive(Debug, Default)]
struct HttpRow {
    id: &'static str,
    requests: u64,
    not_approved: u64,
    elapsed: Duration,
}

fn http(c: &mut Criterion) -> Vec<HttpRow> {
    let mut rows = Vec::new();
    let mut group = c.benchmark_group("http");
    group.throughput(Throughput::Elements(1)).sample_size(20);
    group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    for (id, mode) in HTTP_IDS {
        let scenario = Scenario::start(&format!("http/{id}"), mode, Fault::Healthy);
        let gang = Gang::start(&format!("{}/checkout", scenario.base), HTTP_CONNECTIONS, CLIENT_TIMEOUT);
        let mut row = HttpRow { id, ..HttpRow::default() };
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let (took, other) = gang.run(iters);
                row.requests += iters;
                row.not_approved += other;
                row.elapsed += took;
                took
            })
        });
        scenario.finish(gang);
        rows.push(row);
    }
    group.finish();
    rows
}

/// Requests per second of each id, round by round.
#[derive(Debug, Default)]
struct Paired {
    direct: Vec<f64>,
    watertight: Vec<f64>,
    not_approved: u64,
}

/// The `http` comparison once more, outside criterion: both servers up at once and
/// the two ids taking turns, so that a change in the machine's load (other builds
/// on its 2 cores) hits both alike and the per-round ratio cancels it. Criterion
/// measures one id after the other, seconds apart.
fn http_paired() -> Paired {
    let started: Vec<(Scenario, Gang)> = HTTP_IDS
        .iter()
        .map(|(id, mode)| {
            let scenario = Scenario::start(&format!("http-paired/{id}"), *mode, Fault::Healthy);
            let gang = Gang::start(&format!("{}/checkout", scenario.base), HTTP_CONNECTIONS, CLIENT_TIMEOUT);
            (scenario, gang)
        })
        .collect();
    let mut paired = Paired::default();
    for (_, gang) in &started {
        let _ = gang.run(PAIRED_REQUESTS);
    }
    for round in 0..PAIRED_ROUNDS {
        for k in round_order(round) {
            let (took, other) = started[k].1.run(PAIRED_REQUESTS);
            paired.not_approved += other;
            let rate = PAIRED_REQUESTS as f64 / took.as_secs_f64();
            if k == 0 { paired.direct.push(rate) } else { paired.watertight.push(rate) }
        }
    }
    teardown_side_by_side(started);
    paired
}

/// One line per id that ran, and the hop's cost over criterion's runs.
fn print_table(http: &[HttpRow]) {
    println!();
    println!("== http: POST /checkout, healthy fraud, {HTTP_CONNECTIONS} connections");
    println!(
        "{:<12} {:>9} {:>13} {:>11} {:>17}",
        "id", "requests", "not_approved", "req/s", "crit. median req/s"
    );
    let mut rates = HashMap::new();
    for row in http.iter().filter(|row| row.requests > 0) {
        let rate = row.requests as f64 / row.elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        rates.insert(row.id, rate);
        let crit = criterion_median("http", row.id).map_or("n/a".to_owned(), |ns| format!("{:.0}", 1e9 / ns));
        println!("{:<12} {:>9} {:>13} {:>11.0} {:>17}", row.id, row.requests, row.not_approved, rate, crit);
    }
    if let (Some(d), Some(w)) = (rates.get("direct"), rates.get("watertight")) {
        let cost = (1.0 - w / d) * 100.0;
        println!("hop cost, criterion runs (one id after the other): {cost:.1} %");
    }
}

fn print_paired(paired: &Paired) {
    let ratios: Vec<f64> = paired.direct.iter().zip(&paired.watertight).map(|(d, w)| w / d).collect();
    let rates = |v: &[f64]| joined(v, |x| format!("{x:.0}"));
    println!(
        "paired rounds ({PAIRED_ROUNDS} x {PAIRED_REQUESTS} requests each, alternating), req/s, not approved: {}",
        paired.not_approved
    );
    println!("  direct:     median {:>6.0}   rounds {}", median(&paired.direct), rates(&paired.direct));
    println!(
        "  watertight: median {:>6.0}   rounds {}",
        median(&paired.watertight),
        rates(&paired.watertight)
    );
    println!("  watertight/direct per round: {}", joined(&ratios, |r| format!("{r:.3}")));
    let cost = (1.0 - median(&ratios)) * 100.0;
    println!(
        "goal the hop costs <= 15 % throughput (median of paired rounds): {cost:.1} %, {}",
        verdict(cost <= 15.0)
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let rows = http(&mut c);
    c.final_summary();
    // Not criterion measurements: skipped when criterion only lists or tests.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list" || a == "--test") {
        println!("(one pass per id, nothing measured: no summary)");
        return;
    }
    let paired = http_paired();
    print_table(&rows);
    print_paired(&paired);
}
