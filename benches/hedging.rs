//! Hedged calls (`with().hedge()`): what they buy on a provider with a slow tail,
//! and that they cannot amplify a brownout or an outage.
//!
//! A loopback provider (`watertight::testing::FakeProvider`, real HTTP through
//! ureq) answers in 5 ms, except in three scenarios, each run in paired rounds
//! (plain calls and hedged calls alternately, each through its own dependency of
//! 16 workers, 8 caller threads):
//!
//! | scenario   | provider                                | goals (hedged against plain, every round)            |
//! |------------|-----------------------------------------|------------------------------------------------------|
//! | `tail`     | 5 ms, but 2 % of calls take 200 ms      | p99 at most 0.3x; extra provider calls at most 10 %  |
//! | `brownout` | every call takes 200 ms                 | hedges at most the budget's share; p50 no worse (within 5 %) |
//! | `hung`     | never answers (calls time out at 300 ms) | no hedge starts once the breaker has left CLOSED     |
//!
//! The hedge policy is `Hedge::at_quantile(0.95)` clamped to 2-100 ms (after 100
//! samples), and hedges share a retry budget of 10 % of calls plus 1 a second.
//!
//! Criterion group `hedging` first measures what the hedged path costs when no
//! hedge is needed: a call whose job answers at once, plain and hedged.
//!
//! `cargo bench --features testing --bench hedging` (about 1.5 minutes).
//! `WATERTIGHT_HEDGING_ROUNDS=n` sets the rounds of `tail` (default 5).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::report::{Latencies, joined, ms, verdict};
use criterion::Criterion;
use watertight::dependency::{Event, Hedge};
use watertight::http::WithDeadline;
use watertight::retry::Retry;
use watertight::testing::{FakeProvider, Fault};
use watertight::{CallContext, Dependency, breaker::BreakerConfig, breaker::State};

const CALLERS: usize = 8;
const WORKERS: usize = 16;

fn policy() -> Hedge {
    Hedge::at_quantile(0.95).clamp(Duration::from_millis(2), Duration::from_millis(100)).min_samples(100)
}

/// 10 % of calls plus 1 a second (10 per 10 s window).
fn budget() -> Retry {
    Retry::builder().budget(10.0, 1).build().expect("valid")
}

fn dependency(name: &str, timeout: Duration, hedge: bool) -> Dependency {
    let mut b = Dependency::builder(name)
        .workers(WORKERS)
        .timeout(timeout)
        .retry(budget())
        .breaker(BreakerConfig::count_based(16).minimum_calls(8));
    if hedge {
        b = b.hedge(policy());
    }
    b.build().expect("valid")
}

/// A provider whose answers take `latency(n)` for its `n`th request.
fn provider(latency: impl Fn(u64) -> Duration + Send + Sync + 'static) -> FakeProvider {
    let n = AtomicU64::new(0);
    FakeProvider::start("hedged", Fault::Healthy, move |_| {
        thread::sleep(latency(n.fetch_add(1, Ordering::Relaxed)));
        (200, "ok".to_owned())
    })
    .expect("bind a loopback port")
}

/// SplitMix64: a fixed pseudo-random sequence, so every run sees the same tail.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn get(agent: &ureq::Agent, url: &str, ctx: &CallContext) -> Result<String, ureq::Error> {
    agent.get(url).with_deadline(ctx).call()?.body_mut().read_to_string()
}

/// `calls` calls split over the callers, plain or hedged; every latency, and
/// the failures.
fn load(dep: &Dependency, url: &str, calls: usize, hedged: bool) -> (Latencies, u64) {
    let all = Mutex::new((Latencies::default(), 0u64));
    thread::scope(|s| {
        for c in 0..CALLERS {
            let (dep, all) = (dep.clone(), &all);
            let share = calls / CALLERS + usize::from(c < calls % CALLERS);
            s.spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
                let mut mine = (Latencies::default(), 0u64);
                for _ in 0..share {
                    let (agent, url) = (agent.clone(), url.to_owned());
                    let job = move |ctx: &CallContext| get(&agent, &url, ctx);
                    let started = Instant::now();
                    let answer = if hedged { dep.with().hedge().call(job) } else { dep.call(job) };
                    mine.0.record(started.elapsed());
                    mine.1 += u64::from(answer.is_err());
                }
                let mut all = all.lock().unwrap();
                all.0.merge(&mine.0);
                all.1 += mine.1;
            });
        }
    });
    all.into_inner().unwrap()
}

fn overhead(c: &mut Criterion) {
    let mut group = c.benchmark_group("hedging");
    group.measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    let plain = dependency("plain", Duration::from_secs(1), false);
    let hedged = dependency("hedged", Duration::from_secs(1), true);
    group.bench_function("plain_call", |b| {
        b.iter(|| plain.call(|_: &CallContext| Ok::<_, std::io::Error>(1)))
    });
    group.bench_function("hedged_call_no_hedge", |b| {
        b.iter(|| hedged.with().hedge().call(|_: &CallContext| Ok::<_, std::io::Error>(1)))
    });
    group.finish();
}

