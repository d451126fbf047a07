//! Hedged calls: [`CallBuilder::hedge`](super::CallBuilder::hedge), under
//! their policy, [`Hedge`](super::Hedge).
//!
//! The first attempt is admitted as any blocking call's; each hedge as a
//! [`Form::Hedge`], when it cannot make an outage worse. What a hedge
//! promises: [`dependency`](crate::dependency#fan-out-hedging-priorities).
//!
//! # Who records what
//!
//! Every attempt of a hedged call (a *leg*) is an attempt of its own, in
//! flight ([`SharedAttempt`]) until it is settled, exactly once, by whichever
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
//! A leg given up (another won) is withdrawn if queued; a running one keeps
//! its worker until its job returns (threads cannot be killed) and is
//! recorded then.
//!
//! # Who waits
//!
//! A call's legs are a [`Race`], which never blocks: the caller polls it
//! (answers taken in, a hedge started when due) and, between polls,
//! registers on every leg's reply slot and parks until one settles or the
//! race's next instant. A hedged call is that loop on its own; a fan-out
//! (`fanout.rs`) runs it for several races at once, and uses a race with no
//! hedge policy for each attempt of a plain or retried leg, so that a leg
//! whose caller has left is still settled once, by its worker.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::attempt::{
    Ask, Deadline, End, Form, Judged, Refusal, SharedAttempt, drop_quietly, settled_on_worker,
};
use super::{Counters, Dependency, Hedge, Inner, Priority};
use crate::classify::Classifier;
use crate::classify::Verdict;
use crate::error::{Error, Rejection};
use crate::pool::{Answer, CallContext, Left, Submit, Ticket};

/// No winner yet.
const NONE: usize = usize::MAX;

struct Leg<T, E> {
    ticket: Ticket<Judged<T, E>, Infallible>,
    attempt: SharedAttempt,
}

/// One call's legs, under one deadline: the first attempt and the hedges
/// started after it (none without a policy). The caller drives it: it
/// [`poll`](Self::poll)s, and waits ([`register`](Self::register), then
/// parks) until [`until`](Self::until) between polls. Dropped before its
/// answer, it gives up every leg, as a caller who left.
pub(super) struct Race<T, E, F, C> {
    dependency: Dependency,
    /// `None`: no hedges, one leg settled on its worker.
    policy: Option<Hedge>,
    deadline: Deadline,
    called: Instant,
    priority: Priority,
    /// The number of the first leg (a retry's attempt number).
    first: u32,
    /// The index of the leg that won, once one has.
    winner: Arc<AtomicUsize>,
    job: Arc<F>,
    classify: Arc<C>,
    legs: Vec<Option<Leg<T, E>>>,
    /// The hedge delay, worked out (a histogram read, for a quantile) only
    /// for a call still unanswered at the earliest it could be.
    delay: Option<Duration>,
    hedge_at: Option<Instant>,
}

impl Dependency {
    /// A hedged call (see the module docs).
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
        let (Some(policy), Some(_)) = (inner.live.hedge(), inner.exec.pool()) else {
            return self.once(caller, priority, &|r: &Result<T, E>| classify.verdict(r), job);
        };
        let called = Instant::now();
        let how = (Some(policy), priority, 1);
        let mut race = Race::start(self, how, called, caller, Arc::new(job), Arc::new(classify))
            .map_err(Refusal::into_error)?;
        let mut spin = true;
        loop {
            if let Some((answer, _)) = race.poll() {
                return answer;
            }
            race.wait(std::mem::take(&mut spin));
        }
    }
}

