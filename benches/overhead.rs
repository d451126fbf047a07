//! What does a call through a bulkhead cost, next to its peers, in the regimes
//! a server sees: back to back, paced (so that both sides park between
//! calls), and shared by many callers? And what does it burn in CPU?
//!
//! One short job (`x + 1`) per call, answered to the calling thread. Ids:
//!
//! - `direct`: calling the closure; the floor (back to back only).
//! - `crossbeam`: a bare bounded(64) channel to one worker thread and a
//!   reused bounded(1) reply channel; the least a thread hop can cost.
//! - `watertight_pool`: one call through a 1-worker [`Pool`] (queue 64).
//! - `watertight_pool_no_histograms`: the same with the workers' latency
//!   histograms switched off (a hidden builder flag), to show what recording
//!   them costs (back to back only).
//! - `watertight_dependency`: one call through a 1-worker [`Dependency`]
//!   (queue 64, closed breaker, deadline-aware admission).
//! - `threadpool`: the `threadpool` crate's `execute` with a crossbeam reply.
//! - `tokio_spawn_blocking`: `spawn_blocking` + `block_on` from a plain thread.
//!
//! In each group (and at each pacing) every single-caller id is built before
//! the first is measured and lives until the last is done, each with its
//! own worker thread, idle while the others run.
//!
//! Groups:
//! - `dispatch`: back to back.
//! - `dispatch_paced`: one call every 20 us, 200 us and 2 ms (the caller
//!   sleeps until the next tick, with its timer slack set to 1 us so a 20 us
//!   sleep is possible); the figure is the call's own latency. Measured in
//!   rounds: each round, every id makes a block of paced calls in turn (the
//!   order rotating), so that a drift of the machine over the run, which on
//!   a VM can move a wake-up by a quarter, lands on every id alike and not
//!   on whichever was measured last. A sample is one block.
//! - `dispatch_scale`: 1, 4, 16 and 64 caller threads sharing one
//!   `Dependency` (8 workers, queue 64), a `threadpool` of 8, and tokio's
//!   blocking pool capped at 8; figures in calls per second. In rounds too:
//!   every id at every N, about 150 ms each, per round.
//!
//! In the rounds, criterion's own line is the round's mean over all ids; the
//! lines after it are each id's median over the rounds, and the summary at
//! the end gives those.
//!
//! Beside each id's latency the bench prints its CPU per call: the process's
//! user + system time over the measured samples, divided by the calls made in
//! them, so spinning is never bought with burnt cores unnoticed (summed over
//! the threads' `/proc/self/task/*/schedstat` for `dispatch` and
//! `dispatch_paced`, whose threads all outlive a sample; from `/proc/self/stat`
//! for `dispatch_scale`, whose caller threads do not). At the end it prints
//! every figure again as one table.
//!
//! Run: `cargo bench --bench overhead` (about 100 s).

