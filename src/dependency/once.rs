//! A blocking attempt, on the pool or where the caller stands: the attempt
//! of a plain call and of each step of a retry.

use std::time::Instant;

use super::attempt::{Ask, Deadline, End, Form};
use super::{Dependency, Exec, Priority};
use crate::classify::Verdict;
use crate::error::{Error, panic_message};
use crate::pool::{CallContext, Submit};

impl Dependency {
    /// One attempt, under the caller's deadline if any.
    pub(super) fn once<T, E, F, C>(
        &self,
        caller: Option<Instant>,
        priority: Priority,
        classify: &C,
        job: F,
    ) -> Result<T, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        C: Fn(&Result<T, E>) -> Verdict,
    {
        self.attempt((Instant::now(), caller, 1), priority, classify, job).0
    }

    /// One blocking attempt, attempt `number` made at `now`, under the
    /// earlier of the dependency's timeout and `caller`: admitted, run on a worker (the caller waits
    /// until the deadline) or on this very thread (caller-thread mode), and
    /// settled. Returns the answer and the verdict recorded on the breaker
    /// (`None` when the attempt was refused and nothing was recorded).
    pub(super) fn attempt<T, E, F, C>(
        &self,
        (now, caller, number): (Instant, Option<Instant>, u32),
        priority: Priority,
        classify: &C,
        job: F,
    ) -> (Result<T, Error<E>>, Option<Verdict>)
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        C: Fn(&Result<T, E>) -> Verdict + ?Sized,
    {
        let inner = &*self.inner;
        // Feature "tracing": the job runs in a span whose parent is the caller's span.
        let parent_span = crate::trace::capture();
        let traced = move |ctx: &CallContext| {
            let _span = crate::trace::enter(parent_span, ctx);
            job(ctx)
        };
        let deadline = Deadline::new(now, inner.live.timeout(), caller);
        let mut attempt = match inner.admit(Ask { now, deadline, number, priority, form: Form::Blocking }) {
            Ok(attempt) => attempt,
            Err(refused) => return (Err(refused.into_error()), None),
        };
        let (end, began, ended) = match &inner.exec {
            Exec::Pool(pool) => {
                let job = attempt.carry(traced);
                // The pool reads the clock again rather than reuse the
                // caller's: a deadline that passes in between (a 1 ns
                // timeout, say) is refused at submission as unmeetable,
                // not queued to time out and be retried.
                let how =
                    Submit::by(attempt.deadline.at).attempt(attempt.number).stuck(inner.stuck_threshold());
                match pool.submit(how, job) {
                    Ok(ticket) => {
                        let (answer, began) = ticket.wait_timed();
                        (End::from(answer), began, Instant::now())
                    }
                    Err(refused) => return (Err(attempt.not_launched(inner, refused).into_error()), None),
                }
            }
            Exec::Caller(caller) => {
                match caller.run(attempt.called, attempt.deadline.at, attempt.number, traced) {
                    Ok((Ok(result), began, ended)) => (End::Returned(result), Some(began), ended),
                    Ok((Err(payload), began, ended)) => {
                        (End::Panicked(panic_message(payload.as_ref())), Some(began), ended)
                    }
                    Err(refused) => return (Err(attempt.not_launched(inner, refused).into_error()), None),
                }
            }
        };
        attempt.settle(Some(inner), end, began, ended, classify)
    }
}
