//! Hedged calls: [`CallBuilder::hedge`](super::CallBuilder::hedge), and
//! their policy, [`Hedge`].
//!
//! A hedged call makes its first attempt as any call does (it may queue and
//! wait for room). If no acceptable answer has come after the hedge delay, a
//! second attempt starts on another worker, and so on up to `max_hedges`.
//! A hedge is made only when it cannot make an outage worse: a worker of
//! the pool is idle right now (a hedge is never queued), the breaker is
//! CLOSED, the adaptive limit and the rate limit grant it, the retry budget
//! allows it (hedges and retries share it), and the caller's deadline
//! leaves it at least the provider's normal latency.
//!
//! # Who records what
//!
//! Every attempt of a hedged call (a *leg*) holds its own breaker permit,
//! kept in the leg's `settle` slot until its outcome is recorded, exactly
//! once, by whichever comes first:
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
use std::sync::Arc;
use std::sync::Weak;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Priority;
use super::call::Classifier;
use super::config::MAX_TIMEOUT;
use super::priority::Place;
use super::{Dependency, Inner};
use crate::breaker::OwnedPermit;
use crate::classify::Verdict;
use crate::error::{ConfigError, Error, Outcome, Rejection};
use crate::limit::LimitPermit;
use crate::pool::{CallContext, Left, Ticket};

/// When a hedged call starts another attempt, and how many it may start.
///
/// The delay is fixed ([`after`](Self::after)), or the dependency's own
/// recent call-time quantile ([`at_quantile`](Self::at_quantile), p95 by
/// default), clamped to `[min_delay, max_delay]` and used only once the
/// recent window holds `min_samples` calls (until then, `max_delay`). In a
/// file (feature `serde`): `hedge = { delay = "20ms" }` or
/// `hedge = { quantile = 0.95, min_delay = "5ms", max_delay = "200ms" }`.
///
/// ```
/// use std::time::Duration;
/// use watertight::dependency::Hedge;
///
/// let fixed = Hedge::after(Duration::from_millis(20));
/// assert!(fixed.validate().is_ok());
/// let adaptive = Hedge::at_quantile(0.95).clamp(Duration::from_millis(5), Duration::from_millis(200));
/// assert!(adaptive.validate().is_ok());
/// assert_eq!(Hedge::at_quantile(1.5).validate().unwrap_err().field(), "hedge.quantile");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
pub struct Hedge {
    /// Extra attempts a call may start.
    max_hedges: u32,
    /// A fixed delay; `None`: the quantile's.
    #[cfg_attr(
        feature = "serde",
        serde(with = "crate::duration::option", skip_serializing_if = "Option::is_none")
    )]
    delay: Option<Duration>,
    quantile: f64,
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    min_delay: Duration,
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    max_delay: Duration,
    min_samples: u64,
}

impl Default for Hedge {
    /// [`at_quantile(0.95)`](Self::at_quantile).
    fn default() -> Self {
        Hedge {
            max_hedges: 1,
            delay: None,
            quantile: 0.95,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_secs(1),
            min_samples: 100,
        }
    }
}

impl Hedge {
    /// A hedge after a fixed `delay`.
    pub fn after(delay: Duration) -> Self {
        Hedge { delay: Some(delay), ..Hedge::default() }
    }

    /// A hedge after the dependency's recent call time at `quantile` (0.95:
    /// p95). Clamped to 1 ms - 1 s, used after 100 samples; see
    /// [`clamp`](Self::clamp) and [`min_samples`](Self::min_samples).
    pub fn at_quantile(quantile: f64) -> Self {
        Hedge { quantile, ..Hedge::default() }
    }

    /// The most extra attempts one call may start. Defaults to 1.
    pub fn max_hedges(mut self, n: u32) -> Self {
        self.max_hedges = n;
        self
    }

    /// The bounds of a quantile delay. Defaults to 1 ms and 1 s.
    pub fn clamp(mut self, min: Duration, max: Duration) -> Self {
        self.min_delay = min;
        self.max_delay = max;
        self
    }