use std::cell::RefCell;
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::{Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use watertight::{Dependency, breaker::BreakerConfig, pool::Pool};

fn job(x: u64) -> u64 {
    x.wrapping_add(1)
}

/// CPU time (user + system) of the threads alive now, from
/// `/proc/self/task/*/schedstat` (the first field is the nanoseconds the
/// thread has run). Precise, but blind to threads that exit in between: used
/// where every thread of the measurement outlives it.
fn cpu_time_live_threads() -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// Process CPU time (user + system) so far, exited threads included, from
/// `/proc/self/stat`; in clock ticks of 10 ms, so only for long windows.
fn cpu_time_process() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after ')'.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // USER_HZ is 100 on Linux (`getconf CLK_TCK`).
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// One criterion call of an id: how many calls, their summed latency (or
/// wall time for `dispatch_scale`), and the CPU the process used meanwhile.
#[derive(Clone, Copy)]
struct Sample {
    calls: u64,
    time: Duration,
    cpu: Duration,
}

/// Every id's samples, for the CPU figures and the summary table.
struct Results {
    rows: Vec<(String, String, Vec<Sample>)>,
}

thread_local! {
    static CURRENT: RefCell<Vec<Sample>> = const { RefCell::new(Vec::new()) };
}

static RESULTS: Mutex<Results> = Mutex::new(Results { rows: Vec::new() });

/// Measures `calls` of `run` (which returns the time to report) with the
/// CPU used around it, and keeps the sample.
fn measured(calls: u64, run: impl FnOnce() -> Duration) -> Duration {
    measured_with(cpu_time_live_threads, calls, run)
}

fn measured_with(cpu_time: fn() -> Duration, calls: u64, run: impl FnOnce() -> Duration) -> Duration {
    let cpu0 = cpu_time();
    let time = run();
    let cpu = cpu_time().saturating_sub(cpu0);
    CURRENT.with(|c| c.borrow_mut().push(Sample { calls, time, cpu }));
    time
}

/// Files the samples of the id just measured: criterion runs its warm-up
/// first and then exactly `sample_size` samples, so the last ones are the
/// measurement.
fn file(group: &str, id: &str, sample_size: usize) {
    file_samples(group, id, CURRENT.with(|c| std::mem::take(&mut *c.borrow_mut())), sample_size);
}

/// Files `samples` of one id, of which the last `sample_size` are the
/// measurement (the ones before, criterion's warm-up).
fn file_samples(group: &str, id: &str, samples: Vec<Sample>, sample_size: usize) {
    if samples.is_empty() {
        // Filtered out on the command line.
        return;
    }
    let measured = samples[samples.len().saturating_sub(sample_size)..].to_vec();
    let row = (group.to_owned(), id.to_owned(), measured);
    println!("{:<48} {}", format!("{}/{}", row.0, row.1), describe(&row.0, &row.2));
    RESULTS.lock().unwrap().rows.push(row);
}

/// Median of the per-sample means (criterion's own median), in ns per call.
fn median_ns(samples: &[Sample]) -> f64 {
    let mut means: Vec<f64> =
        samples.iter().map(|s| s.time.as_nanos() as f64 / s.calls.max(1) as f64).collect();
    means.sort_by(f64::total_cmp);
    let n = means.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { means[n / 2] } else { (means[n / 2 - 1] + means[n / 2]) / 2.0 }
}

fn cpu_per_call_ns(samples: &[Sample]) -> f64 {
    let calls: u64 = samples.iter().map(|s| s.calls).sum();
    let cpu: Duration = samples.iter().map(|s| s.cpu).sum();
    cpu.as_nanos() as f64 / calls.max(1) as f64
}

fn describe(group: &str, samples: &[Sample]) -> String {
    let median = median_ns(samples);
    let cpu = cpu_per_call_ns(samples);
    if group == "dispatch_scale" {
        format!("{:>12.0} calls/s   cpu/call {:>9.0} ns", 1e9 / median, cpu)
    } else {
        format!("median {:>10.0} ns   cpu/call {:>9.0} ns", median, cpu)
    }
}

/// A call of one id, from one caller thread.
type Call<'a> = &'a (dyn Fn(u64) -> u64 + Sync);

/// A call through a 1-worker pool, with a generous deadline so that only the
/// mechanics are measured.
fn pool_call(pool: &Pool) -> impl Fn(u64) -> u64 + Sync + '_ {
    |x: u64| pool.call_timeout(Duration::from_secs(1), move |_ctx| Ok::<_, ()>(job(x))).unwrap()
}

