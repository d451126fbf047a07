//! A graceful stop of the checkout binary: SIGTERM with 20 checkouts in flight
//! against a slow fraud provider. Every checkout is answered, then the process
//! exits 0.
#![cfg(all(feature = "ureq", feature = "tiny_http", feature = "prometheus"))]

use crate::checkout_bin;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use checkout_bin::Checkout;

const CHECKOUTS: usize = 20;

fn checkout(addr: std::net::SocketAddr) -> Result<u16, String> {
    let body = r#"{"customer_id":"c-1","amount":42}"#;
    let request = format!(
        "POST /checkout HTTP/1.1\r\nHost: x\r\nX-User-Id: alice\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    checkout_bin::exchange(addr, request.as_bytes(), Duration::from_secs(20)).map(|a| a.status)
}

/// `request_pool.busy` from `/circuits`.
fn busy(addr: std::net::SocketAddr) -> usize {
    checkout_bin::get(addr, "/circuits", Duration::from_secs(5))
        .ok()
        .and_then(|a| serde_json::from_str::<serde_json::Value>(&a.body).ok())
        .and_then(|v| v["request_pool"]["busy"].as_u64())
        .map_or(0, |n| n as usize)
}

#[test]
fn sigterm_answers_every_checkout_in_flight_then_exits_0() {
    // More request threads than checkouts, so that every one of them is either
    // inside the handler or answered, which the test can see.
    let mut server = Checkout::start(&["--fraud", "slow:2000", "--request-threads", "24"]);
    let addr = server.addr;
    // Fills the access cache, so that the checkouts below wait on fraud only.
    assert_eq!(checkout(addr), Ok(201), "a first checkout:\n{}", server.stderr());

    let answered = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(CHECKOUTS + 1));
    let clients: Vec<_> = (0..CHECKOUTS)
        .map(|_| {
            let (answered, start) = (Arc::clone(&answered), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                let outcome = checkout(addr);
                answered.fetch_add(1, Ordering::SeqCst);
                outcome
            })
        })
        .collect();
    start.wait();
    // Every checkout has reached the server once those answered plus those in
    // the handler make 20 (answered is read first: a checkout counted there
    // cannot be in the handler any more, so none is counted twice).
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut seen = (0, 0);
    while seen.0 + seen.1 < CHECKOUTS {
        assert!(Instant::now() < give_up, "the checkouts did not all arrive: {seen:?}\n{}", server.stderr());
        let done = answered.load(Ordering::SeqCst);
        seen = (done, busy(addr).saturating_sub(1)); // minus this /circuits request
        thread::sleep(Duration::from_millis(10));
    }
    assert!(seen.1 > 0, "no checkout was still in flight at the signal: {seen:?}");
    let signalled = Instant::now();
    server.signal("TERM");

    let outcomes: Vec<_> = clients.into_iter().map(|c| c.join().expect("a client thread")).collect();
    let status = server.wait_exit(Duration::from_secs(20));
    println!(
        "stop: SIGTERM with {} of {CHECKOUTS} checkouts in flight; answers {:?}; exit {status:?} {:.1?} after the signal",
        seen.1,
        outcomes,
        signalled.elapsed()
    );
    for (i, outcome) in outcomes.iter().enumerate() {
        assert!(
            matches!(outcome, Ok(201 | 202)),
            "checkout {i}: {outcome:?}\nserver log:\n{}",
            server.stderr()
        );
    }
    let status =
        status.unwrap_or_else(|| panic!("the server did not exit within 20 s:\n{}", server.stderr()));
    assert!(status.success(), "exit status {status}:\n{}", server.stderr());
    // The process has exited; the thread reading its stderr may still be on
    // the last lines.
    let logged = Instant::now() + Duration::from_secs(5);
    while !server.stderr().contains("stopped") && Instant::now() < logged {
        thread::sleep(Duration::from_millis(10));
    }
    assert!(server.stderr().contains("stopped"), "{}", server.stderr());
}