    /// Calls the recent window must hold before the quantile is trusted
    /// (before that, the delay is the maximum). Defaults to 100.
    pub fn min_samples(mut self, n: u64) -> Self {
        self.min_samples = n;
        self
    }

    /// The most extra attempts one call may start.
    pub fn hedges(&self) -> u32 {
        self.max_hedges
    }

    /// Checks every value; the error names the first one that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=8).contains(&self.max_hedges) {
            return Err(ConfigError::new("hedge.max_hedges", "between 1 and 8", self.max_hedges));
        }
        if let Some(d) = self.delay
            && (d.is_zero() || d > MAX_TIMEOUT)
        {
            return Err(ConfigError::new(
                "hedge.delay",
                "greater than zero and at most one day",
                format!("{d:?}"),
            ));
        }
        // `!(q > 0 && q < 1)` refuses NaN too.
        if !(self.quantile > 0.0 && self.quantile < 1.0) {
            return Err(ConfigError::new("hedge.quantile", "strictly between 0 and 1", self.quantile));
        }
        if self.min_delay.is_zero() || self.min_delay > self.max_delay || self.max_delay > MAX_TIMEOUT {
            return Err(ConfigError::new(
                "hedge.min_delay",
                "greater than zero and at most max_delay (at most one day)",
                format!("{:?} .. {:?}", self.min_delay, self.max_delay),
            ));
        }
        Ok(())
    }

    /// The earliest a hedge may start: the fixed delay, or the quantile's minimum.
    fn earliest(&self) -> Duration {
        self.delay.unwrap_or(self.min_delay)
    }

    /// The delay for a call made now.
    fn delay_for(&self, inner: &Inner) -> Duration {
        if let Some(fixed) = self.delay {
            return fixed;
        }
        let recent = inner.call_time.recent();
        match recent.quantile(self.quantile) {
            Some(q) if recent.count() >= self.min_samples => q.clamp(self.min_delay, self.max_delay),
            _ => self.max_delay,
        }
    }
}

/// An attempt's permits until its outcome is recorded (see the module docs).
struct Unsettled {
    permit: OwnedPermit,
    limit: Option<LimitPermit>,
    /// The injected clock's time at admission, for the breaker's elapsed time.
    start: Instant,
    /// Real time at submission, for the call-time histogram.
    submitted: Instant,
}

/// One leg's record slot.
type Settle = Arc<Mutex<Option<Unsettled>>>;

/// What a leg's job answers: the judged outcome and its verdict.
type Judged<T, E> = (Result<T, Error<E>>, Verdict);

/// What a leg's job hands back: the judged answer, and the leg's place
/// (`priority.rs`), given back once the answer is dropped, after the worker
/// is free again.
type Answer<T, E> = (Judged<T, E>, Place);

/// No winner yet.
const NONE: usize = usize::MAX;

