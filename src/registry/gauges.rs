//! [`RequestPoolGauges`]: a request pool's size and busy threads, as the
//! [`Registry`](super::Registry) carries them for an exporter.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::room::{NoSeat, Seats};

/// The gauges of a shared request pool, as a [`Registry`](super::Registry)
/// carries them for an exporter (from
/// [`Registry::request_pool`](super::Registry::request_pool)): its size, its
/// busy threads now, its refusals, and its reserve's shadow. Cheap to clone;
/// reads are relaxed loads that never block.
#[derive(Clone)]
pub struct RequestPoolGauges {
    threads: usize,
    /// The pool's threads as its room counts them: busy (seats held),
    /// reserved busy (seats of the reserved class), waiting (the line).
    seats: Arc<Seats>,
    /// The reserved share's threads, if the pool has one.
    reserved: Option<usize>,
    pub(crate) counts: Arc<PoolCounts>,
}

/// A request pool's counts beside its room's: relaxed, written by the pool,
/// read by the gauges.
#[derive(Default)]
pub(crate) struct PoolCounts {
    /// Requests refused, by reason ([`NoSeat`] as an index).
    refused: [AtomicU64; NoSeat::ALL.len()],
    /// Whether the reserve is in shadow, switched live.
    pub(crate) shadow: AtomicBool,
    /// Ordinary requests the reserve in shadow let onto a reserved thread.
    pub(crate) shadowed: AtomicU64,
}

impl PoolCounts {
    /// Counts one refusal for `why`.
    pub(crate) fn refuse(&self, why: NoSeat) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a request pool refuses an ordinary request, as `/metrics` labels it
/// (`watertight_request_pool_refused_total{reason}`): each [`NoSeat`]'s label.
/// - `full`: the wait it could expect passed `max_wait` or its budget;
/// - `max_wait`: it waited `max_wait` and no thread came;
/// - `budget`: its own budget ran out while it waited;
/// - `stuck`: no ordinary request had finished for several normal
///   latencies while every ordinary thread was busy.
pub const REFUSAL_REASONS: [&str; 4] =
    [NoSeat::ALL[0].as_str(), NoSeat::ALL[1].as_str(), NoSeat::ALL[2].as_str(), NoSeat::ALL[3].as_str()];

impl RequestPoolGauges {
    /// The gauges of a pool of `threads` whose room counts `seats`, with
    /// `reserved` threads kept for the reserve, if any.
    pub(crate) fn new(threads: usize, seats: Arc<Seats>, reserved: Option<usize>) -> Self {
        RequestPoolGauges { threads, seats, reserved, counts: Arc::default() }
    }

    /// Ordinary requests the reserve in shadow let onto a reserved thread
    /// (see `server::Reserve::shadow`): the refusals it would have made.
    pub fn shadow_refused(&self) -> u64 {
        self.counts.shadowed.load(Ordering::Relaxed)
    }

    /// Whether the reserve is in shadow (false without a reserve).
    pub fn reserve_in_shadow(&self) -> bool {
        self.reserved.is_some() && self.counts.shadow.load(Ordering::Relaxed)
    }

    /// Puts the reserve in shadow (`true`) or back to enforcing, from the
    /// next request (see `server::Reserve::shadow`). Without a reserve there
    /// is nothing to shadow, and nothing changes.
    pub fn set_reserve_shadow(&self, shadow: bool) {
        self.counts.shadow.store(shadow, Ordering::Relaxed);
    }

    /// Requests refused since the pool started, by reason
    /// ([`REFUSAL_REASONS`]), every reason listed.
    pub fn refused(&self) -> [(&'static str, u64); REFUSAL_REASONS.len()] {
        NoSeat::ALL.map(|why| (why.as_str(), self.counts.refused[why as usize].load(Ordering::Relaxed)))
    }

    /// Whether `self` and `other` are the gauges of the same pool.
    pub(super) fn same_as(&self, other: &RequestPoolGauges) -> bool {
        Arc::ptr_eq(&self.seats, &other.seats)
    }

    /// The reserved share: its threads, the reserved requests being handled
    /// now, and the ordinary requests waiting for an ordinary thread; `None`
    /// for a pool without one.
    pub fn reserve(&self) -> Option<(usize, usize, usize)> {
        self.reserved.map(|threads| (threads, self.reserved_busy(), self.waiting()))
    }

    /// The number of request threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Requests being handled right now (at most [`threads`](Self::threads)).
    pub fn busy(&self) -> usize {
        self.seats.in_use()
    }

    /// Reserved requests being handled right now, and ordinary ones the
    /// reserve in shadow let onto a reserved thread (part of [`busy`](Self::busy)).
    pub fn reserved_busy(&self) -> usize {
        self.seats.held_by(1)
    }

    /// Ordinary requests waiting for an ordinary thread.
    pub fn waiting(&self) -> usize {
        self.seats.waiting()
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
