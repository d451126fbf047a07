//! The rouille example (`examples/trips.rs`), run as users run it: the
//! reserved `/health` answers as fast while flights hangs and every ordinary
//! thread is held as it does while flights is healthy, and `/metrics` shows
//! the request pool's gauges.
#![cfg(all(feature = "ureq", feature = "tiny_http", feature = "prometheus", feature = "testing"))]

use crate::checkout_bin;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use checkout_bin::Checkout;

/// Search clients: more than the 10 ordinary threads, so a hang holds them all.
const SEARCHERS: usize = 16;
const PROBES: usize = 200;

fn agent() -> ureq::Agent {
    crate::support::agent_status_ok(Duration::from_secs(10))
}

fn gauge(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// `PROBES` `/health` on one kept-alive connection while `SEARCHERS` clients
/// search without a pause: the p99 in milliseconds, and the metrics text
/// read in the middle of it.
fn probe_under_search(server: &Checkout) -> (f64, String) {
    let stop = Arc::new(AtomicBool::new(false));
    let searchers: Vec<_> = (0..SEARCHERS)
        .map(|_| {
            let (stop, url) = (Arc::clone(&stop), server.url("/search?from=LIS&to=OPO"));
            thread::spawn(move || {
                let agent = agent();
                let give_up = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && Instant::now() < give_up {
                    let _ = agent.get(&url).call();
                    // Paced, so that refusals answered at once do not make
                    // a busy loop that measures the machine instead.
                    thread::sleep(Duration::from_millis(10));
                }
            })
        })
        .collect();
    let probe = agent();
    let health = server.url("/health");
    // Warm the connection and let the search load build up.
    let _ = probe.get(&health).call();
    thread::sleep(Duration::from_millis(500));
    let mut took = Vec::with_capacity(PROBES);
    let mut metrics = String::new();
    for i in 0..PROBES {
        let start = Instant::now();
        let mut answer = probe.get(&health).call().expect("/health answers");
        assert_eq!(answer.status().as_u16(), 200);
        let _ = answer.body_mut().read_to_string();
        took.push(start.elapsed().as_secs_f64() * 1000.0);
        if i == PROBES / 2 {
            metrics = probe.get(server.url("/metrics")).call().unwrap().body_mut().read_to_string().unwrap();
        }
        thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    for s in searchers {
        s.join().unwrap();
    }
    took.sort_by(f64::total_cmp);
    (took[PROBES * 99 / 100 - 1], metrics)
}

#[test]
fn the_reserved_health_of_a_rouille_service_holds_while_its_provider_hangs() {
    let server = Checkout::start_example("trips", &["healthy"]);
    let found =
        agent().get(server.url("/search?from=LIS&to=OPO")).call().unwrap().body_mut().read_to_string();
    assert!(found.unwrap().contains("LIS-OPO"), "a healthy search finds flights");
    let (healthy, _) = probe_under_search(&server);

    let mut set = agent().post(server.url("/_fault")).send("hang").expect("set the fault");
    assert_eq!(set.status().as_u16(), 200, "{:?}", set.body_mut().read_to_string());
    let (hung, metrics) = probe_under_search(&server);
    eprintln!("/health p99 with {SEARCHERS} searchers: healthy {healthy:.2} ms, flights hung {hung:.2} ms");
    assert_eq!(gauge(&metrics, "watertight_request_pool_threads"), Some(12), "{metrics}");
    assert_eq!(gauge(&metrics, "watertight_request_pool_reserved_threads"), Some(2), "{metrics}");
    let busy = gauge(&metrics, "watertight_request_pool_busy").expect("the busy gauge");
    assert!(busy >= 1, "the probe itself is busy: {metrics}");
    assert!(metrics.contains(r#"watertight_calls_total{dependency="flights""#), "{metrics}");
    // Under 2x the healthy p99; 10 ms of slack for a two-core runner busy
    // with the other tests, where a healthy p99 is a few milliseconds. Without
    // the reserve, /health would wait for a thread held for up to 400 ms.
    assert!(hung <= 2.0 * healthy + 10.0, "/health p99 {hung:.2} ms hung against {healthy:.2} ms healthy");
}
