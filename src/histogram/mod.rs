//! [`LatencyHistogram`]: a latency histogram with fixed, log-spaced buckets
//! from 100 µs to 30 s, recorded without a lock, counted since creation and
//! over a recent window.
//!
//! # Buckets
//!
//! Bucket `i` (for `i` in `0..BOUNDS`) counts durations `d <= bound(i)`
//! and `> bound(i - 1)`; one last bucket counts everything over 30 s (`+Inf`).
//! Bounds grow by 2^(1/4) (about 19 %) from 100 µs, four to an octave, and the
//! last is 30 s: 74 bounds. A quantile interpolated inside a bucket is within
//! about 10 % of the true value (over 30 s it is reported as 30 s).
//!
//! Every fourth bound is a power-of-two multiple of 100 µs (100 µs, 200 µs,
//! 400 µs, ... 26.2 s), and counts are exact at every bound, so an exporter may
//! publish a coarser subset (for Prometheus, [`HistogramSnapshot::cumulative`]
//! with a step of 4 gives 19 buckets and `+Inf`) without losing accuracy at the
//! bounds it keeps.
//!
//! # Recording
//!
//! [`record`](LatencyHistogram::record), from any thread, is two relaxed
//! `fetch_add`s (one bucket, the sum) on counts that are never cleared, a
//! relaxed load of the next epoch boundary and one comparison: no lock and no
//! allocation. The bucket is found as `bucket_of` says.
//!
//! # The recent window
//!
//! Time is cut into epochs of `window`. The first writer to record in a new
//! epoch *rotates*: it takes a *mark*, the counts as they stand when the epoch
//! begins. A reader subtracts the mark of the last complete epoch from the
//! counts now, so "recent" covers between one and two windows. The marks and
//! the epoch sit under one mutex, taken once a window by the rotating writer
//! and by readers; every one of them reads the counters after unlocking, so no lock
//! is ever held while counters are read, and recording never waits for one
//! except in the rotation.
//!
//! Samples are never lost from the totals: the counts only grow. A sample
//! recorded while another writer rotates may be counted in the epoch before its
//! own; if the rotating thread stalls for a window or more, the samples of
//! that stall count in the epoch it marks, and may drop out of the recent
//! window early.
//!
//! # Synchronisation
//!
//! | `next_epoch_ns` | meaning |
//! |---|---|
//! | `b` | epoch `b / window - 1` is the last one marked; a writer whose time is `>= b` rotates |
//! | `u64::MAX` | a rotation is under way: writers record without rotating |
//!
//! A writer parks the boundary at `u64::MAX` with a compare-exchange from the
//! value it read, so one writer at a time rotates; boundaries only grow, so
//! there is no ABA. Every counter is an independent monotonic count that
//! publishes no other memory: `Relaxed`. What orders a mark before the counts
//! a reader subtracts it from is the mutex: the mark was stored under it, the
//! reader copies it under it and reads the counters after. A snapshot taken while samples are recorded may be a few
//! samples apart between buckets and sum.

mod snapshot;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::time::saturating_nanos;

pub use self::snapshot::HistogramSnapshot;

/// How many finite bucket bounds there are (100 µs to 30 s).
pub const BOUNDS: usize = 74;

/// The finite upper bounds, in nanoseconds: 100 µs × 2^(i/4), the last one 30 s.
const BOUND_NS: [u64; BOUNDS] = {
    // 100 µs × 2^(j/4), j = 0..3, rounded to the nanosecond.
    const BASE: [u64; 4] = [100_000, 118_921, 141_421, 168_179];
    let mut bounds = [0u64; BOUNDS];
    let mut i = 0;
    while i < BOUNDS {
        bounds[i] = BASE[i % 4] << (i / 4);
        i += 1;
    }
    bounds[BOUNDS - 1] = 30_000_000_000;
    bounds
};

/// Bucket counts and their sum; `BOUNDS + 1` buckets, the last being `+Inf`.
#[derive(Debug)]
struct BucketCounts {
    buckets: [AtomicU64; BOUNDS + 1],
    sum_ns: AtomicU64,
}

