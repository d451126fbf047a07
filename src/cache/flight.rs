//! Single flight: one shared call per key, and the callers waiting for it.
//!
//! A [`Flight`] is the answer slot of one shared call. It is created by the
//! first caller of a key that found no fresh value (the leader), put in the
//! cache's table of flights under that key, and handed to the call as a
//! [`Landing`]. Every later caller of the key finds it there and waits on it.
//! Nobody's stack owns the call: the leader submits it detached, and the
//! landing travels with it to the worker. Each caller waits on the slot until
//! the answer or its *own* deadline, whichever comes first; a caller that
//! gives up leaves the call running for the others.
//!
//! The landing, in order (`Cache`'s `land`, on the worker):
//!
//! 1. a good answer is put in the cache;
//! 2. the flight is taken out of the table;
//! 3. the answer is put in the slot and every waiter woken.
//!
//! So a caller that looks for a flight and finds none (under the table's
//! lock) finds the answer in the cache instead, if there is a good one: it
//! never starts a second call for an answer that has already come. And no
//! caller can join a flight once its answer is out: a waiter woken by a
//! failure that asks again at once starts a new call rather than reading the
//! old failure (3 before 2 would keep a failure for that moment). A landing
//! dropped without an answer (the pool refused the call, so it never ran)
//! only takes the flight out of the table; the leader then answers the slot
//! with the refusal.

use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::dependency::Dependency;
use crate::error::Error;

/// Polls `ready` until it gives a value, for at most the pool's `max_wait`
/// (at least `at_least`) and never past `deadline`, with pauses doubling
/// from 20 us to 1 ms; `None` when the time is up first.
pub(super) fn wait_for<T>(
    dep: &Dependency,
    deadline: Instant,
    at_least: Duration,
    ready: impl Fn() -> Option<T>,
) -> Option<T> {
    let max_wait = dep.pool().map_or(Duration::ZERO, crate::pool::Pool::max_wait).max(at_least);
    let now = Instant::now();
    let give_up = now.checked_add(max_wait).map_or(deadline, |at| at.min(deadline));
    let mut pause = Duration::from_micros(20);
    loop {
        if let Some(value) = ready() {
            return Some(value);
        }
        let left = give_up.checked_duration_since(Instant::now()).filter(|left| !left.is_zero())?;
        std::thread::park_timeout(pause.min(left));
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// The answer of one shared call, once it has come.
pub(super) struct Flight<V, E> {
    answer: Mutex<Option<Result<V, Error<E>>>>,
    landed: Condvar,
}

impl<V: Clone, E: Clone> Flight<V, E> {
    pub(super) fn new() -> Self {
        Flight { answer: Mutex::new(None), landed: Condvar::new() }
    }

    /// Puts `answer` in the slot, unless one is there already, and wakes
    /// every waiter.
    pub(super) fn answer(&self, answer: Result<V, Error<E>>) {
        let mut slot = self.answer.lock();
        if slot.is_none() {
            *slot = Some(answer);
            self.landed.notify_all();
        }
    }

    /// A copy of the answer, waiting for it until `deadline` at most; `None`
    /// when the deadline came first.
    pub(super) fn wait(&self, deadline: Instant) -> Option<Result<V, Error<E>>> {
        let mut slot = self.answer.lock();
        loop {
            if let Some(answer) = slot.as_ref() {
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

/// Takes the flight of `key` out of `flights` if it is still `flight` (a
/// newer flight of the key is left alone).
pub(super) fn take_off<K: Hash + Eq>(
    flights: &Flights<K>,
    key: &K,
    flight: &Arc<dyn std::any::Any + Send + Sync>,
) {
    let mut table = flights.lock();
    if table.get(key).is_some_and(|f| Arc::ptr_eq(f, flight)) {
        table.remove(key);
    }
}

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
    /// Takes the flight out of the table (step 2), then answers its waiters
    /// (step 3).
    pub(super) fn land(self, answer: Result<V, Error<E>>)
    where
        V: Clone,
        E: Clone,
    {
        take_off(&self.flights, &self.key, &self.erased);
        self.flight.answer(answer);
        // `Drop` looks once more and finds the flight gone (or a newer one of
        // the key, which it leaves).
    }
}

impl<K: Hash + Eq, V, E> Drop for Landing<K, V, E> {
    fn drop(&mut self) {
        take_off(&self.flights, &self.key, &self.erased);
    }
}
