//! What a call that got no answer says about the provider: the provider's
//! normal latency, learned from its answers, and the two thresholds taken
//! from it.
//!
//! - **Hang threshold**: an attempt the *caller's* deadline cut short counts
//!   as a failure of the provider once a worker had run it for longer than
//!   this; a shorter one says only that the caller was in a hurry.
//! - **Stall threshold**: a pool whose every worker has been inside its
//!   current job for this long is stuck; the breaker opens at once (see
//!   `Dependency::attempt`). A quarter of the timeout, or twice the hang
//!   threshold if longer.
//!
//! The normal latency is the retransmission-timeout estimate of RFC 6298
//! (`srtt + 4 * rttvar`, gains 1/8 and 1/4) over the run times of calls
//! that succeeded: timeouts and failures never raise it, so a hang cannot
//! teach the rule that hanging is normal. The two words are relaxed atomics
//! updated without a lock; two successes recorded at the same moment may
//! lose one sample, which an estimate can afford.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::time::saturating_nanos;

/// The least either threshold can be: below this, a scheduling hiccup or a
/// garbage-collecting provider looks like a hang.
pub(super) const FLOOR: Duration = Duration::from_millis(50);

/// The provider's normal latency (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Normal {
    /// Smoothed run time of successful calls, in nanoseconds; 0 before the
    /// first sample.
    srtt: AtomicU64,
    /// Its smoothed mean deviation, in nanoseconds.
    rttvar: AtomicU64,
}

impl Normal {
    /// One successful call that ran for `run` on its worker.
    pub(super) fn record(&self, run: Duration) {
        let r = saturating_nanos(run).max(1);
        let srtt = self.srtt.load(Relaxed);
        if srtt == 0 {
            self.srtt.store(r, Relaxed);
            self.rttvar.store(r / 2, Relaxed);
            return;
        }
        let var = self.rttvar.load(Relaxed);
        let new_var = var - var / 4 + srtt.abs_diff(r) / 4;
        let new_srtt = (srtt - srtt / 8 + r / 8).max(1);
        self.rttvar.store(new_var, Relaxed);
        self.srtt.store(new_srtt, Relaxed);
    }

    /// `srtt + 4 * rttvar`, or `None` before the first successful call.
    pub(super) fn latency(&self) -> Option<Duration> {
        let srtt = self.srtt.load(Relaxed);
        (srtt != 0)
            .then(|| Duration::from_nanos(srtt.saturating_add(self.rttvar.load(Relaxed).saturating_mul(4))))
    }

    /// How long an attempt cut short by its caller must have run for its
    /// timeout to count against the provider: its normal latency (at least
    /// [`FLOOR`]; just `FLOOR` before any answer), and never more than the
    /// slow-call threshold, which is the user's own word for "too long".
    pub(super) fn hang_threshold(&self, slow: Duration) -> Duration {
        self.latency().map_or(FLOOR, |l| l.max(FLOOR)).min(slow.max(FLOOR))
    }

    /// How long every worker must have been inside its job for the pool to
    /// count as stuck: a quarter of the timeout, or twice the hang threshold
    /// if that is longer. Not less: the breaker opens on this alone, so it
    /// must not mistake for a hang a provider whose answers still come, only
    /// slower (a brownout, where some worker finishes every so often), a
    /// single slow call on a one-worker pool, or a burst into a cold pool,
    /// which starts every job at once.
    pub(super) fn stall_threshold(&self, slow: Duration, timeout: Duration) -> Duration {
        (timeout / 4).max(self.hang_threshold(slow) * 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const SLOW: Duration = Duration::from_secs(60);

    #[test]
    fn before_any_answer_the_floor_and_a_quarter_of_the_timeout() {
        let n = Normal::default();
        assert_eq!(n.latency(), None);
        assert_eq!(n.hang_threshold(SLOW), FLOOR);
        assert_eq!(n.stall_threshold(SLOW, Duration::from_secs(10)), Duration::from_millis(2500));
        assert_eq!(n.stall_threshold(SLOW, Duration::from_millis(100)), FLOOR * 2);
    }

    #[test]
    fn steady_answers_converge_on_their_latency() {
        let n = Normal::default();
        for _ in 0..200 {
            n.record(80 * MS);
        }
        let l = n.latency().unwrap();
        assert!(l >= 80 * MS && l < 81 * MS, "{l:?}");
        assert_eq!(n.hang_threshold(SLOW), l);
        assert_eq!(n.stall_threshold(SLOW, Duration::from_millis(400)), l * 2);
        assert_eq!(n.stall_threshold(SLOW, Duration::from_secs(3)), Duration::from_millis(750));
    }

    #[test]
    fn spread_answers_widen_the_threshold() {
        let n = Normal::default();
        for i in 0..200u64 {
            n.record(Duration::from_millis(if i % 2 == 0 { 20 } else { 100 }));
        }
        // Mean 60 ms, deviation about 40 ms: well above the slowest answer.
        let l = n.latency().unwrap();
        assert!(l > 150 * MS && l < 300 * MS, "{l:?}");
    }

    #[test]
    fn fast_providers_stop_at_the_floor_and_slow_calls_cap_it() {
        let n = Normal::default();
        for _ in 0..50 {
            n.record(MS);
        }
        assert_eq!(n.hang_threshold(SLOW), FLOOR);
        let m = Normal::default();
        for _ in 0..50 {
            m.record(Duration::from_secs(2));
        }
        assert_eq!(m.hang_threshold(Duration::from_millis(500)), Duration::from_millis(500));
        assert_eq!(m.hang_threshold(Duration::from_millis(1)), FLOOR);
    }
}
