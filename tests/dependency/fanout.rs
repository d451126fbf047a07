//! Fan-out (`FanOut`): one request thread calls several dependencies under
//! one deadline, with no thread per call; retries and hedges start from the
//! waiting caller; a dropped leg is given up and counted once. Against real
//! loopback providers, with real ureq calls under the deadline.
#![cfg(all(feature = "ureq", feature = "testing"))]

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use support::{FakeProvider, Fault, wait_until};
use watertight::dependency::Hedge;
use watertight::http::WithDeadline;
use watertight::retry::Retry;
use watertight::{CallContext, Dependency, Error, FanOut, Outcome};

const BUDGET: Duration = Duration::from_millis(800);
const SETTLE: Duration = Duration::from_secs(10);

fn get(agent: &ureq::Agent, url: &str, ctx: &CallContext) -> Result<String, ureq::Error> {
    agent.get(url).with_deadline(ctx).call()?.body_mut().read_to_string()
}

/// A provider that answers `body`, under `fault`.
fn answering(name: &str, fault: Fault, body: &'static str) -> FakeProvider {
    FakeProvider::start(name, fault, move |_| (200, body.to_owned())).expect("bind a loopback port")
}

/// A retry budget that never runs dry in these tests, and a short backoff.
fn retry() -> Retry {
    let pause = Duration::from_millis(5);
    Retry::builder().max_attempts(2).backoff(pause, pause).budget(100.0, 1000).build().unwrap()
}

/// The trip search's three dependencies: timeouts longer than the budget, so
/// the request's deadline is the one that binds.
fn trip_dependencies() -> [Dependency; 3] {
    let dep =
        |name: &str| Dependency::builder(name).workers(4).timeout(Duration::from_secs(2)).retry(retry());
    [dep("flights").build().unwrap(), dep("hotels").build().unwrap(), dep("fx").build().unwrap()]
}

/// The answers of one search.
struct Trip {
    flights: Result<String, Error<ureq::Error>>,
    hotels: Result<String, Error<ureq::Error>>,
    fx: Result<String, Error<ureq::Error>>,
}

/// One `GET /search`: three legs, hotels retried, all under `budget`.
fn search(deps: &[Dependency; 3], urls: &[String; 3], agent: &ureq::Agent, budget: Duration) -> Trip {
    let fan = FanOut::timeout(budget);
    let leg = |i: usize| {
        let (agent, url) = (agent.clone(), urls[i].clone());
        move |ctx: &CallContext| get(&agent, &url, ctx)
    };
    let flights = fan.start(&deps[0], leg(0));
    let hotels = deps[1].with().retry().fan(&fan, leg(1));
    let fx = fan.start(&deps[2], leg(2));
    fan.wait_all();
    Trip { flights: flights.wait(), hotels: hotels.wait(), fx: fx.wait() }
}

#[test]
fn a_search_answers_within_its_budget_with_the_two_providers_that_answer() {
    let flights = answering("flights", Fault::Slow(Duration::from_millis(30)), "LIS-OPO 09:40");
    let hotels = answering("hotels", Fault::Slow(Duration::from_millis(10)), "Hotel Infante");
    let fx = answering("fx", Fault::Hang, "1.08");
    fx.release_on_client_close(true);
    // Hotels is flaky: its first answer is a 503, retried once.
    hotels.script([Fault::Error(503)]);
    let deps = trip_dependencies();
    let urls = [flights.url(), hotels.url(), fx.url()];
    let agent = ureq::Agent::new_with_defaults();

    let began = Instant::now();
    let trip = search(&deps, &urls, &agent, BUDGET);
    let took = began.elapsed();
    assert!(took < BUDGET + Duration::from_millis(50), "answered after {took:?}");
    assert_eq!(trip.flights.unwrap(), "LIS-OPO 09:40");
    assert_eq!(trip.hotels.unwrap(), "Hotel Infante");
    let err = trip.fx.unwrap_err();
    assert_eq!(err.outcome(), Outcome::TimedOut, "{err}");
    assert!(took >= BUDGET - Duration::from_millis(5), "the hung leg waited its budget: {took:?}");
    // The retry happened, on the caller's thread: one retry, two attempts, one answer each.
    let hotels_calls = deps[1].snapshot().calls;
    assert_eq!((hotels_calls.retried, hotels_calls.failed, hotels_calls.successful), (1, 1, 1));
    assert_eq!(hotels.hits(), 2);
    // Each leg counted once.
    assert_eq!(deps[0].snapshot().calls.total(), 1);
    assert!(wait_until(SETTLE, || deps[2].snapshot().calls.total() == 1), "{:?}", deps[2].snapshot().calls);
    assert_eq!(deps[2].snapshot().calls.timed_out, 1);
}

