//! The retry loop: [`CallBuilder::retry`](crate::CallBuilder::retry), a
//! sequence of blocking attempts under the [`Retry`](crate::retry::Retry)
//! policy and the retry budget.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::attempt::{Ask, Deadline, Form};
use super::{Dependency, Priority};
use crate::classify::Verdict;
use crate::error::Error;
use crate::pool::CallContext;

impl Dependency {
    /// Retries `job` (see [`CallBuilder::retry`](crate::CallBuilder::retry)).
    /// `caller` bounds every attempt and every sleep, like the retry's
    /// overall timeout does.
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
        let mut number = 1;
        // The last answer from the provider itself: what the caller gets
        // when a later attempt cannot be made.
        let mut last: Option<Result<T, Error<E>>> = None;
        loop {
            let shared = Arc::clone(&job);
            let deadline = Deadline::new(now, inner.live.timeout(), end);
            let ask = Ask { now, deadline, number, priority, form: Form::Blocking };
            let (result, verdict) = self.attempt(ask, classify, move |ctx| shared(ctx));
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
            if verdict != Some(Verdict::Failure) || panicked || number >= retry.max_attempts() {
                return result;
            }
            let pause = retry.pause(number, &inner.jitter);
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
            number += 1;
            inner.counters.retried();
        }
    }

    /// Whether an attempt `after` from `now` could get past the breaker, as
    /// far as can be told now (see `Breaker::may_permit_at`).
    fn may_admit_at(&self, now: Instant, after: Duration) -> bool {
        let inner = &*self.inner;
        inner.clock_now(now).checked_add(after).is_none_or(|at| inner.breaker.may_permit_at(at))
    }
}
