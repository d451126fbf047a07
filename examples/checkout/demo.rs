//! `--demo`: the fraud-hang incident, run by itself.
//!
//! Starts the server on a free loopback port with its embedded providers, and
//! a fixed, bounded load: checkout clients (each fraud-checked) and
//! order-status clients (`GET /orders/{id}`, which never calls fraud). Then
//! three phases: fraud healthy, fraud hung, fraud healed. One line per second
//! shows what each kind of client saw and what the breaker and the pools did;
//! a summary per phase closes the run. With `--no-bulkhead` the same load
//! runs against the naive server, and the order-status clients go down with
//! fraud, as they did in the incident.
//!
//! The load is closed-loop and bounded: a fixed number of clients, each
//! waiting for its answer (or its client timeout) and then pacing itself, all
//! stopped and joined at the end.
//!
//! The clients' percentiles come from HdrHistograms ([`latencies`]); the run
//! ends with the dependencies' own latency histograms ([`histograms`]).

mod histograms;
mod latencies;

use std::error::Error as StdError;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use watertight::testing::{FakeProvider, Fault};

use crate::{Args, Running, print_capacity, start};
use latencies::Latencies;

/// Checkout clients. Fewer than fraud's workers + queue (15), so in bulkhead
/// mode they are all admitted and the breaker sees every one time out.
const CHECKOUT_CLIENTS: usize = 12;
/// Each checkout client sends one order per this period (when answered in time).
const CHECKOUT_EVERY: Duration = Duration::from_millis(250);
/// Longer than fraud's 3 s deadline: in bulkhead mode a checkout client is
/// always answered (with `manual_review` at worst) before it gives up.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(4);
/// Order-status clients.
const ORDER_CLIENTS: usize = 2;
const ORDERS_EVERY: Duration = Duration::from_millis(50);
const ORDERS_TIMEOUT: Duration = Duration::from_secs(2);

/// The demo's phase lengths in whole seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Phases {
    /// Fraud healthy.
    pub healthy: u64,
    /// Fraud hung.
    pub hang: u64,
    /// Fraud healthy again.
    pub healed: u64,
}

/// Parses `5,15,10`.
pub fn parse_phases(text: &str) -> Result<Phases, String> {
    let parts: Vec<u64> = text
        .split(',')
        .map(|p| p.trim().parse::<u64>().map_err(|_| format!("{p:?} is not a whole number of seconds")))
        .collect::<Result<_, _>>()?;
    match *parts.as_slice() {
        [healthy, hang, healed]
            if healthy
                .checked_add(hang)
                .and_then(|s| s.checked_add(healed))
                .is_some_and(|s| (1..=3600).contains(&s)) =>
        {
            Ok(Phases { healthy, hang, healed })
        }
        [_, _, _] => Err("the phases must add up to 1..=3600 seconds".into()),
        _ => Err("expected three lengths in seconds: healthy,hang,healed (e.g. 5,15,10)".into()),
    }
}

impl Phases {
    fn total(&self) -> u64 {
        self.healthy + self.hang + self.healed
    }

    /// The phase of second `s` (0-based): 0 healthy, 1 hang, 2 healed.
    fn of(&self, s: u64) -> usize {
        if s < self.healthy {
            0
        } else if s < self.healthy + self.hang {
            1
        } else {
            2
        }
    }
}

const PHASE_NAMES: [&str; 3] = ["healthy", "fraud hang", "healed"];
const PHASE_FAULTS: [Fault; 3] = [Fault::Healthy, Fault::Hang, Fault::Healthy];

/// What the clients saw in one second (by completion time), and the gauges
/// sampled at its end.
#[derive(Clone, Debug, Default)]
struct Second {
    /// Latency of every `/orders` attempt, errors included (a timed-out one
    /// counts with the time it waited).
    orders: Latencies,
    orders_err: u32,
    approved: u32,
    rejected: u32,
    review: u32,
    /// 403 / 503 from the access gate.
    unavailable: u32,
    checkout_err: u32,
    fault: String,
    breaker: String,
    fraud_busy: usize,
    fraud_queued: usize,
    request_busy: usize,
}

