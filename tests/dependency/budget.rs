//! Request budgets: a caller's own deadline bounds each call form, and a
//! timeout it causes is not held against the provider.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use watertight::{
    Dependency, Error, Outcome,
    breaker::{BreakerConfig, State},
    retry::Retry,
};

fn hung_for(ctx: &watertight::CallContext) -> Result<(), std::io::Error> {
    std::thread::sleep(ctx.remaining() + Duration::from_millis(20));
    Ok(())
}

fn breaker() -> BreakerConfig {
    BreakerConfig::count_based(10).minimum_calls(3).failure_rate(50.0).open_for(Duration::from_secs(60))
}

#[test]
fn a_timeout_at_a_short_callers_deadline_is_not_a_provider_failure() {
    let dep =
        Dependency::builder("pricing").workers(4).queue(4).timeout(Duration::from_secs(5)).breaker(breaker());
    let dep = dep.build().unwrap();
    // 20 ms is under the 50 ms floor of the hang threshold: that the provider
    // has not answered yet says only that the caller is in a hurry. (A longer
    // cut-short run counts against it: tests/dependency/hang.rs.)
    for _ in 0..5 {
        let began = Instant::now();
        let r = dep.with().deadline(Instant::now() + Duration::from_millis(20)).call(hung_for);
        assert!(r.as_ref().is_err_and(Error::is_timeout), "{r:?}");
        assert!(began.elapsed() < Duration::from_millis(20 + 500), "waited {:?}", began.elapsed());
    }
    let m = dep.breaker().metrics();
    assert_eq!(dep.breaker().state(), State::Closed, "the caller's budget ran out, not the provider");
    assert_eq!((m.failed, m.ignored), (0, 5), "{m:?}");
    assert_eq!(dep.snapshot().calls.get(Outcome::TimedOut), 5, "still counted as timed out");

    // The same hung provider at the dependency's own (shorter) timeout is a failure.
    let own = Dependency::builder("pricing-own").workers(4).queue(4).timeout(Duration::from_millis(50));
    let own = own.breaker(breaker()).build().unwrap();
    for _ in 0..3 {
        let r = own.with().deadline(Instant::now() + Duration::from_secs(5)).call(hung_for);
        assert!(r.is_err());
    }
    assert_eq!(own.breaker().state(), State::Open, "timeouts at its own timeout open the breaker");
}

#[test]
fn a_spent_budget_is_rejected_before_the_provider_and_the_breaker() {
    let dep = Dependency::builder("spent").workers(1).breaker(breaker()).build().unwrap();
    let ran = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&ran);
    let r = dep.with().deadline(Instant::now()).call(move |_| {
        seen.fetch_add(1, Ordering::Relaxed);
        Ok::<_, std::io::Error>(())
    });
    assert_eq!(r.unwrap_err().outcome(), Outcome::DeadlineUnmeetable);
    assert_eq!(ran.load(Ordering::Relaxed), 0, "the provider was never asked");
    let m = dep.breaker().metrics();
    assert_eq!((m.successful, m.failed, m.ignored), (0, 0, 0), "the breaker never saw it: {m:?}");
}

#[test]
fn retries_never_start_nor_sleep_past_the_callers_deadline() {
    let dep = Dependency::builder("retrying")
        .workers(2)
        .queue(2)
        .timeout(Duration::from_secs(5))
        .breaker(BreakerConfig::default().enabled(false))
        .retry(
            Retry::builder()
                .max_attempts(10)
                .backoff(Duration::from_millis(40), Duration::from_millis(40))
                .budget(100.0, 100)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let started = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&started);
    let deadline = Instant::now() + Duration::from_millis(150);
    let r = dep.with().deadline(deadline).retry().call(move |ctx| {
        seen.lock().unwrap().push((Instant::now(), ctx.deadline()));
        Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
    });
    let finished = Instant::now();
    assert!(r.is_err());
    let late = finished.saturating_duration_since(deadline);
    assert!(late < Duration::from_millis(200), "returned {late:?} past the deadline");
    let started = started.lock().unwrap();
    assert!(started.len() > 1, "the budget left room for retries");
    for (at, attempt_deadline) in started.iter() {
        assert!(*at < deadline, "an attempt started {:?} past the caller's deadline", *at - deadline);
        assert!(*attempt_deadline <= deadline, "an attempt's deadline lay past the caller's");
    }
}
