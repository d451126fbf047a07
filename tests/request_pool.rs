//! The request pool of a server that is not this crate's own, in bursts: an
//! ordinary request that finds the ordinary share full waits for a thread
//! when the wait it can expect fits `max_wait`, and is refused at once when
//! it does not; the reserved route answers throughout. Its own binary: the
//! bursts are timed, and the other areas' tests would skew them.
#![cfg(feature = "tiny_http")]

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use watertight::Registry;
use watertight::server::{EnterError, RequestPool, Reserve, ServerConfig};

const THREADS: usize = 32;
const HANDLER: Duration = Duration::from_millis(30);

fn pool(registry: &Registry) -> RequestPool {
    let config = ServerConfig::builder()
        .request_budget(Duration::from_secs(5))
        .max_wait(Duration::from_millis(100))
        .reserve(Reserve::new(2).for_routes(["GET /health"]))
        .registry(registry)
        .build()
        .unwrap();
    RequestPool::new(THREADS, &config).unwrap()
}

/// One request: enter, a 30 ms handler, out. `Err` with when it was refused.
fn search(pool: &RequestPool) -> Result<(), Duration> {
    let began = Instant::now();
    match pool.enter("GET", "/search", None, &[]) {
        Ok(entered) => {
            thread::sleep(HANDLER);
            drop(entered);
            Ok(())
        }
        Err(EnterError::Busy) => Err(began.elapsed()),
        Err(e) => panic!("unexpected {e}"),
    }
}

/// `n` ordinary requests at once, from plain threads; the refusals' times.
fn burst(pool: &RequestPool, n: usize) -> Vec<Duration> {
    let start = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (pool, start) = (pool.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                search(&pool)
            })
        })
        .collect();
    threads.into_iter().filter_map(|t| t.join().unwrap().err()).collect()
}

/// The reserved route's latency (enter, a 5 ms handler, out), `n` times.
fn health(pool: &RequestPool, n: usize) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let began = Instant::now();
            let entered = pool.enter("GET", "/health", None, &[]).expect("the reserve is never refused");
            thread::sleep(Duration::from_millis(5));
            drop(entered);
            began.elapsed()
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn a_healthy_burst_waits_and_only_the_callers_past_max_wait_are_refused() {
    let registry = Registry::new();
    let pool = pool(&registry);
    // The pool learns how long a request holds its thread.
    assert!(burst(&pool, 30).is_empty());
    let idle = median(health(&pool, 20));
    // A quiet spell, longer than a line takes to be judged stuck: the burst
    // that ends it fills the ordinary share, and its line is new.
    thread::sleep(Duration::from_millis(500));

    // 64 at once: 30 run, 34 wait at most two rounds (about 60 ms).
    let refused = burst(&pool, 64);
    assert!(refused.is_empty(), "a burst of 64 refused {}", refused.len());

    // 128 at once, while the reserved route is asked throughout: 30 run,
    // those within three rounds (about 90 ms) wait, the rest are refused on
    // arrival.
    let asker = {
        let pool = pool.clone();
        thread::spawn(move || health(&pool, 20))
    };
    let refused = burst(&pool, 128);
    let during = median(asker.join().unwrap());
    eprintln!(
        "burst of 128: {} refused (at {:?}); reserved route median {during:?} (idle {idle:?})",
        refused.len(),
        refused.iter().max()
    );
    assert!((1..=40).contains(&refused.len()), "a burst of 128 refused {}", refused.len());
    // Refused on arrival, by the estimate: on a loaded machine a few admitted
    // in the last round may still wait out `max_wait` (the estimate is a mean).
    let late = refused.iter().filter(|t| **t > Duration::from_millis(50)).count();
    assert!(late * 2 <= refused.len(), "{late} of {} refused after waiting: {refused:?}", refused.len());
    let idle = idle.max(Duration::from_millis(5));
    assert!(during <= idle * 2, "the reserved route took {during:?}, {idle:?} idle");

    // Counted by reason, in the registry's gauges (and so in /metrics).
    let gauges = registry.request_pool().expect("attached");
    let by_reason = gauges.refused();
    let total: u64 = by_reason.iter().map(|(_, n)| n).sum();
    assert_eq!(total, refused.len() as u64, "{by_reason:?}");
    assert!(by_reason.iter().any(|(reason, n)| *reason == "full" && *n > 0), "{by_reason:?}");
    assert_eq!((pool.busy(), pool.waiting()), (0, 0));
}

