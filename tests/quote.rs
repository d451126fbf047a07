//! The end-to-end example (`examples/quote.rs`), run as users run it: the real
//! binary with its loopback providers, asked over HTTP.

#[path = "support/checkout_bin.rs"]
mod checkout_bin;

use std::time::{Duration, Instant};

use checkout_bin::Checkout;
use serde_json::Value;

fn get(server: &Checkout, path: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut resp = agent.get(server.url(path)).call().expect("an answer");
    (resp.status().as_u16(), resp.body_mut().read_to_string().expect("a body"))
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

#[test]
fn healthy_providers_give_a_priced_quote_and_metrics() {
    let server = Checkout::start_example("quote", &["healthy", "healthy"]);
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
    assert_eq!(get(&server, "/nowhere").0, 404);
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
