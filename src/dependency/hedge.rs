//! Hedged calls: [`CallBuilder::hedge`](super::CallBuilder::hedge), under
//! their policy, [`Hedge`](super::Hedge).
//!
//! The first attempt is admitted as any blocking call's; each hedge is
//! admitted as a [`Form::Hedge`], when it cannot make an outage worse (see
//! `CallBuilder::hedge` for the conditions).
//!
//! # Who records what
//!
//! Every attempt of a hedged call (a *leg*) is an [`Attempt`] of its own,
//! kept in the leg's slot until it is settled, exactly once, by whichever
//! comes first:
//!
//! - the worker, when the job returns: it judges the outcome with the
//!   classifier and records it (a loser's too: a failure is a failure);
//! - the caller, at the deadline, for a leg still running or queued: a
//!   timeout, judged as a blocking call's is;
//! - the caller, for a leg that never ran (withdrawn from the queue once
//!   another won, or discarded by shutdown): nothing is recorded, as for
//!   any rejection.
//!
//! The first acceptable answer (a verdict other than failure) is the
//! call's. The other legs are given up: a queued one is withdrawn, a running
//! one sees [`CallContext::is_cancelled`] turn true, keeps its worker until
//! its job returns (threads cannot be killed), and is recorded then.

use std::convert::Infallible;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;

use super::attempt::{Ask, Attempt, Deadline, End, Form, Refusal, drop_quietly};
use super::{Dependency, Inner, Priority};
use crate::classify::Classifier;
use crate::classify::Verdict;
use crate::error::{Error, Rejection, panic_message};
use crate::pool::{CallContext, Left, Submit, Ticket};

/// A leg's attempt, until the worker or the caller settles it.
type Slot = Arc<Mutex<Option<Attempt>>>;

/// What a leg answers: the settled outcome and the verdict recorded (`None`:
/// the caller had settled it already, as a timeout).
type Judged<T, E> = (Result<T, Error<E>>, Option<Verdict>);

/// No winner yet.
const NONE: usize = usize::MAX;

struct Leg<T, E> {
    ticket: Ticket<Judged<T, E>, Infallible>,
    slot: Slot,
}

