//! What a [`Cache`](super::Cache) keeps: its entries in a `quick_cache`
//! map bounded by count, and its counters.

use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A good answer and when it was had. Kept past its expiry (until evicted or
/// replaced), so that it can be served stale where the cache allows it.
#[derive(Clone)]
pub(super) struct Entry<V> {
    pub(super) value: V,
    /// When the call that got it ended, on the cache's clock.
    pub(super) fetched: Instant,
    /// `fetched` plus the TTL the value chose.
    pub(super) expires: Instant,
}

impl<V> Entry<V> {
    /// Whether it may be answered as fresh at `now`.
    #[inline]
    pub(super) fn is_fresh(&self, now: Instant) -> bool {
        now < self.expires
    }

    /// Its age at `now`, if it may still be served stale: at most `max_stale`
    /// past its expiry.
    pub(super) fn stale_age(&self, now: Instant, max_stale: Duration) -> Option<Duration> {
        let past = now.saturating_duration_since(self.expires);
        (past <= max_stale).then(|| now.saturating_duration_since(self.fetched))
    }
}

/// The counters of one cache: relaxed atomics, each monotonic, read one by
/// one into a [`CacheSnapshot`](super::CacheSnapshot).
#[derive(Default)]
pub(super) struct Counters {
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) stale: AtomicU64,
    pub(super) coalesced: AtomicU64,
    pub(super) refused: AtomicU64,
    /// Callers waiting on shared calls now (a gauge, not a counter).
    pub(super) waiting: AtomicUsize,
    /// Shared with the map's [`CountEvictions`] lifecycle.
    pub(super) evictions: Arc<AtomicU64>,
}

impl Counters {
    #[inline]
    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// One unit of a gauge (a seat among the waiting callers), given back by its
/// `Drop` however the holder's work ends.
pub(super) struct Held<'a>(&'a AtomicUsize);

impl<'a> Held<'a> {
    /// One more if fewer than `max` are held, else `None`.
    pub(super) fn below(gauge: &'a AtomicUsize, max: usize) -> Option<Held<'a>> {
        // Relaxed: the gauge guards nothing but itself.
        let taken = gauge.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < max).then_some(n + 1));
        taken.ok().map(|_| Held(gauge))
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The `quick_cache` lifecycle that counts evictions (entries pushed out to
/// make room; a value replaced for its own key is not one). Evicted entries
/// are kept in the request state, like `quick_cache`'s default lifecycle
/// does, so that they are dropped after the shard lock is released.
#[derive(Clone)]
pub(super) struct CountEvictions(pub(super) Arc<AtomicU64>);

impl<K, V> quick_cache::Lifecycle<K, V> for CountEvictions {
    type RequestState = [Option<(K, V)>; 2];

    #[inline]
    fn on_evict(&self, state: &mut Self::RequestState, key: K, val: V) {
        self.0.fetch_add(1, Ordering::Relaxed);
        if let Some(free) = state.iter_mut().find(|s| s.is_none()) {
            *free = Some((key, val));
        }
    }
}

/// The bounded map: every entry weighs one, so `capacity` counts entries.
pub(super) type Map<K, V> = quick_cache::sync::Cache<
    K,
    Entry<V>,
    quick_cache::UnitWeighter,
    quick_cache::DefaultHashBuilder,
    CountEvictions,
>;

/// A map of at most `capacity` entries, counting its evictions into `evictions`.
pub(super) fn map<K: Eq + Hash, V: Clone>(capacity: usize, evictions: Arc<AtomicU64>) -> Map<K, V> {
    quick_cache::sync::Cache::with(
        capacity,
        capacity as u64,
        quick_cache::UnitWeighter,
        quick_cache::DefaultHashBuilder::default(),
        CountEvictions(evictions),
    )
}