impl BucketCounts {
    fn new() -> BucketCounts {
        BucketCounts { buckets: std::array::from_fn(|_| AtomicU64::new(0)), sum_ns: AtomicU64::new(0) }
    }

    /// Adds one sample; any number of threads at once.
    #[inline]
    fn add(&self, bucket: usize, ns: u64) {
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn add_into(&self, snap: &mut HistogramSnapshot) {
        snap.add(self.buckets.iter().map(|b| b.load(Ordering::Relaxed)), self.sum_ns.load(Ordering::Relaxed));
    }
}

/// What the mutex of a [`LatencyHistogram`] guards.
#[derive(Debug)]
struct Rare {
    /// The last epoch marked.
    epoch: u64,
    /// `marks[e % 2]`: the counts when epoch `e` began, for `e` the last epoch
    /// marked and the one before it (all zero at first: epoch 0 began empty).
    marks: [HistogramSnapshot; 2],
}

/// A latency histogram (see the [module docs](self)), read as a
/// [`HistogramSnapshot`] since creation ([`snapshot`](Self::snapshot)) or over
/// a recent window ([`recent`](Self::recent)).
///
/// ```
/// use std::time::Duration;
/// use watertight::histogram::LatencyHistogram;
///
/// let h = LatencyHistogram::new(Duration::from_secs(30));
/// for ms in 1..=100 {
///     h.record(Duration::from_millis(ms));
/// }
/// let recent = h.recent();
/// assert_eq!(recent.count(), 100);
/// let p50 = recent.quantile(0.5).unwrap();
/// assert!(p50 > Duration::from_millis(45) && p50 < Duration::from_millis(55), "{p50:?}");
/// let p99 = recent.quantile(0.99).unwrap();
/// assert!(p99 > Duration::from_millis(89) && p99 <= Duration::from_millis(110), "{p99:?}");
/// ```
#[derive(Debug)]
pub struct LatencyHistogram {
    /// The counts [`record`](Self::record) adds to; never cleared.
    shared: BucketCounts,
    /// The boundary of the next epoch, in nanoseconds since `origin`, or
    /// `u64::MAX` during a rotation (see the module docs' table).
    next_epoch_ns: AtomicU64,
    rare: Mutex<Rare>,
    origin: Instant,
    window_ns: u64,
}

impl LatencyHistogram {
    /// A histogram whose recent window is `window` (at least 1 ms; a shorter one
    /// is taken as 1 ms). Its first epoch starts now.
    pub fn new(window: Duration) -> LatencyHistogram {
        LatencyHistogram::starting_at(window, Instant::now())
    }

    /// Like [`new`](Self::new), with the first epoch starting at `origin` (for
    /// tests that drive time with [`record_at`](Self::record_at)).
    pub fn starting_at(window: Duration, origin: Instant) -> LatencyHistogram {
        let window_ns = saturating_nanos(window).max(1_000_000);
        LatencyHistogram {
            shared: BucketCounts::new(),
            next_epoch_ns: AtomicU64::new(window_ns),
            rare: Mutex::new(Rare { epoch: 0, marks: std::array::from_fn(|_| HistogramSnapshot::empty()) }),
            origin,
            window_ns,
        }
    }

    /// The recent window's length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// The upper bound of every finite bucket, shortest first (100 µs to 30 s).
    pub fn bounds() -> impl ExactSizeIterator<Item = Duration> {
        BOUND_NS.iter().map(|&ns| Duration::from_nanos(ns))
    }

    /// Records one duration, now.
    #[inline]
    pub fn record(&self, d: Duration) {
        self.record_at(d, Instant::now());
    }

    /// Records one duration at `now` (an instant the caller has just read).
    #[inline]
    pub fn record_at(&self, d: Duration, now: Instant) {
        self.turn(now);
        let ns = saturating_nanos(d);
        self.shared.add(bucket_of(ns), ns);
    }

    /// Rotates if `now` is past the current epoch.
    #[inline]
    fn turn(&self, now: Instant) {
        let since = self.ns_at(now);
        if since >= self.next_epoch_ns.load(Ordering::Relaxed) {
            self.rotate(since);
        }
    }

