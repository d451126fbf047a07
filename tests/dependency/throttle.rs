//! The adaptive throttler through a real dependency, against a loopback
//! provider that answers 503 to 60 % of the requests it gets: once the
//! window has filled, the provider gets only the share the throttler lets
//! through, and the rest are refused at once with `Rejection::Throttled`.
#![cfg(all(feature = "ureq", feature = "testing"))]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::{FakeProvider, Fault};
use watertight::http::WithDeadline;
use watertight::limit::Throttle;
use watertight::{Dependency, Error, ManualClock, Rejection, breaker::BreakerConfig};

/// Calls offered each second of the manual clock.
const PER_SECOND: u32 = 50;

/// How a stretch of calls ended.
#[derive(Debug, Default)]
struct Tally {
    offered: u64,
    ok: u64,
    failed: u64,
    throttled: u64,
    /// Requests the provider received.
    hits: u64,
}

/// Offers `seconds` of calls, `PER_SECOND` a second of `clock`.
fn offer(dep: &Dependency, provider: &FakeProvider, clock: &ManualClock, seconds: u32) -> Tally {
    let agent = support::agent(Duration::from_secs(10));
    let url = provider.url();
    let hits = provider.hits();
    let mut tally = Tally::default();
    for _ in 0..seconds * PER_SECOND {
        let (agent, url) = (agent.clone(), url.clone());
        tally.offered += 1;
        match dep.call(move |ctx| agent.get(&url).with_deadline(ctx).call().map(|_| ())) {
            Ok(()) => tally.ok += 1,
            Err(Error::Failed(ureq::Error::StatusCode(503))) => tally.failed += 1,
            Err(Error::Rejected { reason: Rejection::Throttled, .. }) => tally.throttled += 1,
            Err(other) => panic!("an answer that is not the provider's nor the throttler's: {other:?}"),
        }
        clock.advance(Duration::from_secs(1) / PER_SECOND);
    }
    tally.hits = provider.hits() - hits;
    tally
}

#[test]
fn the_provider_gets_about_k_times_what_it_accepts_of_the_calls_offered() {
    // Three requests in five, in turn, are answered 503.
    let served = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&served);
    let provider = FakeProvider::start("account", Fault::Healthy, move |_| {
        match count.fetch_add(1, Ordering::Relaxed) % 5 {
            0..=2 => (503, r#"{"error":"overloaded"}"#.to_owned()),
            _ => (200, "ok".to_owned()),
        }
    })
    .expect("bind a loopback port");
    let clock = ManualClock::new();
    let k = 1.1;
    let account = Dependency::builder("account")
        .workers(2)
        // Generous: a loopback call on a busy machine has taken 2.5 s.
        .timeout(Duration::from_secs(10))
        // The breaker would open at 60 % failures: off, to see the throttler alone.
        .breaker(BreakerConfig::default().enabled(false))
        .throttle(Throttle::new().k(k))
        .throttle_seed(40)
        .clock(clock.clone())
        .build()
        .expect("a valid dependency");

    // The first window (30 s) fills, then 30 s are measured.
    offer(&account, &provider, &clock, 30);
    let run = offer(&account, &provider, &clock, 30);
    let sent = run.hits as f64 / run.offered as f64;
    println!("k {k}, 40 % accepted: the provider got {sent:.3} of the calls offered: {run:?}");
    // Every call has one answer; the provider saw every call not throttled,
    // and accepted two in five of them.
    assert_eq!(run.ok + run.failed + run.throttled, run.offered, "{run:?}");
    assert_eq!(run.hits, run.offered - run.throttled, "{run:?}");
    assert!(run.ok.abs_diff(run.hits * 2 / 5) <= 1, "{run:?}");
    // It accepts 40 % of whatever it gets: of the calls offered, k x 40 % reach it
    // (0.44 at k = 1.1, where without the throttler every call would).
    assert!((0.40..=0.48).contains(&sent), "the provider got {sent:.3} of the calls offered: {run:?}");
    let counts = account.snapshot().calls;
    assert!(counts.throttled >= run.throttled, "{counts:?}");
    assert_eq!(counts.not_permitted, 0, "the breaker refused nothing");

    // Turned off live: every call reaches the provider again.
    let mut config = account.config();
    assert_eq!(config.throttle, Some(Throttle::new().k(k)));
    config.throttle = None;
    account.reconfigure(config).expect("a valid change");
    assert!(account.throttler().is_none());
    let off = offer(&account, &provider, &clock, 4);
    assert_eq!((off.throttled, off.hits), (0, off.offered), "{off:?}");
}

