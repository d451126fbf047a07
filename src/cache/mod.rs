//! Answers worth keeping (feature `cache`): a per-key [`Cache`] in front of a
//! [`Dependency`], whose time to live is chosen by each answer, with one
//! shared call per key, and, where it is safe, the last good value.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//! use watertight::{CallContext, Dependency, cache::Cache};
//!
//! #[derive(Clone, Copy, Debug, PartialEq)]
//! struct Decision { allowed: bool }
//!
//! let account = Dependency::builder("account-access").workers(4).build()?;
//! // The permissions report's rule in one line: allow 60 s, deny 10 s.
//! let access: Cache<String, Decision> = Cache::builder("access")
//!     .capacity(100_000)
//!     .ttl(|d: &Decision| Duration::from_secs(if d.allowed { 60 } else { 10 }))
//!     .build()?;
//!
//! let deadline = Instant::now() + Duration::from_secs(2);
//! // The error is shared by every caller of one call, so it is `Clone`:
//! // an `Arc` around one that is not (it is judged as the error itself).
//! let ask = |_: &CallContext| Ok::<_, Arc<std::io::Error>>(Decision { allowed: true });
//! let first = access.get_or_call(&account, "alice", deadline, ask)?;
//! assert_eq!((first.value, first.stale), (Decision { allowed: true }, None));
//! // Within 60 s: from the cache, without touching the pool or the breaker.
//! let again = access.get_or_call(&account, "alice", deadline, |_: &CallContext| {
//!     Err::<Decision, _>(Arc::new(std::io::Error::other("not called")))
//! })?;
//! assert!(again.value.allowed);
//! assert_eq!((access.snapshot().hits, access.snapshot().misses), (1, 1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What is kept
//!
//! A miss's outcome is the call's, judged once by the call's classifier
//! ([`Cache::get_or_call_with`], or the error's `Classify`) for the breaker
//! and the cache alike: only an `Ok` judged a success is kept, for the time
//! its [`ttl`](CacheBuilder::ttl) gives it. Failures (an `Ok(500)` judged one
//! included), rejections, timeouts and ignored answers (a 403) are never kept.
//!
//! - **One call per key.** Concurrent misses of a key share one call, under
//!   the dependency's timeout, not a caller's; each caller waits until its own
//!   deadline. Keep that timeout inside the request budget, so a hung
//!   provider's shared calls fail, and open the breaker, while callers wait.
//! - **The last good value** is opt-in: [`serve_stale`](CacheBuilder::serve_stale)
//!   answers a failed, refused or timed-out miss with the key's last good
//!   value if it expired at most that long ago ([`Cached::stale`]), never an
//!   ignored answer (a real 403). Off by default: where failing open means
//!   "permissions wide open", fail closed, and never stretch a TTL.
//! - **Refresh ahead** is opt-in: [`refresh_after`](CacheBuilder::refresh_after)
//!   answers a hit older than that at once and starts one shared call in the
//!   background if the pool has room; a failed refresh keeps the value.
//! - **A fan-out leg**: [`Cache::fan`]; a hit's leg has its answer at once.
//!   Counts: [`Cache::snapshot`], and `/metrics` for a cache given to
//!   [`Registry::register_cache`](crate::Registry::register_cache).
//!
//! # How it does it
//!
//! A hit touches nothing on the dependency. A miss is one detached call
//! ([`CallBuilder::spawn_with`](crate::CallBuilder::spawn_with)), judged on
//! the worker; a refresh ahead is one that never waits.
//!
//! - **Waiting is bounded.** Each waiting caller holds a seat of a [`Room`]
//!   (the crate's one wait for room) of
//!   [`max_waiting`](CacheBuilder::max_waiting) seats; a miss beyond them
//!   waits by the wait it can expect, within the pool's `max_wait`, then is
//!   refused as a full queue would be. A worker that has just landed an
//!   answer is busy until it returns to its pool: with a `max_wait` of zero,
//!   a miss right after an answer may find no room.
//! - **Removal wins.** [`remove`](Cache::remove) during a key's shared call:
//!   the answer reaches its callers and is not kept. A landing keeps its answer only while its flight is
//!   still the key's, checked under the lock that [`remove`](Cache::remove)
//!   takes (flight.rs).
//!
//! # Why `quick_cache`
//!
//! The entries are bounded by count and evicted by
//! [`quick_cache`](https://docs.rs/quick_cache) (S3-FIFO-like, with ghost
//! entries, so a scan of one-time keys does not flush the hot ones): a small,
//! maintained crate with no `unsafe` in its public surface, no background
//! thread, sharded read-write locks that make a hit a hash and a read lock
//! (about as cheap as a lookup can be across threads), a lifecycle hook that
//! counts evictions, and a rust-version (1.85) below this crate's. Expiry is
//! this module's: each entry carries its own, read on the injected
//! [`Clock`], and an expired entry stays until it is evicted or
//! replaced, so that it can be served stale where that is allowed.
//!
//! Keys are the caller's: put in the key everything the answer depends on
//! (a user *and* a service, say), and nothing from a request that an
//! attacker could vary to fill the cache with one-time keys faster than it
//! evicts them... which it does at its capacity anyway.

