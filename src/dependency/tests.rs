//! Each kind of call goes through the one admission and the one settlement:
//! both are tallied per dependency (in tests only), and each test below makes
//! calls of one kind and reads the tallies and the counts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Mode;
use crate::{CallContext, Dependency, Error, Outcome, Rejection};

/// `[admitted, refused, settled]`, by dependency name.
static TALLY: Mutex<Option<HashMap<String, [u32; 3]>>> = Mutex::new(None);

pub(super) const ADMITTED: usize = 0;
pub(super) const REFUSED: usize = 1;
pub(super) const SETTLED: usize = 2;

pub(super) fn tally(name: &str, which: usize) {
    let mut tally = TALLY.lock().unwrap_or_else(|e| e.into_inner());
    tally.get_or_insert_with(HashMap::new).entry(name.to_owned()).or_default()[which] += 1;
}

/// The tallies of `name`, once it has `settled` settlements (a worker may
/// settle a moment after the caller has its answer; bounded wait).
fn read(name: &str, settled: u32) -> [u32; 3] {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let now = TALLY.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|t| t.get(name).copied());
        let now = now.unwrap_or_default();
        if now[SETTLED] >= settled || Instant::now() >= until {
            return now;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
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
    assert_eq!(read("kind-once", 5), [5, 0, 5]);
    assert_eq!(dep.snapshot().calls.successful, 5);
    // A refusal is admission's answer, with nothing to settle.
    let late = dep.with().deadline(Instant::now()).call(ok);
    assert_eq!(late.unwrap_err().rejection(), Some(Rejection::DeadlineUnmeetable));
    assert_eq!(read("kind-once", 5), [5, 1, 5]);
}

#[test]
fn each_retry_is_an_attempt_of_its_own() {
    let dep = Dependency::builder("kind-retry")
        .workers(2)
        .retry(
            crate::retry::Retry::builder()
                .max_attempts(3)
                .backoff(Duration::ZERO, Duration::ZERO)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let answer = dep.with().retry().call(reset);
    assert!(matches!(answer, Err(Error::Failed(_))));
    assert_eq!(read("kind-retry", 3), [3, 0, 3]);
    let calls = dep.snapshot().calls;
    assert_eq!((calls.failed, calls.retried), (3, 2));
}

#[test]
fn a_hedge_is_a_second_attempt_settled_once() {
    let dep = Dependency::builder("kind-hedge")
        .workers(4)
        .hedge(crate::dependency::Hedge::after(Duration::from_millis(10)))
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
    assert_eq!(read("kind-hedge", 2), [2, 0, 2]);
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
    assert_eq!(read("kind-detached", 1), [1, 0, 1]);
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
    assert_eq!(read("kind-caller", 2), [2, 0, 2]);
    let calls = dep.snapshot().calls;
    assert_eq!((calls.successful, calls.failed), (1, 1));
    // A detached call has no worker here: refused by admission, counted once.
    assert_eq!(dep.spawn(ok), Err(Rejection::QueueFull));
    assert_eq!(read("kind-caller", 2), [2, 1, 2]);
    assert_eq!(dep.snapshot().calls.get(Outcome::QueueFull), 1);
}

#[test]
fn a_fan_out_is_attempts_of_its_own_under_one_deadline() {
    let retry =
        crate::retry::Retry::builder().max_attempts(3).backoff(Duration::ZERO, Duration::ZERO).build();
    let retried = Dependency::builder("kind-fan-retry").workers(2).retry(retry.unwrap()).build().unwrap();
    let plain = Dependency::builder("kind-fan-once").workers(2).build().unwrap();
    let hedged = Dependency::builder("kind-fan-hedge")
        .workers(4)
        .hedge(crate::dependency::Hedge::after(Duration::from_millis(10)))
        .build()
        .unwrap();
    let here = Dependency::builder("kind-fan-caller").mode(Mode::CallerThread).workers(1).build().unwrap();
    let fan = super::FanOut::timeout(Duration::from_secs(5));
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
    assert_eq!(read("kind-fan-retry", 3), [3, 0, 3]);
    assert_eq!(read("kind-fan-once", 1), [1, 0, 1]);
    assert_eq!(read("kind-fan-hedge", 2), [2, 0, 2]);
    assert_eq!(read("kind-fan-caller", 1), [1, 0, 1]);
    let (r, h) = (retried.snapshot().calls, hedged.snapshot().calls);
    assert_eq!((r.failed, r.retried), (3, 2));
    assert_eq!((h.successful, h.hedged, h.hedges_won), (2, 1, 1));
    // A leg started past the deadline is refused by admission, and answers at once.
    let past = super::FanOut::until(Instant::now());
    let late = past.start(&plain, ok);
    assert_eq!(late.wait().unwrap_err().rejection(), Some(Rejection::DeadlineUnmeetable));
    assert_eq!(read("kind-fan-once", 1), [1, 1, 1]);
}
