//! Detached calls (`Dependency::spawn`, `spawn_with`): admitted or refused at
//! once, never holding the caller, and each answered and counted exactly once,
//! against a real hung provider on loopback.
#![cfg(all(feature = "ureq", feature = "testing"))]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use support::{FakeProvider, Fault, provider, wait_until, warnings};
use watertight::http::WithDeadline;
use watertight::{
    CallContext, Dependency, Error, Rejection,
    breaker::{BreakerConfig, State},
};

const SETTLE: Duration = Duration::from_secs(10);
const ANSWER: Duration = Duration::from_secs(10);

/// What a detached call's callback received, in a form that can be compared.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    Ok(String),
    Failed(String),
    Timeout,
    Panicked(String),
    Rejected(Rejection),
}

fn got<T: ToString, E: std::fmt::Display>(answer: Result<T, Error<E>>) -> Got {
    match answer {
        Ok(v) => Got::Ok(v.to_string()),
        Err(Error::Failed(e)) => Got::Failed(e.to_string()),
        Err(Error::Timeout { .. }) => Got::Timeout,
        Err(Error::Panicked(msg)) => Got::Panicked(msg),
        Err(Error::Rejected { reason: r, .. }) => Got::Rejected(r),
        Err(other) => panic!("an error this test does not know: {other}"),
    }
}

/// A breaker that opens once 5 calls are in its window of 10 and half or more
/// failed, and stays open for the whole test.
fn small_breaker() -> BreakerConfig {
    BreakerConfig::count_based(10).minimum_calls(5).failure_rate(50.0).open_for(Duration::from_secs(60))
}

/// A POST to the provider, bounded by the call's deadline (the agent has no
/// timeout of its own).
fn notify(agent: &ureq::Agent, url: &str, ctx: &CallContext) -> Result<String, ureq::Error> {
    agent.post(url).with_deadline(ctx).send("order ord-1 placed")?.body_mut().read_to_string()
}

#[test]
fn forty_detached_calls_to_a_hung_provider_return_at_once_open_the_breaker_and_are_counted_once() {
    let hung = provider(Fault::Hang);
    // A `max_wait` that a blocking call would spend waiting for room: a
    // detached call never does.
    let dep = Dependency::builder("notification")
        .workers(4)
        .queue(8)
        .max_wait(Duration::from_millis(100))
        .timeout(Duration::from_millis(200))
        .breaker(small_breaker())
        .build()
        .unwrap();
    let agent = ureq::Agent::new_with_defaults();
    let url = format!("{}/notify", hung.url());
    let answered = Arc::new(AtomicUsize::new(0));
    let answers = Arc::new(Mutex::new(Vec::new()));

    let spawn = || {
        let (agent, url, answered, answers) = (agent.clone(), url.clone(), answered.clone(), answers.clone());
        let began = Instant::now();
        let admitted = dep.with().spawn_with(
            move |answer: Result<String, Error<ureq::Error>>| {
                answers.lock().unwrap().push(got(answer));
                answered.fetch_add(1, Ordering::SeqCst);
            },
            move |ctx: &CallContext| notify(&agent, &url, ctx),
        );
        (admitted, began.elapsed())
    };

    // 20 back to back: the workers and the queue take what they can, the
    // rest is refused at once (nothing is recorded before the first deadline).
    let mut results: Vec<(Result<(), Rejection>, Duration)> = (0..20).map(|_| spawn()).collect();
    assert!(results.iter().any(|(r, _)| r.is_ok()), "some calls were admitted: {results:?}");
    for (r, _) in &results {
        assert!(matches!(r, Ok(()) | Err(Rejection::QueueFull)), "first wave: {r:?}");
    }
    // The admitted calls time out at their deadline and open the breaker.
    assert!(
        wait_until(SETTLE, || dep.breaker().state() == State::Open),
        "the breaker opened: {:?}",
        dep.snapshot()
    );
    // 20 more: refused by the open breaker, at once.
    for _ in 0..20 {
        let (r, took) = spawn();
        assert_eq!(r, Err(Rejection::NotPermitted));
        results.push((r, took));
    }
    assert_eq!(results.len(), 40);

    let admitted = results.iter().filter(|(r, _)| r.is_ok()).count();
    // Every admitted call is answered once, and every call counted once.
    assert!(
        wait_until(SETTLE, || answered.load(Ordering::SeqCst) == admitted
            && dep.snapshot().calls.total() == 40),
        "settled: answered {} of {admitted}, {:?}",
        answered.load(Ordering::SeqCst),
        dep.snapshot().calls
    );
    let calls = dep.snapshot().calls;
    let rejected_at_once = |want: Rejection| results.iter().filter(|(r, _)| *r == Err(want)).count() as u64;
    assert_eq!(calls.queue_full, rejected_at_once(Rejection::QueueFull), "{calls:?}");
    assert_eq!(calls.not_permitted, rejected_at_once(Rejection::NotPermitted), "{calls:?}");
    assert_eq!(calls.not_permitted, 20, "{calls:?}");
    // The admitted ones all ended in a failure at their deadline: a timeout,
    // or ureq's own timeout error when it fired first.
    assert_eq!(calls.timed_out + calls.failed, admitted as u64, "{calls:?}");
    assert_eq!(calls.successful + calls.ignored + calls.panicked + calls.shutting_down, 0, "{calls:?}");
    let answers = answers.lock().unwrap().clone();
    assert_eq!(answers.len(), admitted);
    for a in &answers {
        assert!(matches!(a, Got::Timeout | Got::Failed(_)), "{a:?}");
    }
    // Nothing more answers or counts afterwards.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(answered.load(Ordering::SeqCst), admitted);
    assert_eq!(dep.snapshot().calls.total(), 40);

    let mut took: Vec<Duration> = results.iter().map(|(_, t)| *t).collect();
    took.sort();
    let (median, p90, max) = (took[took.len() / 2], took[took.len() * 9 / 10], took[took.len() - 1]);
    println!("spawn returned in: median {median:?}, p90 {p90:?}, max {max:?} (40 calls, provider hung)");
    // Returning at once: well under the 100 ms max_wait and the 200 ms timeout.
    // 36 of 40 under 5 ms; the slowest may have lost its core on a loaded machine.
    assert!(p90 < Duration::from_millis(5), "p90 spawn {p90:?}: {took:?}");
    assert!(max < Duration::from_millis(50), "slowest spawn {max:?}");
}

