//! Soak: many calls against a provider that never answers in time, and what is left
//! of the process afterwards.
//!
//! 10,000 calls, from 8 caller threads, go through a 4-worker [`Dependency`] with a
//! 50 ms deadline to a loopback provider that answers each request only after
//! 10 s. The breaker is disabled so that every call reaches the pool: an open
//! breaker would turn most calls away before they touch a worker, a socket or the
//! provider, which is the gentle case. What must hold:
//!
//! - every call is answered (a result, a timeout, a failure or a rejection), each
//!   within its deadline + 200 ms;
//! - afterwards the process has exactly the threads it had before plus the pool's 4
//!   workers, as `/proc/self/task` counts them, and those 4 carry the pool's name;
//! - resident memory (`VmRSS`) grew by less than 10 MiB;
//! - the provider saw every connection it held closed by its client (the deadline
//!   really ends the socket, not just the wait), and holds none any more;
//! - the pool's own books balance, with nothing busy, queued or abandoned.
//!
//! This file holds one test on purpose: the harness runs the tests of a file on
//! parallel threads, and another test's threads would blur the thread count.
//!
//! `WATERTIGHT_SOAK_CALLS=<n>` runs a longer (or shorter) soak. Run with
//! `cargo test --all-features --test soak -- --nocapture` to see the figures.

#[path = "support/procfs.rs"]
mod procfs;
mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use support::{FakeProvider, Fault};
use watertight::http::WithDeadline;
use watertight::{Dependency, Error, breaker::BreakerConfig};

const CALLS: usize = 10_000;
const CALLERS: usize = 8;
const WORKERS: usize = 4;
const QUEUE: usize = 4;
const DEADLINE: Duration = Duration::from_millis(50);
/// What a caller may wait past its deadline: scheduling noise on a busy machine.
const SLACK: Duration = Duration::from_millis(200);
/// How long the provider holds each request.
const PROVIDER_DELAY: Duration = Duration::from_secs(10);
/// The load loop stops here whatever the count (the test then fails on the
/// count): 100 s for the default 10,000 calls, 10 ms a call for longer soaks.
fn time_limit(calls: usize) -> Duration {
    Duration::from_millis(u64::try_from(calls).unwrap_or(u64::MAX).saturating_mul(10))
        .max(Duration::from_secs(100))
}
/// A caller turned away pauses this long before its next call, as a client
/// backing off would; it also keeps eight threads from spinning on two cores.
const PAUSE_AFTER_REJECTION: Duration = Duration::from_millis(2);
const RSS_BUDGET: u64 = 10 * 1024 * 1024;

/// `WATERTIGHT_SOAK_CALLS`, when set to a number.
fn calls_from(value: Option<String>) -> usize {
    value.and_then(|v| v.trim().parse().ok()).unwrap_or(CALLS)
}

/// What one call ended in, as a short name for the tally.
fn kind(result: &Result<(), Error<ureq::Error>>) -> String {
    match result {
        Ok(()) => "ok".into(),
        Err(Error::Timeout { .. }) => "timeout".into(),
        Err(Error::Rejected { reason: r, .. }) => format!("rejected:{}", r.as_str()),
        Err(Error::Failed(ureq::Error::Timeout(_))) => "failed:ureq_timeout".into(),
        Err(Error::Failed(e)) => format!("failed:{e}"),
        Err(Error::Panicked(_)) => "panicked".into(),
        Err(_) => "other".into(),
    }
}

#[derive(Default)]
struct Tally {
    kinds: BTreeMap<String, usize>,
    latencies: Vec<Duration>,
    /// Calls that took longer than deadline + slack, with what they ended in.
    late: Vec<(Duration, String)>,
}

