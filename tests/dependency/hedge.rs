//! Hedged calls (`with().hedge()`), against real providers on loopback: the
//! first acceptable answer wins, a loser is cancelled and still recorded, and
//! a hedge starts only on an idle worker, with the breaker CLOSED and budget left.
#![cfg(all(feature = "ureq", feature = "testing"))]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::{Fault, provider, wait_until};
use watertight::dependency::{Hedge, Priority};
use watertight::http::WithDeadline;
use watertight::retry::Retry;
use watertight::{
    CallContext, Dependency, Error, Rejection,
    breaker::{BreakerConfig, State},
};

const SETTLE: Duration = Duration::from_secs(10);

fn get(agent: &ureq::Agent, url: &str, ctx: &CallContext) -> Result<String, ureq::Error> {
    agent.get(url).with_deadline(ctx).call()?.body_mut().read_to_string()
}

fn client() -> ureq::Agent {
    ureq::Agent::config_builder().build().into()
}

/// A retry budget that never runs dry in these tests.
fn ample_budget() -> Retry {
    Retry::builder().budget(100.0, 1000).build().unwrap()
}

/// A dependency of `workers` workers, a 5 s timeout and an ample budget, hedging per `hedge`.
fn hedging(name: &str, workers: usize, hedge: Hedge) -> watertight::DependencyBuilder {
    Dependency::builder(name)
        .workers(workers)
        .timeout(Duration::from_secs(5))
        .retry(ample_budget())
        .hedge(hedge)
}

#[test]
fn a_hedge_answers_for_a_slow_first_attempt_and_the_loser_is_cancelled_and_recorded() {
    let p = provider(Fault::Healthy);
    // The first request is held for 2 s; the hedge, 30 ms in, is answered at once.
    p.script([Fault::Slow(Duration::from_secs(2))]);
    let dep = hedging("hedged", 4, Hedge::after(Duration::from_millis(30))).build().unwrap();
    let (agent, url) = (client(), p.url());
    let loser_cancelled = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&loser_cancelled);
    let started = Instant::now();
    let answer = dep.with().hedge().call(move |ctx: &CallContext| {
        let body = get(&agent, &url, ctx);
        if ctx.attempt() == 1 {
            seen.store(ctx.is_cancelled(), Ordering::SeqCst);
        }
        body.map(|b| format!("{b} from attempt {}", ctx.attempt()))
    });
    let took = started.elapsed();
    assert_eq!(answer.unwrap(), "ok from attempt 2");
    assert!(took < Duration::from_millis(1500), "the hedge answered, not the 2 s attempt: {took:?}");
    let calls = dep.snapshot().calls;
    assert_eq!((calls.hedged, calls.hedges_won), (1, 1));
    // The loser keeps its worker until its job returns, then sees it was cancelled and is
    // recorded: two successes on the breaker, and its worker time counted.
    assert!(wait_until(SETTLE, || dep.breaker().metrics().successful == 2), "{:?}", dep.breaker().metrics());
    assert!(loser_cancelled.load(Ordering::SeqCst), "the losing attempt saw is_cancelled()");
    assert!(wait_until(SETTLE, || dep.snapshot().hedge_lost_time >= Duration::from_secs(1)));
    assert_eq!(dep.snapshot().calls.successful, 2, "each attempt is counted once");
    assert_eq!(p.hits(), 2);
}

#[test]
fn a_losers_failure_is_still_a_failure_to_the_breaker() {
    let p = provider(Fault::Healthy);
    // The first attempt is slow and then fails with a 503; the hedge succeeds.
    p.script([Fault::Slow(Duration::from_millis(400))]);
    let dep = hedging("hedged", 2, Hedge::after(Duration::from_millis(30))).build().unwrap();
    let (agent, url) = (client(), p.url());
    let answer = dep.with().hedge().call(move |ctx: &CallContext| match ctx.attempt() {
        // The slow attempt's answer, whatever it is, reads as the provider failing.
        1 => get(&agent, &url, ctx).and(Err(ureq::Error::StatusCode(503))),
        _ => get(&agent, &url, ctx),
    });
    assert_eq!(answer.unwrap(), "ok");
    assert!(wait_until(SETTLE, || dep.breaker().metrics().failed == 1), "{:?}", dep.breaker().metrics());
    let m = dep.breaker().metrics();
    assert_eq!((m.successful, m.failed), (1, 1));
    let calls = dep.snapshot().calls;
    assert_eq!((calls.successful, calls.failed, calls.hedges_won), (1, 1, 1));
}

