//! [`CallContext`]: what a running job knows about its call.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::Shared;

/// What a running job knows about its call.
///
/// A job receives `&CallContext`. Use [`remaining`](CallContext::remaining)
/// as the job's own I/O timeout, so a hung provider frees the worker at the
/// deadline instead of holding it; check [`is_cancelled`](CallContext::is_cancelled)
/// between steps of a long job to stop work nobody waits for.
///
/// ```
/// use std::time::Duration;
/// use watertight::{CallContext, pool::Pool};
///
/// let pool = Pool::builder("inventory").workers(2).build()?;
/// let answer = pool.call_timeout(Duration::from_secs(1), |ctx: &CallContext| {
///     assert_eq!(ctx.dependency(), "inventory");
///     assert_eq!(ctx.attempt(), 1);
///     assert!(ctx.remaining() <= Duration::from_secs(1));
///     Ok::<_, std::io::Error>(ctx.remaining() > Duration::ZERO)
/// });
/// assert!(answer?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CallContext {
    deadline: Instant,
    attempt: u32,
    /// Set (after the slot has moved to `ABANDONED`) when the caller gives up
    /// while the job runs. Advisory, so `Relaxed`: it publishes nothing else.
    cancelled: AtomicBool,
    /// Whose call it is: a pool's (which also gives the call its counters,
    /// at no extra reference count per call), or a caller-thread
    /// dependency's, which has only a name.
    owner: Owner,
}

/// The owner of a [`CallContext`].
pub(crate) enum Owner {
    Pool(Arc<Shared>),
    Caller(Arc<str>),
}

impl CallContext {
    /// The context of one attempt: on a pool's worker, or on the caller's own
    /// thread (a dependency in caller-thread mode, which no caller can abandon).
    pub(crate) fn new(owner: Owner, deadline: Instant, attempt: u32) -> CallContext {
        CallContext { deadline, attempt, cancelled: AtomicBool::new(false), owner }
    }

    /// The pool of a call submitted to one (`None` on a caller's thread).
    pub(super) fn pool(&self) -> Option<&Shared> {
        match &self.owner {
            Owner::Pool(shared) => Some(shared),
            Owner::Caller(_) => None,
        }
    }

    /// The instant by which the caller wants the answer. Queue wait counts:
    /// it was fixed when the call was submitted.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left until the deadline, zero once it has passed. Give it to the
    /// job's own I/O as its timeout.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// `true` once the caller has stopped waiting (it timed out or dropped
    /// its [`Ticket`](super::Ticket)). The answer will be dropped; a job may
    /// stop early.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Relaxed)
    }

    /// Which attempt this is, starting at 1. Plain pool calls are always
    /// attempt 1; a retrying or hedged dependency counts up.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The name of the pool (the dependency) running the job.
    pub fn dependency(&self) -> &str {
        match &self.owner {
            Owner::Pool(shared) => &shared.name,
            Owner::Caller(name) => name,
        }
    }

    /// Tells a running job that its caller has gone.
    pub(super) fn cancel(&self) {
        self.cancelled.store(true, Relaxed);
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("dependency", &self.dependency())
            .field("attempt", &self.attempt)
            .field("remaining", &self.remaining())
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}