/// Builds every single-caller id at once, each with its own worker thread
/// (idle until called), hands them to `f` in the order of the module docs,
/// and tears them down after it.
fn with_peers(include_extra: bool, f: impl FnOnce(&[(&str, Call<'_>)])) {
    // The bare round trip.
    let (tx, rx) = crossbeam_channel::bounded::<u64>(64);
    let (reply_tx, reply_rx) = crossbeam_channel::bounded::<u64>(1);
    let worker = thread::spawn(move || {
        while let Ok(x) = rx.recv() {
            if reply_tx.send(job(x)).is_err() {
                break;
            }
        }
    });
    let crossbeam = move |x: u64| {
        tx.send(x).unwrap();
        reply_rx.recv().unwrap()
    };
    // Queue 64, like the channel.
    let pool_with = |histograms: bool| {
        Pool::builder("bench").workers(1).queue(64).latency_histograms(histograms).build().unwrap()
    };
    let (pool, pool_no_histograms) = (pool_with(true), pool_with(false));
    // The same worker and queue behind a closed count-based breaker; a
    // queue of 64 keeps deadline-aware admission on.
    let dep = Dependency::builder("bench")
        .workers(1)
        .queue(64)
        .timeout(Duration::from_secs(1))
        .breaker(BreakerConfig::count_based(100))
        .build()
        .unwrap();
    let dep_call = |x: u64| dep.call(move |_ctx| Ok::<_, std::convert::Infallible>(job(x))).unwrap();
    let tp = threadpool::ThreadPool::new(1);
    let (tp_reply_tx, tp_reply_rx) = crossbeam_channel::bounded::<u64>(1);
    let tp_reply_tx = Mutex::new(tp_reply_tx);
    let tp_call = |x: u64| {
        let reply_tx = tp_reply_tx.lock().unwrap().clone();
        tp.execute(move || {
            let _ = reply_tx.send(job(x));
        });
        tp_reply_rx.recv().unwrap()
    };
    let rt = tokio::runtime::Builder::new_current_thread().max_blocking_threads(1).build().unwrap();
    let tokio_call = |x: u64| rt.block_on(rt.spawn_blocking(move || job(x))).unwrap();

    let (pool_call, pool_no_histograms_call) = (pool_call(&pool), pool_call(&pool_no_histograms));
    let mut ids: Vec<(&str, Call<'_>)> = vec![("crossbeam", &crossbeam), ("watertight_pool", &pool_call)];
    if include_extra {
        ids.push(("watertight_pool_no_histograms", &pool_no_histograms_call));
    }
    ids.extend([
        ("watertight_dependency", &dep_call as Call<'_>),
        ("threadpool", &tp_call),
        ("tokio_spawn_blocking", &tokio_call),
    ]);
    f(&ids);

    drop(ids);
    drop(crossbeam);
    worker.join().unwrap();
    assert!(pool.shutdown(Duration::from_secs(5)));
    assert!(pool_no_histograms.shutdown(Duration::from_secs(5)));
    assert!(dep.shutdown(Duration::from_secs(5)));
    tp.join();
}

fn dispatch(c: &mut Criterion) {
    const SAMPLES: usize = 30;
    let mut group = c.benchmark_group("dispatch");
    group.sample_size(SAMPLES).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2));
    group.bench_function("direct", |b| {
        b.iter_custom(|iters| {
            measured(iters, || {
                let t = Instant::now();
                let mut x = 0u64;
                for _ in 0..iters {
                    x = black_box(job)(black_box(x));
                }
                black_box(x);
                t.elapsed()
            })
        })
    });
    file("dispatch", "direct", SAMPLES);
    with_peers(true, |ids| {
        for &(id, call) in ids {
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    measured(iters, || {
                        let t = Instant::now();
                        let mut x = 0u64;
                        for _ in 0..iters {
                            x = call(black_box(x));
                        }
                        black_box(x);
                        t.elapsed()
                    })
                })
            });
            file("dispatch", id, SAMPLES);
        }
    });
    group.finish();
}

/// Sets this thread's timer slack (Linux), so that a sleep of 20 us is not
/// stretched to the default 50 us slack.
fn tight_timer_slack() {
    let _ = std::fs::write("/proc/thread-self/timerslack_ns", "1000");
}

fn dispatch_paced(c: &mut Criterion) {
    const ROUNDS: usize = 10;
    tight_timer_slack();
    let mut group = c.benchmark_group("dispatch_paced");
    // One criterion iteration is one round: every id in turn makes a block of
    // paced calls, the order rotating from round to round, so that whatever
    // the machine does over the seconds of a run lands on every id alike.
    // Criterion's own figure is the round's mean over all ids; each id's
    // figures (the median of its 10 blocks) are printed after it.
    group
        .sample_size(ROUNDS)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_millis(1));
    for (pace, label, block) in [
        (Duration::from_micros(20), "20us", 1_000u64),
        (Duration::from_micros(200), "200us", 1_000),
        (Duration::from_millis(2), "2ms", 200),
    ] {
        with_peers(false, |ids| {
            let mut blocks: Vec<Vec<Sample>> = vec![Vec::new(); ids.len()];
            let mut round = 0;
            group.bench_function(BenchmarkId::new("rounds", label), |b| {
                b.iter_custom(|iters| {
                    let (mut time, mut calls) = (Duration::ZERO, 0);
                    for k in 0..ids.len() {
                        let i = (round + k) % ids.len();
                        let sample = paced_block(ids[i].1, pace, block);
                        (time, calls) = (time + sample.time, calls + sample.calls);
                        blocks[i].push(sample);
                    }
                    round += 1;
                    time.mul_f64(iters as f64 / calls as f64)
                })
            });
            for (&(id, _), samples) in ids.iter().zip(blocks) {
                file_samples("dispatch_paced", &format!("{id}/{label}"), samples, ROUNDS);
            }
        });
    }
    group.finish();
}

