//! The throttler on a manual clock and a seeded generator: every run below
//! makes the same draws each time.

use super::*;
use crate::clock::ManualClock;

const TICK: Duration = Duration::from_millis(10);

fn throttler(config: Throttle, seed: u64) -> (Throttler, ManualClock) {
    let clock = ManualClock::new();
    (Throttler::with_clock_and_seed(config, Arc::new(clock.clone()), seed).unwrap(), clock)
}

/// What a stretch of calls came to.
#[derive(Debug, Default, Clone, Copy)]
struct Run {
    offered: u64,
    refused: u64,
    /// Calls that reached the provider.
    sent: u64,
    accepted: u64,
}

impl Run {
    fn refused_share(&self) -> f64 {
        self.refused as f64 / self.offered as f64
    }
}

/// Offers `calls` normal calls, one every `TICK`; the provider accepts the
/// `n`-th call it gets (counted from 0 over the whole test) when
/// `accepts(n)`.
fn drive(
    t: &Throttler,
    clock: &ManualClock,
    calls: u64,
    sent: &mut u64,
    accepts: impl Fn(u64) -> bool,
) -> Run {
    let mut run = Run::default();
    for _ in 0..calls {
        run.offered += 1;
        if t.refuses(Priority::Normal) {
            run.refused += 1;
        } else {
            let accepted = accepts(*sent);
            *sent += 1;
            run.sent += 1;
            run.accepted += u64::from(accepted);
            t.record(accepted);
        }
        clock.advance(TICK);
    }
    run
}

#[test]
fn a_provider_accepting_40_percent_has_a_fifth_of_the_calls_refused() {
    let (t, clock) = throttler(Throttle::new(), 40);
    let mut sent = 0;
    let two_in_five = |n: u64| n % 5 < 2;
    // The first window fills (30 s at 100 calls a second), then 90 s are measured.
    drive(&t, &clock, 3_000, &mut sent, two_in_five);
    let run = drive(&t, &clock, 9_000, &mut sent, two_in_five);
    let share = run.refused_share();
    println!("40 % accepted: refused {share:.4} of the calls after the first window: {run:?}");
    assert!((share - 0.2).abs() <= 0.03, "refused {share:.4} of the calls: {run:?}");
    // The provider sees every call not refused, and accepts 40 % of them.
    assert_eq!(run.sent, run.offered - run.refused);
    assert!((run.accepted as f64 / run.sent as f64 - 0.4).abs() < 0.001, "{run:?}");
    // The formula's value for the window the run ended on.
    let stats = t.stats();
    let formula = (stats.requests as f64 - 2.0 * stats.accepts as f64) / (stats.requests as f64 + 1.0);
    assert_eq!(stats.refuse_probability, formula);
    assert!((formula - 0.2).abs() < 0.01, "{stats:?}");
}

#[test]
fn an_outage_leaves_a_trickle_and_recovery_needs_no_open_period() {
    let (t, clock) = throttler(Throttle::new(), 7);
    let mut sent = 0;
    // 60 s of outage at 100 calls a second, in 5 s spans.
    let mut outage = Run::default();
    for span in 0..12 {
        let run = drive(&t, &clock, 500, &mut sent, |_| false);
        assert!(run.sent > 0, "span {span}: a trickle still reaches the provider: {run:?}");
        assert!(t.stats().refuse_probability < 1.0);
        if span >= 6 {
            outage.offered += run.offered;
            outage.refused += run.refused;
        }
    }
    let share = outage.refused_share();
    println!("outage: refused {share:.4} in its second half, {sent} calls reached the provider in 60 s");
    assert!(share > 0.95 && share < 1.0, "refused {share:.4} in the outage's second half: {outage:?}");

    // The provider recovers: refusals fall to none within one window (30 s).
    let mut last_refusal = None;
    for second in 0..40 {
        let run = drive(&t, &clock, 100, &mut sent, |_| true);
        if run.refused > 0 {
            last_refusal = Some(second);
        }
    }
    let last = last_refusal.expect("the outage's window still refused at first");
    println!("recovery: the last refusal {last} s after the provider recovered");
    assert!(last < 30, "the last refusal came {last} s after recovery");
    assert_eq!(t.stats().refuse_probability, 0.0);
}

#[test]
fn fewer_requests_than_the_floor_are_never_refused() {
    for (i, accepted_in_four) in [0u64, 1, 2, 4].into_iter().enumerate() {
        let accepts = move |n: u64| n % 4 < accepted_in_four;
        // 19 calls at once, under a floor of 20.
        let (t, clock) = throttler(Throttle::new(), i as u64);
        let mut sent = 0;
        let run = drive(&t, &clock, 19, &mut sent, accepts);
        assert_eq!(run.refused, 0, "{accepted_in_four} in 4 accepted: {run:?}");
        // One call every 2 s: the 30 s window never holds more than 15.
        let (t, clock) = throttler(Throttle::new(), i as u64);
        let mut sent = 0;
        for _ in 0..1_000 {
            let run = drive(&t, &clock, 1, &mut sent, accepts);
            assert_eq!(run.refused, 0, "{accepted_in_four} in 4 accepted");
            clock.advance(Duration::from_secs(2) - TICK);
        }
    }
    // The 20th request in the window lifts the floor (when it fails, all of
    // them did); the 19th does not.
    let (t, _clock) = throttler(Throttle::new(), 0);
    (0..19).for_each(|_| t.record(false));
    assert_eq!(t.stats().refuse_probability, 0.0);
    t.record(false);
    assert_eq!(t.stats().refuse_probability, 20.0 / 21.0);
}

