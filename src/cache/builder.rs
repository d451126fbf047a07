//! [`CacheBuilder`]: a [`Cache`]'s settings, each with its default.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::store::{self, CacheCounters};
use super::{Cache, Inner, Ttl};
use crate::clock::Clock;
use crate::error::ConfigError;

/// Builds a [`Cache`]; from [`Cache::builder`].
#[must_use = "a CacheBuilder does nothing until `.build()`"]
pub struct CacheBuilder<K, V> {
    name: String,
    capacity: usize,
    ttl: Box<Ttl<V>>,
    stale_for: Option<Duration>,
    refresh_after: Option<Duration>,
    max_waiting: usize,
    clock: Option<Arc<dyn Clock>>,
    _key: std::marker::PhantomData<fn() -> K>,
}

impl<K, V> CacheBuilder<K, V> {
    pub(super) fn new(name: String) -> Self {
        CacheBuilder {
            name,
            capacity: 10_000,
            ttl: Box::new(|_: &V| Duration::from_secs(60)),
            stale_for: None,
            refresh_after: None,
            max_waiting: usize::MAX,
            clock: None,
            _key: std::marker::PhantomData,
        }
    }

    /// The most entries kept; beyond it, `quick_cache` evicts the least
    /// useful. At least 1. Defaults to 10 000.
    pub fn capacity(mut self, entries: usize) -> Self {
        self.capacity = entries;
        self
    }

    /// How long a good answer (an `Ok` the call's classifier judges a
    /// success) is kept, chosen by the answer itself:
    /// `|d: &Decision| if d.allowed { 60 s } else { 10 s }`. A zero TTL keeps
    /// nothing (the answer is still shared by the callers of its flight); one
    /// too long to add to now is a year. Defaults to 60 s for every answer.
    pub fn ttl(mut self, ttl: impl Fn(&V) -> Duration + Send + Sync + 'static) -> Self {
        self.ttl = Box::new(ttl);
        self
    }

    /// Answers a failed (as the call's classifier judges it), refused or
    /// timed-out miss with its key's last good value, if that expired at most
    /// `max_stale` ago, marked [`stale`](super::Cached::stale) with its age;
    /// past that, the answer as it came. An ignored answer (a 403, a 404) is
    /// never replaced. Any duration; zero serves only a value that expired
    /// this instant. Defaults to never: see the [module docs](super).
    pub fn serve_stale(mut self, max_stale: Duration) -> Self {
        self.stale_for = Some(max_stale);
        self
    }

    /// Refreshes a value ahead of its expiry once it is `age` old (Caffeine's
    /// `refreshAfterWrite`): a hit past that age answers at once and starts
    /// the key's shared call in the background (which later misses join), if
    /// the dependency has room at that moment (detached, as
    /// [`CallBuilder::spawn_with`](crate::CallBuilder::spawn_with), never
    /// waited for). A good answer replaces the value; a failed or refused
    /// refresh keeps it until its TTL, and the next hit past the age tries
    /// again. One refresh at a time per key.
    ///
    /// A value whose TTL is not longer than `age` is not refreshed ahead:
    /// it expires as without this setting. At least 1 ns. Defaults to never.
    pub fn refresh_after(mut self, age: Duration) -> Self {
        self.refresh_after = Some(age);
        self
    }

    /// The most callers that wait on the cache's shared calls at once, all
    /// keys together. A miss beyond it waits for a seat as a call waits for
    /// room in a full pool (within the dependency's
    /// [`max_wait`](crate::DependencyBuilder::max_wait) and its deadline),
    /// then is refused with [`QueueFull`](crate::Rejection::QueueFull) (or
    /// answered with the last good value where allowed), having started no
    /// call. At least 1. Defaults to no bound.
    ///
    /// The dependency's pool does not bound the waiting callers, each holding
    /// its thread: on a server with a fixed request pool, keep this within
    /// what the capacity rule leaves the dependency (its `workers + queue`),
    /// or one hot key of a hung provider can hold every request thread.
    pub fn max_waiting(mut self, callers: usize) -> Self {
        self.max_waiting = callers;
        self
    }

    /// The clock that ages entries (a [`ManualClock`](crate::ManualClock) in
    /// tests). Waiting for a call is on real time, whatever the clock.
    /// Defaults to the system clock.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The cache, or the setting that is out of range (`name` empty,
    /// `capacity` or `max_waiting` 0, `refresh_after` zero).
    pub fn build(self) -> Result<Cache<K, V>, ConfigError>
    where
        K: Hash + Eq + Clone + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        if self.name.is_empty() {
            return Err(ConfigError::new("name", "not empty", "\"\""));
        }
        if self.capacity == 0 {
            return Err(ConfigError::new("capacity", ">= 1", 0));
        }
        if self.max_waiting == 0 {
            return Err(ConfigError::new("max_waiting", ">= 1", 0));
        }
        if self.refresh_after == Some(Duration::ZERO) {
            return Err(ConfigError::new("refresh_after", "> 0", "0ns"));
        }
        let counters = CacheCounters::default();
        let map = store::map(self.capacity);
        Ok(Cache {
            inner: Arc::new(Inner {
                name: self.name.into(),
                map,
                capacity: self.capacity,
                ttl: self.ttl,
                stale_for: self.stale_for,
                refresh_after: self.refresh_after,
                seats: crate::room::Room::new(self.max_waiting, crate::room::MAX_WAIT)?,
                clock: self.clock,
                counters,
                flights: Arc::default(),
            }),
        })
    }
}

impl<K, V> fmt::Debug for CacheBuilder<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheBuilder")
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .field("serve_stale", &self.stale_for)
            .field("refresh_after", &self.refresh_after)
            .field("max_waiting", &self.max_waiting)
            .finish_non_exhaustive()
    }
}
