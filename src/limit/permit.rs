//! [`LimitPermit`]: one call's place under the limit, and its report.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::limiter::Inner;
use super::rule::BaselineChange;
use crate::classify::Verdict;

/// Leave to make one call, from [`Limiter::try_acquire`](super::Limiter::try_acquire).
///
/// Report how the call went with [`record`](Self::record). A permit dropped
/// without a report is released without a sample: it frees its place and
/// teaches the limit nothing, so a call that was never made (rejected further
/// down the path) or whose outcome is to be ignored leaves the limit as it was.
#[must_use = "a dropped permit is released without a sample; call `record` with the latency and verdict"]
pub struct LimitPermit {
    inner: Arc<Inner>,
    issued: Instant,
    /// The calls in flight when it was granted, itself included.
    in_flight: usize,
    released: bool,
}

impl LimitPermit {
    pub(super) fn new(inner: Arc<Inner>, issued: Instant, in_flight: usize) -> Self {
        LimitPermit { inner, issued, in_flight, released: false }
    }

    /// Reports the call and releases its place. `latency` is the time from
    /// the call (the `now` given to `try_acquire`) to its answer.
    ///
    /// - [`Verdict::Success`]: a latency sample for the gradient.
    /// - [`Verdict::Failure`] (an error, a timeout, a panic): the limit is cut
    ///   by [`failure_cut`](super::AdaptiveLimit::failure_cut) at once; the latency is
    ///   not sampled (a timeout's latency is only the deadline).
    /// - [`Verdict::Ignore`] (a 4xx): no sample, as when dropped.
    pub fn record(mut self, latency: Duration, verdict: Verdict) {
        self.released = true;
        let changed = {
            let mut st = self.inner.state.lock();
            st.in_flight -= 1;
            match verdict {
                Verdict::Success => st.rule.on_success(latency, self.issued, self.in_flight),
                Verdict::Failure => {
                    st.rule.on_failure();
                    BaselineChange::None
                }
                Verdict::Ignore => BaselineChange::None,
            }
        };
        if let BaselineChange::Remeasured { from, to } = changed {
            log::info!(
                "adaptive limit: the latency stayed high at the minimum concurrency; \
                 no-load latency re-measured there: {from:?} -> {to:?}"
            );
        }
    }

    /// When the call started, on the caller's clock.
    pub fn issued(&self) -> Instant {
        self.issued
    }

    /// The calls in flight when this permit was granted, itself included.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for LimitPermit {
    fn drop(&mut self) {
        if !self.released {
            self.inner.state.lock().in_flight -= 1;
        }
    }
}

impl fmt::Debug for LimitPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitPermit")
            .field("issued", &self.issued)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}
