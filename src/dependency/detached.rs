//! Detached calls: [`Dependency::spawn`] and [`CallBuilder::spawn_with`](super::CallBuilder::spawn_with).
//!
//! A detached call goes through the same breaker, limit and pool as a blocking
//! one, and is admitted or refused on the calling thread at once. From then
//! on nothing waits for it: the job runs on a worker, and the worker itself
//! judges the outcome, counts it, records it on the breaker (an
//! [`OwnedPermit`](crate::breaker::OwnedPermit) travels with the job) and hands the
//! answer to the callback.
//!
//! A job the pool drops unrun (its deadline passed in the queue, or shutdown
//! discarded it) is answered by the `Drop` of its [`Pending`] answer, on the
//! thread that dropped it. So every admitted call is answered and counted
//! once, whichever way it ends.

use std::fmt;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::call::Classifier;
use super::{Dependency, Event, Inner};
use crate::breaker::OwnedPermit;
use crate::classify::{Classify, Verdict};
use crate::error::{Error, Outcome, Rejection, panic_message};
use crate::limit::LimitPermit;
use crate::pool::CallContext;

impl Dependency {
    /// Runs `job` once on a worker, through the breaker and under the
    /// timeout, without waiting for it: fire-and-forget. A failure is logged
    /// at `warn`; use [`with`](Self::with)`().`[`spawn_with`](super::CallBuilder::spawn_with) to handle the answer
    /// instead.
    ///
    /// This is seed 000's notification call site: the failure is swallowed,
    /// but the circuit observes it first. The call is admitted or refused
    /// here and now, and never holds the caller:
    ///
    /// - `Err(rejection)` at once when the breaker permits no call
    ///   ([`NotPermitted`](Rejection::NotPermitted)), the adaptive limit is
    ///   reached ([`LimitExceeded`](Rejection::LimitExceeded)), the workers and
    ///   the queue are full ([`QueueFull`](Rejection::QueueFull); a detached
    ///   call never waits for room, whatever the
    ///   [`max_wait`](crate::DependencyBuilder::max_wait)), the queue cannot
    ///   meet the deadline ([`DeadlineUnmeetable`](Rejection::DeadlineUnmeetable))
    ///   or the pool is shutting down ([`ShuttingDown`](Rejection::ShuttingDown)).
    ///   It is counted like a blocking call's rejection, never recorded by the
    ///   breaker, and is the call's only answer: nothing is logged at `warn`.
    /// - `Ok(())`: the job is queued. Its deadline is the dependency's
    ///   [`timeout`](crate::DependencyBuilder::timeout) from now, queue wait
    ///   included, and [`CallContext::remaining`] hands it to the job's own
    ///   I/O as in a blocking call. When it returns, its outcome is judged by
    ///   `E`'s [`Classify`], counted once in the dependency's
    ///   [`CallCounts`](crate::CallCounts) and recorded by the breaker; a job
    ///   that returns after its deadline is counted `timed_out` and recorded
    ///   as a failure, and a panic is caught, counted `panicked` and recorded
    ///   as a failure. A job still queued at its deadline never starts (a
    ///   timeout, as above); one that shutdown discards is counted
    ///   `shutting_down`.
    ///
    /// The pool's queue bounds detached calls as it bounds blocking ones: they
    /// take the same workers and queue slots. A detached call has no caller to
    /// give up at the deadline, so its outcome is recorded when the job
    /// returns: hand the deadline to the job's I/O (as
    /// [`WithDeadline`](crate::http::WithDeadline) does for ureq) so that it
    /// returns by then.
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

