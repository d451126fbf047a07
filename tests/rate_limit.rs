//! The rate limiter in real time: 16 threads against 1,000 permits a second
//! for 10 s, callers never waiting past their deadline, and a live
//! reconfiguration under load. (Its rules on a `ManualClock` are its unit
//! tests, in src/limit/rate.rs.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use watertight::limit::{RateLimit, RateLimiter};

const THREADS: usize = 16;

#[test]
fn sixteen_threads_get_the_rate_and_the_burst_and_never_wait_past_their_deadline() {
    const RUN: Duration = Duration::from_secs(10);
    const BURST: u32 = 50;
    let limiter =
        RateLimiter::new(RateLimit::per_second(1000.0).burst(BURST).max_wait(Duration::from_millis(20)))
            .unwrap();
    let admitted = Arc::new(AtomicU64::new(0));
    let late = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let (limiter, admitted, late, start) =
                (limiter.clone(), admitted.clone(), late.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let began = Instant::now();
                let mut refused = 0u64;
                while began.elapsed() < RUN {
                    // Budgets of 1-16 ms: some fit the wait, some do not.
                    let deadline = Instant::now() + Duration::from_millis(1 + i as u64);
                    match limiter.acquire(deadline) {
                        Ok(()) => {
                            // The wait was granted only if it fit the deadline; this
                            // leaves room for the sleep's own overshoot on a loaded machine.
                            if Instant::now() > deadline + Duration::from_millis(250) {
                                late.fetch_add(1, Ordering::Relaxed);
                            }
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            refused += 1;
                            // A refused caller is told when to come back; do not spin on it.
                            thread::sleep(Duration::from_micros(200));
                        }
                    }
                }
                refused
            })
        })
        .collect();
    start.wait();
    let refused: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let admitted = admitted.load(Ordering::Relaxed);
    let expected = 10_000.0 + f64::from(BURST);
    println!("admitted {admitted} in 10 s (expected {expected}), refused {refused}");
    assert!(
        (admitted as f64 - expected).abs() <= expected * 0.01,
        "admitted {admitted}, expected {expected} +- 1 %"
    );
    assert_eq!(late.load(Ordering::Relaxed), 0, "a caller got its permit past its deadline (+250 ms)");
    assert!(refused > 0, "the load was over the rate");
}

#[test]
fn reconfiguring_under_load_answers_every_call_once() {
    let limiter =
        RateLimiter::new(RateLimit::per_second(1000.0).burst(10).max_wait(Duration::from_millis(5))).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (limiter, stop, answered, start) =
                (limiter.clone(), stop.clone(), answered.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut calls = 0u64;
                let mut slowest = Duration::ZERO;
                let bound = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && Instant::now() < bound {
                    let asked = Instant::now();
                    let _ = limiter.acquire(asked + Duration::from_millis(10));
                    slowest = slowest.max(asked.elapsed());
                    calls += 1;
                    answered.fetch_add(1, Ordering::Relaxed);
                }
                (calls, slowest)
            })
        })
        .collect();
    start.wait();
    for per_second in [100.0, 1000.0, 100.0, 1000.0] {
        thread::sleep(Duration::from_millis(300));
        limiter
            .reconfigure(RateLimit::per_second(per_second).burst(10).max_wait(Duration::from_millis(5)))
            .unwrap();
    }
    thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let mut calls = 0;
    for t in threads {
        let (c, slowest) = t.join().unwrap();
        calls += c;
        // A caller waits at most max_wait (5 ms), plus scheduling noise.
        assert!(slowest < Duration::from_millis(500), "a call took {slowest:?}");
    }
    assert_eq!(calls, answered.load(Ordering::Relaxed), "every call answered exactly once");
    assert_eq!(limiter.config().rate(), 1000.0);
}

/// Through a `Dependency`: checked before the breaker, refused at once when
/// the wait would pass the caller's deadline or `max_wait`, counted under
/// its own label, and never recorded by the breaker.
#[test]
fn a_dependencys_rate_limit_refuses_at_once_and_is_never_recorded() {
    use watertight::{CallContext, Dependency, Error, Outcome, Rejection};
    let ok = |_: &CallContext| Ok::<_, std::io::Error>(());
    let dep = Dependency::builder("rated")
        .workers(2)
        // A permit every 500 ms: the detached call below comes well within
        // one interval of the waited call's permit, however loaded the machine.
        .rate_limit(RateLimit::per_second(2.0).max_wait(Duration::from_millis(800)))
        .build()
        .unwrap();
    dep.call(ok).expect("the first permit is free");
    // The next is 500 ms away: a caller with 200 ms left is refused at once
    // (well before its deadline), told when.
    let began = Instant::now();
    let err = dep.with().timeout(Duration::from_millis(200)).call(ok).unwrap_err();
    assert!(began.elapsed() < Duration::from_millis(150), "refused after {:?}", began.elapsed());
    match err {
        Error::Rejected { reason: Rejection::RateLimited, retry_after: Some(retry_after) } => {
            assert!(
                retry_after > Duration::ZERO && retry_after <= Duration::from_millis(500),
                "{retry_after:?}"
            )
        }
        other => panic!("expected RateLimited, got {other:?}"),
    }
    assert_eq!(
        (err.rejection(), err.outcome(), err.is_rejected()),
        (Some(Rejection::RateLimited), Outcome::RateLimited, true)
    );
    // One with time to wait waits for it (at most max_wait), then runs.
    let began = Instant::now();
    dep.with().timeout(Duration::from_secs(2)).call(ok).expect("waited for its permit");
    assert!(began.elapsed() < Duration::from_millis(1500), "{:?}", began.elapsed());
    // A detached call never waits.
    assert_eq!(dep.spawn(ok), Err(Rejection::RateLimited));
    let calls = dep.snapshot().calls;
    assert_eq!((calls.successful, calls.rate_limited), (2, 2), "{calls:?}");
    let m = dep.breaker().metrics();
    assert_eq!((m.successful, m.failed, m.ignored), (2, 0, 0), "the breaker never saw the refusals");
    // Off and on again live, with the same type the file uses.
    let mut config = dep.config();
    assert_eq!(config.rate_limit.map(|r| r.rate()), Some(2.0));
    config.rate_limit = None;
    dep.reconfigure(config.clone()).unwrap();
    for _ in 0..20 {
        dep.call(ok).expect("no rate limit");
    }
    config.rate_limit = Some(RateLimit::per_second(0.0));
    assert_eq!(dep.reconfigure(config).unwrap_err().field(), "rate_limit.per_second");
}
