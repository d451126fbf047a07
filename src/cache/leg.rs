//! A lookup as a leg of a fan-out: [`Cache::fan`] and
//! [`Cache::fan_with`]. The lookup starts as any does (a hit answers at once;
//! a miss takes a seat and starts or joins the key's flight); the fan-out's
//! thread then drives it with its other legs: it looks at the flight's slot
//! each round, and registers on it before it parks, so that the landing
//! unparks it (`Flight::register`, under the slot's lock: an answer between
//! a look and the park is never missed).

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Instant;

use super::flight::Flight;
use super::{Cache, Cached, Inner, Started};
use crate::classify::{ByError, Classifier, Classify};
use crate::dependency::{Dependency, FanAnswer, FanDrive, FanLeg, FanOut};
use crate::error::Error;
use crate::pool::CallContext;
use crate::room::Seat;

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A lookup of `key` as a leg of `fan` ([`FanOut`]), with `E`'s
    /// [`Classify`] judging the outcome: see [`fan_with`](Self::fan_with).
    pub fn fan<Q, E, F>(&self, fan: &FanOut, dep: &Dependency, key: &Q, job: F) -> FanLeg<Cached<V>, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        E: Classify + Clone + Send + 'static,
        F: FnOnce(&CallContext) -> Result<V, E> + Send + 'static,
    {
        self.fan_with(fan, dep, key, ByError, job)
    }

    /// A lookup of `key` as a leg of `fan` ([`FanOut`]), started now and
    /// answered by [`FanLeg::wait`] as
    /// [`get_or_call_with`](Self::get_or_call_with) answers, under the
    /// fan-out's deadline. Starting it may wait for a seat or for room in
    /// the pool, as a lookup does.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use watertight::{CallContext, Dependency, FanOut, cache::Cache};
    ///
    /// let account = Dependency::builder("account").workers(2).build()?;
    /// let pricing = Dependency::builder("pricing").workers(2).build()?;
    /// let access: Cache<String, bool> = Cache::builder("access").build()?;
    ///
    /// let fan = FanOut::timeout(Duration::from_millis(800));
    /// let allowed = access.fan(&fan, &account, "alice", |_: &CallContext| Ok::<_, Arc<std::io::Error>>(true));
    /// let price = pricing.with().retry().fan(&fan, |_: &CallContext| Ok::<_, std::io::Error>(1999));
    /// fan.wait_all();
    /// assert_eq!((allowed.wait()?.value, price.wait()?), (true, 1999));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fan_with<Q, C, E, F>(
        &self,
        fan: &FanOut,
        dep: &Dependency,
        key: &Q,
        classify: C,
        job: F,
    ) -> FanLeg<Cached<V>, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Classifier<V, E> + Send + 'static,
        E: Clone + Send + 'static,
        F: FnOnce(&CallContext) -> Result<V, E> + Send + 'static,
    {
        let deadline = fan.deadline();
        let lookup = match self.start(dep, key, deadline, classify, job) {
            Started::Done(answer) => Lookup::Done(Some(answer)),
            Started::Flying { flight, began, seat } => Lookup::Flying {
                cache: Arc::clone(&self.inner),
                key: key.to_owned(),
                deadline,
                flight,
                began,
                _seat: seat,
            },
        };
        fan.join(lookup)
    }
}

/// A lookup as a leg of a fan-out ([`Cache::fan_with`]).
enum Lookup<K, V, E> {
    Flying {
        cache: Arc<Inner<K, V>>,
        key: K,
        deadline: Instant,
        flight: Arc<Flight<V, E>>,
        began: Instant,
        /// Held until the answer, as a blocking lookup holds it.
        _seat: Seat,
    },
    /// The answer, until the handle takes it.
    Done(Option<Result<Cached<V>, Error<E>>>),
}

impl<K: Hash + Eq, V: Clone, E: Clone> FanDrive for Lookup<K, V, E> {
    fn drive(&mut self) {
        if let Lookup::Flying { cache, key, deadline, flight, began, .. } = self {
            let judged = flight.peek();
            if judged.is_some() || Instant::now() >= *deadline {
                *self = Lookup::Done(Some(cache.answer(key, judged, *began)));
            }
        }
    }

    fn is_done(&self) -> bool {
        !matches!(self, Lookup::Flying { .. })
    }

    fn due(&self) -> Option<Instant> {
        match self {
            Lookup::Flying { deadline, .. } => Some(*deadline),
            _ => None,
        }
    }

    fn register(&self, thread: &crate::sync::Thread) -> bool {
        match self {
            Lookup::Flying { flight, .. } => flight.register(thread),
            _ => true,
        }
    }
}

impl<K: Hash + Eq, V: Clone, E: Clone> FanAnswer<Cached<V>, E> for Lookup<K, V, E> {
    fn take(&mut self) -> Option<Result<Cached<V>, Error<E>>> {
        match self {
            Lookup::Done(answer) => answer.take(),
            Lookup::Flying { .. } => None,
        }
    }
}
