//! The OPEN reject path without a lock and without a shared write.
//!
//! Each thread keeps, in [`CACHED`], the end of the open period it was last
//! rejected by (keyed by the breaker's unique id and its packed `current`
//! word, so a matching entry is exact, never stale: see the module docs of
//! `breaker`), and counts its rejections by that breaker in a [`Tally`] of
//! its own, one slot of the breaker's fixed table of [`Tallies`]. A cached
//! reject is then one clock reading, one comparison and a plain load and
//! store: no atomic read-modify-write, which on the machines this crate
//! targets costs a third of a clock reading.
//!
//! The hot entry, [`CACHED`], is plain data in a `const` thread-local
//! without a destructor, so reading it is a load, with no check of whether
//! the thread's storage is alive yet or still. What needs a destructor (the
//! claim on a slot, given back when the thread exits) lives apart, in
//! [`HELD`], which only the locked path touches.
//!
//! # The tally's invariant
//!
//! A tally has at most one writer: the thread that claimed it. Claims happen
//! only under the breaker's lock (so two threads never claim one slot); a
//! thread gives its slot back with a `Release` store of `claimed = false`
//! after its last increment (when it is rejected by another breaker, or when
//! it exits), and the next claimer reads `claimed` with `Acquire`, so it
//! starts from the last count. Readers (`Breaker::metrics`) sum every tally
//! with relaxed loads: each count only grows, and a rejection counted by a
//! thread is seen by that thread's own later reads.
//!
//! `CACHED` names a slot only while `HELD` holds it: both are set together,
//! under the breaker's lock, and `HELD`'s destructor empties `CACHED` before
//! it gives the slot back. A thread whose `HELD` is gone (it is exiting)
//! caches nothing and counts in the breaker's shared counter.
//!
//! A breaker has [`SLOTS`] tallies, one per thread that is caching one of
//! its open periods now (a thread caches one period at a time); a slot given
//! back is reused by the next claimer. Threads beyond that, rejected at the
//! same time, still cache the period and count in the shared counter: exact,
//! only slower.

use std::cell::{Cell, RefCell};
use std::time::Instant;

use crate::sync::{Arc, AtomicBool, AtomicU64, Ordering};

/// How many threads may hold a tally of one breaker at once.
#[cfg(not(loom))]
pub(super) const SLOTS: usize = 32;
/// Fewer under loom: the model of three threads rejected at once then also
/// runs out of slots.
#[cfg(loom)]
pub(super) const SLOTS: usize = 2;

/// A count of rejections with one writer at a time (see the module docs),
/// alone on its cache line so that threads counting side by side do not
/// take the line from each other.
#[repr(align(64))]
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

/// A breaker's tallies, held or free, and the counter of the rejections no
/// tally took. Shared with the threads that hold one of its slots, so a
/// thread's claim never outlives the table it points into.
pub(super) struct Tallies {
    slots: [Tally; SLOTS],
    /// Rejections not counted in a tally: those decided without a cache
    /// (HALF_OPEN, FORCED_OPEN), those of threads beyond [`SLOTS`] and of
    /// exiting threads.
    pub(super) shared: AtomicU64,
}

impl Tallies {
    pub(super) fn new() -> Tallies {
        Tallies {
            slots: std::array::from_fn(|_| Tally {
                count: AtomicU64::new(0),
                claimed: AtomicBool::new(false),
            }),
            shared: AtomicU64::new(0),
        }
    }

    /// Under the breaker's lock: a slot no thread holds, now held by the
    /// caller, or [`SLOTS`] when every slot is held.
    fn claim(&self) -> usize {
        for (i, tally) in self.slots.iter().enumerate() {
            if !tally.claimed.load(Ordering::Acquire) {
                tally.claimed.store(true, Ordering::Relaxed);
                return i;
            }
        }
        SLOTS
    }

