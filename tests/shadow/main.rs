//! Shadow mode, policy by policy, against a real loopback provider on the
//! manual clock: one seeded script of calls with faults is played three
//! times, with the policy off, in shadow and enforced. In shadow every
//! call's answer is the one it gets with the policy off, while the shadow
//! counter equals the refusals the enforced policy makes.
//!
//! The script holds calls in flight on purpose (the adaptive limit and the
//! priority places refuse on what is in flight): each call is detached
//! (`spawn_with`), its job waits for the script to release it, then makes
//! its request, and the script waits for the call's answer, which comes
//! once its outcome is recorded. So every step happens in the same order
//! in every run, and a policy sees the same calls whether it refused the
//! others or, in shadow, let them through unseen.
#![cfg(all(feature = "ureq", feature = "testing"))]

#[path = "../support/mod.rs"]
mod support;

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{FakeProvider, Fault};
use watertight::breaker::{BreakerConfig, State};
use watertight::dependency::{Event, Priority};
use watertight::limit::{AdaptiveLimit, RateLimit, Throttle};
use watertight::shadow::{Policy, Shadow};
use watertight::{CallContext, Dependency, DependencyBuilder, Error, ManualClock};

/// Steps of the script; about half start a call.
const STEPS: u32 = 2_000;
/// Calls the script holds in flight at most.
const MAX_HELD: usize = 12;
/// Workers: more than the script ever holds, so that every held call runs.
const WORKERS: usize = 24;
/// The manual clock's advance per step.
const STEP: Duration = Duration::from_millis(25);

/// The policy under test, as it is set up for a run.
#[derive(Debug, Clone, Copy, PartialEq)]
enum How {
    Off,
    Shadow,
    Enforced,
}

/// A small seeded generator (splitmix64): the same seed, the same script.
struct Script(u64);

impl Script {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn percent(&mut self) -> u64 {
        self.next() % 100
    }
}

/// What one run of the script saw.
struct Run {
    /// Each call's answer, by its number in the script: `ok`, `failed`, or
    /// the label of the rejection that refused it.
    answers: Vec<String>,
    dep: Dependency,
    /// The breaker's transitions, in order.
    transitions: Vec<(State, State)>,
    /// `Event::ShadowRefused`s heard.
    shadow_events: u64,
}

impl Run {
    fn refused(&self, label: &str) -> u64 {
        self.answers.iter().filter(|a| *a == label).count() as u64
    }
}

/// The dependency for `policy`, set up `how`; every other refusing policy off.
fn dependency(policy: Policy, how: How, clock: &ManualClock, seed: u64) -> DependencyBuilder {
    let mut builder = Dependency::builder(format!("shadow-{}", policy.as_str()))
        .workers(WORKERS)
        .queue(0)
        .timeout(Duration::from_secs(20))
        .breaker(BreakerConfig::default().enabled(false))
        .clock(clock.clone());
    if how == How::Off {
        return builder;
    }
    builder = match policy {
        Policy::Breaker => builder.breaker(
            BreakerConfig::count_based(20)
                .minimum_calls(10)
                .failure_rate(50.0)
                .open_for(Duration::from_secs(2))
                .half_open_calls(2),
        ),
        Policy::Throttle => {
            builder.throttle(Throttle::new().window(Duration::from_secs(10))).throttle_seed(seed)
        }
        Policy::RateLimit => builder.rate_limit(RateLimit::per_second(12.0).burst(4)),
        Policy::AdaptiveLimit => builder.adaptive_limit(AdaptiveLimit::new().min_limit(1)),
        Policy::Priority => builder.reserved_for_critical(WORKERS - 4),
        other => unreachable!("{other} is not a dependency's"),
    };
    if how == How::Shadow { builder.shadow(policy) } else { builder }
}