impl<T, E, F, C> Race<T, E, F, C>
where
    T: Send + 'static,
    E: Send + 'static,
    F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    C: Classifier<T, E> + Send + Sync + 'static,
{
    /// Admits and submits the first leg (`how`: the hedge policy, the
    /// priority, the first leg's number), under the earlier of the
    /// dependency's timeout from `called` and `caller`; a hedged call puts
    /// its deposit in the retry budget, which its hedges draw on. Pool mode
    /// only.
    pub(super) fn start(
        dependency: &Dependency,
        (policy, priority, first): (Option<Hedge>, Priority, u32),
        called: Instant,
        caller: Option<Instant>,
        job: Arc<F>,
        classify: Arc<C>,
    ) -> Result<Self, Refusal> {
        let inner = &*dependency.inner;
        if policy.is_some() {
            inner.budget.deposit(inner.clock_now(called));
        }
        let deadline = Deadline::new(called, inner.live.timeout(), caller);
        let mut race = Race {
            dependency: dependency.clone(),
            hedge_at: policy.and_then(|p| called.checked_add(p.earliest())),
            policy,
            deadline,
            called,
            priority,
            first,
            winner: Arc::new(AtomicUsize::new(NONE)),
            job,
            classify,
            legs: Vec::with_capacity(1),
            delay: None,
        };
        let leg = race.launch(0, called, Form::Blocking)?;
        race.legs.push(Some(leg));
        Ok(race)
    }

    /// Admits and submits leg `index`.
    fn launch(&self, index: usize, now: Instant, form: Form) -> Result<Leg<T, E>, Refusal> {
        let inner = &*self.dependency.inner;
        let (deadline, priority) = (self.deadline, self.priority);
        let number = self.first + index as u32;
        let mut attempt = inner.admit(Ask { now, deadline, number, priority, form })?;
        // Admission refuses what is not for a pool in caller-thread mode.
        let Some(pool) = inner.exec.pool() else {
            return Err(attempt.not_launched(inner, Rejection::QueueFull));
        };
        let job = Arc::clone(&self.job);
        let job = attempt.carry(move |ctx: &CallContext| job(ctx));
        let in_flight = SharedAttempt::new(attempt);
        let dependency = Arc::downgrade(&self.dependency.inner);
        let race = (Arc::clone(&self.winner), index);
        let work = leg(dependency, (job, Arc::clone(&self.classify)), in_flight.clone(), race);
        let how = Submit::by(deadline.at).attempt(number);
        // A hedge never queues; a first attempt may, as any call.
        let how = match form {
            Form::Hedge => how.idle_only(),
            _ => how.stuck(inner.stuck_threshold()),
        };
        pool.submit(how, work).map(|ticket| Leg { ticket, attempt: in_flight.clone() }).map_err(|refused| {
            match in_flight.take() {
                Some(attempt) => attempt.not_launched(inner, refused),
                None => inner.refuse(form, refused.rejection(), None),
            }
        })
    }

    /// When the caller should poll again at the latest: the deadline, or
    /// the next hedge.
    pub(super) fn until(&self) -> Instant {
        let more = self.policy.is_some_and(|p| self.legs.len() <= p.hedges() as usize);
        match self.hedge_at {
            Some(at) if more => at.min(self.deadline.at),
            _ => self.deadline.at,
        }
    }

    /// Asks for `thread` to be unparked when a leg settles; `false` when one
    /// already has (poll again rather than park).
    pub(super) fn register(&self, thread: &crate::sync::Thread) -> bool {
        let mut live = self.legs.iter().flatten();
        live.all(|leg| !leg.ticket.is_settled() && leg.ticket.register(thread.clone()))
    }

    /// Waits until a leg settles or [`until`](Self::until). `spin`: poll for
    /// the pool's spin budget first, as a plain call's wait does, so that a
    /// quick answer costs no park and wake-up.
    fn wait(&self, spin: bool) {
        if spin {
            let settled = || self.legs.iter().flatten().any(|l| l.ticket.is_settled());
            if crate::sync::spin_until(crate::sync::CALLER_SPIN, settled) {
                return;
            }
        }
        let now = Instant::now();
        let until = self.until();
        if now < until && self.register(&crate::sync::current()) {
            // May return early (a leg settled, or spuriously): the caller polls.
            crate::sync::park_timeout(until - now);
        }
    }

    /// Looks without waiting: the call's answer once it has one (the first
    /// acceptable answer, the last answer when none is, or a timeout at the
    /// deadline) with the verdict recorded; meanwhile, starts a hedge when
    /// one is due, and at once when a leg has failed.
    pub(super) fn poll(&mut self) -> Option<Judged<T, E>> {
        loop {
            let inner = &*self.dependency.inner;
            // The last unacceptable answer taken in, and whether it was a
            // failure the provider answered (shutdown's answer is not).
            let mut last = None;
            for index in 0..self.legs.len() {
                if !self.legs[index].as_ref().is_some_and(|l| l.ticket.is_settled()) {
                    continue;
                }
                let leg = self.legs[index].take().expect("a settled leg is still held");
                let answer = match answer_of(inner, leg) {
                    Some((result, verdict)) if acceptable(&result, verdict) => {
                        self.winner.store(index, Ordering::Release);
                        if index > 0 {
                            Counters::bump(&inner.counters.hedges_won);
                        }
                        let _ = self.give_up(false);
                        return Some((result, verdict));
                    }
                    // A panic is a bug in the job, not a fault of the
                    // provider's: another attempt would only panic again.
                    Some(judged) => {
                        let failed = !matches!(judged.0, Err(Error::Panicked(_)));
                        (judged, failed)
                    }
                    None => ((Err(Error::from(Rejection::ShuttingDown)), None), false),
                };
                if let Some(((earlier, _), _)) = last.replace(answer) {
                    drop_quietly(earlier);
                }
            }
            let now = Instant::now();
            if let Some((answer, failed)) = last {
                // A failure is answered with the next hedge, at once (within
                // the same rules as a hedge after the delay).
                if failed && now < self.deadline.at {
                    self.hedge(now, true);
                }
                // Every leg made has answered, none acceptably: the last is the call's.
                if self.legs.iter().all(Option::is_none) {
                    return Some(answer);
                }
                drop_quietly(answer);
            }
            if now >= self.deadline.at {
                // A leg that answered just now still counts.
                if self.legs.iter().flatten().any(|l| l.ticket.is_settled()) {
                    continue;
                }
                let waited = now.saturating_duration_since(self.called);
                return Some(match self.give_up(true) {
                    (Some(late), _) => late,
                    (None, verdict) => (Err(Error::Timeout { waited }), verdict),
                });
            }
            self.hedge(now, false);
            return None;
        }
    }

    /// Starts the hedges due at `now`: one once the delay has passed since
    /// the last (every one left at once for a zero delay), and one at once
    /// after a leg `failed`.
    fn hedge(&mut self, now: Instant, failed: bool) {
        let Some(policy) = self.policy else { return };
        if !failed && self.hedge_at.is_none_or(|at| now < at) {
            return;
        }
        let inner = &*self.dependency.inner;
        let delay = match self.delay {
            Some(d) => d,
            None => {
                let d = policy.delay_for(&inner.call_time);
                self.delay = Some(d);
                // Later than the earliest: wait on until then (a failure does not wait).
                if let Some(at) = self.called.checked_add(d).filter(|at| *at > now && !failed) {
                    self.hedge_at = Some(at);
                    return;
                }
                d
            }
        };
        while self.legs.len() <= policy.hedges() as usize {
            let started = self.try_hedge(now);
            // The next timed hedge comes a delay later; with no delay, every
            // hedge that could start has, and only a failure starts another.
            self.hedge_at = now.checked_add(delay).filter(|_| !delay.is_zero());
            if !started || !delay.is_zero() {
                break;
            }
        }
    }

    /// Starts one hedge, if it can make no outage worse: nothing is taken
    /// for a hedge that cannot start. A worker must be idle, the deadline
    /// must leave it the provider's normal latency, and the retry budget
    /// (shared with retries) must allow it.
    fn try_hedge(&mut self, now: Instant) -> bool {
        let inner = &*self.dependency.inner;
        let normal = inner.normal_latency().unwrap_or_default();
        if inner.exec.pool().is_some_and(crate::pool::Pool::has_idle_worker)
            && self.deadline.at.saturating_duration_since(now) > normal
            && inner.budget.try_withdraw(inner.clock_now(now))
        {
            match self.launch(self.legs.len(), now, Form::Hedge) {
                Ok(leg) => {
                    Counters::bump(&inner.counters.hedged);
                    self.legs.push(Some(leg));
                    return true;
                }
                Err(_) => inner.budget.refund(inner.clock_now(now)),
            }
        }
        false
    }
}

