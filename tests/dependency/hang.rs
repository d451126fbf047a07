//! A hung provider is caught within one timeout, whatever the breaker's
//! window held and whatever deadlines the callers bring; waiting for room
//! never takes more than one request thread per worker; retry never sleeps
//! into a rejection. Against real hung loopback providers, with real ureq
//! calls under the deadline.
#![cfg(all(feature = "ureq", feature = "testing"))]

use crate::support;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use support::{Fault, provider};
use watertight::http::WithDeadline;
use watertight::{
    CallContext, Dependency, Error, Outcome, Registry, Rejection,
    breaker::{BreakerConfig, State},
    retry::Retry,
};

/// One GET of the provider through `dep`, under `deadline` if any.
fn get(dep: &Dependency, url: &str, deadline: Option<Instant>) -> Result<(), Error<ureq::Error>> {
    let agent = support::agent(Duration::from_secs(30));
    let url = url.to_owned();
    let job = move |ctx: &CallContext| agent.get(&url).with_deadline(ctx).call().map(|_| ());
    match deadline {
        Some(d) => dep.with().deadline(d).call(job),
        None => dep.call(job),
    }
}

/// The small service of the report: timeout 5 s, every caller with a 300 ms
/// budget, a provider hung from the start (nothing learned about it).
#[test]
fn short_budgets_open_the_breaker_on_a_provider_hung_from_the_start() {
    let hung = provider(Fault::Hang);
    let dep = Dependency::builder("budgets")
        .workers(4)
        .timeout(Duration::from_secs(5))
        .breaker(BreakerConfig::count_based(20).minimum_calls(10))
        .build()
        .unwrap();
    let mut calls = 0;
    while dep.breaker().state() == State::Closed && calls < 12 {
        let began = Instant::now();
        let err = get(&dep, &hung.url(), Some(began + Duration::from_millis(300))).unwrap_err();
        assert_eq!(err.outcome(), Outcome::TimedOut, "call {calls}: {err}");
        assert!(began.elapsed() < Duration::from_secs(2), "a 300 ms budget took {:?}", began.elapsed());
        calls += 1;
    }
    assert_eq!(dep.breaker().state(), State::Open, "still closed after {calls} calls");
    assert_eq!(calls, 10, "the tenth cut-short call is the tenth failure of a window of ten");
    let m = dep.breaker().metrics();
    assert_eq!((m.failed, m.ignored), (10, 0), "{m:?}");
    // Open: refused at once, the provider not asked again.
    let hits = hung.hits();
    let began = Instant::now();
    let err = get(&dep, &hung.url(), Some(began + Duration::from_millis(300))).unwrap_err();
    assert_eq!(err.rejection(), Some(Rejection::NotPermitted));
    assert!(began.elapsed() < Duration::from_millis(100), "{:?}", began.elapsed());
    assert_eq!(hung.hits(), hits);
}

/// The same after a healthy period has filled the window with successes:
/// the provider's learned latency (about a millisecond) is far below what
/// each cut-short attempt ran.
#[test]
fn short_budgets_open_a_window_full_of_successes() {
    let p = provider(Fault::Healthy);
    let dep = Dependency::builder("learned")
        .workers(4)
        .timeout(Duration::from_secs(5))
        .breaker(BreakerConfig::count_based(20).minimum_calls(10))
        .build()
        .unwrap();
    for _ in 0..20 {
        get(&dep, &p.url(), Some(Instant::now() + Duration::from_millis(300))).expect("healthy");
    }
    p.set_fault(Fault::Hang);
    let mut calls = 0;
    while dep.breaker().state() == State::Closed && calls < 12 {
        let err = get(&dep, &p.url(), Some(Instant::now() + Duration::from_millis(300))).unwrap_err();
        assert_eq!(err.outcome(), Outcome::TimedOut);
        calls += 1;
    }
    assert_eq!(dep.breaker().state(), State::Open, "still closed after {calls} hung calls");
    assert_eq!(calls, 10, "10 failures among 20 calls: 50 %");
}

