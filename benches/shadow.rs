//! What a shadow decision and a throttler decision add to a call: the call
//! path with a policy enforced, in shadow, and off, and with the throttler
//! on and off. Every dependency runs its calls on the caller's thread
//! (`Mode::CallerThread`, 4 permits), whose path is short enough (about
//! 150 ns) for a few nanoseconds to show; the job answers at once.
//!
//! | id                  | what one call meets                                                     |
//! |---------------------|-------------------------------------------------------------------------|
//! | `enforced`          | a CLOSED breaker, enforced: the ordinary path                            |
//! | `shadow_passing`    | the same, every policy in shadow, none refusing: the set read, no more   |
//! | `breaker_off`       | a disabled breaker (the kill switch): no breaker decision                |
//! | `shadow_refusing`   | a FORCED_OPEN breaker in shadow: every call a refusal recorded and let through |
//! | `enforced_refusing` | a FORCED_OPEN breaker, enforced: every call refused (for scale)           |
//! | `throttle_on`       | `enforced` with the adaptive throttler on, the provider healthy (never refuses) |
//!
//! Goals, every round (the issue's: a shadow or throttler decision costs at
//! most 20 ns over the path without it): `shadow_passing - enforced`,
//! `shadow_refusing - breaker_off` and `throttle_on - enforced` each at most
//! 20 ns. After criterion, 5 rounds time the pairs alternately (each a fixed
//! count of calls), so that a drifting machine weighs on both sides alike.
//!
//! `cargo bench --bench shadow` (about 40 s; `-- --measurement-time 1` for a short run).

#[path = "common/report.rs"]
#[allow(dead_code)]
mod report;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use watertight::breaker::{BreakerConfig, State};
use watertight::dependency::Mode;
use watertight::limit::Throttle;
use watertight::shadow::{Policy, Shadow};
use watertight::{CallContext, Dependency, DependencyBuilder};

const GOAL_NS: f64 = 20.0;

fn builder(name: &str) -> DependencyBuilder {
    Dependency::builder(name).mode(Mode::CallerThread).workers(4).timeout(Duration::from_secs(1))
}

struct Paths {
    enforced: Dependency,
    shadow_passing: Dependency,
    breaker_off: Dependency,
    shadow_refusing: Dependency,
    enforced_refusing: Dependency,
    throttle_on: Dependency,
}

fn paths() -> Paths {
    let all = |mut b: DependencyBuilder| {
        for policy in Shadow::all().iter() {
            b = b.shadow(policy);
        }
        b
    };
    let forced_open = |dep: Dependency| {
        dep.breaker().transition_to(State::ForcedOpen);
        dep
    };
    Paths {
        enforced: builder("enforced").build().expect("valid"),
        shadow_passing: all(builder("shadow_passing")).build().expect("valid"),
        breaker_off: builder("breaker_off")
            .breaker(BreakerConfig::default().enabled(false))
            .build()
            .expect("valid"),
        shadow_refusing: forced_open(
            builder("shadow_refusing").shadow(Policy::Breaker).build().expect("valid"),
        ),
        enforced_refusing: forced_open(builder("enforced_refusing").build().expect("valid")),
        throttle_on: builder("throttle_on").throttle(Throttle::new()).build().expect("valid"),
    }
}

fn call(dep: &Dependency) {
    black_box(dep.call(|_: &CallContext| Ok::<_, std::io::Error>(black_box(1))).is_ok());
}

/// Nanoseconds per call over `n` calls to `dep`.
fn per_call(n: u32, dep: &Dependency) -> f64 {
    let started = Instant::now();
    for _ in 0..n {
        call(dep);
    }
    started.elapsed().as_nanos() as f64 / f64::from(n)
}

fn main() {
    let p = paths();
    let mut c = Criterion::default().configure_from_args();
    {
        let mut group = c.benchmark_group("shadow");
        group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
        for (id, dep) in [
            ("enforced", &p.enforced),
            ("shadow_passing", &p.shadow_passing),
            ("breaker_off", &p.breaker_off),
            ("shadow_refusing", &p.shadow_refusing),
            ("enforced_refusing", &p.enforced_refusing),
            ("throttle_on", &p.throttle_on),
        ] {
            group.bench_function(id, |b| b.iter(|| call(dep)));
        }
        group.finish();
    }
    c.final_summary();
    assert!(
        p.shadow_refusing.snapshot().shadow_refused.get(Policy::Breaker) > 0,
        "shadow refusals were made"
    );
    assert!(p.enforced_refusing.snapshot().calls.not_permitted > 0, "refusals were made");

    const N: u32 = 200_000;
    println!("\n== rounds: ns per call, {N} calls each, the two sides of a pair in turn");
    let mut all = true;
    for round in 1..=5 {
        let enforced = per_call(N, &p.enforced);
        let passing = per_call(N, &p.shadow_passing);
        let off = per_call(N, &p.breaker_off);
        let refusing = per_call(N, &p.shadow_refusing);
        let enforced_again = per_call(N, &p.enforced);
        let throttle = per_call(N, &p.throttle_on);
        let refused = per_call(N, &p.enforced_refusing);
        let (pass, shadow, throttled) = (passing - enforced, refusing - off, throttle - enforced_again);
        let met = pass <= GOAL_NS && shadow <= GOAL_NS && throttled <= GOAL_NS;
        all &= met;
        println!(
            "round {round}: enforced {enforced:.1} shadow_passing {passing:.1} (+{pass:.1}) | breaker_off {off:.1} \
             shadow_refusing {refusing:.1} (+{shadow:.1}) | enforced {enforced_again:.1} throttle_on {throttle:.1} \
             (+{throttled:.1}) | enforced_refusing {refused:.1}; goal each + <= {GOAL_NS} ns: {}",
            report::verdict(met)
        );
    }
    println!("goals: {}", report::verdict(all));
}
