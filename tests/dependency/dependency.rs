//! Dependency, Retry and Registry, end to end on real worker threads.
//!
//! Jobs are closures that succeed, fail, panic, sleep, or block on a gate the
//! test opens at the end (dropping the gate's sender wakes every blocked job).
//! Timing assertions are generous upper bounds only.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use watertight::{
    CallContext, Dependency, Error, ManualClock, Registry, Rejection, Verdict,
    breaker::{BreakerConfig, State},
    dependency::Event,
    registry::CapacityLevel,
    retry::Retry,
};

/// A gate jobs block on until the test drops the sender (or 10 s pass, so a
/// failing test never leaves a worker blocked for good).
fn gate() -> (Sender<()>, Receiver<()>) {
    crossbeam_channel::bounded(0)
}

fn block_on(gate: &Receiver<()>) {
    let _ = gate.recv_timeout(Duration::from_secs(10));
}

/// Polls `cond` every millisecond for at most 5 s; `true` once it holds.
fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// Calls until the pool admits the call (bounded). A hand-off pool (queue 0)
/// refuses a call while its only worker is still on its way back from the
/// previous one, which a busy machine can stretch.
fn admitted<T, E>(mut call: impl FnMut() -> Result<T, Error<E>>) -> Result<T, Error<E>> {
    for _ in 0..10_000 {
        match call() {
            Err(Error::Rejected { reason: Rejection::QueueFull, .. }) => thread::yield_now(),
            other => return other,
        }
    }
    call()
}

fn ok(_: &CallContext) -> Result<u32, String> {
    Ok(1)
}

fn fail(_: &CallContext) -> Result<u32, String> {
    Err("connection reset".to_owned())
}

/// A 4xx-like error: `InvalidInput` is classified `Ignore`.
fn bad_request(_: &CallContext) -> Result<u32, std::io::Error> {
    Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "400 bad request"))
}

/// A breaker that opens after `n` recorded calls at 50 % failures.
fn small_breaker(n: u32) -> BreakerConfig {
    BreakerConfig::count_based(n).minimum_calls(n).failure_rate(50.0).open_for(Duration::from_secs(60))
}

#[test]
fn ok_runs_on_a_named_worker_and_counts() {
    let dep = Dependency::builder("fraud").workers(2).build().unwrap();
    let name = dep.call(|_| Ok::<_, String>(thread::current().name().map(str::to_owned))).unwrap();
    let name = name.expect("workers are named");
    assert!(name.starts_with("wt-fraud-"), "{name}");
    let snap = dep.snapshot();
    assert_eq!(snap.calls.successful, 1);
    assert_eq!(snap.calls.total(), 1);
    assert_eq!(snap.state, State::Closed);
    assert_eq!(snap.pool.workers, 2);
}

#[test]
fn context_carries_deadline_attempt_and_name() {
    let dep = Dependency::builder("account").timeout(Duration::from_millis(800)).build().unwrap();
    let (remaining, attempt, name) = dep
        .call(|ctx| Ok::<_, String>((ctx.remaining(), ctx.attempt(), ctx.dependency().to_owned())))
        .unwrap();
    assert!(remaining <= Duration::from_millis(800) && remaining > Duration::ZERO, "{remaining:?}");
    assert_eq!(attempt, 1);
    assert_eq!(name, "account");
}

#[test]
fn job_errors_are_classified() {
    let dep = Dependency::builder("account").workers(1).queue(4).build().unwrap();
    assert!(matches!(dep.call(fail), Err(Error::Failed(_))));
    assert!(matches!(dep.call(bad_request), Err(Error::Failed(_))));
    // A classifier over the whole result: an Ok carrying a 503 is a failure.
    let status = dep
        .with()
        .classify(|r: &Result<u16, String>| match r {
            Ok(s) if *s >= 500 => Verdict::Failure,
            Ok(s) if *s >= 400 => Verdict::Ignore,
            Ok(_) => Verdict::Success,
            Err(_) => Verdict::Failure,
        })
        .call(|_| Ok(503));
    assert_eq!(status.unwrap(), 503);
    let c = dep.snapshot().calls;
    assert_eq!((c.successful, c.failed, c.ignored), (0, 2, 1));
    let m = dep.breaker().metrics();
    assert_eq!((m.successful, m.failed, m.ignored), (0, 2, 1));
}

