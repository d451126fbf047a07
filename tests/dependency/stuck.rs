//! A job that does not end at its deadline, against a hung provider: its
//! workers stay stuck after their callers have gone. The stuck rule holds in
//! HALF_OPEN too (a probe that finds no room sends the breaker back to OPEN),
//! and the abandoned workers are warned of once, when their jobs outlive the
//! deadline by more than a grace (not when they end a moment after it).
#![cfg(all(feature = "ureq", feature = "testing"))]

use crate::support;

use std::time::{Duration, Instant};

/// How long past its deadline a job may run before it counts as abandoned
/// work that ignores its deadline (the crate's `OVERRUN_GRACE`).
const OVERRUN_GRACE: Duration = Duration::from_millis(25);

use support::{Fault, provider, wait_until, warnings};
use watertight::{
    CallContext, Dependency, Error, ManualClock, Rejection,
    breaker::{BreakerConfig, State},
};

#[test]
fn a_probe_without_room_sends_half_open_back_to_open_and_abandoned_workers_are_warned_of_once() {
    let log = warnings();
    let hung = provider(Fault::Hang);
    let clock = ManualClock::new();
    let dep = Dependency::builder("stuck-probe")
        .workers(2)
        .queue(0)
        .timeout(Duration::from_millis(200))
        .breaker(
            BreakerConfig::count_based(2)
                .minimum_calls(2)
                .half_open_calls(2)
                .open_for(Duration::from_secs(30)),
        )
        .clock(clock.clone())
        .build()
        .unwrap();
    // The job's own timeout is 30 s: it ignores the call's deadline.
    let agent = support::agent(Duration::from_secs(30));
    let call = || {
        let (agent, url) = (agent.clone(), hung.url());
        dep.call(move |_: &CallContext| agent.get(&url).call().map(|_| ()))
    };
    // Two timeouts at the same deadline fill the window: OPEN, both workers
    // still stuck, both abandoned.
    std::thread::scope(|s| {
        let calls = [s.spawn(call), s.spawn(call)];
        for c in calls {
            let err = c.join().unwrap().unwrap_err();
            assert!(matches!(err, Error::Timeout { .. }), "{err}");
        }
    });
    let timed_out = Instant::now();
    assert_eq!(dep.breaker().state(), State::Open);
    assert_eq!(dep.pool().unwrap().stats().abandoned, 2);
    let ours = |text: &str| {
        let log = log.lock().unwrap();
        log.iter().filter(|w| w.starts_with("dependency stuck-probe:") && w.contains(text)).count()
    };
    assert_eq!(ours("abandoned"), 0, "no warning before a call finds the pool stuck");

    // The open period passes: the next call is a probe, and finds no room.
    // The jobs are only moments past their deadline, as a job whose own
    // timeout fires a little late is: no warning of abandoned work yet.
    clock.advance(Duration::from_secs(30));
    let began = Instant::now();
    let err = call().unwrap_err();
    assert_eq!(err.rejection(), Some(Rejection::QueueFull), "{err}");
    assert!(began.elapsed() < Duration::from_secs(1), "refused at once, took {:?}", began.elapsed());
    assert_eq!(dep.breaker().state(), State::Open, "one refused probe sends it back to OPEN");
    assert_eq!(call().unwrap_err().rejection(), Some(Rejection::NotPermitted));
    assert_eq!(ours("breaker back to open"), 1, "{:?}", log.lock().unwrap());
    if timed_out.elapsed() < OVERRUN_GRACE {
        assert_eq!(ours("workers are abandoned"), 0, "within the grace: {:?}", log.lock().unwrap());
    }

    // Past the grace the jobs have outlived their deadline: the next open
    // period ends the same way, with the warning, once.
    std::thread::sleep(OVERRUN_GRACE.saturating_sub(timed_out.elapsed()) + Duration::from_millis(5));
    for probes in 2..4 {
        clock.advance(Duration::from_secs(30));
        assert_eq!(call().unwrap_err().rejection(), Some(Rejection::QueueFull));
        assert_eq!(dep.breaker().state(), State::Open);
        assert_eq!(ours("breaker back to open"), probes);
        assert_eq!(ours("2 of 2 workers are abandoned"), 1, "once per episode: {:?}", log.lock().unwrap());
    }

    // The provider lets go: the workers return, the episode ends, a probe closes the breaker.
    hung.set_fault(Fault::Healthy);
    assert!(wait_until(Duration::from_secs(10), || dep.pool().unwrap().stats().abandoned == 0));
    clock.advance(Duration::from_secs(30));
    call().expect("a probe, answered");
    call().expect("a probe, answered");
    assert_eq!(dep.breaker().state(), State::Closed);
}
