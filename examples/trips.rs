//! watertight's request pool on a server that is not its own: a trip search
//! on rouille (the synchronous framework on tiny_http), with one dependency,
//! a reserved `/health`, and `/metrics` that shows the request pool.
//!
//! - `GET /search?from=LIS&to=OPO` asks the flights provider within the
//!   request's 800 ms budget, through a `Dependency` of 4 workers;
//! - `GET /health` is of the reserved share: 2 of rouille's 12 threads that
//!   ordinary requests never take, so it answers while flights hangs and
//!   every ordinary thread is held;
//! - `GET /metrics` is Prometheus text: the dependency and the request pool
//!   (`watertight_request_pool_*`);
//! - `POST /_fault` (body `hang`, `healthy`, `slow:200`...) sets the embedded
//!   flights provider's fault, for loopback clients that came through no
//!   proxy.
//!
//! `cargo run --features testing --example trips -- [FLIGHTS_FAULT]` prints
//! `listening on http://...`. Built as a crate of its own, it needs
//! `watertight = { version = "0.1", features = ["testing"] }` and
//! `rouille = { version = "3.6", default-features = false }`.
//!
//! rouille keeps its threads, so an ordinary request that finds the ordinary
//! share full waits on its own thread for one, within the config's
//! `max_wait` (100 ms by default) and only when the wait it can expect fits;
//! else it is answered `503` (`RequestPool::enter`).
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rouille::{Request, Response};
use watertight::http::WithDeadline;
use watertight::server::{RequestPool, Reserve, ServerConfig};
use watertight::testing::{FakeProvider, Fault};
use watertight::{Dependency, Registry, breaker::BreakerConfig, metrics, ureq};

/// rouille's pool, and the request pool's size: one and the same.
const THREADS: usize = 12;

struct App {
    pool: RequestPool,
    flights: Dependency,
    provider: FakeProvider,
    registry: Registry,
    agent: ureq::Agent,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fault = std::env::args().nth(1).map_or(Ok(Fault::Healthy), |f| f.parse())?;
    let provider = FakeProvider::start("flights", fault, |_| (200, r#"["LIS-OPO 09:40"]"#.into()))?;
    let flights = Dependency::builder("flights")
        .workers(4)
        .max_wait(Duration::from_millis(50))
        .timeout(Duration::from_millis(400))
        .breaker(BreakerConfig::count_based(20).minimum_calls(10).open_for(Duration::from_secs(10)))
        .build()?;
    let registry = Registry::new();
    registry.register(flights.clone())?;
    let (budget, reserve) =
        (Duration::from_millis(800), Reserve::new(2).for_routes(["GET /health", "GET /metrics"]));
    let config =
        ServerConfig::builder().request_budget(budget).reserve(reserve).registry(&registry).build()?;
    // The capacity rule for this pool: flights' hold against the 10 threads
    // left after the reserve, and its timeout against the budget.
    eprintln!("capacity: {}", registry.check_capacity(config.request_threads(THREADS))?);
    let pool = RequestPool::new(THREADS, &config)?;
    let agent = ureq::Agent::new_with_defaults();
    let app = Arc::new(App { pool, flights, provider, registry, agent });

    let server = rouille::Server::new("127.0.0.1:0", move |req| app.handle(req))
        .map_err(|e| format!("cannot listen: {e}"))?
        .pool_size(THREADS);
    println!("listening on http://{}", server.server_addr());
    server.run();
    Ok(())
}

impl App {
    fn handle(&self, req: &Request) -> Response {
        // First: count the request in (until `entered` drops), with its
        // deadline; refused at once when the ordinary share is full.
        let headers: Vec<(&str, &str)> = req.headers().collect();
        let peer = Some(*req.remote_addr());
        let entered = match self.pool.enter(req.method(), req.raw_url(), peer, &headers) {
            Ok(entered) => entered,
            Err(e) => return json(e.status(), &format!(r#"{{"code":"{}","message":"{e}"}}"#, e.code())),
        };
        let ctx = entered.context();
        match (req.method(), req.url().as_str()) {
            ("GET", "/health") => json(200, r#"{"status":"UP"}"#),
            ("GET", "/metrics") => {
                Response::from_data(metrics::CONTENT_TYPE, metrics::encode_text(&self.registry))
            }
            ("GET", "/search") => {
                let url = format!("{}/flights?{}", self.provider.url(), req.raw_query_string());
                let agent = self.agent.clone();
                let found = self.flights.with().deadline(ctx.deadline()).call(move |call| {
                    agent.get(&url).with_deadline(call).call()?.body_mut().read_to_string()
                });
                match found {
                    Ok(list) => json(200, &format!(r#"{{"flights":{list}}}"#)),
                    // The reason, for the client and for the operator.
                    Err(e) => {
                        json(503, &format!(r#"{{"code":"FLIGHTS_UNAVAILABLE","why":"{}"}}"#, e.outcome()))
                    }
                }
            }
            ("POST", "/_fault") if local(ctx.peer_addr(), ctx.through_proxy()) => {
                let mut body = String::new();
                if let Some(mut data) = req.data() {
                    let _ = data.by_ref().take(64).read_to_string(&mut body);
                }
                match body.trim().parse::<Fault>() {
                    Ok(fault) => {
                        self.provider.set_fault(fault);
                        json(200, &format!(r#"{{"fault":"{}"}}"#, body.trim()))
                    }
                    Err(e) => json(400, &format!(r#"{{"code":"BAD_FAULT","message":"{e}"}}"#)),
                }
            }
            ("POST", "/_fault") => json(403, r#"{"code":"FORBIDDEN"}"#),
            _ => json(404, r#"{"code":"NOT_FOUND"}"#),
        }
    }
}

/// A client on this host that came through no proxy.
fn local(peer: Option<SocketAddr>, through_proxy: bool) -> bool {
    !through_proxy && peer.is_some_and(|p| p.ip().is_loopback())
}

fn json(status: u16, body: &str) -> Response {
    Response::from_data("application/json", body.to_owned()).with_status_code(status)
}
