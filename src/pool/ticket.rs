//! [`Ticket`]: the caller's end of a submitted call.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use super::call::{Answer, Waitable, drop_quietly};
use super::slot::Finish;
use crate::error::{Error, Rejection};
use crate::sync::{CALLER_SPIN, current, park_timeout, spin_until};

/// Where a call was when its caller left ([`Ticket::leave`]).
pub(crate) enum Left<R> {
    /// Its answer was in: here it is.
    Answered(R),
    /// It never started, and never will.
    NeverRan,
    /// A worker is running it; its answer will be dropped.
    Running,
}

/// The caller's claim on the answer of a submitted job.
///
/// [`wait`](Ticket::wait) blocks until the answer or the deadline, whichever
/// comes first. Every ticket gets exactly one answer: the job's result,
/// [`Error::Timeout`], or [`Rejection::ShuttingDown`] if shutdown had to
/// discard the job.
#[must_use = "dropping a Ticket gives up on the call: a queued job is withdrawn, a running one abandoned"]
pub struct Ticket<T, E> {
    /// `None` only after `wait`, `leave` or `detach` took it (so `Drop`
    /// knows the call is settled).
    call: Option<Arc<dyn Waitable<T, E>>>,
    /// When the call was submitted, for `Timeout { waited }`.
    start: Instant,
    deadline: Instant,
}

impl<T, E> Ticket<T, E> {
    pub(crate) fn new(call: Arc<dyn Waitable<T, E>>, start: Instant) -> Self {
        let deadline = call.ctx().deadline();
        Ticket { call: Some(call), start, deadline }
    }

    /// The call's deadline: [`wait`](Ticket::wait) returns by then.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Waits for the answer until the call's deadline.
    ///
    /// Returns `Ok` or `Failed(e)` from the job, `Panicked(message)` if it
    /// panicked, `Rejected(ShuttingDown)` if shutdown discarded it, or
    /// `Timeout { waited }` at the deadline, at once. After a timeout a job that
    /// had started is abandoned (it finishes on its worker, its answer dropped)
    /// and one still queued never starts.
    ///
    /// The wait polls for up to `CALLER_SPIN` (`src/sync.rs`), then
    /// parks until the answer or the deadline: a short job is answered
    /// without a sleep and wake-up on the caller's side.
    pub fn wait(self) -> Result<T, Error<E>> {
        let start = self.start;
        match self.wait_timed().0 {
            Answer::Ran(returned) => returned.map_err(Error::Failed),
            Answer::Panicked(msg) => Err(Error::Panicked(msg)),
            Answer::Discarded => Err(Rejection::ShuttingDown.into()),
            Answer::TimedOut => Err(Error::Timeout { waited: start.elapsed() }),
        }
    }

    /// [`wait`](Ticket::wait) in the pool's own terms, and when a worker
    /// started the job (`None` if none did): how long the provider had the call.
    pub(crate) fn wait_timed(mut self) -> (Answer<T, E>, Option<Instant>) {
        // Taken only by methods that consume the ticket.
        let call = self.call.take().expect("a ticket holds its call until consumed");
        let answer = self.wait_on(&*call);
        (answer, call.began())
    }

    /// Lets the call run with nobody waiting for it: its answer is dropped
    /// with the call, and nobody can withdraw it. For a job that answers
    /// for itself (a detached call).
    pub(crate) fn detach(mut self) {
        if let Some(call) = self.call.take() {
            call.ctx().detach();
        }
    }

    /// Whether the answer is in (or the job expired): [`wait`](Self::wait)
    /// would return at once. Lock-free.
    pub(crate) fn is_settled(&self) -> bool {
        self.call.as_ref().is_none_or(|c| c.slot().is_settled())
    }

    /// Asks to be unparked when the call settles; `false` when it already
    /// has. For a caller waiting on several tickets at once (a hedged call):
    /// register on each, then park.
    pub(crate) fn register(&self, thread: crate::sync::Thread) -> bool {
        self.call.as_ref().is_some_and(|c| c.slot().register(thread))
    }

    /// When a worker started the job, if one has.
    pub(crate) fn began(&self) -> Option<Instant> {
        self.call.as_ref().and_then(|c| c.began())
    }

    /// Gives up on the call now, without waiting, and says where it was:
    /// what [`Drop`] does, told. A running job sees
    /// [`CallContext::is_cancelled`] turn true.
    pub(crate) fn leave(mut self) -> Left<Answer<T, E>> {
        self.call.take().map_or(Left::NeverRan, |call| give_up(&*call))
    }

    fn wait_on(&self, call: &dyn Waitable<T, E>) -> Answer<T, E> {
        let slot = call.slot();
        // 1. Poll for the pool's one spin budget: a short job answers within it.
        // 2. Park until the deadline. `register` looks at the slot once more
        //    under its lock (`slot.rs`), so a settle in between is never missed.
        let settled = spin_until(CALLER_SPIN, || slot.is_settled());
        if !settled && slot.register(current()) {
            // `park_timeout` may return early (unpark, or spuriously): loop and look.
            while !slot.is_settled() {
                let now = Instant::now();
                if now >= self.deadline {
                    break;
                }
                park_timeout(self.deadline - now);
            }
        }
        // 3. Take the answer, or give up.
        match give_up(call) {
            Left::Answered(reply) => reply,
            _ => {
                call.shared().stats.callers.timed_out.fetch_add(1, Relaxed);
                Answer::TimedOut
            }
        }
    }
}

/// Takes the answer if it is in; else abandons a running job (it sees
/// [`CallContext::is_cancelled`]) or withdraws a queued one.
fn give_up<T, E>(call: &dyn Waitable<T, E>) -> Left<Answer<T, E>> {
    let stats = &call.shared().stats;
    match call.slot().finish(|| {
        stats.callers.abandoned.fetch_add(1, Relaxed);
    }) {
        Finish::Ready(reply) => Left::Answered(reply),
        Finish::Abandoned => {
            call.ctx().cancel();
            Left::Running
        }
        Finish::Expired | Finish::Withdrawn => Left::NeverRan,
    }
}

impl<T, E> Drop for Ticket<T, E> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take()
            && let Left::Answered(reply) = give_up(&*call)
        {
            drop_quietly(reply);
        }
    }
}

impl<T, E> fmt::Debug for Ticket<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Ticket");
        if let Some(call) = &self.call {
            d.field("dependency", &call.ctx().dependency())
                .field("state", &call.slot().state_name())
                .field("remaining", &call.ctx().remaining());
        }
        d.finish()
    }
}
