//! [`RetryBudget`]: the calls and retries of one dependency over the last
//! [`Retry::BUDGET_WINDOW`], and whether one more retry fits.

use std::time::Instant;

use parking_lot::Mutex;

use super::Retry;
use crate::window::TimeWindow;

/// One-second buckets in the budget window.
pub(super) const BUCKETS: usize = 10;

/// A count of calls and retries over a [`TimeWindow`] of [`BUCKETS`]
/// seconds of the injected clock, the retry budget of one dependency (see
/// [the budget](Retry#the-budget)).
///
/// A mutex guards the window rather than atomics because a withdrawal is a
/// check-then-act over the whole window: with atomics, many threads could pass
/// the check together and overdraw the budget exactly when a provider fails
/// for everyone at once. The critical section is a few additions over ten
/// buckets and is taken only on the retry path.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    base: Instant,
    balance: Mutex<Balance>,
}

#[derive(Debug)]
struct Balance {
    /// The budget's percentage as a fraction of calls.
    ratio: f64,
    /// Retries the floor allows per window: `min_per_sec x window seconds`.
    floor: u64,
    window: TimeWindow<2>,
}

/// A bucket's counts: `[calls, retries]`.
const CALL: [u64; 2] = [1, 0];
const RETRY: [u64; 2] = [0, 1];

impl RetryBudget {
    pub(crate) fn new(retry: &Retry, now: Instant) -> Self {
        let (ratio, floor) = Self::terms(retry);
        RetryBudget {
            base: now,
            balance: Mutex::new(Balance { ratio, floor, window: TimeWindow::new(BUCKETS) }),
        }
    }

    fn terms(retry: &Retry) -> (f64, u64) {
        let (percent, min_per_sec) = retry.budget();
        (percent / 100.0, u64::from(min_per_sec) * BUCKETS as u64)
    }

    /// The budget of a new `Retry`, keeping the calls and retries counted so far.
    pub(crate) fn retune(&self, retry: &Retry) {
        let (ratio, floor) = Self::terms(retry);
        let mut balance = self.balance.lock();
        balance.ratio = ratio;
        balance.floor = floor;
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.base).as_secs()
    }

    /// Counts one call (a first attempt).
    pub(crate) fn deposit(&self, now: Instant) {
        self.balance.lock().window.add(self.second(now), CALL);
    }

    /// Gives back a retry taken by [`try_withdraw`](Self::try_withdraw) at
    /// about `now` that was never made: to the newest bucket with a retry in
    /// it, the one the token came from.
    pub(crate) fn refund(&self, now: Instant) {
        self.balance.lock().window.take_back(self.second(now), RETRY);
    }

    /// Takes one retry from the budget if it allows one, and says whether it did.
    pub(crate) fn try_withdraw(&self, now: Instant) -> bool {
        let second = self.second(now);
        let mut balance = self.balance.lock();
        balance.window.advance(second);
        let [calls, retries] = balance.window.total();
        // Ratio arithmetic in f64: exact for any count a window can hold.
        let allowed = balance.ratio * calls as f64 + balance.floor as f64;
        if (retries + 1) as f64 > allowed {
            return false;
        }
        balance.window.add(second, RETRY);
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
        // A retry given back can be taken again.
        budget.refund(clock.now());
        assert!(budget.try_withdraw(clock.now()));
        assert!(!budget.try_withdraw(clock.now()));
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
}