/// One id's block: `calls` calls one `pace` apart (the caller sleeps until
/// the next tick), their summed latency and the CPU used meanwhile. Two
/// calls go first, uncounted: they follow the other ids' blocks, after a
/// longer pause than `pace`.
fn paced_block(call: Call<'_>, pace: Duration, calls: u64) -> Sample {
    let mut next = Instant::now();
    let mut x = 0u64;
    let mut paced_call = |latency: &mut Duration| {
        next += pace;
        let now = Instant::now();
        if next > now {
            thread::sleep(next - now);
        } else {
            next = now;
        }
        let t = Instant::now();
        x = call(black_box(x));
        *latency += t.elapsed();
    };
    let mut settling = Duration::ZERO;
    paced_call(&mut settling);
    paced_call(&mut settling);
    let cpu0 = cpu_time_live_threads();
    let mut time = Duration::ZERO;
    for _ in 0..calls {
        paced_call(&mut time);
    }
    let cpu = cpu_time_live_threads().saturating_sub(cpu0);
    black_box(x);
    Sample { calls, time, cpu }
}

/// Runs `per_thread` calls on each of `n` threads started together; the
/// wall time from the start to the last answer.
fn on_threads(n: usize, per_thread: u64, call: Call<'_>) -> Duration {
    let barrier = Barrier::new(n + 1);
    let start = thread::scope(|s| {
        for t in 0..n {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                let mut x = t as u64;
                for _ in 0..per_thread {
                    x = call(black_box(x));
                }
                black_box(x);
            });
        }
        barrier.wait();
        Instant::now()
    });
    start.elapsed()
}

fn dispatch_scale(c: &mut Criterion) {
    const SAMPLES: usize = 10;
    const WORKERS: usize = 8;
    let mut group = c.benchmark_group("dispatch_scale");
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(1))
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_millis(1));
    let dep = Dependency::builder("scale")
        .workers(WORKERS)
        .queue(64)
        .timeout(Duration::from_secs(5))
        .breaker(BreakerConfig::count_based(100))
        .build()
        .unwrap();
    let tp = threadpool::ThreadPool::new(WORKERS);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(WORKERS)
        .build()
        .unwrap();
    let pool = Pool::builder("scale-pool").workers(WORKERS).queue(64).build().unwrap();
    let pool_call =
        |x: u64| pool.call_timeout(Duration::from_secs(5), move |_ctx| Ok::<_, ()>(job(x))).unwrap();
    let dep_call = |x: u64| dep.call(move |_ctx| Ok::<_, std::convert::Infallible>(job(x))).unwrap();
    let tp_call = |x: u64| {
        // A reply channel per call: threadpool has no reply of its own.
        let (reply_tx, reply_rx) = crossbeam_channel::bounded::<u64>(1);
        tp.execute(move || {
            let _ = reply_tx.send(job(x));
        });
        reply_rx.recv().unwrap()
    };
    let tokio_call = |x: u64| rt.block_on(rt.spawn_blocking(move || job(x))).unwrap();
    let ids: [(&str, Call<'_>); 4] = [
        ("watertight_pool", &pool_call),
        ("watertight_dependency", &dep_call),
        ("threadpool", &tp_call),
        ("tokio_spawn_blocking", &tokio_call),
    ];
    // One criterion iteration is one round: every id at every N in turn,
    // the order of the ids rotating from round to round, so that whatever
    // the machine does over a run lands on every figure alike (the 64-caller
    // figure is compared with the 4-caller one, and each id with the others).
    // A sample runs about `SAMPLE_TIME`, sized from the id's rate in its
    // previous sample (2,000 calls in the warm-up round). Criterion's own
    // figure is the round's; each id's
    // figures (the median of its 10 samples) are printed after it.
    const SAMPLE_TIME: Duration = Duration::from_millis(150);
    const NS: [usize; 4] = [1, 4, 16, 64];
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); NS.len() * ids.len()];
    let mut round = 0;
    group.bench_function("rounds", |b| {
        b.iter_custom(|iters| {
            let (mut wall, mut calls) = (Duration::ZERO, 0);
            for (j, &n) in NS.iter().enumerate() {
                for k in 0..ids.len() {
                    let i = (round + k) % ids.len();
                    let done = &mut samples[j * ids.len() + i];
                    // The warm-up round makes 2,000 calls; the others as many as
                    // the id made in `SAMPLE_TIME` at its last rate.
                    let target = done.last().map_or(2_000, |last: &Sample| {
                        (SAMPLE_TIME.as_secs_f64() * last.calls as f64 / last.time.as_secs_f64()) as u64
                    });
                    let per_thread = target.div_ceil(n as u64).max(1);
                    let made = per_thread * n as u64;
                    let cpu0 = cpu_time_process();
                    let time = on_threads(n, per_thread, ids[i].1);
                    let cpu = cpu_time_process().saturating_sub(cpu0);
                    done.push(Sample { calls: made, time, cpu });
                    (wall, calls) = (wall + time, calls + made);
                }
            }
            round += 1;
            wall.mul_f64(iters as f64 / calls as f64)
        })
    });
    for (j, &n) in NS.iter().enumerate() {
        for (i, &(id, _)) in ids.iter().enumerate() {
            let done = std::mem::take(&mut samples[j * ids.len() + i]);
            file_samples("dispatch_scale", &format!("{id}/{n}"), done, SAMPLES);
        }
    }
    group.finish();
    assert!(dep.shutdown(Duration::from_secs(5)));
    assert!(pool.shutdown(Duration::from_secs(5)));
    tp.join();
}