struct Leg<T, E> {
    ticket: Ticket<Answer<T, E>, Infallible>,
    settle: Settle,
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
        let now = Instant::now();
        let deadline = super::attempt::Deadline::new(now, inner.live.timeout(), caller);
        if deadline.at <= now {
            return Err(self.rejected(Rejection::DeadlineUnmeetable));
        }
        let called = now;
        let now = self.wait_for_rate(now, deadline.at)?;
        inner.budget.deposit(inner.clock_now(now));
        let start = inner.clock_now(now);
        let Ok(permit) = inner.breaker.try_acquire_owned() else {
            return Err(self.rejected(Rejection::NotPermitted));
        };
        let Ok(limit) = self.limit_permit(start) else {
            drop(permit);
            return Err(self.rejected(Rejection::LimitExceeded));
        };
        let admit =
            || inner.occupancy.admit(priority, pool.workers(), pool.queue_capacity(), inner.live.reserved());
        let Some(place) = admit() else {
            drop((permit, limit));
            return Err(self.rejected(Rejection::Shed));
        };
        let race = Arc::new(AtomicUsize::new(NONE));
        let job = Arc::new(job);
        let classify = Arc::new(classify);
        let make = |index: usize, settle: &Settle, place: Place| {
            leg_job(
                Arc::downgrade(&self.inner),
                Arc::clone(&job),
                Arc::clone(&classify),
                Arc::clone(settle),
                (Arc::clone(&race), index),
                deadline.callers,
                place,
            )
        };
        let settle: Settle = Arc::new(Mutex::new(Some(Unsettled { permit, limit, start, submitted: now })));
        let stall = inner.normal.stall_threshold(inner.live.slow_call_duration(), inner.live.timeout());
        let first = match pool.submit_attempt_at(
            Instant::now(),
            deadline.at,
            1,
            Some(stall),
            make(0, &settle, place),
        ) {
            Ok(ticket) => ticket,
            Err(refused) => {
                drop(settle.lock().take());
                if refused.stalled() && inner.breaker.open_if_closed() {
                    log::warn!(
                        "dependency {}: every worker has been inside one call for over {stall:?}; breaker opened",
                        inner.name
                    );
                }
                return Err(self.rejected(refused.rejection()));
            }
        };
        let mut legs = vec![Some(Leg { ticket: first, settle })];
        // The delay is worked out (a histogram read, for a quantile) only for
        // a call still unanswered at the earliest it could be.
        let mut delay = None;
        let mut hedge_at = now.checked_add(policy.earliest());
        let mut spin = true;
        loop {
            let more = legs.len() <= policy.max_hedges as usize;
            let until = match hedge_at {
                Some(at) if more => at.min(deadline.at),
                _ => deadline.at,
            };
            if let Some(index) = wait_any(&legs, until, std::mem::take(&mut spin)) {
                let leg = legs[index].take().expect("a settled leg is still held");
                let answer = match self.answer_of(leg, deadline.callers) {
                    Some((result, verdict)) if acceptable(&result, verdict) => {
                        race.store(index, Ordering::Release);
                        if index > 0 {
                            inner.counters.hedge_won();
                        }
                        let _ = self.give_up(&mut legs, None, deadline.callers);
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
                if let Some(late) = self.give_up(&mut legs, Some(now), deadline.callers) {
                    return late;
                }
                let waited = now.saturating_duration_since(called);
                log::debug!("dependency {}: no answer within {waited:?}", inner.name);
                inner.announce_timeout(waited);
                return Err(Error::Timeout { waited });
            }
            if more && hedge_at.is_some_and(|at| now >= at) {
                let delay = match delay {
                    Some(d) => d,
                    None => {
                        let d = policy.delay_for(inner);
                        delay = Some(d);
                        // Later than the earliest: wait on until then.
                        if let Some(at) = called.checked_add(d).filter(|at| *at > now) {
                            hedge_at = Some(at);
                            continue;
                        }
                        d
                    }
                };
                let attempt = legs.len() as u32 + 1;
                let settle: Settle = Arc::new(Mutex::new(None));
                // Nothing is taken for a hedge that cannot start: a worker must be
                // idle, and the hedge takes a place of the call's priority too.
                if pool.has_idle_worker()
                    && let Some(place) = admit()
                    && let Some(ticket) = self.try_hedge(
                        pool,
                        now,
                        deadline.at,
                        attempt,
                        &settle,
                        make(legs.len(), &settle, place),
                    )
                {
                    legs.push(Some(Leg { ticket, settle }));
                }
                hedge_at = now.checked_add(delay);
            }
        }
    }
}

/// Whether an answer ends the call: not a failure, and not a timeout (an
/// attempt its caller's deadline cut short is ignored by the breaker, but it
/// answers nothing).
fn acceptable<T, E>(result: &Result<T, Error<E>>, verdict: Verdict) -> bool {
    verdict != Verdict::Failure && !matches!(result, Err(Error::Timeout { .. }))
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

impl Dependency {
    /// The answer of a settled leg, and its verdict; `None` for a leg that
    /// shutdown discarded unrun. What the worker did not record (a leg that
    /// expired in the queue, or never ran) is settled here.
    fn answer_of<T, E>(&self, leg: Leg<T, E>, callers: bool) -> Option<Judged<T, E>> {
        let inner = &*self.inner;
        let Leg { ticket, settle } = leg;
        let (answer, began) = ticket.wait_timed();
        match answer {
            // Judged and recorded by the worker; the place is given back here.
            Ok((judged, _place)) => Some(judged),
            // The job panicked; the worker recorded that before unwinding.
            Err(Error::Panicked(msg)) => Some((Err(Error::Panicked(msg)), Verdict::Failure)),
            // Still queued at the deadline: a timeout, as for any call.
            Err(Error::Timeout { waited }) => {
                let verdict = self.settle_timeout(&settle, began, callers);
                Some((Err(Error::Timeout { waited }), verdict))
            }
            // Discarded by shutdown, or (unreachable) any other refusal: nothing recorded.
            Err(_) => {
                drop(settle.lock().take());
                inner.counters.outcome(Outcome::ShuttingDown);
                None
            }
        }
    }

    /// Gives up every leg still held: at the deadline `now` (a timeout for
    /// each leg still queued or running), or once another leg won (`None`).
    /// At the deadline, an acceptable answer that came in meanwhile is
    /// returned rather than dropped.
    fn give_up<T, E>(
        &self,
        legs: &mut [Option<Leg<T, E>>],
        deadline: Option<Instant>,
        callers: bool,
    ) -> Option<Result<T, Error<E>>> {
        let mut late = None;
        for leg in legs.iter_mut().filter_map(Option::take) {
            let Leg { ticket, settle } = leg;
            let began = ticket.began();
            match (ticket.leave(), deadline) {
                // It answered just as the deadline came: the worker recorded it.
                (Left::Answered(Ok(((result, verdict), _place))), Some(_))
                    if late.is_none() && acceptable(&result, verdict) =>
                {
                    late = Some(result);
                }
                // Its answer came after all: the worker recorded it.
                (Left::Answered(answer), _) => drop(answer),
                // At the deadline: a timeout, unless the worker recorded first.
                (_, Some(_)) => {
                    self.settle_timeout(&settle, began, callers);
                }
                // Still running: the worker records it when it returns.
                (Left::Running, None) => {}
                // Withdrawn unrun once another leg won: the provider was never asked.
                (Left::NeverRan, None) => drop(settle.lock().take()),
            }
        }
        late
    }

    /// Records a timeout for a leg whose outcome is not recorded yet; its
    /// verdict.
    fn settle_timeout(&self, settle: &Settle, began: Option<Instant>, callers: bool) -> Verdict {
        let inner = &*self.inner;
        let ended = Instant::now();
        let ran = began.map(|b| ended.saturating_duration_since(b));
        let verdict = if callers { inner.cut_short(ran) } else { Verdict::Failure };
        if let Some(u) = settle.lock().take() {
            inner.call_time.record_at(ended.saturating_duration_since(u.submitted), ended);
            let elapsed = inner.clock_now(ended).saturating_duration_since(u.start);
            inner.settle_outcome(
                Outcome::TimedOut,
                verdict,
                elapsed,
                None,
                |v, e| u.permit.record(v, e),
                u.limit,
            );
        }
        verdict
    }

    /// Starts hedge number `attempt - 1` if every condition holds (see the
    /// module docs); `None` and nothing taken otherwise.
    fn try_hedge<T, E, F>(
        &self,
        pool: &crate::pool::Pool,
        now: Instant,
        deadline: Instant,
        attempt: u32,
        settle: &Settle,
        job: F,
    ) -> Option<Ticket<Answer<T, E>, Infallible>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<Answer<T, E>, Infallible> + Send + 'static,
    {
        let inner = &*self.inner;
        // The hedge must have at least the provider's normal latency left.
        let normal = inner.normal.latency().unwrap_or_default();
        if deadline.saturating_duration_since(now) <= normal {
            return None;
        }
        let start = inner.clock_now(now);
        let limit = self.limit_permit(start).ok()?;
        // Issued only in CLOSED, on one atomic load: no check-then-act.
        let permit = inner.breaker.try_acquire_owned_if_closed()?;
        // A hedge refused from here on never was: what it took goes back
        // unrecorded (not even as ignored).
        if !inner.budget.try_withdraw(start) {
            permit.forget();
            return None;
        }
        let rate = inner.live.rate_on();
        if rate && inner.rate.reserve(Duration::ZERO).is_err() {
            permit.forget();
            inner.budget.refund(start);
            return None;
        }
        *settle.lock() = Some(Unsettled { permit, limit, start, submitted: now });
        match pool.submit_to_idle_at(now, deadline, attempt, job) {
            Ok(ticket) => {
                inner.counters.hedged();
                Some(ticket)
            }
            Err(_) => {
                // The idle worker was taken meanwhile: nothing extra starts.
                if let Some(u) = settle.lock().take() {
                    u.permit.forget();
                }
                inner.budget.refund(start);
                if rate {
                    inner.rate.give_back();
                }
                None
            }
        }
    }
}

/// The job of one leg: runs the user's job, judges and records its outcome
/// on the worker (unless the caller already recorded a timeout), and hands
/// the judged answer to the caller.
fn leg_job<T, E, F, C>(
    dependency: Weak<Inner>,
    job: Arc<F>,
    classify: Arc<C>,
    settle: Settle,
    (race, index): (Arc<AtomicUsize>, usize),
    callers: bool,
    place: Place,
) -> impl FnOnce(&CallContext) -> Result<Answer<T, E>, Infallible> + Send + 'static
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
        let run = ended.saturating_duration_since(began);
        let inner = dependency.upgrade();
        let (result, verdict, outcome) = match ran {
            Ok(result) => Dependency::classified(&|r: &Result<T, E>| classify.verdict(r), result),
            Err(payload) => {
                record(inner.as_deref(), &settle, Outcome::Panicked, Verdict::Failure, ended, None);
                // Caught again by the pool, which answers the caller `Panicked`.
                resume_unwind(payload)
            }
        };
        let late = ended >= ctx.deadline();
        if late {
            // Too late: the caller has its timeout (and has likely recorded it).
            let verdict = match (&inner, callers) {
                (Some(inner), true) => inner.cut_short(Some(run)),
                _ => Verdict::Failure,
            };
            record(inner.as_deref(), &settle, Outcome::TimedOut, verdict, ended, None);
        } else {
            record(inner.as_deref(), &settle, outcome, verdict, ended, Some(run));
        }
        if let Some(inner) = &inner {
            let winner = race.load(Ordering::Acquire);
            if winner != NONE && winner != index {
                inner.counters.hedge_lost(run);
            }
        }
        if late {
            // Recorded first: a value whose `Drop` panics cannot skip the record.
            let waited = ended.saturating_duration_since(began);
            let _ = catch_unwind(AssertUnwindSafe(move || drop(result)));
            return Ok(((Err(Error::Timeout { waited }), verdict), place));
        }
        Ok(((result, verdict), place))
    }
}

/// Records a leg's outcome unless it is recorded already. `ran`: how long
/// the job ran, when it did (a success's feeds the provider's normal latency).
fn record(
    inner: Option<&Inner>,
    settle: &Settle,
    outcome: Outcome,
    verdict: Verdict,
    ended: Instant,
    ran: Option<Duration>,
) {
    let Some(u) = settle.lock().take() else { return };
    match inner {
        Some(inner) => {
            inner.call_time.record_at(ended.saturating_duration_since(u.submitted), ended);
            let elapsed = inner.clock_now(ended).saturating_duration_since(u.start);
            inner.settle_outcome(outcome, verdict, elapsed, ran, |v, e| u.permit.record(v, e), u.limit);
        }
        // The dependency is gone: only the breaker, which the permit keeps alive.
        None => u.permit.record(verdict, ended.saturating_duration_since(u.submitted)),
    }
}
