//! Does one hung dependency take the whole server down? The checkout incident, measured.
//!
//! A tiny_http server on loopback answers on a fixed request pool of 16 threads
//! ([`watertight::server::serve`]) two routes:
//!
//! - `GET /orders/{id}` reads an in-memory store through its own `orders-db`
//!   dependency: a fast blocking call that never touches the fraud provider;
//! - `POST /checkout` asks a fake fraud provider, and falls back to `manual_review`
//!   (202) when it cannot.
//!
//! While 32 background clients keep `/checkout` busy, a separate client measures
//! `GET /orders/{id}`. Group `isolation`, one id per way of running the blocking calls:
//!
//! | id            | fraud    | where the blocking calls run                                          |
//! |---------------|----------|-----------------------------------------------------------------------|
//! | `baseline`    | healthy  | a `Dependency` each (the crate's design)                              |
//! | `watertight`  | hung     | a `Dependency` each: fraud 8 workers, queue 2, 1 s deadline, breaker  |
//! | `shared_pool` | hung     | one tokio blocking pool of 16 threads for both, the same breaker, and |
//! |               |          | the same deadlines applied to the *wait* (a time limiter)             |
//! | `naive`       | hung     | on the request thread, fraud without any timeout (the incident)       |
//!
//! `shared_pool` is the Rust counterpart of the incident's first fix: breaker and time
//! limiter around `supplyAsync` on the common pool. A time limiter can stop waiting
//! but cannot stop a blocking call, so every hung fraud call keeps a pool thread, and
//! `orders-db` queues behind them.
//!
//! Two control ids say what the outcome rests on:
//!
//! - `watertight_job_no_timeout`: as `watertight`, but the fraud job ignores its
//!   deadline (no `with_deadline`), so hung calls pin the fraud workers. Isolation
//!   must not depend on every job bounding its own I/O.
//! - `shared_pool_job_timeout`: as `shared_pool`, but the fraud call carries its own
//!   1 s timeout, so the shared pool drains once the breaker opens.
//!
//! An `/orders` request that does not get its order (a client timeout of 2 s, or any
//! answer but 200) is charged the full 2 s: failing fast is still failing. Every
//! request is recorded, and a summary with p50/p99 and the ratios to `baseline` is
//! printed at the end (criterion itself reports central figures only). The
//! percentiles are nearest-rank, from an HdrHistogram of 3 significant digits
//! (`common::report::Latencies`: to the microsecond up to 2 ms, within 0.1 % above).
//!
//! After criterion, a paired comparison runs outside it (`baseline` against
//! `watertight`): both servers and both loads up at once and `/orders` measured on
//! each in turn, round by round, so that the other builds sharing a small machine
//! weigh on both sides alike. Its per-round ratios and median close the summary.
//!
//! Every id starts from nothing and is torn down before the next: providers
//! released, clients joined, the server and the pools shut down, and the process's
//! thread count back where it was. The server, the teardown and the figures are
//! shared with the `http` bench (`benches/common`).
//!
//! `cargo bench --features testing --bench isolation`

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode};
use watertight::breaker::State;

use common::app::Mode;
use common::report::{Latencies, criterion_median, joined, median, ms, verdict};
use common::scenario::{Clients, Scenario, teardown_side_by_side};
use common::{
    FRAUD_DEADLINE, ORDER_BODY, ORDERS, PAIRED_ROUNDS, REQUEST_THREADS, SHARED_BLOCKING_THREADS, client,
    round_order,
};
use watertight::testing::Fault;

/// Background clients calling `/checkout` during the `isolation` ids.
const CHECKOUT_CLIENTS: usize = 32;
/// A background client gives up on a checkout after this long ...
const CHECKOUT_CLIENT_TIMEOUT: Duration = Duration::from_secs(1);
/// ... and waits this long between two checkouts, so that the load is steady traffic
/// rather than a CPU-saturating spin on a 2-core machine.
const CHECKOUT_PAUSE: Duration = Duration::from_millis(50);
/// Hard bounds on every background client, whatever happens to the stop flag.
const LOAD_TIME_CAP: Duration = Duration::from_secs(120);
const LOAD_REQUEST_CAP: u64 = 20_000;
/// The measuring client's timeout; an `/orders` request without its order costs this.
const ORDERS_CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// Requests per id per round of the paired `/orders` comparison.
const ISOLATION_PAIRED_REQUESTS: u64 = 500;

/// The crate's design: a `Dependency` each, the fraud job bounded by its deadline.
const WATERTIGHT: Mode = Mode::Watertight { fraud_queue: 2, job_deadline: true };

