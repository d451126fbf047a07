//! A checkout server whose fraud provider may hang without taking the server
//! down with it: the fraud-hang incident, reproduced and contained.
//!
//! ```text
//! cargo run --release --features testing,serde --example checkout                    # serve on 127.0.0.1:8080
//! cargo run --release --features testing,serde --example checkout -- --fraud hang    # start with a hung fraud provider
//! cargo run --release --features testing,serde --example checkout -- --demo          # the whole incident, by itself
//! cargo run --release --features testing,serde --example checkout -- --demo --no-bulkhead   # ... on the naive server
//! ```
//!
//! Every provider call goes through a watertight `Dependency`: a breaker, a
//! dedicated bounded pool and a deadline. The order notification after a
//! checkout is fire-and-forget (`Dependency::spawn`): the checkout never waits
//! for it. `--no-bulkhead` calls the providers on the request threads instead,
//! as the incident did (and sends each notification from a thread of its own).

mod access;
mod admin;
mod backends;
mod dashboard;
mod demo;
mod history;
mod live;
mod routes;
mod sse;
mod stream;

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use serde_json::{Value, json};
use watertight::server::{RequestContext, ServerConfig, ServerHandle, serve_unguarded, serve_with};

use crate::access::AccessGate;
use crate::backends::{Backends, Mode};
use crate::history::History;
use crate::live::LiveConfig;
use crate::routes::App;
use watertight::Registry;
use watertight::shadow::Shadow;
use watertight::testing::{Call, FakeProvider, Fault};

/// A checkout server protected by watertight bulkheads, with embedded fake
/// fraud, account and notification providers whose faults can be switched at
/// run time.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "checkout",
    version,
    after_help = "\
ROUTES:
  POST /checkout          header X-User-Id, body {\"customer_id\": \"c1\", \"amount\": 120.5}
                          (any route: X-Request-Timeout: 800ms shortens the request budget)
                          201 approved, 402 rejected by fraud, 202 manual_review when fraud is unavailable,
                          403 SERVICE_ACCESS_DENIED, 503 SERVICE_ACCESS_UNAVAILABLE (fails closed);
                          an approved order is then notified, fire-and-forget (never waited for)
  GET  /orders/{id}       the order from memory (never calls fraud)
  GET  /me                header X-User-Id: the user's profile from account
  GET  /health            liveness: 200 whatever the breakers say
  GET  /circuits          every dependency's breaker, counters and pool, as JSON
  GET  /metrics           Prometheus text
  GET  /circuits/events  every dependency's last 100 events (transitions, reconfigurations,
                          per-second summaries of rejections and timeouts), as JSON
  GET  /circuits/stream  Server-Sent Events: the last 5 minutes at once, then a snapshot a second
                          (at most 2 streams at once, each for 2 minutes; EventSource reconnects)
  GET  /dashboard         a live page over /circuits/stream (breakers, pools, calls/s, latency)
  GET  /_faults           the embedded providers' faults                        (admin)
  POST /_faults/{name}    body: a FAULT, e.g. `curl -d hang localhost:8080/_faults/fraud`   (admin)
  GET  /_config           every dependency's live configuration, as JSON        (admin)
  GET  /_config/{name}    one dependency's                                       (admin)
  PUT  /_config/{name}    body: one dependency's configuration (JSON, the schema of a
                          [dependencies.NAME] section of --config): changes it live   (admin)
  PUT  /_config/reserve   body: {\"shadow\": false} or true: the request pool's reserve enforced
                          or in shadow, from the next request                   (admin)

ADMIN ROUTES answer loopback clients that came through no proxy, and others only with header
X-Admin-Token: <--admin-token> (a request with X-Forwarded-For or Forwarded came through a proxy).

FAULTS (embedded providers):
  healthy, slow:<ms>, hang, error:<status>, refuse (also reset, garbage, trickle:<ms>, close, cut,
  saturated:<n>:<ms>: at most n requests served at once, each taking ms)

EMBEDDED PROVIDERS:
  fraud    POST /verify {customer_id, amount}: rejects amounts over 1000, approves the rest
  account  GET /users/{id}/access: denies users `mallory` and `blocked-*`, allows the rest;
           GET /users/{id}: a profile
  notification  POST /notify {event, order_id, user_id}: 202 accepted

EXAMPLE:
  curl -i -H 'X-User-Id: alice' -d '{\"customer_id\":\"c1\",\"amount\":42}' localhost:8080/checkout"
)]
pub struct Args {
    /// Address to listen on; port 0 picks a free one. The first line printed
    /// is `listening on http://<address>`.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,

