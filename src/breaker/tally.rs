//! The OPEN reject path without a lock and without a shared write.
//!
//! Each thread keeps, in [`OPEN`], the end of the open period it was last
//! rejected by (keyed by the breaker's unique id and its packed `current`
//! word, so a matching entry is exact, never stale: see the module docs of
//! `breaker`), and counts its rejections by that breaker in a [`Tally`] of
//! its own. A cached reject is then one clock reading, one comparison and a
//! plain load and store: no atomic read-modify-write, which on the machines
//! this crate targets costs a third of a clock reading.
//!
//! # The tally's invariant
//!
//! A tally has at most one writer: the thread that claimed it. Claims happen
//! only under the breaker's lock (so two threads never claim one tally); a
//! thread gives its tally back with a `Release` store of `claimed = false`
//! after its last increment (when it is rejected by another breaker, or when
//! it exits), and the next claimer reads `claimed` with `Acquire`, so it
//! starts from the last count. Readers (`Breaker::metrics`) sum every tally
//! with relaxed loads: each count only grows, and a rejection counted by a
//! thread is seen by that thread's own later reads.
//!
//! A breaker holds at most one tally per thread that is caching one of its
//! open periods now (a thread caches one period at a time), plus the freed
//! ones, which the next claimer reuses: the list is bounded by the number of
//! threads ever rejected at the same time, not by the number of rejections.

use std::cell::RefCell;
use std::time::Instant;

use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};

/// A count of rejections with one writer at a time (see the module docs).
pub(super) struct Tally {
    count: AtomicU64,
    claimed: AtomicBool,
}

impl Tally {
    /// Counts one rejection. Only the claiming thread calls this.
    #[inline]
    fn bump(&self) {
        // A load and a store, not `fetch_add`: this thread is the only
        // writer, so nothing can land in between.
        let n = self.count.load(Ordering::Relaxed);
        self.count.store(n.wrapping_add(1), Ordering::Relaxed);
    }
}

/// The tallies a breaker has handed out, held or free. Touched only under
/// the breaker's lock.
#[derive(Default)]
pub(super) struct Tallies(Vec<Arc<Tally>>);

impl Tallies {
    /// A tally no thread holds, now held by the caller.
    fn claim(&mut self) -> Arc<Tally> {
        for tally in &self.0 {
            if !tally.claimed.load(Ordering::Acquire) {
                tally.claimed.store(true, Ordering::Relaxed);
                return Arc::clone(tally);
            }
        }
        let tally = Arc::new(Tally { count: AtomicU64::new(0), claimed: AtomicBool::new(true) });
        self.0.push(Arc::clone(&tally));
        tally
    }

    /// Every rejection counted in a tally of this breaker.
    pub(super) fn sum(&self) -> u64 {
        self.0.iter().fold(0u64, |sum, tally| sum.wrapping_add(tally.count.load(Ordering::Relaxed)))
    }

    /// How many tallies were handed out (held or free).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

/// One thread's cached open period, and its tally for that breaker.
struct OpenCache {
    uid: u64,
    key: u64,
    until: Option<Instant>,
    tally: Option<Arc<Tally>>,
}

impl OpenCache {
    const EMPTY: OpenCache = OpenCache { uid: 0, key: 0, until: None, tally: None };