    /// Admits a detached call (breaker, limit, pool), or refuses it at once.
    /// `caller` is the caller's own deadline, if it gave one; `classify`
    /// judges the outcome on the worker.
    pub(super) fn detach<T, E, F, C, D>(
        &self,
        caller: Option<Instant>,
        priority: super::Priority,
        classify: C,
        on_done: D,
        job: F,
    ) -> Result<(), Rejection>
    where
        T: Send + 'static,
        E: Send + 'static,
        C: Classifier<T, E> + Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        D: FnOnce(Result<T, Error<E>>) + Send + 'static,
    {
        let inner = &*self.inner;
        let Some(pool) = inner.exec.pool() else {
            // Caller-thread mode has no worker to run a job nobody waits for.
            log::warn!("dependency {}: a detached call needs a pool; this one runs on callers", inner.name);
            return Err(reject(inner, Rejection::QueueFull));
        };
        let spawned = Instant::now();
        // The builder caps the timeout at one day, so this fits.
        let own = spawned.checked_add(inner.live.timeout()).unwrap_or(spawned);
        let deadline = caller.map_or(own, |c| c.min(own));
        if deadline <= spawned {
            return Err(reject(inner, Rejection::DeadlineUnmeetable));
        }
        // A detached call never waits: a rate limit with no permit free now refuses it.
        if inner.live.rate_on() && inner.rate.reserve(Duration::ZERO).is_err() {
            return Err(reject(inner, Rejection::RateLimited));
        }
        let start = inner.clock_now(spawned);
        let Ok(permit) = inner.breaker.try_acquire_owned() else {
            return Err(reject(inner, Rejection::NotPermitted));
        };
        // Over the adaptive limit: dropping the permit releases it as ignored.
        let limit = match inner.live.limit_on().then(|| inner.limiter.try_acquire(start)) {
            Some(None) => {
                drop(permit);
                return Err(reject(inner, Rejection::LimitExceeded));
            }
            Some(granted) => granted,
            None => None,
        };
        // Priority admission, as for a blocking call; the place is held until the job is done.
        let Some(place) =
            inner.occupancy.admit(priority, pool.workers(), pool.queue_capacity(), inner.live.reserved())
        else {
            drop((permit, limit));
            return Err(reject(inner, Rejection::Shed));
        };
        let armed = Arc::new(AtomicBool::new(true));
        let pending = Pending {
            answer: Some(Answer {
                dependency: Arc::downgrade(&self.inner),
                permit,
                limit,
                classify,
                on_done,
                spawned,
                start,
                deadline,
                _job: PhantomData,
            }),
            armed: Arc::clone(&armed),
        };
        let parent_span = crate::trace::capture();
        let task = move |ctx: &CallContext| -> Result<(), ()> {
            let _place = place;
            let mut pending = pending;
            let _span = crate::trace::enter(parent_span, ctx);
            let ran = catch_unwind(AssertUnwindSafe(|| job(ctx)));
            let ended = Instant::now();
            let Some(answer) = pending.answer.take() else { return Ok(()) };
            match ran {
                Ok(result) => {
                    answer.settle(End::Returned(result), ended);
                    Ok(())
                }
                Err(payload) => {
                    answer.settle(End::Panicked(panic_message(payload.as_ref())), ended);
                    // Caught again by the pool, which counts it among its own panics.
                    resume_unwind(payload)
                }
            }
        };
        match pool.submit_detached_at(Instant::now(), deadline, task) {
            Ok(()) => Ok(()),
            Err(refused) => {
                // The rejection is the answer: the job's pending answer must
                // not answer again when it is dropped. Its permits drop unrecorded.
                armed.store(false, Ordering::Relaxed);
                let rejection = refused.rejection();
                drop(refused.into_job());
                Err(reject(inner, rejection))
            }
        }
    }
}

/// Counts, logs and announces a rejection (as a blocking call's is).
fn reject(inner: &Inner, rejection: Rejection) -> Rejection {
    inner.counters.outcome(rejection.outcome());
    log::debug!("dependency {}: detached call rejected: {rejection}", inner.name);
    crate::trace::rejected(&inner.name, rejection);
    if !inner.listeners.is_empty() {
        let event = Event::Rejected { dependency: Arc::clone(&inner.name), rejection };
        inner.listeners.notify(&event, &inner.name);
    }
    rejection
}

/// The error for the log, with the job's own error when there is one
/// (`Error`'s `Display` leaves that to `source()`).
pub(super) fn describe<E: fmt::Display>(err: &Error<E>) -> String {
    match err {
        Error::Failed(e) => format!("{err}: {e}"),
        other => other.to_string(),
    }
}

/// How a detached job ended.
enum End<T, E> {
    /// It returned.
    Returned(Result<T, E>),
    /// It panicked, with this message.
    Panicked(String),
    /// It never started: expired in the queue, or discarded by shutdown.
    NeverRan,
}

/// Everything needed to answer one admitted detached call.
struct Answer<T, E, C, D> {
    /// Weak, so that queued detached calls do not keep the dependency (and its
    /// pool) alive: dropping its last handle still shuts it down, and the
    /// calls still queued are answered `ShuttingDown`.
    dependency: Weak<Inner>,
    permit: OwnedPermit,
    limit: Option<LimitPermit>,
    /// Judges the outcome, on the worker.
    classify: C,
    on_done: D,
    /// Real time, for the deadline and `waited`.
    spawned: Instant,
    /// The injected clock's time, for what the breaker records.
    start: Instant,
    deadline: Instant,
    _job: PhantomData<fn() -> (T, E)>,
}

