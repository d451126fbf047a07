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
const QUEUE: usize = 2;
const MAX_WAIT: Duration = Duration::from_millis(100);
const DEADLINE: Duration = Duration::from_millis(800);
const BURSTS: usize = 20;

/// One timed scenario at a time (the bursts here, the brownout): two at once
/// on two cores would measure each other.
pub(crate) fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one burst's callers saw: the time to each answer, and the time to
/// each refusal (with what refused it).
#[derive(Default)]
struct Burst {
    /// The pool's mean run time as the burst came, and the highest it was
    /// while the burst ran, sampled every millisecond (on a loaded machine
    /// the barrier lets callers go over some milliseconds, and the last ones
    /// may meet a mean the first round has moved).
    mean: Duration,
    mean_peak: Duration,
    answered: Vec<Duration>,
    refused: Vec<(Duration, String)>,
}

impl Burst {
    /// How many of `callers` the estimate turns away: all but `workers +
    /// queue` and the rounds of `workers` that room reaches within
    /// `max_wait`, at the pool's mean run time.
    fn expected_refusals(&self, callers: usize) -> usize {
        let mean = self.mean.max(self.mean_peak);
        let rounds = (MAX_WAIT.as_secs_f64() / mean.as_secs_f64()).floor() as usize;
        callers.saturating_sub(WORKERS + QUEUE + WORKERS * rounds)
    }

    /// Refused on arrival (the estimate), and after waiting `max_wait` out
    /// (a round that came later than the estimate said).
    fn refusals(&self) -> (usize, usize) {
        let at_once = self.refused.iter().filter(|(took, _)| *took < MAX_WAIT / 2).count();
        (at_once, self.refused.len() - at_once)
    }
}

fn run_bursts(callers: usize) -> Vec<Burst> {
    let _turn = one_at_a_time();
    let dep = Dependency::builder("flights")
        .workers(WORKERS)
        .queue(QUEUE)
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
        let mean = dep.pool().and_then(|p| p.mean_service_time()).expect("calls were timed");
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
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (dep, done) = (dep.clone(), done.clone());
            thread::spawn(move || {
                let mut peak = Duration::ZERO;
                // Bounded: the burst's callers are done within their deadline.
                let end = Instant::now() + DEADLINE * 4;
                while !done.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < end {
                    peak = peak.max(dep.pool().and_then(|p| p.mean_service_time()).unwrap_or_default());
                    thread::sleep(Duration::from_millis(1));
                }
                peak
            })
        };
        let mut burst = Burst { mean, ..Burst::default() };
        for h in handles {
            match h.join().expect("a caller thread") {
                (took, Ok(())) => burst.answered.push(took),
                (took, Err(Error::Rejected { reason: r, .. })) => {
                    burst.refused.push((took, format!("{r:?}")))
                }
                (took, Err(e)) => panic!("a healthy call failed after {took:?}: {e:?}"),
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let after = dep.pool().and_then(|p| p.mean_service_time()).expect("calls were timed");
        burst.mean_peak = sampler.join().expect("the sampler").max(after);
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

/// What every burst must show: every refusal a `QueueFull`; on arrival, no
/// more than the estimate calls for; after waiting, few (rounds that came
/// later than the mean said, on a loaded machine); and every call answered
/// within four times the burst's drain time.
fn check(bursts: &[Burst], callers: usize) -> (usize, usize, usize) {
    let bound = LATENCY * callers.div_ceil(WORKERS) as u32 * 4;
    let (mut expected, mut at_once, mut late) = (0, 0, 0);
    for (i, b) in bursts.iter().enumerate() {
        for (took, why) in &b.refused {
            assert_eq!(why, &format!("{:?}", Rejection::QueueFull), "burst {i}, after {took:?}");
        }
        let (now, later) = b.refusals();
        let want = b.expected_refusals(callers);
        assert!(
            now <= want,
            "burst {i}: {now} refused on arrival, the estimate ({:?}) calls for {want}",
            b.mean
        );
        (expected, at_once, late) = (expected + want, at_once + now, late + later);
        let slowest = b.answered.iter().max().copied().unwrap_or_default();
        assert!(slowest <= bound, "burst {i}: a call took {slowest:?}, over {bound:?}");
    }
    assert!(late * 10 <= callers * bursts.len(), "{late} refused after waiting max_wait");
    println!(
        "{callers} callers x {} bursts: {at_once} refused on arrival ({expected} by the estimate), {late} after \
         waiting; means {:?}",
        bursts.len(),
        bursts.iter().map(|b| b.mean.as_micros()).collect::<Vec<_>>()
    );
    (expected, at_once, late)
}

#[test]
fn a_healthy_burst_that_drains_within_max_wait_is_never_refused() {
    // The last round starts at 60 ms and room comes for it at 30 ms: the
    // estimate refuses nobody unless the job's time grows by half (which a
    // heavily loaded machine does now and then; `check` then allows what
    // the estimate calls for, and no more).
    let callers = 24;
    let bursts = run_bursts(callers);
    check(&bursts, callers);
}

#[test]
fn a_burst_past_max_wait_refuses_only_the_calls_that_would_wait_too_long_and_at_once() {
    // Room comes for the fifth round (callers 35-40) at 120 ms, past
    // `max_wait`: those 6 are refused on arrival, the rest served. (A
    // mean past 33.3 ms, on a loaded machine, moves the fourth round's
    // room past 100 ms too: the estimate then refuses 14, and says so.)
    let callers = 40;
    let bursts = run_bursts(callers);
    let (expected, at_once, _) = check(&bursts, callers);
    assert!(at_once * 2 >= expected, "{at_once} refused on arrival of {expected} the estimate calls for");
}
