//! What a [`Cache`](super::Cache) keeps: its entries in a `quick_cache`
//! map bounded by count, and its counters.

use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::time::deadline_after;

/// A good answer and when it was had. Kept past its expiry (until evicted or
/// replaced), so that it can be served stale where the cache allows it.
#[derive(Clone)]
pub(super) struct Entry<V> {
    pub(super) value: V,
    /// When the call that got it ended, on the cache's clock.
    pub(super) fetched: Instant,
    /// When a hit starts a refresh ahead of expiry: `fetched` plus the
    /// cache's refresh age, or `expires` when that is not earlier (no
    /// refresh ahead).
    pub(super) refresh: Instant,
    /// `fetched` plus the TTL the value chose.
    pub(super) expires: Instant,
}

impl<V> Entry<V> {
    /// A value fetched at `fetched`, kept for `ttl`, refreshed ahead of
    /// expiry once `refresh_after` old (`None`: never ahead).
    pub(super) fn new(value: V, fetched: Instant, ttl: Duration, refresh_after: Option<Duration>) -> Self {
        // A TTL too long to add is "for as long as it stays".
        let expires = deadline_after(fetched, ttl);
        let refresh = refresh_after.map_or(expires, |age| deadline_after(fetched, age).min(expires));
        Entry { value, fetched, refresh, expires }
    }

    /// Whether it may be answered as fresh at `now`.
    #[inline]
    pub(super) fn is_fresh(&self, now: Instant) -> bool {
        now < self.expires
    }

    /// Whether a hit at `now` should start a refresh (it is fresh, and past
    /// its refresh age).
    #[inline]
    pub(super) fn is_due(&self, now: Instant) -> bool {
        now >= self.refresh
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
pub(super) struct CacheCounters {
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) stale: AtomicU64,
    pub(super) coalesced: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) refreshes: AtomicU64,
    pub(super) evictions: AtomicU64,
}

/// The `quick_cache` lifecycle that collects what an insert pushes out, so
/// that [`keep`] can count evictions. `quick_cache` reports a value replaced
/// for its own key through the same hook as an entry pushed out for room:
/// only the second is an eviction. Evicted entries are kept in the request
/// state, like `quick_cache`'s default lifecycle does, so that they are
/// dropped after the shard lock is released.
#[derive(Clone, Copy, Default)]
pub(super) struct Collect;

/// What one insert pushed out: how many, and the first two of them (the
/// replaced value of the key, if any, comes first).
pub(super) struct Pushed<K, V> {
    count: u64,
    first: [Option<(K, V)>; 2],
}

impl<K, V> Default for Pushed<K, V> {
    fn default() -> Self {
        Pushed { count: 0, first: [None, None] }
    }
}

impl<K, V> quick_cache::Lifecycle<K, V> for Collect {
    type RequestState = Pushed<K, V>;

    #[inline]
    fn on_evict(&self, state: &mut Self::RequestState, key: K, val: V) {
        state.count += 1;
        if let Some(free) = state.first.iter_mut().find(|s| s.is_none()) {
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
    Collect,
>;

/// A map of at most `capacity` entries.
pub(super) fn map<K: Eq + Hash + Clone, V: Clone>(capacity: usize) -> Map<K, V> {
    quick_cache::sync::Cache::with(
        capacity,
        capacity as u64,
        quick_cache::UnitWeighter,
        quick_cache::DefaultHashBuilder::default(),
        Collect,
    )
}

/// Puts `entry` in `map` under `key`, counting into `evictions` the entries
/// it pushed out for room (the key's own value, replaced, is not one).
pub(super) fn keep<K: Eq + Hash + Clone, V: Clone>(
    map: &Map<K, V>,
    key: &K,
    entry: Entry<V>,
    evictions: &AtomicU64,
) {
    let mut pushed = Pushed::default();
    map.insert_with_lifecycle(key.clone(), entry, &mut pushed);
    let replaced = pushed.first.iter().flatten().any(|(k, _)| k == key);
    let evicted = pushed.count - u64::from(replaced);
    if evicted > 0 {
        evictions.fetch_add(evicted, Ordering::Relaxed);
    }
}
