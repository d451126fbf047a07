//! [`RetryBudget`]: the calls and retries of one dependency over the last
//! [`Retry::BUDGET_WINDOW`], and whether one more retry fits.

use std::time::Instant;

use parking_lot::Mutex;

use super::Retry;

/// One-second buckets in the budget window.
pub(super) const BUCKETS: usize = 10;

/// A time-bucketed count of calls and retries, the retry budget of one
/// dependency (see [the budget](Retry#the-budget)).
///
/// Buckets are one second of the injected clock wide, in a ring of
/// [`BUCKETS`]; a bucket whose second has passed out of the window is reset
/// when its slot is reused, and ignored when summed.
///
/// A mutex guards the ring rather than atomics because a withdrawal is a
/// check-then-act over the whole window: with atomics, many threads could pass
/// the check together and overdraw the budget exactly when a provider fails
/// for everyone at once. The critical section is a few additions over ten
/// buckets and is taken only on the retry path.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    base: Instant,
    ring: Mutex<Ring>,
}

#[derive(Debug)]
struct Ring {
    /// The budget's percentage as a fraction of calls.
    ratio: f64,
    /// Retries the floor allows per window: `min_per_sec x window seconds`.
    floor: u64,
    buckets: [Bucket; BUCKETS],
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// The second (since `base`) this bucket counts; stale when it is not
    /// within the last `BUCKETS` seconds.
    second: u64,
    calls: u64,
    retries: u64,
}

impl RetryBudget {
    pub(crate) fn new(retry: &Retry, now: Instant) -> Self {
        let (ratio, floor) = Self::terms(retry);
        RetryBudget {
            base: now,
            ring: Mutex::new(Ring { ratio, floor, buckets: [Bucket::default(); BUCKETS] }),
        }
    }

    fn terms(retry: &Retry) -> (f64, u64) {
        let (percent, min_per_sec) = retry.budget();
        (percent / 100.0, u64::from(min_per_sec) * BUCKETS as u64)
    }

    /// The budget of a new `Retry`, keeping the calls and retries counted so far.
    pub(crate) fn retune(&self, retry: &Retry) {
        let (ratio, floor) = Self::terms(retry);
        let mut ring = self.ring.lock();
        ring.ratio = ratio;
        ring.floor = floor;
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.base).as_secs()
    }

    /// The bucket for `second`, reset first if it held an older second.
    fn bucket(ring: &mut [Bucket; BUCKETS], second: u64) -> &mut Bucket {
        let b = &mut ring[(second % BUCKETS as u64) as usize];
        if b.second != second {
            *b = Bucket { second, calls: 0, retries: 0 };
        }
        b
    }

    /// Counts one call (a first attempt).
    pub(crate) fn deposit(&self, now: Instant) {
        let second = self.second(now);
        let mut ring = self.ring.lock();
        Self::bucket(&mut ring.buckets, second).calls += 1;
    }

    /// Gives back a retry taken by [`try_withdraw`](Self::try_withdraw) at
    /// about `now` that was never made.
    pub(crate) fn refund(&self, now: Instant) {
        let second = self.second(now);
        let oldest = second.saturating_sub(BUCKETS as u64 - 1);
        let mut ring = self.ring.lock();
        // The newest bucket with a retry in it: the one the token came from.
        if let Some(b) = ring
            .buckets
            .iter_mut()
            .filter(|b| b.second >= oldest && b.second <= second && b.retries > 0)
            .max_by_key(|b| b.second)
        {
            b.retries -= 1;
        }
    }

    /// Takes one retry from the budget if it allows one, and says whether it did.
    pub(crate) fn try_withdraw(&self, now: Instant) -> bool {
        let second = self.second(now);
        let oldest = second.saturating_sub(BUCKETS as u64 - 1);
        let mut ring = self.ring.lock();
        let (mut calls, mut retries) = (0u64, 0u64);
        for b in ring.buckets.iter().filter(|b| b.second >= oldest && b.second <= second) {
            calls += b.calls;
            retries += b.retries;
        }
        // Ratio arithmetic in f64: exact for any count a window can hold.
        let allowed = ring.ratio * calls as f64 + ring.floor as f64;
        if (retries + 1) as f64 > allowed {
            return false;
        }
        Self::bucket(&mut ring.buckets, second).retries += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::{Clock, ManualClock};

    #[test]
    fn budget_allows_the_floor_then_the_ratio() {
        let clock = ManualClock::new();
        let budget = RetryBudget::new(&Retry::builder().budget(20.0, 1).build().unwrap(), clock.now());
        // Floor: 1/s over a 10 s window = 10 retries with no calls at all.
        let granted = (0..50).filter(|_| budget.try_withdraw(clock.now())).count();
        assert_eq!(granted, 10);
        // 100 calls earn 20 more.
        for _ in 0..100 {
            budget.deposit(clock.now());
        }
        let granted = (0..50).filter(|_| budget.try_withdraw(clock.now())).count();
        assert_eq!(granted, 20);
    }

    #[test]
    fn budget_window_slides_with_the_clock() {
        let clock = ManualClock::new();
        let budget = RetryBudget::new(&Retry::builder().budget(50.0, 0).build().unwrap(), clock.now());
        for _ in 0..10 {
            budget.deposit(clock.now());
        }
        assert_eq!((0..10).filter(|_| budget.try_withdraw(clock.now())).count(), 5);
        // Nine seconds on, the calls and retries are still in the window.
        clock.advance(Duration::from_secs(9));
        assert!(!budget.try_withdraw(clock.now()));
        // Ten seconds on, both have left it: nothing deposited, nothing allowed.
        clock.advance(Duration::from_secs(1));
        assert!(!budget.try_withdraw(clock.now()));
        budget.deposit(clock.now());
        budget.deposit(clock.now());
        assert!(budget.try_withdraw(clock.now()));
        assert!(!budget.try_withdraw(clock.now()));
    }

    #[test]
    fn budget_is_a_percentage_of_calls() {
        // 20.0 means 20 %: 100 calls earn 20 retries, not 2,000.
        let clock = ManualClock::new();
        let budget = RetryBudget::new(&Retry::builder().budget(20.0, 0).build().unwrap(), clock.now());
        for _ in 0..100 {
            budget.deposit(clock.now());
        }
        let granted = (0..1000).filter(|_| budget.try_withdraw(clock.now())).count();
        assert_eq!(granted, 20);
    }

    #[test]
    fn zero_budget_forbids_retries() {
        let clock = ManualClock::new();
        let budget = RetryBudget::new(&Retry::builder().budget(0.0, 0).build().unwrap(), clock.now());
        for _ in 0..100 {
            budget.deposit(clock.now());
        }
        assert!(!budget.try_withdraw(clock.now()));
    }
}