#[test]
fn a_hedge_never_queues_with_no_idle_worker_nothing_extra_starts() {
    let slow = provider(Fault::Slow(Duration::from_millis(300)));
    let dep = hedging("one-worker", 1, Hedge::after(Duration::from_millis(10)).max_hedges(3))
        .queue(4)
        .build()
        .unwrap();
    let (agent, url) = (client(), slow.url());
    let answer = dep.with().hedge().call(move |ctx: &CallContext| get(&agent, &url, ctx));
    assert_eq!(answer.unwrap(), "ok");
    let snap = dep.snapshot();
    assert_eq!(snap.calls.hedged, 0, "the only worker was busy: no hedge, none queued");
    assert_eq!(snap.pool.queued, 0);
    assert_eq!(slow.hits(), 1);

    // Two workers, one held by another call: the hedged call's first attempt takes the
    // other, and no worker is left idle for a hedge.
    let hung = provider(Fault::Hang);
    hung.release_on_client_close(true);
    let dep = Dependency::builder("two-workers")
        .workers(2)
        .queue(4)
        .timeout(Duration::from_millis(600))
        .retry(ample_budget())
        .hedge(Hedge::after(Duration::from_millis(10)).max_hedges(3))
        .build()
        .unwrap();
    let holder = {
        let (dep, agent, url) = (dep.clone(), client(), hung.url());
        std::thread::spawn(move || dep.call(move |ctx: &CallContext| get(&agent, &url, ctx)))
    };
    assert!(wait_until(SETTLE, || dep.snapshot().pool.busy == 1));
    let (agent, url) = (client(), hung.url());
    let answer = dep.with().hedge().call(move |ctx: &CallContext| get(&agent, &url, ctx));
    assert!(matches!(answer, Err(Error::Timeout { .. })), "{answer:?}");
    assert_eq!(dep.snapshot().calls.hedged, 0, "no idle worker at any hedge point");
    assert!(holder.join().unwrap().is_err());
    // A hedge that could not start took nothing: no permit dropped as ignored.
    let m = dep.breaker().metrics();
    assert_eq!((m.ignored, m.failed), (0, 2), "{m:?}");
}

#[test]
fn no_hedge_once_the_breaker_has_left_closed_or_the_budget_is_spent() {
    let slow = provider(Fault::Slow(Duration::from_millis(150)));
    let dep = hedging("guarded", 4, Hedge::after(Duration::from_millis(10)))
        .breaker(BreakerConfig::count_based(10).minimum_calls(5))
        .build()
        .unwrap();
    let call = |dep: &Dependency| {
        let (agent, url) = (client(), slow.url());
        dep.with().hedge().call(move |ctx: &CallContext| get(&agent, &url, ctx))
    };
    // CLOSED: a hedge starts.
    assert_eq!(call(&dep).unwrap(), "ok");
    assert_eq!(dep.snapshot().calls.hedged, 1);
    // Calls still permitted, but the breaker is not CLOSED: no hedge.
    dep.breaker().transition_to(State::MetricsOnly);
    assert_eq!(call(&dep).unwrap(), "ok");
    assert_eq!(dep.snapshot().calls.hedged, 1, "no hedge outside CLOSED");
    dep.breaker().transition_to(State::Closed);

    // A retry budget with nothing in it (no minimum, no share of calls): no hedge.
    let dry = Dependency::builder("dry")
        .workers(4)
        .timeout(Duration::from_secs(5))
        .retry(Retry::builder().budget(0.0, 0).build().unwrap())
        .hedge(Hedge::after(Duration::from_millis(10)))
        .build()
        .unwrap();
    assert_eq!(call(&dry).unwrap(), "ok");
    assert_eq!(dry.snapshot().calls.hedged, 0, "hedges share the retry budget");
}

#[test]
fn a_hung_provider_times_out_every_leg_at_the_deadline_and_records_each_once() {
    let hung = provider(Fault::Hang);
    hung.release_on_client_close(true);
    let dep = Dependency::builder("hung")
        .workers(4)
        .timeout(Duration::from_millis(300))
        .retry(ample_budget())
        .breaker(BreakerConfig::count_based(10).minimum_calls(10))
        .hedge(Hedge::after(Duration::from_millis(50)).max_hedges(2))
        .build()
        .unwrap();
    let (agent, url) = (client(), hung.url());
    let started = Instant::now();
    let answer = dep.with().hedge().call(move |ctx: &CallContext| get(&agent, &url, ctx));
    let took = started.elapsed();
    assert!(matches!(answer, Err(Error::Timeout { .. })), "{answer:?}");
    assert!(took < Duration::from_secs(2), "answered at the deadline, not later: {took:?}");
    let legs = 1 + dep.snapshot().calls.hedged;
    assert!(legs >= 2, "hedges started while the breaker was CLOSED: {legs}");
    // Each leg is recorded once: by the caller at the deadline or by its worker, never both.
    assert!(wait_until(SETTLE, || dep.snapshot().pool.busy == 0));
    let calls = dep.snapshot().calls;
    assert_eq!(calls.timed_out, legs, "{calls:?}");
    assert_eq!(dep.breaker().metrics().failed, legs);
}