mod builder;
mod flight;
mod leg;
mod store;
#[cfg(test)]
mod tests;

use std::any::Any;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::builder::CacheBuilder;
use self::flight::{Flight, Flights, Landing, is_failure, is_good};
use self::store::{CacheCounters, Entry, Map};
use crate::classify::{ByError, Classifier, Classify};
use crate::clock::Clock;
use crate::dependency::{Counters, Dependency, Judged};
use crate::error::{Error, Rejection};
use crate::pool::CallContext;
use crate::room::{Room, Seat};

/// How a lookup starts.
enum Started<V, E> {
    /// Answered already: a hit, or a refusal.
    Done(Result<Cached<V>, Error<E>>),
    /// Waiting on the key's flight, since `began`, in `seat`.
    Flying { flight: Arc<Flight<V, E>>, began: Instant, seat: Seat },
}

/// A value from a [`Cache`]: fresh, or the last good one, served stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Cached<V> {
    /// The answer.
    pub value: V,
    /// `None` for a fresh value (a hit, or the call's own answer); `Some(age)`
    /// for the last good value ([`CacheBuilder::serve_stale`]), `age` the time
    /// since the call that got it ended.
    pub stale: Option<Duration>,
}

impl<V> Cached<V> {
    /// Whether this is the last good value rather than a fresh one.
    pub fn is_stale(&self) -> bool {
        self.stale.is_some()
    }
}

/// A point-in-time view of one [`Cache`]'s counters, each monotonic except
/// `entries`, `in_flight` and `waiting`.
///
/// ```text
/// lookups = hits + misses        misses = shared calls started + coalesced + refused
/// ```
///
/// A miss answered with the last good value is counted in `misses` and in
/// `stale`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheSnapshot {
    /// The cache's name.
    pub name: String,
    /// Lookups answered with a fresh value, without a call.
    pub hits: u64,
    /// Lookups that found no fresh value: each started the shared call of
    /// its key or joined one.
    pub misses: u64,
    /// Misses answered with the last good value.
    pub stale: u64,
    /// Misses that joined a shared call already in flight instead of making
    /// their own.
    pub coalesced: u64,
    /// Misses refused at once because [`max_waiting`](CacheBuilder::max_waiting)
    /// callers were waiting already.
    pub refused: u64,
    /// Refreshes started ahead of expiry ([`CacheBuilder::refresh_after`]):
    /// shared calls made for a hit, admitted by the dependency.
    pub refreshes: u64,
    /// Entries pushed out to make room (a value replaced by its key's new
    /// one is not).
    pub evictions: u64,
    /// Entries kept now, expired ones included until evicted or replaced.
    pub entries: usize,
    /// The most entries it keeps.
    pub capacity: usize,
    /// Shared calls in flight now.
    pub in_flight: usize,
    /// Callers waiting on them now.
    pub waiting: usize,
}

/// A per-key cache of a dependency's good answers; see the [module
/// docs](self). Cheap to clone (an `Arc` inside); clones share everything.
pub struct Cache<K, V> {
    inner: Arc<Inner<K, V>>,
}

/// How long an answer is kept, chosen by the answer.
type Ttl<V> = dyn Fn(&V) -> Duration + Send + Sync;

struct Inner<K, V> {
    name: Arc<str>,
    map: Map<K, V>,
    capacity: usize,
    ttl: Box<Ttl<V>>,
    /// How long past its expiry the last good value may answer a failed call.
    stale_for: Option<Duration>,
    /// The age at which a hit refreshes its value ahead of expiry.
    refresh_after: Option<Duration>,
    /// The callers waiting on shared calls: a seat each, at most
    /// `max_waiting`, waited for as room in the pool is.
    seats: Room,
    /// `None`: the system clock (a direct `Instant::now`).
    clock: Option<Arc<dyn Clock>>,
    counters: CacheCounters,
    flights: Arc<Flights<K>>,
}

