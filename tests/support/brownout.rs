//! The brownout harness, shared by `benches/brownout.rs` and `tests/brownout.rs`.
//!
//! A real loopback provider ([`FakeProvider`]) answers in 5 ms, then saturates for
//! the brownout, then answers in 5 ms again. Saturated (`Fault::Saturated`, switched
//! at run time), it serves at most 4 requests at once, 125 ms each, and the rest wait
//! their turn: its latency grows with the load, as a real brownout's does. The 16
//! requests a fixed pool keeps in flight take about 500 ms each; 4 take 125 ms, with
//! the same throughput (32 a second). So a guard that sends fewer calls at once
//! loses no goodput, which a provider slow whatever the load (`Fault::Slow`) could
//! not show: there, goodput is proportional to the threads held. 32 caller
//! threads (the request threads of a server) call it through a [`Dependency`] of 16
//! workers with a 3 s timeout, guarded one of three ways ([`Guard`]). A separate
//! caller meanwhile calls an unrelated, healthy provider through its own dependency.
//!
//! Each second it records the request threads held by the brownout dependency (a
//! caller is held from just before it enters the guard until the call returns; p50
//! and max of samples taken every 5 ms), the goodput (successful calls), the calls
//! rejected and failed, the latency of the unrelated calls, and the adaptive limit.
//!
//! The adaptive arm's dependency is built with `DependencyBuilder::adaptive_limit`.
//!
//! The file is included with `#[path]` by a test and a bench; the provider is
//! `watertight::testing`'s.
#![allow(dead_code)] // the test and the bench use different parts

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use watertight::http::WithDeadline;
use watertight::testing::{FakeProvider, Fault};
use watertight::{
    Dependency, Error,
    breaker::BreakerConfig,
    limit::{AdaptiveLimit, Limiter},
};

/// The shape of one run. Every duration is a parameter, so that a test can run a
/// scaled-down version of the bench.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The provider's latency outside the brownout.
    pub healthy: Duration,
    /// How it answers during the brownout.
    pub degraded: Fault,
    /// Healthy time before the brownout.
    pub before: Duration,
    /// How long the brownout lasts.
    pub brownout: Duration,
    /// Healthy time after it.
    pub after: Duration,
    /// Caller threads (request threads) calling the provider.
    pub callers: usize,
    /// The dependency's workers (and the adaptive limit's maximum).
    pub workers: usize,
    /// The dependency's queue.
    pub queue: usize,
    /// The dependency's timeout (each call's deadline is this after it starts).
    pub timeout: Duration,
    /// How long a caller pauses between two calls, so the load is steady traffic.
    pub think: Duration,
    /// How often the unrelated caller calls.
    pub unrelated_every: Duration,
    /// The adaptive limit's configuration.
    pub adaptive: AdaptiveLimit,
}

impl Scenario {
    /// The full scenario: 5 s healthy, 20 s saturated (4 at once, 125 ms each:
    /// about 500 ms for the fixed pool's 16 calls at once), 15 s healthy; 32
    /// callers, 16 workers, no queue, a 3 s timeout.
    pub fn full() -> Scenario {
        Scenario {
            healthy: Duration::from_millis(5),
            degraded: Fault::Saturated { capacity: 4, service: Duration::from_millis(125) },
            before: Duration::from_secs(5),
            brownout: Duration::from_secs(20),
            after: Duration::from_secs(15),
            callers: 32,
            workers: 16,
            queue: 0,
            timeout: Duration::from_secs(3),
            think: Duration::from_millis(50),
            unrelated_every: Duration::from_millis(20),
            adaptive: AdaptiveLimit::new(),
        }
    }

    /// The same with `before`, `brownout` and `after` replaced.
    pub fn scaled(before: Duration, brownout: Duration, after: Duration) -> Scenario {
        Scenario { before, brownout, after, ..Scenario::full() }
    }

    pub fn total(&self) -> Duration {
        self.before + self.brownout + self.after
    }

    /// Whole seconds covered (the last one may be partial).
    fn seconds(&self) -> usize {
        self.total().as_secs_f64().ceil() as usize
    }
}

/// How the brownout dependency is guarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// A fixed pool: the breaker opens on failures only (none happen in a brownout).
    Fixed,
    /// A fixed pool whose breaker also opens on slow calls (over 250 ms, at 50 %).
    SlowCallBreaker,
    /// A fixed pool behind the adaptive limit.
    Adaptive,
}

impl Guard {
    pub const ALL: [Guard; 3] = [Guard::Fixed, Guard::SlowCallBreaker, Guard::Adaptive];