#[test]
fn a_hedged_call_keeps_its_priority() {
    let slow = provider(Fault::Slow(Duration::from_millis(300)));
    // The critical call outlasts the normal one, so its place is held throughout.
    let slower = provider(Fault::Slow(Duration::from_millis(1500)));
    // Three workers, the last free place reserved for critical calls; one held by a critical call.
    let dep = hedging("prioritised", 3, Hedge::after(Duration::from_millis(10)))
        .reserved_for_critical(1)
        .build()
        .unwrap();
    let call = |priority: Priority, hedged: bool, url: String| {
        let (dep, agent) = (dep.clone(), client());
        std::thread::spawn(move || {
            let job = move |ctx: &CallContext| get(&agent, &url, ctx);
            match hedged {
                true => dep.with().priority(priority).hedge().call(job),
                false => dep.with().priority(priority).call(job),
            }
        })
    };
    let critical = call(Priority::Critical, false, slower.url());
    assert!(wait_until(SETTLE, || dep.snapshot().pool.busy == 1));
    // A normal call takes the second worker; its hedge may not take the reserved third.
    let normal = call(Priority::Normal, true, slow.url());
    assert!(wait_until(SETTLE, || dep.snapshot().pool.busy == 2));
    // A sheddable call now would take the reserved place: shed at once.
    let (agent, url) = (client(), slow.url());
    let shed = dep
        .with()
        .priority(Priority::Sheddable)
        .hedge()
        .call(move |ctx: &CallContext| get(&agent, &url, ctx));
    assert!(matches!(shed, Err(Error::Rejected { reason: Rejection::Shed, .. })), "{shed:?}");
    assert_eq!(normal.join().unwrap().unwrap(), "ok");
    assert_eq!(critical.join().unwrap().unwrap(), "ok");
    let calls = dep.snapshot().calls;
    // A worker was idle at the hedge point, but the only place left was the reserved one.
    assert_eq!((calls.hedged, calls.shed), (0, 1), "{calls:?}");
    assert_eq!((slow.hits(), slower.hits()), (1, 1));
}

#[test]
fn without_a_policy_a_hedged_call_is_one_attempt_and_the_config_round_trips() {
    let p = provider(Fault::Slow(Duration::from_millis(60)));
    let dep = Dependency::builder("plain").workers(2).build().unwrap();
    let (agent, url) = (client(), p.url());
    assert_eq!(dep.with().hedge().call(move |ctx: &CallContext| get(&agent, &url, ctx)).unwrap(), "ok");
    assert_eq!((dep.snapshot().calls.hedged, p.hits()), (0, 1));

    // Turned on live, then off again.
    let mut config = dep.config();
    config.hedge = Some(Hedge::at_quantile(0.9).clamp(Duration::from_millis(5), Duration::from_millis(20)));
    dep.reconfigure(config.clone()).unwrap();
    assert_eq!(dep.config().hedge, config.hedge);
    config.hedge = Some(Hedge::after(Duration::from_secs(2 * 86_400)));
    let err = dep.reconfigure(config).unwrap_err();
    assert_eq!(err.field(), "hedge.delay");
    assert!(dep.config().hedge.is_some(), "a refused change changes nothing");
}

/// Has every worker of `dep` run a job (all `workers` at once, so each thread
/// has started) and gone back to idle, so that a hedge finds idle workers.
fn every_worker_started(dep: &Dependency, workers: usize) {
    let all = Arc::new(std::sync::Barrier::new(workers));
    for _ in 0..workers {
        let all = Arc::clone(&all);
        dep.spawn(move |_: &CallContext| -> Result<(), std::io::Error> {
            all.wait();
            Ok(())
        })
        .unwrap();
    }
    assert!(wait_until(SETTLE, || {
        let s = dep.snapshot();
        s.calls.successful == workers as u64 && s.pool.busy == 0
    }));
}

#[test]
fn a_failure_before_the_delay_starts_the_next_hedge_at_once() {
    let p = provider(Fault::Healthy);
    // The first request fails at once with a 503; the next is answered.
    p.script([Fault::Error(503)]);
    // A delay longer than the timeout (5 s): only the failure can start the hedge.
    let dep = hedging("failed-first", 4, Hedge::after(Duration::from_secs(60))).build().unwrap();
    every_worker_started(&dep, 4);
    let (agent, url) = (client(), p.url());
    let started = Instant::now();
    let answer = dep.with().hedge().call(move |ctx: &CallContext| {
        get(&agent, &url, ctx).map(|b| format!("{b} from attempt {}", ctx.attempt()))
    });
    let took = started.elapsed();
    assert_eq!(answer.unwrap(), "ok from attempt 2");
    assert!(took < Duration::from_secs(5), "answered before the deadline: {took:?}");
    let calls = dep.snapshot().calls;
    assert_eq!((calls.hedged, calls.hedges_won, calls.failed), (1, 1, 1), "{calls:?}");
    let m = dep.breaker().metrics();
    assert_eq!((m.successful, m.failed), (4 + 1, 1), "{m:?}");
    assert_eq!(p.hits(), 2);
}

