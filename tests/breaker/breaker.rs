//! The circuit breaker on a manual clock: scripted state walks, the cases of
//! the permission-check report, a model-based comparison and a multi-threaded stress run.
//! Nothing here sleeps; time moves only when a test says so.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use watertight::{
    ManualClock, Verdict,
    breaker::{Breaker, BreakerConfig, State, Transition},
};

const FAST: Duration = Duration::from_millis(5);

fn manual(config: BreakerConfig) -> (Breaker, ManualClock) {
    let clock = ManualClock::new();
    let breaker =
        Breaker::with_clock("account-access", config, Arc::new(clock.clone())).expect("valid config");
    (breaker, clock)
}

fn call(breaker: &Breaker, verdict: Verdict) {
    breaker.try_acquire().expect("permitted").record(verdict, FAST);
}

/// Records every transition as `(from, to)`.
fn recorder(breaker: &Breaker) -> Arc<Mutex<Vec<(State, State)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    breaker.on_transition(move |t: &Transition| sink.lock().unwrap().push((t.from(), t.to())));
    seen
}

/// A permission-check circuit: count window, small numbers so a test walks it in a few calls.
fn small() -> BreakerConfig {
    BreakerConfig::count_based(10)
        .minimum_calls(4)
        .failure_rate(50.0)
        .open_for(Duration::from_secs(15))
        .half_open_calls(3)
}

#[test]
fn state_walk_closed_open_half_open_closed_and_open_again() {
    let (b, clock) = manual(small());
    let seen = recorder(&b);
    assert_eq!(b.state(), State::Closed);

    // Three calls are under the minimum: no rate yet, whatever they are.
    call(&b, Verdict::Failure);
    call(&b, Verdict::Success);
    call(&b, Verdict::Failure);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().failure_rate, None);
    // The fourth makes the minimum: 3 of 4 failed, 75 % >= 50 %.
    call(&b, Verdict::Failure);
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.metrics().failure_rate, Some(75.0));

    // OPEN rejects until open_for has passed, and counts the rejections.
    let err = b.try_acquire().unwrap_err();
    assert_eq!(err, State::Open);
    clock.advance(Duration::from_millis(14_999));
    assert!(b.try_acquire().is_err());
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.metrics().not_permitted, 2);

    // The first call after it moves to HALF_OPEN (lazily) and is a probe.
    clock.advance(Duration::from_millis(1));
    let p1 = b.try_acquire().expect("first probe");
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(p1.state(), State::HalfOpen);
    let p2 = b.try_acquire().expect("second probe");
    let p3 = b.try_acquire().expect("third probe");
    let full = b.try_acquire().unwrap_err();
    assert_eq!(full, State::HalfOpen);
    p1.record(Verdict::Success, FAST);
    p2.record(Verdict::Failure, FAST);
    assert_eq!(b.state(), State::HalfOpen, "waits for every probe");
    p3.record(Verdict::Success, FAST);
    // 1 of 3 failed: 33 % < 50 %: CLOSED, with a fresh window.
    assert_eq!(b.state(), State::Closed);
    let m = b.metrics();
    assert_eq!((m.buffered_calls, m.failure_rate), (0, None));

    // And open again.
    for _ in 0..4 {
        call(&b, Verdict::Failure);
    }
    assert_eq!(b.state(), State::Open);

    let walk = seen.lock().unwrap().clone();
    use State::*;
    assert_eq!(walk, [(Closed, Open), (Open, HalfOpen), (HalfOpen, Closed), (Closed, Open)]);
    let m = b.metrics();
    assert_eq!((m.successful, m.failed, m.ignored, m.not_permitted), (3, 8, 0, 3));
}

#[test]
fn permission_check_ignored_4xx_count_as_zero_while_two_failures_open_it() {
    let (b, _clock) = manual(BreakerConfig::time_based(30).minimum_calls(2).failure_rate(50.0));
    // 400, 401, 403, 404, 409, 429: the caller's or one tenant's problem.
    for _status in [400, 401, 403, 404, 409, 429] {
        b.try_acquire().unwrap().record(Verdict::Ignore, FAST);
    }
    let m = b.metrics();
    assert_eq!((m.state, m.buffered_calls, m.failure_rate, m.ignored), (State::Closed, 0, None, 6));
    // Two 503s: two calls in the window, both failed.
    call(&b, Verdict::Failure);
    assert_eq!(b.state(), State::Closed, "one call is under the minimum of two");
    call(&b, Verdict::Failure);
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.metrics().failure_rate, Some(100.0));
}

#[test]
fn ignored_calls_do_not_dilute_the_failure_rate() {
    let (b, _clock) = manual(BreakerConfig::count_based(10).minimum_calls(4));
    call(&b, Verdict::Success);
    call(&b, Verdict::Failure);
    for _ in 0..50 {
        call(&b, Verdict::Ignore);
    }
    call(&b, Verdict::Success);
    call(&b, Verdict::Failure);
    assert_eq!(b.state(), State::Open, "2 of 4 = 50 %: the ignored calls are not successes");
}