/// The ids of the `isolation` group, in the order they run.
const IDS: [(&str, Mode, Fault); 6] = [
    ("baseline", WATERTIGHT, Fault::Healthy),
    ("watertight", WATERTIGHT, Fault::Hang),
    ("shared_pool", Mode::SharedPool { fraud_timeout: None }, Fault::Hang),
    ("naive", Mode::Direct { fraud_timeout: None }, Fault::Hang),
    ("watertight_job_no_timeout", Mode::Watertight { fraud_queue: 2, job_deadline: false }, Fault::Hang),
    ("shared_pool_job_timeout", Mode::SharedPool { fraud_timeout: Some(FRAUD_DEADLINE) }, Fault::Hang),
];

// ---------------------------------------------------------------------------------
// Background load
// ---------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default)]
struct LoadCounts {
    approved: u64,
    fallback: u64,
    failed: u64,
}

/// Background clients calling `/checkout` until stopped (or their caps).
struct Load {
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<LoadCounts>>,
}

impl Load {
    /// Starts `clients` background clients and returns once every one is ready.
    fn start(base: &str, clients: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ready = Arc::new(Barrier::new(clients + 1));
        let url = format!("{base}/checkout");
        let clients = (0..clients)
            .map(|i| {
                let (stop, ready, url) = (Arc::clone(&stop), Arc::clone(&ready), url.clone());
                thread::Builder::new()
                    .name(format!("checkout-client-{i}"))
                    .spawn(move || {
                        ready.wait();
                        checkout_loop(&url, &stop)
                    })
                    .expect("spawn a background client")
            })
            .collect();
        ready.wait();
        Load { stop, clients }
    }
}

/// One background client: a checkout, a pause, again, until stopped or capped.
fn checkout_loop(url: &str, stop: &AtomicBool) -> LoadCounts {
    let agent = client(CHECKOUT_CLIENT_TIMEOUT);
    let mut counts = LoadCounts::default();
    let give_up = Instant::now() + LOAD_TIME_CAP;
    for _ in 0..LOAD_REQUEST_CAP {
        if stop.load(Ordering::Relaxed) || Instant::now() >= give_up {
            break;
        }
        match agent.post(url).send(ORDER_BODY).map(|r| r.status().as_u16()) {
            Ok(200) => counts.approved += 1,
            Ok(202) => counts.fallback += 1,
            _ => counts.failed += 1,
        }
        thread::sleep(CHECKOUT_PAUSE);
    }
    counts
}

impl Clients for Load {
    fn signal_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn join(self, label: &str) {
        self.signal_stop();
        let counts = self.clients.into_iter().fold(LoadCounts::default(), |sum, client| {
            let c = client.join().expect("a background client panicked");
            LoadCounts {
                approved: sum.approved + c.approved,
                fallback: sum.fallback + c.fallback,
                failed: sum.failed + c.failed,
            }
        });
        eprintln!(
            "[{label}] background checkouts: {} approved, {} manual_review, {} failed or timed out",
            counts.approved, counts.fallback, counts.failed
        );
    }
}

// ---------------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------------

/// Every `/orders` request of one id, as charged.
#[derive(Debug, Default)]
struct OrdersRecord {
    charged: Latencies,
    /// The time until the answer (or the client's timeout), whatever it was.
    wall: Latencies,
    ok: u64,
    not_ok: u64,
    timed_out: u64,
}

impl OrdersRecord {
    /// Asks for one order; returns what it is charged.
    fn measure(&mut self, agent: &ureq::Agent, base: &str, n: u64) -> Duration {
        let url = format!("{base}/orders/{}", n % ORDERS + 1);
        let began = Instant::now();
        let result = agent.get(&url).call().and_then(|mut r| {
            let status = r.status().as_u16();
            r.body_mut().read_to_string().map(|_| status)
        });
        let took = began.elapsed();
        let charged = match result {
            Ok(200) => {
                self.ok += 1;
                took
            }
            Ok(_) => {
                self.not_ok += 1;
                ORDERS_CLIENT_TIMEOUT
            }
            Err(ureq::Error::Timeout(_)) => {
                self.timed_out += 1;
                ORDERS_CLIENT_TIMEOUT
            }
            Err(_) => {
                self.not_ok += 1;
                ORDERS_CLIENT_TIMEOUT
            }
        };
        self.charged.record(charged);
        self.wall.record(took);
        charged
    }

    /// Adds another record's counts (not its samples).
    fn add_counts(&mut self, other: &OrdersRecord) {
        self.ok += other.ok;
        self.not_ok += other.not_ok;
        self.timed_out += other.timed_out;
    }
}

// ---------------------------------------------------------------------------------
// The isolation group
// ---------------------------------------------------------------------------------

struct IsolationRow {
    id: &'static str,
    record: OrdersRecord,
}