    pub fn name(self) -> &'static str {
        match self {
            Guard::Fixed => "fixed",
            Guard::SlowCallBreaker => "slow_call_breaker",
            Guard::Adaptive => "adaptive",
        }
    }
}

/// How one call ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Ok,
    Rejected,
    Failed,
}

/// The brownout dependency, with the adaptive limit built in for that arm.
pub struct Guarded {
    dep: Dependency,
}

impl Guarded {
    pub fn build(guard: Guard, s: &Scenario) -> Guarded {
        let breaker = BreakerConfig::count_based(20).minimum_calls(10).failure_rate(50.0);
        let breaker = match guard {
            Guard::SlowCallBreaker => breaker
                .slow_call_duration(Duration::from_millis(250))
                .slow_call_rate(50.0)
                .open_for(Duration::from_secs(5))
                .half_open_calls(4),
            Guard::Fixed | Guard::Adaptive => breaker,
        };
        let mut builder = Dependency::builder(format!("brownout-{}", guard.name()))
            .workers(s.workers)
            .queue(s.queue)
            .timeout(s.timeout)
            .breaker(breaker);
        if guard == Guard::Adaptive {
            builder = builder.adaptive_limit(s.adaptive.clone());
        }
        Guarded { dep: builder.build().expect("a valid dependency") }
    }

    /// One call to `url` through the dependency (and its limit, if any).
    fn call(&self, agent: &ureq::Agent, url: &str) -> Ended {
        let (agent, url) = (agent.clone(), url.to_owned());
        ended(&self.dep.call(move |ctx: &watertight::CallContext| {
            agent.get(&url).with_deadline(ctx).call()?.body_mut().read_to_string()
        }))
    }

    /// The adaptive limit now, or the worker count without one.
    pub fn limit(&self, workers: usize) -> usize {
        self.dep.limiter().map_or(workers, Limiter::limit)
    }
}

fn ended<T, E>(result: &Result<T, Error<E>>) -> Ended {
    match result {
        Ok(_) => Ended::Ok,
        Err(e) if e.is_rejected() => Ended::Rejected,
        Err(_) => Ended::Failed,
    }
}

/// One second of a run.
#[derive(Debug, Clone, Default)]
pub struct Second {
    /// 0-based: the row covers `[second, second + 1)` s from the start.
    pub second: usize,
    pub brownout: bool,
    pub held_p50: usize,
    pub held_max: usize,
    pub goodput: u64,
    pub rejected: u64,
    pub failed: u64,
    pub unrelated_p50_ms: Option<f64>,
    pub unrelated_max_ms: Option<f64>,
    /// The lowest adaptive limit seen in the second (the worker count without one).
    pub limit_min: usize,
}

/// What one guard did over a run.
#[derive(Debug, Clone)]
pub struct Run {
    pub guard: Guard,
    pub seconds: Vec<Second>,
    /// How long after the brownout ended the limit was back at the worker count
    /// (`Some(0)` for the fixed guards; `None` if it never was).
    pub recovered_after: Option<Duration>,
}

/// The per-second CSV header, matching [`Run::csv_rows`].
pub const CSV_HEADER: &str = "guard,second,brownout,held_p50,held_max,goodput,rejected,failed,unrelated_p50_ms,unrelated_max_ms,limit_min";

