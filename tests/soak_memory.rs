//! Soak without sockets: does a call leave anything behind in the crate itself?
//!
//! `tests/soak.rs` goes through ureq and a loopback provider, which start a
//! thread and a socket per request; their allocator churn shows up in the
//! process's memory too. Here the job outlives its own deadline on purpose
//! (it sleeps past it), so every admitted call ends as a caller timeout with
//! its job abandoned, or expires in the queue, or is rejected: the pool's
//! costliest paths, 100,000 times, from 8 caller threads on a 4-worker
//! dependency with a 5 ms deadline. Resident memory is sampled after each
//! eighth of the calls; after the first eighth (warm-up: thread stacks, the
//! allocator's arenas) it must stay flat, within 1 MiB.
//!
//! `WATERTIGHT_SOAK_CALLS=<n>` changes the count. One test in this file.

#[path = "support/procfs.rs"]
mod procfs;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use watertight::{Dependency, breaker::BreakerConfig};

const CALLS: usize = 100_000;
const CALLERS: usize = 8;
const DEADLINE: Duration = Duration::from_millis(5);
const FLAT: u64 = 1024 * 1024;

#[test]
fn a_hundred_thousand_abandoned_calls_leave_memory_flat() {
    let calls =
        std::env::var("WATERTIGHT_SOAK_CALLS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(CALLS);
    let dep = Dependency::builder("leak")
        .workers(4)
        .queue(4)
        .timeout(DEADLINE)
        .breaker(BreakerConfig::default().enabled(false))
        .build()
        .expect("a valid dependency");
    let next = Arc::new(AtomicUsize::new(0));
    let marks = Arc::new(Mutex::new(Vec::new()));
    let start = Arc::new(Barrier::new(CALLERS + 1));
    let began = Instant::now();
    let stop_at = began + Duration::from_secs(120);
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (dep, next, marks, start) = (dep.clone(), next.clone(), marks.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut late = Duration::ZERO;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= calls || Instant::now() >= stop_at {
                        return late;
                    }
                    if i % (calls / 8).max(1) == 0 {
                        marks.lock().unwrap().push((i, procfs::rss()));
                    }
                    let called = Instant::now();
                    let result = dep.call(|ctx| {
                        thread::sleep(ctx.remaining() + Duration::from_millis(1));
                        Ok::<_, std::io::Error>(())
                    });
                    late = late.max(called.elapsed());
                    if result.is_err_and(|e| e.is_rejected()) {
                        thread::sleep(Duration::from_micros(200));
                    }
                }
            })
        })
        .collect();
    start.wait();
    let slowest = callers.into_iter().map(|c| c.join().expect("a caller")).max().unwrap_or_default();
    let wall = began.elapsed();
    let mut marks = marks.lock().unwrap().clone();
    marks.sort();
    let snap = dep.snapshot();
    let figures = format!(
        "soak without sockets: {} calls in {wall:.2?}; slowest call {slowest:.1?}\n  rss after n calls: {}\n  \
         calls: {:?}\n  pool: {:?}",
        calls,
        marks.iter().map(|(i, b)| format!("{i}: {}", procfs::mib(*b))).collect::<Vec<_>>().join(", "),
        snap.calls,
        snap.pool,
    );
    println!("{figures}");

    assert_eq!(snap.calls.total(), calls as u64, "every call counted once\n{figures}");
    assert!(snap.calls.timed_out > 1000, "the pool's slow path was taken\n{figures}");
    assert!(slowest < DEADLINE + Duration::from_millis(200), "a caller waited past its deadline\n{figures}");
    assert!(marks.len() >= 8, "{figures}");
    let after_warm_up = marks[1].1;
    let most = marks.iter().skip(1).map(|m| m.1).max().unwrap_or(0).max(procfs::rss());
    assert!(most < after_warm_up + FLAT, "memory grew after warm-up\n{figures}");
    assert!(dep.shutdown(Duration::from_secs(2)), "every worker joined\n{figures}");
}