/// Sample sizes and times: the failing ids and the controls are bounded, whether
/// they turn out fast or slow.
fn configure(group: &mut BenchmarkGroup<'_, WallTime>, id: &str) {
    if matches!(id, "shared_pool" | "naive") {
        // Each request may cost 2 s: ten samples of one request each.
        group.sample_size(10).sampling_mode(SamplingMode::Flat);
        group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(1));
    } else if id.contains("job") {
        // Controls: short, and bounded whether they turn out fast or slow.
        group.sample_size(10).sampling_mode(SamplingMode::Flat);
        group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    } else {
        group.sample_size(30).sampling_mode(SamplingMode::Auto);
        group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    }
}

/// Waits (bounded) until the scenario of `id` is in the state that id measures.
fn settle(id: &str, scenario: &Scenario) {
    match id {
        "baseline" => {
            scenario.settle("every client served", || scenario.fraud.hits() >= 2 * CHECKOUT_CLIENTS as u64)
        }
        "watertight" | "watertight_job_no_timeout" | "shared_pool_job_timeout" => {
            scenario.settle("fraud breaker open", || scenario.app.fraud_state() == Some(State::Open))
        }
        "shared_pool" => scenario.settle("fraud breaker open and the shared pool pinned", || {
            scenario.app.fraud_state() == Some(State::Open)
                && scenario.fraud.in_flight() >= SHARED_BLOCKING_THREADS
        }),
        _ => scenario.settle("every request thread pinned", || {
            scenario.server.busy() >= REQUEST_THREADS && scenario.fraud.in_flight() >= REQUEST_THREADS
        }),
    }
}

fn isolation(c: &mut Criterion) -> Vec<IsolationRow> {
    let mut rows = Vec::new();
    let mut group = c.benchmark_group("isolation");
    for (id, mode, fault) in IDS {
        configure(&mut group, id);
        let scenario = Scenario::start(&format!("isolation/{id}"), mode, fault);
        let load = Load::start(&scenario.base, CHECKOUT_CLIENTS);
        settle(id, &scenario);

        let agent = client(ORDERS_CLIENT_TIMEOUT);
        let mut record = OrdersRecord::default();
        let mut n = 0u64;
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let mut charged = Duration::ZERO;
                for _ in 0..iters {
                    charged += record.measure(&agent, &scenario.base, n);
                    n += 1;
                }
                charged
            })
        });
        drop(agent);
        scenario.finish(load);
        rows.push(IsolationRow { id, record });
    }
    group.finish();
    rows
}

// ---------------------------------------------------------------------------------
// Paired rounds
// ---------------------------------------------------------------------------------

/// `/orders` p50 of `baseline` and `watertight`, round by round.
#[derive(Debug, Default)]
struct IsolationPaired {
    baseline: Vec<Duration>,
    watertight: Vec<Duration>,
    /// Every request of each id, over all rounds.
    all: [OrdersRecord; 2],
}

/// `baseline` against `watertight` once more, outside criterion: both servers up at
/// once, each with its own 32 checkout clients, and `/orders` measured on each in
/// turn, so that both see the same machine (other builds on its 2 cores come and go
/// within seconds). The per-round ratio of the p50s cancels that drift; criterion
/// measures one id after the other, seconds apart.
fn isolation_paired() -> IsolationPaired {
    let started: Vec<(Scenario, Load)> = [("baseline", Fault::Healthy), ("watertight", Fault::Hang)]
        .into_iter()
        .map(|(id, fault)| {
            let scenario = Scenario::start(&format!("isolation-paired/{id}"), WATERTIGHT, fault);
            let load = Load::start(&scenario.base, CHECKOUT_CLIENTS);
            (scenario, load)
        })
        .collect();
    settle("baseline", &started[0].0);
    settle("watertight", &started[1].0);
    let paired = measure_paired(&started[0].0.base, &started[1].0.base);
    teardown_side_by_side(started);
    paired
}

/// The paired rounds over the `baseline` and the `watertight` server, after a warm-up
/// of a fifth of a round on each.
fn measure_paired(baseline: &str, watertight: &str) -> IsolationPaired {
    let bases = [baseline, watertight];
    let agent = client(ORDERS_CLIENT_TIMEOUT);
    let mut paired = IsolationPaired::default();
    let mut n = 0u64;
    for base in bases {
        let mut warm_up = OrdersRecord::default();
        for _ in 0..ISOLATION_PAIRED_REQUESTS / 5 {
            warm_up.measure(&agent, base, n);
            n += 1;
        }
    }
    for round in 0..PAIRED_ROUNDS {
        for k in round_order(round) {
            let mut record = OrdersRecord::default();
            for _ in 0..ISOLATION_PAIRED_REQUESTS {
                let charged = record.measure(&agent, bases[k], n);
                n += 1;
                paired.all[k].charged.record(charged);
            }
            paired.all[k].add_counts(&record);
            let p50 = record.charged.percentile(50.0);
            if k == 0 { paired.baseline.push(p50) } else { paired.watertight.push(p50) }
        }
    }
    paired
}