impl<K, V> Clone for Cache<K, V> {
    fn clone(&self) -> Self {
        Cache { inner: Arc::clone(&self.inner) }
    }
}

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A builder with every default (see each setter), named `name` in
    /// snapshots and metrics.
    pub fn builder(name: impl Into<String>) -> CacheBuilder<K, V> {
        CacheBuilder::new(name.into())
    }

    /// The fresh value of `key`, or the answer of `dep` to `job`, waited for
    /// until `deadline` at most (see the [module docs](self)): a hit answers
    /// at once; a miss starts the key's shared call, or joins the one in
    /// flight. `E`'s [`Classify`] judges the outcome; a job's error that is
    /// not `Clone` can be shared as an `Arc` (`map_err(Arc::new)`).
    ///
    /// `Err` is the error of the shared call, or [`Error::Timeout`] when
    /// `deadline` came first (the call goes on for the others), unless the
    /// cache serves the last good value instead.
    pub fn get_or_call<Q, E, F>(
        &self,
        dep: &Dependency,
        key: &Q,
        deadline: Instant,
        job: F,
    ) -> Result<Cached<V>, Error<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        E: Classify + Clone + Send + 'static,
        F: FnOnce(&CallContext) -> Result<V, E> + Send + 'static,
    {
        self.get_or_call_with(dep, key, deadline, ByError, job)
    }

    /// [`get_or_call`](Self::get_or_call) with a classifier of its own (see
    /// [`CallBuilder::classify`](crate::CallBuilder::classify)), which judges
    /// the shared call's outcome for the breaker and the cache alike, as the
    /// module docs' *Judged once* says.
    pub fn get_or_call_with<Q, C, E, F>(
        &self,
        dep: &Dependency,
        key: &Q,
        deadline: Instant,
        classify: C,
        job: F,
    ) -> Result<Cached<V>, Error<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Classifier<V, E> + Send + 'static,
        E: Clone + Send + 'static,
        F: FnOnce(&CallContext) -> Result<V, E> + Send + 'static,
    {
        match self.start(dep, key, deadline, classify, job) {
            Started::Done(answer) => answer,
            Started::Flying { flight, began, seat: _seat } => {
                self.inner.answer(key, flight.wait(deadline), began)
            }
        }
    }

    /// The start of a lookup: a hit (which may start a refresh), a refusal,
    /// or a seat on the key's flight (its shared call started if it was not
    /// in the air).
    #[inline]
    fn start<Q, C, E, F>(
        &self,
        dep: &Dependency,
        key: &Q,
        deadline: Instant,
        classify: C,
        job: F,
    ) -> Started<V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Classifier<V, E> + Send + 'static,
        E: Clone + Send + 'static,
        F: FnOnce(&CallContext) -> Result<V, E> + Send + 'static,
    {
        let inner = &*self.inner;
        if let Some((value, due)) = inner.fresh(key) {
            if due {
                self.refresh(dep, key, classify, job);
            }
            return Started::Done(Ok(Cached { value, stale: None }));
        }
        // After the hit: a hit reads the clock once, to age its entry.
        let began = Instant::now();
        // A seat in the waiting room, held until this caller has its answer;
        // waited for like room in the pool, within its `max_wait`.
        let max_wait = dep.pool().map_or(Duration::ZERO, crate::pool::Pool::max_wait);
        let Some(seat) = inner.seats.acquire(deadline.min(crate::time::deadline_after(began, max_wait)))
        else {
            Counters::bump(&inner.counters.misses);
            Counters::bump(&inner.counters.refused);
            return Started::Done(inner.stale(key).ok_or(Error::from(Rejection::QueueFull)));
        };
        let (flight, landing) = {
            let mut table = inner.flights.lock();
            // Again under the table's lock: a flight that landed since the
            // first look put its good answer in the map before leaving the
            // table (flight.rs), so no second call is made for it.
            if let Some((value, _)) = inner.fresh(key) {
                return Started::Done(Ok(Cached { value, stale: None }));
            }
            match table.get(key).cloned().map(|f| f.downcast::<Flight<V, E>>()) {
                Some(Ok(flight)) => {
                    Counters::bump(&inner.counters.coalesced);
                    (flight, None)
                }
                // A flight of the key with another error type stays where
                // it is: this caller makes a call of its own, untabled (its
                // answer is not kept: it is not the key's flight).
                found => {
                    let landing = self.board(&mut table, key, found.is_none());
                    (Arc::clone(&landing.flight), Some(landing))
                }
            }
        };
        Counters::bump(&inner.counters.misses);
        if let Some(landing) = landing {
            // Detached once in (so a caller who gives up does not cancel it
            // for the others), under the dependency's own timeout; a full
            // pool is waited for as a blocking call waits, within this
            // caller's deadline. (A worker landing an answer is busy until it
            // returns: the pool's wait for room covers that moment too.)
            self.launch(dep, landing, Some(deadline), classify, job);
        }
        Started::Flying { flight, began, seat }
    }

    /// A new flight of `key`, put in the table when `tabled`, and the
    /// obligation to land it.
    fn board<Q, E>(
        &self,
        table: &mut HashMap<K, Arc<dyn Any + Send + Sync>>,
        key: &Q,
        tabled: bool,
    ) -> Landing<K, V, E>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        E: Clone + Send + 'static,
    {
        let flight = Arc::new(Flight::new());
        let erased: Arc<dyn Any + Send + Sync> = flight.clone();
        if tabled {
            table.insert(key.to_owned(), Arc::clone(&erased));
        }
        Landing { key: key.to_owned(), flight, erased, flights: Arc::clone(&self.inner.flights) }
    }

    /// Submits the shared call of `landing`'s flight, detached, waiting for
    /// room until `room_until` (`None`: not at all). `classify` judges its
    /// outcome on the worker, for the breaker and for the cache alike: the
    /// landing reads the verdict the settlement recorded. A refused call
    /// answers those who joined the flight (the landing went with it: the
    /// flight is out of the table already). Whether it was submitted.
    fn launch<C, E, F>(
        &self,
        dep: &Dependency,
        landing: Landing<K, V, E>,
        room_until: Option<Instant>,
        classify: C,
        job: F,
    ) -> bool
    where
        C: Classifier<V, E> + Send + 'static,
        E: Clone + Send + 'static,
        F: FnOnce(&CallContext) -> Result<V, E> + Send + 'static,
    {
        let (cache, flight) = (Arc::clone(&self.inner), Arc::clone(&landing.flight));
        let on_done = move |judged: Judged<V, E>| cache.land(landing, judged);
        let refused = dep.with().classify(classify).spawn_judged(room_until, on_done, job).err();
        if let Some(rejection) = refused {
            flight.answer((Err(Error::from(rejection)), None));
        }
        refused.is_none()
    }

    /// Starts a refresh of `key` ahead of its expiry, unless a call of the
    /// key is in flight already; only if the pool has room now.
    #[cold]
    fn refresh<Q, C, E, F>(&self, dep: &Dependency, key: &Q, classify: C, job: F)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        C: Classifier<V, E> + Send + 'static,
        E: Clone + Send + 'static,
        F: FnOnce(&CallContext) -> Result<V, E> + Send + 'static,
    {
        let inner = &*self.inner;
        let landing = {
            let mut table = inner.flights.lock();
            // Under the table's lock, where a landing puts its answer in the
            // map before it leaves the table: a refresh (or a miss's call)
            // in flight, or one that has landed since this hit read the map,
            // is seen here, so one value is refreshed once.
            let due = inner.map.peek(key).is_some_and(|entry| entry.is_due(inner.now()));
            if !due || table.contains_key(key) {
                return;
            }
            self.board(&mut table, key, true)
        };
        // No room now: the current value stays until its TTL, and the next
        // hit past the age tries again. A miss that joined the flight
        // meanwhile (the value expired since) has its answer.
        if self.launch(dep, landing, None, classify, job) {
            Counters::bump(&inner.counters.refreshes);
        }
    }

    /// Forgets `key`'s value (a permission just changed, say): the next
    /// lookup asks again, and a shared call of the key in flight still
    /// answers its waiters but is not kept (the module docs' *Removal wins*).
    pub fn remove<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // Both under the table's lock, which a landing holds to keep its
        // answer only while its flight is still the key's (flight.rs).
        let mut table = self.inner.flights.lock();
        table.remove(key);
        self.inner.map.remove(key);
    }
}

