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
//! printed at the end (criterion itself reports central figures only).
//!
//! Group `http` measures what the hop costs when nothing is wrong: `/checkout`
//! throughput against a healthy provider at 16 concurrent connections, calling the
//! provider on the request thread (`direct`) or through its `Dependency`
//! (`watertight`).
//!
//! After criterion, two paired comparisons run outside it (`baseline` against
//! `watertight`, `direct` against `watertight`): both servers up at once and measured
//! in turn, round by round, so that the other builds sharing a small machine weigh on
//! both sides alike. Their per-round ratios and medians close the summary.
//!
//! Every id starts from nothing and is torn down before the next: providers
//! released, clients joined, the server and the pools shut down, and the process's
//! thread count back where it was.
//!
//! `cargo bench --bench isolation`

#[path = "../examples/checkout/providers.rs"]
mod providers;

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use tiny_http::{Header, Method, Request, Response, ResponseBox};

use providers::{FakeProvider, Fault};
use watertight::http::WithDeadline;
use watertight::server::{self, ServerHandle};
use watertight::{Breaker, BreakerConfig, Classify, Dependency, State, Verdict};

/// The server's request pool: the resource a hung provider exhausts.
const REQUEST_THREADS: usize = 16;
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
/// Orders in the in-memory store (ids 1..=ORDERS).
const ORDERS: u64 = 100;
/// Deadlines, the same for the dependencies and for the shared pool's time limiter.
const FRAUD_DEADLINE: Duration = Duration::from_secs(1);
const ORDERS_DEADLINE: Duration = Duration::from_millis(500);
/// The fraud dependency's workers.
const FRAUD_WORKERS: usize = 8;
/// The shared blocking pool's size in `shared_pool`.
const SHARED_BLOCKING_THREADS: usize = 16;
/// Concurrent connections in the `http` group.
const HTTP_CONNECTIONS: usize = 16;
/// How long an id may take to reach the state it measures (the breaker open, the
/// request pool pinned, ...) before it is measured anyway, with a warning.
const SETTLE_CAP: Duration = Duration::from_secs(10);
/// How long a teardown waits for the process's thread count to come back (tiny_http
/// lets its idle connection threads go after 5 s).
const THREADS_BACK_CAP: Duration = Duration::from_secs(12);

const ORDER_BODY: &str = r#"{"user":"u1","items":[{"sku":"A-1","qty":2}],"total":"42.00"}"#;

/// The fraud breaker of `watertight` and `shared_pool`: opens when half of the last
/// ten calls (at least five) failed, probes twice after 5 s.
fn fraud_breaker() -> BreakerConfig {
    BreakerConfig::count_based(10)
        .minimum_calls(5)
        .failure_rate(50.0)
        .open_for(Duration::from_secs(5))
        .half_open_calls(2)
}

// ---------------------------------------------------------------------------------
// The server under test
// ---------------------------------------------------------------------------------

/// Where the server runs its blocking calls.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// A `Dependency` per dependency; `fraud_queue` is the fraud pool's queue;
    /// `job_deadline`: whether the fraud job hands its deadline to its request.
    Watertight { fraud_queue: usize, job_deadline: bool },
    /// One tokio blocking pool for every blocking call, a breaker in front of fraud,
    /// and the deadlines applied to the wait; `fraud_timeout` is the fraud client's
    /// own bound, if any.
    SharedPool { fraud_timeout: Option<Duration> },
    /// On the request thread; `fraud_timeout` is the fraud client's only bound.
    Direct { fraud_timeout: Option<Duration> },
}

enum Route {
    Watertight { orders: Dependency, fraud: Dependency, job_deadline: bool },
    SharedPool { runtime: tokio::runtime::Runtime, fraud_breaker: Breaker },
    Direct,
}

struct App {
    store: Arc<HashMap<u64, String>>,
    verify_url: String,
    /// The fraud client. In `Watertight` each request gets the call's remaining
    /// deadline as its timeouts; otherwise the agent's own (none, or `fraud_timeout`).
    agent: ureq::Agent,
    route: Route,
}

