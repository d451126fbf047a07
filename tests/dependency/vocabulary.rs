//! One word for each outcome: what an error says it is counted under, what
//! the counters count, and what Prometheus shows are the same label.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use watertight::{
    CallContext, Dependency, Error, Outcome, Registry, Rejection, breaker::State, retry::Retry,
};

fn ok(_: &CallContext) -> Result<(), std::io::Error> {
    Ok(())
}

#[test]
fn every_rejection_is_counted_and_exported_under_its_own_label() {
    let dep =
        Dependency::builder("vocab").workers(1).queue(0).timeout(Duration::from_secs(5)).build().unwrap();
    let registry = Registry::new();
    registry.register(dep.clone()).unwrap();

    // QueueFull: the only worker is held, and a hand-off pool has no queue.
    let (release, held) = mpsc::channel::<()>();
    let (started_tx, started) = mpsc::channel::<()>();
    let holder = {
        let dep = dep.clone();
        std::thread::spawn(move || {
            dep.call(move |_| {
                started_tx.send(()).unwrap();
                held.recv_timeout(Duration::from_secs(10)).ok();
                Ok::<_, std::io::Error>(())
            })
        })
    };
    started.recv_timeout(Duration::from_secs(10)).expect("the worker took the job");
    let mut seen = vec![dep.call(ok).unwrap_err()];
    release.send(()).unwrap();
    holder.join().unwrap().unwrap();

    // DeadlineUnmeetable: the caller's deadline has already passed.
    seen.push(dep.with().deadline(Instant::now()).call(ok).unwrap_err());
    // NotPermitted: the breaker is forced open.
    dep.breaker().transition_to(State::ForcedOpen);
    seen.push(dep.call(ok).unwrap_err());
    dep.breaker().transition_to(State::Closed);
    // ShuttingDown.
    assert!(dep.shutdown(Duration::from_secs(5)));
    seen.push(dep.call(ok).unwrap_err());

    let rejections: Vec<Rejection> = seen.iter().map(|e| e.rejection().expect("a rejection")).collect();
    assert_eq!(
        rejections,
        [
            Rejection::QueueFull,
            Rejection::DeadlineUnmeetable,
            Rejection::NotPermitted,
            Rejection::ShuttingDown
        ]
    );
    let text = watertight::metrics::encode_text(&registry);
    let counts = dep.snapshot().calls;
    for (err, rejection) in seen.iter().zip(&rejections) {
        let label = rejection.as_str();
        assert_eq!(err.outcome().as_str(), label);
        assert_eq!(err.outcome(), rejection.outcome());
        assert_eq!(counts.get(err.outcome()), 1, "{label} counted once: {counts:?}");
        let sample = format!(r#"watertight_calls_total{{dependency="vocab",kind="{label}"}} 1"#);
        assert!(text.contains(&sample), "{sample} missing from\n{text}");
    }
    // Every outcome has its sample, spelled as its label, and nothing else is a kind.
    for outcome in Outcome::ALL {
        assert!(text.contains(&format!(r#"kind="{}""#, outcome.as_str())), "{outcome}");
    }
    assert_eq!(
        text.matches(r#"watertight_calls_total{dependency="vocab",kind="#).count(),
        Outcome::ALL.len()
    );
}

#[test]
fn a_timeout_and_a_failure_say_their_labels() {
    let dep = Dependency::builder("labels").workers(1).timeout(Duration::from_millis(50)).build().unwrap();
    let late = dep.call(|ctx| {
        std::thread::sleep(ctx.remaining() + Duration::from_millis(20));
        Ok::<_, std::io::Error>(())
    });
    assert_eq!(late.unwrap_err().outcome(), Outcome::TimedOut);
    // The abandoned job still holds the only worker for a moment: wait for it (bounded).
    let until = Instant::now() + Duration::from_secs(5);
    while dep.pool().unwrap().stats().busy > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
    let failed = dep.call(|_| Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset)));
    assert_eq!(failed.unwrap_err().outcome().as_str(), "failed");
    let counts = dep.snapshot().calls;
    assert_eq!((counts.timed_out, counts.failed), (1, 1));
    assert!(matches!(Error::<std::io::Error>::Panicked("x".into()).outcome(), Outcome::Panicked));
}

#[test]
fn the_retry_budget_is_a_percentage() {
    // 20.0 means 20 % of calls: with a permanent failure, no floor and 100
    // calls of up to 3 attempts, at most 20 retries happen.
    let dep = Dependency::builder("budget")
        .workers(2)
        .queue(2)
        .breaker(watertight::breaker::BreakerConfig::default().enabled(false))
        .retry(
            Retry::builder()
                .max_attempts(3)
                .backoff(Duration::ZERO, Duration::ZERO)
                .budget(20.0, 0)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    for _ in 0..100 {
        let r = dep
            .with()
            .retry()
            .call(|_| Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionReset)));
        assert!(r.is_err());
    }
    let counts = dep.snapshot().calls;
    assert_eq!(counts.retried, 20, "{counts:?}");
    assert_eq!(counts.failed, 120);
    // A percentage above 100 is refused, naming the field.
    let err = Retry::builder().budget(120.0, 0).build().unwrap_err();
    assert_eq!(err.field(), "retry.budget");
    assert!(err.to_string().contains("percentage"), "{err}");
}

#[test]
fn latency_histograms_are_exported_and_summarised() {
    let dep =
        Dependency::builder("timed").workers(2).queue(2).timeout(Duration::from_secs(5)).build().unwrap();
    let registry = Registry::new();
    registry.register(dep.clone()).unwrap();
    for _ in 0..20 {
        dep.call(|_| {
            std::thread::sleep(Duration::from_millis(3));
            Ok::<_, std::io::Error>(())
        })
        .unwrap();
    }
    // Workers record queue wait and run time just after they answer: wait (bounded) for the last.
    let until = Instant::now() + Duration::from_secs(5);
    while dep.pool().unwrap().run_histogram().snapshot().count() < 20 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
    let latency = dep.snapshot().latency;
    let (run, call) = (latency.run.p50.expect("a run p50"), latency.call.p50.expect("a call p50"));
    assert!(run >= Duration::from_millis(2) && run < Duration::from_secs(1), "run p50 {run:?}");
    assert!(
        call >= run.mul_f64(0.8),
        "a call ({call:?}) takes at least its run ({run:?}), within the buckets' 10 %"
    );
    let text = watertight::metrics::encode_text(&registry);
    for family in ["watertight_queue_wait_seconds", "watertight_run_seconds", "watertight_call_seconds"] {
        assert!(text.contains(&format!("# TYPE {family} histogram")), "{family} missing\n{text}");
        let count = format!(r#"{family}_count{{dependency="timed"}} 20"#);
        assert!(text.contains(&count), "{count} missing\n{text}");
        let inf = format!(r#"{family}_bucket{{le="+Inf",dependency="timed"}} 20"#);
        let inf_alt = format!(r#"{family}_bucket{{dependency="timed",le="+Inf"}} 20"#);
        assert!(text.contains(&inf) || text.contains(&inf_alt), "the +Inf bucket holds every sample\n{text}");
    }
}
