//! The ureq integration end to end: real providers on loopback, a real Dependency
//! (pool, breaker, deadline, retry), and ureq requests bounded by the call's deadline.
#![cfg(all(feature = "ureq", feature = "testing"))]
#![cfg(feature = "ureq")]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use support::{FakeProvider, Fault, agent, agent_status_ok, median, provider, wait_until};
use watertight::http::{WithDeadline, classify_response};
use watertight::{
    CallContext, Dependency, Error, Rejection,
    breaker::{BreakerConfig, State},
    retry::Retry,
};

const LONG: Duration = Duration::from_secs(5);

/// One GET to `url`, bounded by the call's deadline.
fn fetch(agent: &ureq::Agent, url: &str, ctx: &CallContext) -> Result<String, ureq::Error> {
    agent.get(url).with_deadline(ctx).call()?.body_mut().read_to_string()
}

/// A breaker that opens once `n` calls are in its window and half or more failed,
/// and stays open for the whole test.
fn breaker(n: u32) -> BreakerConfig {
    BreakerConfig::count_based(n).minimum_calls(n).failure_rate(50.0).open_for(Duration::from_secs(60))
}

#[test]
fn a_hung_provider_frees_the_workers_at_the_deadline_and_the_breaker_cuts_it_off() {
    let hung = provider(Fault::Hang);
    let dep = Dependency::builder("hung")
        .workers(4)
        .queue(4)
        .timeout(Duration::from_millis(200))
        .breaker(breaker(4))
        .retry(Retry::disabled())
        .build()
        .unwrap();
    // The agent has no timeout of its own: only `with_deadline` bounds the requests.
    let agent = ureq::Agent::new_with_defaults();
    let url = hung.url();

    // 50 calls from 8 threads that start together, as many as workers and queue slots:
    // the first ones reach the hung provider or wait in the queue until their deadline,
    // the rest are turned away while the workers are busy, then by the breaker.
    let callers = 8;
    let left = Arc::new(AtomicUsize::new(50));
    let start = Arc::new(Barrier::new(callers));
    let threads: Vec<_> = (0..callers)
        .map(|_| {
            let (dep, agent, url, left, start) =
                (dep.clone(), agent.clone(), url.clone(), left.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut slowest = Duration::ZERO;
                let mut timed_out = 0;
                while left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                    let (agent, url) = (agent.clone(), url.clone());
                    let began = Instant::now();
                    let result = dep.call(move |ctx| fetch(&agent, &url, ctx));
                    slowest = slowest.max(began.elapsed());
                    match result {
                        Err(Error::Timeout { .. }) | Err(Error::Failed(ureq::Error::Timeout(_))) => {
                            timed_out += 1
                        }
                        Err(Error::Rejected { .. }) => {}
                        other => panic!("a hung provider gave {other:?}"),
                    }
                }
                (slowest, timed_out)
            })
        })
        .collect();
    let results: Vec<(Duration, u32)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let all_returned = Instant::now();

    let slowest = results.iter().map(|r| r.0).max().unwrap();
    assert!(slowest < Duration::from_millis(700), "a call took {slowest:?} under a 200 ms deadline");
    assert!(results.iter().map(|r| r.1).sum::<u32>() >= 4, "the first calls timed out");

    // The provider still holds every request it got, yet our workers are free: the
    // request's own timeout released them, not the provider.
    assert!(
        wait_until(Duration::from_millis(500), || dep.pool().unwrap().stats().busy == 0),
        "workers still busy {:?} after the last call returned: {:?}",
        all_returned.elapsed(),
        dep.pool().unwrap().stats()
    );
    let freed = all_returned.elapsed();
    let timed_out: u32 = results.iter().map(|r| r.1).sum();
    eprintln!(
        "hung provider: 50 calls, slowest {slowest:?}, {timed_out} timed out, workers free {freed:?} \
         after the last call returned, provider still holding {} requests",
        hung.in_flight()
    );
    assert!(hung.in_flight() > 0, "the provider still hangs");
    assert_eq!(dep.breaker().state(), State::Open);

    // Open: rejected at once, without a worker and without reaching the provider.
    let hits = hung.hits();
    let mut took = Vec::new();
    for _ in 0..200 {
        let began = Instant::now();
        let result = dep.call(|_| -> Result<(), ureq::Error> { panic!("an open breaker ran the job") });
        took.push(began.elapsed());
        assert!(matches!(result, Err(Error::Rejected { reason: Rejection::NotPermitted, .. })), "{result:?}");
    }
    let worst = *took.iter().max().unwrap();
    let median = median(&mut took);
    eprintln!("open breaker: 200 rejections, median {median:?}, worst {worst:?}");
    // The claim is well under 1 ms; 5 ms leaves room for a loaded machine.
    assert!(median < Duration::from_millis(5), "median rejection took {median:?}");
    assert_eq!(hung.hits(), hits, "a rejected call reached the provider");
}