    /// Threads of the shared request pool [default: the config's
    /// server.request_threads, 16 in the embedded one].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub request_threads: Option<u16>,

    /// The dependencies' configuration (TOML, see
    /// examples/checkout/watertight.toml) [default: that file, embedded at
    /// build time].
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Lets clients that are not on loopback, or that come through a
    /// proxy, use the admin routes (/_faults, /_config) with the header
    /// `X-Admin-Token: <TOKEN>`. Without it, only loopback clients that came
    /// through no proxy may.
    #[arg(long, value_name = "TOKEN", value_parser = parse_admin_token)]
    pub admin_token: Option<String>,

    /// A reverse proxy in front of the server (an address or a CIDR
    /// network; repeatable): only from such a peer is the client read from
    /// `X-Forwarded-For`. Behind the nginx recipe: `--trusted-proxy 127.0.0.2`.
    #[arg(long = "trusted-proxy", value_name = "ADDRESS")]
    pub trusted_proxies: Vec<String>,

    /// Each request's time budget (`5s`, `800ms`): every provider call it
    /// makes ends by then. A client's `X-Request-Timeout` may only shorten it.
    #[arg(long, default_value = "5s", value_name = "DURATION", value_parser = routes::parse_duration)]
    pub request_budget: Duration,

    /// The embedded fraud provider's fault at start.
    #[arg(long, default_value = "healthy", value_name = "FAULT")]
    pub fraud: Fault,

    /// The embedded account provider's fault at start.
    #[arg(long, default_value = "healthy", value_name = "FAULT")]
    pub account: Fault,

    /// The embedded notification provider's fault at start.
    #[arg(long, default_value = "healthy", value_name = "FAULT")]
    pub notification: Fault,

    /// Call this fraud provider instead of the embedded one.
    #[arg(long, value_name = "URL")]
    pub fraud_url: Option<String>,

    /// Call this account provider instead of the embedded one.
    #[arg(long, value_name = "URL")]
    pub account_url: Option<String>,

    /// Call this notification provider instead of the embedded one.
    #[arg(long, value_name = "URL")]
    pub notification_url: Option<String>,

    /// Call the providers directly on the request threads (no breaker, no
    /// pool, no deadline), and keep no reserved share of the request pool
    /// (the config's server.reserve), as in the incident, for comparison. Notifications
    /// stay fire-and-forget: each is sent from a new thread of its own, with
    /// the client timeout and nothing bounding those threads.
    #[arg(long)]
    pub no_bulkhead: bool,

    /// With --no-bulkhead: the client timeout in seconds (0 = none, ureq's
    /// default, which is what the incident had).
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub direct_timeout: u64,

    /// Serve without the config's reserved share of the request pool
    /// (server.reserve: threads only its routes may take), for comparison.
    #[arg(long)]
    pub no_reserve: bool,

    /// Every refusing policy in shadow: every dependency's (the breakers, and
    /// any limit, throttler or priority shedding the config sets) and the
    /// request pool's reserve. Each decides and records what it would have
    /// refused (`/circuits`' `shadow_refused`, `/metrics`'
    /// `watertight_shadow_refusals_total`, the dashboard) and lets the call
    /// through. Switched off live: `PUT /_config/{name}` with the section's
    /// `"shadow": []`, and `PUT /_config/reserve` with `{"shadow": false}`.
    #[arg(long)]
    pub shadow: bool,

