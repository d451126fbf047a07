//! [`LatencyHistogram`]: a lock-free latency histogram with fixed, log-spaced
//! buckets from 100 µs to 30 s, counted since creation and over a recent window.
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
//! relaxed load of the next epoch boundary and one comparison: no lock, no
//! allocation, no division. The bucket is found from the octave (a
//! leading-zeros count) and three comparisons inside it.
//!
//! A thread that records many samples (a pool's worker records two per call)
//! can take a [`Recorder`]: counts of its own that only it writes, so each
//! count is a plain load and store rather than a locked read-modify-write.
//! Readers add every recorder's counts to the shared ones. A recorder's counts
//! outlive it: the next recorder taken on the histogram continues them.
//!
//! # The recent window
//!
//! Time is cut into epochs of `window`. The first writer of a new epoch takes a
//! *mark*: the counts as they stand when the epoch begins. A reader subtracts
//! the mark of the last complete epoch from the counts now, so "recent" covers
//! between one and two windows. Marks, the epoch and the list of recorders'
//! counts live under one mutex, which the hot path never takes: a rotation
//! (once a window) and readers do.
//!
//! Samples are never lost: the counts only grow. A sample recorded while
//! another writer rotates may be counted in the epoch next to its own.
//!
//! # Memory ordering
//!
//! Every counter is an independent monotonic count and publishes no other
//! memory: `Relaxed`. A snapshot taken while samples are recorded may be a few
//! samples apart between buckets and sum.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

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
struct Counts {
    buckets: [AtomicU64; BOUNDS + 1],
    sum_ns: AtomicU64,
}

impl Counts {
    fn new() -> Counts {
        Counts { buckets: std::array::from_fn(|_| AtomicU64::new(0)), sum_ns: AtomicU64::new(0) }
    }

    /// Adds one sample; any number of threads at once.
    #[inline]
    fn add_shared(&self, bucket: usize, ns: u64) {
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Adds one sample, for the one thread that writes these counts (see
    /// [`Recorder`]): a load and a store each, which no other writer can
    /// interleave with.
    #[inline]
    fn add_owned(&self, bucket: usize, ns: u64) {
        let b = &self.buckets[bucket];
        b.store(b.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        self.sum_ns.store(self.sum_ns.load(Ordering::Relaxed).wrapping_add(ns), Ordering::Relaxed);
    }

    fn add_into(&self, snap: &mut HistogramSnapshot) {
        for (into, b) in snap.buckets.iter_mut().zip(&self.buckets) {
            *into = into.wrapping_add(b.load(Ordering::Relaxed));
        }
        snap.sum_ns = snap.sum_ns.wrapping_add(self.sum_ns.load(Ordering::Relaxed));
    }
}

/// What the mutex of a [`LatencyHistogram`] guards.
#[derive(Debug)]
struct Rare {
    /// The recorders' counts, and whether a live [`Recorder`] holds each.
    /// Invariant: a held entry's counts are written by its recorder only.
    owned: Vec<(Arc<Counts>, bool)>,
    /// The last epoch a writer has begun.
    epoch: u64,
    /// `marks[e % 3]`: the counts when epoch `e` began, for `e` the epoch and
    /// the one before it (all zero at first, as epoch 0 began empty).
    marks: [HistogramSnapshot; 3],
}

/// A latency histogram: fixed log-spaced buckets from 100 µs to 30 s, recorded
/// without a lock, read as a [`HistogramSnapshot`] since creation
/// ([`snapshot`](Self::snapshot)) or over a recent window
/// ([`recent`](Self::recent)). See the [module docs](self).
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
    shared: Counts,
    /// The nanosecond (since `origin`) at which the next epoch begins: writers
    /// compare against it, and the first to reach it rotates. `u64::MAX`
    /// while a rotation is under way.
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
        let window_ns = nanos(window).max(1_000_000);
        LatencyHistogram {
            shared: Counts::new(),
            next_epoch_ns: AtomicU64::new(window_ns),
            rare: Mutex::new(Rare {
                owned: Vec::new(),
                epoch: 0,
                marks: std::array::from_fn(|_| HistogramSnapshot::empty()),
            }),
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
        let ns = nanos(d);
        self.shared.add_shared(bucket_of(ns), ns);
    }

    /// Counts of this histogram's own for the calling thread to record into,
    /// more cheaply than [`record_at`](Self::record_at) (see the [module
    /// docs](self)). Takes the histogram's mutex; meant to be taken once by a
    /// long-lived thread, not per sample.
    pub fn recorder(&self) -> Recorder<'_> {
        let mut rare = self.rare.lock();
        let free = rare.owned.iter_mut().find(|(_, held)| !*held);
        let counts = match free {
            Some((counts, held)) => {
                *held = true;
                Arc::clone(counts)
            }
            None => {
                let counts = Arc::new(Counts::new());
                rare.owned.push((Arc::clone(&counts), true));
                counts
            }
        };
        Recorder { histogram: self, counts, not_sync: PhantomData }
    }

    /// Rotates if `now` is past the current epoch.
    #[inline]
    fn turn(&self, now: Instant) {
        let since = nanos(now.saturating_duration_since(self.origin));
        if since >= self.next_epoch_ns.load(Ordering::Relaxed) {
            self.rotate(since);
        }
    }

    /// Begins the epoch `since` falls in, unless another writer already is.
    /// The winner of the compare-exchange on the boundary parks it at
    /// `u64::MAX` (writers that come meanwhile record without rotating),
    /// marks the new epoch (and, after a silence, the epoch before it: nothing
    /// was recorded between them) under the mutex, and then sets the next
    /// boundary.
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
        {
            let mut rare = self.rare.lock();
            // The boundary is the start of the epoch after `rare.epoch`, so `epoch > rare.epoch`.
            let now = self.total(&rare);
            if epoch - rare.epoch >= 2 {
                rare.marks[((epoch - 1) % 3) as usize] = now.clone();
            }
            rare.marks[(epoch % 3) as usize] = now;
            rare.epoch = epoch;
        }
        let next = epoch.saturating_add(1).saturating_mul(self.window_ns);
        self.next_epoch_ns.store(next, Ordering::Relaxed);
    }

