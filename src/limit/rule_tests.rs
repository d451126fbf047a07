//! The rule's unit tests. Each drives it on a [`ManualClock`] through a small
//! closed-loop simulation: callers always waiting, so as many calls are in
//! flight as the limit admits, each answered after what the simulated provider
//! says for the concurrency it was issued at. No sleeps, no threads.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;
use crate::clock::{Clock, ManualClock};

const MAX: usize = 16;
const TIMEOUT: Duration = Duration::from_secs(3);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `n` successes of `latency`, each issued at `in_flight` and 5 ms after the last.
fn successes(r: &mut Rule, clock: &ManualClock, n: usize, latency: Duration, in_flight: usize) {
    for _ in 0..n {
        r.on_success(latency, clock.now(), in_flight);
        clock.advance(ms(5));
    }
}

/// How the simulated provider answers one call.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Ok(Duration),
    /// No answer: the call times out at [`TIMEOUT`].
    TimedOut,
}

/// A provider that serves `capacity` calls at once, each for `service`, the
/// rest waiting: latency = service * max(1, in_flight / capacity).
fn saturated(capacity: usize, service: Duration) -> impl FnMut(usize) -> Answer {
    move |c| Answer::Ok(service.mul_f64((c as f64 / capacity as f64).max(1.0)))
}

/// A provider as fast whatever the load.
fn uniform(latency: Duration) -> impl FnMut(usize) -> Answer {
    move |_| Answer::Ok(latency)
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Flight {
    done: Instant,
    issued: Instant,
    in_flight: usize,
    latency: Option<Duration>,
}

/// The rule, its clock and the calls in flight.
struct Sim {
    rule: Rule,
    clock: ManualClock,
    flights: BinaryHeap<Reverse<Flight>>,
    remeasured: Vec<(Duration, Duration)>,
}

/// What one phase of a simulation saw.
#[derive(Debug, Default)]
struct Phase {
    /// The limit after each answer, with the time since the phase began.
    limits: Vec<(Duration, usize)>,
    successes: u64,
    failures: u64,
}

impl Phase {
    /// The limits seen from `from` on, within the phase.
    fn limits_after(&self, from: Duration) -> impl Iterator<Item = usize> + '_ {
        self.limits.iter().filter(move |(t, _)| *t >= from).map(|&(_, l)| l)
    }

    /// The share of time from `from` to the end of the phase spent with the
    /// limit at `at` (each limit holds until the next answer).
    fn time_share(&self, from: Duration, at: usize) -> f64 {
        let points: Vec<_> = self.limits.iter().filter(|(t, _)| *t >= from).collect();
        let (mut on, mut all) = (0.0, 0.0);
        for w in points.windows(2) {
            let span = (w[1].0 - w[0].0).as_secs_f64();
            all += span;
            if w[0].1 == at {
                on += span;
            }
        }
        if all == 0.0 { 0.0 } else { on / all }
    }
}

impl Sim {
    fn new(config: AdaptiveLimit) -> Sim {
        config.validate().unwrap();
        Sim {
            rule: Rule::new(&config, MAX),
            clock: ManualClock::new(),
            flights: BinaryHeap::new(),
            remeasured: Vec::new(),
        }
    }

