//! A brownout on a fixed pool: every call still answers, but ten times
//! slower. Admission by time keeps the callers the dependency holds near
//! `workers + queue`: a standing line is cut to one round, and once the
//! mean run time passes `max_wait` nobody waits for room at all.
//!
//! 8 workers, a queue of 2, `max_wait` 100 ms; 32 callers in a closed loop
//! (a refused caller comes back 10 ms later); 30 ms calls for a second,
//! then 300 ms calls for two. The callers held are the pool's busy workers,
//! queued calls and waiters for room, sampled every 5 ms.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

use watertight::breaker::BreakerConfig;
use watertight::{CallContext, Dependency};

const WORKERS: usize = 8;
const QUEUE: usize = 2;

#[test]
fn in_a_brownout_the_callers_held_fall_back_to_workers_and_queue() {
    let _turn = crate::burst::one_at_a_time();
    let dep = Dependency::builder("brownout")
        .workers(WORKERS)
        .queue(QUEUE)
        .max_wait(Duration::from_millis(100))
        .timeout(Duration::from_secs(2))
        // The pool's admission alone: no breaker opening on slow calls.
        .breaker(BreakerConfig::default().enabled(false))
        .build()
        .unwrap();
    let latency_ms = Arc::new(AtomicU64::new(30));
    let job = |ms: u64| {
        move |_: &CallContext| {
            thread::sleep(Duration::from_millis(ms));
            Ok::<_, std::io::Error>(())
        }
    };
    // A provider in service: the pool has timed its calls.
    for _ in 0..16 {
        dep.call(job(30)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..32)
        .map(|_| {
            let (dep, latency_ms, stop) = (dep.clone(), latency_ms.clone(), stop.clone());
            thread::spawn(move || {
                let mut answered = 0u32;
                while !stop.load(Relaxed) {
                    match dep.call(job(latency_ms.load(Relaxed))) {
                        Ok(()) => answered += 1,
                        Err(_) => thread::sleep(Duration::from_millis(10)),
                    }
                }
                answered
            })
        })
        .collect();
    // The most callers held in each 100 ms, for 1 s healthy, 2 s slow.
    let held = || {
        let p = dep.snapshot().pool;
        p.busy + p.queued + p.waiting
    };
    let start = Instant::now();
    let mut tenths = Vec::new();
    while start.elapsed() < Duration::from_secs(3) {
        if tenths.len() == 10 {
            latency_ms.store(300, Relaxed);
        }
        let tenth = start + Duration::from_millis(100) * (tenths.len() as u32 + 1);
        let mut most = 0;
        while Instant::now() < tenth {
            most = most.max(held());
            thread::sleep(Duration::from_millis(5));
        }
        tenths.push(most);
    }
    stop.store(true, Relaxed);
    let answered: u32 = callers.into_iter().map(|c| c.join().unwrap()).sum();
    println!("callers held, the most in each 100 ms (slow from the 11th): {tenths:?}; {answered} answered");

    let (healthy, slow) = tenths.split_at(10);
    // The first moments are a burst of 32 (the line has not stood for
    // `max_wait` yet); once it stands, one round of waiters at most.
    let bound = 2 * (WORKERS + QUEUE);
    for (i, most) in healthy.iter().enumerate().skip(3) {
        assert!(*most <= bound, "healthy, {}-{} ms: {most} held", i * 100, i * 100 + 100);
    }
    for (i, most) in slow.iter().enumerate() {
        assert!(*most <= bound, "slow, {}-{} ms: {most} held", i * 100, i * 100 + 100);
    }
    // Within a second of the slowdown: workers + queue, and a few that
    // `max_wait` lets through (the median of the second after it, so that
    // one window stretched by a loaded machine is not the verdict).
    let mut later: Vec<usize> = slow[10..].to_vec();
    later.sort_unstable();
    let median = later[later.len() / 2];
    assert!(median <= WORKERS + QUEUE + 2, "a second into the slowdown: {median} held (median)");
    assert!(answered > 0);
}
