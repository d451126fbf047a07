//! The end-to-end example (`examples/quote.rs`), run as users run it: the real
//! binary with its loopback providers, asked over HTTP; and the wiring it
//! relies on for the request pool's gauges, on a real server on loopback.
#![cfg(all(feature = "ureq", feature = "tiny_http", feature = "prometheus", feature = "testing"))]

use crate::checkout_bin;

use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use checkout_bin::Checkout;
use serde_json::Value;
use watertight::server::{RequestContext, ServerConfig, serve_unguarded, serve_with};
use watertight::tiny_http::{Request, Response, ResponseBox, Server};
use watertight::{Registry, metrics};

fn get(server: &Checkout, path: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut resp = agent.get(server.url(path)).call().expect("an answer");
    (resp.status().as_u16(), resp.body_mut().read_to_string().expect("a body"))
}

/// The value of the label-less gauge `name` in OpenMetrics `text`.
fn gauge(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[test]
fn healthy_providers_give_a_priced_quote_and_metrics() {
    let server = Checkout::start_example("quote", &["healthy", "healthy"]);
    // Its capacity check is its server config's: the 8 threads, under the budget.
    let give_up = Instant::now() + Duration::from_secs(10);
    while !server.stderr().contains("capacity: request threads: 8, request budget 1s\n") {
        assert!(Instant::now() < give_up, "no capacity report: {}", server.stderr());
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, body) = get(&server, "/quote/sku-1");
    assert_eq!(status, 200, "{body}");
    let quote = json(&body);
    assert_eq!(
        (quote["price_cents"].as_u64(), quote["source"].as_str()),
        (Some(1799), Some("pricing")),
        "{body}"
    );
    let (status, metrics) = get(&server, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"watertight_calls_total{dependency="pricing",kind="successful"} 1"#),
        "{metrics}"
    );
    // The request pool's gauges, from the registry the server was given: its
    // 8 threads, one of them busy answering this very scrape (and perhaps the
    // thread that answered the quote, if it has not yet returned).
    assert_eq!(gauge(&metrics, "watertight_request_pool_threads"), Some(8), "{metrics}");
    let busy = gauge(&metrics, "watertight_request_pool_busy");
    assert!(busy.is_some_and(|b| (1..=2).contains(&b)), "busy {busy:?}: {metrics}");
    // Bucket bounds as their short decimals.
    assert!(
        metrics.contains(r#"watertight_call_seconds_bucket{le="1.6384",dependency="pricing"} 1"#),
        "{metrics}"
    );
    assert_eq!(get(&server, "/nowhere").0, 404);
}

/// A handler that serves `/metrics` from `registry` and holds every other
/// request until the test sends on the release channel, saying when it has
/// one (so the test knows how many request threads are busy, without
/// sleeping).
fn holding_handler(
    registry: Registry,
) -> (
    impl Fn(&mut Request, &RequestContext) -> ResponseBox + Send + Sync + 'static,
    mpsc::Receiver<()>,
    mpsc::Sender<()>,
) {
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let (entered_tx, release_rx) = (Mutex::new(entered_tx), Arc::new(Mutex::new(release_rx)));
    let handler = move |req: &mut Request, _: &RequestContext| -> ResponseBox {
        if req.url() == "/metrics" {
            return Response::from_string(metrics::encode_text(&registry)).boxed();
        }
        entered_tx.lock().unwrap().send(()).unwrap();
        let _ = release_rx.lock().unwrap().recv_timeout(Duration::from_secs(20));
        Response::from_string("released").boxed()
    };
    (handler, entered, release)
}

fn fetch(url: &str) -> String {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(20))).build().into();
    agent.get(url).call().expect("an answer").body_mut().read_to_string().expect("a body")
}