impl Dependency {
    /// A hedged call (see the module docs). Without a hedge policy it is
    /// one attempt, as [`once`](Self::once).
    pub(super) fn hedged<T, E, F, C>(
        &self,
        caller: Option<Instant>,
        priority: Priority,
        classify: C,
        job: F,
    ) -> Result<T, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
        C: Classifier<T, E> + Send + Sync + 'static,
    {
        let inner = &*self.inner;
        // No policy, or no pool to hedge on: one attempt.
        let (Some(policy), Some(pool)) = (inner.live.hedge(), inner.exec.pool()) else {
            return self.once(caller, priority, &|r: &Result<T, E>| classify.verdict(r), job);
        };
        let called = Instant::now();
        let deadline = Deadline::new(called, inner.live.timeout(), caller);
        let race = Arc::new(AtomicUsize::new(NONE));
        let (job, classify) = (Arc::new(job), Arc::new(classify));
        let launch = |index: usize, now: Instant, form: Form| -> Result<Leg<T, E>, Refusal> {
            let number = index as u32 + 1;
            inner.admit(Ask { now, deadline, number, priority, form }, |mut attempt| {
                let slot: Slot = Arc::new(Mutex::new(None));
                let work = leg(
                    Arc::downgrade(&self.inner),
                    (Arc::clone(&job), Arc::clone(&classify)),
                    Arc::clone(&slot),
                    (Arc::clone(&race), index),
                );
                let work = attempt.carry(work);
                *slot.lock() = Some(attempt);
                let how = Submit::by(deadline.at).attempt(number);
                // A hedge never queues; a first attempt may, as any call.
                let how = match form {
                    Form::Hedge => how.idle_only(),
                    _ => how.stall(inner.stall_threshold()),
                };
                pool.submit(how, work).map(|ticket| Leg { ticket, slot: Arc::clone(&slot) }).map_err(
                    |refused| {
                        if let Some(attempt) = slot.lock().take()
                            && form == Form::Hedge
                        {
                            attempt.forget();
                        }
                        refused.into()
                    },
                )
            })
        };
        inner.budget.deposit(inner.clock_now(called));
        let first = launch(0, called, Form::Blocking).map_err(Refusal::into_error)?;
        let mut legs = vec![Some(first)];
        // The delay is worked out (a histogram read, for a quantile) only for
        // a call still unanswered at the earliest it could be.
        let mut delay = None;
        let mut hedge_at = called.checked_add(policy.earliest());
        let mut spin = true;
        loop {
            let more = legs.len() <= policy.hedges() as usize;
            let until = match hedge_at {
                Some(at) if more => at.min(deadline.at),
                _ => deadline.at,
            };
            if let Some(index) = wait_any(&legs, until, std::mem::take(&mut spin)) {
                let leg = legs[index].take().expect("a settled leg is still held");
                let answer = match self.answer_of(leg) {
                    Some((result, verdict)) if acceptable(&result, verdict) => {
                        race.store(index, Ordering::Release);
                        if index > 0 {
                            inner.counters.hedge_won();
                        }
                        let _ = self.give_up(&mut legs, false);
                        return result;
                    }
                    Some((result, _)) => result,
                    None => Err(Error::Rejected(Rejection::ShuttingDown)),
                };
                // Every leg made has answered, none acceptably: the last is the call's.
                if legs.iter().all(Option::is_none) {
                    return answer;
                }
                continue;
            }
            let now = Instant::now();
            if now >= deadline.at {
                // A leg that answered just now still counts.
                if legs.iter().flatten().any(|l| l.ticket.is_settled()) {
                    continue;
                }
                return match self.give_up(&mut legs, true) {
                    Some(late) => late,
                    None => Err(Error::Timeout { waited: now.saturating_duration_since(called) }),
                };
            }
            if more && hedge_at.is_some_and(|at| now >= at) {
                let delay = match delay {
                    Some(d) => d,
                    None => {
                        let d = policy.delay_for(&inner.call_time);
                        delay = Some(d);
                        // Later than the earliest: wait on until then.
                        if let Some(at) = called.checked_add(d).filter(|at| *at > now) {
                            hedge_at = Some(at);
                            continue;
                        }
                        d
                    }
                };
                // Nothing is taken for a hedge that cannot start: a worker must
                // be idle, the deadline must leave it the provider's normal
                // latency, and the retry budget (shared with retries) must allow it.
                let normal = inner.normal_latency().unwrap_or_default();
                if pool.has_idle_worker()
                    && deadline.at.saturating_duration_since(now) > normal
                    && inner.budget.try_withdraw(inner.clock_now(now))
                {
                    match launch(legs.len(), now, Form::Hedge) {
                        Ok(leg) => {
                            inner.counters.hedged();
                            legs.push(Some(leg));
                        }
                        Err(_) => inner.budget.refund(inner.clock_now(now)),
                    }
                }
                hedge_at = now.checked_add(delay);
            }
        }
    }

    /// The answer of a settled leg; `None` for a leg that shutdown discarded
    /// unrun. What the worker did not settle (a leg that expired in the
    /// queue, or never ran) is settled here.
    fn answer_of<T, E>(&self, leg: Leg<T, E>) -> Option<Judged<T, E>> {
        let Leg { ticket, slot } = leg;
        let (answer, began) = ticket.wait_timed();
        match answer {
            // Settled by the worker.
            Ok(judged) => Some(judged),
            // The job panicked; the worker settled that before unwinding.
            Err(Error::Panicked(msg)) => Some((Err(Error::Panicked(msg)), Some(Verdict::Failure))),
            // Still queued at the deadline: a timeout, as for any call.
            Err(Error::Timeout { .. }) => Some(self.settle_leg::<T, E>(&slot, End::TimedOut, began)),
            // Discarded by shutdown: nothing recorded.
            Err(_) => {
                let _ = self.settle_leg::<T, E>(&slot, End::Discarded, None);
                None
            }
        }
    }

    /// Gives up every leg still held: at the deadline (a timeout for each
    /// leg still queued or running), or once another leg won. At the
    /// deadline, an acceptable answer that came in meanwhile is returned
    /// rather than dropped.
    fn give_up<T, E>(
        &self,
        legs: &mut [Option<Leg<T, E>>],
        at_deadline: bool,
    ) -> Option<Result<T, Error<E>>> {
        let mut late = None;
        for Leg { ticket, slot } in legs.iter_mut().filter_map(Option::take) {
            let began = ticket.began();
            match (ticket.leave(), at_deadline) {
                // It answered just as the deadline came: the worker settled it.
                (Left::Answered(Ok((result, verdict))), true)
                    if late.is_none() && acceptable(&result, verdict) =>
                {
                    late = Some(result);
                }
                // Its answer came after all: the worker settled it.
                (Left::Answered(answer), _) => drop_quietly(answer),
                // At the deadline: a timeout, unless the worker settled first.
                (_, true) => {
                    let _ = self.settle_leg::<T, E>(&slot, End::TimedOut, began);
                }
                // Still running: the worker settles it when it returns.
                (Left::Running, false) => {}
                // Withdrawn unrun once another leg won: the provider was never asked.
                (Left::NeverRan, false) => drop(slot.lock().take()),
            }
        }
        late
    }