struct Recorder {
    start: Instant,
    seconds: Mutex<Vec<Second>>,
}

impl Recorder {
    fn record(&self, f: impl FnOnce(&mut Second)) {
        let s = self.start.elapsed().as_secs() as usize;
        let mut seconds = self.seconds.lock();
        // Completions after the last second (clients finishing during the
        // stop) are dropped; the vector never grows past the run.
        if let Some(second) = seconds.get_mut(s) {
            f(second);
        }
    }
}

fn ms(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 100.0 => format!("{v:.0}ms"),
        Some(v) => format!("{v:.1}ms"),
    }
}

fn client(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(timeout)).build().into()
}

/// Runs the demo; `args` gives the mode, the request threads, the phases and
/// the CSV path.
pub fn run(args: &Args) -> Result<(), Box<dyn StdError>> {
    if args.fraud_url.is_some() || args.account_url.is_some() || args.notification_url.is_some() {
        return Err(
            "--demo runs its own embedded providers: drop --fraud-url / --account-url / --notification-url"
                .into(),
        );
    }
    let mut cfg = args.clone();
    cfg.addr = "127.0.0.1:0".into();
    cfg.fraud = Fault::Healthy;
    cfg.account = Fault::Healthy;
    cfg.notification = Fault::Healthy;
    let running = start(&cfg)?;
    let fraud = running.providers.iter().find(|p| p.name() == "fraud").ok_or("no fraud provider")?;
    let base = format!("http://{}", running.addr);
    let mode = match (args.no_bulkhead, args.shadow) {
        (true, _) => "no bulkhead",
        (false, true) => "bulkhead, every policy in shadow",
        (false, false) => "bulkhead",
    };
    print_setup(&running, &base, mode, &args.demo_phases);

    let load = Load::start(&base, args.demo_phases.total())?;
    play_phases(&running, fraud, &load.recorder, args);
    let seconds = load.stop(&running.providers);

    let threads = running.handle.threads();
    print!("{}", summary(&seconds, &args.demo_phases, mode, threads));
    if let Some(deps) = running.app.backends.deps().filter(|_| args.shadow) {
        // In shadow the breaker's state above is when it would have refused; these are what it would have.
        for dep in deps.all() {
            let refused = dep.snapshot().shadow_refused;
            let each: Vec<String> =
                refused.iter().filter(|(_, n)| *n > 0).map(|(p, n)| format!("{p} {n}")).collect();
            if !each.is_empty() {
                println!("in shadow, {} would have refused: {}", dep.name(), each.join(", "));
            }
        }
    }
    match running.app.backends.deps() {
        Some(deps) => print!("{}", histograms::report(&deps.all())),
        None => println!("\nno dependencies (no bulkhead), so no latency histograms of their own"),
    }
    if let Some(path) = &args.demo_csv {
        std::fs::write(path, csv(&seconds))?;
        println!("per-second series written to {}", path.display());
    }
    running.handle.shutdown();
    Ok(())
}

/// What runs, against what, under which load.
fn print_setup(running: &Running, base: &str, mode: &str, phases: &Phases) {
    let threads = running.handle.threads();
    println!("demo server listening on {base}");
    println!(
        "mode: {mode}, {threads} request threads; phases: healthy {} s, fraud hang {} s, healed {} s",
        phases.healthy, phases.hang, phases.healed
    );
    print_capacity(&running.app);
    println!(
        "load: {CHECKOUT_CLIENTS} checkout clients (one order per {} ms each, client timeout {} s), \
         {ORDER_CLIENTS} order-status clients (one GET /orders/{{id}} per {} ms each, timeout {} s)",
        CHECKOUT_EVERY.as_millis(),
        CHECKOUT_TIMEOUT.as_secs(),
        ORDERS_EVERY.as_millis(),
        ORDERS_TIMEOUT.as_secs()
    );
}

