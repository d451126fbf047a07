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
        let now = Instant::now();
        let deadline = Deadline::new(now, self.inner.live.timeout(), caller);
        self.attempt(Ask { now, deadline, number: 1, priority, form: Form::Blocking }, classify, job).0
    }

    /// One blocking attempt: admitted, run on a worker (the caller waits
    /// until the deadline) or on this very thread (caller-thread mode), and
    /// settled. Returns the answer and the verdict recorded on the breaker
    /// (`None` when the attempt was refused and nothing was recorded).
    pub(super) fn attempt<T, E, F, C>(
        &self,
        ask: Ask,
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
        let admitted = match &inner.exec {
            Exec::Pool(pool) => inner.admit(ask, |mut attempt| {
                let job = attempt.carry(traced);
                // The pool reads the clock again rather than reuse the
                // caller's: a deadline that passes in between (a 1 ns
                // timeout, say) is refused at submission as unmeetable,
                // not queued to time out and be retried.
                let how =
                    Submit::by(attempt.deadline.at).attempt(attempt.number).stall(inner.stall_threshold());
                let ticket = match pool.submit(how, job) {
                    Ok(ticket) => ticket,
                    Err(refused) => return Err(attempt.unlaunched(refused)),
                };
                let (answer, began) = ticket.wait_timed();
                Ok((attempt, End::from(answer), began, Instant::now()))
            }),
            Exec::Caller(caller) => inner.admit(ask, |attempt| {
                let (ran, began, ended) =
                    match caller.run(attempt.called, attempt.deadline.at, attempt.number, traced) {
                        Ok(ran) => ran,
                        Err(refused) => return Err(attempt.unlaunched(refused)),
                    };
                let end = match ran {
                    Ok(result) => End::Returned(result),
                    Err(payload) => End::Panicked(panic_message(payload.as_ref())),
                };
                Ok((attempt, end, Some(began), ended))
            }),
        };
        match admitted {
            Ok((attempt, end, began, ended)) => attempt.settle(Some(inner), end, began, ended, classify),
            Err(refused) => (Err(refused.into_error()), None),
        }
    }
}