#[test]
fn timeout_counts_as_failure_and_opens_the_breaker() {
    let (release, gate) = gate();
    let dep = Dependency::builder("fraud")
        .workers(4)
        .timeout(Duration::from_millis(100))
        .breaker(small_breaker(4))
        .build()
        .unwrap();
    for _ in 0..4 {
        let gate = gate.clone();
        let started = Instant::now();
        let r = dep.call(move |_| {
            block_on(&gate);
            Ok::<_, String>(())
        });
        let waited = started.elapsed();
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(waited < Duration::from_millis(600), "a 100 ms deadline returned after {waited:?}");
    }
    assert_eq!(dep.breaker().state(), State::Open);
    let r = dep.call(ok);
    assert_eq!(r.unwrap_err().rejection(), Some(Rejection::NotPermitted));
    let c = dep.snapshot().calls;
    assert_eq!((c.timed_out, c.not_permitted, c.failed), (4, 1, 0));
    assert_eq!(dep.breaker().metrics().failed, 4);
    drop(release);
}

#[test]
fn panic_is_a_failure_and_keeps_the_worker() {
    let dep = Dependency::builder("fraud")
        .workers(1)
        .queue(4)
        .timeout(Duration::from_secs(5))
        .breaker(small_breaker(2))
        .build()
        .unwrap();
    let r = dep.call(|_| -> Result<(), String> { panic!("provider client bug") });
    match r {
        Err(Error::Panicked(msg)) => assert!(msg.contains("provider client bug"), "{msg}"),
        other => panic!("expected Panicked, got {other:?}"),
    }
    assert_eq!(dep.call(ok).unwrap(), 1);
    let c = dep.snapshot().calls;
    assert_eq!((c.panicked, c.successful), (1, 1));
    assert_eq!(dep.breaker().metrics().failed, 1);
}

#[test]
fn queue_full_and_not_permitted_are_never_failures() {
    let (release, gate) = gate();
    let (started_tx, started) = crossbeam_channel::bounded::<()>(1);
    let dep = Dependency::builder("fraud")
        .workers(1)
        .queue(0)
        .timeout(Duration::from_secs(5))
        .breaker(small_breaker(2))
        .build()
        .unwrap();
    let holder = {
        let dep = dep.clone();
        thread::spawn(move || {
            dep.call(move |_| {
                started_tx.send(()).unwrap();
                block_on(&gate);
                Ok::<_, String>(7)
            })
        })
    };
    started.recv_timeout(Duration::from_secs(5)).expect("the holding job starts");
    for _ in 0..10 {
        let t = Instant::now();
        let r = dep.call(ok);
        assert_eq!(r.unwrap_err().rejection(), Some(Rejection::QueueFull));
        assert!(t.elapsed() < Duration::from_millis(500));
    }
    drop(release);
    assert_eq!(holder.join().unwrap().unwrap(), 7);

    dep.breaker().transition_to(State::ForcedOpen);
    for _ in 0..10 {
        assert_eq!(dep.call(ok).unwrap_err().rejection(), Some(Rejection::NotPermitted));
    }
    dep.breaker().transition_to(State::Closed);
    let m = dep.breaker().metrics();
    assert_eq!(m.failed, 0, "{m:?}");
    let c = dep.snapshot().calls;
    assert_eq!((c.queue_full, c.not_permitted, c.successful, c.failed), (10, 10, 1, 0));
    // Two real failures now open it: the rejections did not dilute or fill its window.
    let _ = admitted(|| dep.call(fail));
    let _ = admitted(|| dep.call(fail));
    assert_eq!(dep.breaker().state(), State::Open);
}

#[test]
fn ignored_outcomes_never_open_the_breaker() {
    // Per call site semantics: 4xx count as 0 while two 503s open the circuit.
    let dep =
        Dependency::builder("account-access").workers(1).queue(4).breaker(small_breaker(2)).build().unwrap();
    let classify = |r: &Result<u16, String>| match r {
        Ok(s) if *s >= 500 => Verdict::Failure,
        Ok(s) if *s >= 400 => Verdict::Ignore,
        Ok(_) => Verdict::Success,
        Err(_) => Verdict::Failure,
    };
    for status in [400, 401, 403, 404, 409, 429].into_iter().cycle().take(30) {
        assert_eq!(dep.with().classify(classify).call(move |_| Ok(status)).unwrap(), status);
    }
    for _ in 0..10 {
        assert!(dep.call(bad_request).is_err());
    }
    assert_eq!(dep.breaker().state(), State::Closed);
    assert_eq!(dep.breaker().metrics().failure_rate, None);
    assert_eq!(dep.snapshot().calls.ignored, 40);
    let _ = dep.with().classify(classify).call(|_| Ok(503));
    let _ = dep.with().classify(classify).call(|_| Ok(503));
    assert_eq!(dep.breaker().state(), State::Open);
}

