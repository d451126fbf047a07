//! What a call costs in caller-thread mode (`Mode::CallerThread`), against what
//! it is made of and against pool mode.
//!
//! | id              | what one iteration is                                                    |
//! |-----------------|--------------------------------------------------------------------------|
//! | `bare`          | a breaker `try_acquire` + `record`, and one room seat taken + given back  |
//! | `caller_thread` | `Dependency::call` in caller-thread mode (4 permits), a job that answers at once |
//! | `pool`          | `Dependency::call` in pool mode (4 workers), the same job, back to back  |
//! | `bare_metrics`  | `bare`, plus what every call of a dependency also keeps: one more clock read, a latency histogram sample and an outcome count |
//!
//! `bare_metrics` is not a goal: it says how much of the difference is the
//! bookkeeping a dependency keeps on every call, in either mode.
//!
//! Goals, every round: `caller_thread` at most 1.2x `bare`, and at least 5x cheaper
//! than `pool`. After criterion, 5 rounds time the three alternately (each a
//! fixed count of calls), so that a drifting machine weighs on all three alike;
//! each round's ratios are printed with "met" or "MISSED".
//!
//! `cargo bench --bench caller_thread` (about 40 s).

#[path = "common/report.rs"]
#[allow(dead_code)]
mod report;

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use watertight::breaker::{Breaker, BreakerConfig};
use watertight::dependency::Mode;
use watertight::histogram::LatencyHistogram;
use watertight::pool::Room;
use watertight::{CallContext, Dependency, Verdict};

struct Parts {
    breaker: Breaker,
    semaphore: Room,
    caller: Dependency,
    pool: Dependency,
    histogram: LatencyHistogram,
    count: AtomicU64,
}

fn parts() -> Parts {
    let dep = |mode| {
        Dependency::builder("bench")
            .mode(mode)
            .workers(4)
            .timeout(Duration::from_secs(1))
            .build()
            .expect("valid")
    };
    Parts {
        breaker: Breaker::new("bare", BreakerConfig::count_based(100)).expect("valid"),
        semaphore: Room::new(4, Duration::ZERO).expect("valid"),
        caller: dep(Mode::CallerThread),
        pool: dep(Mode::Pool),
        histogram: LatencyHistogram::new(Duration::from_secs(30)),
        count: AtomicU64::new(0),
    }
}

impl Parts {
    fn bare(&self) {
        let started = Instant::now();
        let permit = self.breaker.try_acquire().expect("closed");
        let slot = self.semaphore.acquire(started + Duration::from_secs(1)).expect("free");
        black_box(&slot);
        drop(slot);
        permit.record(Verdict::Success, started.elapsed());
    }

    fn bare_metrics(&self) {
        let started = Instant::now();
        let permit = self.breaker.try_acquire().expect("closed");
        let slot = self.semaphore.acquire(started + Duration::from_secs(1)).expect("free");
        black_box(&slot);
        drop(slot);
        let ended = Instant::now();
        let took = ended.saturating_duration_since(started);
        self.histogram.record_at(took, ended);
        self.count.fetch_add(1, Ordering::Relaxed);
        permit.record(Verdict::Success, took);
    }

    fn caller(&self) {
        black_box(self.caller.call(|_: &CallContext| Ok::<_, std::io::Error>(black_box(1))).expect("ok"));
    }

    fn pool(&self) {
        black_box(self.pool.call(|_: &CallContext| Ok::<_, std::io::Error>(black_box(1))).expect("ok"));
    }
}

/// Nanoseconds per call over `n` calls of `f`.
fn per_call(n: u32, f: impl Fn()) -> f64 {
    let started = Instant::now();
    for _ in 0..n {
        f();
    }
    started.elapsed().as_nanos() as f64 / f64::from(n)
}

fn main() {
    let p = parts();
    let mut c = Criterion::default().configure_from_args();
    {
        let mut group = c.benchmark_group("caller_thread");
        group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
        group.bench_function("bare", |b| b.iter(|| p.bare()));
        group.bench_function("caller_thread", |b| b.iter(|| p.caller()));
        group.bench_function("pool", |b| b.iter(|| p.pool()));
        group.bench_function("bare_metrics", |b| b.iter(|| p.bare_metrics()));
        group.finish();
    }
    c.final_summary();

    println!("\n== rounds: ns per call (bare and caller_thread 200,000 calls, pool 20,000)");
    let mut all = true;
    for round in 1..=5 {
        let bare = per_call(200_000, || p.bare());
        let caller = per_call(200_000, || p.caller());
        let pool = per_call(20_000, || p.pool());
        let metrics = per_call(200_000, || p.bare_metrics());
        let (over, cheaper) = (caller / bare, pool / caller);
        let met = over <= 1.2 && cheaper >= 5.0;
        all &= met;
        println!(
            "round {round}: bare {bare:.1} bare_metrics {metrics:.1} caller_thread {caller:.1} pool {pool:.1}; caller/bare {over:.2}x (goal <= 1.2), caller/bare_metrics {:.2}x, pool/caller {cheaper:.1}x (goal >= 5): {}",
            caller / metrics,
            report::verdict(met)
        );
    }
    println!("goals: {}", report::verdict(all));
}