    /// Counts one rejection in `slot`, which this thread holds, or in the
    /// shared counter when `slot` is [`SLOTS`].
    #[inline]
    fn count(&self, slot: usize) {
        match self.slots.get(slot) {
            Some(tally) => tally.bump(),
            None => {
                self.shared.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Every rejection counted, in the tallies and the shared counter.
    pub(super) fn sum(&self) -> u64 {
        self.slots.iter().fold(self.shared.load(Ordering::Relaxed), |sum, t| {
            sum.wrapping_add(t.count.load(Ordering::Relaxed))
        })
    }

    /// How many slots threads hold now.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.slots.iter().filter(|t| t.claimed.load(Ordering::Relaxed)).count()
    }
}

/// One thread's cached open period: breaker `uid` was OPEN under `key`
/// until `until` (`None`: for good), and the thread counts its rejections
/// by it in `slot` of the breaker's tallies. Plain data: see [`CACHED`].
#[derive(Clone, Copy)]
struct Cached {
    uid: u64,
    key: u64,
    until: Option<Instant>,
    slot: usize,
}

impl Cached {
    /// Matches no breaker: uids start at 1.
    const EMPTY: Cached = Cached { uid: 0, key: 0, until: None, slot: SLOTS };
}

/// The slot this thread holds, and whose table it is in.
struct Held {
    uid: u64,
    slot: usize,
    tallies: Option<Arc<Tallies>>,
}

impl Held {
    const EMPTY: Held = Held { uid: 0, slot: SLOTS, tallies: None };

    /// Gives the slot back (after this thread's last increment).
    fn release(&mut self) {
        if let Some(tallies) = self.tallies.take()
            && let Some(tally) = tallies.slots.get(self.slot)
        {
            tally.claimed.store(false, Ordering::Release);
        }
        // Field by field: assigning a whole `Held` would drop this one.
        self.uid = 0;
        self.slot = SLOTS;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // First forget the period, so that no later reject on this thread
        // (from another thread-local's destructor) counts in a slot that is
        // no longer its own.
        let _ = CACHED.try_with(|cached| cached.set(Cached::EMPTY));
        self.release();
    }
}

#[cfg(not(loom))]
thread_local! {
    static CACHED: Cell<Cached> = const { Cell::new(Cached::EMPTY) };
    static HELD: RefCell<Held> = const { RefCell::new(Held::EMPTY) };
}

#[cfg(loom)]
loom::thread_local! {
    static CACHED: Cell<Cached> = Cell::new(Cached::EMPTY);
    static HELD: RefCell<Held> = RefCell::new(Held::EMPTY);
}

/// Rejects from this thread's cache: if breaker `uid` is open under `key`
/// until after `now` as far as this thread has seen, counts the rejection in
/// the thread's tally and returns `true`; otherwise `false` (take the lock).
#[inline]
pub(super) fn reject_cached(tallies: &Tallies, uid: u64, key: u64, now: Instant) -> bool {
    // A `const` thread-local without a destructor is always there: no
    // check of its state (loom's may be gone while the thread exits).
    #[cfg(not(loom))]
    let cached = CACHED.get();
    #[cfg(loom)]
    let Ok(cached) = CACHED.try_with(Cell::get) else {
        return false;
    };
    if cached.uid != uid || cached.key != key || cached.until.is_some_and(|until| now >= until) {
        return false;
    }
    tallies.count(cached.slot);
    true
}

/// Under the breaker's lock, on a rejection by an OPEN breaker: caches its
/// period's end for this thread, makes sure the thread holds one of the
/// breaker's `tallies` if one is free, and counts the rejection there (or in
/// the shared counter). A thread whose storage is gone (it is exiting)
/// caches nothing and counts in the shared counter.
pub(super) fn remember_and_reject(tallies: &Arc<Tallies>, uid: u64, key: u64, until: Option<Instant>) {
    let held = HELD.try_with(|held| {
        let mut held = held.borrow_mut();
        if held.uid != uid {
            held.release();
            held.uid = uid;
            held.tallies = Some(Arc::clone(tallies));
        }
        if held.slot == SLOTS {
            held.slot = tallies.claim();
        }
        held.slot
    });
    match held {
        Ok(slot) => {
            let _ = CACHED.try_with(|cached| cached.set(Cached { uid, key, until, slot }));
            tallies.count(slot);
        }
        Err(_) => tallies.count(SLOTS),
    }
}

/// Gives back this thread's slot, whichever breaker it belongs to, so that
/// another thread may reuse it. Tests use it to act out a thread's exit.
#[cfg(test)]
pub(super) fn forget() {
    let _ = CACHED.try_with(|cached| cached.set(Cached::EMPTY));
    let _ = HELD.try_with(|held| held.borrow_mut().release());
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::{Arc, Barrier};
    use std::thread;
    use std::time::Duration;

    use super::SLOTS;
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

    fn held(b: &Breaker) -> usize {
        b.inner.tallies.held()
    }

    /// `threads` threads rejected five times each, all at once; checks what
    /// they hold while they are all alive, and that they give it all back.
    fn rejected_at_once(b: &Breaker, threads: usize) {
        let (rejected, done) = (Arc::new(Barrier::new(threads + 1)), Arc::new(Barrier::new(threads + 1)));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (b, rejected, done) = (b.clone(), Arc::clone(&rejected), Arc::clone(&done));
                thread::spawn(move || {
                    (0..5).for_each(|_| assert!(b.try_acquire().is_err()));
                    rejected.wait();
                    done.wait();
                })
            })
            .collect();
        rejected.wait();
        assert_eq!(held(b), threads.min(SLOTS));
        done.wait();
        handles.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(held(b), 0, "every exiting thread gave its slot back");
    }

    #[test]
    fn threads_that_come_and_go_give_their_slot_back() {
        let b = opened();
        for _ in 0..20 {
            let b2 = b.clone();
            thread::spawn(move || (0..5).for_each(|_| assert!(b2.try_acquire().is_err()))).join().unwrap();
            assert_eq!(held(&b), 0);
        }
        assert_eq!(b.metrics().not_permitted, 100);
        assert_eq!(b.inner.tallies.shared.load(std::sync::atomic::Ordering::Relaxed), 0, "all in tallies");
    }

    #[test]
    fn threads_rejected_at_once_hold_one_slot_each() {
        let b = opened();
        for _ in 0..4 {
            rejected_at_once(&b, 3);
        }
        assert_eq!(b.metrics().not_permitted, 4 * 3 * 5);
    }

    #[test]
    fn threads_beyond_the_slots_count_in_the_shared_counter_exactly() {
        let b = opened();
        rejected_at_once(&b, SLOTS + 3);
        assert_eq!(b.metrics().not_permitted, (SLOTS as u64 + 3) * 5);
        let shared = b.inner.tallies.shared.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(shared, 3 * 5, "the three without a slot, and nobody else");
    }

    #[test]
    fn a_thread_holds_a_slot_of_the_breaker_it_was_last_rejected_by() {
        let (a, b) = (opened(), opened());
        for _ in 0..50 {
            assert!(a.try_acquire().is_err());
            assert!(b.try_acquire().is_err());
        }
        assert_eq!((held(&a), held(&b)), (0, 1));
        super::forget();
        assert_eq!((held(&a), held(&b)), (0, 0));
        assert!(a.try_acquire().is_err());
        assert_eq!((held(&a), a.metrics().not_permitted, b.metrics().not_permitted), (1, 51, 50));
    }
}