impl<T, E, F, C> Race<T, E, F, C> {
    /// Gives up every leg still held: at the deadline (a timeout for each
    /// leg still queued or running), or once another leg won (or the caller
    /// left). At the deadline, an acceptable answer that came in meanwhile is
    /// returned rather than dropped; else the verdict recorded on the first
    /// leg settled here as a timeout.
    fn give_up(&mut self, at_deadline: bool) -> (Option<Judged<T, E>>, Option<Verdict>) {
        let inner = &*self.dependency.inner;
        let (mut late, mut timed_out) = (None, None);
        for Leg { ticket, attempt } in self.legs.iter_mut().filter_map(Option::take) {
            let began = ticket.began();
            match (ticket.leave(), at_deadline) {
                // It answered just as the deadline came: the worker settled it.
                (Left::Answered(Answer::Ran(Ok((result, verdict)))), true)
                    if late.is_none() && acceptable(&result, verdict) =>
                {
                    late = Some((result, verdict));
                }
                // Its answer came after all: the worker settled it.
                (Left::Answered(answer), _) => drop_quietly(answer),
                // At the deadline: a timeout, unless the worker settled first.
                (_, true) => {
                    let (_, verdict) = settle_leg::<T, E>(inner, &attempt, End::TimedOut, began);
                    timed_out = timed_out.or(verdict);
                }
                // Still running: the worker settles it when it returns.
                (Left::Running, false) => {}
                // Withdrawn unrun once another leg won: the provider was never asked.
                (Left::NeverRan, false) => drop(attempt.take()),
            }
        }
        (late, timed_out)
    }
}

