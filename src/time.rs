//! Durations as the `u64` nanoseconds that atomics hold.

use std::time::{Duration, Instant};

/// The longest timeout anything takes: one day (so that `now + timeout`
/// always fits in an `Instant`).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// `d` in nanoseconds, saturating at `u64::MAX` (about 584 years), so that a
/// configured "forever" stays the largest value rather than wrapping.
/// In u64 arithmetic rather than `as_nanos()`'s u128: it is on the breaker's
/// OPEN reject path, whose cost should be the clock reading and little else.
#[inline]
pub(crate) fn saturating_nanos(d: Duration) -> u64 {
    d.as_secs().saturating_mul(1_000_000_000).saturating_add(u64::from(d.subsec_nanos()))
}

/// `now + d`, or a far-future instant when that overflows `Instant`.
pub(crate) fn deadline_after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or_else(|| {
        // About 30 years: effectively no deadline, and still representable.
        now.checked_add(Duration::from_secs(30 * 365 * 24 * 3600)).unwrap_or(now)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturates_instead_of_wrapping() {
        assert_eq!(saturating_nanos(Duration::from_millis(3)), 3_000_000);
        assert_eq!(saturating_nanos(Duration::from_nanos(u64::MAX)), u64::MAX);
        assert_eq!(saturating_nanos(Duration::MAX), u64::MAX);
    }
}
