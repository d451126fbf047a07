use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::breaker::State;
use crate::clock::ManualClock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Decision {
    allowed: bool,
}

fn permissions(clock: &ManualClock) -> CacheBuilder<String, Decision> {
    Cache::builder("access")
        .ttl(|d: &Decision| Duration::from_secs(if d.allowed { 60 } else { 10 }))
        .clock(clock.clone())
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// A job answering like account: `mallory` is denied, everyone else allowed;
/// `fail` makes it answer an error instead. Counts its runs in `calls`.
fn account(
    user: &str,
    calls: &Arc<AtomicUsize>,
    fail: bool,
) -> impl FnOnce(&CallContext) -> Result<Decision, Arc<std::io::Error>> + Send + 'static {
    let (calls, allowed) = (Arc::clone(calls), user != "mallory");
    move |_: &CallContext| {
        calls.fetch_add(1, Ordering::SeqCst);
        if fail { Err(Arc::new(std::io::Error::other("account is down"))) } else { Ok(Decision { allowed }) }
    }
}

#[test]
fn allow_is_kept_60_s_deny_10_s_and_a_failure_never() {
    let clock = ManualClock::new();
    let cache = permissions(&clock).build().unwrap();
    let dep = Dependency::builder("account-access").workers(2).queue(2).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let ask = |user: &str, fail: bool| cache.get_or_call(&dep, user, soon(), account(user, &calls, fail));

    assert_eq!(ask("alice", false).unwrap(), Cached { value: Decision { allowed: true }, stale: None });
    assert_eq!(ask("mallory", false).unwrap().value, Decision { allowed: false });
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    clock.advance(Duration::from_secs(9));
    assert!(ask("alice", false).unwrap().value.allowed, "allowed 9 s ago: a hit");
    assert!(!ask("mallory", false).unwrap().value.allowed, "denied 9 s ago: a hit");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "hits make no call");

    clock.advance(Duration::from_secs(2));
    assert!(!ask("mallory", false).unwrap().value.allowed);
    assert_eq!(calls.load(Ordering::SeqCst), 3, "a deny 11 s old is asked again");
    assert!(ask("alice", false).unwrap().value.allowed);
    assert_eq!(calls.load(Ordering::SeqCst), 3, "an allow 11 s old is still kept");

    clock.advance(Duration::from_secs(50));
    // Alice's allow is 61 s old: asked again, and this time account fails.
    let failed = ask("alice", true).unwrap_err();
    assert!(matches!(failed, Error::Failed(_)), "{failed:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    // The failure was not kept: the next lookup asks again, and gets the answer.
    assert!(ask("alice", false).unwrap().value.allowed);
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    // One call each, recorded once each on the dependency.
    let counts = dep.snapshot().calls;
    assert_eq!((counts.successful, counts.failed), (4, 1), "{counts:?}");

    let snap = cache.snapshot();
    assert_eq!((snap.hits, snap.misses, snap.stale, snap.coalesced), (3, 5, 0, 0), "{snap:?}");
    assert_eq!((snap.entries, snap.in_flight), (2, 0), "{snap:?}");
}

#[test]
fn the_last_good_value_is_served_stale_with_its_age_within_the_limit_only() {
    let clock = ManualClock::new();
    let cache = permissions(&clock).serve_stale(Duration::from_secs(30)).build().unwrap();
    let dep = Dependency::builder("account-access").workers(1).queue(2).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let ask = |user: &str, fail: bool| cache.get_or_call(&dep, user, soon(), account(user, &calls, fail));

    assert!(ask("alice", false).unwrap().stale.is_none());
    clock.advance(Duration::from_secs(75));
    // Expired 15 s ago, and the call fails: the last good value, 75 s old.
    let stale = ask("alice", true).unwrap();
    assert_eq!(stale, Cached { value: Decision { allowed: true }, stale: Some(Duration::from_secs(75)) });
    assert!(stale.is_stale());
    // Refused by an open breaker: stale too, and no call was made.
    dep.breaker().transition_to(State::ForcedOpen);
    let refused = ask("alice", false).unwrap();
    assert_eq!(refused.stale, Some(Duration::from_secs(75)));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Expired 31 s ago: past the limit, the error again.
    clock.advance(Duration::from_secs(16));
    let err = ask("alice", false).unwrap_err();
    assert_eq!(err.rejection(), Some(crate::error::Rejection::NotPermitted), "{err:?}");
    // A key never answered has nothing to serve.
    assert!(ask("bob", false).unwrap_err().is_rejected());
    assert_eq!(cache.snapshot().stale, 2);

    // Healed: a fresh answer replaces the last good value.
    dep.breaker().transition_to(State::Closed);
    assert_eq!(ask("alice", false).unwrap().stale, None);
}