    /// Gives the tally back (after this thread's last increment).
    fn release(&mut self) {
        if let Some(tally) = self.tally.take() {
            tally.claimed.store(false, Ordering::Release);
        }
    }
}

impl Drop for OpenCache {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(not(loom))]
thread_local! {
    static OPEN: RefCell<OpenCache> = const { RefCell::new(OpenCache::EMPTY) };
}

#[cfg(loom)]
loom::thread_local! {
    static OPEN: RefCell<OpenCache> = RefCell::new(OpenCache::EMPTY);
}

/// Rejects from this thread's cache: if breaker `uid` is open under `key`
/// until after `now` as far as this thread has seen, counts the rejection in
/// the thread's tally and returns `true`; otherwise `false` (take the lock).
#[inline]
pub(super) fn reject_cached(uid: u64, key: u64, now: Instant) -> bool {
    OPEN.try_with(|cache| {
        let cache = cache.borrow();
        match (&cache.tally, cache.until) {
            (Some(tally), Some(until)) if cache.uid == uid && cache.key == key && now < until => {
                tally.bump();
                true
            }
            _ => false,
        }
    })
    .unwrap_or(false)
}

/// Under the breaker's lock, on a rejection by an OPEN breaker: caches its
/// period's end for this thread, makes sure the thread holds one of the
/// breaker's `tallies`, and counts the rejection there. Returns `false` when
/// the thread's storage is gone (the thread is exiting), and then counts
/// nothing: the caller counts the rejection in the shared counter.
pub(super) fn remember_and_reject(uid: u64, key: u64, until: Option<Instant>, tallies: &mut Tallies) -> bool {
    OPEN.try_with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.uid != uid || cache.tally.is_none() {
            cache.release();
            cache.tally = Some(tallies.claim());
        }
        cache.uid = uid;
        cache.key = key;
        cache.until = until;
        if let Some(tally) = &cache.tally {
            tally.bump();
        }
    })
    .is_ok()
}

/// Gives back this thread's tally, whichever breaker it belongs to, so that
/// another thread may reuse it. Tests use it to act out a thread's exit.
#[cfg(test)]
pub(super) fn forget() {
    let _ = OPEN.try_with(|cache| {
        let mut cache = cache.borrow_mut();
        cache.release();
        *cache = OpenCache::EMPTY;
    });
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::{Arc, Barrier};
    use std::thread;
    use std::time::Duration;

    use crate::breaker::{Breaker, BreakerConfig, State};
    use crate::classify::Verdict;
    use crate::clock::ManualClock;

    fn opened() -> Breaker {
        let clock = ManualClock::new();
        let config = BreakerConfig::count_based(2).minimum_calls(2).open_for(Duration::from_secs(60));
        let b = Breaker::with_clock("tally", config, Arc::new(clock)).unwrap();
        for _ in 0..2 {
            b.try_acquire().unwrap().record(Verdict::Failure, Duration::ZERO);
        }
        assert_eq!(b.state(), State::Open);
        b
    }

    fn tallies(b: &Breaker) -> usize {
        b.inner.core.lock().tallies.len()
    }

    #[test]
    fn threads_that_come_and_go_reuse_one_tally() {
        let b = opened();
        for _ in 0..20 {
            let b2 = b.clone();
            thread::spawn(move || (0..5).for_each(|_| assert!(b2.try_acquire().is_err()))).join().unwrap();
        }
        assert_eq!(tallies(&b), 1, "each exiting thread gave its tally back");
        assert_eq!(b.metrics().not_permitted, 100);
    }

    #[test]
    fn threads_rejected_at_once_hold_one_tally_each_and_no_more() {
        const THREADS: usize = 3;
        let b = opened();
        for _ in 0..4 {
            let (held, done) = (Arc::new(Barrier::new(THREADS + 1)), Arc::new(Barrier::new(THREADS + 1)));
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (b, held, done) = (b.clone(), Arc::clone(&held), Arc::clone(&done));
                    thread::spawn(move || {
                        (0..5).for_each(|_| assert!(b.try_acquire().is_err()));
                        held.wait();
                        done.wait();
                    })
                })
                .collect();
            held.wait();
            assert_eq!(tallies(&b), THREADS);
            done.wait();
            handles.into_iter().for_each(|h| h.join().unwrap());
        }
        assert_eq!(tallies(&b), THREADS, "freed tallies are reused");
        assert_eq!(b.metrics().not_permitted, 4 * THREADS as u64 * 5);
    }

    #[test]
    fn a_thread_moving_between_breakers_keeps_one_tally_in_each() {
        let (a, b) = (opened(), opened());
        for _ in 0..50 {
            assert!(a.try_acquire().is_err());
            assert!(b.try_acquire().is_err());
        }
        assert_eq!((tallies(&a), tallies(&b)), (1, 1));
        super::forget();
        assert!(a.try_acquire().is_err());
        assert_eq!((tallies(&a), a.metrics().not_permitted, b.metrics().not_permitted), (1, 51, 50));
    }
}