/// Plays the script of `seed` against `provider`.
fn run(policy: Policy, how: How, seed: u64, provider: &FakeProvider) -> Run {
    let clock = ManualClock::new();
    let transitions = Arc::new(Mutex::new(Vec::new()));
    let shadow_events = Arc::new(Mutex::new(0u64));
    let dep = dependency(policy, how, &clock, seed)
        .on_event({
            let (transitions, shadow_events) = (Arc::clone(&transitions), Arc::clone(&shadow_events));
            move |event| match event {
                Event::Transition(t) => transitions.lock().unwrap().push((t.from(), t.to())),
                Event::ShadowRefused { policy: p, .. } => {
                    assert_eq!(*p, policy);
                    *shadow_events.lock().unwrap() += 1;
                }
                _ => {}
            }
        })
        .build()
        .expect("a valid dependency");
    let agent = support::agent(Duration::from_secs(20));
    let mut script = Script(seed);
    let mut answers: Vec<Option<String>> = Vec::new();
    // Calls in flight by the script's count: (number, release, answer), the
    // release `None` for a call refused at once (its answer is in).
    type Held = (usize, Option<mpsc::Sender<()>>, Option<mpsc::Receiver<String>>);
    let mut held: VecDeque<Held> = VecDeque::new();
    for step in 0..STEPS {
        // Every draw is made whatever the answers, so that each run plays the same script.
        let (op, which, fault) = (script.percent(), script.percent(), script.percent());
        // Stretches of 400 steps alternate between a healthy provider (5 %
        // answered 503) and a sick one (70 %).
        let sick = (step / 400) % 2 == 1;
        let status = if fault < if sick { 70 } else { 5 } { 503 } else { 200 };
        let priority = match which {
            0..=9 => Priority::Critical,
            10..=59 => Priority::Normal,
            _ => Priority::Sheddable,
        };
        if op < 55 && held.len() < MAX_HELD {
            let number = answers.len();
            answers.push(None);
            let (release_tx, release_rx) = mpsc::channel::<()>();
            let (answer_tx, answer_rx) = mpsc::channel::<String>();
            let (agent, url) = (agent.clone(), format!("{}/{status}", provider.url()));
            let admitted = dep.with().priority(priority).spawn_with(
                move |answer: Result<(), Error<ureq::Error>>| {
                    let _ = answer_tx.send(match answer {
                        Ok(()) => "ok".to_owned(),
                        Err(Error::Failed(_)) => "failed".to_owned(),
                        Err(other) => format!("unexpected: {other}"),
                    });
                },
                move |ctx: &CallContext| {
                    release_rx.recv_timeout(Duration::from_secs(20)).expect("released by the script");
                    use watertight::http::WithDeadline;
                    agent.get(&url).with_deadline(ctx).call().map(|_| ())
                },
            );
            match admitted {
                Ok(()) => held.push_back((number, Some(release_tx), Some(answer_rx))),
                Err(rejection) => {
                    answers[number] = Some(rejection.as_str().to_owned());
                    held.push_back((number, None, None));
                }
            }
        } else if let Some((number, release, answer)) = held.pop_front()
            && let (Some(release), Some(answer)) = (release, answer)
        {
            release.send(()).expect("the job waits");
            let answer =
                answer.recv_timeout(Duration::from_secs(20)).expect("every admitted call is answered");
            answers[number] = Some(answer);
        }
        clock.advance(STEP);
    }
    for (number, release, answer) in held {
        if let (Some(release), Some(answer)) = (release, answer) {
            release.send(()).expect("the job waits");
            answers[number] = Some(answer.recv_timeout(Duration::from_secs(20)).expect("answered"));
        }
    }
    let answers: Vec<String> = answers.into_iter().map(|a| a.expect("every call answered")).collect();
    assert!(answers.iter().all(|a| !a.starts_with("unexpected")), "{policy}, {how:?}: an unexpected answer");
    let transitions = transitions.lock().unwrap().clone();
    let shadow_events = *shadow_events.lock().unwrap();
    Run { answers, dep, transitions, shadow_events }
}

/// A provider that answers the status its path names: `/503` is a 503.
fn provider() -> FakeProvider {
    FakeProvider::start("shadowed", Fault::Healthy, |call| {
        let status = call.url.trim_start_matches('/').parse().unwrap_or(400);
        (status, "{}".to_owned())
    })
    .expect("bind a loopback port")
}