    fn total(&self, rare: &Rare) -> HistogramSnapshot {
        let mut snap = HistogramSnapshot::empty();
        self.shared.add_into(&mut snap);
        for (counts, _) in &rare.owned {
            counts.add_into(&mut snap);
        }
        snap
    }

    fn epoch_at(&self, now: Instant) -> u64 {
        nanos(now.saturating_duration_since(self.origin)) / self.window_ns
    }

    /// Every sample since creation.
    pub fn snapshot(&self) -> HistogramSnapshot {
        self.total(&self.rare.lock())
    }

    /// The samples of the recent window, now: the last complete epoch and the
    /// current one (between one and two windows).
    pub fn recent(&self) -> HistogramSnapshot {
        self.recent_at(Instant::now())
    }

    /// [`recent`](Self::recent) at `now`.
    pub fn recent_at(&self, now: Instant) -> HistogramSnapshot {
        let now_epoch = self.epoch_at(now);
        let rare = self.rare.lock();
        let written = rare.epoch;
        // The samples since the mark of the epoch before `now_epoch`. A reader
        // whose `now` is behind the last writer's reads as of that epoch.
        let since_epoch = match now_epoch.saturating_sub(written) {
            0 => written.saturating_sub(1),
            1 => written,
            _ => return HistogramSnapshot::empty(), // nothing in the last two epochs
        };
        self.total(&rare).minus(&rare.marks[(since_epoch % 3) as usize])
    }
}

/// A thread's own counts in a [`LatencyHistogram`], from
/// [`LatencyHistogram::recorder`]: recording through it costs a load and a
/// store per count instead of a locked read-modify-write. It can be sent to
/// another thread but not shared (it is not `Sync`), so its counts have one
/// writer. Dropped, it hands its counts back to the histogram, which keeps them
/// (they are part of every snapshot) for the next recorder to continue.
///
/// ```
/// use std::time::{Duration, Instant};
/// use watertight::histogram::LatencyHistogram;
///
/// let h = LatencyHistogram::new(Duration::from_secs(30));
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             let mut mine = h.recorder();
///             for _ in 0..1000 {
///                 mine.record_at(Duration::from_millis(3), Instant::now());
///             }
///         });
///     }
/// });
/// h.record(Duration::from_millis(3));
/// assert_eq!(h.snapshot().count(), 2001);
/// ```
#[derive(Debug)]
pub struct Recorder<'h> {
    histogram: &'h LatencyHistogram,
    counts: Arc<Counts>,
    /// Not `Sync`: the single-writer invariant of `counts`.
    not_sync: PhantomData<Cell<()>>,
}