#[test]
fn shutdown_answers_queued_detached_calls() {
    let dep = Dependency::builder("notification")
        .workers(1)
        .queue(4)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel::<(usize, Got)>();
    let (release, gate) = mpsc::channel::<()>();
    let (started_tx, started) = mpsc::channel::<()>();

    // The first call holds the only worker until released.
    let answer = tx.clone();
    dep.with()
        .spawn_with(
            move |a: Result<&str, Error<std::io::Error>>| answer.send((0, got(a))).unwrap(),
            move |ctx: &CallContext| {
                started_tx.send(()).unwrap();
                let _ = gate.recv_timeout(ctx.remaining());
                Ok("delivered")
            },
        )
        .unwrap();
    started.recv_timeout(ANSWER).expect("the first call started");
    // Three more wait in the queue.
    for i in 1..=3 {
        let answer = tx.clone();
        dep.with()
            .spawn_with(
                move |a: Result<&str, Error<std::io::Error>>| answer.send((i, got(a))).unwrap(),
                |_: &CallContext| -> Result<&str, std::io::Error> { unreachable!("never runs") },
            )
            .unwrap();
    }
    assert_eq!(dep.snapshot().pool.queued, 3);

    // The grace ends with the worker still busy: the queued calls are answered.
    assert!(!dep.shutdown(Duration::from_millis(100)), "the busy worker is not joined");
    let mut queued: Vec<(usize, Got)> = (0..3).map(|_| rx.recv_timeout(ANSWER).expect("an answer")).collect();
    queued.sort_by_key(|(i, _)| *i);
    assert_eq!(queued, (1..=3).map(|i| (i, Got::Rejected(Rejection::ShuttingDown))).collect::<Vec<_>>());
    // A call after shutdown is refused at once, and its callback never runs.
    let answer = tx.clone();
    let late = dep.with().spawn_with(
        move |a: Result<&str, Error<std::io::Error>>| answer.send((9, got(a))).unwrap(),
        |_: &CallContext| Ok("never"),
    );
    assert_eq!(late, Err(Rejection::ShuttingDown));

    // The running call still finishes, and is answered.
    release.send(()).unwrap();
    assert_eq!(rx.recv_timeout(ANSWER).expect("an answer"), (0, Got::Ok("delivered".into())));
    assert!(dep.shutdown(Duration::from_secs(10)), "every worker joined");
    drop(tx);
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "no other answer");

    let calls = dep.snapshot().calls;
    assert_eq!((calls.successful, calls.shutting_down, calls.total()), (1, 4, 5), "{calls:?}");
    assert_eq!(calls.expired, 3, "{calls:?}");
}

