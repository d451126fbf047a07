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
//! 20 ns. After criterion, each pair is timed side by side: 201 pairs of
//! 2,000 calls a side, the sides in turn, and the median difference is the
//! figure (a shared machine's load falls on both sides of most pairs).
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

/// What `with` costs over `without`, per call: the median over `PAIRS`
/// back-to-back pairs of `CHUNK` calls each, the two sides in turn (which
/// goes first alternates), so that a load that comes and goes on a shared
/// machine falls on both sides of most pairs. Returns the median and the
/// quartiles of the differences, and the median of `without`.
fn paired(without: &Dependency, with: &Dependency) -> (f64, f64, f64, f64) {
    const PAIRS: usize = 201;
    const CHUNK: u32 = 2_000;
    let mut diffs = Vec::with_capacity(PAIRS);
    let mut base = Vec::with_capacity(PAIRS);
    for i in 0..PAIRS {
        let (a, b) = if i % 2 == 0 {
            let a = per_call(CHUNK, without);
            (a, per_call(CHUNK, with))
        } else {
            let b = per_call(CHUNK, with);
            (per_call(CHUNK, without), b)
        };
        diffs.push(b - a);
        base.push(a);
    }
    let median = |v: &mut Vec<f64>, q: usize| {
        v.sort_by(f64::total_cmp);
        v[v.len() * q / 4]
    };
    (median(&mut diffs, 2), median(&mut diffs, 1), median(&mut diffs, 3), median(&mut base, 2))
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

    println!(
        "\n== paired: what each costs over the path without it, ns per call (median of 201 pairs of 2,000 calls, quartiles)"
    );
    let mut all = true;
    for (label, without, with) in [
        ("shadow_passing - enforced", &p.enforced, &p.shadow_passing),
        ("shadow_refusing - breaker_off", &p.breaker_off, &p.shadow_refusing),
        ("throttle_on - enforced", &p.enforced, &p.throttle_on),
    ] {
        let (median, q1, q3, base) = paired(without, with);
        let met = median <= GOAL_NS;
        all &= met;
        println!(
            "{label}: {median:+.1} ns (quartiles {q1:+.1} to {q3:+.1}; the path without it {base:.1} ns); goal <= {GOAL_NS} ns: {}",
            report::verdict(met)
        );
    }
    println!("goals: {}", report::verdict(all));
}
