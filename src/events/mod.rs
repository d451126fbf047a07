//! [`Event`]: what a dependency tells its listeners; and the ring of its
//! recent events, [`RecordedEvent`] (`recorded.rs`).

mod recorded;

use std::sync::Arc;
use std::time::Duration;

use crate::breaker::Transition;
use crate::error::Rejection;

pub(crate) use self::recorded::{EventRing, millis_since_epoch};
pub use self::recorded::{RecordedEvent, RecordedKind};

/// Something that happened to a dependency, delivered to the listeners given
/// to [`DependencyBuilder::on_event`](crate::DependencyBuilder::on_event).
///
/// Listeners run on the thread where it happened (a request thread, or the
/// thread whose call moved the breaker), after every lock is released and
/// after the outcome was counted and recorded; keep them short and never call
/// the same dependency from one. A listener that panics is logged and
/// skipped.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// The breaker changed state (also logged at `info` by the breaker).
    Transition(Transition),
    /// A call was turned away without running: rejected at once (breaker,
    /// full queue, unmeetable deadline, shutdown), or, having been queued,
    /// discarded by shutdown before it started (`ShuttingDown`). Also logged
    /// at `debug`.
    Rejected {
        /// The dependency's name.
        dependency: Arc<str>,
        /// Why.
        rejection: Rejection,
    },
    /// A policy in shadow would have refused a call, and let it through
    /// (also logged at `debug`; see
    /// [`DependencyBuilder::shadow`](crate::DependencyBuilder::shadow)).
    ShadowRefused {
        /// The dependency's name.
        dependency: Arc<str>,
        /// The policy in shadow.
        policy: crate::shadow::Policy,
        /// What it would have answered.
        rejection: Rejection,
    },
    /// A caller stopped waiting at the deadline (also logged at `debug`).
    TimedOut {
        /// The dependency's name.
        dependency: Arc<str>,
        /// How long the caller waited.
        waited: Duration,
    },
}