    /// Marks the epoch `since` falls in, unless another writer is rotating.
    /// The winner of the compare-exchange on the boundary parks it at
    /// `u64::MAX` (writers that come meanwhile record without rotating), reads
    /// the counts with no lock held, stores the marks (the new epoch's and,
    /// after a silence, the one before it: nothing was recorded between them)
    /// under the mutex, and then sets the next boundary.
    #[cold]
    fn rotate(&self, since: u64) {
        let boundary = self.next_epoch_ns.load(Ordering::Relaxed);
        if since < boundary
            || self
                .next_epoch_ns
                .compare_exchange(boundary, u64::MAX, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return; // another writer is rotating, or has rotated
        }
        let epoch = since / self.window_ns;
        let counts = self.snapshot();
        {
            let mut rare = self.rare.lock();
            // The boundary is the start of the epoch after `rare.epoch`, so `epoch > rare.epoch`.
            if epoch - rare.epoch >= 2 {
                rare.marks[((epoch - 1) % 2) as usize] = counts.clone();
            }
            rare.marks[(epoch % 2) as usize] = counts;
            rare.epoch = epoch;
        }
        let next = epoch.saturating_add(1).saturating_mul(self.window_ns);
        self.next_epoch_ns.store(next, Ordering::Relaxed);
    }

    /// Nanoseconds from the origin to `now` (0 before it).
    fn ns_at(&self, now: Instant) -> u64 {
        saturating_nanos(now.saturating_duration_since(self.origin))
    }

    /// Every sample since creation, read with no lock held.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut snap = HistogramSnapshot::empty();
        self.shared.add_into(&mut snap);
        snap
    }

    /// The samples of the recent window, now: the last complete epoch and the
    /// current one (between one and two windows).
    pub fn recent(&self) -> HistogramSnapshot {
        self.recent_at(Instant::now())
    }

    /// [`recent`](Self::recent) at `now`.
    pub fn recent_at(&self, now: Instant) -> HistogramSnapshot {
        let now_epoch = self.ns_at(now) / self.window_ns;
        let mark = {
            let rare = self.rare.lock();
            let marked = rare.epoch;
            // The samples since the mark of the epoch before `now_epoch`. A
            // reader whose `now` is behind the last writer's reads as of that epoch.
            let since_epoch = match now_epoch.saturating_sub(marked) {
                0 => marked.saturating_sub(1),
                1 => marked,
                _ => return HistogramSnapshot::empty(), // nothing in the last two epochs
            };
            rare.marks[(since_epoch % 2) as usize].clone()
        };
        self.snapshot().minus(&mark)
    }
}

/// The bucket a duration of `ns` nanoseconds falls in: the first bound `>= ns`,
/// or `BOUNDS` (`+Inf`).
///
/// Between 100 µs and 26.2 s, `ns` lies in the octave `(100 µs × 2^k, 100 µs ×
/// 2^(k+1)]` with `k` the highest set bit of `(ns - 1) / 100 µs` (a bound
/// `100 µs × 2^k` is a multiple of 100 µs, so the floor is exact), that is
/// above bound `4k` and at most bound `4k + 4`; three comparisons place it
/// among the bounds `4k + 1 ..= 4k + 4`.
#[inline]
fn bucket_of(ns: u64) -> usize {
    const LAST_OCTAVE: u64 = BOUND_NS[BOUNDS - 2]; // 100 µs × 2^18, 26.2 s
    if ns <= BOUND_NS[0] {
        return 0;
    }
    if ns > LAST_OCTAVE {
        return if ns <= BOUND_NS[BOUNDS - 1] { BOUNDS - 1 } else { BOUNDS };
    }
    let octave = ((ns - 1) / BOUND_NS[0]).ilog2() as usize; // 0..=17
    let first = 4 * octave + 1;
    first
        + usize::from(ns > BOUND_NS[first])
        + usize::from(ns > BOUND_NS[first + 1])
        + usize::from(ns > BOUND_NS[first + 2])
}

#[cfg(test)]
mod tests;

#[allow(dead_code)]
fn _assert_send_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<LatencyHistogram>();
    send_sync::<HistogramSnapshot>();
}
