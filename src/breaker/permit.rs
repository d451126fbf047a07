//! [`Permit`]: permission to make one call, and the report of its outcome.

use std::fmt;
use std::time::Duration;

use super::machine::Inner;
use super::state::{State, state_of};
use crate::classify::Verdict;

/// Permission to make one call, from [`Breaker::try_acquire`](crate::Breaker::try_acquire).
/// It borrows its breaker (taking one costs no reference count), so it lives
/// within the breaker's scope, as a lock guard does.
///
/// Report the call's outcome with [`record`](Permit::record). A permit dropped
/// without a verdict counts as [`Verdict::Ignore`]: it is neither a success
/// nor a failure and, in HALF_OPEN, gives its probe slot back, so a lost
/// permit can never wedge the breaker.
#[must_use = "a dropped permit counts as an ignored call; call `record` with the outcome"]
pub struct Permit<'b> {
    pub(super) inner: &'b Inner,
    /// The packed generation and state this permit was issued in.
    pub(super) issued: u64,
    pub(super) reported: bool,
}

impl Permit<'_> {
    /// Reports the call's verdict and how long it took. A success or failure
    /// slower than `slow_call_duration` also counts as slow.
    #[inline]
    pub fn record(mut self, verdict: Verdict, elapsed: Duration) {
        self.reported = true;
        self.inner.record(self.issued, verdict, elapsed);
    }

    /// The state the permit was issued in: [`State::HalfOpen`] for a probe.
    pub fn state(&self) -> State {
        state_of(self.issued)
    }
}

impl Drop for Permit<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.reported {
            self.inner.record(self.issued, Verdict::Ignore, Duration::ZERO);
        }
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit").field("breaker", &&*self.inner.name).field("state", &self.state()).finish()
    }
}
