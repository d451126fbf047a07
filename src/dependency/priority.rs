//! Priority admission: the reserved share of a pool that only critical
//! calls may take.
//!
//! The calls of a pool-mode dependency that are admitted and not yet done
//! (queued, waiting for room or running; a job counts until it returns, or
//! is dropped unrun, on its worker) each hold a seat of one [`Room`], a
//! class per priority. Each priority has a ceiling on the seats held in
//! all, and a call takes its seat only below its ceiling, under the room's
//! lock, so two callers can never both take the last place below a ceiling
//! (no check-then-act). The ceilings follow the pool's live size:
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

use std::time::Duration;

use crate::priority::Priority;
use crate::room::{Room, Seat};

/// One admitted call's place; dropping it (when the job returns, or is
/// dropped unrun) gives the place back.
pub(crate) type Place = Seat;

/// The room the places are seats of: one class per priority, no wait.
pub(crate) fn places() -> Room {
    Room::with_shares(usize::MAX, Duration::ZERO, &[0; 3]).expect("a valid room")
}

/// The ceiling on the places held in all for a call of `priority`.
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

/// A place in `room` for a call of `priority`, or `None` when its ceiling is
/// reached.
pub(crate) fn take(
    room: &Room,
    priority: Priority,
    workers: usize,
    queue: usize,
    reserved: usize,
) -> Option<Place> {
    room.seat_below(priority as usize, ceiling(priority, workers, queue, reserved))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sheddable_goes_first_then_normal_and_the_share_stays_for_critical() {
        // 4 workers, a queue of 2, 1 place reserved.
        let room = places();
        let take = |p| take(&room, p, 4, 2, 1);
        let mut held: Vec<Place> = (0..3).map(|_| take(Priority::Sheddable).expect("below 3")).collect();
        assert!(take(Priority::Sheddable).is_none(), "a sheddable call would take the 4th worker");
        held.extend((0..2).map(|_| take(Priority::Normal).expect("below 5")));
        assert!(take(Priority::Normal).is_none(), "the last place is reserved");
        held.push(take(Priority::Critical).expect("the reserved place"));
        assert_eq!(room.in_use(), 6);
        assert_eq!((room.held_by(0), room.held_by(1), room.held_by(2)), (3, 2, 1), "a class per priority");
        drop(held);
        assert_eq!(room.in_use(), 0);
        assert!(take(Priority::Sheddable).is_some(), "with room, every priority is admitted");
        // The places are the room's seats: counted there.
        let counts = room.counts();
        assert_eq!((counts.seated, counts.waited, counts.refused), (7, 0, 2), "{counts:?}");
    }

    #[test]
    fn no_reserve_means_no_difference_but_sheddable_never_queues() {
        let room = places();
        // Waiters for room included: normal calls are the pool's to bound.
        let held: Vec<Place> =
            (0..9).map(|_| take(&room, Priority::Normal, 4, 2, 0).expect("room")).collect();
        assert_eq!(held.len(), 9);
        assert!(take(&room, Priority::Sheddable, 4, 2, 0).is_none());
    }
}