/// The answer of an admitted call, owned by its job until the job runs.
/// Dropped without running (the pool drops jobs that expired in the queue or
/// that shutdown discarded), it answers the call as never run.
struct Pending<T, E, C, D>
where
    C: Classifier<T, E>,
    D: FnOnce(Result<T, Error<E>>),
{
    answer: Option<Answer<T, E, C, D>>,
    /// Cleared when the pool refused the job: the spawner answers it.
    armed: Arc<AtomicBool>,
}

impl<T, E, C, D> Drop for Pending<T, E, C, D>
where
    C: Classifier<T, E>,
    D: FnOnce(Result<T, Error<E>>),
{
    fn drop(&mut self) {
        if let Some(answer) = self.answer.take()
            && self.armed.load(Ordering::Relaxed)
        {
            answer.settle(End::NeverRan, Instant::now());
        }
    }
}

impl<T, E, C, D> Answer<T, E, C, D>
where
    C: Classifier<T, E>,
    D: FnOnce(Result<T, Error<E>>),
{
    /// Judges, counts and records the outcome, then calls `on_done`.
    fn settle(self, end: End<T, E>, ended: Instant) {
        let Answer { dependency, permit, limit, classify, on_done, spawned, start, deadline, .. } = self;
        let inner = dependency.upgrade();
        let waited = ended.saturating_duration_since(spawned);
        let late = ended >= deadline;
        let judged = match end {
            End::Returned(result) if late => {
                drop_quietly(result);
                Some((Err(Error::Timeout { waited }), Verdict::Failure, Outcome::TimedOut))
            }
            End::Returned(result) => {
                Some(match catch_unwind(AssertUnwindSafe(|| classify.verdict(&result))) {
                    Ok(verdict) => (result.map_err(Error::Failed), verdict, Outcome::of_verdict(verdict)),
                    Err(payload) => {
                        drop_quietly(result);
                        let msg = format!("the classifier panicked: {}", panic_message(payload.as_ref()));
                        (Err(Error::Panicked(msg)), Verdict::Failure, Outcome::Panicked)
                    }
                })
            }
            End::Panicked(msg) => Some((Err(Error::Panicked(msg)), Verdict::Failure, Outcome::Panicked)),
            // Still queued at its deadline: a timeout, as its blocking caller would have had.
            End::NeverRan if late => {
                Some((Err(Error::Timeout { waited }), Verdict::Failure, Outcome::TimedOut))
            }
            // Discarded by shutdown before its deadline: not the provider's doing.
            End::NeverRan => None,
        };
        let answer = match judged {
            Some((answer, verdict, outcome)) => {
                let elapsed = match &inner {
                    Some(inner) => inner.clock_now(ended).saturating_duration_since(start),
                    None => waited,
                };
                match &inner {
                    Some(inner) => {
                        inner.call_time.record_at(waited, ended);
                        inner.settle_outcome(
                            outcome,
                            verdict,
                            elapsed,
                            None,
                            |v, e| permit.record(v, e),
                            limit,
                        );
                    }
                    // The dependency is gone: only the breaker, which the permit keeps alive.
                    None => permit.record(verdict, elapsed),
                }
                if let (Some(inner), Err(Error::Timeout { waited })) = (&inner, &answer) {
                    log::debug!("dependency {}: detached call had no answer within {waited:?}", inner.name);
                    inner.announce_timeout(*waited);
                }
                answer
            }
            None => {
                drop((permit, limit));
                if let Some(inner) = &inner {
                    inner.call_time.record_at(waited, ended);
                    reject(inner, Rejection::ShuttingDown);
                }
                Err(Error::Rejected(Rejection::ShuttingDown))
            }
        };
        let name = inner.as_ref().map(|i| Arc::clone(&i.name));
        // The last handle may be this one: let it go before user code runs.
        drop(inner);
        if let Err(payload) = catch_unwind(AssertUnwindSafe(move || on_done(answer))) {
            log::warn!(
                "dependency {}: the callback of a detached call panicked: {}",
                name.as_deref().unwrap_or("?"),
                panic_message(payload.as_ref())
            );
        }
    }
}

/// Drops a value whose `Drop` is user code, so that a panic there cannot
/// keep the call from being answered.
fn drop_quietly<V>(value: V) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(value)));
}
