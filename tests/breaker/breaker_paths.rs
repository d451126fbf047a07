//! Reports into a full window of clean successes (once a path of its own,
//! now the locked path like any report), and rejections by an OPEN breaker,
//! decided without the lock: each must give the same answers and counts as
//! the locked path would. On a manual clock; nothing sleeps.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use watertight::{
    ManualClock, Verdict,
    breaker::{Breaker, BreakerConfig, State},
};

const FAST: Duration = Duration::from_millis(5);
const SLOW: Duration = Duration::from_secs(3);

fn manual(config: BreakerConfig) -> (Breaker, ManualClock) {
    let clock = ManualClock::new();
    let breaker = Breaker::with_clock("paths", config, Arc::new(clock.clone())).expect("valid config");
    (breaker, clock)
}

fn call(breaker: &Breaker, verdict: Verdict, took: Duration) {
    breaker.try_acquire().expect("permitted").record(verdict, took);
}

/// Runs `work` on `n` threads at once, each with its own clone of `b`, and
/// joins them (a panic on any fails the test).
fn on_threads(n: usize, b: &Breaker, work: impl Fn(&Breaker) + Send + Sync + Copy + 'static) {
    let start = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let (b, start) = (b.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                work(&b);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a thread of the test");
    }
}

/// A breaker on [`ten`] whose window is full of clean successes.
fn clean_ten() -> (Breaker, ManualClock) {
    let (b, clock) = manual(ten());
    for _ in 0..10 {
        call(&b, Verdict::Success, FAST);
    }
    (b, clock)
}

fn ten() -> BreakerConfig {
    BreakerConfig::count_based(10)
        .minimum_calls(10)
        .failure_rate(50.0)
        .slow_call_rate(50.0)
        .slow_call_duration(Duration::from_secs(2))
        .open_for(Duration::from_secs(30))
        .half_open_calls(1)
}

#[test]
fn successes_into_a_full_clean_window_are_counted_and_failures_slide_out_in_order() {
    let (b, _clock) = manual(ten());
    for _ in 0..1_010 {
        call(&b, Verdict::Success, FAST);
    }
    let m = b.metrics();
    assert_eq!((m.successful, m.buffered_calls, m.failure_rate), (1_010, 10, Some(0.0)));

    // Four failures take the four oldest slots: 40 %, still closed.
    for _ in 0..4 {
        call(&b, Verdict::Failure, FAST);
    }
    assert_eq!((b.state(), b.metrics().failure_rate), (State::Closed, Some(40.0)));
    // The next six successes push out the six successes older than the
    // failures; the failures are still in (the window is not clean, so these
    // take the locked path)...
    for _ in 0..6 {
        call(&b, Verdict::Success, FAST);
    }
    assert_eq!(b.metrics().failure_rate, Some(40.0));
    // ...and the four after them push out the failures, one by one.
    for expected in [30.0, 20.0, 10.0, 0.0] {
        call(&b, Verdict::Success, FAST);
        assert_eq!(b.metrics().failure_rate, Some(expected));
    }
    // Clean again: a failure now counts as one in ten, and five open it.
    for _ in 0..4 {
        call(&b, Verdict::Failure, FAST);
    }
    assert_eq!(b.state(), State::Closed);
    call(&b, Verdict::Failure, FAST);
    assert_eq!(b.state(), State::Open);
    let m = b.metrics();
    assert_eq!((m.successful, m.failed), (1_020, 9));
}

#[test]
fn a_slow_success_into_a_clean_window_is_windowed_not_skipped() {
    let (b, _clock) = clean_ten();
    for n in 1..=4u32 {
        call(&b, Verdict::Success, SLOW);
        assert_eq!(b.metrics().slow_call_rate, Some(f64::from(n) * 10.0));
    }
    call(&b, Verdict::Success, SLOW);
    assert_eq!(b.state(), State::Open, "five slow calls in ten");
    assert_eq!(b.metrics().slow, 5);
}

#[test]
fn a_permit_from_an_earlier_clean_window_counts_in_the_lifetime_only() {
    let (b, _clock) = clean_ten();
    let old = b.try_acquire().expect("closed");
    b.reset();
    old.record(Verdict::Success, FAST);
    let m = b.metrics();
    assert_eq!((m.successful, m.buffered_calls, m.failure_rate), (11, 0, None));
    // The fresh window fills from zero.
    for _ in 0..9 {
        call(&b, Verdict::Success, FAST);
    }
    assert_eq!(b.metrics().buffered_calls, 9);
}

#[test]
fn a_reconfigured_threshold_applies_to_a_window_that_was_clean() {
    let (b, _clock) = clean_ten();
    b.reconfigure(ten().failure_rate(10.0)).expect("valid");
    call(&b, Verdict::Success, FAST);
    call(&b, Verdict::Failure, FAST);
    assert_eq!(b.state(), State::Open, "one failure in ten is 10 %");
}