#[test]
fn client_errors_never_open_the_breaker_and_two_503s_do() {
    let p = provider(Fault::Error(404));
    let dep = Dependency::builder("account")
        .workers(2)
        .timeout(LONG)
        .breaker(breaker(2))
        .retry(Retry::disabled())
        .build()
        .unwrap();
    let call = |dep: &Dependency| {
        let (agent, url) = (agent(LONG), p.url());
        dep.call(move |ctx| fetch(&agent, &url, ctx))
    };
    for status in [404, 429, 400, 401, 403, 409] {
        p.set_fault(Fault::Error(status));
        for _ in 0..10 {
            let result = call(&dep);
            assert!(matches!(result, Err(Error::Failed(ureq::Error::StatusCode(s))) if s == status));
        }
    }
    assert_eq!(dep.breaker().state(), State::Closed, "{:?}", dep.breaker().metrics());
    assert_eq!(dep.breaker().metrics().failed, 0);
    assert_eq!(dep.breaker().metrics().ignored, 60);

    p.set_fault(Fault::Error(503));
    assert!(matches!(call(&dep), Err(Error::Failed(ureq::Error::StatusCode(503)))));
    assert!(matches!(call(&dep), Err(Error::Failed(ureq::Error::StatusCode(503)))));
    assert_eq!(dep.breaker().state(), State::Open);
    assert_eq!(p.hits(), 62);
}

#[test]
fn with_status_as_responses_classify_response_applies_the_same_table() {
    let p = provider(Fault::Healthy);
    let dep = Dependency::builder("quota").timeout(LONG).breaker(breaker(2)).build().unwrap();
    let call = |dep: &Dependency| {
        let (agent, url) = (agent_status_ok(LONG), p.url());
        dep.with().classify(classify_response).call(move |ctx| agent.get(&url).with_deadline(ctx).call())
    };
    assert_eq!(call(&dep).unwrap().status(), 200);
    p.set_fault(Fault::Error(429));
    for _ in 0..10 {
        assert_eq!(call(&dep).unwrap().status(), 429);
    }
    assert_eq!(dep.breaker().state(), State::Closed, "429s are ignored");
    // The window now holds the success and this failure: 50 %, the threshold.
    p.set_fault(Fault::Error(500));
    assert_eq!(call(&dep).unwrap().status(), 500);
    assert_eq!(dep.breaker().state(), State::Open);
    let m = dep.breaker().metrics();
    assert_eq!((m.successful, m.failed, m.ignored), (1, 1, 10), "{m:?}");
}

#[test]
fn transport_failures_count_as_failures_and_open_the_breaker() {
    for fault in [Fault::Refuse, Fault::Reset, Fault::Close, Fault::Garbage] {
        let p = provider(fault);
        let dep = Dependency::builder("flaky").timeout(LONG).breaker(breaker(2)).build().unwrap();
        for _ in 0..2 {
            let (agent, url) = (agent(LONG), p.url());
            let result = dep.call(move |ctx| fetch(&agent, &url, ctx));
            assert!(matches!(result, Err(Error::Failed(_))), "{fault}: {result:?}");
        }
        assert_eq!(dep.breaker().state(), State::Open, "{fault}");
        assert_eq!(dep.breaker().metrics().failed, 2, "{fault}");
    }
}

#[test]
fn a_503_then_a_200_succeeds_on_the_second_attempt() {
    let p = provider(Fault::Healthy);
    p.script([Fault::Error(503)]);
    let dep = Dependency::builder("retrying")
        .timeout(LONG)
        .retry(Retry::builder().backoff(Duration::from_millis(1), Duration::from_millis(5)).build().unwrap())
        .build()
        .unwrap();
    let (agent, url) = (agent(LONG), p.url());
    let attempts = Arc::new(AtomicUsize::new(0));
    let seen = attempts.clone();
    let result = dep.with().retry().call(move |ctx| {
        seen.store(ctx.attempt() as usize, Ordering::SeqCst);
        fetch(&agent, &url, ctx)
    });
    assert_eq!(result.unwrap(), "ok");
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(p.hits(), 2);
}