/// `tail`: p99 and extra calls, round by round.
fn tail(rounds: usize) -> bool {
    println!("\n== tail: 5 ms, 2 % of calls 200 ms; {CALLERS} callers, 400 calls per mode per round");
    let p =
        provider(|n| if mix(n) % 100 < 2 { Duration::from_millis(200) } else { Duration::from_millis(5) });
    let url = p.url();
    let plain = dependency("plain", Duration::from_secs(1), false);
    let hedged = dependency("hedged", Duration::from_secs(1), true);
    // Warm-up, unrecorded: the hedged dependency learns its p95.
    load(&plain, &url, 200, false);
    load(&hedged, &url, 200, true);
    let mut all_met = true;
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let order = if round % 2 == 1 { [false, true] } else { [true, false] };
        let mut p99 = [Duration::ZERO; 2];
        let mut extra = 0.0;
        let mut failures = 0;
        for h in order {
            let dep = if h { &hedged } else { &plain };
            let hits = p.hits();
            let (lat, failed) = load(dep, &url, 400, h);
            failures += failed;
            p99[usize::from(h)] = lat.percentile(99.0);
            if h {
                extra = (p.hits() - hits) as f64 / lat.len() as f64 - 1.0;
            }
        }
        let ratio = p99[1].as_secs_f64() / p99[0].as_secs_f64();
        let met = ratio <= 0.3 && extra <= 0.10 && failures == 0;
        all_met &= met;
        ratios.push(ratio);
        println!(
            "round {round}: p99 plain {} hedged {} ({ratio:.3}x), extra provider calls {:.1} %, failures {failures}: {}",
            ms(p99[0]),
            ms(p99[1]),
            extra * 100.0,
            verdict(met)
        );
    }
    let calls = hedged.snapshot().calls;
    println!(
        "tail: hedges {} won {} worker time on losers {:?}; p99 ratios {}",
        calls.hedged,
        calls.hedges_won,
        hedged.snapshot().hedge_lost_time,
        joined(&ratios, |r| format!("{r:.3}"))
    );
    all_met
}

/// `brownout`: every call 200 ms.
fn brownout() -> bool {
    println!("\n== brownout: every call 200 ms; {CALLERS} callers, 160 calls per mode per round");
    let p = provider(|_| Duration::from_millis(200));
    let url = p.url();
    let mut all_met = true;
    for round in 1..=3 {
        // A fresh pair each round, so that each round's budget starts empty.
        let plain = dependency("plain", Duration::from_secs(1), false);
        let hedged = dependency("hedged", Duration::from_secs(1), true);
        let order = if round % 2 == 1 { [false, true] } else { [true, false] };
        let mut p50 = [Duration::ZERO; 2];
        let mut took = Duration::ZERO;
        let mut first = 0;
        for h in order {
            let started = Instant::now();
            let (lat, _) = load(if h { &hedged } else { &plain }, &url, 160, h);
            p50[usize::from(h)] = lat.percentile(50.0);
            if h {
                took = started.elapsed();
                first = lat.len();
            }
        }
        let calls = hedged.snapshot().calls;
        // The budget's share over this round (well inside one 10 s window).
        let allowed = 0.10 * first as f64 + 10.0;
        let ratio = p50[1].as_secs_f64() / p50[0].as_secs_f64();
        let met = (calls.hedged as f64) <= allowed && ratio <= 1.05;
        all_met &= met;
        println!(
            "round {round}: hedges {} of {first} calls in {took:.1?} (budget allows {allowed:.0}); p50 plain {} hedged {} ({ratio:.3}x): {}",
            calls.hedged,
            ms(p50[0]),
            ms(p50[1]),
            verdict(met)
        );
    }
    let _ = p;
    all_met
}

/// `hung`: the provider never answers; hedges started after the breaker left CLOSED.
fn hung() -> bool {
    println!("\n== hung: never answers, 300 ms timeout; {CALLERS} callers for 3 s");
    let p = provider(|_| Duration::ZERO);
    p.set_fault(Fault::Hang);
    p.release_on_client_close(true);
    let url = p.url();
    let mut all_met = true;
    for round in 1..=3 {
        let left: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
        let starts: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&left);
        let dep = Dependency::builder("hung")
            .workers(WORKERS)
            .timeout(Duration::from_millis(300))
            .retry(budget())
            .breaker(BreakerConfig::count_based(16).minimum_calls(8).open_for(Duration::from_secs(60)))
            .hedge(Hedge::after(Duration::from_millis(20)))
            .on_event(move |e| {
                if let Event::Transition(t) = e
                    && t.from() == State::Closed
                {
                    seen.lock().unwrap().get_or_insert(Instant::now());
                }
            })
            .build()
            .expect("valid");
        let until = Instant::now() + Duration::from_secs(3);
        thread::scope(|s| {
            for _ in 0..CALLERS {
                let (dep, url, starts) = (dep.clone(), url.clone(), Arc::clone(&starts));
                s.spawn(move || {
                    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
                    while Instant::now() < until {
                        let (agent, url, starts) = (agent.clone(), url.clone(), Arc::clone(&starts));
                        let answer = dep.with().hedge().call(move |ctx: &CallContext| {
                            if ctx.attempt() > 1 {
                                starts.lock().unwrap().push(Instant::now());
                            }
                            get(&agent, &url, ctx)
                        });
                        if answer.is_err() {
                            thread::sleep(Duration::from_millis(5));
                        }
                    }
                });
            }
        });
        let left = *left.lock().unwrap();
        let starts = starts.lock().unwrap();
        let after = left.map_or(0, |at| starts.iter().filter(|s| **s > at).count());
        let met = left.is_some() && after == 0;
        all_met &= met;
        println!(
            "round {round}: breaker left CLOSED: {}; hedges started before {}, after {after}: {}",
            left.is_some(),
            starts.len() - after,
            verdict(met)
        );
        dep.shutdown(Duration::from_secs(1));
    }
    all_met
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    overhead(&mut c);
    c.final_summary();
    let rounds = std::env::var("WATERTIGHT_HEDGING_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(5);
    let goals = [("tail", tail(rounds)), ("brownout", brownout()), ("hung", hung())];
    println!("\n== goals");
    for (name, met) in goals {
        println!("{name}: {}", verdict(met));
    }
}
