//! The checkout example's order notification, sent fire-and-forget
//! (`Dependency::spawn`) after an approved checkout: a hung notification
//! provider costs `POST /checkout` nothing, and its circuit still sees every
//! outcome. Against the real binary on loopback.
#![cfg(all(
    feature = "ureq",
    feature = "tiny_http",
    feature = "prometheus",
    feature = "testing",
    feature = "serde"
))]

use crate::checkout_bin;
#[allow(unused_imports)] // the shared test support re-exports more than this file uses
use crate::support;

use std::time::{Duration, Instant};

use checkout_bin::Checkout;
use serde_json::{Value, json};
use support::{agent_status_ok, wait_until};

/// The notification dependency's timeout in the embedded watertight.toml.
const NOTIFICATION_TIMEOUT: Duration = Duration::from_secs(2);
/// Well under it: a checkout that waited for the notification would take 2 s.
const FAST: Duration = Duration::from_millis(500);

fn answer(resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
    let mut resp = resp.expect("an HTTP answer");
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// One approved checkout (amount 42, under fraud's limit) and how long it took.
fn checkout(agent: &ureq::Agent, server: &Checkout) -> (u16, Value, Duration) {
    let began = Instant::now();
    let (status, body) = answer(
        agent
            .post(server.url("/checkout"))
            .header("X-User-Id", "alice")
            .send_json(json!({ "customer_id": "c-1", "amount": 42.0 })),
    );
    (status, body, began.elapsed())
}

fn notification(agent: &ureq::Agent, server: &Checkout) -> Value {
    let (status, circuits) = answer(agent.get(server.url("/circuits")).call());
    assert_eq!(status, 200);
    circuits["dependencies"]
        .as_array()
        .and_then(|deps| deps.iter().find(|d| d["name"] == "notification").cloned())
        .unwrap_or_else(|| panic!("no notification dependency in {circuits}"))
}

fn total(calls: &Value) -> u64 {
    ["successful", "failed", "ignored", "timed_out", "panicked"]
        .iter()
        .chain(&["not_permitted", "queue_full", "deadline_unmeetable", "shutting_down", "limit_exceeded"])
        .map(|k| calls[*k].as_u64().unwrap_or_else(|| panic!("no {k} in {calls}")))
        .sum()
}

/// 20 checkouts one after the other while notification hangs: each is
/// approved well under notification's 2 s timeout. The first ten fill its 2
/// workers and its queue of 8, the rest are refused at once; the admitted
/// ones time out and open its breaker, and every notification is counted once.
#[test]
fn a_hung_notification_provider_does_not_slow_checkout() {
    let server = Checkout::start(&["--notification", "hang"]);
    let agent = agent_status_ok(Duration::from_secs(10));
    let (status, faults) = answer(agent.get(server.url("/_faults")).call());
    assert_eq!((status, &faults["notification"]), (200, &json!("hang")), "{faults}");

    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let (status, body, took) = checkout(&agent, &server);
        assert_eq!((status, &body["status"]), (201, &json!("approved")), "checkout #{i}: {body}");
        assert!(took < FAST, "checkout #{i} took {took:?} (notification timeout {NOTIFICATION_TIMEOUT:?})");
        slowest = slowest.max(took);
    }
    eprintln!("20 checkouts with notification hung: slowest {slowest:?}");

    // Every notification is counted once, and the failures open the circuit.
    let settled = wait_until(Duration::from_secs(15), || {
        let n = notification(&agent, &server);
        total(&n["calls"]) == 20 && n["state"] == "open"
    });
    let n = notification(&agent, &server);
    assert!(settled, "notification settled and open: {n}\n{}", server.stderr());
    let calls = &n["calls"];
    let failed = calls["timed_out"].as_u64().unwrap() + calls["failed"].as_u64().unwrap();
    assert!(failed >= 5, "the admitted notifications failed: {calls}");
    assert!(calls["queue_full"].as_u64().unwrap() >= 1, "the rest were refused at once: {calls}");
    assert_eq!(calls["successful"], 0, "{calls}");
    // Their failures were logged, not swallowed.
    assert!(server.stderr().contains("dependency notification: detached call failed"), "{}", server.stderr());

    // With the breaker open, checkouts stay as fast, and notifications are refused at once.
    for i in 0..5 {
        let (status, body, took) = checkout(&agent, &server);
        assert_eq!(status, 201, "{body}");
        assert!(took < FAST, "checkout #{i} after the breaker opened took {took:?}");
    }
    let n = notification(&agent, &server);
    assert!(n["calls"]["not_permitted"].as_u64().unwrap() >= 5, "{n}");

    // It is in /metrics like the others.
    let mut metrics = agent.get(server.url("/metrics")).call().expect("GET /metrics");
    let text = metrics.body_mut().read_to_string().unwrap();
    assert!(
        text.contains(r#"watertight_calls_total{dependency="notification",kind="not_permitted"}"#),
        "{text}"
    );
    assert!(text.contains(r#"dependency="notification""#) && text.contains(r#"dependency="fraud""#));

    // Healed (the breaker stays open for its 15 s): the fault switch answers for it too.
    let (status, body) = answer(agent.post(server.url("/_faults/notification")).send("healthy"));
    assert_eq!((status, &body["fault"]), (200, &json!("healthy")), "{body}");
}

/// A healthy notification provider gets one notification per approved order.
#[test]
fn an_approved_checkout_is_notified() {
    let server = Checkout::start(&[]);
    let agent = agent_status_ok(Duration::from_secs(10));
    for _ in 0..3 {
        assert_eq!(checkout(&agent, &server).0, 201);
    }
    // Over fraud's limit: rejected, so not notified.
    let (status, _) = answer(
        agent
            .post(server.url("/checkout"))
            .header("X-User-Id", "alice")
            .send_json(json!({ "customer_id": "c-1", "amount": 5000.0 })),
    );
    assert_eq!(status, 402);
    let settled =
        wait_until(Duration::from_secs(10), || notification(&agent, &server)["calls"]["successful"] == 3);
    assert!(settled, "{}", notification(&agent, &server));
    assert_eq!(total(&notification(&agent, &server)["calls"]), 3);
}

/// `--no-bulkhead`: each notification is sent from a thread of its own, so a
/// hung provider does not slow checkout there either, but nothing bounds those
/// threads: each checkout leaves one behind until the client timeout.
#[test]
fn without_the_bulkhead_a_hung_notification_leaves_a_thread_per_checkout() {
    let server = Checkout::start(&["--no-bulkhead", "--notification", "hang"]);
    let agent = agent_status_ok(Duration::from_secs(10));
    assert_eq!(checkout(&agent, &server).0, 201, "warm-up");
    let before = server.threads();
    for i in 0..5 {
        let (status, body, took) = checkout(&agent, &server);
        assert_eq!(status, 201, "{body}");
        assert!(took < FAST, "checkout #{i} took {took:?}");
    }
    assert!(
        wait_until(Duration::from_secs(5), || server.threads() >= before + 5),
        "threads: {before} before, {} after",
        server.threads()
    );
}
