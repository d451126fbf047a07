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
    let always = Cache::<u8, u8>::builder("c").refresh_after(Duration::ZERO).build().unwrap_err();
    assert_eq!(always.field(), "refresh_after");
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
    // The seats are a room: the wait went through its line.
    let counts = cache.inner.seats.counts();
    assert_eq!((counts.seated, counts.waited, counts.refused), (2, 1, 1), "{counts:?}");
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

/// A classifier by status, as a client that returns the status as `Ok`:
/// 5xx is a failure, 4xx ignored, the rest a success.
fn by_status(r: &Result<u16, Arc<std::io::Error>>) -> crate::classify::Verdict {
    use crate::classify::{Classify, Verdict};
    match r {
        Ok(s) if *s >= 500 => Verdict::Failure,
        Ok(s) if *s >= 400 => Verdict::Ignore,
        Ok(_) => Verdict::Success,
        Err(e) => e.classify(),
    }
}

fn statuses(clock: &ManualClock) -> CacheBuilder<String, u16> {
    Cache::builder("pages").ttl(|_: &u16| Duration::from_secs(10)).clock(clock.clone())
}

#[test]
fn an_answer_the_classifier_ignores_is_returned_as_it_came_and_never_kept() {
    let clock = ManualClock::new();
    let cache = statuses(&clock).serve_stale(Duration::from_secs(60)).build().unwrap();
    let dep = Dependency::builder("pages").workers(2).queue(2).build().unwrap();
    let ask = |answer: Result<u16, std::io::ErrorKind>| {
        cache.get_or_call_with(&dep, "home", soon(), by_status, move |_: &CallContext| {
            answer.map_err(|kind| Arc::new(std::io::Error::from(kind)))
        })
    };
    assert_eq!(ask(Ok(200)).unwrap().value, 200);
    clock.advance(Duration::from_secs(11));

    // An `Err` the classifier ignores (built by the caller, like a 403): the
    // provider has answered; the error, never the last good value.
    let denied = ask(Err(std::io::ErrorKind::InvalidInput)).unwrap_err();
    assert!(
        matches!(&denied, Error::Failed(e) if e.kind() == std::io::ErrorKind::InvalidInput),
        "{denied:?}"
    );
    // An `Ok(404)` it ignores: returned as it came, not kept, not stale.
    assert_eq!(ask(Ok(404)).unwrap(), Cached { value: 404, stale: None });
    assert_eq!(ask(Ok(201)).unwrap(), Cached { value: 201, stale: None }, "the 404 was not kept");
    // A failure is still answered with the last good value.
    clock.advance(Duration::from_secs(11));
    assert_eq!(ask(Err(std::io::ErrorKind::ConnectionReset)).unwrap().stale, Some(Duration::from_secs(11)));
    assert_eq!(cache.snapshot().stale, 1);
    let calls = dep.snapshot().calls;
    assert_eq!((calls.successful, calls.ignored, calls.failed), (2, 2, 1), "{calls:?}");
}