/// The rule stays honest: a provider known to need 150 ms, called by
/// callers who give it only 60 ms, is not failing; their budgets are just
/// too short for it. Its breaker records those timeouts as ignored.
#[test]
fn a_budget_shorter_than_the_providers_normal_latency_is_not_held_against_it() {
    let p = provider(Fault::Slow(Duration::from_millis(150)));
    let dep = Dependency::builder("honest")
        .workers(2)
        .timeout(Duration::from_secs(2))
        .breaker(BreakerConfig::count_based(10).minimum_calls(5))
        .build()
        .unwrap();
    for _ in 0..5 {
        get(&dep, &p.url(), None).expect("a slow but healthy provider");
    }
    for _ in 0..10 {
        let err = get(&dep, &p.url(), Some(Instant::now() + Duration::from_millis(60))).unwrap_err();
        assert_eq!(err.outcome(), Outcome::TimedOut, "{err:?}");
    }
    let m = dep.breaker().metrics();
    assert_eq!(m.state, State::Closed, "{m:?}");
    assert_eq!((m.successful, m.failed, m.ignored), (5, 0, 10), "{m:?}");
}

/// The job's own timeout (ureq's, from `with_deadline`) and the caller's fire
/// at the same instant: whichever comes first, the attempt is one timeout,
/// cut short by a caller in a hurry, never a failure of the provider. 500
/// calls with 60 ms budgets, 10 at a time, to a provider that needs 150 ms.
#[test]
fn a_jobs_own_timeout_at_the_deadline_is_the_callers_timeout() {
    let p = provider(Fault::Slow(Duration::from_millis(150)));
    // Twice the callers: an attempt's worker is freed a moment after its
    // caller has its answer, and the caller's next call must not find the
    // pool full (no queue).
    let dep = Dependency::builder("hurried")
        .workers(20)
        .timeout(Duration::from_secs(2))
        .breaker(BreakerConfig::count_based(20).minimum_calls(5))
        .build()
        .unwrap();
    for _ in 0..5 {
        get(&dep, &p.url(), None).expect("a slow but healthy provider");
    }
    let start = Arc::new(Barrier::new(10));
    let callers: Vec<_> = (0..10)
        .map(|_| {
            let (dep, url, start) = (dep.clone(), p.url(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                (0..50)
                    .map(|_| {
                        get(&dep, &url, Some(Instant::now() + Duration::from_millis(60)))
                            .unwrap_err()
                            .outcome()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let outcomes: Vec<Outcome> = callers.into_iter().flat_map(|c| c.join().unwrap()).collect();
    assert_eq!(outcomes.len(), 500);
    let other: Vec<_> = outcomes.iter().filter(|o| **o != Outcome::TimedOut).collect();
    assert!(other.is_empty(), "{} of 500 were not timeouts: {other:?}", other.len());
    let m = dep.breaker().metrics();
    assert_eq!(m.state, State::Closed, "{m:?}");
    assert_eq!((m.successful, m.failed, m.ignored), (5, 0, 500), "{m:?}");
}

/// Seed 001 after a healthy period: a count window full of successes that
/// one wave of hung calls (workers + queue) cannot tip by its rate. The pool
/// itself is the evidence: once every worker has been stuck past the stall
/// threshold (a quarter of the timeout here), the next caller finding no
/// room opens the breaker, long before the 3 s timeout.
#[test]
fn a_pool_whose_every_worker_is_stuck_opens_its_breaker_within_the_timeout() {
    let p = provider(Fault::Healthy);
    let dep = Dependency::builder("stuck")
        .workers(4)
        .queue(2)
        .max_wait(Duration::from_millis(100))
        .timeout(Duration::from_secs(3))
        .breaker(BreakerConfig::count_based(20).minimum_calls(10))
        .build()
        .unwrap();
    for _ in 0..20 {
        get(&dep, &p.url(), None).expect("healthy");
    }
    p.set_fault(Fault::Hang);
    let hang_began = Instant::now();
    // One caller every 10 ms, as traffic would come; each on its own thread.
    let mut callers = Vec::new();
    let mut opened_after = None;
    for _ in 0..200 {
        let (d, url) = (dep.clone(), p.url());
        callers.push(thread::spawn(move || {
            let began = Instant::now();
            let outcome = get(&d, &url, None).map_err(|e| e.outcome());
            (outcome, began.elapsed())
        }));
        thread::sleep(Duration::from_millis(10));
        if dep.breaker().state() == State::Open {
            opened_after = Some(hang_began.elapsed());
            break;
        }
    }
    let opened_after = opened_after.expect("the breaker never opened");
    assert!(opened_after < Duration::from_millis(1500), "opened {opened_after:?} into the hang");
    let results: Vec<_> = callers.into_iter().map(|c| c.join().unwrap()).collect();
    // The held ones timed out at 3 s; every other answer came quickly.
    let held = results.iter().filter(|(o, _)| *o == Err(Outcome::TimedOut)).count();
    assert!(held <= 6, "{held} callers held for the timeout, more than workers + queue");
    for (outcome, took) in &results {
        if *outcome != Err(Outcome::TimedOut) {
            assert!(*took < Duration::from_millis(600), "{outcome:?} after {took:?}");
        }
    }
    // Every call has exactly one outcome, and none of the refusals was recorded.
    let snap = dep.snapshot();
    assert_eq!(snap.calls.total(), 20 + results.len() as u64, "{:?}", snap.calls);
    assert_eq!(dep.breaker().metrics().failed, held as u64);
}

/// Waiting for room holds request threads too, so nobody waits in a line
/// that does not move: once every worker has been inside its call for a few
/// normal latencies with none finished, callers are refused and the waiters
/// leave, long before `max_wait` (700 ms here).
#[test]
fn nobody_waits_long_for_room_while_every_worker_is_stuck() {
    let hung = provider(Fault::Healthy);
    let dep = Dependency::builder("waiters")
        .workers(2)
        .max_wait(Duration::from_millis(700))
        .timeout(Duration::from_secs(8))
        .breaker(BreakerConfig::default().enabled(false))
        .build()
        .unwrap();
    // A provider in service, then hung: its normal latency is known.
    for _ in 0..5 {
        get(&dep, &hung.url(), None).expect("healthy");
    }
    hung.set_fault(Fault::Hang);
    let holders: Vec<_> = (0..2)
        .map(|_| {
            let (dep, url) = (dep.clone(), hung.url());
            thread::spawn(move || get(&dep, &url, Some(Instant::now() + Duration::from_secs(5))))
        })
        .collect();
    assert!(
        support::wait_until(Duration::from_secs(5), || hung.in_flight() == 2),
        "the two workers never got busy"
    );
    // Callers arriving while the workers have only just got stuck: they may
    // join the line, and leave it once it has not moved for a few normal
    // latencies (here the 20 ms floor: 60 ms).
    let start = Arc::new(Barrier::new(6));
    let callers: Vec<_> = (0..6)
        .map(|_| {
            let (dep, url, start) = (dep.clone(), hung.url(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                let began = Instant::now();
                let err = get(&dep, &url, None).unwrap_err();
                (err.rejection(), began.elapsed())
            })
        })
        .collect();
    let results: Vec<_> = callers.into_iter().map(|c| c.join().unwrap()).collect();
    assert!(results.iter().all(|(r, _)| *r == Some(Rejection::QueueFull)), "{results:?}");
    assert!(results.iter().all(|(_, took)| *took < Duration::from_millis(450)), "{results:?}");
    // Later callers are refused at once: the line has not moved for long.
    for _ in 0..5 {
        let began = Instant::now();
        assert_eq!(get(&dep, &hung.url(), None).unwrap_err().rejection(), Some(Rejection::QueueFull));
        assert!(began.elapsed() < Duration::from_millis(100), "waited {:?} in a stuck line", began.elapsed());
    }
    for h in holders {
        assert_eq!(h.join().unwrap().unwrap_err().outcome(), Outcome::TimedOut);
    }
    assert_eq!(dep.snapshot().pool.waiting, 0);
}

/// A provider that was fast hangs: its normal latency is a few
/// milliseconds, so a caller that finds every worker stuck leaves the line
/// within tens of milliseconds (the least is 60 ms: three times the 20 ms
/// floor), not after `max_wait` (2 s), and later ones at once (here with
/// the breaker disabled, so that the refusals are the pool's). The bound
/// is generous: a loaded machine stretches the normal latency.
#[test]
fn a_fast_providers_stuck_line_is_left_within_tens_of_milliseconds() {
    let p = provider(Fault::Healthy);
    let dep = Dependency::builder("no-wait")
        .workers(1)
        .max_wait(Duration::from_secs(2))
        .timeout(Duration::from_secs(20))
        .breaker(BreakerConfig::default().enabled(false))
        .build()
        .unwrap();
    // Twenty healthy calls: the normal latency is smoothed (srtt + 4 x
    // rttvar), and a first call slowed by a loaded machine (a cold worker,
    // a new connection) weighs on it for several calls after.
    for _ in 0..20 {
        get(&dep, &p.url(), None).expect("healthy");
    }
    p.set_fault(Fault::Hang);
    // The holder keeps the one worker for far longer than the refusals
    // below can take, however loaded the machine (a loaded machine
    // stretches the normal latency, and each refusal with it).
    let holder = {
        let (dep, url) = (dep.clone(), p.url());
        thread::spawn(move || get(&dep, &url, Some(Instant::now() + Duration::from_secs(15))))
    };
    assert!(support::wait_until(Duration::from_secs(5), || p.in_flight() == 1), "the worker never got busy");
    for _ in 0..5 {
        let began = Instant::now();
        assert_eq!(get(&dep, &p.url(), None).unwrap_err().rejection(), Some(Rejection::QueueFull));
        assert!(
            began.elapsed() < Duration::from_millis(700),
            "waited {:?} for a stuck worker",
            began.elapsed()
        );
    }
    // The hang ends (its connection closed): the holder gets its failure.
    p.set_fault(Fault::Healthy);
    assert!(holder.join().unwrap().is_err(), "the held call was never answered by the provider");
}

/// Retry asks before it sleeps: the attempt that opens the breaker is the
/// last one, and its own error is the answer, within one backoff.
#[test]
fn a_retry_never_sleeps_into_the_breaker_its_own_attempt_opened() {
    let dep = Dependency::builder("retry")
        .workers(1)
        .timeout(Duration::from_secs(2))
        .breaker(BreakerConfig::count_based(2).minimum_calls(2))
        .retry(
            Retry::builder()
                .max_attempts(3)
                .backoff(Duration::from_millis(200), Duration::from_secs(1))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let began = Instant::now();
    let err = dep
        .with()
        .retry()
        .call(|_: &CallContext| Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset)))
        .unwrap_err();
    let took = began.elapsed();
    match &err {
        Error::Failed(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        other => panic!("expected the provider's own error, got {other:?}"),
    }
    // One backoff (at most 200 ms) between attempts 1 and 2, none after 2.
    assert!(took < Duration::from_millis(450), "{took:?}");
    assert_eq!(dep.breaker().state(), State::Open);
    let calls = dep.snapshot().calls;
    assert_eq!((calls.failed, calls.not_permitted, calls.retried), (2, 0, 1), "{calls:?}");
}

/// `check_capacity` says when a breaker opens by its rates only after more
/// failures than the pool holds (a hang is then cut by the stuck rule), and
/// counts the waiters.
#[test]
fn capacity_warns_that_the_stall_rule_cuts_a_hang_the_rates_cannot_and_of_waiters() {
    let registry = Registry::new();
    registry
        .register(
            Dependency::builder("fraud")
                .workers(6)
                .queue(2)
                .breaker(BreakerConfig::count_based(20).minimum_calls(8))
                .build()
                .unwrap(),
        )
        .unwrap();
    registry
        .register(
            Dependency::builder("account")
                .workers(5)
                .max_wait(Duration::from_millis(100))
                .breaker(BreakerConfig::time_based(30).minimum_calls(4))
                .build()
                .unwrap(),
        )
        .unwrap();
    let report = registry.check_capacity(10).unwrap();
    let fraud = &report.entries[0];
    assert_eq!((fraud.hold, fraud.waiters, fraud.failures_to_open), (8, 0, 10));
    let account = &report.entries[1];
    assert_eq!((account.hold, account.waiters, account.failures_to_open), (5, 5, 4));
    let warnings = report.warnings();
    // What will happen, not what will not: the rates need more failures than the pool holds, so
    // the stuck rule cuts a hang.
    let fraud_warning = "`fraud`: its breaker opens by its rates only after 10 failures, more than the 8 calls \
                         it can hold (workers 6 + queue 2): a hang is cut by the stuck rule instead, which opens \
                         it once every worker has been inside one call for 250ms (the stuck threshold: a quarter of the \
                         timeout 1s; once the provider has answered, twice its normal latency if that is longer)";
    assert!(warnings.iter().any(|w| w.contains(fraud_warning)), "{warnings:?}");
    assert!(!warnings.iter().any(|w| w.contains("cannot open")), "{warnings:?}");
    assert!(
        warnings.iter().any(|w| w.contains("`account` can hold 10 of 10 request threads with its 5 waiters"))
    );
    assert!(!warnings.iter().any(|w| w.contains("`account`: its breaker")), "{warnings:?}");
    // The start-up table shows them too.
    assert!(
        report.to_string().contains("warning: dependency `fraud`: its breaker opens by its rates only after")
    );
}
