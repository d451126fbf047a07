//! Priority admission: the reserved share of a pool that only critical
//! calls may take.
//!
//! One counter, `occupied`, holds the calls of a pool-mode dependency that
//! are admitted and not yet done (queued, waiting for room or running; a job
//! counts until it returns, or is dropped unrun, on its worker). Each
//! priority has a ceiling on it, and a call is admitted by one
//! compare-and-swap that raises `occupied` only while it is below the
//! call's ceiling, so two callers can never both take the last place below
//! a ceiling (no check-then-act):
//!
//! | priority    | ceiling                                   | refused                                  |
//! |-------------|-------------------------------------------|------------------------------------------|
//! | `Critical`  | none here (the pool's own bound applies)  | only by the pool (`queue_full`)          |
//! | `Normal`    | `workers + queue - reserved` (none when nothing is reserved) | when only the reserved share is left |
//! | `Sheddable` | `workers - reserved`                      | as soon as a call would queue            |
//!
//! So under pressure sheddable calls go first (their ceiling is the lowest),
//! then normal ones, and the last `reserved` places are always there for a
//! critical call. With room to spare every priority is admitted: the share
//! is only held back once the pool is that full, so idle workers are never
//! kept idle for calls that may not come.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::priority::Priority;

/// The calls of a pool that are admitted and not done yet.
#[derive(Debug, Default)]
pub(crate) struct Occupancy {
    occupied: AtomicUsize,
}

/// One admitted call's place; dropping it (when the job returns, or is
/// dropped unrun) gives the place back.
#[derive(Debug)]
pub(crate) struct Place(Arc<Occupancy>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.occupied.fetch_sub(1, Ordering::Release);
    }
}

/// The ceiling on `occupied` for a call of `priority`.
fn ceiling(priority: Priority, workers: usize, queue: usize, reserved: usize) -> usize {
    match priority {
        Priority::Critical => usize::MAX,
        // With nothing reserved a normal call is bounded by the pool alone
        // (it may wait for room, as any call may).
        Priority::Normal if reserved == 0 => usize::MAX,
        Priority::Normal => (workers + queue).saturating_sub(reserved),
        Priority::Sheddable => workers.saturating_sub(reserved),
    }
}

impl Occupancy {
    /// A place for a call of `priority`, or `None` when its ceiling is
    /// reached: decided by one compare-and-swap.
    pub(crate) fn take(
        self: &Arc<Self>,
        priority: Priority,
        workers: usize,
        queue: usize,
        reserved: usize,
    ) -> Option<Place> {
        let ceiling = ceiling(priority, workers, queue, reserved);
        self.occupied
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < ceiling).then_some(n + 1))
            .ok()
            .map(|_| Place(Arc::clone(self)))
    }

    /// Calls admitted and not done.
    #[cfg(test)]
    pub(crate) fn occupied(&self) -> usize {
        self.occupied.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sheddable_goes_first_then_normal_and_the_share_stays_for_critical() {
        // 4 workers, a queue of 2, 1 place reserved.
        let o = Arc::new(Occupancy::default());
        let take = |p| o.take(p, 4, 2, 1);
        let mut held: Vec<Place> = (0..3).map(|_| take(Priority::Sheddable).expect("below 3")).collect();
        assert!(take(Priority::Sheddable).is_none(), "a sheddable call would take the 4th worker");
        held.extend((0..2).map(|_| take(Priority::Normal).expect("below 5")));
        assert!(take(Priority::Normal).is_none(), "the last place is reserved");
        held.push(take(Priority::Critical).expect("the reserved place"));
        assert_eq!(o.occupied(), 6);
        drop(held);
        assert_eq!(o.occupied(), 0);
        assert!(take(Priority::Sheddable).is_some(), "with room, every priority is admitted");
    }

    #[test]
    fn no_reserve_means_no_difference_but_sheddable_never_queues() {
        let o = Arc::new(Occupancy::default());
        // Waiters for room included: normal calls are the pool's to bound.
        let held: Vec<Place> = (0..9).map(|_| o.take(Priority::Normal, 4, 2, 0).expect("room")).collect();
        assert_eq!(held.len(), 9);
        assert!(o.take(Priority::Sheddable, 4, 2, 0).is_none());
    }
}
