//! Single flight: one shared call per key, and the callers waiting for it.
//!
//! A [`Flight`] is the answer slot of one shared call. It is created by the
//! first caller of a key that found no fresh value (the leader), or by a hit
//! that starts a refresh ahead of expiry, put in the cache's table of
//! flights under that key, and handed to the call as a [`Landing`]. Every
//! later caller of the key finds it there and waits on it. Nobody's stack
//! owns the call: the leader submits it detached, and the landing travels
//! with it to the worker. Each caller waits on the slot until the answer or
//! its *own* deadline, whichever comes first; a caller that gives up leaves
//! the call running for the others.
//!
//! The landing, in order (`Cache`'s `land`, on the worker):
//!
//! 1. under the table's lock: if the flight is still the key's, a good
//!    answer is put in the cache, and the flight is taken out of the table;
//! 2. the answer is put in the slot and every waiter woken.
//!
//! So a caller that looks for a flight and finds none (under the table's
//! lock) finds the answer in the cache instead, if there is a good one: it
//! never starts a second call for an answer that has already come. And no
//! caller can join a flight once its answer is out: a waiter woken by a
//! failure that asks again at once starts a new call rather than reading the
//! old failure (2 before 1 would keep a failure for that moment).
//!
//! **Removal wins.** `Cache::remove` takes the key's flight out of the table
//! and its value out of the cache, both under the table's lock. A flight
//! that lands after that is no longer the key's: its answer goes to those who
//! wait on it, and is never kept (the flight's identity in the table is its
//! generation, as Go's singleflight `Forget` makes it). A lookup after the
//! removal starts a call of its own. A landing dropped without an answer (the
//! pool refused the call, so it never ran) only takes the flight out of the
//! table; the leader then answers the slot with the refusal.

use crate::sync::Thread;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::classify::Verdict;
use crate::dependency::Judged;
use crate::error::Error;

/// Whether the cache keeps a shared call's answer for its TTL: an `Ok` the
/// call's settlement judged a success.
pub(super) fn is_good<V, E>((answer, verdict): &Judged<V, E>) -> bool {
    answer.is_ok() && matches!(verdict, Some(Verdict::Success) | None)
}

/// Whether the cache answers a shared call's answer with the last good value
/// where that is allowed: one judged a failure, or an error of ours (a
/// timeout, a refusal, a panic). Neither good nor failed (an error the
/// classifier ignores, a 403 or a 404; an `Ok` it does not call a success),
/// an answer is never kept, and returned as it came.
pub(super) fn is_failure<V, E>((answer, verdict): &Judged<V, E>) -> bool {
    *verdict == Some(Verdict::Failure)
        || matches!(answer, Err(e) if verdict.is_none() || !matches!(e, Error::Failed(_)))
}

/// The answer of one shared call, once it has come.
pub(super) struct Flight<V, E> {
    slot: Mutex<Slot<V, E>>,
    landed: Condvar,
}

/// A flight's answer, and the fan-outs' threads to unpark when it comes.
struct Slot<V, E> {
    answer: Option<Judged<V, E>>,
    /// Threads driving a fan-out with a leg waiting on this flight
    /// (`Cache::fan`), each once.
    watchers: Vec<Thread>,
}

impl<V: Clone, E: Clone> Flight<V, E> {
    pub(super) fn new() -> Self {
        Flight { slot: Mutex::new(Slot { answer: None, watchers: Vec::new() }), landed: Condvar::new() }
    }

    /// Puts `answer` in the slot, unless one is there already, and wakes
    /// every waiter: those blocked in [`wait`](Self::wait), and the watching
    /// fan-outs.
    pub(super) fn answer(&self, answer: Judged<V, E>) {
        let mut slot = self.slot.lock();
        if slot.answer.is_none() {
            slot.answer = Some(answer);
            self.landed.notify_all();
            for thread in slot.watchers.drain(..) {
                thread.unpark();
            }
        }
    }

    /// A copy of the answer if it has come; never waits.
    pub(super) fn peek(&self) -> Option<Judged<V, E>> {
        self.slot.lock().answer.clone()
    }

    /// Asks for `thread` to be unparked when the answer comes; `false` when
    /// it has come already (look again rather than park).
    pub(super) fn register(&self, thread: &Thread) -> bool {
        let mut slot = self.slot.lock();
        if slot.answer.is_some() {
            return false;
        }
        if !slot.watchers.iter().any(|t| t.id() == thread.id()) {
            slot.watchers.push(thread.clone());
        }
        true
    }

    /// A copy of the answer, waiting for it until `deadline` at most; `None`
    /// when the deadline came first.
    pub(super) fn wait(&self, deadline: Instant) -> Option<Judged<V, E>> {
        let mut slot = self.slot.lock();
        loop {
            if let Some(answer) = slot.answer.as_ref() {
                return Some(answer.clone());
            }
            // `wait_until` returns at the deadline or on a notification (or
            // spuriously): the loop looks again either way.
            if Instant::now() >= deadline {
                return None;
            }
            self.landed.wait_until(&mut slot, deadline);
        }
    }
}

/// The flights in the air, by key. Locked only to look one up, add or take
/// one out, never across a call or a wait.
pub(super) type Flights<K> = Mutex<std::collections::HashMap<K, Arc<dyn std::any::Any + Send + Sync>>>;

/// The obligation to land one flight: moved into the shared call's callback,
/// which lands the answer there, and whose `Drop` takes the flight out of the
/// table however the call ends, so that a key is never left waiting on a
/// flight that will not land.
pub(super) struct Landing<K: Hash + Eq, V, E> {
    pub(super) key: K,
    pub(super) flight: Arc<Flight<V, E>>,
    /// `flight` itself, as the table holds it.
    pub(super) erased: Arc<dyn std::any::Any + Send + Sync>,
    pub(super) flights: Arc<Flights<K>>,
}

impl<K: Hash + Eq, V, E> Landing<K, V, E> {
    /// `keep` (put a good answer in the cache), then the flight out of the
    /// table (step 1); then the answer to its waiters (step 2).
    pub(super) fn land(self, answer: Judged<V, E>, keep: impl FnOnce(&K))
    where
        V: Clone,
        E: Clone,
    {
        self.take_off(keep);
        self.flight.answer(answer);
        // `Drop` looks once more and finds the flight gone (or a newer one of
        // the key, which it leaves).
    }

    /// Under the table's lock, if the flight is still the key's (a newer
    /// flight of the key is left alone): `keep`, and the flight out of the
    /// table.
    fn take_off(&self, keep: impl FnOnce(&K)) {
        let mut table = self.flights.lock();
        if table.get(&self.key).is_some_and(|f| Arc::ptr_eq(f, &self.erased)) {
            keep(&self.key);
            table.remove(&self.key);
        }
    }
}

impl<K: Hash + Eq, V, E> Drop for Landing<K, V, E> {
    fn drop(&mut self) {
        self.take_off(|_| {});
    }
}