    /// Runs for `length` against `provider`, keeping the limit filled.
    fn run(&mut self, length: Duration, mut provider: impl FnMut(usize) -> Answer) -> Phase {
        let start = self.clock.now();
        let end = start + length;
        let mut phase = Phase::default();
        loop {
            let now = self.clock.now();
            while self.flights.len() < self.rule.limit() {
                let in_flight = self.flights.len() + 1;
                let (latency, took) = match provider(in_flight) {
                    Answer::Ok(d) => (Some(d), d),
                    Answer::TimedOut => (None, TIMEOUT),
                };
                self.flights.push(Reverse(Flight { done: now + took, issued: now, in_flight, latency }));
            }
            let Some(Reverse(next)) = self.flights.peek() else { break };
            if next.done > end {
                self.clock.advance(end - now);
                break;
            }
            let Reverse(f) = self.flights.pop().unwrap();
            self.clock.advance(f.done - now);
            match f.latency {
                Some(latency) => {
                    phase.successes += 1;
                    if let BaselineChange::Remeasured { from, to } =
                        self.rule.on_success(latency, f.issued, f.in_flight)
                    {
                        self.remeasured.push((from, to));
                    }
                }
                None => {
                    phase.failures += 1;
                    self.rule.on_failure();
                }
            }
            phase.limits.push((f.done - start, self.rule.limit()));
        }
        phase
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn starts_at_the_maximum_and_stays_there_while_healthy() {
    let mut sim = Sim::new(AdaptiveLimit::new());
    assert_eq!(sim.rule.limit(), MAX);
    let healthy = sim.run(secs(10), uniform(ms(5)));
    assert!(healthy.limits.iter().all(|&(_, l)| l == MAX), "{:?}", &healthy.limits[..50]);
    let no_load = sim.rule.no_load().unwrap();
    assert!(no_load >= ms(4) && no_load <= ms(6), "{no_load:?}");
}

#[test]
fn a_saturated_provider_settles_the_limit_at_its_capacity() {
    // Four at once, 125 ms each: 16 calls take 500 ms, 4 take 125 ms, and the
    // provider serves 32 a second either way.
    let mut sim = Sim::new(AdaptiveLimit::new());
    sim.run(secs(5), uniform(ms(5)));
    let brownout = sim.run(secs(60), saturated(4, ms(125)));
    let settled: Vec<usize> = brownout.limits_after(secs(5)).collect();
    assert!(settled.iter().all(|l| (4..=5).contains(l)), "{settled:?}");
    let at_capacity = brownout.time_share(secs(5), 4);
    assert!(at_capacity >= 0.7, "the limit sat at the capacity only {at_capacity:.2} of the time");
    // Goodput: at least 0.9 of what the provider can serve.
    let rate = brownout.successes as f64 / 60.0;
    assert!(rate >= 0.9 * 32.0, "{rate:.1} calls/s");
    // The no-load latency is the provider's service time, not its queue.
    let no_load = sim.rule.no_load().unwrap();
    assert!(no_load >= ms(120) && no_load <= ms(135), "{no_load:?}");
    assert_eq!(sim.remeasured.len(), 1, "{:?}", sim.remeasured);
}

#[test]
fn the_step_is_cut_at_the_first_slow_answer_and_halved_per_round_trip() {
    let mut sim = Sim::new(AdaptiveLimit::new());
    sim.run(secs(5), uniform(ms(5)));
    let onset = sim.run(secs(3), saturated(4, ms(125)));
    // The first answers are the healthy calls issued before the step; the
    // first 500 ms one halves the limit, and at most a halving per round trip.
    let changes: Vec<usize> = onset.limits.iter().map(|&(_, l)| l).collect();
    let first_cut = changes.iter().position(|&l| l < MAX).expect("a cut");
    assert_eq!(changes[first_cut], MAX / 2, "{changes:?}");
    assert!(changes.windows(2).all(|w| w[1] >= w[0] / 2), "{changes:?}");
    let floor = onset.limits.iter().find(|&&(_, l)| l == 2).map(|&(t, _)| t).expect("at the minimum");
    assert!(floor < ms(1500), "the minimum only after {floor:?}: {changes:?}");
}

#[test]
fn a_long_saturation_does_not_let_the_limit_drift_back_up() {
    // Ten minutes, some 19,000 answers, far more than the long window of 500
    // that would carry a plain long-term average of the latency to 500 ms.
    let mut sim = Sim::new(AdaptiveLimit::new());
    sim.run(secs(5), uniform(ms(5)));
    let incident = sim.run(secs(600), saturated(4, ms(125)));
    assert!(incident.successes > 18_000, "{}", incident.successes);
    let worst = incident.limits_after(secs(5)).max().unwrap();
    assert!(worst <= 5, "the limit drifted up to {worst}");
    assert!(incident.time_share(secs(5), 4) >= 0.7);
    let no_load = sim.rule.no_load().unwrap();
    assert!(no_load <= ms(135), "the no-load latency crept up to {no_load:?}");
}

#[test]
fn recovery_returns_the_limit_to_the_maximum() {
    let mut sim = Sim::new(AdaptiveLimit::new());
    sim.run(secs(5), uniform(ms(5)));
    let brownout = sim.run(secs(30), saturated(4, ms(125)));
    assert!(brownout.limits_after(secs(25)).all(|l| l <= 5));
    let after = sim.run(secs(10), uniform(ms(5)));
    let back = after.limits.iter().find(|&&(_, l)| l == MAX).map(|&(t, _)| t).expect("back to the maximum");
    // The calls issued in the brownout come back first (125 ms), then the
    // latency falls and the knee is forgotten: some tens of 5 ms answers.
    assert!(back < ms(500), "back to the maximum after {back:?}");
    let dips: Vec<_> = after.limits.iter().filter(|&&(t, l)| t >= back && l < MAX).take(20).collect();
    assert!(dips.is_empty(), "{dips:?}");
    assert!(sim.rule.no_load().unwrap() <= ms(6), "{:?}", sim.rule.no_load());
}

#[test]
fn a_uniformly_slower_provider_that_times_out_is_held_at_the_minimum() {
    // 2 s whatever the load, and every third call times out.
    let mut sim = Sim::new(AdaptiveLimit::new());
    sim.run(secs(5), uniform(ms(5)));
    let mut n = 0u64;
    let incident = sim.run(secs(120), move |_| {
        n += 1;
        if n.is_multiple_of(3) { Answer::TimedOut } else { Answer::Ok(secs(2)) }
    });
    assert!(incident.failures > 20, "{}", incident.failures);
    assert!(incident.limits_after(secs(20)).all(|l| l == 2), "{:?}", incident.limits);
}

#[test]
fn a_uniformly_slower_provider_is_remeasured_and_gets_the_limit_back() {
    // 500 ms whatever the load, no failures: not a queue, so fewer calls at
    // once would serve fewer and hold none of them shorter. The limit falls to
    // the minimum, finds the latency no lower there, takes it as the no-load
    // latency and climbs back.
    let mut sim = Sim::new(AdaptiveLimit::new());
    sim.run(secs(5), uniform(ms(5)));
    let incident = sim.run(secs(60), uniform(ms(500)));
    assert!(incident.limits.iter().any(|&(_, l)| l == 2), "it fell to the minimum first");
    assert!(incident.limits_after(secs(30)).all(|l| l == MAX), "{:?}", incident.limits);
    assert_eq!(sim.remeasured.len(), 1);
    let (from, to) = sim.remeasured[0];
    assert!(from <= ms(6) && to == ms(500), "{from:?} -> {to:?}");
}

#[test]
fn without_relearning_a_saturated_provider_keeps_the_minimum() {
    let mut sim = Sim::new(AdaptiveLimit::new().relearn_after(Duration::ZERO));
    sim.run(secs(5), uniform(ms(5)));
    let brownout = sim.run(secs(120), saturated(4, ms(125)));
    assert!(brownout.limits_after(secs(5)).all(|l| l == 2));
    assert!(sim.remeasured.is_empty());
    assert!(sim.rule.no_load().unwrap() <= ms(6));
}

#[test]
fn the_remeasure_waits_for_relearn_after() {
    let mut sim = Sim::new(AdaptiveLimit::new().relearn_after(secs(20)));
    sim.run(secs(5), uniform(ms(5)));
    let brownout = sim.run(secs(60), saturated(4, ms(125)));
    // Some 2 s to reach the minimum, then 20 s there.
    assert!(brownout.limits.iter().filter(|(t, _)| *t >= secs(3) && *t < secs(21)).all(|&(_, l)| l == 2));
    assert!(brownout.limits_after(secs(35)).all(|l| (4..=5).contains(&l)));
}

#[test]
fn failures_and_timeouts_cut_multiplicatively() {
    let mut r = Rule::new(&AdaptiveLimit::new().min_limit(1), MAX);
    let mut expect = MAX as f64;
    for _ in 0..8 {
        r.on_failure();
        expect *= 0.8;
        assert_eq!(r.limit(), expect.floor() as usize);
    }
    // 16 * 0.8^8 = 2.68; four more cuts reach the floor and stay there.
    for _ in 0..20 {
        r.on_failure();
    }
    assert_eq!(r.limit(), 1);
}

#[test]
fn growth_waits_for_a_run_of_successes_after_a_failure() {
    let clock = ManualClock::new();
    let mut r = Rule::new(&AdaptiveLimit::new(), MAX);
    successes(&mut r, &clock, 20, ms(5), 4);
    r.on_failure();
    let cut = r.limit();
    assert_eq!(cut, 12);
    for _ in 0..9 {
        r.on_success(ms(5), clock.now(), 4);
        clock.advance(ms(5));
        assert_eq!(r.limit(), cut, "no growth before short_window successes");
    }
    r.on_success(ms(5), clock.now(), 4);
    assert!(r.limit() > cut);
}

#[test]
fn a_moderate_rise_within_tolerance_does_not_cut() {
    let mut sim = Sim::new(AdaptiveLimit::new());
    sim.run(secs(5), uniform(ms(10)));
    let rise = sim.run(secs(30), uniform(ms(11)));
    assert!(rise.limits.iter().all(|&(_, l)| l == MAX));
}

#[test]
fn a_rise_while_the_limit_is_not_half_used_does_not_cut() {
    let clock = ManualClock::new();
    let mut r = Rule::new(&AdaptiveLimit::new(), MAX);
    successes(&mut r, &clock, 200, ms(5), 4);
    successes(&mut r, &clock, 100, ms(40), MAX / 2 - 1);
    assert_eq!(r.limit(), MAX);
    // The same latency with the limit in use is cut.
    r.on_success(ms(40), clock.now(), MAX / 2);
    assert!(r.limit() < MAX);
    assert!(r.no_load().unwrap() <= ms(6), "the no-load latency never took the rise in");
}

#[test]
fn calls_issued_before_a_cut_do_not_cut_again() {
    let clock = ManualClock::new();
    let mut r = Rule::new(&AdaptiveLimit::new(), MAX);
    successes(&mut r, &clock, 50, ms(5), 4);
    // Sixteen calls issued together, all answered slowly.
    let issued = clock.now();
    clock.advance(ms(500));
    for c in (1..=MAX).rev() {
        r.on_success(ms(500), issued, c);
    }
    assert_eq!(r.limit(), MAX / 2, "one cut for the whole round");
    // The next round, issued after the cut, cuts again.
    let issued = clock.now();
    clock.advance(ms(500));
    r.on_success(ms(500), issued, MAX / 2);
    assert_eq!(r.limit(), MAX / 4);
}

#[test]
fn zero_latency_samples_are_harmless() {
    // A zero-latency answer takes no time, so the simulation would never end:
    // feed the rule directly.
    let mut sim = Sim::new(AdaptiveLimit::new());
    let clock = ManualClock::new();
    for _ in 0..50 {
        sim.rule.on_success(Duration::ZERO, clock.now(), MAX);
        sim.rule.on_success(ms(1), clock.now(), MAX);
        clock.advance(ms(1));
    }
    assert!((2..=MAX).contains(&sim.rule.limit()));
    assert!(sim.rule.short().unwrap() > Duration::ZERO);
}