#[cfg(feature = "prometheus")]
#[test]
fn refusals_appear_in_the_metrics_with_their_reason() {
    let registry = Registry::new();
    let config = ServerConfig::builder()
        .max_wait(Duration::ZERO)
        .reserve(Reserve::new(1).for_routes(["GET /health"]))
        .registry(&registry)
        .build()
        .unwrap();
    let pool = RequestPool::new(2, &config).unwrap();
    let held = pool.enter("GET", "/a", None, &[]).unwrap();
    // max_wait 0: the ordinary share (1) is full, refused at once.
    assert_eq!(pool.enter("GET", "/b", None, &[]).unwrap_err(), EnterError::Busy);
    assert_eq!(pool.enter("GET", "/c", None, &[]).unwrap_err(), EnterError::Busy);
    drop(held);
    let text = watertight::metrics::encode_text(&registry);
    assert!(text.contains("watertight_request_pool_refused_total{reason=\"full\"} 2\n"), "{text}");
    assert!(text.contains("watertight_request_pool_refused_total{reason=\"max_wait\"} 0\n"), "{text}");
    // The same from the pool's own gauges, as a collector of their own.
    let mut own = prometheus_client::registry::Registry::default();
    own.register_collector(Box::new(pool.gauges()));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &own).unwrap();
    assert!(out.contains("watertight_request_pool_refused_total{reason=\"full\"} 2\n"), "{out}");
}

/// A rouille server (its own pool of 32 threads) over the request pool:
/// `/search` a 30 ms handler, `/health` reserved, `/metrics` the registry.
fn rouille_server(
    registry: &Registry,
) -> (std::net::SocketAddr, std::sync::mpsc::Sender<()>, thread::JoinHandle<()>) {
    let pool = pool(registry);
    let registry = registry.clone();
    let server = rouille::Server::new("127.0.0.1:0", move |req| {
        let headers: Vec<(&str, &str)> = req.headers().collect();
        let entered = match pool.enter(req.method(), req.raw_url(), Some(*req.remote_addr()), &headers) {
            Ok(entered) => entered,
            Err(e) => return rouille::Response::text(e.code()).with_status_code(e.status()),
        };
        let answer = match req.url().as_str() {
            "/search" => {
                thread::sleep(HANDLER);
                rouille::Response::text("found")
            }
            "/health" => rouille::Response::text("UP"),
            "/metrics" => rouille::Response::text(watertight::metrics::encode_text(&registry)),
            _ => rouille::Response::empty_404(),
        };
        drop(entered);
        answer
    })
    .expect("listen on loopback")
    .pool_size(THREADS);
    let addr = server.server_addr();
    let (join, stop) = server.stoppable();
    (addr, stop, join)
}

/// `n` requests at once to `url`: with `hey` where it is installed (the
/// statuses it counts), else from `n` threads. The count of each status.
fn load(url: &str, n: usize) -> std::collections::BTreeMap<u16, usize> {
    let mut statuses = std::collections::BTreeMap::new();
    let hey = std::process::Command::new("hey")
        .args(["-disable-keepalive", "-n", &n.to_string(), "-c", &n.to_string(), "-t", "10", url])
        .output();
    if let Some(out) = hey.ok().filter(|o| o.status.success()) {
        // "  [200]\t64 responses"
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix('[')
                && let Some((code, count)) = rest.split_once(']')
                && let (Ok(code), Some(Ok(count))) =
                    (code.parse::<u16>(), count.split_whitespace().next().map(str::parse::<usize>))
            {
                *statuses.entry(code).or_default() += count;
            }
        }
        let answered: usize = statuses.values().sum();
        if answered != n {
            eprintln!("hey: {}", String::from_utf8_lossy(&out.stdout));
        }
        return statuses;
    }
    eprintln!("hey is not installed: {n} threads instead");
    let start = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (url, start) = (url.to_owned(), Arc::clone(&start));
            thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(10)))
                    .build()
                    .into();
                start.wait();
                agent.get(&url).call().map_or(0, |r| r.status().as_u16())
            })
        })
        .collect();
    for t in threads {
        *statuses.entry(t.join().unwrap()).or_default() += 1;
    }
    statuses
}

#[test]
fn through_rouille_a_burst_of_64_is_served_whole_and_refusals_are_in_the_metrics() {
    let registry = Registry::new();
    let (addr, stop, join) = rouille_server(&registry);
    let url = |path: &str| format!("http://{addr}{path}");
    let warm = load(&url("/search"), 30);
    assert_eq!(warm.get(&200), Some(&30), "{warm:?}");
    for round in 0..3 {
        let burst = load(&url("/search"), 64);
        eprintln!("rouille, burst of 64, round {round}: {burst:?}");
        assert_eq!(burst.get(&200), Some(&64), "round {round}: {burst:?}");
    }
    // A burst twice the pool: what rouille queues itself waits there; what
    // reaches `enter` past the ordinary share waits by the rule, or is
    // refused and counted.
    let burst = load(&url("/search"), 128);
    eprintln!("rouille, burst of 128: {burst:?}");
    assert_eq!(burst.values().sum::<usize>(), 128, "{burst:?}");
    assert!(burst.keys().all(|s| *s == 200 || *s == 503), "{burst:?}");
    let agent = ureq::Agent::new_with_defaults();
    let metrics = agent.get(&url("/metrics")).call().unwrap().body_mut().read_to_string().unwrap();
    let counted: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("watertight_request_pool_refused_total{reason="))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(counted as usize, burst.get(&503).copied().unwrap_or(0), "{metrics}");
    stop.send(()).unwrap();
    join.join().unwrap();
}