impl<T, E, F, C> Drop for Race<T, E, F, C> {
    /// A race dropped unanswered (a fan-out's leg whose handle was dropped)
    /// gives up its legs as a caller who left: a queued one is withdrawn
    /// unrecorded, a running one is settled by its worker when it returns.
    fn drop(&mut self) {
        let _ = self.give_up(false);
    }
}

/// The answer of a settled leg; `None` for a leg that shutdown discarded
/// unrun. What the worker did not settle (a leg that expired in the queue,
/// or never ran) is settled here.
fn answer_of<T, E>(inner: &Inner, leg: Leg<T, E>) -> Option<Judged<T, E>> {
    let Leg { ticket, attempt } = leg;
    let (answer, began) = ticket.wait_timed();
    match answer {
        // Settled by the worker.
        Answer::Ran(Ok(judged)) => Some(judged),
        Answer::Ran(Err(never)) => match never {},
        // The job panicked; the worker settled that before unwinding.
        Answer::Panicked(msg) => Some((Err(Error::Panicked(msg)), Some(Verdict::Failure))),
        // Still queued at the deadline: a timeout, as for any call.
        Answer::TimedOut => Some(settle_leg::<T, E>(inner, &attempt, End::TimedOut, began)),
        // Discarded by shutdown: nothing recorded.
        Answer::Discarded => {
            let _ = settle_leg::<T, E>(inner, &attempt, End::Discarded, None);
            None
        }
    }
}

/// Settles a leg on the caller's side, unless its worker already has.
fn settle_leg<T, E>(
    inner: &Inner,
    attempt: &SharedAttempt,
    end: End<T, E>,
    began: Option<Instant>,
) -> Judged<T, E> {
    match attempt.take() {
        Some(attempt) => attempt.settle(Some(inner), end, began, Instant::now(), &|_| Verdict::Failure),
        None => (Err(Error::from(Rejection::ShuttingDown)), None),
    }
}

/// Whether an answer ends the call: not a failure, and not a timeout (an
/// attempt its caller's deadline cut short is ignored by the breaker, but it
/// answers nothing).
fn acceptable<T, E>(result: &Result<T, Error<E>>, verdict: Option<Verdict>) -> bool {
    verdict.is_some_and(|v| v != Verdict::Failure) && !matches!(result, Err(Error::Timeout { .. }))
}

/// The job of one leg: runs the user's job, and settles the leg's attempt
/// on the worker unless the caller already did (at the deadline).
fn leg<T, E, F, C>(
    dependency: Weak<Inner>,
    (job, classify): (F, Arc<C>),
    attempt: SharedAttempt,
    (race, index): (Arc<AtomicUsize>, usize),
) -> impl FnOnce(&CallContext) -> Result<Judged<T, E>, Infallible> + Send + 'static
where
    T: Send + 'static,
    E: Send + 'static,
    F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    C: Classifier<T, E> + Send + Sync + 'static,
{
    settled_on_worker(job, move |end: End<T, E>, began, ended| {
        let inner = dependency.upgrade();
        let panicked = matches!(end, End::Panicked(_));
        let judge = |r: &Result<T, E>| classify.verdict(r);
        let judged = match attempt.take() {
            Some(attempt) => attempt.settle(inner.as_deref(), end, Some(began), ended, &judge),
            // The caller settled it as a timeout, and has gone.
            None => {
                drop_quietly(end);
                (Err(Error::Timeout { waited: ended.saturating_duration_since(began) }), None)
            }
        };
        let winner = race.load(Ordering::Acquire);
        if let Some(inner) = &inner
            && !panicked
            && winner != NONE
            && winner != index
        {
            inner.counters.hedge_lost(ended.saturating_duration_since(began));
        }
        Ok(judged)
    })
}