#[test]
fn an_open_breaker_and_a_400_are_never_retried() {
    let p = provider(Fault::Error(400));
    let dep = Dependency::builder("strict")
        .timeout(LONG)
        .breaker(breaker(2))
        .retry(
            Retry::builder()
                .max_attempts(5)
                .backoff(Duration::from_millis(1), Duration::from_millis(5))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let call = |dep: &Dependency| {
        let (agent, url) = (agent(LONG), p.url());
        dep.with().retry().call(move |ctx| fetch(&agent, &url, ctx))
    };
    assert!(matches!(call(&dep), Err(Error::Failed(ureq::Error::StatusCode(400)))));
    assert_eq!(p.hits(), 1, "a 400 was retried");

    dep.breaker().transition_to(State::Open);
    p.set_fault(Fault::Error(503));
    assert!(matches!(call(&dep), Err(Error::Rejected { reason: Rejection::NotPermitted, .. })));
    assert_eq!(p.hits(), 1, "an open breaker was retried into the provider");
}

#[test]
fn retries_stay_within_the_budget_under_a_permanent_failure() {
    let p = provider(Fault::Error(503));
    let (percent, min_per_sec) = (20.0, 1);
    let dep = Dependency::builder("down")
        .timeout(LONG)
        .breaker(BreakerConfig::default().enabled(false))
        .retry(
            Retry::builder()
                .max_attempts(3)
                .backoff(Duration::ZERO, Duration::from_millis(1))
                .budget(percent, min_per_sec)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let calls = 100;
    let started = Instant::now();
    for _ in 0..calls {
        let (agent, url) = (agent(LONG), p.url());
        let result = dep.with().retry().call(move |ctx| fetch(&agent, &url, ctx));
        assert!(matches!(result, Err(Error::Failed(ureq::Error::StatusCode(503)))));
    }
    // The floor: `min_per_sec` for every second of the budget's window, counted
    // generously (the window, or the test's whole run if longer).
    let window = Retry::BUDGET_WINDOW.max(started.elapsed()).as_secs() + 1;
    let bound = calls + (calls as f64 * percent / 100.0).ceil() as u64 + min_per_sec as u64 * window;
    let hits = p.hits();
    eprintln!("{calls} calls, 3 attempts allowed each, {hits} provider hits (bound {bound})");
    assert!(hits <= bound, "{hits} hits for {calls} calls: the budget let too many retries through");
    assert!(hits > calls, "no retry at all: the budget should allow some");
}

#[test]
fn an_expired_context_times_out_at_once_without_connecting() {
    let p = provider(Fault::Healthy);
    let dep = Dependency::builder("late").workers(1).timeout(Duration::from_millis(50)).build().unwrap();
    let (agent, url) = (agent(LONG), p.url());
    let (tx, rx) = mpsc::channel();
    // The job outlives its deadline on purpose, then makes the request; the result
    // travels by channel because the caller has stopped waiting by then.
    let result = dep.call(move |ctx| -> Result<(), ureq::Error> {
        while !ctx.remaining().is_zero() {
            thread::sleep(Duration::from_millis(5));
        }
        let began = Instant::now();
        let outcome = agent.get(&url).with_deadline(ctx).call().map(|_| ());
        tx.send((outcome, began.elapsed())).unwrap();
        // Outlive the caller's wait by far, so that even a caller woken late on a
        // loaded machine finds no answer at its deadline.
        thread::sleep(Duration::from_millis(500));
        Ok(())
    });
    assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
    let (outcome, took) = rx.recv_timeout(LONG).expect("the job ran");
    assert!(matches!(outcome, Err(ureq::Error::Timeout(ureq::Timeout::Global))), "{outcome:?}");
    assert!(took < Duration::from_millis(50), "an expired request took {took:?}");
    assert_eq!(p.hits(), 0, "an expired request reached the provider");
}

#[test]
fn a_trickling_provider_is_cut_at_the_deadline() {
    // Each byte comes well within any per-read timeout; only the whole-exchange bound
    // that `with_deadline` sets ends it.
    let p =
        FakeProvider::start("trickle", Fault::Trickle(Duration::from_millis(20)), |_| (200, "x".repeat(200)))
            .unwrap();
    let dep = Dependency::builder("trickle").timeout(Duration::from_millis(300)).build().unwrap();
    let (agent, url) = (ureq::Agent::new_with_defaults(), p.url());
    let began = Instant::now();
    let result = dep.call(move |ctx| fetch(&agent, &url, ctx));
    assert!(result.is_err(), "{result:?}");
    assert!(began.elapsed() < Duration::from_millis(1000));
    assert!(wait_until(LONG, || dep.pool().unwrap().stats().busy == 0), "the worker was not freed");
    assert_eq!(dep.breaker().metrics().failed, 1);
}
