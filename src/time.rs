//! Durations as the `u64` nanoseconds that atomics hold.

use std::time::Duration;

/// `d` in nanoseconds, saturating at `u64::MAX` (about 584 years), so that a
/// configured "forever" stays the largest value rather than wrapping.
pub(crate) fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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
