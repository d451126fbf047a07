//! Refusals and timeouts, logged at `debug` in aggregate (the
//! [logs](crate::metrics#observability)): an overloaded dependency refuses thousands of calls
//! a second, and a line each would bury everything else. The counting is the
//! crate's [`Quiet`]. Nothing is taken (not even the lock) while `debug` is
//! off for this module.

use std::time::Duration;

use log::Level::Debug;

use crate::error::{Outcome, Rejection};
use crate::quiet::Quiet;
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

/// The place of `one` in `all`: its kind in a [`Quiet`] (past the end when absent).
fn kind<T: PartialEq>(all: &[T], one: &T) -> usize {
    all.iter().position(|x| x == one).unwrap_or(all.len())
}

impl QuietLog {
    /// Logs a refused call, in aggregate.
    pub(super) fn refused(&self, name: &str, rejection: Rejection) {
        self.lines.log(
            module_path!(),
            Debug,
            kind(&Outcome::ALL, &rejection.outcome()),
            format_args!("dependency {name}: call rejected: {rejection}"),
        );
    }

    /// Logs a refusal `policy`, in shadow, would have made, in aggregate.
    pub(super) fn shadow_refused(&self, name: &str, policy: Policy, rejection: Rejection) {
        self.shadow.log(
            module_path!(),
            Debug,
            kind(&Policy::ALL, &policy),
            format_args!("dependency {name}: {policy} in shadow would have refused a call: {rejection}"),
        );
    }

    /// Logs a call that timed out after `waited`, in aggregate.
    pub(super) fn timed_out(&self, name: &str, waited: Duration) {
        self.lines.log(
            module_path!(),
            Debug,
            kind(&Outcome::ALL, &Outcome::TimedOut),
            format_args!("dependency {name}: no answer within {waited:?}"),
        );
    }
}