#[test]
fn permission_check_two_breakers_are_independent() {
    let clock = ManualClock::new();
    let config = BreakerConfig::count_based(10).minimum_calls(2);
    let access = Breaker::with_clock("account-access", config.clone(), Arc::new(clock.clone())).unwrap();
    let read = Breaker::with_clock("account-read", config, Arc::new(clock.clone())).unwrap();
    call(&read, Verdict::Failure);
    call(&read, Verdict::Failure);
    assert_eq!(read.state(), State::Open);
    assert!(read.try_acquire().is_err());
    assert_eq!(access.state(), State::Closed);
    call(&access, Verdict::Success);
    assert_eq!(access.metrics().not_permitted, 0);
}

fn opened(config: BreakerConfig) -> (Breaker, ManualClock) {
    let (b, clock) = manual(config.minimum_calls(1).open_for(Duration::from_secs(15)));
    call(&b, Verdict::Failure);
    assert_eq!(b.state(), State::Open);
    clock.advance(Duration::from_secs(15));
    (b, clock)
}

#[test]
fn permission_check_two_half_open_successes_close_it() {
    let (b, _clock) = opened(BreakerConfig::count_based(10).half_open_calls(2));
    call(&b, Verdict::Success);
    assert_eq!(b.state(), State::HalfOpen);
    call(&b, Verdict::Success);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn permission_check_a_half_open_failure_reopens_it() {
    let (b, _clock) = opened(BreakerConfig::count_based(10).half_open_calls(2));
    call(&b, Verdict::Failure);
    call(&b, Verdict::Success);
    assert_eq!(b.state(), State::Open, "1 of 2 probes failed: 50 % >= 50 %");
    assert!(b.try_acquire().is_err());
}

#[test]
fn permission_check_failure_rate_101_is_refused() {
    let err = Breaker::new("account-access", BreakerConfig::default().failure_rate(101.0)).unwrap_err();
    assert_eq!(err.to_string(), "failure_rate must be in (0, 100], got 101");
    assert_eq!((err.field(), err.rule(), err.value()), ("failure_rate", "in (0, 100]", "101"));
    let err = Breaker::new("x", BreakerConfig::default().slow_call_rate(f64::NAN)).unwrap_err();
    assert_eq!(err.to_string(), "slow_call_rate must be in (0, 100], got NaN");
    let err = Breaker::new("x", BreakerConfig::default().open_for(Duration::ZERO)).unwrap_err();
    assert_eq!(err.field(), "open_for");
}

#[test]
fn time_window_forgets_failures_older_than_its_length() {
    let (b, clock) = manual(BreakerConfig::time_based(10).minimum_calls(4).failure_rate(50.0));
    call(&b, Verdict::Failure);
    call(&b, Verdict::Failure);
    call(&b, Verdict::Failure);
    assert_eq!(b.metrics().buffered_calls, 3);
    // Ten seconds later the three failures have slid out.
    clock.advance(Duration::from_secs(10));
    assert_eq!(b.metrics().buffered_calls, 0);
    call(&b, Verdict::Failure);
    call(&b, Verdict::Success);
    call(&b, Verdict::Success);
    call(&b, Verdict::Success);
    assert_eq!(b.state(), State::Closed, "1 of 4 failed in the window: 25 %");
    // Within the window everything counts: 9.9 s later the four are still in.
    clock.advance(Duration::from_millis(9_900));
    call(&b, Verdict::Failure);
    call(&b, Verdict::Failure);
    assert_eq!(b.state(), State::Open, "3 of 6 = 50 %");
}

#[test]
fn slow_calls_alone_open_it() {
    let config = BreakerConfig::count_based(4)
        .minimum_calls(4)
        .slow_call_duration(Duration::from_secs(2))
        .slow_call_rate(75.0);
    let (b, _clock) = manual(config);
    let slow = Duration::from_millis(2_001);
    b.try_acquire().unwrap().record(Verdict::Success, slow);
    b.try_acquire().unwrap().record(Verdict::Success, Duration::from_secs(2)); // not over: not slow
    b.try_acquire().unwrap().record(Verdict::Success, slow);
    assert_eq!(b.state(), State::Closed);
    b.try_acquire().unwrap().record(Verdict::Success, slow);
    assert_eq!(b.state(), State::Open, "3 of 4 successes slow: 75 %");
    let m = b.metrics();
    assert_eq!((m.failure_rate, m.slow_call_rate, m.slow, m.failed), (Some(0.0), Some(75.0), 3, 0));
}

#[test]
fn max_wait_in_half_open_forces_open() {
    let config =
        BreakerConfig::count_based(10).half_open_calls(2).max_wait_in_half_open(Duration::from_secs(30));
    let (b, clock) = opened(config);
    let _hung = b.try_acquire().expect("probe that never reports");
    assert_eq!(b.state(), State::HalfOpen);
    clock.advance(Duration::from_millis(29_999));
    let p = b.try_acquire().expect("second probe");
    drop(p); // gives its slot back
    clock.advance(Duration::from_millis(1));
    let err = b.try_acquire().unwrap_err();
    assert_eq!((err, b.state()), (State::Open, State::Open));
    // A fresh open period, then a fresh round with both slots free.
    clock.advance(Duration::from_secs(15));
    let _a = b.try_acquire().unwrap();
    let _b = b.try_acquire().unwrap();
    assert!(b.try_acquire().is_err());
}

#[test]
fn max_wait_may_close_instead() {
    let config = BreakerConfig::count_based(10)
        .half_open_calls(2)
        .max_wait_in_half_open(Duration::from_secs(30))
        .after_max_wait(State::Closed);
    let (b, clock) = opened(config);
    let hung = b.try_acquire().unwrap();
    clock.advance(Duration::from_secs(30));
    // The report arrives after the round was given up: lifetime only.
    hung.record(Verdict::Failure, FAST);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().buffered_calls, 0);
    assert_eq!(b.metrics().failed, 2);
}

