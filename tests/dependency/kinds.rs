//! Each kind of call (once, retried, hedged, detached, on the caller's
//! thread, fanned out) is made of attempts, each admitted once and settled
//! once: every attempt that ran is counted once, by its settlement, and a
//! refusal is admission's answer, counted once with nothing to settle.

use crate::support::wait_until;

use std::time::{Duration, Instant};

use watertight::dependency::Mode;
use watertight::{CallContext, Dependency, Error, Outcome, Rejection};

/// Waits (bounded) until `dep` has counted `n` attempts that ran (a worker
/// may settle a moment after the caller has its answer), and never more.
fn ran(dep: &Dependency, n: u64) {
    let count = || {
        let c = dep.snapshot().calls;
        c.successful + c.failed
    };
    assert!(wait_until(Duration::from_secs(10), || count() >= n), "{:?}", dep.snapshot().calls);
    assert_eq!(count(), n, "{:?}", dep.snapshot().calls);
}

fn ok(_: &CallContext) -> Result<u32, std::io::Error> {
    Ok(7)
}

fn reset(_: &CallContext) -> Result<u32, std::io::Error> {
    Err(std::io::ErrorKind::ConnectionReset.into())
}

#[test]
fn once_is_one_admission_and_one_settlement() {
    let dep = Dependency::builder("kind-once").workers(2).build().unwrap();
    for _ in 0..5 {
        assert_eq!(dep.call(ok).unwrap(), 7);
    }
    ran(&dep, 5);
    assert_eq!(dep.snapshot().calls.successful, 5);
    // A refusal is admission's answer, with nothing to settle.
    let late = dep.with().deadline(Instant::now()).call(ok);
    assert_eq!(late.unwrap_err().rejection(), Some(Rejection::DeadlineUnmeetable));
    ran(&dep, 5);
}

#[test]
fn each_retry_is_an_attempt_of_its_own() {
    let dep = Dependency::builder("kind-retry")
        .workers(2)
        .retry(
            watertight::retry::Retry::builder()
                .max_attempts(3)
                .backoff(Duration::ZERO, Duration::ZERO)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let answer = dep.with().retry().call(reset);
    assert!(matches!(answer, Err(Error::Failed(_))));
    ran(&dep, 3);
    let calls = dep.snapshot().calls;
    assert_eq!((calls.failed, calls.retried), (3, 2));
}

#[test]
fn a_hedge_is_a_second_attempt_settled_once() {
    let dep = Dependency::builder("kind-hedge")
        .workers(4)
        .hedge(watertight::dependency::Hedge::after(Duration::from_millis(10)))
        .build()
        .unwrap();
    let answer = dep.with().hedge().call(|ctx: &CallContext| {
        if ctx.attempt() == 1 {
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok::<_, std::io::Error>(ctx.attempt())
    });
    assert_eq!(answer.unwrap(), 2);
    // The loser is settled on its worker when it returns.
    ran(&dep, 2);
    let calls = dep.snapshot().calls;
    assert_eq!((calls.successful, calls.hedged, calls.hedges_won), (2, 1, 1));
}

#[test]
fn a_detached_call_is_settled_on_its_worker() {
    let dep = Dependency::builder("kind-detached").workers(1).build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    dep.with()
        .spawn_with(move |answer: Result<u32, Error<std::io::Error>>| tx.send(answer.is_ok()).unwrap(), ok)
        .unwrap();
    assert!(rx.recv_timeout(Duration::from_secs(10)).unwrap());
    ran(&dep, 1);
    assert_eq!(dep.snapshot().calls.successful, 1);
}

#[test]
fn caller_thread_mode_runs_the_attempt_where_it_stands() {
    let dep = Dependency::builder("kind-caller").mode(Mode::CallerThread).workers(1).build().unwrap();
    let here = std::thread::current().id();
    let ran_on =
        dep.call(move |_: &CallContext| Ok::<_, std::io::Error>(std::thread::current().id())).unwrap();
    assert_eq!(ran_on, here);
    assert!(dep.call(reset).is_err());
    ran(&dep, 2);
    let calls = dep.snapshot().calls;
    assert_eq!((calls.successful, calls.failed), (1, 1));
    // A detached call has no worker here: refused by admission, counted once.
    assert_eq!(dep.spawn(ok), Err(Rejection::QueueFull));
    ran(&dep, 2);
    assert_eq!(dep.snapshot().calls.get(Outcome::QueueFull), 1);
}

#[test]
fn a_fan_out_is_attempts_of_its_own_under_one_deadline() {
    let retry =
        watertight::retry::Retry::builder().max_attempts(3).backoff(Duration::ZERO, Duration::ZERO).build();
    let retried = Dependency::builder("kind-fan-retry").workers(2).retry(retry.unwrap()).build().unwrap();
    let plain = Dependency::builder("kind-fan-once").workers(2).build().unwrap();
    let hedged = Dependency::builder("kind-fan-hedge")
        .workers(4)
        .hedge(watertight::dependency::Hedge::after(Duration::from_millis(10)))
        .build()
        .unwrap();
    let here = Dependency::builder("kind-fan-caller").mode(Mode::CallerThread).workers(1).build().unwrap();
    let fan = watertight::FanOut::timeout(Duration::from_secs(5));
    let r = retried.with().retry().fan(&fan, reset);
    let o = fan.start(&plain, ok);
    let h = hedged.with().hedge().fan(&fan, |ctx: &CallContext| {
        if ctx.attempt() == 1 {
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok::<_, std::io::Error>(ctx.attempt())
    });
    // Caller-thread mode: run where the leg is started, done before `start` returns.
    let c = fan.start(&here, ok);
    assert!(c.is_done());
    fan.wait_all();
    assert!(matches!(r.wait(), Err(Error::Failed(_))));
    assert_eq!(o.wait().unwrap(), 7);
    assert_eq!(h.wait().unwrap(), 2);
    assert_eq!(c.wait().unwrap(), 7);
    ran(&retried, 3);
    ran(&plain, 1);
    ran(&hedged, 2);
    ran(&here, 1);
    let (r, h) = (retried.snapshot().calls, hedged.snapshot().calls);
    assert_eq!((r.failed, r.retried), (3, 2));
    assert_eq!((h.successful, h.hedged, h.hedges_won), (2, 1, 1));
    // A leg started past the deadline is refused by admission, and answers at once.
    let past = watertight::FanOut::until(Instant::now());
    let late = past.start(&plain, ok);
    assert_eq!(late.wait().unwrap_err().rejection(), Some(Rejection::DeadlineUnmeetable));
    ran(&plain, 1);
}
