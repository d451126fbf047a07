//! The hang and stall thresholds: when a provider that has not answered is
//! judged hung, read from its normal latency (`latency.rs`, the model of its
//! successes' run times) and the dependency's settings.

use std::time::Duration;

/// The least hang threshold: below it, a caller's deadline says nothing.
const HANG_FLOOR: Duration = Duration::from_millis(50);

/// The hang threshold: an attempt the *caller's* deadline cut short counts
/// as a failure of the provider once it had the call for longer than this.
/// The `normal` latency, at least 50 ms, at most the slow-call duration
/// `slow`.
pub(crate) fn hang_threshold(normal: Option<Duration>, slow: Duration) -> Duration {
    normal.map_or(HANG_FLOOR, |l| l.max(HANG_FLOOR)).min(slow.max(HANG_FLOOR))
}

/// The stall threshold: a pool whose every worker has been inside its
/// current job for this long is stuck, and the breaker opens at once. A
/// quarter of the `timeout`, or twice the hang threshold if longer.
pub(crate) fn stall_threshold(normal: Option<Duration>, slow: Duration, timeout: Duration) -> Duration {
    (timeout / 4).max(hang_threshold(normal, slow) * 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::Latency;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn thresholds_start_at_the_floor_and_follow_the_normal_latency() {
        let slow = Duration::from_secs(60);
        let l = Latency::default();
        assert_eq!(hang_threshold(l.normal(), slow), HANG_FLOOR);
        assert_eq!(stall_threshold(l.normal(), slow, Duration::from_secs(10)), 2500 * MS);
        assert_eq!(stall_threshold(l.normal(), slow, 100 * MS), HANG_FLOOR * 2);
        (0..200).for_each(|_| l.record(80 * MS));
        let n = l.normal().unwrap();
        assert_eq!(hang_threshold(l.normal(), slow), n);
        assert_eq!(stall_threshold(l.normal(), slow, 400 * MS), n * 2);
        // A fast provider stops at the floor; the slow-call duration caps a slow one.
        let fast = Latency::default();
        (0..50).for_each(|_| fast.record(MS));
        assert_eq!(hang_threshold(fast.normal(), slow), HANG_FLOOR);
        let sluggish = Latency::default();
        (0..50).for_each(|_| sluggish.record(Duration::from_secs(2)));
        assert_eq!(hang_threshold(sluggish.normal(), 500 * MS), 500 * MS);
        assert_eq!(hang_threshold(sluggish.normal(), MS), HANG_FLOOR);
    }
}
