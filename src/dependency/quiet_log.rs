//! Refusals and timeouts, logged at `debug` in aggregate (the
//! [logs](crate::metrics#observability)): an overloaded dependency refuses thousands of calls
//! a second, and a line each would bury everything else. The counting is the
//! crate's [`Quiet`]. Nothing is taken (not even the lock) while `debug` is
//! off for this module.

use std::time::{Duration, Instant};

use crate::error::{Outcome, Rejection};
use crate::quiet::{Due, Quiet};
use crate::shadow::Policy;

/// One dependency's aggregate log (see the module docs): one kind of event
/// per [`Outcome`], in the order of [`Outcome::ALL`].
#[derive(Debug, Default)]
pub(super) struct QuietLog {
    lines: Quiet<{ Outcome::ALL.len() }>,
    /// The refusals policies in shadow would have made, one kind per
    /// [`Policy`], in the order of [`Policy::ALL`].
    shadow: Quiet<{ Policy::ALL.len() }>,
}

impl QuietLog {
    /// Counts one call ended with `outcome` at `now`: `Some` when a line is
    /// due, with what it tells of.
    fn note(&self, outcome: Outcome, now: Instant) -> Option<Due> {
        self.lines.note(Outcome::ALL.iter().position(|o| *o == outcome)?, now)
    }

    /// Logs a refused call, in aggregate.
    pub(super) fn refused(&self, name: &str, rejection: Rejection) {
        if !log::log_enabled!(log::Level::Debug) {
            return;
        }
        match self.note(rejection.outcome(), Instant::now()) {
            Some((1, _)) => log::debug!("dependency {name}: call rejected: {rejection}"),
            Some((n, ago)) => log::debug!(
                "dependency {name}: {n} calls rejected in the last {:?}: {rejection}",
                ago.unwrap_or_default()
            ),
            None => {}
        }
    }

    /// Logs a refusal `policy`, in shadow, would have made, in aggregate.
    pub(super) fn shadow_refused(&self, name: &str, policy: Policy, rejection: Rejection) {
        if !log::log_enabled!(log::Level::Debug) {
            return;
        }
        let kind = Policy::ALL.iter().position(|p| *p == policy).unwrap_or(0);
        match self.shadow.note(kind, Instant::now()) {
            Some((1, _)) => {
                log::debug!("dependency {name}: {policy} in shadow would have refused a call: {rejection}")
            }
            Some((n, ago)) => log::debug!(
                "dependency {name}: {policy} in shadow would have refused {n} calls in the last {:?}: {rejection}",
                ago.unwrap_or_default()
            ),
            None => {}
        }
    }

    /// Logs a call that timed out after `waited`, in aggregate.
    pub(super) fn timed_out(&self, name: &str, waited: Duration) {
        if !log::log_enabled!(log::Level::Debug) {
            return;
        }
        match self.note(Outcome::TimedOut, Instant::now()) {
            Some((1, _)) => log::debug!("dependency {name}: no answer within {waited:?}"),
            Some((n, ago)) => log::debug!(
                "dependency {name}: {n} calls with no answer by their deadline in the last {:?} \
                 (the last waited {waited:?})",
                ago.unwrap_or_default()
            ),
            None => {}
        }
    }
}
