//! The checkout example's reserved share (`[server.reserve]` in
//! watertight.toml), against the real binary: with every ordinary request
//! thread held by a hung fraud provider, `GET /health` and
//! `GET /orders/{id}` still answer, from the two reserved threads.
#![cfg(all(
    feature = "ureq",
    feature = "tiny_http",
    feature = "prometheus",
    feature = "testing",
    feature = "serde"
))]

use crate::checkout_bin;
use crate::support;

use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use checkout_bin::Checkout;
use serde_json::{Value, json};
use support::{agent_status_ok, wait_until};

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/checkout/watertight.toml");
/// The shipped pool: 16 request threads, 2 of them reserved.
const THREADS: usize = 16;
const ORDINARY: usize = 14;
/// The bound for a reserved route while the ordinary threads are held.
const BOUND: Duration = Duration::from_millis(50);

fn json(resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
    let mut resp = resp.expect("an HTTP answer");
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The shipped watertight.toml with fraud's pool as large as the ordinary
/// threads (14 workers, no queue) and an 8 s timeout.
///
/// Why not the file as shipped: its bulkhead is what keeps one hung provider
/// from holding every thread. fraud holds at most 6 + 2 request threads (its
/// waiters give up within 100 ms), so with fraud hung 6 ordinary threads stay
/// free. The reserve is for when the bulkheads do not suffice: several
/// providers hung at once, or a pool sized too large, which this file
/// stands for. Every other value (the reserve included) is the shipped one;
/// the breaker needs 8 failures, and the 14 hung calls record none until
/// they time out, so all 14 are admitted and held.
fn config_holding_every_ordinary_thread() -> PathBuf {
    let text = std::fs::read_to_string(FILE).expect("read watertight.toml");
    let fraud = "[dependencies.fraud]\nworkers = 6\nqueue = 2\nmax_wait = \"100ms\"\ntimeout = \"3s\"\n";
    assert!(text.contains(fraud), "the shipped fraud section changed:\n{text}");
    let text = text.replace(
        fraud,
        "[dependencies.fraud]\nworkers = 14\nqueue = 0\nmax_wait = \"100ms\"\ntimeout = \"8s\"\n",
    );
    assert!(text.contains("[server.reserve]\nthreads = 2\n"), "the shipped reserve changed:\n{text}");
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("checkout-reserve-{}-fraud-14.toml", std::process::id()));
    std::fs::write(&path, text).expect("write the test's config");
    path
}

fn post_checkout(agent: &ureq::Agent, server: &Checkout) -> (u16, Value) {
    json(
        agent
            .post(server.url("/checkout"))
            .header("X-User-Id", "alice")
            .send_json(json!({ "customer_id": "c-1", "amount": 20.0 })),
    )
}

/// p50 and max of `took`, sorted in place.
fn spread(took: &mut [Duration]) -> (Duration, Duration) {
    took.sort();
    (took[took.len() / 2], took[took.len() - 1])
}

