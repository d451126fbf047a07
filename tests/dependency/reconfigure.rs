//! Live reconfiguration of a dependency: every setting changes while calls
//! run, is validated first, and is checked against the capacity rule by the
//! registry.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use watertight::{
    Dependency, ManualClock, Registry, Verdict,
    breaker::{BreakerConfig, State},
    limit::AdaptiveLimit,
    retry::Retry,
};

fn ok(_: &watertight::CallContext) -> Result<(), std::io::Error> {
    Ok(())
}

#[test]
fn the_config_reads_back_what_was_built() {
    let dep = Dependency::builder("read")
        .workers(3)
        .queue(2)
        .max_wait(Duration::from_millis(20))
        .timeout(Duration::from_millis(700))
        .breaker(BreakerConfig::count_based(20).minimum_calls(5))
        .retry(Retry::builder().max_attempts(2).build().unwrap())
        .adaptive_limit(AdaptiveLimit::new().min_limit(1))
        .build()
        .unwrap();
    let c = dep.config();
    assert_eq!(
        (c.workers, c.queue, c.max_wait, c.timeout),
        (3, 2, Duration::from_millis(20), Duration::from_millis(700))
    );
    assert_eq!(c.breaker, BreakerConfig::count_based(20).minimum_calls(5));
    assert_eq!(c.retry.max_attempts(), 2);
    assert!(c.adaptive_limit.is_some());
    // The same config builds the same dependency.
    let twin = Dependency::builder("twin").config(c.clone()).build().unwrap();
    assert_eq!(twin.config(), c);
}