    /// Serve with tiny_http reading from the clients itself, without the
    /// guard (no read timeouts, no caps on heads or declared bodies), for
    /// comparison.
    #[arg(long)]
    pub no_guard: bool,

    /// Run the incident by itself on a free port, with its own bounded load,
    /// and print one line per second, then a summary.
    #[arg(long)]
    pub demo: bool,

    /// The demo's phase lengths in seconds: healthy, fraud hung, healed.
    #[arg(long, default_value = "5,15,10", value_name = "H,F,R", value_parser = demo::parse_phases)]
    pub demo_phases: demo::Phases,

    /// Write the demo's per-second series to this CSV file.
    #[arg(long, value_name = "PATH")]
    pub demo_csv: Option<PathBuf>,
}

/// A started server with everything it owns.
pub struct Running {
    /// The request pool; dropping it stops the server.
    pub handle: ServerHandle,
    /// The application state shared by the request threads.
    pub app: Arc<App>,
    /// Where the server listens.
    pub addr: SocketAddr,
    /// The embedded providers (none for real ones).
    pub providers: Vec<Arc<FakeProvider>>,
}

/// Fraud approves up to this amount.
const FRAUD_LIMIT: f64 = 1000.0;

/// The fake fraud provider's business rule.
fn fraud_responder(call: &Call) -> (u16, String) {
    if call.method != "POST" || call.url != "/verify" {
        return (404, json!({ "error": "not found" }).to_string());
    }
    let order: Value = match serde_json::from_str(&call.body) {
        Ok(v) => v,
        Err(_) => return (400, json!({ "error": "invalid JSON" }).to_string()),
    };
    match order["amount"].as_f64() {
        Some(amount) if amount > FRAUD_LIMIT => {
            (200, json!({ "decision": "reject", "reason": "amount over limit" }).to_string())
        }
        Some(_) => (200, json!({ "decision": "approve" }).to_string()),
        None => (400, json!({ "error": "amount missing" }).to_string()),
    }
}

/// The fake notification provider: accepts order events.
fn notification_responder(call: &Call) -> (u16, String) {
    match (call.method.as_str(), call.url.as_str()) {
        ("POST", "/notify") => (202, json!({ "status": "accepted" }).to_string()),
        _ => (404, json!({ "error": "not found" }).to_string()),
    }
}

/// The fake account provider's rules: who may use checkout, and profiles.
fn account_responder(call: &Call) -> (u16, String) {
    let path = call.url.split('?').next().unwrap_or("");
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (call.method.as_str(), segments.as_slice()) {
        ("GET", ["users", id, "access"]) => {
            let allowed = !(*id == "mallory" || id.starts_with("blocked"));
            (200, json!({ "user_id": id, "allowed": allowed }).to_string())
        }
        ("GET", ["users", id]) => (200, json!({ "id": id, "name": format!("User {id}") }).to_string()),
        _ => (404, json!({ "error": "not found" }).to_string()),
    }
}

/// An admin token worth checking.
fn parse_admin_token(token: &str) -> Result<String, String> {
    admin::check_token(token).map(|()| token.to_owned())
}

/// The request pool's size: the flag, else the config's, else 16.
fn request_threads(args: &Args, config: &watertight::config::Config) -> usize {
    args.request_threads.map(usize::from).or(config.server.request_threads).unwrap_or(16)
}

