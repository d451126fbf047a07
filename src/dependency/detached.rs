//! Detached calls: [`Dependency::spawn`] and [`CallBuilder::spawn_with`](super::CallBuilder::spawn_with).
//!
//! A detached call is one attempt, admitted on the calling thread at once
//! like any other. From then on nothing waits for it: the attempt travels
//! with its job, and the worker settles it when the job returns and hands
//! the answer to the callback.
//!
//! A job the pool drops unrun (its deadline passed in the queue, or shutdown
//! discarded it) is settled by the `Drop` of its [`Pending`] answer, on the
//! thread that dropped it; a job the pool refuses is answered by the
//! refusal, its attempt taken back ([`SharedAttempt`]). So every admitted call is
//! answered and counted once, whichever way it ends.

use std::fmt;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Weak};
use std::time::Instant;

use super::attempt::{Ask, Deadline, End, Form, SharedAttempt, settled_on_worker};
use super::{Dependency, Inner, Judged, Priority};
use crate::classify::Classifier;
use crate::classify::Classify;
use crate::error::{Rejection, panic_message};
use crate::pool::{CallContext, Submit};

impl Dependency {
    /// Runs `job` once on a worker, through the breaker and under the
    /// timeout, without waiting for it: fire-and-forget. A failure is logged
    /// at `warn`; use [`with`](Self::with)`().`[`spawn_with`](super::CallBuilder::spawn_with) to handle the answer
    /// instead.
    ///
    /// Admitted or refused here and now, never holding the caller:
    ///
    /// - `Err(rejection)` at once, counted like a blocking call's rejection
    ///   and the call's only answer. A detached call never waits for room,
    ///   whatever the [`max_wait`](crate::DependencyBuilder::max_wait).
    /// - `Ok(())`: the job is queued, under the dependency's
    ///   [`timeout`](crate::DependencyBuilder::timeout) from now, queue wait
    ///   included. Its outcome is judged by `E`'s [`Classify`], counted and
    ///   recorded when the job returns; a job still queued at its deadline
    ///   never starts, and one that shutdown discards is counted
    ///   `shutting_down`.
    ///
    /// Nobody gives up at the deadline, so the outcome is recorded only when
    /// the job returns: hand the deadline to the job's I/O (as
    /// [`WithDeadline`](crate::http::WithDeadline) does for ureq).
    ///
    /// ```
    /// use std::time::Duration;
    /// use watertight::{CallContext, Dependency, Rejection, breaker::{BreakerConfig, State}};
    ///
    /// let notification = Dependency::builder("notification")
    ///     .workers(2)
    ///     .queue(8)
    ///     .timeout(Duration::from_secs(2))
    ///     .breaker(BreakerConfig::count_based(10).minimum_calls(5))
    ///     .build()?;
    ///
    /// // Returns at once; the job runs on a worker, a failure is logged at `warn`.
    /// notification.spawn(|ctx: &CallContext| -> Result<(), std::io::Error> {
    ///     assert!(ctx.remaining() <= Duration::from_secs(2));
    ///     Ok(()) // e.g. agent.post(&url).with_deadline(ctx).send_json(&event)
    /// })?;
    ///
    /// // An open breaker refuses at once, with nothing sent.
    /// notification.breaker().transition_to(State::ForcedOpen);
    /// let refused = notification.spawn(|_: &CallContext| Ok::<_, std::io::Error>(()));
    /// assert_eq!(refused, Err(Rejection::NotPermitted));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn<T, E, F>(&self, job: F) -> Result<(), Rejection>
    where
        T: Send + 'static,
        E: Classify + fmt::Display + Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    {
        self.with().spawn(job)
    }