#[test]
fn without_max_wait_half_open_waits_forever() {
    let (b, clock) = opened(BreakerConfig::count_based(10).half_open_calls(1));
    let hung = b.try_acquire().unwrap();
    clock.advance(Duration::from_secs(365 * 24 * 3600));
    assert!(b.try_acquire().is_err());
    assert_eq!(b.state(), State::HalfOpen);
    hung.record(Verdict::Success, FAST);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn disabled_permits_everything_and_records_nothing() {
    let (b, _clock) = manual(BreakerConfig::count_based(2).minimum_calls(1).enabled(false));
    assert_eq!(b.state(), State::Disabled);
    for _ in 0..10 {
        call(&b, Verdict::Failure);
    }
    let m = b.metrics();
    assert_eq!((m.state, m.failed, m.buffered_calls, m.failure_rate), (State::Disabled, 0, 0, None));
    // Back to CLOSED by hand; a permit issued while DISABLED still records nothing.
    let from_disabled = b.try_acquire().unwrap();
    b.transition_to(State::Closed);
    from_disabled.record(Verdict::Failure, FAST);
    assert_eq!((b.state(), b.metrics().failed), (State::Closed, 0));
}

#[test]
fn forced_open_rejects_everything() {
    let (b, clock) = manual(small());
    b.transition_to(State::ForcedOpen);
    for _ in 0..3 {
        clock.advance(Duration::from_secs(3600));
        assert_eq!(b.try_acquire().unwrap_err(), State::ForcedOpen);
    }
    assert_eq!(b.state(), State::ForcedOpen);
    assert_eq!(b.metrics().not_permitted, 3);
    b.reset();
    assert_eq!(b.state(), State::Closed);
    call(&b, Verdict::Success);
}

#[test]
fn metrics_only_measures_and_never_opens() {
    let (b, _clock) = manual(BreakerConfig::count_based(4).minimum_calls(2));
    b.transition_to(State::MetricsOnly);
    for _ in 0..20 {
        call(&b, Verdict::Failure);
    }
    let m = b.metrics();
    assert_eq!(
        (m.state, m.failure_rate, m.buffered_calls, m.failed),
        (State::MetricsOnly, Some(100.0), 4, 20)
    );
}

#[test]
fn open_backoff_grows_and_caps_and_starts_over_once_closed() {
    let config = BreakerConfig::count_based(1)
        .half_open_calls(1)
        .open_for(Duration::from_secs(10))
        .open_backoff(2.0, Duration::from_secs(35));
    let (b, clock) = manual(config);
    call(&b, Verdict::Failure);
    // Each failed probe opens it again, for 10, 20, 35 (capped), 35 seconds.
    for expected in [10u64, 20, 35, 35] {
        clock.advance(Duration::from_secs(expected) - Duration::from_millis(1));
        assert!(b.try_acquire().is_err(), "still open just before {expected} s");
        clock.advance(Duration::from_millis(1));
        call(&b, Verdict::Failure);
        assert_eq!(b.state(), State::Open);
    }
    // A successful probe closes it and the backoff starts over.
    clock.advance(Duration::from_secs(35));
    call(&b, Verdict::Success);
    assert_eq!(b.state(), State::Closed);
    call(&b, Verdict::Failure);
    clock.advance(Duration::from_secs(10));
    assert!(b.try_acquire().is_ok(), "10 s again after closing");
}

#[test]
fn open_deadlines_of_interleaved_breakers_never_mix() {
    // One thread, rejected in turn by two open breakers with different open
    // periods, then by a second open period of the first: each must keep its own end.
    let clock = ManualClock::new();
    let make = |name: &str, secs| {
        let config = BreakerConfig::count_based(1).half_open_calls(1).open_for(Duration::from_secs(secs));
        Breaker::with_clock(name, config, Arc::new(clock.clone())).unwrap()
    };
    let (short, long) = (make("short", 5), make("long", 50));
    call(&short, Verdict::Failure);
    call(&long, Verdict::Failure);
    for _ in 0..4 {
        clock.advance(Duration::from_secs(1));
        assert!(short.try_acquire().is_err());
        assert!(long.try_acquire().is_err());
    }
    clock.advance(Duration::from_secs(1)); // 5 s: short's period is over, long's is not
    assert!(long.try_acquire().is_err());
    let probe = short.try_acquire().expect("short is half-open");
    probe.record(Verdict::Failure, FAST); // open again, 5 s from now
    assert!(short.try_acquire().is_err());
    clock.advance(Duration::from_millis(4_999));
    assert!(short.try_acquire().is_err());
    assert!(long.try_acquire().is_err());
    clock.advance(Duration::from_millis(1));
    assert!(short.try_acquire().is_ok(), "the second period ends 5 s after it began");
    clock.advance(Duration::from_secs(40));
    assert!(long.try_acquire().is_ok());
}

#[test]
fn listeners_get_each_transition_once_and_may_call_back() {
    let (b, clock) = manual(small().half_open_calls(1));
    // (breaker, from, to, failure rate, state() seen from inside the listener)
    type Seen = (String, State, State, Option<f64>, State);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let inside = b.clone();
    b.on_transition(move |t| {
        // Calling back into the breaker from a listener must not deadlock.
        let now = inside.state();
        let _ = inside.metrics();
        sink.lock().unwrap().push((t.name().to_owned(), t.from(), t.to(), t.failure_rate(), now));
    });
    let second = Arc::new(AtomicU32::new(0));
    let count = Arc::clone(&second);
    b.on_transition(move |_| {
        count.fetch_add(1, Ordering::Relaxed);
    });
    for _ in 0..4 {
        call(&b, Verdict::Failure);
    }
    assert!(b.try_acquire().is_err());
    clock.advance(Duration::from_secs(15));
    call(&b, Verdict::Success);
    b.transition_to(State::Closed); // already CLOSED: no transition
    b.transition_to(State::ForcedOpen);
    use State::*;
    let got = seen.lock().unwrap().clone();
    let name = "account-access".to_owned();
    assert_eq!(
        got,
        [
            (name.clone(), Closed, Open, Some(100.0), Open),
            (name.clone(), Open, HalfOpen, None, HalfOpen),
            (name.clone(), HalfOpen, Closed, Some(0.0), Closed),
            (name, Closed, ForcedOpen, None, ForcedOpen),
        ]
    );
    assert_eq!(second.load(Ordering::Relaxed), 4);
}

#[test]
fn a_listener_may_change_the_state_itself() {
    let (b, _clock) = manual(small());
    let seen = recorder(&b);
    let inside = b.clone();
    b.on_transition(move |t| {
        if t.to() == State::Open {
            inside.transition_to(State::ForcedOpen);
        }
    });
    for _ in 0..4 {
        call(&b, Verdict::Failure);
    }
    use State::*;
    assert_eq!(*seen.lock().unwrap(), [(Closed, Open), (Open, ForcedOpen)]);
    assert_eq!(b.state(), ForcedOpen);
}

#[test]
fn a_panicking_listener_does_not_break_the_breaker() {
    let (b, _clock) = manual(small());
    b.on_transition(|_| panic!("listener bug"));
    let seen = recorder(&b);
    for _ in 0..4 {
        call(&b, Verdict::Failure);
    }
    b.reset();
    assert_eq!(*seen.lock().unwrap(), [(State::Closed, State::Open), (State::Open, State::Closed)]);
}

#[test]
fn a_dropped_permit_in_half_open_returns_its_slot() {
    let (b, _clock) = opened(BreakerConfig::count_based(10).half_open_calls(2));
    let a = b.try_acquire().unwrap();
    let c = b.try_acquire().unwrap();
    assert!(b.try_acquire().is_err());
    drop(a);
    let d = b.try_acquire().expect("the dropped permit's slot");
    // An explicitly ignored probe gives its slot back too.
    c.record(Verdict::Ignore, FAST);
    let e = b.try_acquire().expect("the ignored probe's slot");
    assert!(b.try_acquire().is_err());
    d.record(Verdict::Success, FAST);
    e.record(Verdict::Success, FAST);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().ignored, 2);
}