#[test]
fn an_abandoned_job_is_recorded_once() {
    let (release, gate) = gate();
    let (done_tx, done) = crossbeam_channel::bounded::<()>(1);
    let dep = Dependency::builder("fraud").workers(1).timeout(Duration::from_millis(50)).build().unwrap();
    let r = dep.call(move |_| {
        block_on(&gate);
        done_tx.send(()).unwrap();
        Ok::<_, String>(())
    });
    assert!(r.unwrap_err().is_timeout());
    drop(release);
    done.recv_timeout(Duration::from_secs(5)).expect("the abandoned job finishes");
    assert!(eventually(|| dep.pool().unwrap().stats().busy == 0));
    let m = dep.breaker().metrics();
    assert_eq!((m.failed, m.successful, m.ignored), (1, 0, 0), "{m:?}");
    let c = dep.snapshot().calls;
    assert_eq!((c.timed_out, c.successful, c.total()), (1, 0, 1));
}

#[test]
fn a_manual_clock_walks_the_breaker_through_half_open_without_sleeping() {
    let clock = ManualClock::new();
    let dep = Dependency::builder("account")
        .workers(1)
        .queue(4)
        .clock(clock.clone())
        .breaker(small_breaker(2).open_for(Duration::from_secs(15)).half_open_calls(2))
        .build()
        .unwrap();
    let _ = dep.call(fail);
    let _ = dep.call(fail);
    assert_eq!(dep.breaker().state(), State::Open);
    clock.advance(Duration::from_secs(14));
    assert_eq!(dep.call(ok).unwrap_err().rejection(), Some(Rejection::NotPermitted));
    clock.advance(Duration::from_secs(1));
    assert_eq!(dep.call(ok).unwrap(), 1);
    assert_eq!(dep.breaker().state(), State::HalfOpen);
    assert_eq!(dep.call(ok).unwrap(), 1);
    assert_eq!(dep.breaker().state(), State::Closed);
}

#[test]
fn a_probe_turned_away_by_a_full_pool_gives_its_slot_back() {
    let clock = ManualClock::new();
    let (release, gate) = gate();
    let (started_tx, started) = crossbeam_channel::bounded::<()>(1);
    let dep = Dependency::builder("account")
        .workers(1)
        .clock(clock.clone())
        .breaker(small_breaker(2).half_open_calls(1))
        .build()
        .unwrap();
    let _ = dep.call(fail);
    let _ = dep.call(fail);
    clock.advance(Duration::from_secs(60));
    // Occupy the only worker behind the breaker's back, then probe.
    let holder = dep
        .pool()
        .unwrap()
        .submit_timeout(Duration::from_secs(10), move |_| {
            started_tx.send(()).unwrap();
            block_on(&gate);
            Ok::<_, String>(())
        })
        .unwrap();
    started.recv_timeout(Duration::from_secs(5)).expect("the holding job starts");
    assert_eq!(dep.call(ok).unwrap_err().rejection(), Some(Rejection::QueueFull));
    assert_eq!(dep.breaker().state(), State::HalfOpen);
    drop(release);
    holder.wait().unwrap();
    // The single probe slot came back with the rejection: this call is the probe.
    assert_eq!(admitted(|| dep.call(ok)).unwrap(), 1);
    assert_eq!(dep.breaker().state(), State::Closed);
}

#[test]
fn slow_calls_are_timed_on_the_injected_clock() {
    let clock = ManualClock::new();
    let dep = Dependency::builder("fraud")
        .workers(1)
        .queue(4)
        .clock(clock.clone())
        .breaker(BreakerConfig::count_based(10).slow_call_duration(Duration::from_secs(2)))
        .build()
        .unwrap();
    let moved = clock.clone();
    dep.call(move |_| {
        moved.advance(Duration::from_secs(3));
        Ok::<_, String>(())
    })
    .unwrap();
    dep.call(ok).unwrap();
    assert_eq!(dep.snapshot().calls.slow, 1);
    assert_eq!(dep.breaker().metrics().slow, 1);
}