impl Recorder<'_> {
    /// Records one duration at `now` (an instant the caller has just read).
    /// `&mut self`: one sample at a time, from the thread that holds it.
    #[inline]
    pub fn record_at(&mut self, d: Duration, now: Instant) {
        self.histogram.turn(now);
        let ns = nanos(d);
        self.counts.add_owned(bucket_of(ns), ns);
    }
}

impl Drop for Recorder<'_> {
    fn drop(&mut self) {
        let mut rare = self.histogram.rare.lock();
        if let Some(entry) = rare.owned.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &self.counts)) {
            entry.1 = false;
        }
    }
}

/// A duration in nanoseconds, saturating at about 584 years.
#[inline]
fn nanos(d: Duration) -> u64 {
    d.as_secs().saturating_mul(1_000_000_000).saturating_add(u64::from(d.subsec_nanos()))
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

/// Bucket counts at one moment, from [`LatencyHistogram::snapshot`] or
/// [`LatencyHistogram::recent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Per bucket (not cumulative); the last is `+Inf`.
    buckets: [u64; BOUNDS + 1],
    sum_ns: u64,
}

impl HistogramSnapshot {
    fn empty() -> HistogramSnapshot {
        HistogramSnapshot { buckets: [0; BOUNDS + 1], sum_ns: 0 }
    }

    /// The samples of `self` that are not in `earlier`, bucket by bucket.
    fn minus(mut self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        for (n, e) in self.buckets.iter_mut().zip(&earlier.buckets) {
            *n = n.saturating_sub(*e);
        }
        self.sum_ns = self.sum_ns.saturating_sub(earlier.sum_ns);
        self
    }

