//! A job that does not end at its deadline, against a hung provider: its
//! workers stay stuck after their callers have gone. The stall rule holds in
//! HALF_OPEN too (a probe that finds no room sends the breaker back to OPEN),
//! and the abandoned workers are warned of once.
#![cfg(all(feature = "ureq", feature = "testing"))]

use crate::support;

use std::time::{Duration, Instant};

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
    // Two timeouts fill the window: OPEN, both workers still stuck, both abandoned.
    for _ in 0..2 {
        let err = call().unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
    }
    assert_eq!(dep.breaker().state(), State::Open);
    assert_eq!(dep.pool().unwrap().stats().abandoned, 2);
    let ours = |text: &str| {
        let log = log.lock().unwrap();
        log.iter().filter(|w| w.starts_with("dependency stuck-probe:") && w.contains(text)).count()
    };
    assert_eq!(ours("abandoned"), 0, "no warning before a call finds the pool stuck");

    // The open period passes: the next call is a probe, and finds no room.
    clock.advance(Duration::from_secs(30));
    let began = Instant::now();
    let err = call().unwrap_err();
    assert_eq!(err.rejection(), Some(Rejection::QueueFull), "{err}");
    assert!(began.elapsed() < Duration::from_secs(1), "refused at once, took {:?}", began.elapsed());
    assert_eq!(dep.breaker().state(), State::Open, "one refused probe sends it back to OPEN");
    assert_eq!(call().unwrap_err().rejection(), Some(Rejection::NotPermitted));
    assert_eq!(ours("breaker back to open"), 1, "{:?}", log.lock().unwrap());
    assert_eq!(ours("2 of 2 workers are abandoned"), 1, "{:?}", log.lock().unwrap());

    // The next open period ends the same way, with no second warning of the same episode.
    clock.advance(Duration::from_secs(30));
    assert_eq!(call().unwrap_err().rejection(), Some(Rejection::QueueFull));
    assert_eq!(dep.breaker().state(), State::Open);
    assert_eq!(ours("breaker back to open"), 2);
    assert_eq!(ours("workers are abandoned"), 1, "once per episode");

    // The provider lets go: the workers return, the episode ends, a probe closes the breaker.
    hung.set_fault(Fault::Healthy);
    assert!(wait_until(Duration::from_secs(10), || dep.pool().unwrap().stats().abandoned == 0));
    clock.advance(Duration::from_secs(30));
    call().expect("a probe, answered");
    call().expect("a probe, answered");
    assert_eq!(dep.breaker().state(), State::Closed);
}
