//! [`TimeWindow`]: counts over the last `n` buckets of time, the one bucketed
//! time window of the crate: under the breaker's time-based window, the retry
//! budget and the adaptive throttler.
//!
//! Time is a bucket number, a `tick`: the user's reading of its injected
//! clock since its own start, divided by the bucket's width. The window keeps
//! a running total, so adding and reading are O(1) (amortised). It is not
//! synchronised: each user holds it under its own lock.

use std::ops::{AddAssign, SubAssign};

/// The counts `C` of the last `n` ticks, a bucket per tick.
///
/// Invariant: bucket `t % n` holds the counts of tick `t` for every tick in
/// `(head - n, head]` and nothing else; `total` is the sum of all buckets.
/// So at tick `t` the window covers the current, partial bucket and the
/// `n - 1` before it.
#[derive(Debug)]
pub(crate) struct TimeWindow<C> {
    buckets: Box<[C]>,
    head: u64,
    total: C,
}

impl<C: Copy + Default + AddAssign + SubAssign> TimeWindow<C> {
    /// An empty window of `n` buckets (at least one), at tick 0.
    pub(crate) fn new(n: usize) -> Self {
        assert!(n > 0, "a time window has at least one bucket");
        TimeWindow { buckets: vec![C::default(); n].into_boxed_slice(), head: 0, total: C::default() }
    }

    fn index(&self, tick: u64) -> usize {
        // The remainder is below `buckets.len()`, which is a `usize`.
        (tick % self.buckets.len() as u64) as usize
    }

    /// Moves the head to `tick`, emptying the buckets of the ticks that left
    /// the window. An older `tick` (a thread that read the clock before
    /// another one took the lock) leaves the head where it is, and what it
    /// adds lands in the current bucket: off by under a bucket, never lost.
    pub(crate) fn advance(&mut self, tick: u64) {
        if tick <= self.head {
            return;
        }
        if tick - self.head >= self.buckets.len() as u64 {
            self.clear();
        } else {
            for t in self.head + 1..=tick {
                let i = self.index(t);
                self.total -= std::mem::take(&mut self.buckets[i]);
            }
        }
        self.head = tick;
    }

    /// Adds `counts` at `tick`.
    pub(crate) fn add(&mut self, tick: u64, counts: C) {
        self.advance(tick);
        let i = self.index(self.head);
        self.buckets[i] += counts;
        self.total += counts;
    }

    /// Takes `counts` back, at `tick`, out of the newest bucket in the window
    /// that `holds` them; says whether one did.
    pub(crate) fn take_back(&mut self, tick: u64, counts: C, holds: impl Fn(&C) -> bool) -> bool {
        self.advance(tick);
        let oldest = self.head.saturating_sub(self.buckets.len() as u64 - 1);
        let Some(i) = (oldest..=self.head).rev().map(|t| self.index(t)).find(|&i| holds(&self.buckets[i]))
        else {
            return false;
        };
        self.buckets[i] -= counts;
        self.total -= counts;
        true
    }

    /// The sum over the window as of the last `advance`, `add` or `take_back`.
    pub(crate) fn total(&self) -> C {
        self.total
    }

    /// Empties the window (the head stays).
    pub(crate) fn clear(&mut self) {
        self.buckets.fill(C::default());
        self.total = C::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_by_the_tick() {
        let mut w = TimeWindow::<u64>::new(3);
        w.add(0, 1);
        w.add(1, 10);
        w.add(2, 100);
        assert_eq!(w.total(), 111);
        w.advance(3); // tick 0 leaves
        assert_eq!(w.total(), 110);
        w.add(4, 1000); // tick 1 leaves
        assert_eq!(w.total(), 1100);
        w.advance(100);
        assert_eq!(w.total(), 0);
        w.add(100, 1);
        assert_eq!(w.total(), 1);
        w.clear();
        assert_eq!(w.total(), 0);
    }

    #[test]
    fn takes_a_late_reading_into_the_current_bucket() {
        let mut w = TimeWindow::<u64>::new(2);
        w.add(5, 1);
        w.add(4, 10);
        assert_eq!(w.total(), 11);
        w.advance(6);
        assert_eq!(w.total(), 11);
        w.advance(7);
        assert_eq!(w.total(), 0);
    }

    #[test]
    fn takes_back_from_the_newest_bucket_that_holds_it() {
        let mut w = TimeWindow::<u64>::new(3);
        w.add(0, 1);
        w.add(1, 1);
        w.add(2, 0);
        assert!(w.take_back(2, 1, |c| *c > 0)); // from tick 1
        w.advance(3); // tick 0 leaves, with its count
        assert_eq!(w.total(), 0);
        assert!(!w.take_back(3, 1, |c| *c > 0));
    }
}