#[test]
fn when_every_attempt_fails_the_call_answers_the_last_failure() {
    let p = provider(Fault::Error(503));
    // A delay longer than the timeout (5 s): only failures can start hedges.
    let dep = hedging("all-failed", 4, Hedge::after(Duration::from_secs(60)).max_hedges(2)).build().unwrap();
    every_worker_started(&dep, 4);
    let (agent, url) = (client(), p.url());
    // The attempt whose failure came last.
    let last = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = Arc::clone(&last);
    let started = Instant::now();
    let answer = dep.with().hedge().call(move |ctx: &CallContext| {
        let answer = get(&agent, &url, ctx);
        seen.store(ctx.attempt(), Ordering::SeqCst);
        answer
    });
    let took = started.elapsed();
    assert!(matches!(answer, Err(Error::Failed(ureq::Error::StatusCode(503)))), "{answer:?}");
    assert_eq!(last.load(Ordering::SeqCst), 3, "attempts one after another, each on a failure");
    assert!(took < Duration::from_secs(5), "answered before the deadline: {took:?}");
    let calls = dep.snapshot().calls;
    assert_eq!((calls.hedged, calls.hedges_won, calls.failed), (2, 0, 3), "{calls:?}");
    assert_eq!(dep.breaker().metrics().failed, 3);
    assert_eq!(p.hits(), 3);
}

#[test]
fn a_zero_delay_starts_every_attempt_at_once_into_idle_workers_only() {
    let slow = provider(Fault::Slow(Duration::from_secs(2)));
    let fast = provider(Fault::Healthy);
    // Attempt 1 is slow; the hedges, started with it, answer at once.
    let job = {
        let (agent, slow, fast) = (client(), slow.url(), fast.url());
        move |ctx: &CallContext| {
            let url = if ctx.attempt() == 1 { &slow } else { &fast };
            get(&agent, url, ctx).map(|b| format!("{b} from attempt {}", ctx.attempt()))
        }
    };
    let dep = hedging("all-at-once", 8, Hedge::after(Duration::ZERO).max_hedges(2)).build().unwrap();
    every_worker_started(&dep, 8);
    let started = Instant::now();
    let answer = dep.with().hedge().call(job.clone()).unwrap();
    let took = started.elapsed();
    assert!(answer == "ok from attempt 2" || answer == "ok from attempt 3", "{answer}");
    assert!(took < Duration::from_secs(1), "the hedges did not wait for the slow attempt: {took:?}");
    // Both were handed to idle workers at once (the loser may be given up
    // before its worker takes it, so the provider's hits are not counted here).
    assert_eq!(dep.snapshot().calls.hedged, 2, "both hedges started at once");

    // Two workers: the first attempt takes one, one hedge the other, and
    // nothing more starts or queues.
    let dep = hedging("two-at-once", 2, Hedge::after(Duration::ZERO).max_hedges(3)).queue(4).build().unwrap();
    every_worker_started(&dep, 2);
    assert_eq!(dep.with().hedge().call(job).unwrap(), "ok from attempt 2");
    let snap = dep.snapshot();
    assert_eq!((snap.calls.hedged, snap.pool.queued), (1, 0), "{snap:?}");
}

/// With no delay, every attempt asked for starts at once while a worker is
/// free for it, on a dependency just built (its workers still starting) as
/// on a warm one: each attempt waits for all four to have started.
#[test]
fn zero_delay_hedges_start_every_attempt_on_a_fresh_dependency() {
    for round in 0..20 {
        let dep = hedging("hedge-zero", 4, Hedge::after(Duration::ZERO).max_hedges(3)).build().unwrap();
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::clone(&started);
        let answer = dep.with().deadline(Instant::now() + Duration::from_secs(2)).hedge().call(
            move |_: &CallContext| {
                seen.fetch_add(1, Ordering::SeqCst);
                let all = wait_until(Duration::from_secs(2), || seen.load(Ordering::SeqCst) == 4);
                Ok::<_, std::io::Error>(all)
            },
        );
        assert!(answer.unwrap(), "round {round}: {} of 4 attempts started", started.load(Ordering::SeqCst));
        assert_eq!(dep.snapshot().calls.hedged, 3, "round {round}");
    }
}