/// Starts the providers (embedded unless a URL is given), the dependencies
/// and the server.
pub fn start(args: &Args) -> Result<Running, Box<dyn StdError>> {
    let mut providers = Vec::new();
    let mut provider =
        |name: &str, url: &Option<String>, fault: Fault, responder: fn(&Call) -> (u16, String)| match url {
            Some(url) => Ok::<_, std::io::Error>(url.trim_end_matches('/').to_owned()),
            None => {
                let p = Arc::new(FakeProvider::start(name, fault, responder)?);
                let url = p.url();
                providers.push(p);
                Ok(url)
            }
        };
    let fraud_url = provider("fraud", &args.fraud_url, args.fraud, fraud_responder)?;
    let account_url = provider("account", &args.account_url, args.account, account_responder)?;
    let notification_url =
        provider("notification", &args.notification_url, args.notification, notification_responder)?;

    let mut config = live::load(args.config.as_deref())?;
    if args.shadow {
        for dep in config.dependencies.values_mut() {
            // Every policy but the request pool's reserve, which is no dependency's.
            dep.shadow = Shadow::all();
        }
        if let Some(reserve) = &mut config.server.reserve {
            reserve.shadow = true;
        }
    }
    let threads = request_threads(args, &config);
    let registry = Registry::new();
    let mode = if args.no_bulkhead {
        Mode::Direct
    } else {
        let origin = args
            .config
            .as_ref()
            .map_or("the embedded watertight.toml".to_owned(), |p| p.display().to_string());
        let deps = live::build_deps(&config).map_err(|e| format!("{origin}: {e}"))?;
        for dep in deps.all() {
            registry.register(dep.clone())?;
        }
        Mode::Bulkhead(deps)
    };
    // One point a second of every dependency, the last 5 minutes: what the
    // dashboard shows the moment it opens.
    let history = History::start(&registry)?;
    let direct_timeout = (args.direct_timeout > 0).then(|| Duration::from_secs(args.direct_timeout));
    let backends = Arc::new(Backends::new(mode, fraud_url, account_url, notification_url, direct_timeout));
    let gate = AccessGate::new(access::decisions()?, {
        let backends = Arc::clone(&backends);
        move |decisions: &_, user: &str, deadline| backends.has_access(decisions, user, deadline)
    });
    if backends.deps().is_some() {
        // Its hits, misses and shared calls in /metrics and /circuits.
        registry.register_cache(gate.decisions())?;
    }
    // The dependencies' metrics, and the request pool's gauges once the server
    // below has attached them to the registry (ServerConfig::registry).
    let mut prometheus = watertight::metrics::PrometheusRegistry::default();
    watertight::metrics::register(&registry, &mut prometheus);
    // The reserved share: threads no route that calls a provider can take
    // (none in the incident's server).
    let reserve = if args.no_bulkhead || args.no_reserve { None } else { config.server.reserve.clone() };
    let proxies = watertight::server::TrustedProxies::parse(&args.trusted_proxies)
        .map_err(|e| format!("--trusted-proxy: {e}"))?;
    let mut server_config = ServerConfig::builder()
        .request_budget(args.request_budget)
        .registry(&registry)
        .trusted_proxies(proxies);
    if let Some(reserve) = &reserve {
        if reserve.threads >= threads {
            return Err(format!(
                "server.reserve.threads = {} leaves no thread of {threads} for the other routes \
                 (--request-threads)",
                reserve.threads
            )
            .into());
        }
        server_config = server_config.reserve(reserve.clone());
    }
    let server_config = server_config.build()?;

    let live = LiveConfig::new(threads, reserve);
    let app = Arc::new(App::new(
        backends,
        gate,
        registry,
        history,
        prometheus,
        providers.clone(),
        threads,
        live,
        args.admin_token.clone(),
    ));
    let handler = {
        let app = Arc::clone(&app);
        move |req: &mut tiny_http::Request, ctx: &RequestContext| app.handle(req, ctx)
    };
    let handle = if args.no_guard {
        app.streams.refuse_http10();
        let server = tiny_http::Server::http(&args.addr)
            .map_err(|e| format!("cannot listen on {}: {e}", args.addr))?;
        serve_unguarded(server, threads, server_config, handler)?
    } else {
        let listener = std::net::TcpListener::bind(&args.addr)
            .map_err(|e| format!("cannot listen on {}: {e}", args.addr))?;
        serve_with(listener, threads, server_config, handler)?
    };
    let addr = handle.addr().to_ip().ok_or("the server is not on a TCP address")?;
    app.live.attach(handle.request_pool());
    Ok(Running { handle, app, addr, providers })
}