#[test]
fn timeout_retry_breaker_and_limit_change_while_calls_run() {
    let clock = ManualClock::new();
    let dep = Dependency::builder("live")
        .workers(4)
        .queue(4)
        .timeout(Duration::from_secs(2))
        .clock(clock.clone())
        .breaker(BreakerConfig::count_based(10).minimum_calls(10))
        .build()
        .unwrap();
    // Calls keep running on other threads while the settings change.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..4)
        .map(|_| {
            let (dep, stop, answered) = (dep.clone(), Arc::clone(&stop), Arc::clone(&answered));
            thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(10);
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    let _ = dep.call(ok);
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    let mut c = dep.config();
    c.timeout = Duration::from_millis(80);
    c.retry = Retry::builder().max_attempts(1).build().unwrap();
    c.breaker = BreakerConfig::count_based(4).minimum_calls(2).open_for(Duration::from_secs(30));
    c.adaptive_limit = Some(AdaptiveLimit::new().min_limit(1));
    dep.reconfigure(c.clone()).unwrap();
    assert_eq!(dep.config(), c);
    assert_eq!(dep.timeout(), Duration::from_millis(80));
    assert!(dep.limiter().is_some());

    // The new timeout applies to the next call.
    let began = Instant::now();
    // The job outlives the deadline by far, so a caller woken late on a loaded
    // machine still finds no answer at it.
    let late = dep.call(|ctx| {
        thread::sleep(ctx.remaining() + Duration::from_millis(300));
        Ok::<_, std::io::Error>(())
    });
    assert!(matches!(&late, Err(e) if e.is_timeout()), "{late:?}");
    assert!(
        began.elapsed() < Duration::from_millis(80 + 500),
        "a new 80 ms timeout took {:?}",
        began.elapsed()
    );

    // The new breaker thresholds: two failures open it. (The timeout above, and on a
    // loaded machine the callers' calls, may have opened it already: start afresh.)
    stop.store(true, Ordering::Relaxed);
    callers.into_iter().for_each(|c| c.join().unwrap());
    assert!(answered.load(Ordering::Relaxed) > 0);
    dep.breaker().reset();
    for _ in 0..2 {
        let permit = dep.breaker().try_acquire().unwrap();
        permit.record(Verdict::Failure, Duration::ZERO);
    }
    assert_eq!(dep.breaker().state(), State::Open);

    // The limit off again.
    c.adaptive_limit = None;
    dep.reconfigure(c).unwrap();
    assert!(dep.limiter().is_none());
    assert_eq!(dep.snapshot().limit, None);
}

#[test]
fn an_invalid_change_is_refused_whole_naming_the_field() {
    let dep = Dependency::builder("strict").workers(2).timeout(Duration::from_secs(1)).build().unwrap();
    let before = dep.config();
    let mut bad = before.clone();
    bad.timeout = Duration::from_millis(500);
    bad.breaker = BreakerConfig::default().failure_rate(150.0);
    assert_eq!(dep.reconfigure(bad).unwrap_err().field(), "failure_rate");
    assert_eq!(dep.config(), before, "nothing changed, not even the valid timeout");
    let mut bad = before.clone();
    bad.max_wait = Duration::from_secs(2);
    assert_eq!(dep.reconfigure(bad).unwrap_err().field(), "max_wait");
    let mut bad = before.clone();
    bad.timeout = Duration::ZERO;
    assert_eq!(dep.reconfigure(bad).unwrap_err().field(), "timeout");
    let mut bad = before.clone();
    bad.adaptive_limit = Some(AdaptiveLimit::new().min_limit(5));
    assert_eq!(dep.reconfigure(bad).unwrap_err().field(), "min_limit", "the minimum is above the 2 workers");
    assert_eq!(dep.config(), before);
}

#[test]
fn the_registry_refuses_a_change_that_breaks_the_capacity_rule() {
    let registry = Registry::new();
    // A breaker one wave of hung calls (6) can open: 5 failures in a window of 10.
    let fraud = Dependency::builder("fraud")
        .workers(4)
        .queue(2)
        .breaker(BreakerConfig::count_based(10).minimum_calls(5));
    registry.register(fraud.build().unwrap()).unwrap();
    let mut c = registry.get("fraud").unwrap().config();
    c.workers = 12;
    c.queue = 4;
    match registry.reconfigure("fraud", c.clone(), 16) {
        Err(e) if e.field() == "capacity" => assert_eq!(e.path(), "fraud"),
        other => panic!("expected a capacity refusal, got {other:?}"),
    }
    assert_eq!(registry.get("fraud").unwrap().config().workers, 4, "nothing changed");
    let unknown = registry.reconfigure("nobody", c, 16).unwrap_err();
    assert_eq!((unknown.to_string().as_str(), unknown.field()), ("no dependency named `nobody`", ""));
    let mut fine = registry.get("fraud").unwrap().config();
    fine.timeout = Duration::from_millis(250);
    let report = registry.reconfigure("fraud", fine, 16).unwrap();
    assert!(report.warnings().is_empty(), "{:?}", report.warnings());
    assert_eq!(registry.get("fraud").unwrap().timeout(), Duration::from_millis(250));
}

/// A running dependency's configuration, written as JSON and read back, is
/// the same value, and reconfigures the dependency to what it says.
#[cfg(feature = "serde")]
#[test]
fn the_config_travels_as_json_and_back() {
    use watertight::retry::{Jitter, Retry};
    let dep = Dependency::builder("json")
        .workers(3)
        .queue(1)
        .breaker(BreakerConfig::time_based(20).minimum_calls(4))
        .build()
        .unwrap();
    let text = serde_json::to_string(&dep.config()).unwrap();
    assert!(text.contains(r#""window":{"time":20}"#), "{text}");
    assert!(text.contains(r#""timeout":"1s""#), "{text}");
    let mut read =
        watertight::DependencyConfig::from_deserializer(&mut serde_json::Deserializer::from_str(&text))
            .unwrap();
    assert_eq!(read, dep.config());
    read.retry = Retry::builder().jitter(Jitter::None).build().unwrap();
    dep.reconfigure(read.clone()).unwrap();
    assert_eq!(dep.config(), read);
    assert_eq!(dep.retry().jitter(), Jitter::None);
}

#[test]
fn a_dependency_records_its_transitions_and_reconfigurations() {
    use watertight::breaker::State;
    use watertight::dependency::RecordedKind;
    let dep = Dependency::builder("fraud").workers(2).build().expect("a dependency");
    assert!(dep.recent_events().is_empty());
    let mut config = dep.config();
    config.workers = 3;
    config.queue = 4;
    config.timeout = Duration::from_millis(700);
    dep.reconfigure(config).expect("a valid configuration");
    dep.breaker().transition_to(State::Open);
    let events = dep.recent_events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events[0].kind,
        RecordedKind::Reconfigured { workers: 3, queue: 4, timeout: Duration::from_millis(700) }
    );
    assert!(matches!(&events[1].kind, RecordedKind::Transition(t) if t.to() == State::Open));
    assert_eq!((events[0].seq, events[1].seq), (1, 2));
    assert!(events[0].at <= events[1].at);
    // A refused configuration changes nothing, and records nothing.
    let mut bad = dep.config();
    bad.workers = 0;
    assert!(dep.reconfigure(bad).is_err());
    assert_eq!(dep.recent_events().len(), 2);
    dep.shutdown(Duration::from_secs(1));
}