#[test]
fn a_registry_given_to_the_server_carries_its_request_pool_gauges_to_metrics() {
    let registry = Registry::new();
    assert!(registry.request_pool().is_none());
    let config = ServerConfig::builder().registry(&registry).build().unwrap();
    assert!(config.registry().is_some());
    let (handler, entered, release) = holding_handler(registry.clone());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = serve_with(listener, 4, config.clone(), handler).unwrap();
    let base = format!("http://{}", server.addr().to_ip().unwrap());

    // Two requests held in the handler, then a scrape: three busy of four.
    let held: Vec<_> = (0..2)
        .map(|_| {
            let url = format!("{base}/hold");
            std::thread::spawn(move || fetch(&url))
        })
        .collect();
    for _ in 0..2 {
        entered.recv_timeout(Duration::from_secs(20)).expect("a held request reached the handler");
    }
    let text = fetch(&format!("{base}/metrics"));
    assert!(text.contains("# TYPE watertight_request_pool_threads gauge\n"), "{text}");
    assert!(text.contains("\nwatertight_request_pool_threads 4\n"), "{text}");
    assert!(text.contains("\nwatertight_request_pool_busy 3\n"), "{text}");
    // The same two gauges as the request pool's own collector, for a
    // prometheus registry built by hand.
    let mut prom = metrics::PrometheusRegistry::default();
    prom.register_collector(Box::new(server.request_pool()));
    let mut own = String::new();
    metrics::prometheus_client::encoding::text::encode(&mut own, &prom).unwrap();
    let descriptors = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("# ") && l.contains("watertight_request_pool"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(descriptors(&text), descriptors(&own), "{own}");
    assert_eq!(descriptors(&own).len(), 6, "HELP and TYPE of the two gauges and the refusals: {own}");

    let pool = registry.request_pool().expect("attached while the server runs");
    assert_eq!(pool.threads(), 4);
    // The two held; the scrape's thread may not have returned yet.
    assert!((2..=3).contains(&pool.busy()), "{pool:?}");

    // One running server per registry: a second is refused, naming the setting.
    let (second, _, _) = holding_handler(registry.clone());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let err = serve_with(listener, 2, config.clone(), second).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists, "{err}");
    assert!(err.to_string().contains("ServerConfig::registry"), "{err}");
    assert_eq!(registry.request_pool().map(|p| p.threads()), Some(4), "the first pool's gauges stay");

    for _ in 0..2 {
        release.send(()).unwrap();
    }
    for client in held {
        assert_eq!(client.join().unwrap(), "released");
    }
    server.shutdown();
    assert!(registry.request_pool().is_none(), "a stopped pool leaves the registry");
    assert!(!metrics::encode_text(&registry).contains("watertight_request_pool"));

    // Once it has stopped, another server may use the registry, unguarded too.
    let (third, _, _) = holding_handler(registry.clone());
    let server = serve_unguarded(Server::http("127.0.0.1:0").unwrap(), 3, config, third).unwrap();
    let text = fetch(&format!("http://{}/metrics", server.addr().to_ip().unwrap()));
    assert!(text.contains("\nwatertight_request_pool_threads 3\n"), "{text}");
    assert!(text.contains("\nwatertight_request_pool_busy 1\n"), "{text}");
    server.shutdown();
}

#[test]
fn a_hung_pricing_provider_falls_back_within_the_budget_and_says_why() {
    let server = Checkout::start_example("quote", &["healthy", "hang"]);
    for _ in 0..3 {
        let began = Instant::now();
        let (status, body) = get(&server, "/quote/sku-2");
        let took = began.elapsed();
        assert_eq!(status, 200, "{body}");
        let quote = json(&body);
        assert_eq!(quote["price_cents"].as_u64(), Some(1999), "the list price: {body}");
        assert_eq!(quote["source"].as_str(), Some("list_price: timed_out"), "{body}");
        // Pricing's own 600 ms timeout ends the call, well within the 1 s budget.
        assert!(took < Duration::from_millis(600 + 400), "answered after {took:?}");
    }
}

#[test]
fn a_hung_inventory_fails_closed_with_the_reason() {
    let server = Checkout::start_example("quote", &["hang", "healthy"]);
    let (status, body) = get(&server, "/quote/sku-3");
    assert_eq!(status, 503, "{body}");
    assert_eq!(json(&body)["why"].as_str(), Some("timed_out"), "{body}");
}