/// A request is an answer from the provider, or its silence past the
/// deadline; an accept is an answer the classifier does not call a failure.
/// Refusals (the throttler's own, the breaker's) are neither.
#[test]
fn only_what_the_provider_answered_is_counted() {
    let clock = ManualClock::new();
    let dep = Dependency::builder("counted")
        .workers(2)
        .timeout(Duration::from_secs(2))
        .breaker(BreakerConfig::count_based(100).minimum_calls(100))
        .throttle(Throttle::new().min_requests(0))
        .throttle_seed(1)
        .clock(clock.clone())
        .build()
        .expect("a valid dependency");
    let status = |code: u16| {
        dep.with()
            .classify(|r: &Result<(), u16>| match r {
                Ok(()) => watertight::Verdict::Success,
                Err(code) if *code < 500 => watertight::Verdict::Ignore,
                Err(_) => watertight::Verdict::Failure,
            })
            .call(move |_| if code == 200 { Ok(()) } else { Err(code) })
    };
    let window = || {
        let stats = dep.throttler().expect("a throttler").stats();
        (stats.requests, stats.accepts)
    };
    assert!(status(200).is_ok());
    assert!(matches!(status(404), Err(Error::Failed(404))));
    assert_eq!(window(), (2, 2), "a success and an ignored 4xx are accepts");
    assert!(matches!(status(503), Err(Error::Failed(503))));
    // A timeout at the caller's deadline (the dependency's own is 2 s, so
    // that no other call times out on a busy machine).
    let late = dep.with().timeout(Duration::from_millis(50)).call(|ctx| {
        std::thread::sleep(ctx.remaining() + Duration::from_millis(20));
        Ok::<_, std::io::Error>(())
    });
    assert!(matches!(late, Err(Error::Timeout { .. })), "{late:?}");
    assert_eq!(window(), (4, 2), "a failure and a timeout are requests, not accepts");

    // The breaker's refusals are no requests.
    dep.breaker().transition_to(watertight::breaker::State::ForcedOpen);
    assert!(matches!(status(200), Err(Error::Rejected { reason: Rejection::NotPermitted, .. })));
    assert_eq!(window(), (4, 2));
    dep.breaker().transition_to(watertight::breaker::State::Closed);

    // Failures until p = (24 - 2 x 2) / 25 = 0.8. The throttler's refusals
    // are no requests either.
    for _ in 0..1_000 {
        if window().0 == 24 {
            break;
        }
        assert!(status(503).is_err());
    }
    assert_eq!(window(), (24, 2));
    assert_eq!(dep.throttler().unwrap().stats().refuse_probability, 0.8);
    let before = dep.snapshot().calls.throttled;
    let (requests, accepts) = window();
    let throttled = (0..200)
        .filter(|_| matches!(status(200), Err(Error::Rejected { reason: Rejection::Throttled, .. })))
        .count() as u64;
    let (after, accepted_after) = window();
    assert_eq!(after - requests, 200 - throttled, "only calls not throttled are requests");
    assert_eq!(accepted_after - accepts, 200 - throttled);
    assert!(throttled > 0, "at p = 0.8 the throttler refuses");
    assert_eq!(dep.snapshot().calls.throttled - before, throttled, "each counted once, as `throttled`");
}