/// The three runs of one policy, and what they must agree on; returns the
/// shadow run and the enforced one.
fn off_shadow_enforced(policy: Policy, seed: u64) -> (Run, Run) {
    let provider = provider();
    let off = run(policy, How::Off, seed, &provider);
    let shadow = run(policy, How::Shadow, seed, &provider);
    let enforced = run(policy, How::Enforced, seed, &provider);
    let label = policy.reason();
    let counted = shadow.dep.snapshot().shadow_refused;
    println!(
        "{policy}: {} calls; enforced refused {} ({label}); in shadow {} recorded, {} events; off: {} ok, {} failed",
        off.answers.len(),
        enforced.refused(label),
        counted.get(policy),
        shadow.shadow_events,
        off.refused("ok"),
        off.refused("failed"),
    );
    assert!(off.answers.len() > 750, "two thousand steps make over 750 calls");
    assert!(off.refused("failed") > 150, "with faults: {}", off.refused("failed"));
    assert_eq!(
        off.answers.iter().filter(|a| *a != "ok" && *a != "failed").count(),
        0,
        "off, nothing refuses"
    );
    // In shadow, every call's answer is the one it got with the policy off.
    assert_eq!(shadow.answers.len(), off.answers.len());
    let differ = shadow.answers.iter().zip(&off.answers).position(|(s, o)| s != o);
    assert_eq!(differ, None, "{policy}: the first call answered otherwise in shadow");
    // What it would have refused is what it refuses enforced, on the same script.
    assert!(
        enforced.refused(label) >= 20,
        "{policy}: the script makes it refuse: {}",
        enforced.refused(label)
    );
    assert_eq!(counted.get(policy), enforced.refused(label), "{policy}: shadow refusals");
    assert_eq!(counted.total(), counted.get(policy), "only the policy in shadow records");
    assert_eq!(shadow.shadow_events, counted.get(policy), "one event per shadow refusal");
    assert_eq!(enforced.dep.snapshot().shadow_refused.total(), 0, "enforced, nothing is shadowed");
    let kind = policy_outcome(&shadow.dep, label);
    assert_eq!(kind, 0, "{policy}: in shadow no call is counted refused");
    assert_eq!(policy_outcome(&enforced.dep, label), enforced.refused(label));
    (shadow, enforced)
}

/// The count of the outcome labelled `label`.
fn policy_outcome(dep: &Dependency, label: &str) -> u64 {
    dep.snapshot().calls.by_outcome().iter().find(|(o, _)| o.as_str() == label).map_or(0, |(_, n)| *n)
}

#[test]
fn the_breaker_in_shadow_answers_as_off_and_still_opens_and_half_opens() {
    let (shadow, enforced) = off_shadow_enforced(Policy::Breaker, 11);
    // It moved through its states on what it saw, exactly as enforced.
    assert_eq!(shadow.transitions, enforced.transitions);
    for (from, to) in
        [(State::Closed, State::Open), (State::Open, State::HalfOpen), (State::HalfOpen, State::Closed)]
    {
        assert!(
            shadow.transitions.contains(&(from, to)),
            "{from:?} -> {to:?} in shadow: {:?}",
            shadow.transitions
        );
    }
    assert!(shadow.transitions.contains(&(State::HalfOpen, State::Open)), "a probe failed at least once");
}

#[test]
fn the_throttler_in_shadow_answers_as_off() {
    off_shadow_enforced(Policy::Throttle, 12);
}

#[test]
fn the_rate_limit_in_shadow_answers_as_off() {
    off_shadow_enforced(Policy::RateLimit, 13);
}

#[test]
fn the_adaptive_limit_in_shadow_answers_as_off() {
    off_shadow_enforced(Policy::AdaptiveLimit, 14);
}

#[test]
fn priority_shedding_in_shadow_answers_as_off() {
    off_shadow_enforced(Policy::Priority, 15);
}

/// A call through `dep` of `GET /{status}` on `provider`.
fn caller<'a>(
    dep: &'a Dependency,
    provider: &'a FakeProvider,
) -> impl Fn(u16) -> Result<(), Error<ureq::Error>> + 'a {
    let agent = support::agent(Duration::from_secs(20));
    move |status| {
        let (agent, url) = (agent.clone(), format!("{}/{status}", provider.url()));
        dep.call(move |ctx| {
            use watertight::http::WithDeadline;
            agent.get(&url).with_deadline(ctx).call().map(|_| ())
        })
    }
}

