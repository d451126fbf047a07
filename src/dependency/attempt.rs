//! One attempt through the call path, and the retry loop around attempts.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::caller::{Exec, OnCaller};
use super::priority::Priority;
use super::{Dependency, Event};
use crate::classify::Verdict;
use crate::error::{Error, Outcome, Rejection, panic_message};
use crate::pool::CallContext;

/// An attempt's deadline, and whose it is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline {
    pub(super) at: Instant,
    /// `true` when the caller's deadline (or a retry's overall timeout) comes
    /// before the dependency's own timeout: a timeout then counts against the
    /// provider only if it had the call for long enough (`cut_short`).
    pub(super) callers: bool,
}

impl Deadline {
    /// The earlier of `now + timeout` and the caller's deadline.
    /// (The builder caps the timeout at one day, so `now + timeout` fits.)
    pub(super) fn new(now: Instant, timeout: std::time::Duration, caller: Option<Instant>) -> Deadline {
        let own = now + timeout;
        match caller {
            Some(caller) if caller < own => Deadline { at: caller, callers: true },
            _ => Deadline { at: own, callers: false },
        }
    }
}

/// How close to its deadline a failed answer may come and still be the
/// deadline's doing: a job's own timeout set to the deadline (ureq's, by
/// `with_deadline`) fires at it, give or take the rounding of its timer.
const AT_DEADLINE: Duration = Duration::from_millis(2);
/// The least time a job must have had before its deadline for a failure at
/// the deadline to be taken as its own timeout: a job started a moment
/// before its deadline (the last attempt of a retry, say) that fails at once
/// has failed, not timed out.
const TIMED_BUDGET: Duration = Duration::from_millis(10);

