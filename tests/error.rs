//! One call error: every way a call can end is one `Result<T, Error<E>>`,
//! and the outcome the error names is the one the dependency counted for it.
//! Real calls on real worker pools; no clock is faked (the breaker is forced
//! open, the rate limit refuses by its burst, the timeout is a job held
//! until its caller has left).

use std::io;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use watertight::breaker::State;
use watertight::limit::RateLimit;
use watertight::pool::Pool;
use watertight::{CallContext, Dependency, Error, Outcome, Rejection};

/// Makes one call and returns its answer with the one outcome it was
/// counted under (panics unless exactly one count moved).
fn counted<T>(
    dep: &Dependency,
    call: impl FnOnce(&Dependency) -> Result<T, Error<io::Error>>,
) -> (Result<T, Error<io::Error>>, Outcome) {
    let before = dep.snapshot().calls;
    let answer = call(dep);
    let moved = dep.snapshot().calls.since(&before);
    assert_eq!(moved.total(), 1, "one call, one count: {moved:?}");
    let outcome = Outcome::ALL.into_iter().find(|o| moved.get(*o) == 1).expect("the counted outcome");
    (answer, outcome)
}

#[test]
fn each_error_names_the_outcome_it_was_counted_under() {
    let dep =
        Dependency::builder("fraud").workers(2).queue(2).timeout(Duration::from_secs(5)).build().unwrap();

    let (ok, outcome) = counted(&dep, |d| d.call(|_: &CallContext| Ok::<_, io::Error>(7)));
    assert_eq!((ok.unwrap(), outcome), (7, Outcome::Successful));

    let (failed, outcome) =
        counted(&dep, |d| d.call(|_: &CallContext| Err::<(), _>(io::ErrorKind::ConnectionReset.into())));
    let failed = failed.unwrap_err();
    assert!(matches!(failed, Error::Failed(_)), "{failed:?}");
    assert_eq!(
        (failed.outcome(), failed.classified_outcome(), outcome),
        (Outcome::Failed, Outcome::Failed, Outcome::Failed)
    );
    assert!(failed.is_transient() && !failed.is_rejected(), "a provider's fault may pass");

    // A job's error its classifier ignores: `failed` for any `E`, `ignored` as counted.
    let (ignored, outcome) =
        counted(&dep, |d| d.call(|_: &CallContext| Err::<(), _>(io::ErrorKind::InvalidInput.into())));
    let ignored = ignored.unwrap_err();
    assert_eq!(
        (ignored.outcome(), ignored.classified_outcome(), outcome),
        (Outcome::Failed, Outcome::Ignored, Outcome::Ignored)
    );
    assert!(!ignored.is_transient(), "a 4xx would only fail again");

    let (panicked, outcome) =
        counted(&dep, |d| d.call(|_: &CallContext| -> Result<(), io::Error> { panic!("bad input") }));
    let panicked = panicked.unwrap_err();
    assert!(matches!(&panicked, Error::Panicked(msg) if msg == "bad input"), "{panicked:?}");
    assert_eq!((panicked.outcome(), outcome), (Outcome::Panicked, Outcome::Panicked));
    assert!(!panicked.is_transient(), "a bug in the job would panic again");

    // Held until its caller has left: a timeout, the job abandoned on its worker.
    // (The panic above had 5 s: a panic hook that prints a backtrace is slow.)
    let (release, held) = mpsc::channel::<()>();
    let (timed_out, outcome) = counted(&dep, move |d| {
        d.with().timeout(Duration::from_millis(100)).call(move |_: &CallContext| {
            let _ = held.recv_timeout(Duration::from_secs(10));
            Ok::<_, io::Error>(())
        })
    });
    release.send(()).unwrap();
    let timed_out = timed_out.unwrap_err();
    assert!(
        matches!(timed_out, Error::Timeout { waited } if waited >= Duration::from_millis(100)),
        "{timed_out:?}"
    );
    assert_eq!((timed_out.outcome(), outcome), (Outcome::TimedOut, Outcome::TimedOut));
    assert!(timed_out.is_transient() && !timed_out.is_rejected());

    // A deadline already past: refused before the provider is asked.
    let (late, outcome) =
        counted(&dep, |d| d.with().deadline(Instant::now()).call(|_: &CallContext| Ok::<_, io::Error>(())));
    let late = late.unwrap_err();
    assert!(
        matches!(late, Error::Rejected { reason: Rejection::DeadlineUnmeetable, retry_after: None }),
        "{late:?}"
    );
    assert_eq!((late.outcome(), outcome), (Outcome::DeadlineUnmeetable, Outcome::DeadlineUnmeetable));

    dep.breaker().transition_to(State::ForcedOpen);
    let (open, outcome) = counted(&dep, |d| d.call(|_: &CallContext| Ok::<_, io::Error>(())));
    let open = open.unwrap_err();
    assert!(
        matches!(open, Error::Rejected { reason: Rejection::NotPermitted, retry_after: None }),
        "{open:?}"
    );
    assert_eq!(
        (open.rejection(), open.outcome(), outcome),
        (Some(Rejection::NotPermitted), Outcome::NotPermitted, Outcome::NotPermitted)
    );
    assert!(open.is_rejected() && !open.is_transient());
    assert_eq!(open.to_string(), "call rejected: the circuit breaker permits no call");
}

