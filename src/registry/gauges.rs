//! [`RequestPoolGauges`]: a request pool's size and busy threads, as the
//! [`Registry`](super::Registry) carries them for an exporter.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The gauges of a shared request pool, as a [`Registry`](super::Registry)
/// carries them for an exporter (from
/// [`Registry::request_pool`](super::Registry::request_pool)): its size and
/// its busy threads now. Cheap to clone; reads are relaxed loads that never block.
#[derive(Clone)]
pub struct RequestPoolGauges {
    threads: usize,
    /// The pool's own count of requests taken and not yet answered (the
    /// server increments and decrements it; this side only reads it).
    busy: Arc<AtomicUsize>,
    /// The reserved share, if the pool has one: its threads, the reserved
    /// requests being handled, and the ordinary requests waiting for an
    /// ordinary thread (the server's counts, read here).
    reserve: Option<(usize, Arc<AtomicUsize>, Arc<AtomicUsize>)>,
    /// Requests refused, by reason (the server counts, this side reads).
    refused: Arc<Refused>,
    /// What the reserve in shadow would have refused.
    shadowed: Arc<crate::shadow::ShadowCounters>,
}

/// Requests a request pool refused, counted by reason: relaxed counters,
/// written by the pool, read by the gauges.
#[derive(Default)]
pub(crate) struct Refused {
    counts: [AtomicU64; REFUSAL_REASONS.len()],
}

/// Why a request pool refuses an ordinary request, as `/metrics` labels it
/// (`watertight_request_pool_refused_total{reason}`):
/// - `full`: the wait it could expect passed `max_wait` or its budget;
/// - `max_wait`: it waited `max_wait` and no thread came;
/// - `budget`: its own budget ran out while it waited;
/// - `stuck`: no ordinary request had finished for several normal
///   latencies while every ordinary thread was busy.
pub const REFUSAL_REASONS: [&str; 4] = ["full", "max_wait", "budget", "stuck"];

impl Refused {
    /// Counts one refusal for `reason`, an index into [`REFUSAL_REASONS`].
    pub(crate) fn count(&self, reason: usize) {
        self.counts[reason].fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self) -> [(&'static str, u64); REFUSAL_REASONS.len()] {
        std::array::from_fn(|i| (REFUSAL_REASONS[i], self.counts[i].load(Ordering::Relaxed)))
    }
}

impl RequestPoolGauges {
    pub(crate) fn new(threads: usize, busy: Arc<AtomicUsize>) -> Self {
        RequestPoolGauges { threads, busy, reserve: None, refused: Arc::default(), shadowed: Arc::default() }
    }

    /// The count of what the reserve in shadow would have refused.
    #[cfg_attr(not(feature = "tiny_http"), allow(dead_code))] // the server counts them
    pub(crate) fn with_shadowed(mut self, shadowed: Arc<crate::shadow::ShadowCounters>) -> Self {
        self.shadowed = shadowed;
        self
    }

    /// Ordinary requests the reserve in shadow let onto a reserved thread
    /// (see `server::Reserve::shadow`): the refusals it would have made.
    pub fn shadow_refused(&self) -> u64 {
        self.shadowed.load().get(crate::shadow::Policy::Reserve)
    }

    /// The counts of refusals the pool writes.
    pub(crate) fn with_refused(mut self, refused: Arc<Refused>) -> Self {
        self.refused = refused;
        self
    }

    /// Requests refused since the pool started, by reason
    /// ([`REFUSAL_REASONS`]), every reason listed.
    pub fn refused(&self) -> [(&'static str, u64); REFUSAL_REASONS.len()] {
        self.refused.get()
    }

    /// The same, for a pool with a reserved share of `threads`.
    pub(crate) fn with_reserve(
        mut self,
        threads: usize,
        reserved_busy: Arc<AtomicUsize>,
        waiting: Arc<AtomicUsize>,
    ) -> Self {
        self.reserve = Some((threads, reserved_busy, waiting));
        self
    }

    /// Whether `self` and `other` are the gauges of the same pool.
    pub(super) fn same_as(&self, other: &RequestPoolGauges) -> bool {
        Arc::ptr_eq(&self.busy, &other.busy)
    }

    /// The reserved share: its threads, the reserved requests being handled
    /// now, and the ordinary requests waiting for an ordinary thread; `None`
    /// for a pool without one.
    pub fn reserve(&self) -> Option<(usize, usize, usize)> {
        self.reserve.as_ref().map(|(threads, busy, waiting)| {
            (*threads, busy.load(Ordering::Relaxed), waiting.load(Ordering::Relaxed))
        })
    }

    /// The number of request threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Requests being handled right now (at most [`threads`](Self::threads)).
    pub fn busy(&self) -> usize {
        // Relaxed: a gauge read for display, it orders nothing.
        self.busy.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for RequestPoolGauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestPoolGauges")
            .field("threads", &self.threads)
            .field("busy", &self.busy())
            .finish()
    }
}