// ---------------------------------------------------------------------------------
// Load generation
// ---------------------------------------------------------------------------------

/// The demo's clients, running until stopped, and what they saw.
struct Load {
    recorder: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<()>>,
}

impl Load {
    /// Warms every client up, then starts them all and the clock of a run of
    /// `total` seconds.
    fn start(base: &str, total: u64) -> Result<Load, Box<dyn StdError>> {
        let warm = warm_up(base)?;
        let recorder = Arc::new(Recorder {
            start: Instant::now(),
            seconds: Mutex::new(vec![Second::default(); total as usize]),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let mut clients = Vec::new();
        for (i, agent) in warm.checkout.into_iter().enumerate() {
            let (recorder, stop, base) = (Arc::clone(&recorder), Arc::clone(&stop), base.to_owned());
            let name = format!("demo-checkout-{i}");
            clients.push(thread::Builder::new().name(name).spawn(move || {
                checkout_client(i, &agent, &base, &recorder, &stop);
            })?);
        }
        for (i, (agent, id)) in warm.orders.into_iter().enumerate() {
            let (recorder, stop) = (Arc::clone(&recorder), Arc::clone(&stop));
            let url = format!("{base}/orders/{id}");
            clients.push(thread::Builder::new().name(format!("demo-orders-{i}")).spawn(move || {
                orders_client(&agent, &url, &recorder, &stop);
            })?);
        }
        Ok(Load { recorder, stop, clients })
    }

    /// Stops the clients and returns every second. Clients finish their request
    /// in flight (bounded by their timeouts), then every held provider request is
    /// released (a healed phase of 0 s would leave fraud hung) so the request
    /// threads can drain.
    fn stop(self, providers: &[Arc<FakeProvider>]) -> Vec<Second> {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            let _ = c.join();
        }
        for p in providers {
            p.set_fault(Fault::Healthy);
        }
        std::mem::take(&mut *self.recorder.seconds.lock())
    }
}

/// Warm-up, one request at a time, before the clock starts: each client opens
/// its kept-alive connection, and its user gets into the access cache. Twelve
/// cold misses at once would exceed account-access's pool (6 + 2) and some
/// would fail closed (right, but not this demo's subject); a burst of new
/// connections meets a lost wake-up in tiny_http 0.12's connection thread pool
/// (one can wait for another to close).
fn warm_up(base: &str) -> Result<WarmClients, Box<dyn StdError>> {
    let mut checkout_agents = Vec::new();
    for i in 0..CHECKOUT_CLIENTS {
        let agent = client(CHECKOUT_TIMEOUT);
        warm_up_checkout(&agent, base, format!("demo-{i}"), format!("c-{i}"))?;
        checkout_agents.push(agent);
    }
    // The status clients read orders made now, while fraud is healthy.
    let mut order_agents = Vec::new();
    for i in 0..ORDER_CLIENTS {
        let agent = client(ORDERS_TIMEOUT);
        let id = warm_up_checkout(&agent, base, format!("demo-reader-{i}"), format!("c-{i}"))?;
        order_agents.push((agent, id));
    }
    Ok(WarmClients { checkout: checkout_agents, orders: order_agents })
}

/// Clients with their connections open and their users in the access cache.
struct WarmClients {
    checkout: Vec<ureq::Agent>,
    /// Each order-status client with the order it reads.
    orders: Vec<(ureq::Agent, String)>,
}

/// One checkout that must be approved; returns the order's id.
fn warm_up_checkout(
    agent: &ureq::Agent,
    base: &str,
    user: String,
    customer: String,
) -> Result<String, Box<dyn StdError>> {
    let mut resp = agent
        .post(format!("{base}/checkout"))
        .header("X-User-Id", &user)
        .send_json(json!({ "customer_id": customer, "amount": 10.0 }))?;
    let body: Value = resp.body_mut().read_json()?;
    match body["order_id"].as_str() {
        Some(id) if resp.status() == 201 => Ok(id.to_owned()),
        _ => Err(format!("warm-up checkout answered {}: {body}", resp.status()).into()),
    }
}

/// Checkout client `i`: one order per period until stopped.
fn checkout_client(i: usize, agent: &ureq::Agent, base: &str, recorder: &Recorder, stop: &AtomicBool) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        // Every tenth order is over fraud's limit: a rejection, so
        // "approved" is visibly a decision and not a default.
        let amount = if n % 10 == 9 { 2500.0 } else { 20.0 + i as f64 };
        n += 1;
        let answer = agent
            .post(format!("{base}/checkout"))
            .header("X-User-Id", &format!("demo-{i}"))
            .send_json(json!({ "customer_id": format!("c-{i}"), "amount": amount }));
        let status = answer.map(|r| r.status().as_u16()).unwrap_or(0);
        recorder.record(|s| match status {
            201 => s.approved += 1,
            402 => s.rejected += 1,
            202 => s.review += 1,
            403 | 503 => s.unavailable += 1,
            _ => s.checkout_err += 1,
        });
        pace(began, CHECKOUT_EVERY, stop);
    }
}

