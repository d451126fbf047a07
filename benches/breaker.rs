//! What a breaker costs on the call path, next to its peers and to the two
//! primitives it is built from.
//!
//! Group `breaker` (one thread):
//! - `watertight_closed`: `try_acquire` + `record(Success)` on a CLOSED breaker
//!   (count-based window, the system clock).
//! - `watertight_closed_owned`: the same with `try_acquire_owned` (a permit that
//!   holds the breaker by reference count).
//! - `watertight_open_reject`: `try_acquire` on an OPEN breaker, rejected.
//! - `failsafe_closed`, `failsafe_open_reject`: the same with the `failsafe`
//!   crate (`is_call_permitted` + `on_success`; a rejected `is_call_permitted`).
//! - `instant_now`: one `Instant::now()`, the floor of anything that reads time.
//! - `mutex_lock_unlock`: one uncontended `parking_lot` lock and unlock, the
//!   floor of anything that updates a shared window.
//!
//! Group `breaker_contended`: 2 and 8 threads sharing one breaker (or one
//! mutex, or one counter), each doing `iters` operations: CLOSED calls, and
//! rejections by an OPEN breaker (every request thread at once, as in an
//! incident), against failsafe and against one shared `fetch_add`, the
//! counter every OPEN rejection bumps; criterion is given the wall time
//! until all are done, so the figure is the time per operation as each thread
//! sees it while the others compete (on a 2-vCPU machine, 8 threads also
//! compete for the cores).
//!
//! Group `breaker_parts`: the primitives those paths are made of (see `parts`).
//!
//! Group `breaker_paired`: the one-thread ids the goals compare (an OPEN
//! rejection against `Instant::now()`; a CLOSED call against the mutex and
//! failsafe) again, in alternation: 40 rounds, each timing a block of every
//! id in turn (the order rotating), so that a drift of the machine during
//! the run (on a VM the clock read alone moves by a tenth between minutes)
//! lands on both sides of a ratio alike. Prints each id's median over the
//! rounds, and the ratios.
//!
//! Run: `cargo bench --bench breaker -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use failsafe::{backoff, failure_policy};
use watertight::{
    Clock, Verdict,
    breaker::{Breaker, BreakerConfig, State},
    clock::SystemClock,
};

const ELAPSED: Duration = Duration::from_millis(3);

fn closed_breaker() -> Breaker {
    Breaker::new("bench", BreakerConfig::default()).expect("valid config")
}

fn open_breaker() -> Breaker {
    let config = BreakerConfig::count_based(1).minimum_calls(1).open_for(Duration::from_secs(3600));
    let breaker = Breaker::new("bench", config).expect("valid config");
    breaker.try_acquire().expect("closed").record(Verdict::Failure, ELAPSED);
    assert_eq!(breaker.state(), State::Open);
    breaker
}

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("breaker");

    let breaker = closed_breaker();
    g.bench_function("watertight_closed", |b| {
        b.iter(|| {
            if let Ok(permit) = breaker.try_acquire() {
                permit.record(Verdict::Success, black_box(ELAPSED));
            }
        })
    });
    g.bench_function("watertight_closed_owned", |b| {
        b.iter(|| {
            if let Ok(permit) = breaker.try_acquire_owned() {
                permit.record(Verdict::Success, black_box(ELAPSED));
            }
        })
    });
    assert_eq!(breaker.state(), State::Closed);

    let breaker = open_breaker();
    g.bench_function("watertight_open_reject", |b| b.iter(|| black_box(breaker.try_acquire()).is_err()));
    assert_eq!(breaker.state(), State::Open);

    // failsafe's default policy: success rate over a time window, or consecutive failures.
    let fs = failsafe::Config::new().build();
    g.bench_function("failsafe_closed", |b| {
        b.iter(|| {
            if black_box(fs.is_call_permitted()) {
                fs.on_success();
            }
        })
    });

    let fs_open = failsafe_open();
    g.bench_function("failsafe_open_reject", |b| b.iter(|| black_box(fs_open.is_call_permitted())));

    g.bench_function("instant_now", |b| b.iter(Instant::now));

    let mutex = parking_lot::Mutex::new(0u64);
    g.bench_function("mutex_lock_unlock", |b| {
        b.iter(|| {
            let guard = mutex.lock();
            black_box(&*guard);
        })
    });
    g.finish();
}

