//! [`TimeWindow`]: counts over the last `n` buckets of time, the one bucketed
//! time window of the crate: under the breaker's time-based window, the retry
//! budget and the adaptive throttler.
//!
//! A bucket is `N` counts (calls and retries, say). Time is a bucket number,
//! a `tick`: the user's reading of its injected clock since its own start,
//! divided by the bucket's width. The window keeps
//! a running total, so adding and reading are O(1) (amortised). It is not
//! synchronised: each user holds it under its own lock.

/// `N` counts over the last `n` ticks, a bucket of them per tick.
///
/// Invariant: bucket `t % n` holds the counts of tick `t` for every tick in
/// `(head - n, head]` and nothing else; `total` is the sum of all buckets.
/// So at tick `t` the window covers the current, partial bucket and the
/// `n - 1` before it.
#[derive(Debug)]
pub(crate) struct TimeWindow<const N: usize> {
    buckets: Box<[[u64; N]]>,
    head: u64,
    total: [u64; N],
}

impl<const N: usize> TimeWindow<N> {
    /// An empty window of `n` buckets (at least one), at tick 0.
    pub(crate) fn new(n: usize) -> Self {
        assert!(n > 0, "a time window has at least one bucket");
        TimeWindow { buckets: vec![[0; N]; n].into_boxed_slice(), head: 0, total: [0; N] }
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
                let gone = std::mem::replace(&mut self.buckets[i], [0; N]);
                self.total.iter_mut().zip(gone).for_each(|(sum, c)| *sum -= c);
            }
        }
        self.head = tick;
    }

    /// Adds `counts` at `tick`.
    pub(crate) fn add(&mut self, tick: u64, counts: [u64; N]) {
        self.advance(tick);
        let i = self.index(self.head);
        for ((b, sum), c) in self.buckets[i].iter_mut().zip(&mut self.total).zip(counts) {
            (*b, *sum) = (*b + c, *sum + c);
        }
    }

    /// Takes `counts` back out of the newest bucket in the window (at
    /// `tick`) that holds them all; says whether one did.
    pub(crate) fn take_back(&mut self, tick: u64, counts: [u64; N]) -> bool {
        self.advance(tick);
        let oldest = self.head.saturating_sub(self.buckets.len() as u64 - 1);
        let holds = |b: &[u64; N]| b.iter().zip(&counts).all(|(b, c)| b >= c);
        let Some(i) = (oldest..=self.head).rev().map(|t| self.index(t)).find(|&i| holds(&self.buckets[i]))
        else {
            return false;
        };
        for ((b, sum), c) in self.buckets[i].iter_mut().zip(&mut self.total).zip(counts) {
            (*b, *sum) = (*b - c, *sum - c);
        }
        true
    }

    /// The sums over the window as of the last `advance`, `add` or `take_back`.
    pub(crate) fn total(&self) -> [u64; N] {
        self.total
    }

    /// Empties the window (the head stays).
    pub(crate) fn clear(&mut self) {
        self.buckets.fill([0; N]);
        self.total = [0; N];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_by_the_tick() {
        let mut w = TimeWindow::<1>::new(3);
        w.add(0, [1]);
        w.add(1, [10]);
        w.add(2, [100]);
        assert_eq!(w.total(), [111]);
        w.advance(3); // tick 0 leaves
        assert_eq!(w.total(), [110]);
        w.add(4, [1000]); // tick 1 leaves
        assert_eq!(w.total(), [1100]);
        w.advance(100);
        assert_eq!(w.total(), [0]);
        w.add(100, [1]);
        assert_eq!(w.total(), [1]);
        w.clear();
        assert_eq!(w.total(), [0]);
    }

    #[test]
    fn takes_a_late_reading_into_the_current_bucket() {
        let mut w = TimeWindow::<1>::new(2);
        w.add(5, [1]);
        w.add(4, [10]);
        assert_eq!(w.total(), [11]);
        w.advance(6);
        assert_eq!(w.total(), [11]);
        w.advance(7);
        assert_eq!(w.total(), [0]);
    }

    #[test]
    fn takes_back_from_the_newest_bucket_that_holds_it() {
        let mut w = TimeWindow::<1>::new(3);
        w.add(0, [1]);
        w.add(1, [1]);
        w.add(2, [0]);
        assert!(w.take_back(2, [1])); // from tick 1
        w.advance(3); // tick 0 leaves, with its count
        assert_eq!(w.total(), [0]);
        assert!(!w.take_back(3, [1]));
    }
}
