//! Calls per second of a pool, a Dependency, a threadpool or tokio's
//! blocking pool (8 workers each, queue 64) shared by N caller threads, in one
//! process and nothing else: a target for `perf stat` and `perf record`,
//! which the criterion bench (`dispatch_scale`) is too busy to be.
//!
//! ```text
//! cargo build --release --example hand_off_probe
//! perf stat -e sched:sched_wakeup,context-switches target/release/examples/hand_off_probe pool 16 200000
//! ```
//!
//! Arguments: `pool | dep | threadpool | tokio`, the number of callers, the
//! number of calls in all.

use std::convert::Infallible;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use watertight::{Dependency, breaker::BreakerConfig, pool::Pool};

const WORKERS: usize = 8;

fn job(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(31))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (kind, callers, calls) = match args.as_slice() {
        [kind, callers, calls] => match (callers.parse::<usize>(), calls.parse::<u64>()) {
            (Ok(n), Ok(c)) if n > 0 && c > 0 => (kind.as_str(), n, c),
            _ => return usage("callers and calls must be whole numbers above 0"),
        },
        _ => return usage("three arguments"),
    };
    let per_caller = calls.div_ceil(callers as u64);
    let call: Box<dyn Fn(u64) + Sync> = match kind {
        "pool" => {
            let pool = Pool::builder("probe").workers(WORKERS).queue(64).build().expect("valid pool");
            Box::new(move |x| {
                pool.call_timeout(Duration::from_secs(5), move |_| Ok::<_, Infallible>(job(x)))
                    .expect("answered");
            })
        }
        "dep" => {
            let dep = Dependency::builder("probe")
                .workers(WORKERS)
                .queue(64)
                .timeout(Duration::from_secs(5))
                .breaker(BreakerConfig::count_based(100))
                .build()
                .expect("valid dependency");
            Box::new(move |x| {
                dep.call(move |_| Ok::<_, Infallible>(job(x))).expect("answered");
            })
        }
        "threadpool" => {
            let tp = threadpool::ThreadPool::new(WORKERS);
            Box::new(move |x| {
                // A reply channel per call: threadpool has no reply of its own.
                let (tx, rx) = crossbeam_channel::bounded::<u64>(1);
                tp.execute(move || {
                    let _ = tx.send(job(x));
                });
                rx.recv().expect("answered");
            })
        }
        "tokio" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .max_blocking_threads(WORKERS)
                .build()
                .expect("runtime");
            Box::new(move |x| {
                rt.block_on(rt.spawn_blocking(move || job(x))).expect("answered");
            })
        }
        other => return usage(&format!("unknown kind {other:?}")),
    };
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..callers {
            s.spawn(|| {
                for x in 0..per_caller {
                    call(x);
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let done = per_caller * callers as u64;
    println!("{kind} callers={callers}: {done} calls, {:.0} calls/s", done as f64 / elapsed.as_secs_f64());
    ExitCode::SUCCESS
}

fn usage(why: &str) -> ExitCode {
    eprintln!("hand_off_probe: {why}\nusage: hand_off_probe pool|dep|threadpool|tokio CALLERS CALLS");
    ExitCode::from(2)
}