#[test]
fn a_rate_limited_call_is_rejected_with_when_to_come_back() {
    let rate = RateLimit::per_second(1.0).burst(1).max_wait(Duration::ZERO);
    let dep = Dependency::builder("quotes").workers(1).rate_limit(rate).build().unwrap();
    let (first, outcome) = counted(&dep, |d| d.call(|_: &CallContext| Ok::<_, io::Error>(1)));
    assert_eq!((first.unwrap(), outcome), (1, Outcome::Successful));

    let (refused, outcome) = counted(&dep, |d| d.call(|_: &CallContext| Ok::<_, io::Error>(2)));
    let refused = refused.unwrap_err();
    let Error::Rejected { reason: Rejection::RateLimited, retry_after: Some(after) } = refused else {
        panic!("expected a rate limit's refusal, got {refused:?}");
    };
    assert!(after > Duration::ZERO && after <= Duration::from_secs(1), "{after:?}");
    assert_eq!(
        (refused.outcome(), outcome, refused.outcome().as_str()),
        (Outcome::RateLimited, Outcome::RateLimited, "rate_limited")
    );
    assert!(
        refused
            .to_string()
            .starts_with("call rejected: the rate limit has no permit free in time; try again in "),
        "{refused}"
    );
    // Its reason and wait survive `map_err`, which touches only the job's error.
    assert!(
        matches!(refused.map_err(|e| e.kind()), Error::Rejected { reason: Rejection::RateLimited, retry_after: Some(a) } if a == after)
    );
}

#[test]
fn a_pool_alone_says_its_answers_as_the_call_error() {
    let pool = Pool::builder("alone").workers(1).queue(1).build().unwrap();
    assert_eq!(pool.call_timeout(Duration::from_secs(1), |_ctx| Ok::<_, io::Error>(3)).unwrap(), 3);
    let failed = pool
        .call_timeout(Duration::from_secs(1), |_ctx| Err::<(), _>(io::Error::other("reset")))
        .unwrap_err();
    assert!(matches!(&failed, Error::Failed(e) if e.to_string() == "reset"), "{failed:?}");
    let panicked = pool
        .call_timeout(Duration::from_secs(5), |_ctx| -> Result<(), io::Error> { panic!("boom") })
        .unwrap_err();
    assert!(matches!(&panicked, Error::Panicked(msg) if msg == "boom"), "{panicked:?}");

    let (release, held) = mpsc::channel::<()>();
    let began = Instant::now();
    let timed_out = pool
        .call_timeout(Duration::from_millis(50), move |_ctx| {
            let _ = held.recv_timeout(Duration::from_secs(10));
            Ok::<_, io::Error>(())
        })
        .unwrap_err();
    release.send(()).unwrap();
    assert!(
        matches!(timed_out, Error::Timeout { waited } if waited >= Duration::from_millis(50)),
        "{timed_out:?}"
    );
    assert!(began.elapsed() < Duration::from_secs(5), "answered at the deadline, not the job's end");

    assert!(pool.shutdown(Duration::from_secs(5)));
    let late = pool.call_timeout(Duration::from_secs(1), |_ctx| Ok::<_, io::Error>(())).unwrap_err();
    assert!(
        matches!(late, Error::Rejected { reason: Rejection::ShuttingDown, retry_after: None }),
        "{late:?}"
    );
}