#[test]
fn a_late_report_from_an_old_closed_window_is_counted_but_not_windowed() {
    let (b, _clock) = manual(BreakerConfig::count_based(10).minimum_calls(2));
    let old = b.try_acquire().unwrap();
    b.reset();
    old.record(Verdict::Failure, FAST);
    let m = b.metrics();
    assert_eq!((m.failed, m.buffered_calls), (1, 0));
    call(&b, Verdict::Failure);
    assert_eq!(b.state(), State::Closed, "only one failure in the fresh window");
}

#[test]
fn manual_half_open_and_open() {
    let (b, clock) = manual(small().half_open_calls(1));
    b.transition_to(State::HalfOpen);
    call(&b, Verdict::Failure);
    assert_eq!(b.state(), State::Open);
    clock.advance(Duration::from_secs(15));
    b.transition_to(State::Closed);
    b.transition_to(State::Open);
    assert!(b.try_acquire().is_err());
    clock.advance(Duration::from_secs(15));
    assert_eq!(b.try_acquire().unwrap().state(), State::HalfOpen);
}

#[test]
fn breaker_is_shared_by_clones_and_debug_names_it() {
    let (b, _clock) = manual(small());
    let c = b.clone();
    c.transition_to(State::ForcedOpen);
    assert_eq!(b.state(), State::ForcedOpen);
    let shown = format!("{b:?}");
    assert!(shown.contains("account-access") && shown.contains("ForcedOpen"), "{shown}");
    assert_eq!(State::HalfOpen.as_str(), "half_open");
    assert_eq!(State::MetricsOnly.to_string(), "metrics_only");
}

// ---------------------------------------------------------------------------
// Model-based: random operations against a small reference model.
// ---------------------------------------------------------------------------

mod model {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

    /// The rules, restated as plainly as possible: windows are lists of
    /// timestamped outcomes filtered on demand, rounds are counters.
    #[derive(Debug, Clone)]
    pub struct Model {
        pub cfg: Cfg,
        pub now_ms: u64,
        pub state: State,
        pub epoch: u64,
        /// (second recorded, failed, slow), newest last.
        pub window: Vec<(u64, bool, bool)>,
        pub open_until_ms: u64,
        pub opens: u32,
        pub half_open_since: u64,
        pub taken: u32,
        pub probes: Vec<(bool, bool)>,
        pub successful: u64,
        pub failed: u64,
        pub ignored: u64,
        pub slow: u64,
        pub not_permitted: u64,
    }

