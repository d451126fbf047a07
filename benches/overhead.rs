//! What does a call through a bulkhead cost, next to its peers?
//!
//! One group, `dispatch`, one short job (`x + 1`) per iteration, answered to
//! the calling thread:
//!
//! - `direct`: calling the closure; the floor.
//! - `crossbeam_pingpong`: a bare bounded(64) channel to one worker thread and
//!   a reused bounded(1) reply channel; the least a thread hop can cost.
//! - `watertight_pool`: one call through a 1-worker [`Pool`] with a deadline:
//!   allocation, deadline checks, reply slot, counters, panic catching.
//! - `watertight_dependency`: one call through a 1-worker [`Dependency`]:
//!   the pool call plus breaker permit and record, deadline-aware admission,
//!   service-time sampling, clock reads and outcome counters.
//! - `threadpool`: the `threadpool` crate's `execute` with a crossbeam reply.
//! - `tokio_spawn_blocking`: tokio's blocking pool, `spawn_blocking` +
//!   `block_on` from this plain thread on a current-thread runtime.
//!
//! Run briefly: `cargo bench --bench overhead -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::thread;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use watertight::{BreakerConfig, Dependency, Pool};

fn dispatch(c: &mut Criterion) {
    let mut group = c.benchmark_group("dispatch");
    let job = |x: u64| x.wrapping_add(1);

    group.bench_function("direct", |b| {
        let mut x = 0u64;
        b.iter(|| {
            x = black_box(job)(black_box(x));
            x
        })
    });

    {
        let (tx, rx) = crossbeam_channel::bounded::<u64>(64);
        let (reply_tx, reply_rx) = crossbeam_channel::bounded::<u64>(1);
        let worker = thread::spawn(move || {
            while let Ok(x) = rx.recv() {
                if reply_tx.send(job(x)).is_err() {
                    break;
                }
            }
        });
        group.bench_function("crossbeam_pingpong", |b| {
            let mut x = 0u64;
            b.iter(|| {
                tx.send(black_box(x)).unwrap();
                x = reply_rx.recv().unwrap();
                x
            })
        });
        drop(tx);
        worker.join().unwrap();
    }

    {
        // Queue 64, like the ping-pong channel; the deadline is generous so
        // that only the mechanics are measured.
        let pool = Pool::builder("bench").workers(1).queue(64).build().unwrap();
        group.bench_function("watertight_pool", |b| {
            let mut x = 0u64;
            b.iter(|| {
                let y = black_box(x);
                x = pool.call_timeout(Duration::from_secs(1), move |_ctx| Ok::<_, ()>(job(y))).unwrap();
                x
            })
        });
        assert!(pool.shutdown(Duration::from_secs(5)));
    }

    {
        // The same worker and queue as `watertight_pool`, behind a closed
        // count-based breaker; a queue of 64 keeps deadline-aware admission on.
        let dep = Dependency::builder("bench")
            .workers(1)
            .queue(64)
            .timeout(Duration::from_secs(1))
            .breaker(BreakerConfig::count_based(100))
            .build()
            .unwrap();
        group.bench_function("watertight_dependency", |b| {
            let mut x = 0u64;
            b.iter(|| {
                let y = black_box(x);
                x = dep.call(move |_ctx| Ok::<_, std::convert::Infallible>(job(y))).unwrap();
                x
            })
        });
        assert!(dep.shutdown(Duration::from_secs(5)));
    }

    {
        let tp = threadpool::ThreadPool::new(1);
        let (reply_tx, reply_rx) = crossbeam_channel::bounded::<u64>(1);
        group.bench_function("threadpool", |b| {
            let mut x = 0u64;
            b.iter(|| {
                let (y, reply_tx) = (black_box(x), reply_tx.clone());
                tp.execute(move || {
                    let _ = reply_tx.send(job(y));
                });
                x = reply_rx.recv().unwrap();
                x
            })
        });
        tp.join();
    }

    {
        let rt = tokio::runtime::Builder::new_current_thread().max_blocking_threads(1).build().unwrap();
        group.bench_function("tokio_spawn_blocking", |b| {
            let mut x = 0u64;
            b.iter(|| {
                let y = black_box(x);
                x = rt.block_on(rt.spawn_blocking(move || job(y))).unwrap();
                x
            })
        });
    }

    group.finish();
}

criterion_group!(benches, dispatch);
criterion_main!(benches);
