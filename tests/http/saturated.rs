//! `Fault::Saturated`: a provider that serves a few requests at once and makes
//! the rest wait, so that its latency grows with the load.
#![cfg(all(feature = "ureq", feature = "testing"))]

use crate::support;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use support::{Fault, agent, provider, wait_until};

fn saturated(capacity: usize, ms: u64) -> Fault {
    Fault::Saturated { capacity, service: Duration::from_millis(ms) }
}

#[test]
fn text_form_round_trips() {
    assert_eq!("saturated:4:125".parse::<Fault>(), Ok(saturated(4, 125)));
    assert_eq!(" Saturated: 2 : 50 ".parse::<Fault>(), Ok(saturated(2, 50)));
    assert_eq!(saturated(16, 500).to_string(), "saturated:16:500");
    assert_eq!(saturated(3, 7).to_string().parse::<Fault>(), Ok(saturated(3, 7)));
    // Capped like every duration of a fault.
    assert_eq!("saturated:1:999999999".parse::<Fault>(), Ok(saturated(1, 60_000)));
    for bad in [
        "saturated",
        "saturated:4",
        "saturated:0:100",
        "saturated:x:100",
        "saturated:4:-1",
        "saturated:70000:5",
    ] {
        let err = bad.parse::<Fault>().unwrap_err();
        assert!(err.to_string().contains("saturated:<capacity 1-65536>:<ms>"), "{bad}: {err}");
    }
}

/// Sends `n` requests at once (each on its own thread, started together) and
/// returns how long the last took to be answered, from the start, and how
/// many were answered 200.
fn burst(url: &str, n: usize) -> (Duration, usize) {
    let start = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (start, url, agent) = (Arc::clone(&start), url.to_owned(), agent(Duration::from_secs(20)));
            thread::spawn(move || {
                start.wait();
                agent.get(&url).call().map(|r| r.status().as_u16()).ok()
            })
        })
        .collect();
    // Read before the barrier opens, so that no request can start before it.
    let began = Instant::now();
    start.wait();
    let ok = threads.into_iter().map(|t| t.join().expect("a caller")).filter(|s| *s == Some(200)).count();
    (began.elapsed(), ok)
}

#[test]
fn latency_grows_with_the_requests_in_flight() {
    let p = provider(saturated(2, 100));
    // Six requests, two served at a time for 100 ms each: three rounds at least,
    // however the requests happen to arrive.
    let (took, ok) = burst(&p.url(), 6);
    assert_eq!(ok, 6);
    assert!(took >= Duration::from_millis(300), "six requests on two slots took only {took:?}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // As many slots as requests: one round.
    p.set_fault(saturated(6, 100));
    let (took_wide, ok) = burst(&p.url(), 6);
    assert_eq!(ok, 6);
    assert!(took_wide >= Duration::from_millis(100), "{took_wide:?}");
    assert!(took_wide < Duration::from_secs(5), "took {took_wide:?}");
    assert_eq!(p.hits(), 12);
}

#[test]
fn a_fault_change_answers_the_waiting_requests_at_once() {
    // One slot held 60 s: without the change, the three would take minutes.
    let p = provider(saturated(1, 60_000));
    let url = p.url();
    let callers: Vec<_> = (0..3)
        .map(|_| {
            let (url, agent) = (url.clone(), agent(Duration::from_secs(30)));
            thread::spawn(move || agent.get(&url).call().map(|r| r.status().as_u16()).ok())
        })
        .collect();
    assert!(wait_until(Duration::from_secs(10), || p.in_flight() == 3), "in flight: {}", p.in_flight());
    let changed = Instant::now();
    p.set_fault(Fault::Healthy);
    for c in callers {
        assert_eq!(c.join().expect("a caller"), Some(200));
    }
    assert!(changed.elapsed() < Duration::from_secs(5), "answered {:?} after the change", changed.elapsed());
    // A handler counts its request out once it has written the answer and
    // returns, a moment after its caller has read it.
    assert!(wait_until(Duration::from_secs(5), || p.in_flight() == 0), "in flight: {}", p.in_flight());
}