    /// Admits a detached call, or refuses it at once. `caller` is the
    /// caller's own deadline, if it gave one; `classify` judges the outcome
    /// on the worker.
    pub(super) fn detach<T, E, F, C, D>(
        &self,
        caller: Option<Instant>,
        room_until: Option<Instant>,
        priority: Priority,
        classify: C,
        on_done: D,
        job: F,
    ) -> Result<(), Rejection>
    where
        T: Send + 'static,
        E: Send + 'static,
        C: Classifier<T, E> + Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        D: FnOnce(Judged<T, E>) + Send + 'static,
    {
        let inner = &*self.inner;
        let now = Instant::now();
        let deadline = Deadline::new(now, inner.live.timeout(), caller);
        let ask = Ask { now, deadline, number: 1, priority, form: Form::Detached };
        let mut attempt = inner.admit(ask).map_err(|refused| refused.rejection)?;
        // Admission has refused a detached call in caller-thread mode.
        let Some(pool) = inner.exec.pool() else {
            return Err(attempt.not_launched(inner, Rejection::QueueFull).rejection);
        };
        let job = attempt.carry(job);
        let in_flight = SharedAttempt::new(attempt);
        let dependency = Arc::downgrade(&self.inner);
        let answer = Delivery {
            dependency,
            attempt: in_flight.clone(),
            deadline,
            classify,
            on_done,
            _job: PhantomData,
        };
        let pending = Pending { answer: Some(answer) };
        let task = settled_on_worker(job, move |end, began, ended| -> Result<(), ()> {
            if let Some(answer) = { pending }.answer.take() {
                answer.finish(end, Some(began), ended);
            }
            Ok(())
        });
        // Admitted or refused at once, unless the caller may wait for
        // room; a refusal while every worker is stuck opens the breaker
        // (the stuck rule), as for any call.
        let how = Submit::by(deadline.at).stuck(inner.stuck_threshold());
        let how = match room_until {
            Some(at) => how.room_until(at),
            None => how.no_wait(),
        };
        match pool.submit(how, task) {
            Ok(ticket) => {
                ticket.detach();
                Ok(())
            }
            Err(refused) => {
                // The refusal is the answer: the attempt is taken back
                // first, so the pending answer dropped with the job finds
                // nothing to answer.
                let refusal = match in_flight.take() {
                    Some(attempt) => attempt.not_launched(inner, refused),
                    None => inner.refuse(Form::Detached, refused.rejection(), None),
                };
                Err(refusal.rejection)
            }
        }
    }
}

/// Everything needed to answer one admitted detached call.
struct Delivery<T, E, C, D> {
    /// Weak, so that queued detached calls do not keep the dependency (and its
    /// pool) alive: dropping its last handle still shuts it down, and the
    /// calls still queued are answered `ShuttingDown`.
    dependency: Weak<Inner>,
    /// Taken back by the spawner if the pool refuses the job.
    attempt: SharedAttempt,
    deadline: Deadline,
    /// Judges the outcome, on the worker.
    classify: C,
    on_done: D,
    _job: PhantomData<fn() -> (T, E)>,
}

/// The answer of an admitted call, owned by its job until the job runs.
/// Dropped without running (the pool drops jobs that expired in the queue or
/// that shutdown discarded), it answers the call as never run.
struct Pending<T, E, C, D>
where
    C: Classifier<T, E>,
    D: FnOnce(Judged<T, E>),
{
    answer: Option<Delivery<T, E, C, D>>,
}

impl<T, E, C, D> Drop for Pending<T, E, C, D>
where
    C: Classifier<T, E>,
    D: FnOnce(Judged<T, E>),
{
    fn drop(&mut self) {
        if let Some(answer) = self.answer.take() {
            // Still queued at its deadline: a timeout, as its blocking caller
            // would have had; before it, shutdown discarded it.
            let ended = Instant::now();
            let end = if ended >= answer.deadline.at { End::TimedOut } else { End::Discarded };
            answer.finish(end, None, ended);
        }
    }
}

impl<T, E, C, D> Delivery<T, E, C, D>
where
    C: Classifier<T, E>,
    D: FnOnce(Judged<T, E>),
{
    /// Settles the attempt, then hands its answer to `on_done`; nothing if
    /// the spawner took the attempt back (it answered the refusal).
    fn finish(self, end: End<T, E>, began: Option<Instant>, ended: Instant) {
        let Delivery { dependency, attempt, classify, on_done, .. } = self;
        let Some(attempt) = attempt.take() else { return };
        let inner = dependency.upgrade();
        let judge = |r: &Result<T, E>| classify.verdict(r);
        let judged = attempt.settle(inner.as_deref(), end, began, ended, &judge);
        let name = inner.as_ref().map(|i| Arc::clone(&i.name));
        // The last handle may be this one: let it go before user code runs.
        drop(inner);
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || on_done(judged))) {
            log::warn!(
                "dependency {}: the callback of a detached call panicked: {}",
                name.as_deref().unwrap_or("?"),
                panic_message(payload.as_ref())
            );
        }
    }
}
