//! Admission by time: a healthy burst waits in line when its wait fits
//! `max_wait` and its deadline, whatever the count of callers; only the
//! calls whose expected wait passes `max_wait` are refused, and at once.
//!
//! A healthy 30 ms job (the provider's time; a loopback HTTP call adds a
//! few milliseconds on a loaded machine, which would move the rounds this
//! test counts) behind 8 workers, a queue of 2 and `max_wait` 100 ms;
//! callers with an 800 ms deadline, released together by a barrier, 20
//! bursts in a row.

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use watertight::{CallContext, Dependency, Error, Rejection};

const LATENCY: Duration = Duration::from_millis(30);
const WORKERS: usize = 8;
const MAX_WAIT: Duration = Duration::from_millis(100);
const DEADLINE: Duration = Duration::from_millis(800);
const BURSTS: usize = 20;

/// What one burst's callers saw: the time to each answer, and the time to
/// each refusal (with what refused it).
#[derive(Default)]
struct Burst {
    answered: Vec<Duration>,
    refused: Vec<(Duration, String)>,
}

fn run_bursts(callers: usize) -> Vec<Burst> {
    // One scenario at a time: two bursts at once on two cores would measure each other.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dep = Dependency::builder("flights")
        .workers(WORKERS)
        .queue(2)
        .max_wait(MAX_WAIT)
        .timeout(DEADLINE)
        .build()
        .expect("a valid dependency");
    // A provider in service: the pool has timed a call before the first
    // burst (with none timed, there is no wait to expect, and `max_wait`
    // alone decides).
    for _ in 0..16 {
        dep.call(|_: &CallContext| provider(LATENCY)).expect("a healthy call");
    }
    let mut bursts = Vec::with_capacity(BURSTS);
    for _ in 0..BURSTS {
        let barrier = Arc::new(Barrier::new(callers));
        let handles: Vec<_> = (0..callers)
            .map(|_| {
                let (dep, barrier) = (dep.clone(), barrier.clone());
                thread::spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let answer =
                        dep.with().deadline(start + DEADLINE).call(|_: &CallContext| provider(LATENCY));
                    (start.elapsed(), answer)
                })
            })
            .collect();
        let mut burst = Burst::default();
        for h in handles {
            match h.join().expect("a caller thread") {
                (took, Ok(())) => burst.answered.push(took),
                (took, Err(Error::Rejected(r))) => burst.refused.push((took, format!("{r:?}"))),
                (took, Err(e)) => panic!("a healthy call failed after {took:?}: {e:?}"),
            }
        }
        bursts.push(burst);
    }
    assert_eq!(dep.breaker().state(), watertight::breaker::State::Closed);
    bursts
}

/// The provider: it answers after `latency`.
fn provider(latency: Duration) -> Result<(), std::io::Error> {
    thread::sleep(latency);
    Ok(())
}

/// The time for `callers` calls of `LATENCY` to drain through `WORKERS`.
fn drain_time(callers: usize) -> Duration {
    LATENCY * callers.div_ceil(WORKERS) as u32
}

#[test]
fn a_healthy_burst_that_drains_within_max_wait_is_never_refused() {
    let callers = 24; // the last round starts at 60 ms: within max_wait
    let bursts = run_bursts(callers);
    let bound = drain_time(callers) * 4;
    for (i, b) in bursts.iter().enumerate() {
        assert!(b.refused.is_empty(), "burst {i}: {} of {callers} refused: {:?}", b.refused.len(), b.refused);
        let slowest = b.answered.iter().max().copied().unwrap_or_default();
        assert!(slowest <= bound, "burst {i}: a call took {slowest:?}, over {bound:?}");
    }
    // Refused on arrival, for the wait it could expect, not after waiting
    // `max_wait` out: all but the few of a stretched round.
    let all: Vec<Duration> = bursts.iter().flat_map(|b| b.refused.iter().map(|(took, _)| *took)).collect();
    let late = all.iter().filter(|took| **took >= MAX_WAIT).count();
    assert!(late * 10 <= all.len(), "{late} of {} refusals came after waiting max_wait", all.len());
}

#[test]
fn a_burst_past_max_wait_refuses_only_the_calls_that_would_wait_too_long_and_at_once() {
    let callers = 40; // the fifth round would start at 120 ms: past max_wait
    let bursts = run_bursts(callers);
    let bound = drain_time(callers) * 4;
    let refused: Vec<usize> = bursts.iter().map(|b| b.refused.len()).collect();
    println!("40-caller bursts, refused in each: {refused:?}");
    // The fourth round starts at 90 ms, 10 ms inside `max_wait`: on a
    // loaded machine a burst's rounds stretch past it now and then, and
    // its callers are then refused too (by the estimate, or after waiting
    // `max_wait` out). So: at most 8 in most bursts, never all of a round
    // more, and every refusal a `QueueFull`.
    let mut sorted = refused.clone();
    sorted.sort_unstable();
    assert!(sorted[BURSTS / 2] <= WORKERS, "median burst refused {}", sorted[BURSTS / 2]);
    for (i, b) in bursts.iter().enumerate() {
        assert!(b.refused.len() <= 2 * WORKERS, "burst {i}: {} of {callers} refused", b.refused.len());
        for (took, why) in &b.refused {
            assert_eq!(why, &format!("{:?}", Rejection::QueueFull), "burst {i}, after {took:?}");
        }
        let slowest = b.answered.iter().max().copied().unwrap_or_default();
        assert!(slowest <= bound, "burst {i}: a call took {slowest:?}, over {bound:?}");
    }
    // Refused on arrival, for the wait it could expect, not after waiting
    // `max_wait` out: all but the few of a stretched round.
    let all: Vec<Duration> = bursts.iter().flat_map(|b| b.refused.iter().map(|(took, _)| *took)).collect();
    let late = all.iter().filter(|took| **took >= MAX_WAIT).count();
    assert!(late * 10 <= all.len(), "{late} of {} refusals came after waiting max_wait", all.len());
}
