//! [`Recorder`]: a thread's own counts in a [`LatencyHistogram`].

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Counts, LatencyHistogram, bucket_of, nanos};

/// A thread's own counts in a [`LatencyHistogram`], from
/// [`LatencyHistogram::recorder`]: recording through it costs a load and a
/// store per count instead of a locked read-modify-write.
///
/// Its counts have one writer: recording takes `&mut self`, and a recorder is
/// not `Sync`, so two threads cannot record through one at once (it may move
/// to another thread; the move orders the two threads' records). Dropped, it
/// hands its counts back to the histogram, which keeps them (they are part of
/// every snapshot) for the next recorder to continue; the histogram's mutex
/// orders the last writer's stores before the next writer's loads.
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
///
/// Two threads cannot share one:
///
/// ```compile_fail
/// use std::time::Duration;
/// use watertight::histogram::LatencyHistogram;
///
/// let h = LatencyHistogram::new(Duration::from_secs(30));
/// let mine = h.recorder();
/// std::thread::scope(|s| {
///     s.spawn(|| drop(&mine));
/// });
/// ```
#[derive(Debug)]
#[must_use = "a recorder holds a set of counts until it is dropped; record through it"]
pub struct Recorder<'h> {
    histogram: &'h LatencyHistogram,
    counts: Arc<Counts>,
    /// The histogram's next epoch boundary when last read. Boundaries only
    /// grow, so this is never later than the real one: while `now` is before
    /// it, no rotation is due; at or after it, the histogram decides.
    next_boundary: Option<Instant>,
    /// Not `Sync`: with `&mut self` on `record_at`, the single-writer
    /// invariant of `counts`.
    not_sync: PhantomData<Cell<()>>,
}

impl<'h> Recorder<'h> {
    pub(super) fn new(histogram: &'h LatencyHistogram, counts: Arc<Counts>) -> Recorder<'h> {
        Recorder { histogram, counts, next_boundary: histogram.next_boundary(), not_sync: PhantomData }
    }

    /// Records one duration, now.
    #[inline]
    pub fn record(&mut self, d: Duration) {
        self.record_at(d, Instant::now());
    }

    /// Records one duration at `now` (an instant the caller has just read).
    #[inline]
    pub fn record_at(&mut self, d: Duration, now: Instant) {
        if self.next_boundary.is_none_or(|boundary| now >= boundary) {
            self.histogram.turn(now);
            self.next_boundary = self.histogram.next_boundary();
        }
        let ns = nanos(d);
        self.counts.add_owned(bucket_of(ns), ns);
    }
}

impl Drop for Recorder<'_> {
    fn drop(&mut self) {
        self.histogram.give_back(&self.counts);
    }
}