fn main() {
    let args = Args::parse();
    // The demo prints a table on stdout; its log keeps to the breaker's
    // transitions and to warnings unless RUST_LOG says otherwise.
    let default_log = if args.demo { "warn,watertight=info" } else { "info" };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_log)).init();
    let result = if args.demo { demo::run(&args) } else { serve_forever(&args) };
    if let Err(e) = result {
        eprintln!("checkout: {e}");
        std::process::exit(1);
    }
}

fn serve_forever(args: &Args) -> Result<(), Box<dyn StdError>> {
    let running = start(args)?;
    // The first line: scripts and tests read the bound address from it.
    println!("listening on http://{}", running.addr);
    let threads = running.handle.threads();
    if args.no_bulkhead {
        let timeout = match args.direct_timeout {
            0 => "no client timeout".to_owned(),
            s => format!("client timeout {s} s"),
        };
        println!(
            "mode: no bulkhead (providers called on the request threads, {timeout}), {threads} request threads"
        );
    } else {
        println!("mode: bulkhead, {threads} request threads");
    }
    if let Some(reserve) = running.app.live.reserve() {
        println!("reserved: {} request threads for {}", reserve.threads, reserve.routes.join(", "));
    }
    for p in &running.providers {
        println!("provider {:<8} {} (embedded, fault {})", p.name(), p.url(), p.fault());
    }
    for (name, url) in
        [("fraud", &args.fraud_url), ("account", &args.account_url), ("notification", &args.notification_url)]
    {
        if let Some(url) = url {
            println!("provider {name:<8} {url}");
        }
    }
    print_capacity(&running.app);
    println!(
        "try: curl -i -H 'X-User-Id: alice' -d '{{\"customer_id\":\"c1\",\"amount\":42}}' http://{}/checkout",
        running.addr
    );
    // Serve until SIGTERM or SIGINT. The request threads do the work; this
    // one only waits for the signal, then stops in order.
    let mut signals =
        signal_hook::iterator::Signals::new([signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT])?;
    let signal = signals.forever().next().unwrap_or(signal_hook::consts::SIGTERM);
    log::info!("signal {signal}: stopping (no new connections; every request in flight is answered)");
    graceful_stop(running);
    Ok(())
}

/// How long the dependencies' workers get to finish calls still running once
/// every request has been answered.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Stops accepting, answers every request already read or being handled,
/// then shuts the dependencies down within [`STOP_GRACE`].
fn graceful_stop(running: Running) {
    let Running { handle, app, providers, .. } = running;
    // Streams would hold their request threads to the end of their life.
    app.streams.stop();
    handle.shutdown();
    log::info!("every request answered");
    if let Some(deps) = app.backends.deps() {
        // Notifications still queued are answered (and logged) by their shutdown.
        for dep in deps.all() {
            if !dep.shutdown(STOP_GRACE) {
                log::warn!("dependency {} did not stop within {STOP_GRACE:?}", dep.name());
            }
        }
    }
    drop(app);
    drop(providers);
    log::info!("stopped");
}

/// Prints the capacity budget of the request pool (bulkhead mode): the
/// threads left after the reserve, and each dependency's hold (none for the
/// ones declared detached, `calls = "detached"`).
pub fn print_capacity(app: &App) {
    let registry = &app.registry;
    if registry.snapshot().is_empty() {
        return;
    }
    match app.live.capacity(registry) {
        Ok(report) => {
            println!("capacity: {report}");
            for warning in report.warnings() {
                println!("capacity warning: {warning}");
            }
        }
        Err(e) => {
            println!("capacity: {}", app.live.capacity_report(registry));
            eprintln!("WARNING: capacity check failed: {e}: a hung provider can stall every route");
        }
    }
}
