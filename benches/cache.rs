//! A cache hit against the call it saves, in the same run:
//!
//! - `cache/hit`: `Cache::get_or_call` of a key whose value is fresh (a
//!   `String` key looked up as `&str`, a small `Copy` value): the map's
//!   read lock, the clock, the clone.
//! - `cache/dependency_call`: `Dependency::call` of a job that returns at
//!   once: breaker, pool hand-off, answer, outcome.
//!
//! Goal: a hit at most 100 ns, and at most a tenth of the call.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use watertight::cache::Cache;
use watertight::{CallContext, Dependency};

fn job(_: &CallContext) -> Result<u64, std::io::Error> {
    Ok(black_box(1))
}

fn shared(_: &CallContext) -> Result<u64, String> {
    Ok(black_box(1))
}

fn cache(c: &mut Criterion) {
    // The warm-up's misses come one right after another: a worker still on
    // its way back from landing the previous answer is waited for (a call
    // to an idle pool, as measured below, never waits).
    let dep = Dependency::builder("account").workers(2).max_wait(Duration::from_millis(100)).build().unwrap();
    let access: Cache<String, u64> = Cache::builder("access").capacity(10_000).build().unwrap();
    // A thousand warm keys, so the hit is not a map of one.
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in 0..1000 {
        access.get_or_call(&dep, &format!("user-{n}"), deadline, shared).unwrap();
    }
    let mut group = c.benchmark_group("cache");
    group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    group.bench_function("hit", |b| {
        b.iter(|| access.get_or_call(&dep, black_box("user-500"), deadline, shared).unwrap().value)
    });
    group.bench_function("dependency_call", |b| b.iter(|| dep.call(job).unwrap()));
    group.finish();
    let snap = access.snapshot();
    assert_eq!(snap.misses, 1000, "every measured lookup was a hit: {snap:?}");
}

criterion_group!(benches, cache);
criterion_main!(benches);