// ---------------------------------------------------------------------------------
// Summary
// ---------------------------------------------------------------------------------

/// Prints one line per id that ran; returns each id's p50 as a multiple of
/// `baseline`'s.
fn print_table(isolation: &[IsolationRow]) -> HashMap<&'static str, f64> {
    println!();
    println!("== isolation: GET /orders/{{id}} while 32 clients call /checkout (failures charged 2 s)");
    println!(
        "{:<26} {:>6} {:>6} {:>7} {:>9} {:>11} {:>11} {:>11} {:>14} {:>10} {:>11} {:>11}",
        "id",
        "n",
        "ok",
        "not_ok",
        "timed_out",
        "p50",
        "p99",
        "mean",
        "crit. median",
        "p50/base",
        "wall p50",
        "wall p99"
    );
    let base_p50 = isolation
        .iter()
        .find(|row| row.id == "baseline" && !row.record.charged.is_empty())
        .map(|row| row.record.charged.percentile(50.0));
    let mut p50s = HashMap::new();
    // Ids filtered out on the command line ran nothing.
    for row in isolation.iter().filter(|row| !row.record.charged.is_empty()) {
        let r = &row.record;
        let p50 = r.charged.percentile(50.0);
        let mean = r.charged.mean();
        let ratio = base_p50.map_or(f64::NAN, |base: Duration| p50.as_secs_f64() / base.as_secs_f64());
        p50s.insert(row.id, ratio);
        let crit = criterion_median("isolation", row.id)
            .map_or("n/a".to_owned(), |ns| ms(Duration::from_nanos(ns as u64)));
        println!(
            "{:<26} {:>6} {:>6} {:>7} {:>9} {:>11} {:>11} {:>11} {:>14} {:>9.2}x {:>11} {:>11}",
            row.id,
            r.charged.len(),
            r.ok,
            r.not_ok,
            r.timed_out,
            ms(p50),
            ms(r.charged.percentile(99.0)),
            ms(mean),
            crit,
            ratio,
            ms(r.wall.percentile(50.0)),
            ms(r.wall.percentile(99.0))
        );
    }
    p50s
}

/// The goals on the one-after-the-other ids, when all three ran.
fn print_goals(p50s: &HashMap<&str, f64>) {
    if let (Some(w), Some(s), Some(n)) = (p50s.get("watertight"), p50s.get("shared_pool"), p50s.get("naive"))
    {
        println!(
            "goal watertight p50 <= 1.2x baseline (ids one after the other): {w:.2}x, {}",
            verdict(*w <= 1.2)
        );
        println!("goal shared_pool p50 >= 10x baseline: {s:.0}x, {}", verdict(*s >= 10.0));
        println!("goal naive p50 >= 10x baseline: {n:.0}x, {}", verdict(*n >= 10.0));
    }
}

fn print_paired(paired: &IsolationPaired) {
    if paired.baseline.is_empty() {
        return;
    }
    println!(
        "paired rounds ({PAIRED_ROUNDS} x {ISOLATION_PAIRED_REQUESTS} /orders each, both servers and both loads up, \
         alternating), p50 per round:"
    );
    for (k, (name, rounds)) in
        [("baseline", &paired.baseline), ("watertight", &paired.watertight)].into_iter().enumerate()
    {
        let all = &paired.all[k];
        println!(
            "  {name:<10} ms: {}   all {} requests: ok {}, p50 {}, p99 {}",
            joined(rounds, |d| format!("{:.3}", d.as_secs_f64() * 1e3)),
            all.charged.len(),
            all.ok,
            ms(all.charged.percentile(50.0)),
            ms(all.charged.percentile(99.0))
        );
    }
    let ratios: Vec<f64> = paired
        .baseline
        .iter()
        .zip(&paired.watertight)
        .map(|(b, w)| w.as_secs_f64() / b.as_secs_f64())
        .collect();
    println!("  watertight/baseline per round: {}", joined(&ratios, |r| format!("{r:.3}")));
    let m = median(&ratios);
    println!(
        "goal watertight p50 <= 1.2x baseline (median of paired rounds): {m:.2}x, {}",
        verdict(m <= 1.2)
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let rows = isolation(&mut c);
    c.final_summary();
    // Not criterion measurements: skipped when criterion only lists or tests.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list" || a == "--test") {
        println!("(one pass per id, nothing measured: no summary)");
        return;
    }
    let paired = isolation_paired();
    let p50s = print_table(&rows);
    print_goals(&p50s);
    print_paired(&paired);
}