impl<K, V> Cache<K, V> {
    /// The cache's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its counters now (relaxed reads, no lock but the flights' table's,
    /// held to count it).
    pub fn snapshot(&self) -> CacheSnapshot
    where
        K: Hash + Eq,
        V: Clone,
    {
        self.inner.snapshot()
    }
}

impl<K: Hash + Eq, V: Clone> Inner<K, V> {
    #[inline]
    fn now(&self) -> Instant {
        match &self.clock {
            None => Instant::now(),
            Some(clock) => clock.now(),
        }
    }

    /// `key`'s value if it is fresh, and whether it is due for a refresh;
    /// counts the hit.
    #[inline]
    fn fresh<Q>(&self, key: &Q) -> Option<(V, bool)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let entry = self.map.get(key)?;
        let now = self.now();
        if !entry.is_fresh(now) {
            return None;
        }
        Counters::bump(&self.counters.hits);
        let due = entry.is_due(now);
        Some((entry.value, due))
    }

    /// A waiting caller's answer: the flight's (`None`: the caller's
    /// deadline came first), as the call's classifier judged it.
    fn answer<Q, E>(
        &self,
        key: &Q,
        judged: Option<Judged<V, E>>,
        began: Instant,
    ) -> Result<Cached<V>, Error<E>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let fresh = |answer: Result<V, Error<E>>| answer.map(|value| Cached { value, stale: None });
        match judged {
            // A failure (an `Ok(500)` the classifier calls one, say): the
            // last good value where allowed, else the answer as it came.
            Some(judged) if is_failure(&judged) => self.stale(key).map_or_else(|| fresh(judged.0), Ok),
            // Good, or ignored (a 403, a 404): the provider has answered;
            // never replaced by an old value.
            Some((answer, _)) => fresh(answer),
            None => self.stale(key).ok_or(Error::Timeout { waited: began.elapsed() }),
        }
    }

    /// `key`'s last good value, served stale, if the cache allows it and it
    /// expired recently enough; counts it.
    fn stale<Q>(&self, key: &Q) -> Option<Cached<V>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let max_stale = self.stale_for?;
        let entry = self.map.peek(key)?;
        let age = entry.stale_age(self.now(), max_stale)?;
        Counters::bump(&self.counters.stale);
        Some(Cached { value: entry.value, stale: Some(age) })
    }

    /// Lands a shared call (in the order flight.rs explains): a good answer
    /// into the map while its flight is still the key's, then the answer to
    /// its waiters. Runs on the worker that ran the call.
    fn land<E: Clone>(&self, landing: Landing<K, V, E>, answer: Judged<V, E>)
    where
        K: Clone,
    {
        // The entry is made before the table's lock is taken: the TTL is the
        // user's code.
        let entry = match &answer.0 {
            Ok(value) if is_good(&answer) => {
                let ttl = (self.ttl)(value);
                (!ttl.is_zero()).then(|| Entry::new(value.clone(), self.now(), ttl, self.refresh_after))
            }
            _ => None,
        };
        landing.land(answer, |key| {
            if let Some(entry) = entry {
                store::keep(&self.map, key, entry, &self.counters.evictions);
            }
        });
    }

    fn snapshot(&self) -> CacheSnapshot {
        let c = &self.counters;
        let load = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
        CacheSnapshot {
            name: self.name.to_string(),
            hits: load(&c.hits),
            misses: load(&c.misses),
            stale: load(&c.stale),
            coalesced: load(&c.coalesced),
            refused: load(&c.refused),
            refreshes: load(&c.refreshes),
            evictions: load(&c.evictions),
            entries: self.map.len(),
            capacity: self.capacity,
            in_flight: self.flights.lock().len(),
            waiting: self.seats.in_use(),
        }
    }
}

/// What a [`Registry`](crate::Registry) keeps of a cache: its name and
/// snapshots, whatever its key and value types.
pub(crate) trait Watched: Send + Sync {
    fn name(&self) -> &str;
    fn snapshot(&self) -> CacheSnapshot;
}

impl<K, V> Watched for Inner<K, V>
where
    K: Hash + Eq + Send + Sync,
    V: Clone + Send + Sync,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn snapshot(&self) -> CacheSnapshot {
        Inner::snapshot(self)
    }
}

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// The cache as a registry watches it.
    pub(crate) fn watched(&self) -> Arc<dyn Watched> {
        self.inner.clone()
    }
}

impl<K, V> fmt::Debug for Cache<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("name", &self.inner.name)
            .field("capacity", &self.inner.capacity)
            .field("serve_stale", &self.inner.stale_for)
            .field("refresh_after", &self.inner.refresh_after)
            .field("max_waiting", &self.inner.seats.limit())
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync + Clone + 'static>() {}
    is::<Cache<String, u64>>();
}