#[test]
fn a_disabled_breaker_records_nothing_but_the_dependency_still_counts() {
    let dep = Dependency::builder("mail")
        .workers(1)
        .queue(4)
        .breaker(BreakerConfig::default().enabled(false))
        .build()
        .unwrap();
    for _ in 0..3 {
        dep.call(ok).unwrap();
    }
    let _ = dep.call(fail);
    let snap = dep.snapshot();
    assert_eq!(snap.state, State::Disabled);
    assert_eq!((snap.calls.successful, snap.calls.failed), (3, 1));
    let m = dep.breaker().metrics();
    assert_eq!((m.successful, m.failed), (0, 0));
}

/// Fills a 1-worker, 2-slot dependency so that one job runs for a long time
/// and one abandoned job waits in the queue, after a first job has taught the
/// dependency that jobs take about `service`.
fn busy_dependency(admission: bool, service: Duration, gate: &Receiver<()>) -> Dependency {
    let dep = Dependency::builder("slow")
        .workers(1)
        .queue(2)
        .timeout(Duration::from_millis(100))
        .deadline_aware_admission(admission)
        .build()
        .unwrap();
    // One job that runs for `service` teaches the dependency its service time. When that
    // is longer than the deadline its caller times out, and the job still finishes.
    let r = dep.call(move |_| {
        thread::sleep(service);
        Ok::<_, String>(())
    });
    if service >= Duration::from_millis(100) {
        assert!(r.unwrap_err().is_timeout());
    }
    assert!(eventually(
        || dep.pool().unwrap().stats().busy == 0 && dep.snapshot().mean_service_time.is_some()
    ));
    // The worker is busy with a blocked job, and one more waits behind it.
    for _ in 0..2 {
        let gate = gate.clone();
        let r = dep.call(move |_| {
            block_on(&gate);
            Ok::<_, String>(())
        });
        assert!(r.unwrap_err().is_timeout());
    }
    assert_eq!(dep.pool().unwrap().stats().queued, 1);
    dep
}

#[test]
fn deadline_aware_admission_rejects_at_once() {
    let (release, gate) = gate();
    let dep = busy_dependency(true, Duration::from_secs(1), &gate);
    let t = Instant::now();
    let r = dep.call(ok);
    let took = t.elapsed();
    assert_eq!(r.unwrap_err().rejection(), Some(Rejection::DeadlineUnmeetable));
    assert!(took < Duration::from_millis(100), "rejected after {took:?}, the deadline is 100 ms");
    let snap = dep.snapshot();
    assert_eq!(snap.calls.deadline_unmeetable, 1);
    assert_eq!(dep.breaker().metrics().failed, 3, "only the three timeouts are failures");
    drop(release);
}

#[test]
fn without_admission_the_same_call_waits_and_times_out() {
    let (release, gate) = gate();
    let dep = busy_dependency(false, Duration::from_millis(300), &gate);
    let r = dep.call(ok);
    assert!(r.unwrap_err().is_timeout());
    assert_eq!(dep.snapshot().calls.deadline_unmeetable, 0);
    drop(release);
}

#[test]
fn admission_admits_when_the_wait_fits() {
    let (release, gate) = gate();
    // A service time of 20 ms: one queued job ahead is a 20 ms wait, well within 100 ms.
    let dep = busy_dependency(true, Duration::from_millis(20), &gate);
    let r = dep.call(ok);
    assert!(r.unwrap_err().is_timeout(), "admitted, then timed out behind the blocked worker");
    drop(release);
}

#[test]
fn one_open_circuit_leaves_the_other_calling() {
    // Per call site circuits: account-access still calls through when account-read is open.
    let registry = Registry::new();
    let access = Dependency::builder("account-access").workers(2).build().unwrap();
    let read = Dependency::builder("account-read").workers(2).build().unwrap();
    registry.register(access.clone()).unwrap();
    registry.register(read.clone()).unwrap();
    read.breaker().transition_to(State::ForcedOpen);
    assert_eq!(read.call(ok).unwrap_err().rejection(), Some(Rejection::NotPermitted));
    assert_eq!(access.call(ok).unwrap(), 1);
    assert_eq!(registry.get("account-read").unwrap().breaker().state(), State::ForcedOpen);
    assert_eq!(registry.get("account-access").unwrap().breaker().state(), State::Closed);
}

fn quick_retry() -> Retry {
    Retry::builder()
        .max_attempts(3)
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
        .build()
        .unwrap()
}