#[test]
fn successes_from_many_threads_into_a_clean_window_are_all_counted() {
    const THREADS: usize = 4;
    const CALLS: u64 = 5_000;
    let (b, _clock) = clean_ten();
    on_threads(THREADS, &b, |b| {
        for _ in 0..CALLS {
            call(b, Verdict::Success, FAST);
        }
    });
    let m = b.metrics();
    assert_eq!(
        (m.successful, m.buffered_calls, m.failure_rate),
        (10 + THREADS as u64 * CALLS, 10, Some(0.0))
    );
}

fn opened() -> (Breaker, ManualClock) {
    let (b, clock) = manual(ten());
    for _ in 0..10 {
        call(&b, Verdict::Failure, FAST);
    }
    assert_eq!(b.state(), State::Open);
    (b, clock)
}

#[test]
fn every_open_rejection_is_counted_whichever_thread_and_path() {
    const THREADS: usize = 4;
    const REJECTS: u64 = 2_000;
    let (b, _clock) = opened();
    on_threads(THREADS, &b, |b| {
        for _ in 0..REJECTS {
            assert_eq!(b.try_acquire().unwrap_err(), State::Open);
        }
        // Seen at once by the thread that counted them.
        assert!(b.metrics().not_permitted >= REJECTS);
    });
    assert_eq!(b.metrics().not_permitted, THREADS as u64 * REJECTS);
}

#[test]
fn a_thread_rejected_by_two_open_breakers_in_turn_counts_each_once() {
    let (a, _ca) = opened();
    let (b, _cb) = opened();
    for _ in 0..100 {
        assert!(a.try_acquire().is_err());
        assert!(a.try_acquire().is_err());
        assert!(b.try_acquire().is_err());
    }
    assert_eq!((a.metrics().not_permitted, b.metrics().not_permitted), (200, 100));
}

#[test]
fn rejections_are_counted_across_open_periods_and_forced_open() {
    let (b, clock) = opened();
    for _ in 0..5 {
        assert!(b.try_acquire().is_err());
    }
    clock.advance(Duration::from_secs(30));
    call(&b, Verdict::Failure, FAST);
    assert_eq!(b.state(), State::Open, "the probe failed: a second open period");
    for _ in 0..7 {
        assert!(b.try_acquire().is_err());
    }
    b.transition_to(State::ForcedOpen);
    for _ in 0..3 {
        assert_eq!(b.try_acquire().unwrap_err(), State::ForcedOpen);
    }
    assert_eq!(b.metrics().not_permitted, 15);
    // Once the period is over its end no longer rejects.
    b.transition_to(State::Open);
    clock.advance(Duration::from_secs(300));
    assert!(b.try_acquire().is_ok(), "half-open after the (backed-off) period");
    assert_eq!(b.metrics().not_permitted, 15);
}

#[test]
fn rejections_of_threads_that_exited_stay_counted() {
    let (b, _clock) = opened();
    for round in 1..=20u64 {
        let b2 = b.clone();
        thread::spawn(move || {
            for _ in 0..10 {
                assert!(b2.try_acquire().is_err());
            }
        })
        .join()
        .expect("rejected thread");
        assert_eq!(b.metrics().not_permitted, round * 10);
    }
}

/// On the system clock the OPEN reject path reads `Instant::now` itself
/// rather than through the `Clock` trait: the same counts, and the period
/// still ends. Real time, so only a lower bound is waited for.
#[test]
fn on_the_system_clock_rejections_are_counted_and_the_period_ends() {
    const THREADS: usize = 40;
    let config = ten().open_for(Duration::from_millis(300));
    let b = Breaker::new("system", config).expect("valid config");
    let opened = std::time::Instant::now();
    for _ in 0..10 {
        call(&b, Verdict::Failure, FAST);
    }
    assert_eq!(b.state(), State::Open);
    // Many threads at once, all counting in the one shared counter.
    on_threads(THREADS, &b, |b| {
        for _ in 0..50 {
            if let Err(e) = b.try_acquire() {
                assert_eq!(e, State::Open);
            }
        }
    });
    let rejected = b.metrics().not_permitted;
    if opened.elapsed() < Duration::from_millis(300) {
        assert_eq!(rejected, THREADS as u64 * 50);
    } else {
        // A slow machine may have reached the end of the period meanwhile.
        assert!(rejected <= THREADS as u64 * 50);
    }
    while opened.elapsed() < Duration::from_millis(350) {
        thread::sleep(Duration::from_millis(20));
    }
    let probe = b.try_acquire().expect("the period is over: a probe");
    assert_eq!(probe.state(), State::HalfOpen);
    probe.record(Verdict::Success, FAST);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().not_permitted, rejected);
}