#[test]
fn the_callback_receives_the_value_and_the_errors() {
    let ok = provider(Fault::Healthy);
    let dep = Dependency::builder("notification")
        .workers(2)
        .queue(2)
        .timeout(Duration::from_secs(5))
        .breaker(small_breaker())
        .build()
        .unwrap();
    let agent = ureq::Agent::new_with_defaults();
    let (tx, rx) = mpsc::channel();

    // A real provider's answer.
    let (answer, url) = (tx.clone(), format!("{}/notify", ok.url()));
    dep.with()
        .spawn_with(
            move |a: Result<String, Error<ureq::Error>>| answer.send(got(a)).unwrap(),
            move |ctx: &CallContext| notify(&agent, &url, ctx),
        )
        .unwrap();
    assert_eq!(rx.recv_timeout(ANSWER).unwrap(), Got::Ok("ok".into()));

    // The job's own error, classified by its type: a refused connection is a failure.
    let answer = tx.clone();
    dep.with()
        .spawn_with(
            move |a: Result<u32, Error<std::io::Error>>| answer.send(got(a)).unwrap(),
            |_: &CallContext| Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
        )
        .unwrap();
    assert!(matches!(rx.recv_timeout(ANSWER).unwrap(), Got::Failed(_)));

    // A panic is caught, answered and counted; the worker lives on.
    let answer = tx.clone();
    dep.with()
        .spawn_with(
            move |a: Result<u32, Error<std::io::Error>>| answer.send(got(a)).unwrap(),
            |_: &CallContext| -> Result<u32, std::io::Error> { panic!("template missing") },
        )
        .unwrap();
    assert_eq!(rx.recv_timeout(ANSWER).unwrap(), Got::Panicked("template missing".into()));

    let answer = tx.clone();
    dep.with()
        .spawn_with(
            move |a: Result<u32, Error<std::io::Error>>| answer.send(got(a)).unwrap(),
            |_: &CallContext| Ok(7),
        )
        .unwrap();
    assert_eq!(rx.recv_timeout(ANSWER).unwrap(), Got::Ok("7".into()));

    let snap = dep.snapshot();
    let calls = snap.calls;
    assert_eq!((calls.successful, calls.failed, calls.panicked, calls.total()), (2, 1, 1, 4), "{calls:?}");
    // The breaker saw them too (4 of its 5 minimum calls: no rate yet).
    let metrics = dep.breaker().metrics();
    assert_eq!((metrics.successful, metrics.failed), (2, 2), "{metrics:?}");
    assert_eq!(snap.pool.workers, 2, "no worker lost to the panic");
    // The pool counts the panic too, once the job has unwound (after its callback ran).
    assert!(
        wait_until(SETTLE, || dep.pool().unwrap().stats().panicked == 1),
        "{:?}",
        dep.pool().unwrap().stats()
    );
}

#[test]
fn a_job_that_returns_after_its_deadline_is_a_timeout_and_a_failure() {
    let dep = Dependency::builder("notification")
        .workers(1)
        .queue(1)
        .timeout(Duration::from_millis(50))
        .breaker(small_breaker())
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    // It ignores its deadline and answers late (`Ok`, but nobody could use it).
    let answer = tx.clone();
    dep.with()
        .spawn_with(
            move |a: Result<u32, Error<std::io::Error>>| answer.send(got(a)).unwrap(),
            |ctx: &CallContext| {
                std::thread::sleep(ctx.remaining() + Duration::from_millis(100));
                Ok(1)
            },
        )
        .unwrap();
    // Queued behind it, it expires before a worker is free: answered without running.
    let answer = tx.clone();
    dep.with()
        .spawn_with(
            move |a: Result<u32, Error<std::io::Error>>| answer.send(got(a)).unwrap(),
            |_: &CallContext| -> Result<u32, std::io::Error> { unreachable!("expired in the queue") },
        )
        .unwrap();
    assert_eq!(rx.recv_timeout(ANSWER).unwrap(), Got::Timeout);
    assert_eq!(rx.recv_timeout(ANSWER).unwrap(), Got::Timeout);
    assert!(wait_until(SETTLE, || dep.snapshot().calls.total() == 2));
    let calls = dep.snapshot().calls;
    assert_eq!((calls.timed_out, calls.expired, calls.total()), (2, 1, 2), "{calls:?}");
    let metrics = dep.breaker().metrics();
    assert_eq!(metrics.failed, 2, "both recorded as failures: {metrics:?}");
}