impl Run {
    pub fn csv_rows(&self) -> Vec<String> {
        let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.2}"));
        self.seconds
            .iter()
            .map(|r| {
                format!(
                    "{},{},{},{},{},{},{},{},{},{},{}",
                    self.guard.name(),
                    r.second,
                    u8::from(r.brownout),
                    r.held_p50,
                    r.held_max,
                    r.goodput,
                    r.rejected,
                    r.failed,
                    opt(r.unrelated_p50_ms),
                    opt(r.unrelated_max_ms),
                    r.limit_min
                )
            })
            .collect()
    }

    /// The seconds wholly inside the brownout, less the first (the step itself).
    pub fn brownout_seconds(&self) -> impl Iterator<Item = &Second> {
        let inside: Vec<usize> = self.seconds.iter().filter(|r| r.brownout).map(|r| r.second).collect();
        let first = inside.first().copied().unwrap_or(0);
        self.seconds.iter().filter(move |r| r.brownout && r.second > first)
    }

    /// The mean over the brownout seconds of `f`.
    pub fn brownout_mean(&self, f: impl Fn(&Second) -> f64) -> f64 {
        let (sum, n) = self.brownout_seconds().fold((0.0, 0usize), |(s, n), r| (s + f(r), n + 1));
        if n == 0 { 0.0 } else { sum / n as f64 }
    }

    /// The largest `held_max` of the brownout seconds.
    pub fn brownout_held_max(&self) -> usize {
        self.brownout_seconds().map(|r| r.held_max).max().unwrap_or(0)
    }

    /// The worst unrelated-call latency of the whole run, in ms.
    pub fn unrelated_max_ms(&self) -> f64 {
        self.seconds.iter().filter_map(|r| r.unrelated_max_ms).fold(0.0, f64::max)
    }

    /// The median of the per-second unrelated p50s, in ms.
    pub fn unrelated_p50_ms(&self) -> f64 {
        let mut v: Vec<f64> = self.seconds.iter().filter_map(|r| r.unrelated_p50_ms).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    }

    /// One line of summary.
    pub fn summary(&self) -> String {
        format!(
            "{:<18} brownout: held p50 {:5.1} (max {:2}), goodput {:6.1}/s, rejected {:7.1}/s; \
             unrelated p50 {:.2} ms, max {:.1} ms; back to full limit {}",
            self.guard.name(),
            self.brownout_mean(|r| r.held_p50 as f64),
            self.brownout_held_max(),
            self.brownout_mean(|r| r.goodput as f64),
            self.brownout_mean(|r| r.rejected as f64),
            self.unrelated_p50_ms(),
            self.unrelated_max_ms(),
            self.recovered_after.map_or("never".to_owned(), |d| format!("after {d:.2?}")),
        )
    }
}

/// Per-second tallies, written by the callers and the sampler.
struct Tally {
    t0: Instant,
    goodput: Vec<AtomicU64>,
    rejected: Vec<AtomicU64>,
    failed: Vec<AtomicU64>,
    held: Mutex<Vec<Vec<usize>>>,
    limit_min: Vec<AtomicUsize>,
    unrelated: Mutex<Vec<Vec<Duration>>>,
}

impl Tally {
    fn new(t0: Instant, seconds: usize, workers: usize) -> Tally {
        let counters = || (0..seconds).map(|_| AtomicU64::new(0)).collect();
        Tally {
            t0,
            goodput: counters(),
            rejected: counters(),
            failed: counters(),
            held: Mutex::new(vec![Vec::new(); seconds]),
            limit_min: (0..seconds).map(|_| AtomicUsize::new(workers)).collect(),
            unrelated: Mutex::new(vec![Vec::new(); seconds]),
        }
    }

    /// The second `at` falls in, if the run covers it.
    fn second(&self, at: Instant) -> Option<usize> {
        let i = at.saturating_duration_since(self.t0).as_secs() as usize;
        (i < self.goodput.len()).then_some(i)
    }
}

/// Hard bound on each caller, whatever happens to the stop flag.
const CALLS_CAP: u64 = 100_000;