#[test]
fn ten_thousand_calls_to_a_hung_provider_leave_nothing_behind() {
    let calls = calls_from(std::env::var("WATERTIGHT_SOAK_CALLS").ok());

    let provider = FakeProvider::start("soak", Fault::Slow(PROVIDER_DELAY), |_| (200, "late".into()))
        .expect("bind a loopback port");
    // A hung request ends when its client closes, so the provider's own threads do
    // not pile up in this process and blur the thread and memory figures.
    provider.release_on_client_close(true);

    // Before: the test harness, and the provider's acceptor.
    let threads_before = procfs::threads();
    let rss_before = procfs::rss();

    let dep = Dependency::builder("soak")
        .workers(WORKERS)
        .queue(QUEUE)
        .timeout(DEADLINE)
        .breaker(BreakerConfig::default().enabled(false))
        .build()
        .expect("a valid dependency");
    let threads_with_pool = procfs::threads();

    let agent = ureq::Agent::new_with_defaults();
    let url = format!("{}/score", provider.url());
    let next = Arc::new(AtomicUsize::new(0));
    // Resident memory each time another quarter of the calls has been started:
    // a leak grows it call after call, a warm-up only at first.
    let quarters = Arc::new(std::sync::Mutex::new(Vec::new()));
    let start = Arc::new(Barrier::new(CALLERS + 1));
    let began = Instant::now();
    let stop_at = began + time_limit(calls);
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (dep, agent, url, next, start) =
                (dep.clone(), agent.clone(), url.clone(), next.clone(), start.clone());
            let quarters = Arc::clone(&quarters);
            thread::spawn(move || {
                let mut tally = Tally::default();
                start.wait();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls || Instant::now() >= stop_at {
                        break;
                    }
                    if i > 0 && i % (calls / 4).max(1) == 0 {
                        quarters.lock().unwrap().push((i, procfs::rss()));
                    }
                    let (agent, url) = (agent.clone(), url.clone());
                    let called = Instant::now();
                    let result = dep.call(move |ctx| agent.get(&url).with_deadline(ctx).call().map(|_| ()));
                    let took = called.elapsed();
                    let kind = kind(&result);
                    if took > DEADLINE + SLACK {
                        tally.late.push((took, kind.clone()));
                    }
                    tally.latencies.push(took);
                    *tally.kinds.entry(kind).or_default() += 1;
                    if result.as_ref().is_err_and(Error::is_rejected) {
                        thread::sleep(PAUSE_AFTER_REJECTION);
                    }
                }
                tally
            })
        })
        .collect();
    start.wait();
    let mut all = Tally::default();
    for caller in callers {
        let t = caller.join().expect("a caller thread panicked");
        for (k, n) in t.kinds {
            *all.kinds.entry(k).or_default() += n;
        }
        all.latencies.extend(t.latencies);
        all.late.extend(t.late);
    }
    let wall = began.elapsed();
    drop(agent);

    // Let the abandoned jobs finish (each ends at its own deadline) and the
    // provider see the last clients go.
    let idle = support::wait_until(Duration::from_secs(5), || {
        let s = dep.pool().unwrap().stats();
        s.busy == 0 && s.queued == 0 && s.abandoned == 0
    });
    let provider_drained = support::wait_until(Duration::from_secs(5), || provider.in_flight() == 0);
    let snapshot = dep.snapshot();
    let stats = snapshot.pool;

    // After: every caller joined and every provider handler gone, the workers stay.
    let want = threads_before + WORKERS;
    let threads_after = procfs::settle(Duration::from_secs(5), want, procfs::threads);
    let named = procfs::threads_named("wt-soak");
    let rss_after = procfs::rss();
    let rss_peak = procfs::status_bytes("VmHWM");
    let mut quarters = quarters.lock().unwrap().clone();
    quarters.sort();
    let quarters: Vec<String> = quarters.iter().map(|(i, b)| format!("{i}: {}", procfs::mib(*b))).collect();

    all.latencies.sort();
    let answered: usize = all.kinds.values().sum();
    let pct = |p: usize| all.latencies[(all.latencies.len() * p / 100).min(all.latencies.len() - 1)];
    let figures = format!(
        "soak: {answered} calls answered of {calls} in {wall:.2?} from {CALLERS} callers; \
         {WORKERS} workers, queue {QUEUE}, deadline {DEADLINE:?}, provider slow:{}ms\n  \
         outcomes: {:?}\n  latency: p50 {:.1?} p99 {:.1?} max {:.1?}; over deadline+{SLACK:?}: {}\n  \
         pool: {stats:?}\n  \
         provider: hits {} clients_gone {} in_flight {}\n  \
         threads: before {threads_before}, with pool {threads_with_pool}, after {threads_after} \
         (want {want}); named wt-soak: {named}\n  \
         rss: before {}, after {} (growth {}), peak {}; after n calls: {}",
        PROVIDER_DELAY.as_millis(),
        all.kinds,
        pct(50),
        pct(99),
        all.latencies.last().copied().unwrap_or_default(),
        all.late.len(),
        provider.hits(),
        provider.clients_gone(),
        provider.in_flight(),
        procfs::mib(rss_before),
        procfs::mib(rss_after),
        procfs::mib(rss_after.saturating_sub(rss_before)),
        procfs::mib(rss_peak),
        quarters.join(", "),
    );
    println!("{figures}");

    assert_eq!(answered, calls, "every call answered, within the time limit\n{figures}");
    assert!(
        all.late.is_empty(),
        "calls past deadline + slack: {:?}\n{figures}",
        &all.late[..all.late.len().min(10)]
    );
    assert!(!all.kinds.contains_key("ok"), "the provider never answers in time\n{figures}");
    assert!(
        all.kinds.get("timeout").copied().unwrap_or(0) >= 100,
        "the soak must push calls through the workers, not only reject them\n{figures}"
    );
    assert_eq!(threads_with_pool, threads_before + WORKERS, "building starts exactly the workers\n{figures}");
    assert_eq!(threads_after, want, "threads after = before + the pool's workers\n{figures}");
    assert_eq!(named, WORKERS, "the workers carry the pool's name\n{figures}");
    assert_eq!(stats.workers, WORKERS, "no worker lost\n{figures}");
    assert!(idle, "the pool goes idle once the last deadline has passed\n{figures}");
    assert_eq!(
        stats.submitted,
        stats.completed + stats.panicked + stats.expired,
        "every accepted job ran or expired\n{figures}"
    );
    assert_eq!(snapshot.calls.total(), calls as u64, "the dependency counted every call once\n{figures}");
    assert!(provider_drained, "the provider holds no connection once the clients gave up\n{figures}");
    assert!(provider.hits() > 0, "calls reached the provider\n{figures}");
    assert_eq!(
        provider.clients_gone(),
        provider.hits(),
        "every request the provider held was closed by its client\n{figures}"
    );
    assert!(rss_after < rss_before + RSS_BUDGET, "resident memory grew by 10 MiB or more\n{figures}");

    // And the workers go with the dependency: back to the threads before it.
    assert!(dep.shutdown(Duration::from_secs(2)), "every worker joined\n{figures}");
    drop(dep);
    let threads_final = procfs::settle(Duration::from_secs(5), threads_before, procfs::threads);
    assert_eq!(threads_final, threads_before, "shutdown leaves no thread behind\n{figures}");
    assert_eq!(procfs::threads_named("wt-soak"), 0);
}
