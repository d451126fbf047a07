//! A whole small service on watertight, end to end: a request pool behind the
//! guard (`server::serve_with`), two dependencies in a `Registry`, a request
//! budget every provider call runs within, a fallback that says why it was
//! taken, and `/metrics`.
//!
//! `GET /quote/{sku}` asks inventory (on every request's path) whether the
//! item is in stock, then asks pricing for its price; when pricing cannot
//! answer in time, the quote falls back to the list price and says why.
//!
//! `cargo run --features testing --example quote -- [INVENTORY_FAULT] [PRICING_FAULT]`
//! starts both providers on loopback (`watertight::testing`; faults such as
//! `healthy`, `slow:200`, `hang`, `error:503`) and prints `listening on ...`.
//!
//! It needs nothing but std and watertight, so it builds as the `main.rs` of
//! a crate of your own with one dependency:
//! `watertight = { version = "0.1", features = ["testing"] }` (the default
//! features `ureq`, `tiny_http` and `prometheus`, plus the fake providers).
//! The HTTP client and server are the versions watertight re-exports,
//! `watertight::ureq` and `watertight::tiny_http`.
use std::time::Duration;

use watertight::http::WithDeadline;
use watertight::server::{RequestContext, ServerConfig, serve_with};
use watertight::testing::{FakeProvider, Fault};
use watertight::tiny_http::{Header, Request, Response, ResponseBox};
use watertight::{Dependency, Registry, breaker::BreakerConfig, metrics, ureq};

const REQUEST_THREADS: usize = 8;
const LIST_PRICE_CENTS: u64 = 1999;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fault = |i: usize| std::env::args().nth(i).map_or(Ok(Fault::Healthy), |f| f.parse());
    let stock = FakeProvider::start("inventory", fault(1)?, |_| (200, "in_stock".into()))?;
    let prices = FakeProvider::start("pricing", fault(2)?, |_| (200, "1799".into()))?;

    // Sized for normal load (README "Sizing"): 8 request threads make at most
    // ~800 calls/s to each 5 ms provider, 4 in flight; 3 workers and a short
    // wait take the bursts, and a hung provider holds at most 3 threads.
    let dependency = |name: &str, timeout_ms: u64| {
        Dependency::builder(name)
            .workers(3)
            .max_wait(Duration::from_millis(100))
            .timeout(Duration::from_millis(timeout_ms))
            .breaker(BreakerConfig::count_based(20).minimum_calls(10).open_for(Duration::from_secs(10)))
            .build()
    };
    let (inventory, pricing) = (dependency("inventory", 300)?, dependency("pricing", 600)?);
    let registry = Registry::new();
    registry.register(inventory.clone())?;
    registry.register(pricing.clone())?;
    // The server attaches its request pool's gauges to the registry, so the
    // `/metrics` below shows watertight_request_pool_busy and _threads too.
    let config =
        ServerConfig::builder().request_budget(Duration::from_secs(1)).registry(&registry).build()?;
    // The capacity rule for the pool this config serves: each hold against
    // the threads left after its reserve, each timeout against its budget.
    eprintln!("capacity: {}", registry.check_capacity(config.request_threads(REQUEST_THREADS))?);

    let agent = ureq::Agent::new_with_defaults();
    let (stock_url, prices_url) = (stock.url(), prices.url());
    let handler = move |req: &mut Request, ctx: &RequestContext| -> ResponseBox {
        let path = req.url().to_owned();
        if path == "/metrics" {
            return text(200, metrics::encode_text(&registry), metrics::CONTENT_TYPE);
        }
        let Some(sku) = path.strip_prefix("/quote/").filter(|s| !s.is_empty() && s.len() <= 64) else {
            return text(404, r#"{"code":"NOT_FOUND"}"#.into(), "application/json");
        };
        // Every call of this request ends by the request's own deadline.
        let get = |dep: &Dependency, url: String| {
            let agent = agent.clone();
            dep.with()
                .deadline(ctx.deadline())
                .call(move |call| agent.get(&url).with_deadline(call).call()?.body_mut().read_to_string())
        };
        // Inventory is required: without it there is no quote (fail closed).
        match get(&inventory, format!("{stock_url}/items/{sku}")) {
            Ok(stock) if stock == "in_stock" => {}
            Ok(_) => return text(404, r#"{"code":"OUT_OF_STOCK"}"#.into(), "application/json"),
            Err(e) => {
                let body = format!(r#"{{"code":"INVENTORY_UNAVAILABLE","why":"{}"}}"#, e.outcome());
                return text(503, body, "application/json");
            }
        }
        // Pricing may fall back to the list price, and the answer says why.
        let (cents, source) = match get(&pricing, format!("{prices_url}/prices/{sku}")) {
            Ok(price) => match price.trim().parse::<u64>() {
                Ok(cents) => (cents, "pricing".to_owned()),
                Err(_) => (LIST_PRICE_CENTS, "list_price: bad_answer".to_owned()),
            },
            Err(e) => (LIST_PRICE_CENTS, format!("list_price: {}", e.outcome())),
        };
        let body = format!(r#"{{"sku":"{sku}","price_cents":{cents},"source":"{source}"}}"#);
        text(200, body, "application/json")
    };

    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let server = serve_with(listener, REQUEST_THREADS, config, handler)?;
    println!("listening on http://{}", server.addr().to_ip().ok_or("not a TCP address")?);
    // Serve until killed; a real service would wait for SIGTERM (see the checkout example).
    loop {
        std::thread::park();
    }
}

fn text(status: u16, body: String, content_type: &str) -> ResponseBox {
    let header = Header::from_bytes("Content-Type", content_type).expect("a valid header");
    Response::from_string(body).with_status_code(status).with_header(header).boxed()
}