#[test]
fn a_hedge_on_a_leg_starts_from_the_waiting_caller_and_wins() {
    let slow_first = answering("search", Fault::Healthy, "hits");
    slow_first.script([Fault::Slow(Duration::from_secs(2))]);
    let other = answering("other", Fault::Healthy, "other");
    let search = Dependency::builder("search-fan")
        .workers(4)
        .timeout(Duration::from_secs(5))
        .retry(retry())
        .hedge(Hedge::after(Duration::from_millis(30)))
        .build()
        .unwrap();
    let plain = Dependency::builder("other-fan").workers(2).build().unwrap();
    let agent = ureq::Agent::new_with_defaults();
    let fan = FanOut::timeout(BUDGET);
    let began = Instant::now();
    let hedged = {
        let (agent, url) = (agent.clone(), slow_first.url());
        search.with().hedge().fan(&fan, move |ctx: &CallContext| {
            get(&agent, &url, ctx).map(|b| format!("{b} from attempt {}", ctx.attempt()))
        })
    };
    let (agent2, url2) = (agent.clone(), other.url());
    let plain_leg = fan.start(&plain, move |ctx: &CallContext| get(&agent2, &url2, ctx));
    // Waiting on the hedged leg alone drives the fan-out: the hedge starts 30 ms in.
    assert_eq!(hedged.wait().unwrap(), "hits from attempt 2");
    assert!(began.elapsed() < Duration::from_secs(1), "{:?}", began.elapsed());
    assert_eq!(plain_leg.wait().unwrap(), "other");
    let calls = search.snapshot().calls;
    assert_eq!((calls.hedged, calls.hedges_won), (1, 1), "{calls:?}");
    // The loser is settled by its worker when it returns, once.
    assert!(wait_until(SETTLE, || search.snapshot().calls.total() == 2), "{:?}", search.snapshot().calls);
}

#[test]
fn a_dropped_leg_is_given_up_and_counted_once() {
    let dep =
        Dependency::builder("dropped").workers(1).queue(4).timeout(Duration::from_secs(5)).build().unwrap();
    let fan = FanOut::timeout(Duration::from_secs(5));
    let (started_tx, started) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let token = Arc::new(());
    let held = Arc::clone(&token);
    // Running when dropped: abandoned, then settled by its worker when it returns.
    let running = fan.start(&dep, move |ctx: &CallContext| {
        let _held = held;
        started_tx.send(()).unwrap();
        release_rx.recv_timeout(SETTLE).unwrap();
        Ok::<_, std::io::Error>(ctx.is_cancelled())
    });
    started.recv_timeout(SETTLE).expect("the first leg runs");
    // Queued behind it when dropped: withdrawn, never run.
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let queued = fan.start(&dep, move |_: &CallContext| {
        flag.store(true, Ordering::SeqCst);
        Ok::<_, std::io::Error>(false)
    });
    drop(queued);
    drop(running);
    assert_eq!(dep.pool().unwrap().stats().abandoned, 1);
    // Nothing left to wait for: the fan-out returns at once.
    let began = Instant::now();
    fan.wait_all();
    assert!(began.elapsed() < Duration::from_secs(1));
    release.send(()).unwrap();
    assert!(wait_until(SETTLE, || Arc::strong_count(&token) == 1), "the running job is dropped");
    // The running leg's outcome, recorded by its worker; the withdrawn one's
    // `expired`, counted by the worker that skipped it. Once each.
    let counted = || {
        let calls = dep.snapshot().calls;
        (calls.total(), calls.successful, calls.expired)
    };
    assert!(wait_until(SETTLE, || counted() == (1, 1, 1)), "{:?}", dep.snapshot().calls);
    assert!(!ran.load(Ordering::SeqCst), "a withdrawn leg never runs");
    let pool = dep.pool().unwrap().stats();
    assert_eq!((pool.abandoned, pool.busy, pool.queued), (0, 0, 0));
}