#[test]
fn every_ordinary_thread_held_by_a_hung_provider_and_health_and_order_status_still_answer() {
    let path = config_holding_every_ordinary_thread();
    let server = Checkout::start(&["--config", path.to_str().unwrap(), "--request-budget", "10s"]);
    let agent = agent_status_ok(Duration::from_secs(10));

    // An order to read back, and alice's access in the cache, while fraud is healthy.
    let (status, order) = post_checkout(&agent, &server);
    assert_eq!(status, 201, "{order}");
    let order_path = format!("/orders/{}", order["order_id"].as_str().unwrap());
    // Both providers hang. alice's access is cached, so her checkouts go
    // straight to fraud; `GET /me` calls account.
    for provider in ["fraud", "account"] {
        let (status, _) = json(agent.post(server.url(&format!("/_faults/{provider}"))).send("hang"));
        assert_eq!(status, 200);
    }

    // 14 checkouts hold the 14 ordinary threads on fraud. Then 2 `GET /me`,
    // which would hold a thread each on account for the rest of their
    // budget: without the reserve they would take the last two threads and
    // starve /health; with it they may only wait for an ordinary thread, and
    // are refused once the ordinary threads are seen stuck.
    // Each client opens its kept-alive connection first (see the incident
    // test in checkout.rs: a burst of new connections meets a lost wake-up
    // in tiny_http's accept side, which is not what this test is about).
    let clients: Vec<ureq::Agent> = (0..ORDINARY + 2)
        .map(|_| {
            let client = agent_status_ok(Duration::from_secs(30));
            assert_eq!(json(client.get(server.url("/health")).call()).0, 200);
            client
        })
        .collect();
    let start = Arc::new(Barrier::new(ORDINARY + 1));
    let mut clients = clients.into_iter();
    let spawn = |client: ureq::Agent, start: Option<Arc<Barrier>>, url: String| {
        thread::spawn(move || {
            let resp = match start {
                Some(start) => {
                    start.wait();
                    let began = Instant::now();
                    let resp = client
                        .post(&url)
                        .header("X-User-Id", "alice")
                        .send_json(json!({ "customer_id": "c-2", "amount": 20.0 }));
                    (json(resp), began)
                }
                None => {
                    let began = Instant::now();
                    (json(client.get(&url).header("X-User-Id", "alice").call()), began)
                }
            };
            let ((status, body), began) = resp;
            ((status, body), began.elapsed())
        })
    };
    let held: Vec<_> = clients
        .by_ref()
        .take(ORDINARY)
        .map(|c| spawn(c, Some(Arc::clone(&start)), server.url("/checkout")))
        .collect();
    start.wait();
    let fraud_busy = || {
        let (_, circuits) = json(agent.get(server.url("/circuits")).call());
        let fraud = circuits["dependencies"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["name"] == "fraud").cloned());
        (fraud.map_or(Value::Null, |f| f["pool"]["busy"].clone()), circuits["request_pool"].clone())
    };
    let filled = wait_until(Duration::from_secs(5), || fraud_busy().0 == ORDINARY);
    assert!(filled, "fraud did not hold 14 request threads: {:?}\n{}", fraud_busy(), server.stderr());
    let waiting: Vec<_> = clients.map(|c| spawn(c, None, server.url("/me"))).collect();

    // Every ordinary thread busy: /circuits (itself reserved) counts the 14
    // held checkouts and itself, and so does the request pool's gauge.
    let (fraud, pool) = fraud_busy();
    assert_eq!(fraud, ORDINARY);
    assert_eq!((&pool["threads"], &pool["busy"]), (&json!(THREADS), &json!(ORDINARY + 1)), "{pool}");
    // The gauge counts a thread busy until its `respond` has returned, which
    // may be a moment after the previous answer was read: poll, bounded.
    let mut metrics = String::new();
    let gauge = wait_until(Duration::from_secs(5), || {
        metrics = agent.get(server.url("/metrics")).call().unwrap().body_mut().read_to_string().unwrap();
        metrics.contains(&format!("\nwatertight_request_pool_busy {}\n", ORDINARY + 1))
    });
    let pool_lines =
        || metrics.lines().filter(|l| l.starts_with("watertight_request_pool")).collect::<Vec<_>>();
    assert!(gauge, "the request pool's gauge: {}", pool_lines().join("; "));
    // The reserve's own gauges: its 2 threads, and (the /metrics read itself
    // being a reserved route) at most that one reserved request in flight.
    assert!(
        metrics.contains("\nwatertight_request_pool_reserved_threads 2\n"),
        "{}",
        pool_lines().join("; ")
    );
    assert!(metrics.contains("\nwatertight_request_pool_reserved_busy "), "{}", pool_lines().join("; "));
    assert!(metrics.contains("\nwatertight_request_pool_waiting "), "{}", pool_lines().join("; "));

    // The reserved routes, 10 times each over a kept-alive connection and 10
    // times on a new one (guard, hop and request thread each time).
    let mut health = Vec::new();
    let mut orders = Vec::new();
    for i in 0..10 {
        for (path, took) in [("/health", &mut health), (order_path.as_str(), &mut orders)] {
            let began = Instant::now();
            let (status, body) = json(agent.get(server.url(path)).call());
            took.push(began.elapsed());
            assert_eq!(status, 200, "GET {path} #{i} kept-alive: {body}");
            let began = Instant::now();
            let fresh = checkout_bin::get(server.addr, path, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("GET {path} #{i} on a new connection: {e}"));
            took.push(began.elapsed());
            assert_eq!(fresh.status, 200, "GET {path} #{i} on a new connection: {}", fresh.body);
        }
    }
    // Still every ordinary thread held. The late requests waited for an
    // ordinary thread until the line was seen not to move (three normal
    // holds with none back): refused 503 SERVER_BUSY, long before the held
    // ones end.
    let (fraud, pool) = fraud_busy();
    assert_eq!((fraud, &pool["busy"]), (json!(ORDINARY), &json!(ORDINARY + 1)), "{pool}");
    let late: Vec<_> = waiting.into_iter().map(|w| w.join().unwrap()).collect();
    for ((status, body), took) in &late {
        assert_eq!((*status, &body["code"]), (503, &json!("SERVER_BUSY")), "{body}");
        assert!(*took < Duration::from_secs(2), "a late GET /me took {took:?} to be refused");
    }
    let refused = agent.get(server.url("/metrics")).call().unwrap().body_mut().read_to_string().unwrap();
    let total: u64 = refused
        .lines()
        .filter(|l| l.starts_with("watertight_request_pool_refused_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(total, late.len() as u64, "{refused}");
    let ((h50, hmax), (o50, omax)) = (spread(&mut health), spread(&mut orders));
    eprintln!(
        "with 14 of 14 ordinary threads held: GET /health p50 {h50:?} max {hmax:?}, \
         GET /orders/{{id}} p50 {o50:?} max {omax:?} (20 each)"
    );
    let within = |took: &[Duration]| took.iter().filter(|t| **t < BOUND).count();
    let (health_within, orders_within) = (within(&health), within(&orders));
    eprintln!("under 50 ms: /health {health_within} of 20, /orders {orders_within} of 20");
    // Real time on a shared machine: 18 of each 20 are held to the 50 ms
    // bound (a descheduled client may miss it), every answer to 1 s.
    assert!(health_within >= 18 && orders_within >= 18, "over 50 ms: {health:?} {orders:?}");
    assert!(h50 < BOUND && o50 < BOUND, "medians over 50 ms: /health {h50:?}, /orders {o50:?}");
    assert!(
        hmax < Duration::from_secs(1) && omax < Duration::from_secs(1),
        "/health {hmax:?}, /orders {omax:?}"
    );

    // fraud's timeout frees the held threads (manual review).
    for h in held {
        let ((status, body), took) = h.join().unwrap();
        assert_eq!((status, &body["status"]), (202, &json!("manual_review")), "{body}");
        assert!(took < Duration::from_secs(12), "a held checkout took {took:?}: fraud's timeout is 8 s");
    }

    let _ = std::fs::remove_file(path);
}
