//! [`Permit`] and [`OwnedPermit`]: permission to make one call, and the report
//! of its outcome.

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::Duration;

use super::machine::Inner;
use super::state::{State, state_of};
use crate::classify::Verdict;

/// Permission to make one call, from [`Breaker::try_acquire`](crate::breaker::Breaker::try_acquire).
/// It borrows its breaker, so taking one costs no reference count; to hand a
/// permit to a thread that may outlive the breaker's borrow, take an
/// [`OwnedPermit`] instead.
///
/// Report the call's outcome with [`record`](Permit::record). A permit dropped
/// without a verdict counts as [`Verdict::Ignore`]: it is neither a success
/// nor a failure and, in HALF_OPEN, gives its probe slot back, so a lost
/// permit can never wedge the breaker.
#[must_use = "a dropped permit counts as an ignored call; call `record` with the outcome"]
pub struct Permit<'b> {
    pub(super) breaker: &'b Inner,
    pub(super) issued: u64,
}

/// A [`Permit`] that holds its breaker by reference count, from
/// [`Breaker::try_acquire_owned`](crate::breaker::Breaker::try_acquire_owned): it is
/// `'static`, so it can move to any thread, and it keeps the breaker alive.
/// The same rules apply: report with [`record`](OwnedPermit::record); dropped
/// without a verdict, it counts as [`Verdict::Ignore`].
#[must_use = "a dropped permit counts as an ignored call; call `record` with the outcome"]
pub struct OwnedPermit {
    pub(super) breaker: Arc<Inner>,
    pub(super) issued: u64,
    /// Set by `record`, so that `Drop` does not report the call again.
    pub(super) reported: bool,
}

// A `Permit` is two words, with no flag for "reported": `record` consumes it
// without running its `Drop` (`ManuallyDrop`, which leaks nothing, since a
// reference needs no drop). So `Result<Permit, NotPermitted>` is two words
// too (the reference's null niche tells `Err`), and `try_acquire` returns it
// in two registers rather than through memory.

impl Drop for Permit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.breaker.record(self.issued, Verdict::Ignore, Duration::ZERO);
    }
}

impl Drop for OwnedPermit {
    #[inline]
    fn drop(&mut self) {
        if !self.reported {
            self.breaker.record(self.issued, Verdict::Ignore, Duration::ZERO);
        }
    }
}

impl<'b> Permit<'b> {
    /// Reports the call's verdict and how long it took. A success or failure
    /// slower than `slow_call_duration` also counts as slow.
    #[inline]
    pub fn record(self, verdict: Verdict, elapsed: Duration) {
        let (breaker, issued) = self.disarm();
        breaker.record(issued, verdict, elapsed);
    }

    /// The state the permit was issued in: [`State::HalfOpen`] for a probe.
    pub fn state(&self) -> State {
        state_of(self.issued)
    }

    /// The breaker and the issued word, with the permit's report left to
    /// the caller.
    #[inline]
    pub(super) fn disarm(self) -> (&'b Inner, u64) {
        let this = ManuallyDrop::new(self);
        (this.breaker, this.issued)
    }
}

impl OwnedPermit {
    /// Lets the permit go without recording anything, not even an ignored
    /// call: for a permit taken for a call that was then never made (a hedge
    /// with no worker to run it). Only for a permit issued in CLOSED, which
    /// holds no half-open probe slot to hand back.
    pub(crate) fn forget(mut self) {
        debug_assert_eq!(state_of(self.issued), State::Closed);
        self.reported = true;
    }

    /// Reports the call's verdict and how long it took, as [`Permit::record`].
    #[inline]
    pub fn record(mut self, verdict: Verdict, elapsed: Duration) {
        self.reported = true;
        self.breaker.record(self.issued, verdict, elapsed);
    }

    /// The state the permit was issued in: [`State::HalfOpen`] for a probe.
    pub fn state(&self) -> State {
        state_of(self.issued)
    }
}

/// Both permits show the same: their breaker's name and the state they were
/// issued in.
fn debug(kind: &str, breaker: &Inner, issued: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.debug_struct(kind).field("breaker", &&*breaker.name).field("state", &state_of(issued)).finish()
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug("Permit", self.breaker, self.issued, f)
    }
}

impl fmt::Debug for OwnedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug("OwnedPermit", &self.breaker, self.issued, f)
    }
}