/// Prints every figure once more as one table, with the ratios the goals
/// are stated in.
fn summary(_c: &mut Criterion) {
    let results = RESULTS.lock().unwrap();
    let find = |group: &str, id: &str| {
        results.rows.iter().find(|(g, i, _)| g == group && i == id).map(|(_, _, s)| s.as_slice())
    };
    let mut out = String::from("\n== summary (median ns per call | cpu ns per call) ==\n");
    for (group, id, samples) in &results.rows {
        let _ = write!(out, "{group}/{id}: {}", describe(group, samples));
        let base = match group.as_str() {
            "dispatch" => find("dispatch", "crossbeam"),
            "dispatch_paced" => {
                let pace = id.rsplit('/').next().unwrap_or("");
                find("dispatch_paced", &format!("crossbeam/{pace}"))
            }
            _ => None,
        };
        if let Some(base) = base
            && group != "dispatch_scale"
        {
            let _ = write!(
                out,
                "   {:.2}x latency, {:.2}x cpu of crossbeam",
                median_ns(samples) / median_ns(base),
                cpu_per_call_ns(samples) / cpu_per_call_ns(base)
            );
        }
        out.push('\n');
    }
    out.push_str(&goals(&find));
    println!("{out}");
}

/// The hand-off goals, each with its figure and "met" or "MISSED".
fn goals<'a>(find: &dyn Fn(&str, &str) -> Option<&'a [Sample]>) -> String {
    let mut out = String::from("\n== goals ==\n");
    let mut check = |what: String, ratio: f64, bound: f64, at_most: bool| {
        let met = if at_most { ratio <= bound } else { ratio >= bound };
        let cmp = if at_most { "<=" } else { ">=" };
        let _ = writeln!(out, "{what}: {ratio:.2}x ({cmp} {bound}x) {}", if met { "met" } else { "MISSED" });
    };
    let median = |g: &str, id: &str| find(g, id).map(median_ns);
    let cpu = |g: &str, id: &str| find(g, id).map(cpu_per_call_ns);
    // Back to back.
    if let (Some(bare), Some(pool), Some(tp), Some(tokio)) = (
        median("dispatch", "crossbeam"),
        median("dispatch", "watertight_pool"),
        median("dispatch", "threadpool"),
        median("dispatch", "tokio_spawn_blocking"),
    ) {
        check("back to back: pool / bare round trip".into(), pool / bare, 2.5, true);
        check("back to back: faster peer / pool".into(), tp.min(tokio) / pool, 3.0, false);
    }
    // Paced.
    for pace in ["20us", "200us", "2ms"] {
        let id = |name: &str| format!("{name}/{pace}");
        let (Some(bare), Some(bare_cpu)) =
            (median("dispatch_paced", &id("crossbeam")), cpu("dispatch_paced", &id("crossbeam")))
        else {
            continue;
        };
        let peer = match (
            median("dispatch_paced", &id("threadpool")),
            median("dispatch_paced", &id("tokio_spawn_blocking")),
        ) {
            (Some(a), Some(b)) => a.min(b),
            _ => continue,
        };
        for (name, bound) in [("watertight_pool", 1.15), ("watertight_dependency", 1.25)] {
            let (Some(t), Some(c)) = (median("dispatch_paced", &id(name)), cpu("dispatch_paced", &id(name)))
            else {
                continue;
            };
            check(format!("paced {pace}: {name} / bare round trip"), t / bare, bound, true);
            check(format!("paced {pace}: {name} / faster peer"), t / peer, 1.0, true);
            check(format!("paced {pace}: {name} cpu per call / bare's"), c / bare_cpu, 1.5, true);
        }
    }
    // Scale: throughput is the inverse of the median time per call.
    let rate = |id: &str, n: usize| median("dispatch_scale", &format!("{id}/{n}")).map(|ns| 1e9 / ns);
    for name in ["watertight_pool", "watertight_dependency"] {
        if let (Some(at4), Some(at64)) = (rate(name, 4), rate(name, 64)) {
            check(format!("scale: {name} 64 callers / 4 callers"), at64 / at4, 0.75, false);
        }
        for n in [1, 4, 16, 64] {
            if let (Some(own), Some(tp), Some(tokio)) =
                (rate(name, n), rate("threadpool", n), rate("tokio_spawn_blocking", n))
            {
                check(format!("scale: {name} at {n} / faster peer"), own / tp.max(tokio), 1.0, false);
            }
        }
    }
    out
}

