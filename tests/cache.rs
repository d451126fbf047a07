//! The cache in front of a real loopback provider, over real ureq: one
//! shared call per key, and each caller waiting only within its own deadline.
#![cfg(all(feature = "cache", feature = "ureq", feature = "testing"))]

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use watertight::cache::{Cache, Cached};
use watertight::http::WithDeadline;
use watertight::testing::{FakeProvider, Fault};
use watertight::{CallContext, Dependency, Error};

/// A provider that answers every request with the user's permission.
fn account(fault: Fault) -> FakeProvider {
    FakeProvider::start("account", fault, |call| (200, format!(r#"{{"user":"{}"}}"#, call.url)))
        .expect("start the fake account provider")
}

/// The job: GET `url`, bounded by the call's deadline; ureq's error shared
/// by every caller of the flight.
fn ask(url: String) -> impl FnOnce(&CallContext) -> Result<String, Arc<ureq::Error>> + Send + 'static {
    move |ctx: &CallContext| {
        let agent = ureq::Agent::new_with_defaults();
        let mut resp = agent.get(&url).with_deadline(ctx).call().map_err(Arc::new)?;
        resp.body_mut().read_to_string().map_err(Arc::new)
    }
}

type Answer = (Result<Cached<String>, Error<Arc<ureq::Error>>>, Duration);

/// `waits.len()` callers of `key`, released together, each with its own
/// wait; their answers and how long each took, in the order of `waits`.
fn callers(
    cache: &Cache<String, String>,
    dep: &Dependency,
    url: &str,
    key: &str,
    waits: &[Duration],
) -> Vec<Answer> {
    let start = Arc::new(Barrier::new(waits.len()));
    let threads: Vec<_> = waits
        .iter()
        .map(|&wait| {
            let (cache, dep, start) = (cache.clone(), dep.clone(), Arc::clone(&start));
            let (url, key) = (url.to_owned(), key.to_owned());
            thread::spawn(move || {
                start.wait();
                let began = Instant::now();
                let answer = cache.get_or_call(&dep, &key, began + wait, ask(url));
                (answer, began.elapsed())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().expect("a caller panicked")).collect()
}

/// 100 callers of one uncached key, released together, and a provider that
/// answers after 50 ms: one provider call, 100 answers, one outcome.
#[test]
fn a_hundred_callers_of_one_key_share_one_call() {
    let provider = account(Fault::Slow(Duration::from_millis(50)));
    let dep = Dependency::builder("account").workers(4).timeout(Duration::from_secs(10)).build().unwrap();
    let cache = Cache::builder("access").build().unwrap();
    let url = format!("{}/users/alice", provider.url());

    let answers = callers(&cache, &dep, &url, "alice", &[Duration::from_secs(10); 100]);
    for (answer, _) in &answers {
        let answer = answer.as_ref().expect("every caller gets the answer");
        assert_eq!((answer.value.as_str(), answer.stale), (r#"{"user":"/users/alice"}"#, None));
    }
    assert_eq!(answers.len(), 100);
    assert_eq!(provider.hits(), 1, "one provider call");
    let calls = dep.snapshot().calls;
    assert_eq!((calls.total(), calls.successful), (1, 1), "one outcome recorded: {calls:?}");
    let snap = cache.snapshot();
    assert_eq!(snap.hits + snap.misses, 100, "{snap:?}");
    assert_eq!(snap.misses - snap.coalesced, 1, "one shared call started: {snap:?}");
    assert_eq!(snap.in_flight, 0, "{snap:?}");
}

/// A slow provider, callers of one key with 100 ms and 2 s: the 100 ms ones
/// give up at their deadline, the 2 s ones get the answer when it comes.
#[test]
fn each_caller_waits_only_within_its_own_deadline() {
    let provider = account(Fault::Slow(Duration::from_millis(700)));
    let dep = Dependency::builder("account").workers(2).timeout(Duration::from_secs(5)).build().unwrap();
    let cache = Cache::builder("access").build().unwrap();
    let url = format!("{}/users/bob", provider.url());
    let (short, long) = (Duration::from_millis(100), Duration::from_secs(2));

    let answers = callers(&cache, &dep, &url, "bob", &[short, long, short, long, short, long]);
    for (i, (answer, took)) in answers.iter().enumerate() {
        if i % 2 == 0 {
            assert!(matches!(answer, Err(Error::Timeout { .. })), "a 100 ms caller: {answer:?}");
            assert!(*took >= short && *took < Duration::from_millis(600), "a 100 ms caller took {took:?}");
        } else {
            let answer = answer.as_ref().expect("a 2 s caller gets the answer that came in time");
            assert_eq!(answer.value, r#"{"user":"/users/bob"}"#);
            assert!(*took >= Duration::from_millis(600) && *took < long, "a 2 s caller took {took:?}");
        }
    }
    assert_eq!(provider.hits(), 1, "the callers that gave up did not cancel the call");
    assert_eq!(dep.snapshot().calls.successful, 1);
}

/// A provider that hangs: every caller returns by its own deadline, with a
/// timeout; the shared call goes on until the dependency's timeout, and is
/// then recorded once, as a failure that is not kept: the next lookup asks
/// again.
#[test]
fn a_hung_provider_holds_each_caller_only_until_its_own_deadline() {
    let provider = account(Fault::Hang);
    let timeout = Duration::from_millis(2500);
    let dep = Dependency::builder("account").workers(2).timeout(timeout).build().unwrap();
    let cache = Cache::builder("access").build().unwrap();
    let url = format!("{}/users/carol", provider.url());
    let (short, long) = (Duration::from_millis(100), Duration::from_secs(2));

    let began = Instant::now();
    let answers = callers(&cache, &dep, &url, "carol", &[short, long, short, long]);
    for (i, (answer, took)) in answers.iter().enumerate() {
        let wait = if i % 2 == 0 { short } else { long };
        assert!(matches!(answer, Err(Error::Timeout { .. })), "{answer:?}");
        assert!(
            *took >= wait && *took < wait + Duration::from_millis(500),
            "a {wait:?} caller took {took:?}"
        );
    }
    assert_eq!(provider.hits(), 1);
    assert_eq!(dep.snapshot().calls.total(), 0, "still in flight after every caller left");
    assert_eq!(cache.snapshot().in_flight, 1);

    // The call ends at the dependency's timeout (ureq's own, or the
    // dependency's if later): one failure, recorded once.
    let landed = Instant::now() + Duration::from_secs(10);
    while cache.snapshot().in_flight > 0 && Instant::now() < landed {
        thread::park_timeout(Duration::from_millis(10));
    }
    assert!(began.elapsed() >= timeout, "the shared call ended before its timeout");
    let calls = dep.snapshot().calls;
    assert_eq!((calls.total(), calls.timed_out + calls.failed), (1, 1), "{calls:?}");

    // Not kept: healed, the next lookup asks again.
    provider.set_fault(Fault::Healthy);
    let answer = cache.get_or_call(&dep, "carol", Instant::now() + Duration::from_secs(5), ask(url));
    assert_eq!(answer.expect("asked again").value, r#"{"user":"/users/carol"}"#);
    assert_eq!(provider.hits(), 2);
}