impl App {
    fn new(mode: Mode, fraud_url: &str) -> App {
        let store = (1..=ORDERS)
            .map(|id| (id, format!(r#"{{"id":{id},"status":"shipped","items":2,"total":"42.00"}}"#)))
            .collect();
        let mut agent = ureq::Agent::config_builder();
        if let Mode::Direct { fraud_timeout } | Mode::SharedPool { fraud_timeout } = mode {
            agent = agent.timeout_global(fraud_timeout);
        }
        let route = match mode {
            Mode::Watertight { fraud_queue, job_deadline } => Route::Watertight {
                job_deadline,
                orders: Dependency::builder("orders-db")
                    .workers(4)
                    .queue(4)
                    .deadline(ORDERS_DEADLINE)
                    .build()
                    .expect("a valid orders-db configuration"),
                fraud: Dependency::builder("fraud")
                    .workers(FRAUD_WORKERS)
                    .queue(fraud_queue)
                    .deadline(FRAUD_DEADLINE)
                    .breaker(fraud_breaker())
                    .build()
                    .expect("a valid fraud configuration"),
            },
            Mode::SharedPool { .. } => Route::SharedPool {
                runtime: tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .max_blocking_threads(SHARED_BLOCKING_THREADS)
                    .thread_name("shared-blocking")
                    .enable_time()
                    .build()
                    .expect("a tokio runtime"),
                fraud_breaker: Breaker::new("fraud", fraud_breaker()).expect("a valid breaker"),
            },
            Mode::Direct { .. } => Route::Direct,
        };
        App {
            store: Arc::new(store),
            verify_url: format!("{fraud_url}/verify"),
            agent: agent.build().into(),
            route,
        }
    }

    fn handle(&self, request: &mut Request) -> ResponseBox {
        let url = request.url().to_owned();
        match (request.method(), url.as_str()) {
            (Method::Post, "/checkout") => {
                // Drain the (small) body so the connection stays usable for keep-alive.
                let _ = io::copy(&mut request.as_reader().take(64 * 1024), &mut io::sink());
                self.checkout()
            }
            (Method::Get, path) if path.starts_with("/orders/") => self.order(&path["/orders/".len()..]),
            _ => json(404, r#"{"code":"NOT_FOUND"}"#),
        }
    }

    fn order(&self, id: &str) -> ResponseBox {
        let Ok(id) = id.parse::<u64>() else {
            return json(400, r#"{"code":"BAD_ORDER_ID"}"#);
        };
        let store = Arc::clone(&self.store);
        let lookup = move || store.get(&id).cloned();
        let found = match &self.route {
            Route::Watertight { orders, .. } => {
                orders.call(move |_ctx| Ok::<_, io::Error>(lookup())).map_err(|_| ())
            }
            Route::SharedPool { runtime, .. } => {
                shared_call(runtime, ORDERS_DEADLINE, lookup).map_err(|_| ())
            }
            Route::Direct => Ok(lookup()),
        };
        match found {
            Ok(Some(order)) => json(200, &order),
            Ok(None) => json(404, r#"{"code":"NO_SUCH_ORDER"}"#),
            Err(()) => json(503, r#"{"code":"ORDERS_UNAVAILABLE"}"#),
        }
    }

    fn checkout(&self) -> ResponseBox {
        let (agent, url) = (self.agent.clone(), self.verify_url.clone());
        let approved = match &self.route {
            Route::Watertight { fraud, job_deadline, .. } => {
                let job_deadline = *job_deadline;
                fraud
                    .call(move |ctx| {
                        let request = agent.post(&url);
                        let request = if job_deadline { request.with_deadline(ctx) } else { request };
                        request.send(ORDER_BODY)?.body_mut().read_to_string()
                    })
                    .is_ok()
            }
            Route::SharedPool { runtime, fraud_breaker } => match fraud_breaker.try_acquire() {
                Err(_) => false,
                Ok(permit) => {
                    let began = Instant::now();
                    let outcome = shared_call(runtime, FRAUD_DEADLINE, move || {
                        agent.post(&url).send(ORDER_BODY)?.body_mut().read_to_string()
                    });
                    let verdict = match &outcome {
                        Ok(Ok(_)) => Verdict::Success,
                        Ok(Err(e)) => e.classify(),
                        Err(_) => Verdict::Failure,
                    };
                    permit.record(verdict, began.elapsed());
                    matches!(outcome, Ok(Ok(_)))
                }
            },
            Route::Direct => {
                agent.post(&url).send(ORDER_BODY).and_then(|mut r| r.body_mut().read_to_string()).is_ok()
            }
        };
        if approved {
            json(200, r#"{"decision":"approved"}"#)
        } else {
            // An explicit degradation, never a silent approval.
            json(202, r#"{"decision":"manual_review"}"#)
        }
    }

    fn fraud_state(&self) -> Option<State> {
        match &self.route {
            Route::Watertight { fraud, .. } => Some(fraud.breaker().state()),
            Route::SharedPool { fraud_breaker, .. } => Some(fraud_breaker.state()),
            Route::Direct => None,
        }
    }

    /// Stops the pools: the dependencies' workers are joined, the blocking pool's
    /// threads waited for. Returns whether every thread ended within its grace.
    fn shutdown(self) -> bool {
        match self.route {
            Route::Watertight { orders, fraud, .. } => {
                let a = orders.shutdown(Duration::from_secs(2));
                let b = fraud.shutdown(Duration::from_secs(2));
                a && b
            }
            Route::SharedPool { runtime, .. } => {
                // Waits for the blocking threads; hung calls were released before.
                runtime.shutdown_timeout(Duration::from_secs(5));
                true
            }
            Route::Direct => true,
        }
    }
}

/// Runs `job` on the shared blocking pool and waits for it at most `limit`, as a time
/// limiter wraps a future: giving up stops the waiting, not the job, which keeps its
/// thread until it returns by itself.
fn shared_call<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    limit: Duration,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ()> {
    let handle = runtime.spawn_blocking(job);
    // The timer is created inside `block_on`, where the runtime's time driver is.
    match runtime.block_on(async move { tokio::time::timeout(limit, handle).await }) {
        Ok(Ok(value)) => Ok(value),
        // The job panicked, or the limit passed first.
        Ok(Err(_)) | Err(_) => Err(()),
    }
}

fn json(status: u16, body: &str) -> ResponseBox {
    Response::from_string(body)
        .with_status_code(status)
        .with_header(Header::from_bytes("Content-Type", "application/json").expect("a valid header"))
        .boxed()
}

/// A client whose requests give up after `timeout` and which sees 4xx/5xx as answers.
fn client(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().timeout_global(Some(timeout)).http_status_as_error(false).build().into()
}

/// The number of threads of this process (Linux), to prove teardowns complete.
fn live_threads() -> Option<usize> {
    fs::read_dir("/proc/self/task").ok().map(|tasks| tasks.count())
}

/// Polls `cond` every 5 ms until it holds or `cap` passes; returns how long it took,
/// or `None` if it never held.
fn wait_for(cap: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let began = Instant::now();
    loop {
        if cond() {
            return Some(began.elapsed());
        }
        if began.elapsed() >= cap {
            return None;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// One server with its fraud provider, from start to teardown.
struct Scenario {
    label: String,
    threads_before: Option<usize>,
    fraud: FakeProvider,
    app: Arc<App>,
    server: ServerHandle,
    base: String,
}

impl Scenario {
    fn start(label: &str, mode: Mode, fault: Fault) -> Scenario {
        let threads_before = live_threads();
        let fraud = FakeProvider::start("fraud", fault, |_| (200, r#"{"decision":"approved"}"#.to_owned()))
            .expect("bind the fraud provider on loopback");
        let app = Arc::new(App::new(mode, &fraud.url()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the server on loopback");
        let handler = Arc::clone(&app);
        let server = server::serve(listener, REQUEST_THREADS, move |request| handler.handle(request))
            .expect("start the server");
        let base = format!("http://{}", server.addr().to_ip().expect("a TCP address"));
        Scenario { label: label.to_owned(), threads_before, fraud, app, server, base }
    }

    /// Waits (bounded) until `cond` holds and says so.
    fn settle(&self, what: &str, cond: impl FnMut() -> bool) {
        match wait_for(SETTLE_CAP, cond) {
            Some(took) => eprintln!("[{}] {what} after {took:.1?}", self.label),
            None => eprintln!("[{}] WARNING: not {what} within {SETTLE_CAP:?}; measuring anyway", self.label),
        }
    }

    /// Releases the provider, stops `load`, shuts the server and the pools down, and
    /// waits for the thread count to come back.
    fn finish(self, load: Option<Load>) {
        let Scenario { label, threads_before, fraud, app, server, base: _ } = self;
        if let Some(load) = &load {
            load.stop.store(true, Ordering::Relaxed);
        }
        // Hung handlers close their connections now: request threads and pool
        // workers held by fraud get an error and return.
        fraud.set_fault(Fault::Healthy);
        if let Some(load) = load {
            let counts = load.join();
            eprintln!(
                "[{label}] background checkouts: {} approved, {} manual_review, {} failed or timed out",
                counts.approved, counts.fallback, counts.failed
            );
        }
        // Requests still queued in the server are answered first, then the threads exit.
        server.shutdown();
        match Arc::try_unwrap(app) {
            Ok(app) => {
                if !app.shutdown() {
                    eprintln!("[{label}] WARNING: a pool did not stop within its grace");
                }
            }
            Err(_) => eprintln!("[{label}] WARNING: the app is still shared after the server stopped"),
        }
        drop(fraud);
        if let Some(before) = threads_before {
            match wait_for(THREADS_BACK_CAP, || live_threads().is_some_and(|n| n <= before)) {
                Some(took) => eprintln!("[{label}] torn down: {before} threads again after {took:.1?}"),
                None => eprintln!(
                    "[{label}] WARNING: {} threads left, {before} before",
                    live_threads().unwrap_or_default()
                ),
            }
        }
    }
}

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
                        let agent = client(CHECKOUT_CLIENT_TIMEOUT);
                        let mut counts = LoadCounts::default();
                        ready.wait();
                        let give_up = Instant::now() + LOAD_TIME_CAP;
                        for _ in 0..LOAD_REQUEST_CAP {
                            if stop.load(Ordering::Relaxed) || Instant::now() >= give_up {
                                break;
                            }
                            match agent.post(&url).send(ORDER_BODY).map(|r| r.status().as_u16()) {
                                Ok(200) => counts.approved += 1,
                                Ok(202) => counts.fallback += 1,
                                _ => counts.failed += 1,
                            }
                            thread::sleep(CHECKOUT_PAUSE);
                        }
                        counts
                    })
                    .expect("spawn a background client")
            })
            .collect();
        ready.wait();
        Load { stop, clients }
    }

    fn join(self) -> LoadCounts {
        self.stop.store(true, Ordering::Relaxed);
        self.clients.into_iter().fold(LoadCounts::default(), |sum, client| {
            let c = client.join().expect("a background client panicked");
            LoadCounts {
                approved: sum.approved + c.approved,
                fallback: sum.fallback + c.fallback,
                failed: sum.failed + c.failed,
            }
        })
    }
}

// ---------------------------------------------------------------------------------
// The isolation group
// ---------------------------------------------------------------------------------

/// Every `/orders` request of one id, as charged.
#[derive(Debug, Default)]
struct OrdersRecord {
    charged: Vec<Duration>,
    /// The time until the answer (or the client's timeout), whatever it was.
    wall: Vec<Duration>,
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
        self.charged.push(charged);
        self.wall.push(took);
        charged
    }
}

struct IsolationRow {
    id: &'static str,
    record: OrdersRecord,
}

fn isolation(c: &mut Criterion) -> Vec<IsolationRow> {
    let watertight = Mode::Watertight { fraud_queue: 2, job_deadline: true };
    let ids: [(&'static str, Mode, Fault); 6] = [
        ("baseline", watertight, Fault::Healthy),
        ("watertight", watertight, Fault::Hang),
        ("shared_pool", Mode::SharedPool { fraud_timeout: None }, Fault::Hang),
        ("naive", Mode::Direct { fraud_timeout: None }, Fault::Hang),
        ("watertight_job_no_timeout", Mode::Watertight { fraud_queue: 2, job_deadline: false }, Fault::Hang),
        ("shared_pool_job_timeout", Mode::SharedPool { fraud_timeout: Some(FRAUD_DEADLINE) }, Fault::Hang),
    ];
    let mut rows = Vec::new();
    let mut group = c.benchmark_group("isolation");
    for (id, mode, fault) in ids {
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

        let scenario = Scenario::start(&format!("isolation/{id}"), mode, fault);
        let load = Load::start(&scenario.base, CHECKOUT_CLIENTS);
        match id {
            "baseline" => scenario
                .settle("every client served", || scenario.fraud.hits() >= 2 * CHECKOUT_CLIENTS as u64),
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
        scenario.finish(Some(load));
        rows.push(IsolationRow { id, record });
    }
    group.finish();
    rows
}

/// Tears down scenarios that ran side by side, the last started first. Only the
/// first one's thread count is checked: it was taken before any of them started,
/// and that check comes last, when all of them are gone (the others' counts
/// included threads the first kept starting meanwhile).
fn teardown_pair(mut scenarios: Vec<(Scenario, Option<Load>)>) {
    for (scenario, _) in scenarios.iter_mut().skip(1) {
        scenario.threads_before = None;
    }
    for (scenario, load) in scenarios.into_iter().rev() {
        scenario.finish(load);
    }
}

/// Requests per id per round of the paired `/orders` comparison.
const ISOLATION_PAIRED_REQUESTS: u64 = 500;

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
    let watertight = Mode::Watertight { fraud_queue: 2, job_deadline: true };
    let specs = [("baseline", Fault::Healthy), ("watertight", Fault::Hang)];
    let started: Vec<(Scenario, Load)> = specs
        .iter()
        .map(|(id, fault)| {
            let scenario = Scenario::start(&format!("isolation-paired/{id}"), watertight, *fault);
            let load = Load::start(&scenario.base, CHECKOUT_CLIENTS);
            (scenario, load)
        })
        .collect();
    let baseline = &started[0].0;
    baseline.settle("every client served", || baseline.fraud.hits() >= 2 * CHECKOUT_CLIENTS as u64);
    let hung = &started[1].0;
    hung.settle("fraud breaker open", || hung.app.fraud_state() == Some(State::Open));

    let agent = client(ORDERS_CLIENT_TIMEOUT);
    let mut paired = IsolationPaired::default();
    let mut n = 0u64;
    for (scenario, _) in &started {
        let mut warm_up = OrdersRecord::default();
        for _ in 0..ISOLATION_PAIRED_REQUESTS / 5 {
            warm_up.measure(&agent, &scenario.base, n);
            n += 1;
        }
    }
    for round in 0..PAIRED_ROUNDS {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let mut record = OrdersRecord::default();
            for _ in 0..ISOLATION_PAIRED_REQUESTS {
                let charged = record.measure(&agent, &started[k].0.base, n);
                n += 1;
                paired.all[k].charged.push(charged);
            }
            paired.all[k].ok += record.ok;
            paired.all[k].not_ok += record.not_ok;
            paired.all[k].timed_out += record.timed_out;
            record.charged.sort();
            let p50 = percentile(&record.charged, 50.0);
            if k == 0 { paired.baseline.push(p50) } else { paired.watertight.push(p50) }
        }
    }
    drop(agent);
    teardown_pair(started.into_iter().map(|(scenario, load)| (scenario, Some(load))).collect());
    paired
}

// ---------------------------------------------------------------------------------
// The http group
// ---------------------------------------------------------------------------------

/// Persistent clients, each on its own kept-alive connection, that split a batch of
/// `/checkout` requests between them.
struct Gang {
    orders: Vec<mpsc::Sender<u64>>,
    done: mpsc::Receiver<(u64, u64)>,
    clients: Vec<JoinHandle<()>>,
}

impl Gang {
    fn start(base: &str, size: usize) -> Gang {
        let (done_tx, done) = mpsc::channel();
        let url = format!("{base}/checkout");
        let (orders, clients) = (0..size)
            .map(|i| {
                let (tx, rx) = mpsc::channel::<u64>();
                let (done_tx, url) = (done_tx.clone(), url.clone());
                let join = thread::Builder::new()
                    .name(format!("http-client-{i}"))
                    .spawn(move || {
                        let agent = client(Duration::from_secs(2));
                        // Ends when the gang drops its sender.
                        for batch in rx {
                            let (mut approved, mut other) = (0, 0);
                            for _ in 0..batch {
                                match agent.post(&url).send(ORDER_BODY).map(|r| r.status().as_u16()) {
                                    Ok(200) => approved += 1,
                                    _ => other += 1,
                                }
                            }
                            if done_tx.send((approved, other)).is_err() {
                                return;
                            }
                        }
                    })
                    .expect("spawn an http client");
                (tx, join)
            })
            .unzip();
        Gang { orders, done, clients }
    }

    /// Sends `total` requests split across the clients; returns the wall time and the
    /// count of answers that were not `approved`.
    fn run(&self, total: u64) -> (Duration, u64) {
        let size = self.orders.len() as u64;
        let began = Instant::now();
        for (i, tx) in self.orders.iter().enumerate() {
            let share = total / size + u64::from((i as u64) < total % size);
            tx.send(share).expect("an http client is gone");
        }
        let mut other = 0;
        for _ in 0..size {
            let (_, o) = self.done.recv().expect("an http client is gone");
            other += o;
        }
        (began.elapsed(), other)
    }

    fn stop(self) {
        drop(self.orders);
        for client in self.clients {
            client.join().expect("an http client panicked");
        }
    }
}

#[derive(Debug, Default)]
struct HttpRow {
    id: &'static str,
    requests: u64,
    not_approved: u64,
    elapsed: Duration,
}

/// The two ways of calling fraud in the `http` group.
const HTTP_IDS: [(&str, Mode); 2] = [
    ("direct", Mode::Direct { fraud_timeout: Some(FRAUD_DEADLINE) }),
    // The queue holds every offered call (16 connections, one call each), so no
    // call is turned away: this measures the hop, not rejections.
    ("watertight", Mode::Watertight { fraud_queue: HTTP_CONNECTIONS, job_deadline: true }),
];

fn http(c: &mut Criterion) -> Vec<HttpRow> {
    let mut rows = Vec::new();
    let mut group = c.benchmark_group("http");
    group.throughput(Throughput::Elements(1)).sample_size(20);
    group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));
    for (id, mode) in HTTP_IDS {
        let scenario = Scenario::start(&format!("http/{id}"), mode, Fault::Healthy);
        let gang = Gang::start(&scenario.base, HTTP_CONNECTIONS);
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
        gang.stop();
        scenario.finish(None);
        rows.push(row);
    }
    group.finish();
    rows
}

/// Rounds of the paired comparison, after one unrecorded warm-up round each.
const PAIRED_ROUNDS: usize = 8;
/// Requests per id per round (about half a second at 2,000 requests/s).
const PAIRED_REQUESTS: u64 = 1_000;

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
            let gang = Gang::start(&scenario.base, HTTP_CONNECTIONS);
            (scenario, gang)
        })
        .collect();
    let mut paired = Paired::default();
    for (_, gang) in &started {
        let _ = gang.run(PAIRED_REQUESTS);
    }
    for round in 0..PAIRED_ROUNDS {
        // Each goes first every other round.
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let (took, other) = started[k].1.run(PAIRED_REQUESTS);
            paired.not_approved += other;
            let rate = PAIRED_REQUESTS as f64 / took.as_secs_f64();
            if k == 0 { paired.direct.push(rate) } else { paired.watertight.push(rate) }
        }
    }
    let mut scenarios = Vec::new();
    for (scenario, gang) in started {
        gang.stop();
        scenarios.push((scenario, None));
    }
    teardown_pair(scenarios);
    paired
}

// ---------------------------------------------------------------------------------
// Summary
// ---------------------------------------------------------------------------------

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Criterion's own median (ns per iteration) from its `estimates.json`, when found.
fn criterion_median(group: &str, id: &str) -> Option<f64> {
    let root = std::env::var_os("CRITERION_HOME").map(PathBuf::from).unwrap_or_else(|| {
        std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| PathBuf::from("target"), PathBuf::from)
            .join("criterion")
    });
    let text = fs::read_to_string(root.join(group).join(id).join("new").join("estimates.json")).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value["median"]["point_estimate"].as_f64()
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn summary(
    isolation: &mut [IsolationRow],
    iso_paired: &mut IsolationPaired,
    http: &[HttpRow],
    paired: &Paired,
) {
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
    let mut base_p50 = None;
    let mut p50s = HashMap::new();
    for row in isolation.iter_mut() {
        row.record.charged.sort();
        row.record.wall.sort();
        if row.id == "baseline" && !row.record.charged.is_empty() {
            base_p50 = Some(percentile(&row.record.charged, 50.0));
        }
    }
    // Ids filtered out on the command line ran nothing.
    for row in isolation.iter_mut().filter(|row| !row.record.charged.is_empty()) {
        let r = &mut row.record;
        let p50 = percentile(&r.charged, 50.0);
        let p99 = percentile(&r.charged, 99.0);
        let mean = r.charged.iter().sum::<Duration>() / (r.charged.len().max(1) as u32);
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
            ms(p99),
            ms(mean),
            crit,
            ratio,
            ms(percentile(&r.wall, 50.0)),
            ms(percentile(&r.wall, 99.0))
        );
    }
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    if let (Some(w), Some(s), Some(n)) = (p50s.get("watertight"), p50s.get("shared_pool"), p50s.get("naive"))
    {
        println!(
            "goal watertight p50 <= 1.2x baseline (ids one after the other): {w:.2}x, {}",
            verdict(*w <= 1.2)
        );
        println!("goal shared_pool p50 >= 10x baseline: {s:.0}x, {}", verdict(*s >= 10.0));
        println!("goal naive p50 >= 10x baseline: {n:.0}x, {}", verdict(*n >= 10.0));
    }
    if !iso_paired.baseline.is_empty() {
        println!(
            "paired rounds ({PAIRED_ROUNDS} x {ISOLATION_PAIRED_REQUESTS} /orders each, both servers and both loads up, \
             alternating), p50 per round:"
        );
        let fmt = |v: &[Duration]| {
            v.iter().map(|d| format!("{:.3}", d.as_secs_f64() * 1e3)).collect::<Vec<_>>().join(" ")
        };
        for (k, (name, rounds)) in
            [("baseline", &iso_paired.baseline), ("watertight", &iso_paired.watertight)]
                .into_iter()
                .enumerate()
        {
            let all = &mut iso_paired.all[k];
            all.charged.sort();
            println!(
                "  {name:<10} ms: {}   all {} requests: ok {}, p50 {}, p99 {}",
                fmt(rounds),
                all.charged.len(),
                all.ok,
                ms(percentile(&all.charged, 50.0)),
                ms(percentile(&all.charged, 99.0))
            );
        }
        let ratios: Vec<f64> = iso_paired
            .baseline
            .iter()
            .zip(&iso_paired.watertight)
            .map(|(b, w)| w.as_secs_f64() / b.as_secs_f64())
            .collect();
        let text = ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(" ");
        println!("  watertight/baseline per round: {text}");
        let m = median(&ratios);
        println!(
            "goal watertight p50 <= 1.2x baseline (median of paired rounds): {m:.2}x, {}",
            verdict(m <= 1.2)
        );
    }

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
    let ratios: Vec<f64> = paired.direct.iter().zip(&paired.watertight).map(|(d, w)| w / d).collect();
    let fmt = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" ");
    println!(
        "paired rounds ({PAIRED_ROUNDS} x {PAIRED_REQUESTS} requests each, alternating), req/s, not approved: {}",
        paired.not_approved
    );
    println!("  direct:     median {:>6.0}   rounds {}", median(&paired.direct), fmt(&paired.direct));
    println!("  watertight: median {:>6.0}   rounds {}", median(&paired.watertight), fmt(&paired.watertight));
    let ratio_text = ratios.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>().join(" ");
    println!("  watertight/direct per round: {ratio_text}");
    let cost = (1.0 - median(&ratios)) * 100.0;
    println!(
        "goal the hop costs <= 15 % throughput (median of paired rounds): {cost:.1} %, {}",
        verdict(cost <= 15.0)
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let mut isolation_rows = isolation(&mut c);
    let http_rows = http(&mut c);
    c.final_summary();
    // Not criterion measurements: skipped when criterion only lists or tests.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list" || a == "--test") {
        println!("(one pass per id, nothing measured: no summary)");
        return;
    }
    let mut iso_paired = isolation_paired();
    let paired = http_paired();
    summary(&mut isolation_rows, &mut iso_paired, &http_rows, &paired);
}
