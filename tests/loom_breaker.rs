//! Model check of the breaker's concurrency (src/breaker/mod.rs,
//! "Concurrency") under loom: every interleaving of each race a report, a
//! reset and an OPEN rejection have with one another.
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --test loom_breaker`
//!
//! What is checked, in every interleaving:
//! - a success reported into a full, clean window racing a failure: every outcome is counted once in the
//!   lifetime totals, and the window holds what some order of the two reports
//!   would have left (the same rates, the same decision to open);
//! - the same success racing a reset: counted once, and never lands in the
//!   fresh window as a call it did not make there;
//! - OPEN rejections decided without the lock from the state word and the
//!   open period's end, by threads racing each other: every rejection is
//!   counted exactly once.
#![cfg(loom)]

use std::sync::Arc as StdArc;
use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use watertight::{
    ManualClock, Verdict,
    breaker::{Breaker, BreakerConfig, State},
};

const FAST: Duration = Duration::from_millis(1);

/// A count window of `n` with `n` successes in it: full and clean.
fn clean(n: u32) -> Breaker {
    let config = BreakerConfig::count_based(n).minimum_calls(n).failure_rate(50.0);
    let breaker = Breaker::with_clock("loom", config, StdArc::new(ManualClock::new())).expect("valid config");
    for _ in 0..n {
        breaker.try_acquire().expect("closed").record(Verdict::Success, FAST);
    }
    breaker
}

/// One successful call on another thread.
fn succeed_elsewhere(breaker: &Arc<Breaker>) -> thread::JoinHandle<()> {
    let breaker = Arc::clone(breaker);
    thread::spawn(move || breaker.try_acquire().expect("closed").record(Verdict::Success, FAST))
}

#[test]
fn a_clean_success_racing_a_failure_that_opens_the_breaker() {
    loom::model(|| {
        let breaker = Arc::new(clean(2));
        let other = Arc::clone(&breaker);
        let success = thread::spawn(move || {
            if let Ok(permit) = other.try_acquire() {
                permit.record(Verdict::Success, FAST);
                return true;
            }
            false
        });
        breaker.try_acquire().expect("closed").record(Verdict::Failure, FAST);
        let permitted = success.join().unwrap();
        let m = breaker.metrics();
        // One failure in a window of two is 50 %: open, whichever came first.
        assert_eq!(m.state, State::Open);
        assert_eq!((m.successful, m.failed), (2 + u64::from(permitted), 1));
        assert_eq!(m.not_permitted, u64::from(!permitted));
    });
}

#[test]
fn a_clean_success_racing_a_failure_that_leaves_it_closed() {
    loom::model(|| {
        let breaker = Arc::new(clean(3));
        let success = succeed_elsewhere(&breaker);
        breaker.try_acquire().expect("closed").record(Verdict::Failure, FAST);
        success.join().unwrap();
        let m = breaker.metrics();
        // Any order leaves one failure among the last three calls.
        assert_eq!(m.state, State::Closed);
        assert_eq!((m.successful, m.failed, m.buffered_calls), (4, 1, 3));
        assert_eq!(m.failure_rate, Some(100.0 / 3.0));
        // The next success slides out a success, not the failure; three
        // slide the failure out, whatever the order of the race was.
        breaker.try_acquire().expect("closed").record(Verdict::Success, FAST);
        assert_eq!(breaker.metrics().failure_rate, Some(100.0 / 3.0));
        for _ in 0..2 {
            breaker.try_acquire().expect("closed").record(Verdict::Success, FAST);
        }
        assert_eq!(breaker.metrics().failure_rate, Some(0.0));
    });
}

#[test]
fn a_clean_success_racing_a_reset_is_counted_once_and_never_in_the_fresh_window_early() {
    loom::model(|| {
        let breaker = Arc::new(clean(2));
        let success = succeed_elsewhere(&breaker);
        breaker.reset();
        success.join().unwrap();
        let m = breaker.metrics();
        assert_eq!(m.state, State::Closed);
        assert_eq!(m.successful, 3);
        // In the fresh window only if it was permitted after the reset.
        assert!(m.buffered_calls <= 1, "buffered {}", m.buffered_calls);
        // The fresh window is not full: the next report takes the lock and
        // is windowed.
        breaker.try_acquire().expect("closed").record(Verdict::Failure, FAST);
        assert!(breaker.metrics().buffered_calls >= 1);
    });
}

/// An OPEN breaker (two failures in a window of two) whose period does not
/// end: the manual clock never moves.
fn open() -> Breaker {
    let config = BreakerConfig::count_based(2).minimum_calls(2).open_for(Duration::from_secs(60));
    let breaker = Breaker::with_clock("loom", config, StdArc::new(ManualClock::new())).expect("valid config");
    for _ in 0..2 {
        breaker.try_acquire().expect("closed").record(Verdict::Failure, FAST);
    }
    assert_eq!(breaker.state(), State::Open);
    breaker
}

#[test]
fn open_rejections_of_racing_and_exiting_threads_are_each_counted_once() {
    loom::model(|| {
        let breaker = Arc::new(open());
        let rejecters: Vec<_> = (0..2)
            .map(|_| {
                let breaker = Arc::clone(&breaker);
                thread::spawn(move || {
                    for _ in 0..2 {
                        assert_eq!(breaker.try_acquire().unwrap_err(), State::Open);
                    }
                })
            })
            .collect();
        // Racing them: a rejection on this thread.
        assert!(breaker.try_acquire().is_err());
        for r in rejecters {
            r.join().unwrap();
        }
        assert_eq!(breaker.metrics().not_permitted, 5);
        assert!(breaker.try_acquire().is_err());
        assert_eq!(breaker.metrics().not_permitted, 6);
    });
}
