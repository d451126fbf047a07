//! The call path as a caller feels it, one id per path, for comparing two
//! builds of the crate in alternating rounds (`scripts/call_path_paired.sh`
//! runs this bench in a worktree of the earlier commit and here, in turn):
//!
//! - `dependency/back_to_back`: `Dependency::call` of a job that returns at once.
//! - `dependency/paced_20us`, `paced_200us`, `paced_2ms`: the same, one call
//!   per period, the caller sleeping (or, under 100 us, spinning) between
//!   calls as a request thread would; only the calls are timed.
//! - `dependency/hedged`: `with().hedge().call` of the same job, with a hedge
//!   policy whose delay never comes (the hedged path's own cost).
//! - `dependency/throttled`: back to back through a dependency with the
//!   adaptive throttler on (every call accepted, so it never refuses).
//! - `breaker/closed`: `try_acquire` and `record` on a CLOSED breaker.
//! - `breaker/open`: `try_acquire` refused by an OPEN breaker.
//! - `request_pool/enter`: `RequestPool::enter` of an ordinary request and
//!   its drop, uncontended (32 threads, 2 reserved for `GET /health`).
//!
//! Uses only what every version of the API since hedging has had (the
//! request pool: since its `enter`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use watertight::breaker::{Breaker, BreakerConfig, State};
use watertight::dependency::Hedge;
use watertight::limit::Throttle;
use watertight::server::{RequestPool, Reserve, ServerConfig};
use watertight::{CallContext, Dependency, Verdict};

fn job(_: &CallContext) -> Result<u64, std::io::Error> {
    Ok(black_box(1))
}

/// Waits until `at`: sleeps while more than 100 us are left, then spins.
fn wait_until(at: Instant) {
    loop {
        let now = Instant::now();
        if now >= at {
            return;
        }
        let left = at - now;
        if left > Duration::from_micros(100) {
            std::thread::sleep(left - Duration::from_micros(80));
        } else {
            std::hint::spin_loop();
        }
    }
}

fn dependency(c: &mut Criterion) {
    let dep = Dependency::builder("path").workers(2).build().unwrap();
    let hedged =
        Dependency::builder("hedged").workers(2).hedge(Hedge::after(Duration::from_secs(5))).build().unwrap();
    let throttled = Dependency::builder("throttled").workers(2).throttle(Throttle::new()).build().unwrap();
    let mut group = c.benchmark_group("dependency");
    group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    group.bench_function("back_to_back", |b| b.iter(|| dep.call(job).unwrap()));
    group.bench_function("throttled", |b| b.iter(|| throttled.call(job).unwrap()));
    group.bench_function("hedged", |b| b.iter(|| hedged.with().hedge().call(job).unwrap()));
    for (label, pace) in [
        ("paced_20us", Duration::from_micros(20)),
        ("paced_200us", Duration::from_micros(200)),
        ("paced_2ms", Duration::from_millis(2)),
    ] {
        if pace >= Duration::from_millis(1) {
            group.sample_size(20).measurement_time(Duration::from_secs(4));
        }
        group.bench_function(label, |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut next = Instant::now() + pace;
                for _ in 0..iters {
                    wait_until(next);
                    next += pace;
                    let start = Instant::now();
                    black_box(dep.call(job).unwrap());
                    timed += start.elapsed();
                }
                timed
            })
        });
    }
    group.finish();
}

fn breaker(c: &mut Criterion) {
    let closed = Breaker::new("closed", BreakerConfig::default()).unwrap();
    let open = Breaker::new("open", BreakerConfig::default().open_for(Duration::from_secs(3600))).unwrap();
    open.transition_to(State::Open);
    let mut group = c.benchmark_group("breaker");
    group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    group.bench_function("closed", |b| {
        b.iter(|| closed.try_acquire().unwrap().record(Verdict::Success, Duration::from_micros(1)))
    });
    group.bench_function("open", |b| b.iter(|| black_box(open.try_acquire().is_err())));
    group.finish();
}

fn request_pool(c: &mut Criterion) {
    let config =
        ServerConfig::builder().reserve(Reserve::new(2).for_routes(["GET /health"])).build().unwrap();
    let pool = RequestPool::new(32, &config).unwrap();
    let mut group = c.benchmark_group("request_pool");
    group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    group.bench_function("enter", |b| {
        b.iter(|| drop(black_box(pool.enter("GET", "/search", None, &[]).unwrap())))
    });
    group.finish();
}

criterion_group!(benches, dependency, breaker, request_pool);
criterion_main!(benches);