#[test]
fn lower_priorities_are_refused_first() {
    let (t, _clock) = throttler(Throttle::new(), 3);
    (0..100).for_each(|i| t.record(i % 5 < 2));
    let p = 20.0 / 101.0;
    assert_eq!(t.stats().refuse_probability, p);
    let share = |priority| (0..20_000).filter(|_| t.refuses(priority)).count() as f64 / 20_000.0;
    let (sheddable, normal, critical) =
        (share(Priority::Sheddable), share(Priority::Normal), share(Priority::Critical));
    assert!((sheddable - f64::sqrt(p)).abs() < 0.015, "sheddable {sheddable}");
    assert!((normal - p).abs() < 0.015, "normal {normal}");
    assert!((critical - p * p).abs() < 0.015, "critical {critical}");
    assert!(sheddable > normal && normal > critical);
    // Nothing is refused while the provider accepts what it gets.
    let (t, _clock) = throttler(Throttle::new(), 3);
    (0..100).for_each(|_| t.record(true));
    assert!((0..1_000).all(|_| !t.refuses(Priority::Sheddable)));
}

#[test]
fn the_same_seed_makes_the_same_decisions() {
    let decisions = || {
        let (t, _clock) = throttler(Throttle::new(), 11);
        (0..100).for_each(|i| t.record(i % 4 == 0));
        (0..200).map(|_| t.refuses(Priority::Normal)).collect::<Vec<_>>()
    };
    let first = decisions();
    assert!(first.contains(&true) && first.contains(&false));
    assert_eq!(first, decisions());
}

#[test]
fn the_window_slides_bucket_by_bucket() {
    let (t, clock) = throttler(Throttle::new().window(Duration::from_secs(3)).buckets(3).min_requests(0), 1);
    t.record(false);
    clock.advance(Duration::from_secs(1));
    t.record(true);
    assert_eq!((t.stats().requests, t.stats().accepts), (2, 1));
    clock.advance(Duration::from_secs(2));
    assert_eq!((t.stats().requests, t.stats().accepts), (1, 1), "the first second has left");
    clock.advance(Duration::from_secs(1));
    assert_eq!(t.stats().requests, 0);
    t.record(false);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(t.stats().requests, 0, "a long quiet spell empties it");
}

#[test]
fn reconfiguring_keeps_the_counts_unless_the_window_changes() {
    let (t, _clock) = throttler(Throttle::new(), 1);
    (0..100).for_each(|i| t.record(i % 5 < 2));
    t.reconfigure(Throttle::new().k(1.5)).unwrap();
    assert_eq!(t.stats().refuse_probability, 40.0 / 101.0, "the new k on the same counts");
    t.reconfigure(Throttle::new().k(1.5).min_requests(101)).unwrap();
    assert_eq!(t.stats().refuse_probability, 0.0, "under the new floor");
    assert_eq!(t.reconfigure(Throttle::new().k(f64::NAN)).unwrap_err().field(), "throttle.k");
    assert_eq!(t.config().min_requests, 101, "a refused change changes nothing");
    t.reconfigure(Throttle::new().window(Duration::from_secs(10))).unwrap();
    assert_eq!(t.stats().requests, 0, "a new window starts empty");
    // A dependency's: off, then on again.
    t.set(None).unwrap();
    assert!(!t.is_on() && t.in_force().is_none());
    t.set(Some(Throttle::new())).unwrap();
    assert_eq!(t.in_force(), Some(Throttle::new()));
}

#[test]
fn each_bad_value_names_its_field() {
    let cases = [
        (Throttle::new().k(0.99), "throttle.k"),
        (Throttle::new().k(f64::NAN), "throttle.k"),
        (Throttle::new().k(100.5), "throttle.k"),
        (Throttle::new().window(Duration::from_millis(999)), "throttle.window"),
        (Throttle::new().window(Duration::from_secs(3601)), "throttle.window"),
        (Throttle::new().buckets(0), "throttle.buckets"),
        (Throttle::new().buckets(3601), "throttle.buckets"),
        (Throttle::new().window(Duration::from_secs(1)).buckets(101), "throttle.buckets"),
        (Throttle::new().min_requests(1_000_001), "throttle.min_requests"),
    ];
    for (config, field) in cases {
        let err = config.validate().expect_err(field);
        assert_eq!(err.field(), field, "{err}");
        assert!(Throttler::new(config).is_err());
    }
    let edges = [
        Throttle::new().k(1.0),
        Throttle::new().k(100.0),
        Throttle::new().window(Duration::from_secs(1)).buckets(100),
        Throttle::new().window(Duration::from_secs(3600)).buckets(3600),
        Throttle::new().min_requests(0),
    ];
    for config in edges {
        assert_eq!(config.validate(), Ok(()), "{config:?}");
    }
}