/// A breaker in shadow that has opened refuses the very next call once it
/// is switched to enforce live, and lets calls through again once switched
/// back.
#[test]
fn a_live_switch_from_shadow_to_enforce_takes_effect_on_the_next_call() {
    let provider = provider();
    let clock = ManualClock::new();
    let dep = Dependency::builder("switched")
        .workers(2)
        .timeout(Duration::from_secs(20))
        .breaker(BreakerConfig::count_based(10).minimum_calls(5).open_for(Duration::from_secs(30)))
        .shadow(Policy::Breaker)
        .clock(clock.clone())
        .build()
        .expect("a valid dependency");
    let call = caller(&dep, &provider);
    for _ in 0..5 {
        assert!(matches!(call(503), Err(Error::Failed(_))));
    }
    assert_eq!(dep.breaker().state(), State::Open, "in shadow it opens");
    let hits = provider.hits();
    assert!(call(200).is_ok(), "and lets the call through");
    assert_eq!(provider.hits(), hits + 1);
    assert_eq!(dep.snapshot().shadow_refused.get(Policy::Breaker), 1);
    assert_eq!(dep.config().shadow, Shadow::none().with(Policy::Breaker));

    let mut config = dep.config();
    config.shadow = Shadow::none();
    dep.reconfigure(config).expect("a valid change");
    assert!(
        matches!(call(200), Err(Error::Rejected { reason: watertight::Rejection::NotPermitted, .. })),
        "the next call"
    );
    assert_eq!(provider.hits(), hits + 1, "refused before the provider");

    let mut config = dep.config();
    config.shadow = Shadow::all();
    dep.reconfigure(config).expect("a valid change");
    assert!(call(200).is_ok(), "in shadow again, the next call goes through");
    assert_eq!(dep.snapshot().shadow_refused.get(Policy::Breaker), 2);
    assert_eq!(dep.snapshot().calls.not_permitted, 1);
    // Exported, labelled by policy and the reason it would have refused with.
    #[cfg(feature = "prometheus")]
    {
        let registry = watertight::Registry::new();
        registry.register(dep.clone()).expect("a new name");
        let text = watertight::metrics::encode_text(&registry);
        let line = r#"watertight_shadow_refusals_total{dependency="switched",policy="breaker",reason="not_permitted"} 2"#;
        assert!(text.contains(line), "{text}");
    }
}

/// A shadowed breaker still settles its probes: HALF_OPEN closes on
/// successful probes while the calls beyond them run unseen.
#[test]
fn probes_of_a_shadowed_breaker_are_settled() {
    let provider = provider();
    let clock = ManualClock::new();
    let dep = Dependency::builder("probed")
        .workers(2)
        .timeout(Duration::from_secs(20))
        .breaker(
            BreakerConfig::count_based(10)
                .minimum_calls(4)
                .open_for(Duration::from_secs(5))
                .half_open_calls(2),
        )
        .shadow(Policy::Breaker)
        .clock(clock.clone())
        .build()
        .expect("a valid dependency");
    let call = caller(&dep, &provider);
    for _ in 0..4 {
        assert!(call(503).is_err());
    }
    assert_eq!(dep.breaker().state(), State::Open);
    // Failures while OPEN are let through and not recorded.
    for _ in 0..3 {
        assert!(matches!(call(503), Err(Error::Failed(_))));
    }
    assert_eq!(dep.breaker().state(), State::Open);
    clock.advance(Duration::from_secs(5));
    assert!(call(200).is_ok(), "the first probe");
    assert_eq!(dep.breaker().state(), State::HalfOpen);
    assert!(call(200).is_ok(), "the second probe");
    assert_eq!(dep.breaker().state(), State::Closed, "closed by its two settled probes");
    assert_eq!(dep.snapshot().shadow_refused.get(Policy::Breaker), 3);
}