/// What a `Dependency` call does on the caller's thread beyond a pool call,
/// piece by piece (each on its own, single-threaded): one clock read (it makes
/// two more than the pool: its own `now` before submitting, since the pool
/// reads again, and `ended` after the answer), the breaker's acquire and
/// record on a CLOSED count window, and one sample into its call-time
/// histogram (two relaxed atomic adds, as every sample).
/// `histogram_record_pair` is what a pool worker records per call (queue wait
/// and run time), after the answer;
/// `histograms_per_call` is all three samples a call records.
fn dependency_parts(c: &mut Criterion) {
    let mut group = c.benchmark_group("dependency_parts");
    group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(1));
    group.bench_function("instant_now", |b| b.iter(Instant::now));
    let breaker = watertight::breaker::Breaker::new("parts", BreakerConfig::count_based(100)).unwrap();
    group.bench_function("breaker_acquire_record", |b| {
        b.iter(|| {
            if let Ok(permit) = breaker.try_acquire() {
                permit.record(watertight::Verdict::Success, black_box(Duration::from_micros(3)));
            }
        })
    });
    let h = watertight::histogram::LatencyHistogram::new(Duration::from_secs(30));
    let now = Instant::now();
    group.bench_function("histogram_record", |b| {
        b.iter(|| h.record_at(black_box(Duration::from_micros(7)), now))
    });
    let (queue_wait, run) = (
        watertight::histogram::LatencyHistogram::new(Duration::from_secs(30)),
        watertight::histogram::LatencyHistogram::new(Duration::from_secs(30)),
    );
    group.bench_function("histogram_record_pair", |b| {
        b.iter(|| {
            queue_wait.record_at(black_box(Duration::from_micros(7)), now);
            run.record_at(black_box(Duration::from_micros(1)), now);
        })
    });
    group.bench_function("histograms_per_call", |b| {
        b.iter(|| {
            queue_wait.record_at(black_box(Duration::from_micros(7)), now);
            run.record_at(black_box(Duration::from_micros(1)), now);
            h.record_at(black_box(Duration::from_micros(9)), now);
        })
    });
    group.finish();
}

criterion_group!(benches, dispatch, dispatch_paced, dispatch_scale, dependency_parts, summary);
criterion_main!(benches);