    /// How many samples.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Their sum (saturating at about 584 years).
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_ns)
    }

    /// Their mean, `None` without samples.
    pub fn mean(&self) -> Option<Duration> {
        let n = self.count();
        (n > 0).then(|| Duration::from_nanos(self.sum_ns / n))
    }

    /// The `q`-quantile (`0.5` for the median, `0.99` for p99), interpolated
    /// linearly inside its bucket, as Prometheus' `histogram_quantile` does; a
    /// quantile that falls in the `+Inf` bucket is reported as 30 s. `None`
    /// when there is no sample, or when `q` is not in `0.0..=1.0` (NaN included).
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if !(0.0..=1.0).contains(&q) {
            return None;
        }
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = q * count as f64;
        let mut below = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                if i == BOUNDS {
                    return Some(Duration::from_nanos(BOUND_NS[BOUNDS - 1]));
                }
                let lower = if i == 0 { 0 } else { BOUND_NS[i - 1] } as f64;
                let upper = BOUND_NS[i] as f64;
                let within = ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
                return Some(Duration::from_nanos((lower + (upper - lower) * within) as u64));
            }
            below += n;
        }
        Some(Duration::from_nanos(BOUND_NS[BOUNDS - 1]))
    }

    /// Cumulative counts at every `step`-th finite bound (`step` 1: all 74; 4:
    /// the 19 power-of-two multiples of 100 µs), then `(None, count)` for
    /// `+Inf`: the `le` buckets of a Prometheus histogram. A `step` of 0 is
    /// taken as 1.
    pub fn cumulative(&self, step: usize) -> Vec<(Option<Duration>, u64)> {
        let step = step.max(1);
        let mut out = Vec::with_capacity(BOUNDS / step + 2);
        let mut running = 0u64;
        for (i, &n) in self.buckets[..BOUNDS].iter().enumerate() {
            running += n;
            if i % step == 0 || i == BOUNDS - 1 {
                out.push((Some(Duration::from_nanos(BOUND_NS[i])), running));
            }
        }
        out.push((None, running + self.buckets[BOUNDS]));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn bounds_run_from_100_us_to_30_s_in_steps_of_at_most_19_percent() {
        let bounds: Vec<Duration> = LatencyHistogram::bounds().collect();
        assert_eq!(bounds.len(), BOUNDS);
        assert_eq!(bounds[0], Duration::from_micros(100));
        assert_eq!(bounds[BOUNDS - 1], Duration::from_secs(30));
        for pair in bounds.windows(2) {
            let ratio = pair[1].as_secs_f64() / pair[0].as_secs_f64();
            assert!(ratio > 1.0 && ratio < 1.19, "{pair:?}: {ratio}");
        }
        assert_eq!(bounds[4], Duration::from_micros(200), "every fourth bound doubles");
        assert_eq!(bounds[40], Duration::from_micros(100 << 10));
    }

    #[test]
    fn samples_land_in_the_bucket_whose_bound_they_do_not_exceed() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(100_000), 0, "a bound is inclusive (Prometheus' le)");
        assert_eq!(bucket_of(100_001), 1);
        assert_eq!(bucket_of(30_000_000_000), BOUNDS - 1);
        assert_eq!(bucket_of(30_000_000_001), BOUNDS);
        assert_eq!(bucket_of(u64::MAX), BOUNDS);
    }

    #[test]
    fn the_octave_search_agrees_with_a_binary_search_of_the_bounds() {
        let reference = |ns: u64| BOUND_NS.partition_point(|&bound| bound < ns);
        for &bound in &BOUND_NS {
            for ns in bound.saturating_sub(2)..=bound.saturating_add(2) {
                assert_eq!(bucket_of(ns), reference(ns), "{ns} ns");
            }
        }
        // And a spread of values in between, from 1 ns to past 30 s.
        let mut ns = 1u64;
        while ns < 40_000_000_000 {
            assert_eq!(bucket_of(ns), reference(ns), "{ns} ns");
            ns = ns + ns / 997 + 1;
        }
    }

    #[test]
    fn quantiles_are_within_ten_percent() {
        let h = LatencyHistogram::new(Duration::from_secs(60));
        for ms in 1..=1000 {
            h.record(Duration::from_millis(ms));
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 1000);
        assert_eq!(s.sum(), Duration::from_millis(500_500));
        assert_eq!(s.mean(), Some(Duration::from_micros(500_500)));
        for (q, want) in [(0.5, 500.0), (0.9, 900.0), (0.99, 990.0), (0.01, 10.0)] {
            let got = s.quantile(q).unwrap().as_secs_f64() * 1000.0;
            assert!((got - want).abs() / want < 0.10, "q {q}: {got} ms, want about {want} ms");
        }
        assert!(s.quantile(0.0).unwrap() <= Duration::from_millis(1), "the smallest sample's bucket");
        assert!(s.quantile(1.0).unwrap() >= Duration::from_millis(1000));
    }

    #[test]
    fn bad_quantiles_and_empty_histograms_give_none() {
        let h = LatencyHistogram::new(Duration::from_secs(1));
        assert_eq!(h.snapshot().quantile(0.5), None);
        assert_eq!(h.snapshot().mean(), None);
        h.record(Duration::from_millis(5));
        for q in [-0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert_eq!(h.snapshot().quantile(q), None, "q {q}");
        }
        assert!(h.snapshot().quantile(0.5).is_some());
    }

    #[test]
    fn over_30_s_is_counted_in_inf_and_reported_as_30_s() {
        let h = LatencyHistogram::new(Duration::from_secs(1));
        h.record(Duration::from_secs(3600));
        let s = h.snapshot();
        assert_eq!(s.quantile(0.5), Some(Duration::from_secs(30)));
        let cumulative = s.cumulative(4);
        assert_eq!(cumulative.last(), Some(&(None, 1)));
        assert_eq!(cumulative[cumulative.len() - 2], (Some(Duration::from_secs(30)), 0));
    }

    #[test]
    fn cumulative_buckets_are_exact_at_every_kept_bound() {
        let h = LatencyHistogram::new(Duration::from_secs(1));
        for us in [50, 100, 150, 250, 1_000, 90_000, 40_000_000] {
            h.record(Duration::from_micros(us));
        }
        let coarse = h.snapshot().cumulative(4);
        assert_eq!(coarse.len(), 19 + 1 + 1, "19 doublings, 30 s, +Inf");
        let at = |d: Duration| coarse.iter().find(|(b, _)| *b == Some(d)).map(|(_, n)| *n);
        assert_eq!(at(Duration::from_micros(100)), Some(2));
        assert_eq!(at(Duration::from_micros(200)), Some(3));
        assert_eq!(at(Duration::from_micros(400)), Some(4));
        assert_eq!(at(Duration::from_micros(1_600)), Some(5));
        assert_eq!(at(Duration::from_secs(30)), Some(6));
        assert_eq!(coarse.last(), Some(&(None, 7)));
        let fine = h.snapshot().cumulative(1);
        assert_eq!(fine.len(), BOUNDS + 1);
        assert!(fine.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative never decreases");
    }

    #[test]
    fn the_recent_window_forgets_what_is_two_windows_old() {
        let t0 = Instant::now();
        let w = Duration::from_secs(10);
        let h = LatencyHistogram::starting_at(w, t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        h.record_at(Duration::from_millis(1), at(1));
        h.record_at(Duration::from_millis(1), at(9));
        assert_eq!(h.recent_at(at(9)).count(), 2);
        // Epoch 1: epoch 0 is the last complete one, still recent.
        h.record_at(Duration::from_millis(500), at(12));
        assert_eq!(h.recent_at(at(12)).count(), 3);
        // Epoch 2 (nothing written yet): epoch 1 is recent, epoch 0 is not.
        let r = h.recent_at(at(25));
        assert_eq!(r.count(), 1);
        assert!(r.quantile(0.5).unwrap() > Duration::from_millis(400));
        // Epoch 2 written: the same.
        h.record_at(Duration::from_millis(20), at(26));
        assert_eq!(h.recent_at(at(26)).count(), 2);
        // Epoch 3: only epoch 2 is left; epoch 0's mark was overwritten on the way.
        h.record_at(Duration::from_millis(30), at(31));
        assert_eq!(h.recent_at(at(31)).count(), 2);
        // A reader whose clock is behind the last writer's reads as of that epoch.
        assert_eq!(h.recent_at(at(29)).count(), 2);
        // Long silence: nothing is recent, everything is still in the total.
        assert_eq!(h.recent_at(at(100)).count(), 0);
        assert_eq!(h.snapshot().count(), 5);
        // Writing after a silence starts clean, whichever slots the marks take
        // (epoch 3 -> 5 marks 4 and 5; then 5 -> 9, and so on).
        for (s, epoch) in [(55, 5), (95, 9), (130, 13), (165, 16)] {
            h.record_at(Duration::from_millis(7), at(s));
            assert_eq!(h.recent_at(at(s)).count(), 1, "epoch {epoch}");
        }
        assert_eq!(h.snapshot().count(), 9);
    }

    #[test]
    fn concurrent_records_are_all_counted() {
        const THREADS: usize = 4;
        const EACH: u64 = 20_000;
        let h = Arc::new(LatencyHistogram::new(Duration::from_secs(3600)));
        let start = Arc::new(Barrier::new(THREADS));
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (h, start) = (Arc::clone(&h), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    for i in 0..EACH {
                        h.record(Duration::from_micros(100 + (i + t as u64) % 5_000));
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let expected_sum: u64 = (0..THREADS as u64)
            .map(|t| (0..EACH).map(|i| (100 + (i + t) % 5_000) * 1_000).sum::<u64>())
            .sum();
        for s in [h.snapshot(), h.recent()] {
            assert_eq!(s.count(), THREADS as u64 * EACH);
            assert_eq!(s.sum(), Duration::from_nanos(expected_sum));
        }
    }

    #[test]
    fn writers_racing_through_rotations_lose_no_sample() {
        const THREADS: u64 = 4;
        const EPOCHS: u64 = 500;
        const PER_EPOCH: u64 = 100; // a thread's samples in each 1 ms epoch, 10 µs apart
        let t0 = Instant::now();
        let h = Arc::new(LatencyHistogram::starting_at(Duration::from_millis(1), t0));
        // The threads walk the epochs together, as threads that read the clock
        // just before recording do; inside an epoch they race each other and
        // its rotation.
        let step = Arc::new(Barrier::new(THREADS as usize));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (h, step) = (Arc::clone(&h), Arc::clone(&step));
                std::thread::spawn(move || {
                    for e in 0..EPOCHS {
                        step.wait();
                        for i in 0..PER_EPOCH {
                            let at = t0 + Duration::from_micros(e * 1_000 + i * 10);
                            h.record_at(Duration::from_micros(200), at);
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let total = h.snapshot();
        assert_eq!(total.count(), THREADS * EPOCHS * PER_EPOCH);
        assert_eq!(total.sum(), Duration::from_micros(200 * THREADS * EPOCHS * PER_EPOCH));
        // The last epoch and the one before: 200 samples a thread, less those
        // recorded while the epoch before was being marked (counted before it).
        let last = t0 + Duration::from_micros(EPOCHS * 1_000 - 1);
        let recent = h.recent_at(last).count();
        let window = 2 * PER_EPOCH * THREADS;
        assert!(recent <= window && recent >= window / 2, "recent {recent} of {window}");
        assert!(h.recent_at(last + Duration::from_millis(1)).count() <= recent, "a later reader sees less");
    }

    #[test]
    fn recorders_count_beside_shared_writers_and_hand_their_counts_on() {
        const THREADS: u64 = 3;
        const EACH: u64 = 20_000;
        let h = LatencyHistogram::new(Duration::from_secs(3600));
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let h = &h;
                s.spawn(move || {
                    let mut mine = h.recorder();
                    for i in 0..EACH {
                        mine.record_at(Duration::from_micros(150 + i % 7), Instant::now());
                        if t == 0 {
                            h.record(Duration::from_millis(2)); // a shared writer beside them
                        }
                    }
                });
            }
        });
        let s = h.snapshot();
        assert_eq!(s.count(), (THREADS + 1) * EACH);
        let owned_sum: u64 = (0..EACH).map(|i| (150 + i % 7) * 1_000).sum::<u64>() * THREADS;
        assert_eq!(s.sum(), Duration::from_nanos(owned_sum + 2_000_000 * EACH));
        assert_eq!(h.recent().count(), (THREADS + 1) * EACH);
        // A thread that started after another had finished took over its counts.
        let slots = h.rare.lock().owned.len();
        assert!((1..=THREADS as usize).contains(&slots), "{slots} sets of counts");
        // A recorder taken now continues a dropped one's counts; none is lost.
        let mut again = h.recorder();
        again.record_at(Duration::from_millis(1), Instant::now());
        assert_eq!(h.rare.lock().owned.len(), slots);
        assert_eq!(h.snapshot().count(), (THREADS + 1) * EACH + 1);
        let more: Vec<_> = (0..slots).map(|_| h.recorder()).collect();
        assert_eq!(h.rare.lock().owned.len(), slots + 1, "all held: a new set of counts");
        drop((again, more));
        assert!(h.rare.lock().owned.iter().all(|(_, held)| !*held));
    }

    #[test]
    fn recorders_rotate_the_window_too() {
        let t0 = Instant::now();
        let h = LatencyHistogram::starting_at(Duration::from_secs(10), t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut mine = h.recorder();
        mine.record_at(Duration::from_millis(1), at(1));
        h.record_at(Duration::from_millis(1), at(2));
        mine.record_at(Duration::from_millis(1), at(15));
        assert_eq!(h.recent_at(at(15)).count(), 3);
        mine.record_at(Duration::from_millis(1), at(25));
        assert_eq!(h.recent_at(at(25)).count(), 2, "epoch 0 is two windows old");
        drop(mine);
        assert_eq!(h.recent_at(at(25)).count(), 2, "a dropped recorder's samples stay");
        assert_eq!(h.snapshot().count(), 4);
    }
}