    #[derive(Debug, Clone)]
    pub struct Cfg {
        pub count: Option<usize>,
        pub secs: u64,
        pub min: usize,
        pub failure_rate: f64,
        pub slow_rate: f64,
        pub slow_ms: u64,
        pub open_ms: u64,
        pub backoff: Option<(u32, u64)>,
        pub half_open: u32,
        pub max_wait_ms: u64,
    }

    impl Cfg {
        pub fn breaker_config(&self) -> BreakerConfig {
            let mut c = match self.count {
                Some(n) => BreakerConfig::count_based(n as u32),
                None => BreakerConfig::time_based(self.secs as u32),
            }
            .minimum_calls(self.min as u32)
            .failure_rate(self.failure_rate)
            .slow_call_rate(self.slow_rate)
            .slow_call_duration(Duration::from_millis(self.slow_ms))
            .open_for(Duration::from_millis(self.open_ms))
            .half_open_calls(self.half_open)
            .max_wait_in_half_open(Duration::from_millis(self.max_wait_ms));
            if let Some((mult, max_ms)) = self.backoff {
                c = c.open_backoff(f64::from(mult), Duration::from_millis(max_ms));
            }
            c
        }
    }

    impl Model {
        pub fn new(cfg: Cfg) -> Self {
            Model {
                cfg,
                now_ms: 0,
                state: State::Closed,
                epoch: 0,
                window: Vec::new(),
                open_until_ms: 0,
                opens: 0,
                half_open_since: 0,
                taken: 0,
                probes: Vec::new(),
                successful: 0,
                failed: 0,
                ignored: 0,
                slow: 0,
                not_permitted: 0,
            }
        }

        fn live_window(&self) -> Vec<(bool, bool)> {
            let now_sec = self.now_ms / 1000;
            let live: Vec<_> = match self.cfg.count {
                Some(n) => self.window.iter().rev().take(n).collect(),
                None => self.window.iter().filter(|(s, _, _)| now_sec - s < self.cfg.secs).collect(),
            };
            live.into_iter().map(|&(_, f, s)| (f, s)).collect()
        }

        fn minimum(&self) -> usize {
            match self.cfg.count {
                Some(n) => self.cfg.min.min(n),
                None => self.cfg.min,
            }
        }

        fn rates(outcomes: &[(bool, bool)]) -> (f64, f64) {
            let n = outcomes.len() as f64;
            let f = outcomes.iter().filter(|o| o.0).count() as f64;
            let s = outcomes.iter().filter(|o| o.1).count() as f64;
            (f * 100.0 / n, s * 100.0 / n)
        }

        /// `(failure rate, slow rate, buffered)` as metrics() should show them.
        pub fn view(&self) -> (Option<f64>, Option<f64>, u32) {
            let (outcomes, min) = match self.state {
                State::Closed => (self.live_window(), self.minimum()),
                State::HalfOpen => (self.probes.clone(), self.cfg.half_open as usize),
                _ => unreachable!("the model only uses closed, open, half-open"),
            };
            if outcomes.len() >= min && !outcomes.is_empty() {
                let (f, s) = Self::rates(&outcomes);
                (Some(f), Some(s), outcomes.len() as u32)
            } else {
                (None, None, outcomes.len() as u32)
            }
        }

        fn open(&mut self) {
            let mut period = self.cfg.open_ms;
            if let Some((mult, max)) = self.cfg.backoff {
                for _ in 0..self.opens {
                    period = (period * u64::from(mult)).min(max);
                }
            }
            self.opens += 1;
            self.open_until_ms = self.now_ms + period;
            self.go(State::Open);
        }

        fn go(&mut self, to: State) {
            self.epoch += 1;
            match to {
                State::Closed => {
                    self.window.clear();
                    self.opens = 0;
                }
                State::HalfOpen => {
                    self.taken = 0;
                    self.probes.clear();
                }
                _ => {}
            }
            self.state = to;
        }

        fn half_open_expired(&self) -> bool {
            self.cfg.max_wait_ms > 0 && self.now_ms >= self.half_open_since + self.cfg.max_wait_ms
        }

        /// `Some((epoch, state))` for a permit, `None` for a rejection.
        pub fn acquire(&mut self) -> Option<(u64, State)> {
            loop {
                match self.state {
                    State::Closed => return Some((self.epoch, State::Closed)),
                    State::Open if self.now_ms >= self.open_until_ms => {
                        self.half_open_since = self.now_ms;
                        self.go(State::HalfOpen);
                    }
                    State::Open => break,
                    State::HalfOpen if self.half_open_expired() => self.open(),
                    State::HalfOpen if self.taken < self.cfg.half_open => {
                        self.taken += 1;
                        return Some((self.epoch, State::HalfOpen));
                    }
                    State::HalfOpen => break,
                    _ => unreachable!(),
                }
            }
            self.not_permitted += 1;
            None
        }