#[test]
fn without_serve_stale_an_expired_value_is_never_answered() {
    let clock = ManualClock::new();
    let cache = permissions(&clock).build().unwrap();
    let dep = Dependency::builder("account-access").workers(1).queue(2).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    assert!(cache.get_or_call(&dep, "alice", soon(), account("alice", &calls, false)).is_ok());
    clock.advance(Duration::from_secs(61));
    let err = cache.get_or_call(&dep, "alice", soon(), account("alice", &calls, true)).unwrap_err();
    assert!(matches!(err, Error::Failed(_)), "fail closed: {err:?}");
    assert_eq!(cache.snapshot().stale, 0);
}

#[test]
fn capacity_bounds_the_entries_and_evictions_are_counted() {
    let cache: Cache<u64, u64> = Cache::builder("squares").capacity(50).build().unwrap();
    // One worker and no queue: each miss comes right after the previous
    // answer, while its worker may still be handing it back; the pool's
    // wait for room covers that moment.
    let dep = Dependency::builder("squares")
        .workers(1)
        .queue(0)
        .max_wait(Duration::from_millis(100))
        .build()
        .unwrap();
    for n in 0..500u64 {
        let got = cache.get_or_call(&dep, &n, soon(), move |_: &CallContext| Ok::<_, String>(n * n));
        assert_eq!(got.unwrap().value, n * n);
    }
    let snap = cache.snapshot();
    assert!(snap.entries <= 60, "{snap:?}");
    assert!(snap.evictions >= 400, "{snap:?}");
    assert_eq!(snap.misses, 500);
    assert_eq!(dep.snapshot().calls.queue_full, 0, "a worker handing back an answer is waited for");
}

#[test]
fn a_zero_ttl_keeps_nothing_and_a_removed_key_is_asked_again() {
    let cache: Cache<String, u32> =
        Cache::builder("quotes").ttl(|v: &u32| Duration::from_secs(u64::from(*v > 1))).build().unwrap();
    let dep = Dependency::builder("quotes").workers(1).queue(2).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let ask = |key: &str, v: u32| {
        let calls = Arc::clone(&calls);
        cache.get_or_call(&dep, key, soon(), move |_: &CallContext| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(v)
        })
    };
    ask("zero", 0).unwrap();
    ask("zero", 0).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "a zero TTL keeps nothing");
    ask("two", 2).unwrap();
    ask("two", 2).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    cache.remove("two");
    ask("two", 2).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 4, "removed, asked again");
}

#[test]
fn the_builder_refuses_what_cannot_work() {
    let empty = Cache::<u8, u8>::builder("").build().unwrap_err();
    assert_eq!(empty.field(), "name");
    let none = Cache::<u8, u8>::builder("c").capacity(0).build().unwrap_err();
    assert_eq!(none.field(), "capacity");
    let nobody = Cache::<u8, u8>::builder("c").max_waiting(0).build().unwrap_err();
    assert_eq!(nobody.field(), "max_waiting");
}

