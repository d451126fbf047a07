//! The checkout's access gate over its cache, in the real binary: kept
//! decisions carry users through an account outage, concurrent checks of
//! one user share one call, and a failure is never kept.
#![cfg(all(feature = "ureq", feature = "tiny_http", feature = "prometheus", feature = "cache"))]

use crate::checkout_bin::Checkout;
use crate::support::{agent_status_ok, wait_until};

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

fn answer(resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
    let mut resp = resp.expect("an HTTP answer");
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn checkout(agent: &ureq::Agent, url: &str, user: &str) -> (u16, Value) {
    answer(
        agent.post(url).header("X-User-Id", user).send_json(json!({ "customer_id": "c-1", "amount": 10.0 })),
    )
}

fn set_fault(agent: &ureq::Agent, server: &Checkout, fault: &str) {
    let (status, body) = answer(agent.post(server.url("/_faults/account")).send(fault));
    assert_eq!(status, 200, "setting account to {fault}: {body}");
}

/// `/circuits`: account-access's pool submissions, and the access cache.
fn access(agent: &ureq::Agent, server: &Checkout) -> (u64, Value) {
    let (status, circuits) = answer(agent.get(server.url("/circuits")).call());
    assert_eq!(status, 200);
    let dep =
        circuits["dependencies"].as_array().and_then(|d| d.iter().find(|d| d["name"] == "account-access"));
    let submitted = dep.and_then(|d| d["pool"]["submitted"].as_u64()).expect("account-access's submissions");
    let cache = circuits["caches"].as_array().and_then(|c| c.iter().find(|c| c["name"] == "access").cloned());
    (submitted, cache.unwrap_or_else(|| panic!("no access cache in {circuits}")))
}

/// Account hangs: a user allowed in the last 60 s keeps getting 201; twelve
/// concurrent checkouts of one uncached user make one call to account and
/// all get 503; once account heals, the next miss asks again.
#[test]
fn the_access_gate_keeps_decisions_and_shares_one_call_per_user() {
    let server = Checkout::start(&["--request-budget", "1500ms"]);
    let agent = agent_status_ok(Duration::from_secs(10));
    let url = server.url("/checkout");
    assert_eq!(checkout(&agent, &url, "alice").0, 201, "alice, kept from now on");
    set_fault(&agent, &server, "hang");

    for _ in 0..3 {
        let (status, body) = checkout(&agent, &url, "alice");
        assert_eq!(status, 201, "alice was allowed within 60 s: {body}");
    }
    let (before, _) = access(&agent, &server);

    const USERS: usize = 12;
    let start = Arc::new(Barrier::new(USERS));
    let checks: Vec<_> = (0..USERS)
        .map(|_| {
            let (start, url) = (Arc::clone(&start), url.clone());
            thread::spawn(move || {
                let client = agent_status_ok(Duration::from_secs(10));
                start.wait();
                checkout(&client, &url, "dora")
            })
        })
        .collect();
    for check in checks {
        let (status, body) = check.join().expect("a checkout thread panicked");
        assert_eq!((status, &body["code"]), (503, &json!("SERVICE_ACCESS_UNAVAILABLE")), "{body}");
    }
    let (after, cache) = access(&agent, &server);
    assert_eq!(after - before, 1, "twelve checks of one user, one call to account: {cache}");
    // Four wait at most (the cache's max_waiting: account-access's hold), the
    // others are refused at once; none starts a call of its own.
    let (joined, refused) = (cache["coalesced"].as_u64().unwrap(), cache["refused"].as_u64().unwrap());
    assert_eq!(joined + refused, 11, "{cache}");
    assert!(joined <= 3 && refused >= 8, "more than four waited: {cache}");
    assert_eq!(cache["in_flight"], 1, "the shared call outlives its callers' budget: {cache}");

    // Healed: the hung call ends (a failure, not kept), and dora's next
    // checkout asks account again.
    set_fault(&agent, &server, "healthy");
    let landed = wait_until(Duration::from_secs(15), || access(&agent, &server).1["in_flight"] == 0);
    assert!(landed, "the shared call never ended: {}", access(&agent, &server).1);
    let (status, body) = checkout(&agent, &url, "dora");
    assert_eq!(status, 201, "after account healed: {body}");
    let (asked, cache) = access(&agent, &server);
    assert_eq!(asked - before, 2, "the next miss asked again: {cache}");
    assert!(cache["hits"].as_u64().unwrap_or(0) >= 3, "{cache}");
}
