//! The cache in front of a real loopback provider, over real ureq: one
//! shared call per key, and each caller waiting only within its own deadline.
#![cfg(all(feature = "cache", feature = "ureq", feature = "testing"))]

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use watertight::cache::{Cache, Cached};
use watertight::http::WithDeadline;
use watertight::testing::{FakeProvider, Fault};
use watertight::{CallContext, Dependency, Error, ManualClock, Verdict};

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

/// The job of a client that reads every status as an answer
/// (`http_status_as_error(false)`): the status and the body.
fn status_of(
    url: String,
) -> impl FnOnce(&CallContext) -> Result<(u16, String), Arc<ureq::Error>> + Send + 'static {
    move |ctx: &CallContext| {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut resp = agent.get(&url).with_deadline(ctx).call().map_err(Arc::new)?;
        Ok((resp.status().as_u16(), resp.body_mut().read_to_string().map_err(Arc::new)?))
    }
}

/// 5xx a failure, 4xx ignored: the status decides, as `classify_response` does.
fn by_status(r: &Result<(u16, String), Arc<ureq::Error>>) -> Verdict {
    use watertight::Classify;
    match r {
        Ok((status, _)) if *status >= 500 => Verdict::Failure,
        Ok((status, _)) if *status >= 400 => Verdict::Ignore,
        Ok(_) => Verdict::Success,
        Err(e) => e.classify(),
    }
}

// (In the two tests below, each lookup comes right after the previous
// answer, whose worker may still be on its way back to the pool: the queue
// takes the lookup meanwhile.)

/// A provider that answers `200`, then `500` as an `Ok` that the classifier
/// judges a failure: the 500 is never kept, and the last good value answers
/// it where allowed; without `serve_stale`, the 500 as it came.
#[test]
fn a_500_the_classifier_judges_a_failure_is_never_kept() {
    let provider = account(Fault::Healthy);
    let dep =
        Dependency::builder("account").workers(2).queue(4).timeout(Duration::from_secs(5)).build().unwrap();
    let clock = ManualClock::new();
    let builder =
        || Cache::builder("pages").ttl(|_: &(u16, String)| Duration::from_secs(10)).clock(clock.clone());
    let (stale, closed) =
        (builder().serve_stale(Duration::from_secs(60)).build().unwrap(), builder().build().unwrap());
    let url = format!("{}/users/dave", provider.url());
    let ask = |cache: &Cache<String, (u16, String)>| {
        cache.get_or_call_with(
            &dep,
            "dave",
            Instant::now() + Duration::from_secs(5),
            by_status,
            status_of(url.clone()),
        )
    };
    let good = (200, r#"{"user":"/users/dave"}"#.to_owned());
    assert_eq!(ask(&stale).unwrap().value, good);
    assert_eq!(ask(&closed).unwrap().value, good);

    clock.advance(Duration::from_secs(11));
    provider.set_fault(Fault::Error(500));
    let fell_back = ask(&stale).unwrap();
    assert_eq!(
        (&fell_back.value, fell_back.stale),
        (&good, Some(Duration::from_secs(11))),
        "the last good value"
    );
    assert_eq!(ask(&closed).unwrap().value.0, 500, "without serve_stale: the answer as it came");
    assert_eq!(provider.hits(), 4);

    // Neither kept the 500: healed, both ask again.
    provider.set_fault(Fault::Healthy);
    for cache in [&stale, &closed] {
        let fresh = ask(cache).unwrap();
        assert_eq!((&fresh.value, fresh.stale), (&good, None));
    }
    assert_eq!(provider.hits(), 6);
    assert_eq!(dep.snapshot().calls.failed, 2, "{:?}", dep.snapshot().calls);
    assert_eq!(stale.snapshot().stale, 1, "one answer was the last good value");
}

/// A provider that answers `200`, then `403` (an `Err` the classifier
/// ignores): the 403 is the answer, never the last good value.
#[test]
fn a_403_the_classifier_ignores_is_the_answer_never_the_last_good_value() {
    let provider = account(Fault::Healthy);
    let dep =
        Dependency::builder("account").workers(2).queue(4).timeout(Duration::from_secs(5)).build().unwrap();
    let clock = ManualClock::new();
    let cache: Cache<String, String> = Cache::builder("access")
        .ttl(|_: &String| Duration::from_secs(10))
        .serve_stale(Duration::from_secs(60))
        .clock(clock.clone())
        .build()
        .unwrap();
    let url = format!("{}/users/erin", provider.url());
    let ask = || cache.get_or_call(&dep, "erin", Instant::now() + Duration::from_secs(5), ask(url.clone()));
    assert!(ask().is_ok());
    clock.advance(Duration::from_secs(11));
    provider.set_fault(Fault::Error(403));
    let denied = ask().unwrap_err();
    assert!(matches!(&denied, Error::Failed(e) if matches!(**e, ureq::Error::StatusCode(403))), "{denied:?}");
    assert_eq!(cache.snapshot().stale, 0);
    // A failure still gets the last good value.
    provider.set_fault(Fault::Error(503));
    assert_eq!(ask().unwrap().stale, Some(Duration::from_secs(11)));
    let calls = dep.snapshot().calls;
    assert_eq!((calls.successful, calls.ignored, calls.failed), (1, 1, 1), "{calls:?}");
}
