//! A caller's own deadline is a timeout, never a rejection: a caller whose
//! deadline ends its wait for room (the pool's `max_wait` wait, or a permit
//! in caller-thread mode) gets `Timeout`, counted `timed_out`, and the
//! breaker records nothing. A wait that `max_wait` ends first is the
//! dependency's refusal, `QueueFull`.

use crate::support::wait_until;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use watertight::breaker::BreakerMetrics;
use watertight::dependency::Mode;
use watertight::{CallContext, Dependency, Error, Outcome, Rejection};

const SETTLE: Duration = Duration::from_secs(10);

/// A job that holds its worker (or its caller's permit) until `release` is
/// set, for at most `SETTLE`.
fn holder(
    release: &Arc<AtomicBool>,
) -> impl FnOnce(&CallContext) -> Result<(), std::io::Error> + Send + 'static {
    let release = Arc::clone(release);
    move |_: &CallContext| {
        let until = Instant::now() + SETTLE;
        while !release.load(Ordering::SeqCst) && Instant::now() < until {
            thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

/// What a breaker has recorded, to compare before and after.
fn recorded(m: &BreakerMetrics) -> (watertight::breaker::State, u64, u64, u64, u64, u32) {
    (m.state, m.successful, m.failed, m.ignored, m.slow, m.buffered_calls)
}

/// Callers with 10 ms and 100 ms deadlines, three of each at once, against
/// `dep`, which is full: each answer and how long it took.
fn callers_with_short_deadlines(
    dep: &Dependency,
) -> Vec<(Duration, Result<(), Error<std::io::Error>>, Duration)> {
    let threads: Vec<_> = [10u64, 10, 10, 100, 100, 100]
        .into_iter()
        .map(|ms| {
            let dep = dep.clone();
            thread::spawn(move || {
                let deadline = Duration::from_millis(ms);
                let started = Instant::now();
                let answer = dep
                    .with()
                    .deadline(started + deadline)
                    .call(|_: &CallContext| Ok::<_, std::io::Error>(()));
                (deadline, answer, started.elapsed())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn assert_all_timed_out(dep: &Dependency, before: &BreakerMetrics) {
    for (deadline, answer, took) in callers_with_short_deadlines(dep) {
        match &answer {
            Err(Error::Timeout { waited }) => {
                assert!(*waited >= deadline, "waited {waited:?} for a {deadline:?} deadline");
            }
            other => panic!("a {deadline:?} deadline ended the wait for room: {other:?} after {took:?}"),
        }
        let err = answer.unwrap_err();
        assert!(!err.is_rejected(), "{err:?}");
        assert_eq!(err.outcome(), Outcome::TimedOut);
        // Its own deadline, not max_wait (200 ms), ended the wait.
        if deadline < Duration::from_millis(50) {
            assert!(took < Duration::from_millis(190), "{took:?}");
        }
    }
    let calls = dep.snapshot().calls;
    assert_eq!((calls.timed_out, calls.queue_full, calls.deadline_unmeetable), (6, 0, 0), "{calls:?}");
    // Not held against the provider: the breaker's counts are as they were.
    assert_eq!(recorded(&dep.breaker().metrics()), recorded(before));
}

#[test]
fn a_callers_deadline_that_ends_its_wait_for_room_is_its_timeout() {
    let dep = Dependency::builder("deadline-in-line")
        .workers(2)
        .queue(1)
        .max_wait(Duration::from_millis(200))
        // A long timeout: the stuck rule (a quarter of it) stays out of the way.
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let release = Arc::new(AtomicBool::new(false));
    for _ in 0..3 {
        dep.spawn(holder(&release)).unwrap();
    }
    assert!(wait_until(SETTLE, || {
        let pool = dep.snapshot().pool;
        pool.busy == 2 && pool.queued == 1
    }));
    let before = dep.breaker().metrics();
    assert_all_timed_out(&dep, &before);

    // A wait that max_wait ends before the deadline: the dependency refused.
    let started = Instant::now();
    let answer =
        dep.with().timeout(Duration::from_secs(5)).call(|_: &CallContext| Ok::<_, std::io::Error>(()));
    assert!(matches!(answer, Err(Error::Rejected { reason: Rejection::QueueFull, .. })), "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "max_wait ended it: {:?}", started.elapsed());
    assert_eq!(dep.snapshot().calls.queue_full, 1);

    release.store(true, Ordering::SeqCst);
    assert!(wait_until(SETTLE, || dep.snapshot().calls.successful == 3));
}

#[test]
fn in_caller_thread_mode_a_deadline_that_ends_the_wait_for_a_permit_is_a_timeout() {
    let dep = Dependency::builder("deadline-for-permit")
        .mode(Mode::CallerThread)
        .workers(1)
        .max_wait(Duration::from_millis(200))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let release = Arc::new(AtomicBool::new(false));
    let held = {
        let (dep, job) = (dep.clone(), holder(&release));
        thread::spawn(move || dep.call(job))
    };
    assert!(wait_until(SETTLE, || dep.snapshot().pool.busy == 1));
    let before = dep.breaker().metrics();
    assert_all_timed_out(&dep, &before);

    // max_wait ends the wait first: refused.
    let answer =
        dep.with().timeout(Duration::from_secs(5)).call(|_: &CallContext| Ok::<_, std::io::Error>(()));
    assert!(matches!(answer, Err(Error::Rejected { reason: Rejection::QueueFull, .. })), "{answer:?}");

    release.store(true, Ordering::SeqCst);
    held.join().unwrap().unwrap();
}
