//! A thousand fanned-out searches, one provider hung, leave the process's
//! thread count where it was: a fan-out spawns no thread per call (its own
//! file, so that no other test's threads come and go meanwhile).
#![cfg(all(feature = "ureq", feature = "testing"))]

use std::time::{Duration, Instant};

use watertight::http::WithDeadline;
use watertight::testing::{FakeProvider, Fault};
use watertight::{CallContext, Dependency, Error, FanOut, breaker::BreakerConfig, retry::Retry};

/// Threads of this process, from `/proc/self/status`.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status (Linux only)");
    let line = status.lines().find_map(|l| l.strip_prefix("Threads:")).expect("a Threads: line");
    line.trim().parse().expect("a thread count")
}

fn answering(name: &str, fault: Fault, body: &'static str) -> FakeProvider {
    FakeProvider::start(name, fault, move |_| (200, body.to_owned())).expect("bind a loopback port")
}

/// Polls `cond` every 2 ms until it holds or `timeout` passes.
fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + timeout;
    while !cond() {
        if Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

type Answer = Result<String, Error<ureq::Error>>;

#[test]
fn a_thousand_searches_with_a_hung_provider_leave_the_thread_count_where_it_was() {
    let flights = answering("flights", Fault::Healthy, "LIS-OPO");
    let hotels = answering("hotels", Fault::Healthy, "Infante");
    let fx = answering("fx", Fault::Hang, "1.08");
    // A held request ends as soon as its client leaves: the provider's own threads go too.
    fx.release_on_client_close(true);
    let retry = Retry::builder().max_attempts(2).budget(100.0, 1000).build().unwrap();
    let dep = |name: &str| Dependency::builder(name).workers(4).timeout(Duration::from_secs(2));
    let flights_dep = dep("flights").build().unwrap();
    let hotels_dep = dep("hotels").retry(retry).build().unwrap();
    // The hung provider's breaker opens after a few timeouts, and lets a probe by every second.
    let open_for = Duration::from_secs(1);
    let fx_dep =
        dep("fx").breaker(BreakerConfig::count_based(5).minimum_calls(5).open_for(open_for)).build().unwrap();
    let agent = ureq::Agent::new_with_defaults();
    let leg = |url: String| {
        let agent = agent.clone();
        move |ctx: &CallContext| -> Result<String, ureq::Error> {
            agent.get(&url).with_deadline(ctx).call()?.body_mut().read_to_string()
        }
    };
    // The trip search's budget; the hung leg takes it all only while its
    // breaker lets a probe by.
    let budget = Duration::from_millis(800);
    // Every pool's workers exist from `build`: this is the count to come back to.
    let before = threads();
    let (mut slowest, mut answered) = (Duration::ZERO, 0);
    for n in 0..1000 {
        let began = Instant::now();
        let fan = FanOut::timeout(budget);
        let f = fan.start(&flights_dep, leg(flights.url()));
        let h = hotels_dep.with().retry().fan(&fan, leg(hotels.url()));
        let x = fan.start(&fx_dep, leg(fx.url()));
        fan.wait_all();
        let (f, h, x): (Answer, Answer, Answer) = (f.wait(), h.wait(), x.wait());
        slowest = slowest.max(began.elapsed());
        for answer in [f, h] {
            match answer {
                Ok(body) => {
                    assert!(body == "LIS-OPO" || body == "Infante", "search {n}: {body}");
                    answered += 1;
                }
                // A loopback answer later than the budget: only on a badly overloaded machine.
                Err(e) => assert!(matches!(e, Error::Timeout { .. }), "search {n}: {e}"),
            }
        }
        assert!(x.is_err(), "search {n}: {x:?}");
    }
    assert!(answered >= 1980, "{answered} of 2000 healthy legs answered");
    assert!(slowest < budget + Duration::from_secs(1), "the slowest search took {slowest:?}");
    // Each leg counted once (a leg given up at the deadline just as its worker
    // took it is counted by that worker, a moment later).
    let counted = || (flights_dep.snapshot().calls.total(), fx_dep.snapshot().calls.total());
    assert!(wait_until(Duration::from_secs(10), || counted() == (1000, 1000)), "{:?}", counted());
    // A small slack for threads that come and go anyway (a provider's held request ending).
    let slack = 2;
    let settled = wait_until(Duration::from_secs(10), || threads() <= before + slack);
    assert!(settled, "{} threads after, {before} before", threads());
}