#[test]
fn retry_succeeds_on_the_second_attempt() {
    let dep = Dependency::builder("read").workers(1).queue(4).retry(quick_retry()).build().unwrap();
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&attempts);
    let r = dep.with().retry().call(move |ctx| {
        seen.fetch_add(1, Ordering::SeqCst);
        if ctx.attempt() == 1 { Err("503".to_owned()) } else { Ok(ctx.attempt()) }
    });
    assert_eq!(r.unwrap(), 2);
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    let c = dep.snapshot().calls;
    assert_eq!((c.failed, c.successful, c.retried, c.total()), (1, 1, 1, 2));
    // The breaker counted each attempt.
    let m = dep.breaker().metrics();
    assert_eq!((m.failed, m.successful), (1, 1));
}

#[test]
fn retry_gives_up_after_max_attempts() {
    let dep = Dependency::builder("read").workers(1).queue(4).retry(quick_retry()).build().unwrap();
    let r = dep.with().retry().call(fail);
    assert!(matches!(r, Err(Error::Failed(_))));
    let c = dep.snapshot().calls;
    assert_eq!((c.failed, c.retried), (3, 2));
}

#[test]
fn retry_never_retries_an_open_breaker() {
    let dep = Dependency::builder("read").workers(1).queue(4).retry(quick_retry()).build().unwrap();
    dep.breaker().transition_to(State::ForcedOpen);
    let ran = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&ran);
    let r = dep.with().retry().call(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
        Ok::<_, String>(())
    });
    assert_eq!(r.unwrap_err().rejection(), Some(Rejection::NotPermitted));
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let c = dep.snapshot().calls;
    assert_eq!((c.not_permitted, c.retried), (1, 0));
}

#[test]
fn retry_never_retries_an_ignored_error() {
    let dep = Dependency::builder("read").workers(1).queue(4).retry(quick_retry()).build().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&ran);
    let r = dep.with().retry().call(move |ctx| {
        seen.fetch_add(1, Ordering::SeqCst);
        bad_request(ctx)
    });
    assert!(matches!(r, Err(Error::Failed(_))));
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(dep.snapshot().calls.retried, 0);
}

#[test]
fn retry_retries_timeouts() {
    let (release, gate) = gate();
    let dep = Dependency::builder("read")
        .workers(2)
        .queue(2)
        .timeout(Duration::from_millis(200))
        .retry(quick_retry())
        .build()
        .unwrap();
    let r = dep.with().retry().call(move |ctx| -> Result<u32, String> {
        match ctx.attempt() {
            1 => {
                block_on(&gate);
                Ok(1)
            }
            n => Ok(n),
        }
    });
    drop(release);
    assert_eq!(r.unwrap(), 2);
    let c = dep.snapshot().calls;
    assert_eq!((c.timed_out, c.successful, c.retried), (1, 1, 1));
}

#[test]
fn retry_never_reruns_a_panicking_job() {
    // A deadline long enough for a panic to be reported even on a busy machine.
    let dep = Dependency::builder("read")
        .workers(2)
        .queue(2)
        .timeout(Duration::from_millis(500))
        .retry(quick_retry())
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&ran);
    let r = dep.with().retry().call(move |_ctx| -> Result<u32, String> {
        counter.fetch_add(1, Ordering::SeqCst);
        panic!("a bug in the job");
    });
    assert!(matches!(r, Err(Error::Panicked(ref m)) if m.contains("a bug in the job")), "{r:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 1, "a panic is a bug, not a transient fault");
    let c = dep.snapshot().calls;
    assert_eq!((c.panicked, c.retried), (1, 0));
}

