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
//! [`record`](LatencyHistogram::record) is a few relaxed `fetch_add`s: one
//! bucket and the sum, in the since-creation counts and in the current
//! generation of the recent window. No lock, no allocation.
//!
//! # The recent window
//!
//! Three generations rotate on time. Time is cut into epochs of `window`; epoch
//! `e` writes generation `e % 3`. A reader merges the last complete epoch and the
//! current one, so "recent" covers between one and two windows. When a writer
//! sees a new epoch it moves the epoch forward (one compare-exchange; the winner
//! does the rest) and clears generation `(e + 1) % 3`, the one the *next* epoch
//! will write: it was last written two epochs ago and no reader merges it any
//! more. Nothing writes and clears the same generation at the same time, except a
//! writer that read the epoch before a rotation and adds its sample a whole
//! window late; such a sample may be lost or land in the wrong window, never
//! in the since-creation counts, which are never cleared.
//!
//! # Memory ordering
//!
//! `Relaxed` throughout: every counter is an independent monotonic count (or a
//! reset of one) and publishes no other memory. A snapshot taken while samples
//! are recorded may be a few samples apart between buckets and sum.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

    #[inline]
    fn add(&self, bucket: usize, ns: u64) {
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn clear(&self) {
        for b in &self.buckets {
            b.store(0, Ordering::Relaxed);
        }
        self.sum_ns.store(0, Ordering::Relaxed);
    }

    fn add_into(&self, snap: &mut HistogramSnapshot) {
        for (into, b) in snap.buckets.iter_mut().zip(&self.buckets) {
            *into += b.load(Ordering::Relaxed);
        }
        snap.sum_ns = snap.sum_ns.saturating_add(self.sum_ns.load(Ordering::Relaxed));
    }
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
    total: Counts,
    generations: [Counts; 3],
    /// The epoch generation `epoch % 3` is being written for.
    epoch: AtomicU64,
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
        let window_ns = u64::try_from(window.as_nanos()).unwrap_or(u64::MAX).max(1_000_000);
        LatencyHistogram {
            total: Counts::new(),
            generations: std::array::from_fn(|_| Counts::new()),
            epoch: AtomicU64::new(0),
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
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let bucket = bucket_of(ns);
        self.total.add(bucket, ns);
        let epoch = self.epoch_at(now);
        let seen = self.epoch.load(Ordering::Relaxed);
        if epoch > seen {
            self.rotate(seen, epoch);
        }
        self.generations[(epoch % 3) as usize].add(bucket, ns);
    }

    /// Moves the epoch from `seen` to `epoch`. The winner clears the generation
    /// the epoch after `epoch` will write. After a silence (a jump of two epochs
    /// or more) every generation is stale and all three are cleared; a sample
    /// that another writer adds to the new epoch's generation at that same
    /// moment may be cleared with them (it stays in the since-creation counts).
    #[cold]
    fn rotate(&self, seen: u64, epoch: u64) {
        if self.epoch.compare_exchange(seen, epoch, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return; // another writer rotated (or is further ahead)
        }
        if epoch - seen == 1 {
            self.generations[((epoch + 1) % 3) as usize].clear();
        } else {
            self.generations.iter().for_each(Counts::clear);
        }
    }

    fn epoch_at(&self, now: Instant) -> u64 {
        let since = u64::try_from(now.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX);
        since / self.window_ns
    }

    /// Every sample since creation.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut snap = HistogramSnapshot::empty();
        self.total.add_into(&mut snap);
        snap
    }

    /// The samples of the recent window, now: the last complete epoch and the
    /// current one (between one and two windows).
    pub fn recent(&self) -> HistogramSnapshot {
        self.recent_at(Instant::now())
    }

    /// [`recent`](Self::recent) at `now`.
    pub fn recent_at(&self, now: Instant) -> HistogramSnapshot {
        let mut snap = HistogramSnapshot::empty();
        let now_epoch = self.epoch_at(now);
        let written = self.epoch.load(Ordering::Relaxed);
        // Generations of `written` and `written - 1`, if they are recent at `now`.
        for e in [written, written.wrapping_sub(1)] {
            if e != u64::MAX && e <= now_epoch && now_epoch - e <= 1 {
                self.generations[(e % 3) as usize].add_into(&mut snap);
            }
        }
        snap
    }
}

/// The bucket a duration of `ns` nanoseconds falls in: the first bound `>= ns`,
/// or `BOUNDS` (`+Inf`).
#[inline]
fn bucket_of(ns: u64) -> usize {
    BOUND_NS.partition_point(|&bound| bound < ns)
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
        // Epoch 3: only epoch 2 is left; epoch 0's generation was cleared on the way.
        h.record_at(Duration::from_millis(30), at(31));
        assert_eq!(h.recent_at(at(31)).count(), 2);
        // Long silence: nothing is recent, everything is still in the total.
        assert_eq!(h.recent_at(at(100)).count(), 0);
        assert_eq!(h.snapshot().count(), 5);
        // Writing after a silence starts clean, whichever generation comes next
        // (epoch 3 -> 5, the generation epoch 2 wrote; then 5 -> 9, and so on).
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
}