/// Order-status client: reads `url` once per period until stopped.
fn orders_client(agent: &ureq::Agent, url: &str, recorder: &Recorder, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let began = Instant::now();
        let ok = matches!(agent.get(url).call(), Ok(r) if r.status() == 200);
        let took = began.elapsed();
        recorder.record(|s| {
            s.orders.record(took);
            if !ok {
                s.orders_err += 1;
            }
        });
        pace(began, ORDERS_EVERY, stop);
    }
}

/// Sleeps out the rest of `period` since `began`, waking early on stop.
fn pace(began: Instant, period: Duration, stop: &AtomicBool) {
    let until = began + period;
    while !stop.load(Ordering::Relaxed) {
        let Some(left) = until.checked_duration_since(Instant::now()) else { return };
        thread::sleep(left.min(Duration::from_millis(100)));
    }
}

// ---------------------------------------------------------------------------------
// Phases and measurement
// ---------------------------------------------------------------------------------

/// The gauges sampled at the end of a second.
struct Gauges {
    breaker: String,
    fraud_busy: usize,
    fraud_queued: usize,
    request_busy: usize,
}

impl Gauges {
    fn sample(running: &Running) -> Gauges {
        let (breaker, fraud_busy, fraud_queued) = match running.app.backends.deps() {
            Some(deps) => {
                let snap = deps.fraud.snapshot();
                (snap.state.as_str().to_owned(), snap.pool.busy, snap.pool.queued)
            }
            None => ("-".to_owned(), 0, 0),
        };
        Gauges { breaker, fraud_busy, fraud_queued, request_busy: running.handle.busy() }
    }
}

/// Sets fraud's fault as each phase begins, and prints one line at the end of
/// every second.
fn play_phases(running: &Running, fraud: &FakeProvider, recorder: &Recorder, args: &Args) {
    let (phases, threads) = (args.demo_phases, running.handle.threads());
    println!(
        "{:>4} {:<8} | {:>6} {:>7} {:>7} {:>4} | {:>4} {:>4} {:>6} {:>4} {:>4} | {:<9} {:>5} {:>6} | {:>7}",
        "t",
        "fraud",
        "orders",
        "p50",
        "p99",
        "err",
        "ok",
        "rej",
        "review",
        "403+",
        "err",
        "breaker",
        "busy",
        "queued",
        "req.busy"
    );
    let mut fault = Fault::Healthy;
    for s in 0..phases.total() {
        let want = PHASE_FAULTS[phases.of(s)];
        if want != fault {
            fraud.set_fault(want);
            fault = want;
        }
        let tick = recorder.start + Duration::from_secs(s + 1);
        if let Some(left) = tick.checked_duration_since(Instant::now()) {
            thread::sleep(left);
        }
        let gauges = Gauges::sample(running);
        let mut seconds = recorder.seconds.lock();
        let sec = &mut seconds[s as usize];
        sec.close(fault, gauges);
        let line = second_line(s, sec, !args.no_bulkhead, threads);
        drop(seconds);
        println!("{line}");
    }
}