#[test]
fn beyond_max_waiting_a_miss_is_refused_at_once_and_starts_no_call() {
    let cache: Cache<String, u32> = Cache::builder("quotes").max_waiting(2).build().unwrap();
    let dep = Dependency::builder("quotes").workers(2).queue(2).build().unwrap();
    let (open, gate) = std::sync::mpsc::channel::<()>();
    let gate = Arc::new(parking_lot::Mutex::new(gate));
    let calls = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|key| {
            let (cache, dep, gate, calls) =
                (cache.clone(), dep.clone(), Arc::clone(&gate), Arc::clone(&calls));
            std::thread::spawn(move || {
                cache.get_or_call(&dep, key, soon(), move |_: &CallContext| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let _ = gate.lock().recv_timeout(Duration::from_secs(10));
                    Ok::<_, String>(7)
                })
            })
        })
        .collect();
    // Both seats taken (bounded wait for the two threads to sit down).
    let seated = Instant::now() + Duration::from_secs(10);
    while cache.snapshot().waiting < 2 && Instant::now() < seated {
        std::thread::yield_now();
    }
    assert_eq!(cache.snapshot().waiting, 2);
    let began = Instant::now();
    let refused = cache.get_or_call(&dep, "c", soon(), |_: &CallContext| Ok::<_, String>(0)).unwrap_err();
    assert_eq!(refused.rejection(), Some(crate::error::Rejection::QueueFull), "{refused:?}");
    assert!(began.elapsed() < Duration::from_secs(1), "refused at once");
    open.send(()).unwrap();
    open.send(()).unwrap();
    for waiter in waiters {
        assert_eq!(waiter.join().unwrap().unwrap().value, 7);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the refused miss made no call");
    let snap = cache.snapshot();
    assert_eq!((snap.misses, snap.refused, snap.waiting), (3, 1, 0), "{snap:?}");
}

#[test]
fn beyond_max_waiting_a_miss_waits_for_a_seat_within_max_wait() {
    let cache: Cache<String, u32> = Cache::builder("quotes").max_waiting(1).build().unwrap();
    let wait = Duration::from_millis(300);
    let dep = Dependency::builder("quotes").workers(2).queue(2).max_wait(wait).build().unwrap();
    let (open, gate) = std::sync::mpsc::channel::<()>();
    let seated = {
        let (cache, dep) = (cache.clone(), dep.clone());
        std::thread::spawn(move || {
            cache.get_or_call(&dep, "a", soon(), move |_: &CallContext| {
                let _ = gate.recv_timeout(Duration::from_secs(10));
                Ok::<_, String>(1)
            })
        })
    };
    let sat = Instant::now() + Duration::from_secs(10);
    while cache.snapshot().waiting < 1 && Instant::now() < sat {
        std::thread::yield_now();
    }
    // The one seat stays taken: this miss waits max_wait for it, then is refused.
    let began = Instant::now();
    let refused = cache.get_or_call(&dep, "b", soon(), |_: &CallContext| Ok::<_, String>(2)).unwrap_err();
    let took = began.elapsed();
    assert_eq!(refused.rejection(), Some(crate::error::Rejection::QueueFull), "{refused:?}");
    assert!(took >= wait && took < wait + Duration::from_secs(2), "waited {took:?} for a seat");
    // Freed: the next miss takes the seat and its answer.
    open.send(()).unwrap();
    assert_eq!(seated.join().unwrap().unwrap().value, 1);
    assert_eq!(cache.get_or_call(&dep, "b", soon(), |_: &CallContext| Ok::<_, String>(2)).unwrap().value, 2);
    assert_eq!(cache.snapshot().refused, 1);
}

#[test]
fn a_hit_touches_neither_the_pool_nor_the_breaker() {
    let clock = ManualClock::new();
    let cache = permissions(&clock).build().unwrap();
    let dep = Dependency::builder("account-access").workers(1).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    cache.get_or_call(&dep, "alice", soon(), account("alice", &calls, false)).unwrap();
    let (before, submitted) = (dep.snapshot().calls, dep.pool().unwrap().stats().submitted);
    // Even an open breaker does not see a hit.
    dep.breaker().transition_to(State::ForcedOpen);
    for _ in 0..10 {
        let hit = cache.get_or_call(&dep, "alice", soon(), account("alice", &calls, false)).unwrap();
        assert_eq!(hit.value, Decision { allowed: true });
    }
    assert_eq!(dep.snapshot().calls, before, "no attempt counted");
    assert_eq!(dep.pool().unwrap().stats().submitted, submitted, "nothing submitted");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(cache.snapshot().hits, 10);
}