    /// Settles a leg on the caller's side, unless its worker already has.
    fn settle_leg<T, E>(&self, slot: &Slot, end: End<T, E>, began: Option<Instant>) -> Judged<T, E> {
        let attempt = slot.lock().take();
        match attempt {
            Some(attempt) => {
                attempt.settle(Some(&self.inner), end, began, Instant::now(), &|_| Verdict::Failure)
            }
            None => (Err(Error::Rejected(Rejection::ShuttingDown)), None),
        }
    }
}

/// Whether an answer ends the call: not a failure, and not a timeout (an
/// attempt its caller's deadline cut short is ignored by the breaker, but it
/// answers nothing).
fn acceptable<T, E>(result: &Result<T, Error<E>>, verdict: Option<Verdict>) -> bool {
    verdict.is_some_and(|v| v != Verdict::Failure) && !matches!(result, Err(Error::Timeout { .. }))
}

/// Waits until one of `legs` has settled (its index) or `until` (`None`).
/// `spin`: poll for the pool's spin budget first, as a plain call's wait
/// does, so that a quick answer costs no park and wake-up.
fn wait_any<T, E>(legs: &[Option<Leg<T, E>>], until: Instant, spin: bool) -> Option<usize> {
    if spin {
        let settled = || legs.iter().flatten().any(|l| l.ticket.is_settled());
        crate::sync::spin_until(crate::sync::CALLER_SPIN, settled);
    }
    loop {
        let live = legs.iter().enumerate().filter_map(|(i, l)| l.as_ref().map(|l| (i, l)));
        for (i, leg) in live {
            // `register` looks once more under the slot's lock, so a settle
            // between this look and the park is never missed.
            if leg.ticket.is_settled() || !leg.ticket.register(crate::sync::current()) {
                return Some(i);
            }
        }
        let now = Instant::now();
        if now >= until {
            return None;
        }
        // May return early (a leg settled, or spuriously): look again.
        crate::sync::park_timeout(until - now);
    }
}

/// The job of one leg: runs the user's job, and settles the leg's attempt
/// on the worker unless the caller already did (at the deadline).
fn leg<T, E, F, C>(
    dependency: Weak<Inner>,
    (job, classify): (Arc<F>, Arc<C>),
    slot: Slot,
    (race, index): (Arc<AtomicUsize>, usize),
) -> impl FnOnce(&CallContext) -> Result<Judged<T, E>, Infallible> + Send + 'static
where
    T: Send + 'static,
    E: Send + 'static,
    F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    C: Classifier<T, E> + Send + Sync + 'static,
{
    let parent_span = crate::trace::capture();
    move |ctx: &CallContext| {
        let _span = crate::trace::enter(parent_span, ctx);
        let began = Instant::now();
        let ran = catch_unwind(AssertUnwindSafe(|| job(ctx)));
        let ended = Instant::now();
        let inner = dependency.upgrade();
        let attempt = slot.lock().take();
        let judge = |r: &Result<T, E>| classify.verdict(r);
        let judged = match (ran, attempt) {
            (Ok(result), Some(attempt)) => {
                attempt.settle(inner.as_deref(), End::Returned(result), Some(began), ended, &judge)
            }
            (Err(payload), attempt) => {
                if let Some(attempt) = attempt {
                    let end = End::Panicked(panic_message(payload.as_ref()));
                    let _ = attempt.settle(inner.as_deref(), end, Some(began), ended, &judge);
                }
                // Caught again by the pool, which answers the caller `Panicked`.
                resume_unwind(payload)
            }
            // The caller settled it as a timeout, and has gone.
            (Ok(result), None) => {
                drop_quietly(result);
                (Err(Error::Timeout { waited: ended.saturating_duration_since(began) }), None)
            }
        };
        let winner = race.load(Ordering::Acquire);
        if let Some(inner) = &inner
            && winner != NONE
            && winner != index
        {
            inner.counters.hedge_lost(ended.saturating_duration_since(began));
        }
        Ok(judged)
    }
}
