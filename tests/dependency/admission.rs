//! Healthy traffic is never turned away, and isolation still holds, with a
//! configuration that `check_capacity` accepts without a warning.
//!
//! The service: a request pool of 8 threads (`server::serve`) answering
//! `GET /quote`, which calls an inventory provider and then a pricing
//! provider (healthy, 5 ms each) through their own dependencies, sized for
//! normal load by Little's law: 4 workers each, no queue, and a short wait
//! for a worker (`max_wait`), with at most one waiter per worker: all 8
//! request threads can be inside one dependency at once (4 running, 4
//! waiting). 50 clients at once must get no rejection.
#![cfg(all(feature = "ureq", feature = "tiny_http", feature = "testing"))]
#![cfg(all(feature = "tiny_http", feature = "ureq"))]

use crate::support;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use support::{FakeProvider, Fault};
use tiny_http::{Request, Response, ResponseBox};
use watertight::http::WithDeadline;
use watertight::server::RequestContext;
use watertight::{Dependency, Registry, breaker::BreakerConfig};

const REQUEST_THREADS: usize = 8;
const CLIENTS: usize = 50;
const REQUESTS_EACH: usize = 8;

fn provider(name: &str) -> FakeProvider {
    FakeProvider::start(name, Fault::Slow(Duration::from_millis(5)), |_| (200, "ok".to_owned()))
        .expect("bind a loopback port")
}

fn dependency(name: &str, max_wait: Duration) -> Dependency {
    Dependency::builder(name)
        .workers(4)
        .queue(0)
        .max_wait(max_wait)
        .timeout(Duration::from_secs(1))
        .breaker(BreakerConfig::count_based(8).minimum_calls(4))
        .build()
        .expect("a valid dependency")
}

/// Runs the quote service with the given wait for a worker, sends
/// `CLIENTS x REQUESTS_EACH` quotes from `CLIENTS` threads at once, and
/// returns how many were answered 200 and the capacity report's warnings.
fn run(max_wait: Duration) -> (usize, usize, Vec<String>) {
    // One scenario at a time: two bursts at once on two cores would measure each other.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (inventory_p, pricing_p) = (provider("inventory"), provider("pricing"));
    let (inventory, pricing) = (dependency("inventory", max_wait), dependency("pricing", max_wait));
    let registry = Registry::new();
    registry.register(inventory.clone()).unwrap();
    registry.register(pricing.clone()).unwrap();
    let report = registry.check_capacity(REQUEST_THREADS).expect("no dependency can take every thread");

    let agent = support::agent(Duration::from_secs(2));
    let (inv_url, price_url) = (inventory_p.url(), pricing_p.url());
    let handler = move |_req: &mut Request, ctx: &RequestContext| -> ResponseBox {
        let fetch = |dep: &Dependency, url: String| {
            let agent = agent.clone();
            dep.with()
                .deadline(ctx.deadline())
                .call(move |ctx| agent.get(&url).with_deadline(ctx).call().map(|_| ()))
        };
        match fetch(&inventory, inv_url.clone()).and_then(|()| fetch(&pricing, price_url.clone())) {
            Ok(()) => Response::from_string("quote").boxed(),
            Err(e) => Response::from_string(e.outcome().as_str()).with_status_code(503).boxed(),
        }
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let handle = watertight::server::serve(listener, REQUEST_THREADS, handler).expect("start the server");
    let url = format!("http://{}/quote", handle.addr().to_ip().expect("a TCP address"));

    let start = Arc::new(Barrier::new(CLIENTS));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (start, url) = (Arc::clone(&start), url.clone());
            thread::spawn(move || {
                let agent = support::agent_status_ok(Duration::from_secs(10));
                start.wait();
                let mut ok = 0;
                let mut refused = Vec::new();
                for _ in 0..REQUESTS_EACH {
                    match agent.get(&url).call() {
                        Ok(r) if r.status().as_u16() == 200 => ok += 1,
                        Ok(mut r) => refused.push(r.body_mut().read_to_string().unwrap_or_default()),
                        Err(e) => refused.push(e.to_string()),
                    }
                }
                (ok, refused)
            })
        })
        .collect();
    let mut ok = 0;
    let mut refused = std::collections::BTreeMap::<String, usize>::new();
    for client in clients {
        let (answered, why) = client.join().expect("a client");
        ok += answered;
        why.into_iter().for_each(|w| *refused.entry(w).or_default() += 1);
    }
    println!("max_wait {max_wait:?}: refused {refused:?}");
    handle.shutdown();
    (ok, CLIENTS * REQUESTS_EACH, report.warnings())
}

#[test]
fn a_healthy_burst_on_every_requests_path_is_never_turned_away() {
    let began = Instant::now();
    let (ok, sent, warnings) = run(Duration::from_millis(250));
    println!("max_wait 250 ms: {ok} of {sent} quotes answered 200 in {:.2?}", began.elapsed());
    // The only warnings: with their waiters, each dependency can hold all 8
    // request threads, for at most max_wait (never while its workers are
    // stuck); and so can both together (4 + 4) if both providers hang.
    let expected = ["with its 4 waiters, for up to 250ms each", "all dependencies together can hold 8 of 8"];
    assert_eq!(warnings.len(), 3, "check_capacity warns: {warnings:?}");
    assert!(warnings.iter().all(|w| expected.iter().any(|e| w.contains(e))), "{warnings:?}");
    assert_eq!(ok, sent, "healthy quotes were turned away");
}

#[test]
fn without_the_wait_the_same_pool_turns_healthy_quotes_away() {
    // The control: 8 request threads on 3 workers with no queue and no wait
    // cannot all be served at once, so a burst gets `QueueFull`.
    let (ok, sent, _) = run(Duration::ZERO);
    println!("max_wait 0: {ok} of {sent} quotes answered 200");
    assert!(ok < sent, "every quote got through without a wait: the burst never filled the pool");
}