/// Runs `s` once with `guard` and returns its seconds. Takes `s.total()` plus the
/// time to join the callers (at most one timeout).
pub fn run(s: &Scenario, guard: Guard) -> Run {
    let healthy = Fault::Slow(s.healthy);
    let provider =
        FakeProvider::start("brownout", healthy, |_| (200, "ok".to_owned())).expect("bind loopback");
    let unrelated_provider =
        FakeProvider::start("unrelated", healthy, |_| (200, "ok".to_owned())).expect("bind loopback");
    let guarded = Arc::new(Guarded::build(guard, s));
    let unrelated = Dependency::builder(format!("unrelated-{}", guard.name()))
        .workers(2)
        .timeout(s.timeout)
        .build()
        .expect("a valid dependency");
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();

    let held = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(s.callers + 3));
    let end_cap = s.total() + s.timeout * 2;
    // The start time is fixed once every thread is ready, at the barrier.
    let t0 = Arc::new(Mutex::new(None::<Arc<Tally>>));
    let seconds = s.seconds();

    let mut threads = Vec::new();
    for _ in 0..s.callers {
        let (guarded, agent, url) = (Arc::clone(&guarded), agent.clone(), provider.url());
        let (held, stop, start, t0, think) =
            (Arc::clone(&held), Arc::clone(&stop), Arc::clone(&start), Arc::clone(&t0), s.think);
        threads.push(thread::spawn(move || {
            start.wait();
            let tally = t0.lock().unwrap().clone().expect("set before the barrier");
            for _ in 0..CALLS_CAP {
                if stop.load(Relaxed) || tally.t0.elapsed() > end_cap {
                    break;
                }
                held.fetch_add(1, Relaxed);
                let ended = guarded.call(&agent, &url);
                held.fetch_sub(1, Relaxed);
                if let Some(i) = tally.second(Instant::now()) {
                    let counter = match ended {
                        Ended::Ok => &tally.goodput[i],
                        Ended::Rejected => &tally.rejected[i],
                        Ended::Failed => &tally.failed[i],
                    };
                    counter.fetch_add(1, Relaxed);
                }
                thread::sleep(think);
            }
        }));
    }
    // The unrelated caller.
    {
        let (agent, url, stop, start, t0, every) = (
            agent.clone(),
            unrelated_provider.url(),
            Arc::clone(&stop),
            Arc::clone(&start),
            Arc::clone(&t0),
            s.unrelated_every,
        );
        threads.push(thread::spawn(move || {
            start.wait();
            let tally = t0.lock().unwrap().clone().expect("set before the barrier");
            for _ in 0..CALLS_CAP {
                if stop.load(Relaxed) || tally.t0.elapsed() > end_cap {
                    break;
                }
                let began = Instant::now();
                let (agent, url) = (agent.clone(), url.clone());
                let ok = unrelated
                    .call(move |ctx: &watertight::CallContext| {
                        agent.get(&url).with_deadline(ctx).call().map(drop)
                    })
                    .is_ok();
                // A failed unrelated call is charged the whole timeout.
                let took = if ok { began.elapsed() } else { began.elapsed().max(unrelated.timeout()) };
                if let Some(i) = tally.second(began) {
                    tally.unrelated.lock().unwrap()[i].push(took);
                }
                thread::sleep(every);
            }
        }));
    }
    // The sampler: request threads held, and the limit.
    let recovered = Arc::new(Mutex::new(None::<Duration>));
    {
        let (guarded, held, stop, start, t0, recovered) = (
            Arc::clone(&guarded),
            Arc::clone(&held),
            Arc::clone(&stop),
            Arc::clone(&start),
            Arc::clone(&t0),
            Arc::clone(&recovered),
        );
        let (workers, brownout_end) = (s.workers, s.before + s.brownout);
        threads.push(thread::spawn(move || {
            start.wait();
            let tally = t0.lock().unwrap().clone().expect("set before the barrier");
            while !stop.load(Relaxed) && tally.t0.elapsed() <= end_cap {
                let now = Instant::now();
                let Some(i) = tally.second(now) else { break };
                tally.held.lock().unwrap()[i].push(held.load(Relaxed));
                let limit = guarded.limit(workers);
                tally.limit_min[i].fetch_min(limit, Relaxed);
                let since = now - tally.t0;
                if since >= brownout_end && limit == workers {
                    recovered.lock().unwrap().get_or_insert(since - brownout_end);
                }
                thread::sleep(Duration::from_millis(5));
            }
        }));
    }

    // Start everyone at once, then drive the provider's fault through the phases.
    let tally = Arc::new(Tally::new(Instant::now(), seconds, s.workers));
    *t0.lock().unwrap() = Some(Arc::clone(&tally));
    start.wait();
    let t_start = tally.t0;
    thread::sleep((t_start + s.before).saturating_duration_since(Instant::now()));
    provider.set_fault(s.degraded);
    thread::sleep((t_start + s.before + s.brownout).saturating_duration_since(Instant::now()));
    provider.set_fault(healthy);
    thread::sleep((t_start + s.total()).saturating_duration_since(Instant::now()));
    stop.store(true, Relaxed);
    for t in threads {
        t.join().expect("a harness thread panicked");
    }
    guarded.dep.shutdown(Duration::from_secs(1));

    let held = tally.held.lock().unwrap();
    let unrelated = tally.unrelated.lock().unwrap();
    let rows = (0..seconds)
        .map(|i| {
            let mut h = held[i].clone();
            h.sort_unstable();
            let mut u: Vec<f64> = unrelated[i].iter().map(|d| d.as_secs_f64() * 1e3).collect();
            u.sort_by(f64::total_cmp);
            let at = Duration::from_secs(i as u64);
            Second {
                second: i,
                brownout: at >= s.before && at < s.before + s.brownout,
                held_p50: h.get(h.len() / 2).copied().unwrap_or(0),
                held_max: h.last().copied().unwrap_or(0),
                goodput: tally.goodput[i].load(Relaxed),
                rejected: tally.rejected[i].load(Relaxed),
                failed: tally.failed[i].load(Relaxed),
                unrelated_p50_ms: u.get(u.len() / 2).copied(),
                unrelated_max_ms: u.last().copied(),
                limit_min: tally.limit_min[i].load(Relaxed),
            }
        })
        .collect();
    let recovered_after = *recovered.lock().unwrap();
    Run { guard, seconds: rows, recovered_after }
}