#[test]
fn the_budget_bounds_attempts_under_a_permanent_failure() {
    let calls = 100u64;
    let (percent, per_sec) = (20.0, 1u32);
    // A disabled breaker never opens, so only the budget stands between a permanently
    // failing provider and `calls x max_attempts` = 300 attempts.
    let dep = Dependency::builder("read")
        .workers(1)
        .queue(4)
        .breaker(BreakerConfig::default().enabled(false))
        .retry(
            Retry::builder()
                .max_attempts(3)
                .backoff(Duration::ZERO, Duration::ZERO)
                .budget(percent, per_sec)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let attempts = Arc::new(AtomicU32::new(0));
    for _ in 0..calls {
        let seen = Arc::clone(&attempts);
        let r = dep.with().retry().call(move |ctx| {
            seen.fetch_add(1, Ordering::SeqCst);
            fail(ctx)
        });
        assert!(r.is_err());
    }
    let attempts = u64::from(attempts.load(Ordering::SeqCst));
    let floor = u64::from(per_sec) * Retry::BUDGET_WINDOW.as_secs();
    let bound = (calls as f64 * (1.0 + percent / 100.0)) as u64 + floor;
    assert!(attempts <= bound, "{attempts} attempts for {calls} calls, bound {bound}");
    assert!(attempts > calls, "the budget allowed some retries");
    let c = dep.snapshot().calls;
    assert_eq!(c.retried, attempts - calls);
    assert_eq!(c.total(), attempts);
}

#[test]
fn the_budget_holds_under_concurrent_callers() {
    const THREADS: u64 = 4;
    const CALLS: u64 = 50;
    let dep = Dependency::builder("read")
        .workers(THREADS as usize)
        .queue(THREADS as usize)
        .breaker(BreakerConfig::default().enabled(false))
        .retry(
            Retry::builder()
                .max_attempts(3)
                .backoff(Duration::ZERO, Duration::ZERO)
                .budget(20.0, 1)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let attempts = Arc::new(AtomicU32::new(0));
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (dep, attempts, barrier) = (dep.clone(), Arc::clone(&attempts), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..CALLS {
                    let seen = Arc::clone(&attempts);
                    let _ = dep.with().retry().call(move |ctx| {
                        seen.fetch_add(1, Ordering::SeqCst);
                        fail(ctx)
                    });
                }
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    let calls = THREADS * CALLS;
    let attempts = u64::from(attempts.load(Ordering::SeqCst));
    let bound = calls + calls / 5 + Retry::BUDGET_WINDOW.as_secs();
    assert!(attempts <= bound, "{attempts} attempts for {calls} calls, bound {bound}");
    assert_eq!(dep.snapshot().calls.total(), attempts);
}

#[test]
fn backoff_never_sleeps_past_the_overall_timeout() {
    let dep = Dependency::builder("read")
        .workers(1)
        .queue(4)
        .retry(
            Retry::builder()
                .max_attempts(20)
                .backoff(Duration::from_millis(200), Duration::from_secs(1))
                .overall_timeout(Duration::from_millis(150))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    for _ in 0..5 {
        let t = Instant::now();
        let r = dep.with().retry().call(fail);
        let took = t.elapsed();
        // The job fails at once and the backoff would pass the overall timeout:
        // its failure is the answer. Only a thread held off the CPU until the
        // overall timeout (two busy loops beside the suite did it once) turns
        // it into that timeout's answer, as the README's Semantics say.
        let at_overall_timeout =
            matches!(r, Err(Error::Timeout { .. })) && took >= Duration::from_millis(140);
        assert!(matches!(r, Err(Error::Failed(_))) || at_overall_timeout, "{r:?} after {took:?}");
        assert!(took < Duration::from_millis(400), "took {took:?} with a 150 ms overall timeout");
    }
}

#[test]
fn the_overall_timeout_also_bounds_each_attempt() {
    let (release, gate) = gate();
    let dep = Dependency::builder("read")
        .workers(2)
        .timeout(Duration::from_secs(2))
        .retry(Retry::builder().overall_timeout(Duration::from_millis(200)).build().unwrap())
        .build()
        .unwrap();
    let t = Instant::now();
    let r = dep.with().retry().call(move |_| {
        block_on(&gate);
        Ok::<_, String>(())
    });
    let took = t.elapsed();
    assert!(r.unwrap_err().is_timeout());
    assert!(took < Duration::from_millis(700), "a 200 ms overall timeout returned after {took:?}");
    drop(release);
}

#[test]
fn invalid_config_names_the_field() {
    let field = |b: watertight::DependencyBuilder| b.build().unwrap_err().field();
    assert_eq!(field(Dependency::builder("x").workers(0)), "workers");
    assert_eq!(field(Dependency::builder("x").timeout(Duration::ZERO)), "timeout");
    assert_eq!(
        field(Dependency::builder("x").breaker(BreakerConfig::default().failure_rate(101.0))),
        "failure_rate"
    );
    assert_eq!(Retry::builder().max_attempts(0).build().unwrap_err().field(), "retry.max_attempts");
    assert_eq!(field(Dependency::builder("")), "name");
    let err = Dependency::builder("x").workers(0).build().unwrap_err();
    assert_eq!(err.to_string(), "workers must be between 1 and 4096, got 0");
}

#[test]
fn events_reach_listeners() {
    let events = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&events);
    let (release, gate) = gate();
    let dep = Dependency::builder("fraud")
        .workers(1)
        .timeout(Duration::from_millis(50))
        .on_event(move |e| {
            let line = match e {
                Event::Transition(t) => format!("transition to {}", t.to().as_str()),
                Event::Rejected { dependency, rejection } => {
                    format!("{dependency} rejected {}", rejection.as_str())
                }
                Event::TimedOut { dependency, .. } => format!("{dependency} timed out"),
                _ => "other".to_owned(),
            };
            sink.lock().unwrap().push(line);
        })
        .build()
        .unwrap();
    let r = dep.call(move |_| {
        block_on(&gate);
        Ok::<_, String>(())
    });
    assert!(r.is_err());
    dep.breaker().transition_to(State::ForcedOpen);
    let _ = dep.call(ok);
    drop(release);
    let events = events.lock().unwrap().clone();
    assert_eq!(events, ["fraud timed out", "transition to forced_open", "fraud rejected not_permitted"]);
}

#[test]
fn registry_refuses_duplicates_and_checks_capacity() {
    let registry = Registry::new();
    // Breakers that one wave of hung calls can open (10 and 4 failures at most).
    let fraud = Dependency::builder("fraud")
        .workers(10)
        .queue(5)
        .breaker(BreakerConfig::count_based(20).minimum_calls(10));
    registry.register(fraud.build().unwrap()).unwrap();
    let account = Dependency::builder("account")
        .workers(4)
        .queue(0)
        .breaker(BreakerConfig::time_based(30).minimum_calls(4));
    registry.register(account.build().unwrap()).unwrap();
    let dup = registry.register(Dependency::builder("fraud").workers(1).build().unwrap()).unwrap_err();
    assert_eq!(dup.field(), "name");
    assert!(dup.to_string().contains("fraud"), "{dup}");
    assert_eq!(registry.dependencies().len(), 2);

    // 16 request threads: fraud can hold 15 (> half: a warning), account 4.
    let report = registry.check_capacity(16).unwrap();
    assert_eq!(report.entries[0].hold, 15);
    assert_eq!(report.entries[0].room_left, 1);
    assert_eq!(report.entries[0].level, CapacityLevel::Warning);
    assert_eq!(report.entries[1].level, CapacityLevel::Ok);
    let warnings = report.warnings();
    assert!(warnings.iter().any(|w| w.contains("`fraud`")), "{warnings:?}");
    assert!(warnings.iter().any(|w| w.contains("together")), "{warnings:?}");

    // 15 request threads: fraud can take all of them.
    let err = registry.check_capacity(15).unwrap_err();
    assert_eq!((err.path(), err.field()), ("fraud", "capacity"));
    assert!(err.to_string().contains("`fraud` can hold 15 of 15"), "{err}");

    assert!(registry.check_capacity(64).unwrap().warnings().is_empty());
}

/// Makes a known mix of calls on two dependencies and returns how many each made.
fn known_mix(registry: &Registry) -> Vec<(String, u64)> {
    let (release, gate) = gate();
    // Alpha's outcomes come back at once; beta's first call times out (and keeps one
    // of its two workers until the end).
    let a = Dependency::builder("alpha").workers(2).queue(4).timeout(Duration::from_secs(5)).build().unwrap();
    let b =
        Dependency::builder("beta").workers(2).queue(4).timeout(Duration::from_millis(100)).build().unwrap();
    registry.register(a.clone()).unwrap();
    registry.register(b.clone()).unwrap();
    for _ in 0..5 {
        a.call(ok).unwrap();
    }
    for _ in 0..3 {
        let _ = a.call(fail);
    }
    let _ = a.call(bad_request);
    let _ = a.call(|_| -> Result<(), String> { panic!("bug") });
    let _ = b.call(move |_| {
        block_on(&gate);
        Ok::<_, String>(())
    });
    let _ = b.with().retry().call(fail);
    b.breaker().transition_to(State::ForcedOpen);
    let _ = b.call(ok);
    drop(release);
    vec![("alpha".to_owned(), 10), ("beta".to_owned(), 5)]
}

#[test]
fn registry_snapshot_adds_up() {
    let registry = Registry::new();
    let made = known_mix(&registry);
    let snaps = registry.snapshot();
    assert_eq!(snaps.len(), 2);
    for (name, calls) in made {
        let s = snaps.iter().find(|s| s.name == name).expect("every dependency is in the snapshot");
        assert_eq!(s.calls.total(), calls, "{name}: {:?}", s.calls);
    }
    let a = &snaps[0].calls;
    assert_eq!((a.successful, a.failed, a.ignored, a.panicked), (5, 3, 1, 1));
    let b = &snaps[1].calls;
    assert_eq!((b.timed_out, b.failed, b.retried, b.not_permitted), (1, 3, 2, 1));
    assert_eq!(snaps[1].state, State::ForcedOpen);
}

#[cfg(feature = "prometheus")]
#[test]
fn prometheus_text_has_every_dependency_and_adds_up() {
    let registry = Registry::new();
    let made = known_mix(&registry);
    let text = watertight::metrics::encode_text(&registry);
    for (name, calls) in made {
        let prefix = format!("watertight_calls_total{{dependency=\"{name}\",kind=\"");
        let sum: u64 = text
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(sum, calls, "{name} in\n{text}");
        for metric in ["watertight_pool_workers", "watertight_pool_busy", "watertight_pool_queued"] {
            assert!(text.contains(&format!("{metric}{{dependency=\"{name}\"}}")), "{metric} for {name}");
        }
    }
    assert!(text.contains("watertight_state{dependency=\"beta\",state=\"forced_open\"} 1"), "{text}");
    assert!(text.contains("watertight_state{dependency=\"alpha\",state=\"closed\"} 1"), "{text}");
    assert!(text.contains("watertight_retries_total{dependency=\"beta\"} 2"), "{text}");
    assert!(text.trim_end().ends_with("# EOF"));
}

#[test]
fn every_call_has_exactly_one_outcome_under_load() {
    const THREADS: usize = 4;
    const CALLS: usize = 40;
    let dep = Dependency::builder("mixed")
        .workers(2)
        .queue(1)
        .timeout(Duration::from_millis(30))
        .breaker(BreakerConfig::count_based(10).minimum_calls(10).open_for(Duration::from_millis(20)))
        .build()
        .unwrap();
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let dep = dep.clone();
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                let mut tally = [0u64; 4]; // ok, job error, rejected, timeout or panic
                for i in 0..CALLS {
                    let r = dep.call(move |ctx| -> Result<u32, String> {
                        match (t + i) % 5 {
                            0 => Err("503".into()),
                            1 => panic!("bug"),
                            2 => {
                                thread::sleep(ctx.remaining() + Duration::from_millis(5));
                                Ok(2)
                            }
                            _ => Ok(0),
                        }
                    });
                    let slot = match r {
                        Ok(_) => 0,
                        Err(Error::Failed(_)) => 1,
                        Err(Error::Rejected { .. }) => 2,
                        Err(_) => 3,
                    };
                    tally[slot] += 1;
                }
                tally
            })
        })
        .collect();
    let mut tally = [0u64; 4];
    for h in handles {
        for (sum, n) in tally.iter_mut().zip(h.join().unwrap()) {
            *sum += n;
        }
    }
    let c = dep.snapshot().calls;
    assert_eq!(c.total(), (THREADS * CALLS) as u64, "{c:?}");
    assert_eq!(c.successful, tally[0]);
    assert_eq!(c.failed + c.ignored, tally[1]);
    assert_eq!(c.not_permitted + c.queue_full + c.deadline_unmeetable + c.shutting_down, tally[2]);
    assert_eq!(c.timed_out + c.panicked, tally[3]);
}