/// A failsafe breaker opened by one failure, for an hour.
fn failsafe_open() -> failsafe::StateMachine<failure_policy::ConsecutiveFailures<backoff::Constant>, ()> {
    let policy = failure_policy::consecutive_failures(1, backoff::constant(Duration::from_secs(3600)));
    let fs_open = failsafe::Config::new().failure_policy(policy).build();
    fs_open.on_error();
    assert!(!fs_open.is_call_permitted());
    fs_open
}

/// Runs `op` `iters` times on each of `n` threads started together and
/// returns the wall time until all are done.
fn on_threads(n: usize, iters: u64, op: &(dyn Fn() + Sync)) -> Duration {
    let barrier = Barrier::new(n + 1);
    std::thread::scope(|s| {
        for _ in 0..n {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..iters {
                    op();
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // Leaving the scope joins the threads.
        start
    })
    .elapsed()
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("breaker_contended");
    for n in [2usize, 8] {
        let breaker = closed_breaker();
        let op = || {
            if let Ok(permit) = breaker.try_acquire() {
                permit.record(Verdict::Success, black_box(ELAPSED));
            }
        };
        g.bench_function(format!("watertight_closed_{n}threads"), |b| {
            b.iter_custom(|iters| on_threads(n, iters, &op))
        });

        let fs = failsafe::Config::new().build();
        let op = || {
            if black_box(fs.is_call_permitted()) {
                fs.on_success();
            }
        };
        g.bench_function(format!("failsafe_closed_{n}threads"), |b| {
            b.iter_custom(|iters| on_threads(n, iters, &op))
        });

        // Every request thread asking an open breaker at once: the incident.
        let breaker = open_breaker();
        let op = || {
            black_box(breaker.try_acquire().is_err());
        };
        g.bench_function(format!("watertight_open_reject_{n}threads"), |b| {
            b.iter_custom(|iters| on_threads(n, iters, &op))
        });
        let fs_open = failsafe_open();
        let op = || {
            black_box(fs_open.is_call_permitted());
        };
        g.bench_function(format!("failsafe_open_reject_{n}threads"), |b| {
            b.iter_custom(|iters| on_threads(n, iters, &op))
        });
        // What one shared rejection counter would cost them.
        let counter = AtomicU64::new(0);
        let op = || {
            counter.fetch_add(1, Ordering::Relaxed);
        };
        g.bench_function(format!("atomic_fetch_add_{n}threads"), |b| {
            b.iter_custom(|iters| on_threads(n, iters, &op))
        });

        let mutex = parking_lot::Mutex::new(0u64);
        let op = || {
            let mut guard = mutex.lock();
            *guard = black_box(*guard + 1);
        };
        g.bench_function(format!("mutex_lock_unlock_{n}threads"), |b| {
            b.iter_custom(|iters| on_threads(n, iters, &op))
        });
    }
    g.finish();
}

/// The pieces the two paths above are made of, to show where their floor is:
/// a CLOSED call is one lock and unlock to record (`mutex_lock_unlock` in the
/// `breaker` group), and for an owned permit two
/// reference-count updates more (`arc_clone_drop`); an OPEN reject is a clock reading, its
/// conversion to an offset from the breaker's base (`duration_since`), a comparison and one shared
/// `atomic_fetch_add`.
fn parts(c: &mut Criterion) {
    let mut g = c.benchmark_group("breaker_parts");
    let arc = Arc::new(0u64);
    g.bench_function("arc_clone_drop", |b| b.iter(|| black_box(Arc::clone(&arc))));
    let counter = AtomicU64::new(0);
    g.bench_function("atomic_fetch_add", |b| b.iter(|| counter.fetch_add(1, Ordering::Relaxed)));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    g.bench_function("dyn_clock_now", |b| b.iter(|| clock.now()));
    let (base, later) = (Instant::now(), Instant::now());
    g.bench_function("duration_since", |b| {
        b.iter(|| black_box(later).saturating_duration_since(black_box(base)))
    });
    g.finish();
}

/// Times `iters` runs of `op`, as criterion's `iter` does.
#[inline(never)]
fn timed<R>(iters: u64, mut op: impl FnMut() -> R) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        black_box(op());
    }
    start.elapsed()
}