        pub fn record(&mut self, permit: (u64, State), verdict: Verdict, elapsed_ms: u64) {
            let slow = verdict != Verdict::Ignore && elapsed_ms > self.cfg.slow_ms;
            let failed = verdict == Verdict::Failure;
            match verdict {
                Verdict::Success => self.successful += 1,
                Verdict::Failure => self.failed += 1,
                Verdict::Ignore => self.ignored += 1,
            }
            self.slow += u64::from(slow);
            if permit.0 != self.epoch {
                return;
            }
            match self.state {
                State::Closed => {
                    if verdict == Verdict::Ignore {
                        return;
                    }
                    self.window.push((self.now_ms / 1000, failed, slow));
                    let live = self.live_window();
                    if live.len() >= self.minimum() {
                        let (f, s) = Self::rates(&live);
                        if f >= self.cfg.failure_rate || s >= self.cfg.slow_rate {
                            self.open();
                        }
                    }
                }
                State::HalfOpen => {
                    if self.half_open_expired() {
                        self.open();
                        return;
                    }
                    if verdict == Verdict::Ignore {
                        self.taken -= 1;
                        return;
                    }
                    self.probes.push((failed, slow));
                    if self.probes.len() as u32 == self.cfg.half_open {
                        let (f, s) = Self::rates(&self.probes);
                        if f >= self.cfg.failure_rate || s >= self.cfg.slow_rate {
                            self.open();
                        } else {
                            self.go(State::Closed);
                        }
                    }
                }
                _ => unreachable!("permits are not issued while open"),
            }
        }
    }

    #[derive(Debug, Clone)]
    pub enum Op {
        Acquire,
        Record(usize, Verdict, bool),
        Drop(usize),
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let verdict = prop_oneof![Just(Verdict::Success), Just(Verdict::Failure), Just(Verdict::Ignore)];
        prop_oneof![
            4 => Just(Op::Acquire),
            4 => (any::<usize>(), verdict, any::<bool>()).prop_map(|(i, v, s)| Op::Record(i, v, s)),
            1 => any::<usize>().prop_map(Op::Drop),
            2 => prop_oneof![1u64..300, 300u64..3_000].prop_map(Op::Advance),
        ]
    }

    fn cfg() -> impl Strategy<Value = Cfg> {
        (
            prop_oneof![(1usize..6).prop_map(Some), Just(None)],
            1u64..4,
            1usize..6,
            prop_oneof![Just(25.0), Just(50.0), Just(100.0)],
            prop_oneof![Just(50.0), Just(100.0)],
            (1u64..4).prop_map(|s| s * 500),
            prop_oneof![Just(None), (2u32..4).prop_map(|m| Some((m, 4_000)))],
            1u32..4,
            prop_oneof![Just(0u64), 500u64..3_000],
        )
            .prop_map(
                |(count, secs, min, failure_rate, slow_rate, open_ms, backoff, half_open, max_wait_ms)| Cfg {
                    count,
                    secs,
                    min,
                    failure_rate,
                    slow_rate,
                    slow_ms: 100,
                    open_ms,
                    backoff,
                    half_open,
                    max_wait_ms,
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, rng_seed: RngSeed::Fixed(0x5eed), ..ProptestConfig::default() })]