/// Whether a failed answer that came back at `ended`, after running for
/// `ran`, came back at (or past) the attempt's deadline `at`, having had the
/// time to wait for it.
fn at_deadline(ended: Instant, ran: Option<Duration>, at: Instant) -> bool {
    let Some(began) = ran.and_then(|ran| ended.checked_sub(ran)) else { return false };
    at.saturating_duration_since(began) >= TIMED_BUDGET && ended + AT_DEADLINE >= at
}

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
        self.attempt(now, Deadline::new(now, self.inner.live.timeout(), caller), 1, priority, classify, job).0
    }

    /// The retry loop: see [`CallBuilder::retry`](crate::CallBuilder::retry). `caller` bounds every
    /// attempt and every sleep, like the retry's overall timeout does.
    pub(super) fn retrying<T, E, F, C>(
        &self,
        caller: Option<Instant>,
        priority: Priority,
        classify: &C,
        job: F,
    ) -> Result<T, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
        C: Fn(&Result<T, E>) -> Verdict,
    {
        let inner = &*self.inner;
        let retry = &inner.live.retry();
        let job = Arc::new(job);
        let mut now = Instant::now();
        let overall = retry.overall_timeout().and_then(|t| now.checked_add(t));
        // The end of the whole call: the earlier of the overall timeout and the caller's deadline.
        let end = match (overall, caller) {
            (Some(o), Some(c)) => Some(o.min(c)),
            (o, c) => o.or(c),
        };
        inner.budget.deposit(inner.clock_now(now));

        let mut attempt = 1;
        // The last answer from the provider itself: what the caller gets
        // when a later attempt cannot be made.
        let mut last: Option<Result<T, Error<E>>> = None;
        loop {
            let shared = Arc::clone(&job);
            let deadline = Deadline::new(now, inner.live.timeout(), end);
            let (result, verdict) =
                self.attempt(now, deadline, attempt, priority, classify, move |ctx| shared(ctx));
            if verdict.is_none()
                && let Some(previous) = last.take()
            {
                // A retry refused after all (the breaker opened or the pool
                // filled during the backoff): the provider's own error is the
                // answer, and the retry it never made gives its token back.
                inner.budget.refund(inner.clock_now(Instant::now()));
                return previous;
            }
            // A panic is a failure to the breaker, but a bug in the job, not a transient
            // fault of the provider: running it again would only panic again.
            let panicked = matches!(result, Err(Error::Panicked(_)));
            // A timeout at the caller's deadline was recorded as ignored: no time is left to retry.
            if verdict != Some(Verdict::Failure) || panicked || attempt >= retry.max_attempts() {
                return result;
            }
            let pause = retry.pause(attempt, &inner.jitter);
            now = Instant::now();
            // The end bounds the sleep *and* leaves the next attempt some time:
            // a backoff that ends at or past it would only buy an attempt with no time at all.
            if end.is_some_and(|e| now.checked_add(pause).is_none_or(|wake| wake >= e)) {
                log::debug!("dependency {}: no retry, the call's deadline is near", inner.name);
                return result;
            }
            // Ask before sleeping: a breaker that this very failure opened (or
            // any that stays open past the backoff) would only refuse the
            // next attempt, after a sleep for nothing.
            if !self.may_admit_at(now, pause) {
                log::debug!("dependency {}: no retry, the breaker would refuse it", inner.name);
                return result;
            }
            if !inner.budget.try_withdraw(inner.clock_now(now)) {
                log::debug!("dependency {}: no retry, the retry budget is spent", inner.name);
                return result;
            }
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
            now = Instant::now();
            // A sleep may overshoot: if it ate the rest of the time, the failure
            // that caused the retry is the answer, not a rejection of an attempt
            // that had no time left. Nor is an attempt made that the breaker,
            // opened during the sleep, would refuse.
            if end.is_some_and(|e| now >= e) || !self.may_admit_at(now, Duration::ZERO) {
                inner.budget.refund(inner.clock_now(now));
                return result;
            }
            last = Some(result);
            attempt += 1;
            inner.counters.retried();
        }
    }

    /// Whether an attempt `after` from `now` could get past the breaker, as
    /// far as can be told now (see `Breaker::may_permit_at`).
    fn may_admit_at(&self, now: Instant, after: Duration) -> bool {
        let inner = &*self.inner;
        inner.clock_now(now).checked_add(after).is_none_or(|at| inner.breaker.may_permit_at(at))
    }

    /// One attempt: deadline, permit, submit (with the pool's admission),
    /// wait, classify, record. `now` and `deadline` are real time; the
    /// elapsed time recorded on the breaker is the injected clock's. Returns
    /// the outcome and the verdict recorded on the breaker (`None` when the
    /// attempt was rejected and nothing was recorded).
    fn attempt<T, E, F, C>(
        &self,
        now: Instant,
        deadline: Deadline,
        attempt: u32,
        priority: Priority,
        classify: &C,
        job: F,
    ) -> (Result<T, Error<E>>, Option<Verdict>)
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        C: Fn(&Result<T, E>) -> Verdict,
    {
        let inner = &*self.inner;
        // A deadline already past is refused before the breaker: it must not
        // take a half-open probe slot for a call that cannot be made.
        if deadline.at <= now {
            return (Err(self.rejected(Rejection::DeadlineUnmeetable)), None);
        }
        let now = match self.wait_for_rate(now, deadline.at) {
            Ok(now) => now,
            Err(refused) => return (Err(refused), None),
        };
        let start = inner.clock_now(now);
        let permit = match inner.breaker.try_acquire() {
            Ok(permit) => permit,
            Err(_) => return (Err(self.rejected(Rejection::NotPermitted)), None),
        };
        // Over the adaptive limit: rejected at once. Dropping the permit releases it as
        // ignored (and hands a half-open probe slot back): the provider was never asked.
        let Ok(limit) = self.limit_permit(start) else {
            drop(permit);
            return (Err(self.rejected(Rejection::LimitExceeded)), None);
        };
        // The pool reads the clock again for its own `now` rather than reuse this
        // call's: a deadline that passes in between (a 1 ns timeout, say) is then
        // refused at submission as unmeetable, not queued to time out and be retried.
        // Feature "tracing": the job runs in a span whose parent is the caller's span.
        let parent_span = crate::trace::capture();
        let pool = match &inner.exec {
            Exec::Pool(pool) => pool,
            Exec::Caller(caller) => {
                let traced = move |ctx: &CallContext| {
                    let _span = crate::trace::enter(parent_span, ctx);
                    job(ctx)
                };
                let ran = caller.run(now, deadline.at, attempt, traced);
                return self.settle_on_caller(ran, now, start, deadline, classify, permit, limit);
            }
        };
        // Priority admission, in one step (`priority.rs`). The place travels
        // with the job and comes back with its answer, so it is given back
        // once the worker is free again: when the answer is read here, or
        // dropped on the worker for a caller that left, or with a job that
        // never ran.
        let Some(place) =
            inner.occupancy.admit(priority, pool.workers(), pool.queue_capacity(), inner.live.reserved())
        else {
            drop((permit, limit));
            return (Err(self.rejected(Rejection::Shed)), None);
        };
        let traced = move |ctx: &CallContext| {
            let _span = crate::trace::enter(parent_span, ctx);
            match job(ctx) {
                Ok(value) => Ok((value, place)),
                Err(e) => Err((e, place)),
            }
        };
        let stall = inner.normal.stall_threshold(inner.live.slow_call_duration(), inner.live.timeout());
        let ticket = match pool.submit_attempt_at(Instant::now(), deadline.at, attempt, Some(stall), traced) {
            Ok(ticket) => ticket,
            Err(refused) => {
                // Neither the breaker nor the limit learns anything from a refusal...
                drop((permit, limit));
                // ...but a pool whose every worker is stuck says the provider hangs.
                if refused.stalled() && inner.breaker.open_if_closed() {
                    log::warn!(
                        "dependency {}: every worker has been inside one call for over {stall:?}; breaker opened",
                        inner.name
                    );
                }
                return (Err(self.rejected(refused.rejection())), None);
            }
        };

        let (answer, began) = ticket.wait_timed();
        let answer = answer.map(|(value, _place)| value).map_err(|e| e.map_err(|(e, _place)| e));
        let ended = Instant::now();
        inner.call_time.record_at(ended.saturating_duration_since(now), ended);
        let elapsed = inner.clock_now(ended).saturating_duration_since(start);
        // How long the provider had the call: from a worker starting it.
        let ran = began.map(|b| ended.saturating_duration_since(b));
        let (result, verdict, outcome) = match answer {
            Ok(value) => Self::classified(classify, Ok(value)),
            Err(Error::Failed(e)) => match Self::classified(classify, Err(e)) {
                // The job's own timeout at the attempt's deadline (ureq's,
                // set by `with_deadline`) is the caller's timeout, whichever
                // fired first: one event, one outcome, the same cut-short
                // judgement.
                (Err(Error::Failed(_)), Verdict::Failure, _) if at_deadline(ended, ran, deadline.at) => {
                    let waited = ended.saturating_duration_since(now);
                    log::debug!("dependency {}: the job failed at its deadline, {waited:?} in", inner.name);
                    let verdict = if deadline.callers { inner.cut_short(ran) } else { Verdict::Failure };
                    (Err(Error::Timeout { waited }), verdict, Outcome::TimedOut)
                }
                judged => judged,
            },
            Err(Error::Timeout { waited }) => {
                log::debug!("dependency {}: no answer within {waited:?}", inner.name);
                // The provider had the call until the deadline cut it short,
                // not until this thread happened to wake up after it.
                let had = began.map(|b| deadline.at.min(ended).saturating_duration_since(b));
                let verdict = if deadline.callers { inner.cut_short(had) } else { Verdict::Failure };
                (Err(Error::Timeout { waited }), verdict, Outcome::TimedOut)
            }
            Err(Error::Panicked(msg)) => (Err(Error::Panicked(msg)), Verdict::Failure, Outcome::Panicked),
            Err(Error::Rejected(rejection)) => {
                // Shutdown answered a queued job: not the provider's doing.
                drop((permit, limit));
                return (Err(self.rejected(rejection)), None);
            }
            // The pool never answers this; only the rate limit above does.
            Err(Error::RateLimited { retry_after }) => {
                drop((permit, limit));
                return (Err(self.rate_limited(retry_after)), None);
            }
        };
        // The only place this attempt's permits are recorded: on the calling thread, once.
        inner.settle_outcome(outcome, verdict, elapsed, ran, |v, e| permit.record(v, e), limit);
        if let Err(Error::Timeout { waited }) = &result {
            inner.announce_timeout(*waited);
        }
        (result, Some(verdict))
    }

    /// The rate limit, before the breaker: a caller waiting for its permit
    /// holds no probe slot. It waits only when the wait fits its deadline.
    /// Returns the time after the wait.
    pub(super) fn wait_for_rate<E>(&self, now: Instant, deadline: Instant) -> Result<Instant, Error<E>> {
        let inner = &*self.inner;
        if !inner.live.rate_on() {
            return Ok(now);
        }
        match inner.rate.reserve(deadline.saturating_duration_since(now)) {
            Ok(wait) if wait.is_zero() => Ok(now),
            Ok(wait) => {
                std::thread::sleep(wait);
                let now = Instant::now();
                if deadline <= now {
                    return Err(self.rejected(Rejection::DeadlineUnmeetable));
                }
                Ok(now)
            }
            Err(refused) => Err(self.rate_limited(refused.retry_after)),
        }
    }

    /// A permit of the adaptive limit when it is on (`Ok(None)` when off);
    /// `Err` when the limit is reached.
    pub(super) fn limit_permit(&self, start: Instant) -> Result<Option<crate::limit::LimitPermit>, ()> {
        let inner = &*self.inner;
        match inner.live.limit_on().then(|| inner.limiter.try_acquire(start)) {
            Some(None) => Err(()),
            Some(granted) => Ok(granted),
            None => Ok(None),
        }
    }

    /// The end of an attempt run on the caller's own thread (caller-thread
    /// mode): judged and recorded as a pool's attempt is, with a job that
    /// returned after its deadline answered and recorded as a timeout.
    #[allow(clippy::too_many_arguments)]
    fn settle_on_caller<T, E, C>(
        &self,
        ran: Result<OnCaller<T, E>, Rejection>,
        now: Instant,
        start: Instant,
        deadline: Deadline,
        classify: &C,
        permit: crate::breaker::Permit<'_>,
        limit: Option<crate::limit::LimitPermit>,
    ) -> (Result<T, Error<E>>, Option<Verdict>)
    where
        C: Fn(&Result<T, E>) -> Verdict,
    {
        let inner = &*self.inner;
        let OnCaller { ran, late, began, ended } = match ran {
            Ok(ran) => ran,
            Err(rejection) => {
                drop((permit, limit));
                return (Err(self.rejected(rejection)), None);
            }
        };
        let waited = ended.saturating_duration_since(now);
        inner.call_time.record_at(waited, ended);
        let run = ended.saturating_duration_since(began);
        let (result, verdict, outcome) = match ran {
            Err(payload) => {
                let msg = panic_message(payload.as_ref());
                (Err(Error::Panicked(msg)), Verdict::Failure, Outcome::Panicked)
            }
            Ok(result) if late => {
                drop(result);
                log::debug!("dependency {}: the job returned after its deadline, {waited:?} in", inner.name);
                let verdict = if deadline.callers { inner.cut_short(Some(run)) } else { Verdict::Failure };
                (Err(Error::Timeout { waited }), verdict, Outcome::TimedOut)
            }
            Ok(result) => match Self::classified(classify, result) {
                // As on a pool: the job's own timeout at the deadline is the deadline's.
                (Err(Error::Failed(_)), Verdict::Failure, _)
                    if at_deadline(ended, Some(run), deadline.at) =>
                {
                    let verdict =
                        if deadline.callers { inner.cut_short(Some(run)) } else { Verdict::Failure };
                    (Err(Error::Timeout { waited }), verdict, Outcome::TimedOut)
                }
                judged => judged,
            },
        };
        let elapsed = inner.clock_now(ended).saturating_duration_since(start);
        inner.settle_outcome(outcome, verdict, elapsed, Some(run), |v, e| permit.record(v, e), limit);
        if let Err(Error::Timeout { waited }) = &result {
            inner.announce_timeout(*waited);
        }
        (result, Some(verdict))
    }

    /// The job's own outcome, its verdict and its outcome kind. A classifier
    /// that panics makes the attempt a panicked one: a failure, answered
    /// [`Error::Panicked`], so that every attempt is still counted once.
    pub(super) fn classified<T, E, C>(
        classify: &C,
        result: Result<T, E>,
    ) -> (Result<T, Error<E>>, Verdict, Outcome)
    where
        C: Fn(&Result<T, E>) -> Verdict,
    {
        match catch_unwind(AssertUnwindSafe(|| classify(&result))) {
            Ok(verdict) => (result.map_err(Error::Failed), verdict, Outcome::of_verdict(verdict)),
            Err(payload) => {
                let msg = format!("the classifier panicked: {}", panic_message(payload.as_ref()));
                (Err(Error::Panicked(msg)), Verdict::Failure, Outcome::Panicked)
            }
        }
    }

    /// [`rejected`](Self::rejected) for the rate limit: the error says when a
    /// permit would be free.
    pub(super) fn rate_limited<E>(&self, retry_after: Duration) -> Error<E> {
        match self.rejected::<E>(Rejection::RateLimited) {
            Error::Rejected(_) => Error::RateLimited { retry_after },
            other => other,
        }
    }

    /// Counts, logs and announces a rejection, and returns it as an error.
    pub(super) fn rejected<E>(&self, rejection: Rejection) -> Error<E> {
        let inner = &*self.inner;
        inner.counters.outcome(rejection.outcome());
        log::debug!("dependency {}: call rejected: {rejection}", inner.name);
        crate::trace::rejected(&inner.name, rejection);
        if !inner.listeners.is_empty() {
            let event = Event::Rejected { dependency: Arc::clone(&inner.name), rejection };
            inner.listeners.notify(&event, &inner.name);
        }
        Error::Rejected(rejection)
    }
}

impl super::Inner {
    /// The verdict on an attempt that the caller's deadline cut short,
    /// having run on a worker for `ran` (`None`: it never started). It
    /// counts against the provider once the provider has had it for longer
    /// than its answers normally take (the hang threshold, `hang.rs`): a
    /// provider that answers in 20 ms and says nothing in 300 ms is hung,
    /// whoever stopped waiting. A shorter run, or one that never started,
    /// says only that the caller was in a hurry: ignored.
    pub(super) fn cut_short(&self, ran: Option<Duration>) -> Verdict {
        let inner = self;
        match ran {
            Some(ran) if ran > inner.normal.hang_threshold(inner.live.slow_call_duration()) => {
                Verdict::Failure
            }
            _ => Verdict::Ignore,
        }
    }
}