#[test]
fn removal_wins_over_a_shared_call_in_flight() {
    let clock = ManualClock::new();
    let cache = permissions(&clock).build().unwrap();
    let dep = Dependency::builder("account-access").workers(2).queue(2).build().unwrap();
    let (open, gate) = std::sync::mpsc::channel::<()>();
    let checking = {
        let (cache, dep) = (cache.clone(), dep.clone());
        std::thread::spawn(move || {
            cache.get_or_call(&dep, "alice", soon(), move |_: &CallContext| {
                // Decided before the revocation, answered after it.
                let _ = gate.recv_timeout(Duration::from_secs(10));
                Ok::<_, Arc<std::io::Error>>(Decision { allowed: true })
            })
        })
    };
    let started = Instant::now() + Duration::from_secs(10);
    while cache.snapshot().in_flight < 1 && Instant::now() < started {
        std::thread::yield_now();
    }
    assert_eq!(cache.snapshot().in_flight, 1);
    cache.remove("alice");
    assert_eq!(cache.snapshot().in_flight, 0, "a lookup from now on makes a call of its own");
    open.send(()).unwrap();
    // The caller waiting on the call still gets its answer...
    assert_eq!(checking.join().unwrap().unwrap(), Cached { value: Decision { allowed: true }, stale: None });
    // ...but it was not kept: the next lookup asks again.
    let calls = Arc::new(AtomicUsize::new(0));
    let revoked = cache.get_or_call(&dep, "mallory-now", soon(), account("mallory", &calls, false)).unwrap();
    assert!(!revoked.value.allowed);
    let again = cache.get_or_call(&dep, "alice", soon(), account("mallory", &calls, false)).unwrap();
    assert_eq!(again.value, Decision { allowed: false }, "the revoked answer was kept");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A check (a lookup of alice) races a revocation (alice's permission taken
/// away, then `remove`) for 10,000 rounds: the revoked answer is never
/// kept. In each round the revocation comes at another moment of the check:
/// before its call, while its provider decides, or after its answer.
#[test]
fn a_revocation_racing_a_check_is_never_kept() {
    const ROUNDS: usize = 10_000;
    let cache: Cache<String, Decision> = Cache::builder("access").build().unwrap();
    // Each call comes right after the previous answer: a worker on its way
    // back is waited for.
    let dep = Dependency::builder("account-access")
        .workers(2)
        .queue(2)
        .max_wait(Duration::from_millis(100))
        .build()
        .unwrap();
    let allowed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let check = |allowed: &Arc<std::sync::atomic::AtomicBool>| {
        let allowed = Arc::clone(allowed);
        move |_: &CallContext| {
            let decision = Decision { allowed: allowed.load(Ordering::SeqCst) };
            // The provider answers a moment after it decides.
            let decided = Instant::now();
            while decided.elapsed() < Duration::from_micros(20) {
                std::hint::spin_loop();
            }
            Ok::<_, Arc<std::io::Error>>(decision)
        }
    };
    let (start, done) = (Arc::new(std::sync::Barrier::new(2)), Arc::new(std::sync::Barrier::new(2)));
    let revoker = {
        let (cache, allowed, start, done) =
            (cache.clone(), Arc::clone(&allowed), Arc::clone(&start), Arc::clone(&done));
        std::thread::spawn(move || {
            for round in 0..ROUNDS {
                start.wait();
                let at = Instant::now() + Duration::from_micros((round % 100) as u64);
                while Instant::now() < at {
                    std::hint::spin_loop();
                }
                allowed.store(false, Ordering::SeqCst);
                cache.remove("alice");
                done.wait();
            }
        })
    };
    let began = Instant::now();
    let (mut kept, mut failed) = (0, Vec::new());
    for _ in 0..ROUNDS {
        start.wait();
        // The check's own answer may be either: it raced the revocation.
        if let Err(err) = cache.get_or_call(&dep, "alice", soon(), check(&allowed)) {
            failed.push(err);
        }
        done.wait();
        // Revoked: a lookup now must not find the old "yes".
        let after = cache.get_or_call(&dep, "alice", soon(), check(&allowed));
        kept += usize::from(after.is_ok_and(|a| a.value.allowed));
        allowed.store(true, Ordering::SeqCst);
        cache.remove("alice");
    }
    revoker.join().unwrap();
    assert_eq!(kept, 0, "revoked answers kept, of {ROUNDS}");
    // (A check refused on a loaded machine races nothing: a few at most.)
    assert!(failed.len() < ROUNDS / 100, "{} checks failed: {:?}", failed.len(), failed.first());
    assert!(began.elapsed() < Duration::from_secs(120), "took {:?}", began.elapsed());
}

/// One healthy key looked up 160 times a second (two callers, each 80 a
/// second) for ten TTLs, refreshed ahead of expiry at half its TTL: it never
/// expires, so no lookup waits, none is refused or stale, and each refresh
/// is one call. The provider answers within one tick (each tick waits for
/// the refresh in flight to land).
#[test]
fn refresh_ahead_keeps_a_hot_key_fresh_with_one_call_per_refresh() {
    const TICKS: u32 = 800;
    let tick = Duration::from_micros(12_500);
    let clock = ManualClock::new();
    let cache: Cache<String, u32> = Cache::builder("prices")
        .ttl(|_: &u32| Duration::from_secs(1))
        .refresh_after(Duration::from_millis(500))
        .capacity(1)
        .max_waiting(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    let dep = Dependency::builder("prices").workers(2).queue(2).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    // The first lookup is the one miss.
    let first = Arc::clone(&calls);
    let primed = cache.get_or_call(&dep, "list", soon(), move |_: &CallContext| {
        Ok::<_, String>(first.fetch_add(1, Ordering::SeqCst) as u32)
    });
    assert_eq!(primed.unwrap().value, 0);
    let (start, done) = (Arc::new(std::sync::Barrier::new(3)), Arc::new(std::sync::Barrier::new(3)));
    let callers: Vec<_> = (0..2)
        .map(|_| {
            let (cache, dep, calls) = (cache.clone(), dep.clone(), Arc::clone(&calls));
            let (start, done) = (Arc::clone(&start), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                for _ in 0..TICKS {
                    start.wait();
                    let calls = Arc::clone(&calls);
                    answers.push(cache.get_or_call(&dep, "list", soon(), move |_: &CallContext| {
                        Ok::<_, String>(calls.fetch_add(1, Ordering::SeqCst) as u32)
                    }));
                    done.wait();
                }
                answers
            })
        })
        .collect();
    let began = Instant::now();
    for _ in 0..TICKS {
        clock.advance(tick);
        start.wait();
        done.wait();
        let landed = Instant::now() + Duration::from_secs(10);
        while cache.snapshot().in_flight > 0 && Instant::now() < landed {
            std::thread::yield_now();
        }
    }
    for caller in callers {
        for answer in caller.join().unwrap() {
            assert!(matches!(answer, Ok(Cached { stale: None, .. })), "every lookup fresh: {answer:?}");
        }
    }
    let snap = cache.snapshot();
    // Without refresh ahead, each of the ten expiries was a miss.
    assert_eq!((snap.misses, snap.refused, snap.stale, snap.evictions), (1, 0, 0, 0), "{snap:?}");
    assert_eq!(snap.hits, 2 * u64::from(TICKS), "{snap:?}");
    let calls = calls.load(Ordering::SeqCst) as u64;
    assert_eq!(calls, 1 + snap.refreshes, "one call per refresh: {snap:?}");
    // 10 s of lookups, a refresh due every 500 ms: 19 or 20.
    assert!((19..=20).contains(&snap.refreshes), "{snap:?}");
    assert_eq!(dep.snapshot().calls.successful, calls);
    assert!(began.elapsed() < Duration::from_secs(60), "took {:?}", began.elapsed());
}

#[test]
fn a_failed_refresh_keeps_the_current_value_until_its_ttl() {
    let clock = ManualClock::new();
    let cache = permissions(&clock).refresh_after(Duration::from_secs(30)).build().unwrap();
    let dep = Dependency::builder("account-access").workers(1).queue(2).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let landed = |cache: &Cache<String, Decision>| {
        let until = Instant::now() + Duration::from_secs(10);
        while cache.snapshot().in_flight > 0 && Instant::now() < until {
            std::thread::yield_now();
        }
    };
    assert!(cache.get_or_call(&dep, "alice", soon(), account("alice", &calls, false)).unwrap().value.allowed);
    clock.advance(Duration::from_secs(31));
    // Past the refresh age: the current value at once, and a refresh that fails.
    let hit = cache.get_or_call(&dep, "alice", soon(), account("alice", &calls, true)).unwrap();
    assert_eq!(hit, Cached { value: Decision { allowed: true }, stale: None });
    landed(&cache);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // The value stays until its TTL; each hit past the age tries again.
    clock.advance(Duration::from_secs(20));
    let still = cache.get_or_call(&dep, "alice", soon(), account("alice", &calls, true)).unwrap();
    assert_eq!(still.value, Decision { allowed: true });
    landed(&cache);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    clock.advance(Duration::from_secs(10));
    // 61 s old: expired, a miss, and the failure is the answer.
    let err = cache.get_or_call(&dep, "alice", soon(), account("alice", &calls, true)).unwrap_err();
    assert!(matches!(err, Error::Failed(_)), "{err:?}");
    let snap = cache.snapshot();
    assert_eq!((snap.hits, snap.misses, snap.refreshes), (2, 2, 2), "{snap:?}");
    // A refresh refused (an open breaker, as a full pool would) is not made: the value stays.
    assert!(cache.get_or_call(&dep, "bob", soon(), account("bob", &calls, false)).is_ok());
    clock.advance(Duration::from_secs(31));
    dep.breaker().transition_to(State::ForcedOpen);
    assert!(cache.get_or_call(&dep, "bob", soon(), account("bob", &calls, false)).unwrap().value.allowed);
    assert_eq!(cache.snapshot().refreshes, 2, "a refused refresh is not counted");
    assert_eq!(cache.snapshot().in_flight, 0);
}

#[test]
fn a_value_replaced_for_its_key_is_not_an_eviction() {
    let clock = ManualClock::new();
    let cache = permissions(&clock).capacity(1).build().unwrap();
    let dep = Dependency::builder("account-access").workers(1).queue(2).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    for _ in 0..5 {
        cache.get_or_call(&dep, "alice", soon(), account("alice", &calls, false)).unwrap();
        clock.advance(Duration::from_secs(61));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    // It counted one per replacement.
    assert_eq!((cache.snapshot().evictions, cache.snapshot().entries), (0, 1));
    cache.get_or_call(&dep, "bob", soon(), account("bob", &calls, false)).unwrap();
    assert_eq!(cache.snapshot().evictions, 1, "pushed out for room");
}

#[test]
fn a_lookup_is_a_leg_of_a_fan_out() {
    use crate::dependency::FanOut;
    let clock = ManualClock::new();
    let cache = permissions(&clock).build().unwrap();
    let dep = Dependency::builder("account-access").workers(2).queue(2).build().unwrap();
    let pricing = Dependency::builder("pricing").workers(2).queue(2).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));

    // A miss, beside a retried leg: the fan-out's thread takes the shared
    // call's answer in (it is woken by it: the provider takes 30 ms, the
    // fan-out has 10 s) while it starts the other leg's retry.
    let fan = FanOut::timeout(Duration::from_secs(10));
    let ask = account("alice", &calls, false);
    let allowed = cache.fan(&fan, &dep, "alice", move |ctx: &CallContext| {
        std::thread::sleep(Duration::from_millis(30));
        ask(ctx)
    });
    let price = pricing.with().retry().fan(&fan, |ctx: &CallContext| {
        if ctx.attempt() == 1 {
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
        } else {
            Ok(1999)
        }
    });
    let began = Instant::now();
    assert_eq!(allowed.wait().unwrap(), Cached { value: Decision { allowed: true }, stale: None });
    assert!(began.elapsed() < Duration::from_secs(5), "woken by the answer: {:?}", began.elapsed());
    assert_eq!(price.wait().unwrap(), 1999);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A hit: its leg has its answer at once, with no call.
    let fan = FanOut::timeout(Duration::from_secs(10));
    let hit = cache.fan(&fan, &dep, "alice", account("alice", &calls, true));
    assert!(hit.is_done(), "a hit answers at once");
    assert!(hit.wait().unwrap().value.allowed);

    // A miss whose call outlives the fan-out: a timeout at its deadline;
    // the shared call goes on, and its answer is kept for the next lookup.
    let (open, gate) = std::sync::mpsc::channel::<()>();
    let fan = FanOut::timeout(Duration::from_millis(100));
    let ask = account("bob", &calls, false);
    let slow = cache.fan(&fan, &dep, "bob", move |ctx: &CallContext| {
        let _ = gate.recv_timeout(Duration::from_secs(10));
        ask(ctx)
    });
    let began = Instant::now();
    let late = slow.wait().unwrap_err();
    assert!(matches!(late, Error::Timeout { .. }), "{late:?}");
    assert!(began.elapsed() < Duration::from_secs(5), "{:?}", began.elapsed());
    open.send(()).unwrap();
    let landed = Instant::now() + Duration::from_secs(10);
    while cache.snapshot().in_flight > 0 && Instant::now() < landed {
        std::thread::yield_now();
    }
    let kept = cache.get_or_call(&dep, "bob", soon(), account("bob", &calls, true)).unwrap();
    assert!(kept.value.allowed, "the shared call's answer was kept");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let snap = cache.snapshot();
    assert_eq!((snap.waiting, snap.misses, snap.hits), (0, 2, 2), "{snap:?}");
}