#[test]
fn a_detached_call_never_waits_for_room() {
    let dep = Dependency::builder("notification")
        .workers(1)
        .queue(0)
        .max_wait(Duration::from_millis(500))
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let (release, gate) = mpsc::channel::<()>();
    let (started_tx, started) = mpsc::channel::<()>();
    dep.spawn(move |ctx: &CallContext| {
        started_tx.send(()).unwrap();
        let _ = gate.recv_timeout(ctx.remaining());
        Ok::<_, std::io::Error>(())
    })
    .unwrap();
    started.recv_timeout(ANSWER).unwrap();
    // The only worker is busy and there is no queue: a blocking call would
    // wait up to 500 ms for room; a detached one is refused at once.
    let began = Instant::now();
    let refused = dep.spawn(|_: &CallContext| Ok::<_, std::io::Error>(()));
    let took = began.elapsed();
    assert_eq!(refused, Err(Rejection::QueueFull));
    assert!(took < Duration::from_millis(100), "refused after {took:?}");
    release.send(()).unwrap();
    assert!(wait_until(SETTLE, || dep.snapshot().calls.total() == 2));
    let calls = dep.snapshot().calls;
    assert_eq!((calls.successful, calls.queue_full), (1, 1), "{calls:?}");
}

#[test]
fn dropping_the_last_handle_answers_the_queued_calls() {
    let dep = Dependency::builder("notification")
        .workers(1)
        .queue(2)
        .timeout(Duration::from_secs(30))
        .drop_grace(Duration::from_millis(50))
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let (release, gate) = mpsc::channel::<()>();
    let (started_tx, started) = mpsc::channel::<()>();
    let answer = tx.clone();
    dep.with()
        .spawn_with(
            move |a: Result<u32, Error<std::io::Error>>| answer.send(got(a)).unwrap(),
            move |ctx: &CallContext| {
                started_tx.send(()).unwrap();
                let _ = gate.recv_timeout(ctx.remaining());
                Ok(1)
            },
        )
        .unwrap();
    started.recv_timeout(ANSWER).unwrap();
    let answer = tx.clone();
    dep.with()
        .spawn_with(
            move |a: Result<u32, Error<std::io::Error>>| answer.send(got(a)).unwrap(),
            |_: &CallContext| -> Result<u32, std::io::Error> { unreachable!("discarded") },
        )
        .unwrap();
    // Queued calls do not keep the dependency alive: dropping it shuts it down.
    drop(dep);
    assert_eq!(rx.recv_timeout(ANSWER).unwrap(), Got::Rejected(Rejection::ShuttingDown));
    release.send(()).unwrap();
    assert_eq!(rx.recv_timeout(ANSWER).unwrap(), Got::Ok("1".into()));
}

#[test]
fn without_a_callback_a_failure_is_logged_at_warn() {
    let log = warnings();
    let refused = FakeProvider::start("mailer", Fault::Refuse, |_| (200, "ok".into())).unwrap();
    let dep = Dependency::builder("notify-log").workers(1).timeout(Duration::from_secs(5)).build().unwrap();
    let (agent, url) = (ureq::Agent::new_with_defaults(), format!("{}/notify", refused.url()));
    dep.spawn(move |ctx: &CallContext| notify(&agent, &url, ctx)).unwrap();
    let logged = |text: &str| {
        log.lock()
            .unwrap()
            .iter()
            .any(|w| w.starts_with("dependency notify-log: detached call failed") && w.contains(text))
    };
    assert!(wait_until(SETTLE, || logged("")), "{:?}", log.lock().unwrap());
    // With the provider's own error, not only "the call failed".
    assert!(logged("failed: "), "{:?}", log.lock().unwrap());
    assert_eq!(dep.snapshot().calls.failed, 1);
    // A success logs nothing.
    dep.spawn(|_: &CallContext| Ok::<_, std::io::Error>(())).unwrap();
    assert!(wait_until(SETTLE, || dep.snapshot().calls.total() == 2));
    let ours = log.lock().unwrap().iter().filter(|w| w.contains("notify-log")).count();
    assert_eq!(ours, 1, "{:?}", log.lock().unwrap());
}

/// Failed detached calls come by the dozen in an incident: logged in
/// aggregate, as refusals are, not a line each.
#[test]
fn many_failed_detached_calls_are_one_warning_line() {
    let log = warnings();
    let dep = Dependency::builder("notify-many").workers(2).queue(64).build().unwrap();
    for _ in 0..40 {
        dep.spawn(|_: &CallContext| Err::<(), _>(std::io::Error::other("mailer down"))).unwrap();
    }
    assert!(wait_until(SETTLE, || dep.snapshot().calls.failed == 40));
    let ours: Vec<_> = log.lock().unwrap().iter().filter(|w| w.contains("notify-many")).cloned().collect();
    // The first at once; the rest within the same second are counted for the next line.
    assert!(!ours.is_empty() && ours.len() < 5, "{ours:?}");
    assert!(ours[0].starts_with("dependency notify-many: detached call failed: "), "{ours:?}");
    assert!(ours[0].ends_with("mailer down"), "{ours:?}");
}