        #[test]
        fn breaker_agrees_with_the_model(cfg in cfg(), ops in proptest::collection::vec(op(), 1..120)) {
            let clock = ManualClock::new();
            let breaker = Breaker::with_clock("model", cfg.breaker_config(), Arc::new(clock.clone())).unwrap();
            let mut model = Model::new(cfg);
            let mut held: Vec<(watertight::breaker::Permit<'_>, (u64, State))> = Vec::new();
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Acquire => {
                        let real = breaker.try_acquire();
                        let expected = model.acquire();
                        prop_assert_eq!(real.is_ok(), expected.is_some(), "step {}: acquire", step);
                        if let (Ok(p), Some(m)) = (real, expected) {
                            prop_assert_eq!(p.state(), m.1);
                            held.push((p, m));
                        }
                    }
                    Op::Record(i, verdict, slow) if !held.is_empty() => {
                        let (p, m) = held.remove(i % held.len());
                        let ms = if slow { 150 } else { 50 };
                        p.record(verdict, Duration::from_millis(ms));
                        model.record(m, verdict, ms);
                    }
                    Op::Drop(i) if !held.is_empty() => {
                        let (p, m) = held.remove(i % held.len());
                        drop(p);
                        model.record(m, Verdict::Ignore, 0);
                    }
                    Op::Advance(ms) => {
                        clock.advance(Duration::from_millis(ms));
                        model.now_ms += ms;
                    }
                    _ => {}
                }
                prop_assert_eq!(breaker.state(), model.state, "step {}", step);
                let m = breaker.metrics();
                prop_assert_eq!(
                    (m.successful, m.failed, m.ignored, m.slow, m.not_permitted),
                    (model.successful, model.failed, model.ignored, model.slow, model.not_permitted),
                    "step {}", step
                );
                if model.state != State::Open {
                    let (fr, sr, buffered) = model.view();
                    prop_assert_eq!((m.failure_rate, m.slow_call_rate, m.buffered_calls), (fr, sr, buffered), "step {}", step);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Stress: many threads, one breaker, half-open visited again and again.
// ---------------------------------------------------------------------------

#[test]
fn stress_probes_never_exceed_the_limit_and_every_call_is_counted() {
    use rand::{Rng, SeedableRng, rngs::SmallRng};

    const THREADS: usize = 8;
    const TOTAL: u64 = 100_000;
    const HALF_OPEN: u32 = 3;

    let clock = ManualClock::new();
    let config = BreakerConfig::count_based(10)
        .minimum_calls(5)
        .failure_rate(50.0)
        .open_for(Duration::from_millis(20))
        .half_open_calls(HALF_OPEN);
    let breaker = Breaker::with_clock("stress", config, Arc::new(clock.clone())).unwrap();

    // Transitions must arrive one by one, in order: each starts where the last ended.
    let last_to = Arc::new(Mutex::new(State::Closed));
    let half_opens = Arc::new(AtomicU64::new(0));
    let out_of_order = Arc::new(AtomicU64::new(0));
    {
        let (last_to, half_opens, out_of_order) = (last_to.clone(), half_opens.clone(), out_of_order.clone());
        breaker.on_transition(move |t| {
            let mut last = last_to.lock().unwrap();
            if t.from() != *last {
                out_of_order.fetch_add(1, Ordering::Relaxed);
            }
            *last = t.to();
            if t.to() == State::HalfOpen {
                half_opens.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    // Acquisitions are handed out in batches: the test thread moves the clock,
    // then releases the next batch once the last one has been claimed. So time
    // keeps moving for as long as anyone is calling, whatever the scheduler does.
    const BATCH: u64 = 100;
    let limit = std::time::Instant::now() + Duration::from_secs(60);
    let tickets = Arc::new(AtomicU64::new(0));
    let released = Arc::new(AtomicU64::new(0));
    let in_flight = Arc::new(AtomicU32::new(0));
    let max_in_flight = Arc::new(AtomicU32::new(0));
    let barrier = Arc::new(Barrier::new(THREADS + 1));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (breaker, barrier, tickets, released) =
                (breaker.clone(), barrier.clone(), tickets.clone(), released.clone());
            let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(0x5eed + t as u64);
                // [success, failure, ignore, dropped, rejected]
                let mut counts = [0u64; 5];
                barrier.wait();
                loop {
                    let ticket = tickets.fetch_add(1, Ordering::SeqCst);
                    if ticket >= TOTAL {
                        break;
                    }
                    while ticket >= released.load(Ordering::SeqCst) {
                        assert!(std::time::Instant::now() < limit, "the clock thread stalled");
                        std::thread::yield_now();
                    }
                    match breaker.try_acquire() {
                        Err(_) => counts[4] += 1,
                        Ok(permit) => {
                            let probe = permit.state() == State::HalfOpen;
                            if probe {
                                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                                max_in_flight.fetch_max(now, Ordering::SeqCst);
                            }
                            let roll = rng.random_range(0..100u32);
                            if probe {
                                // Hold the probe a moment so that probes overlap.
                                std::thread::yield_now();
                            }
                            // Leave the in-flight count before the slot can be freed.
                            if probe {
                                in_flight.fetch_sub(1, Ordering::SeqCst);
                            }
                            match roll {
                                0..45 => {
                                    permit.record(Verdict::Success, FAST);
                                    counts[0] += 1;
                                }
                                45..85 => {
                                    permit.record(Verdict::Failure, FAST);
                                    counts[1] += 1;
                                }
                                85..95 => {
                                    permit.record(Verdict::Ignore, FAST);
                                    counts[2] += 1;
                                }
                                _ => {
                                    drop(permit);
                                    counts[3] += 1;
                                }
                            }
                        }
                    }
                }
                counts
            })
        })
        .collect();
    barrier.wait();
    for batch in 1..=TOTAL / BATCH {
        clock.advance(Duration::from_millis(7));
        released.store(batch * BATCH, Ordering::SeqCst);
        while tickets.load(Ordering::SeqCst) < batch * BATCH {
            assert!(std::time::Instant::now() < limit, "the calling threads stalled");
            std::thread::yield_now();
        }
    }
    let mut totals = [0u64; 5];
    for h in handles {
        let counts = h.join().expect("stress thread");
        for (total, c) in totals.iter_mut().zip(counts) {
            *total += c;
        }
    }

    let m = breaker.metrics();
    assert!(
        max_in_flight.load(Ordering::SeqCst) <= HALF_OPEN,
        "{} probes in flight",
        max_in_flight.load(Ordering::SeqCst)
    );
    assert_eq!(totals.iter().sum::<u64>(), TOTAL);
    assert_eq!(m.successful, totals[0]);
    assert_eq!(m.failed, totals[1]);
    assert_eq!(m.ignored, totals[2] + totals[3]);
    assert_eq!(m.not_permitted, totals[4]);
    assert_eq!(m.successful + m.failed + m.ignored + m.not_permitted, TOTAL);
    assert!(
        half_opens.load(Ordering::Relaxed) >= 20,
        "half-open visited {} times",
        half_opens.load(Ordering::Relaxed)
    );
    assert_eq!(out_of_order.load(Ordering::Relaxed), 0, "transitions announced out of order");
    assert_eq!(*last_to.lock().unwrap(), breaker.state(), "the last announcement is the current state");
}

// ---------------------------------------------------------------- live reconfiguration

#[test]
fn reconfiguring_keeps_the_state_and_applies_new_thresholds_to_the_window() {
    let (breaker, _clock) = manual(BreakerConfig::count_based(10).minimum_calls(4).failure_rate(80.0));
    for v in [Verdict::Success, Verdict::Failure, Verdict::Failure, Verdict::Success] {
        call(&breaker, v);
    }
    assert_eq!(breaker.state(), State::Closed, "50 % is under 80 %");
    // A lower threshold applies to the calls already in the window at the next outcome.
    let lower = BreakerConfig::count_based(10).minimum_calls(4).failure_rate(50.0);
    breaker.reconfigure(lower.clone()).unwrap();
    assert_eq!(breaker.state(), State::Closed, "a reconfiguration alone decides nothing");
    assert_eq!(breaker.metrics().buffered_calls, 4, "the window is kept");
    call(&breaker, Verdict::Failure);
    assert_eq!(breaker.state(), State::Open, "3 of 5 failed, over the new 50 %");
    assert_eq!(breaker.config(), lower);
}

#[test]
fn an_open_breaker_stays_open_and_uses_the_new_open_period_next_time() {
    let (breaker, clock) = manual(
        BreakerConfig::count_based(2).minimum_calls(2).open_for(Duration::from_secs(10)).half_open_calls(1),
    );
    call(&breaker, Verdict::Failure);
    call(&breaker, Verdict::Failure);
    assert_eq!(breaker.state(), State::Open);
    breaker
        .reconfigure(
            BreakerConfig::count_based(2)
                .minimum_calls(2)
                .open_for(Duration::from_secs(1))
                .half_open_calls(1),
        )
        .unwrap();
    assert_eq!(breaker.state(), State::Open);
    clock.advance(Duration::from_secs(5));
    assert!(breaker.try_acquire().is_err(), "the current open period (10 s) is kept");
    clock.advance(Duration::from_secs(5));
    let probe = breaker.try_acquire().expect("half-open after 10 s");
    probe.record(Verdict::Failure, Duration::ZERO);
    assert_eq!(breaker.state(), State::Open);
    clock.advance(Duration::from_secs(1));
    assert!(breaker.try_acquire().is_ok(), "the next open period is the new 1 s");
}

#[test]
fn a_new_window_starts_empty_and_a_half_open_round_starts_over() {
    let (breaker, clock) = manual(
        BreakerConfig::count_based(10).minimum_calls(2).open_for(Duration::from_secs(1)).half_open_calls(3),
    );
    call(&breaker, Verdict::Success);
    breaker
        .reconfigure(BreakerConfig::time_based(5).minimum_calls(2).open_for(Duration::from_secs(1)))
        .unwrap();
    assert_eq!(breaker.metrics().buffered_calls, 0, "a new window kind starts empty");
    call(&breaker, Verdict::Failure);
    call(&breaker, Verdict::Failure);
    assert_eq!(breaker.state(), State::Open);
    clock.advance(Duration::from_secs(1));
    let first = breaker.try_acquire().expect("a probe");
    assert_eq!(breaker.state(), State::HalfOpen);
    // Two probes per round from now on; the probe in flight counts in the lifetime only.
    let two =
        BreakerConfig::time_based(5).minimum_calls(2).open_for(Duration::from_secs(1)).half_open_calls(2);
    breaker.reconfigure(two).unwrap();
    assert_eq!(breaker.state(), State::HalfOpen);
    first.record(Verdict::Failure, Duration::ZERO);
    assert_eq!(breaker.state(), State::HalfOpen, "a late probe decides nothing");
    call(&breaker, Verdict::Success);
    call(&breaker, Verdict::Success);
    assert_eq!(breaker.state(), State::Closed, "two fresh probes decide");
}

#[test]
fn disabling_and_enabling_by_reconfiguration() {
    let (breaker, _clock) = manual(small());
    breaker.reconfigure(small().enabled(false)).unwrap();
    assert_eq!(breaker.state(), State::Disabled);
    breaker.reconfigure(small()).unwrap();
    assert_eq!(breaker.state(), State::Closed);
    let err = breaker.reconfigure(small().failure_rate(0.0)).unwrap_err();
    assert_eq!(err.field(), "failure_rate");
    assert_eq!(breaker.config(), small(), "a refused configuration changes nothing");
}

#[test]
fn owned_permits_report_from_other_threads_once_each() {
    let (b, clock) = manual(small().half_open_calls(1));
    // Four failures reported on threads of their own: the window opens the breaker.
    let permits: Vec<watertight::breaker::OwnedPermit> =
        (0..4).map(|_| b.try_acquire_owned().unwrap()).collect();
    let reporters: Vec<_> = permits
        .into_iter()
        .map(|p| std::thread::spawn(move || p.record(Verdict::Failure, Duration::from_millis(1))))
        .collect();
    for r in reporters {
        r.join().unwrap();
    }
    assert_eq!(b.state(), State::Open);
    assert!(b.try_acquire_owned().is_err(), "OPEN rejects owned permits too");
    clock.advance(Duration::from_secs(15));
    // The one probe, dropped unreported on another thread: its slot comes back.
    let probe = b.try_acquire_owned().unwrap();
    assert_eq!(probe.state(), State::HalfOpen);
    assert!(b.try_acquire().is_err(), "the only probe slot is taken");
    std::thread::spawn(move || drop(probe)).join().unwrap();
    let again = b.try_acquire_owned().expect("the dropped probe's slot is free again");
    again.record(Verdict::Success, Duration::from_millis(1));
    assert_eq!(b.state(), State::Closed);
    let m = b.metrics();
    // Each permit reported once: the borrowed permit an owned one is made from reports nothing.
    assert_eq!((m.failed, m.successful, m.ignored), (4, 1, 1), "{m:?}");
}