#[test]
fn shutdown_answers_shutting_down_and_is_not_a_failure() {
    let dep = Dependency::builder("fraud").workers(1).build().unwrap();
    dep.shutdown(Duration::from_secs(1));
    assert_eq!(dep.call(ok).unwrap_err().rejection(), Some(Rejection::ShuttingDown));
    assert_eq!(dep.snapshot().calls.shutting_down, 1);
    assert_eq!(dep.breaker().metrics().failed, 0);
}

#[test]
fn a_panicking_listener_cannot_change_what_the_breaker_saw() {
    let (release, gate) = gate();
    let dep = Dependency::builder("read")
        .workers(2)
        .queue(0)
        .timeout(Duration::from_millis(100))
        .breaker(BreakerConfig::count_based(4).minimum_calls(2))
        .on_event(|event| {
            if matches!(event, Event::TimedOut { .. }) {
                panic!("a listener with a bug");
            }
        })
        .build()
        .unwrap();
    for _ in 0..2 {
        let gate = gate.clone();
        let r = dep.call(move |_ctx| -> Result<(), String> {
            block_on(&gate);
            Ok(())
        });
        // The caller still gets its answer, not the listener's panic.
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    }
    drop(release);
    let snap = dep.snapshot();
    assert_eq!(snap.calls.timed_out, 2);
    // Both timeouts were recorded as failures: the breaker opened.
    assert_eq!(snap.state, State::Open);
}