fn paired(c: &mut Criterion) {
    const ROUNDS: usize = 40;
    const BLOCK: u64 = 500_000;
    let closed = closed_breaker();
    let open = open_breaker();
    let fs = failsafe::Config::new().build();
    let mutex = parking_lot::Mutex::new(0u64);
    let mut ids: [(&str, &mut dyn FnMut() -> Duration); 5] = [
        ("watertight_closed", &mut || {
            timed(BLOCK, || {
                if let Ok(permit) = closed.try_acquire() {
                    permit.record(Verdict::Success, black_box(ELAPSED));
                }
            })
        }),
        ("watertight_open_reject", &mut || timed(BLOCK, || open.try_acquire().is_err())),
        ("failsafe_closed", &mut || {
            timed(BLOCK, || {
                if black_box(fs.is_call_permitted()) {
                    fs.on_success();
                }
            })
        }),
        ("instant_now", &mut || timed(BLOCK, Instant::now)),
        ("mutex_lock_unlock", &mut || {
            timed(BLOCK, || {
                let guard = mutex.lock();
                black_box(&*guard);
            })
        }),
    ];
    let mut g = c.benchmark_group("breaker_paired");
    g.sample_size(10).warm_up_time(Duration::from_millis(1)).measurement_time(Duration::from_millis(1));
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); ids.len()];
    let mut round = 0;
    // A criterion sample is four rounds: 10 samples and the warm-up make 44.
    g.bench_function("rounds", |b| {
        b.iter_custom(|iters| {
            // Criterion's own figure: the mean over every id of these rounds.
            let mut total = Duration::ZERO;
            for _ in 0..4 {
                for k in 0..ids.len() {
                    let i = (round + k) % ids.len();
                    let time = (ids[i].1)();
                    ns[i].push(time.as_nanos() as f64 / BLOCK as f64);
                    total += time;
                }
                round += 1;
            }
            total.mul_f64(iters as f64 / (BLOCK as f64 * (4 * ids.len()) as f64))
        })
    });
    g.finish();
    if ns[0].is_empty() {
        // Filtered out on the command line.
        return;
    }
    // The last `ROUNDS` of each id: the ones before were criterion's warm-up.
    let median = |v: &[f64]| {
        let mut v = v[v.len().saturating_sub(ROUNDS)..].to_vec();
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    let m: Vec<f64> = ns.iter().map(|v| median(v)).collect();
    for (&(id, _), m) in ids.iter().zip(&m) {
        println!("breaker_paired/{id:<40} median {m:>7.2} ns");
    }
    println!(
        "breaker_paired: open rejection {:.2}x instant_now; closed {:.2}x mutex_lock_unlock, {:.2}x cheaper than failsafe",
        m[1] / m[3],
        m[0] / m[4],
        m[2] / m[0]
    );
    // The goals, each with "met" or "MISSED".
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!("== goals ==");
    println!("closed / mutex: {:.2}x (<= 2.5x) {}", m[0] / m[4], verdict(m[0] / m[4] <= 2.5));
    println!("failsafe / closed: {:.2}x (>= 6x) {}", m[2] / m[0], verdict(m[2] / m[0] >= 6.0));
    println!("open rejection / clock read: {:.2}x (<= 1.5x) {}", m[1] / m[3], verdict(m[1] / m[3] <= 1.5));
}

criterion_group!(benches, single_thread, contended, parts, paired);
criterion_main!(benches);