impl Second {
    /// Stamps the second with the fault and the gauges.
    fn close(&mut self, fault: Fault, gauges: Gauges) {
        self.fault = fault.to_string();
        self.breaker = gauges.breaker;
        self.fraud_busy = gauges.fraud_busy;
        self.fraud_queued = gauges.fraud_queued;
        self.request_busy = gauges.request_busy;
    }
}

/// The line of second `s` (0-based); `pool`: whether there is a fraud pool to show.
fn second_line(s: u64, sec: &Second, pool: bool, threads: usize) -> String {
    let (busy, queued) = if pool {
        (sec.fraud_busy.to_string(), sec.fraud_queued.to_string())
    } else {
        ("-".into(), "-".into())
    };
    format!(
        "{:>3}s {:<8} | {:>6} {:>7} {:>7} {:>4} | {:>4} {:>4} {:>6} {:>4} {:>4} | {:<9} {:>5} {:>6} | {:>4}/{}",
        s + 1,
        sec.fault,
        sec.orders.len(),
        ms(sec.orders.percentile_ms(0.50)),
        ms(sec.orders.percentile_ms(0.99)),
        sec.orders_err,
        sec.approved,
        sec.rejected,
        sec.review,
        sec.unavailable,
        sec.checkout_err,
        sec.breaker,
        busy,
        queued,
        sec.request_busy,
        threads
    )
}

// ---------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------

/// One phase's seconds, summed up.
struct PhaseStats {
    secs: usize,
    /// `/orders` requests answered (attempts less failures), and per second.
    answered: u64,
    rate: f64,
    failed: u32,
    p50: Option<f64>,
    p99: Option<f64>,
    /// Seconds in which no `/orders` request was answered.
    dark: usize,
    approved: u32,
    rejected: u32,
    review: u32,
    unavailable: u32,
    checkout_err: u32,
    max_busy: usize,
}

impl PhaseStats {
    fn of(secs: &[&Second]) -> PhaseStats {
        let mut lat = Latencies::default();
        secs.iter().for_each(|s| lat.add(&s.orders));
        let failed: u32 = secs.iter().map(|s| s.orders_err).sum();
        let answered = lat.len().saturating_sub(u64::from(failed));
        let sum = |f: fn(&Second) -> u32| secs.iter().map(|s| f(s)).sum::<u32>();
        PhaseStats {
            secs: secs.len(),
            answered,
            rate: answered as f64 / secs.len() as f64,
            failed,
            p50: lat.percentile_ms(0.50),
            p99: lat.percentile_ms(0.99),
            dark: secs.iter().filter(|s| s.orders.len() == u64::from(s.orders_err)).count(),
            approved: sum(|s| s.approved),
            rejected: sum(|s| s.rejected),
            review: sum(|s| s.review),
            unavailable: sum(|s| s.unavailable),
            checkout_err: sum(|s| s.checkout_err),
            max_busy: secs.iter().map(|s| s.request_busy).max().unwrap_or(0),
        }
    }

    fn row(&self, name: &str, threads: usize) -> String {
        format!(
            "{:<11} {:>4} | {:>8} {:>6.1} {:>6} {:>8} {:>8} {:>7} | {:>8} {:>8} {:>13} {:>7} {:>6} | {:>5}/{}",
            name,
            self.secs,
            self.answered,
            self.rate,
            self.failed,
            ms(self.p50),
            ms(self.p99),
            self.dark,
            self.approved,
            self.rejected,
            self.review,
            self.unavailable,
            self.checkout_err,
            self.max_busy,
            threads
        )
    }