/// The request pool's reserve, through the gate of a server of one's own
/// (`RequestPool::enter`, the same room and reserve as the crate's server):
/// a seeded script of requests entering and leaving, played with no
/// reserve, the reserve in shadow and enforced.
#[cfg(feature = "tiny_http")]
mod reserve {
    use super::Script;
    use std::collections::VecDeque;
    use std::time::Duration;
    use watertight::server::{EnterError, Entered, RequestPool, Reserve, ServerConfig};

    const THREADS: usize = 8;

    fn play(reserve: Option<Reserve>, seed: u64) -> (Vec<&'static str>, RequestPool) {
        let mut config = ServerConfig::builder().max_wait(Duration::ZERO);
        if let Some(reserve) = reserve {
            config = config.reserve(reserve);
        }
        let pool = RequestPool::new(THREADS, &config.build().expect("a valid config")).expect("a pool");
        let mut script = Script(seed);
        let mut answers = Vec::new();
        let mut held: VecDeque<Option<Entered>> = VecDeque::new();
        for _ in 0..6_000 {
            let (op, route) = (script.percent(), script.percent());
            // Never more in flight than threads, so that with no reserve every request is served.
            if op < 52 && held.len() < THREADS {
                let path = if route < 15 { "/health" } else { "/search" };
                match pool.enter("GET", path, None, &[]) {
                    Ok(entered) => {
                        answers.push("ok");
                        held.push_back(Some(entered));
                    }
                    Err(EnterError::Busy) => {
                        answers.push("busy");
                        held.push_back(None);
                    }
                    Err(other) => panic!("{other:?}"),
                }
            } else {
                held.pop_front();
            }
        }
        (answers, pool)
    }

    #[test]
    fn the_reserve_in_shadow_answers_as_no_reserve() {
        let reserve = || Reserve::new(3).for_routes(["GET /health"]);
        let (off, _) = play(None, 21);
        let (shadow, shadowed) = play(Some(reserve().shadow(true)), 21);
        let (enforced, _) = play(Some(reserve()), 21);
        let refused = enforced.iter().filter(|a| **a == "busy").count() as u64;
        println!(
            "reserve: {} requests; enforced refused {refused}; in shadow {}",
            off.len(),
            shadowed.shadow_refused()
        );
        assert!(off.len() > 2_000);
        assert!(
            off.iter().all(|a| *a == "ok"),
            "with no reserve and never more than the threads, all served"
        );
        assert_eq!(shadow, off, "in shadow every request is answered as with no reserve");
        assert!(refused >= 50, "the script makes the reserve refuse: {refused}");
        assert_eq!(shadowed.shadow_refused(), refused, "shadow refusals are the enforced ones");
        assert_eq!(shadowed.gauges().refused().iter().map(|(_, n)| n).sum::<u64>(), 0);
        assert_eq!(shadowed.gauges().shadow_refused(), refused, "the gauges read the same count");
    }

    #[test]
    fn the_reserve_switched_live_applies_to_the_next_request() {
        let config = ServerConfig::builder()
            .max_wait(Duration::ZERO)
            .reserve(Reserve::new(1).for_routes(["GET /health"]).shadow(true))
            .build()
            .expect("a valid config");
        let pool = RequestPool::new(3, &config).expect("a pool");
        assert!(pool.reserve_in_shadow());
        let one = pool.enter("GET", "/a", None, &[]).expect("an ordinary thread");
        let two = pool.enter("GET", "/b", None, &[]).expect("an ordinary thread");
        let three = pool.enter("GET", "/c", None, &[]).expect("in shadow, the reserved thread");
        assert_eq!((pool.shadow_refused(), pool.reserved_busy()), (1, 1));
        assert!(matches!(pool.enter("GET", "/d", None, &[]), Err(EnterError::Busy)), "every thread busy");
        assert_eq!(pool.shadow_refused(), 1, "a full pool is its own bound, not the reserve's");
        drop(three);
        pool.set_reserve_shadow(false);
        assert!(!pool.reserve_in_shadow());
        assert!(
            matches!(pool.enter("GET", "/e", None, &[]), Err(EnterError::Busy)),
            "enforced, the next is kept off"
        );
        let health = pool.enter("GET", "/health", None, &[]).expect("the reserve kept for its route");
        drop((one, two, health));
        assert_eq!(pool.reserved_busy(), 0);
    }
}