    /// What the hang did, next to the healthy phase's `/orders` rate if known.
    fn hang_line(&self, healthy_rate: Option<f64>) -> String {
        let before = healthy_rate.map(|r| format!(" ({r:.1}/s while healthy)")).unwrap_or_default();
        format!(
            "while fraud hung, /orders (which never calls fraud) answered {:.1}/s{before}, {} failed, \
             p99 {}, {} of {} seconds with none answered; checkout: {} manual_review, {} approved, \
             {} client errors",
            self.rate,
            self.failed,
            ms(self.p99),
            self.dark,
            self.secs,
            self.review,
            self.approved,
            self.checkout_err
        )
    }
}

fn summary(seconds: &[Second], phases: &Phases, mode: &str, threads: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\nsummary ({mode}, {threads} request threads)");
    // The order-status clients are closed-loop: a client stuck on a request
    // sends no other, so attempts shrink when the server stalls. The rate of
    // answered requests and the seconds with none answered show the stall;
    // a success percentage of the attempts alone would hide it.
    let _ = writeln!(
        out,
        "{:<11} {:>4} | {:>8} {:>6} {:>6} {:>8} {:>8} {:>7} | {:>8} {:>8} {:>13} {:>7} {:>6} | {:>8}",
        "phase",
        "secs",
        "/orders",
        "per s",
        "failed",
        "p50",
        "p99",
        "dark s",
        "approved",
        "rejected",
        "manual_review",
        "403/503",
        "errors",
        "req.busy"
    );
    let mut healthy_rate = None;
    let mut hang_line = None;
    for (phase, name) in PHASE_NAMES.iter().enumerate() {
        let secs: Vec<&Second> = seconds
            .iter()
            .enumerate()
            .filter(|(s, _)| phases.of(*s as u64) == phase)
            .map(|(_, s)| s)
            .collect();
        if secs.is_empty() {
            continue;
        }
        let stats = PhaseStats::of(&secs);
        let _ = writeln!(out, "{}", stats.row(name, threads));
        match phase {
            0 => healthy_rate = Some(stats.rate),
            1 => hang_line = Some(stats.hang_line(healthy_rate)),
            _ => {}
        }
    }
    let _ = writeln!(out, "fraud breaker: {}", breaker_runs(seconds));
    if let Some(line) = hang_line {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// The breaker's state, second by second, run-length encoded: `CLOSED 0-9s, OPEN 9-24s`.
fn breaker_runs(seconds: &[Second]) -> String {
    let mut runs: Vec<(String, usize, usize)> = Vec::new();
    for (i, s) in seconds.iter().enumerate() {
        match runs.last_mut() {
            Some((state, _, end)) if *state == s.breaker => *end = i + 1,
            _ => runs.push((s.breaker.clone(), i, i + 1)),
        }
    }
    let states: Vec<String> = runs.iter().map(|(state, from, to)| format!("{state} {from}-{to}s")).collect();
    states.join(", ")
}

fn csv(seconds: &[Second]) -> String {
    let mut out = String::from(
        "second,fraud_fault,orders,orders_p50_ms,orders_p99_ms,orders_errors,checkout_approved,\
         checkout_rejected,checkout_manual_review,checkout_unavailable,checkout_errors,fraud_breaker,\
         fraud_pool_busy,fraud_pool_queued,request_pool_busy\n",
    );
    let num = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    // No pool in the naive mode: its pool columns stay empty, not zero.
    let pool = |s: &Second, n: usize| if s.breaker == "-" { String::new() } else { n.to_string() };
    for (i, s) in seconds.iter().enumerate() {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            i + 1,
            s.fault,
            s.orders.len(),
            num(s.orders.percentile_ms(0.50)),
            num(s.orders.percentile_ms(0.99)),
            s.orders_err,
            s.approved,
            s.rejected,
            s.review,
            s.unavailable,
            s.checkout_err,
            s.breaker,
            pool(s, s.fraud_busy),
            pool(s, s.fraud_queued),
            s.request_busy
        );
    }
    out
}
