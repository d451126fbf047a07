//! The retry loop: a sequence of attempts under a [`Retry`] policy and its
//! budget. The attempts themselves are the dependency's (`dependency/once.rs`);
//! this loop decides only whether, when and how long to wait for the next.

use std::time::{Duration, Instant};

use super::{JitterSource, Retry, RetryBudget};
use crate::classify::Verdict;
use crate::error::Error;

/// What the loop needs from the dependency it retries on.
pub(crate) struct Retrier<'a> {
    pub(crate) retry: &'a Retry,
    pub(crate) budget: &'a RetryBudget,
    pub(crate) jitter: &'a JitterSource,
    /// For the log.
    pub(crate) name: &'a str,
    /// Real time to the dependency's (injected) clock.
    pub(crate) clock: &'a dyn Fn(Instant) -> Instant,
    /// Whether an attempt `after` from `now` could get past the breaker, as
    /// far as can be told now (`Breaker::may_permit_at`).
    pub(crate) may_admit: &'a dyn Fn(Instant, Duration) -> bool,
    /// Counts one retry made.
    pub(crate) retried: &'a dyn Fn(),
}

impl Retrier<'_> {
    /// Runs `attempt(now, end, number)` until an answer is final: a success,
    /// an outcome that is not a failure, a panic, the last attempt, or a retry
    /// that the deadline, the breaker or the budget would not allow. `caller`
    /// bounds every attempt and every sleep, like the overall timeout does.
    /// `attempt` returns the answer and the verdict recorded (`None`: it was
    /// refused, nothing recorded).
    pub(crate) fn run<T, E>(
        &self,
        caller: Option<Instant>,
        mut attempt: impl FnMut(Instant, Option<Instant>, u32) -> (Result<T, Error<E>>, Option<Verdict>),
    ) -> Result<T, Error<E>> {
        let (retry, budget, clock) = (self.retry, self.budget, self.clock);
        let mut now = Instant::now();
        let overall = retry.overall_timeout().and_then(|t| now.checked_add(t));
        // The end of the whole call: the earlier of the overall timeout and the caller's deadline.
        let end = match (overall, caller) {
            (Some(o), Some(c)) => Some(o.min(c)),
            (o, c) => o.or(c),
        };
        budget.deposit(clock(now));
        let mut number = 1;
        // The last answer from the provider itself: what the caller gets
        // when a later attempt cannot be made.
        let mut last: Option<Result<T, Error<E>>> = None;
        loop {
            let (result, verdict) = attempt(now, end, number);
            if verdict.is_none()
                && let Some(previous) = last.take()
            {
                // A retry refused after all (the breaker opened or the pool
                // filled during the backoff): the provider's own error is the
                // answer, and the retry it never made gives its token back.
                budget.refund(clock(Instant::now()));
                return previous;
            }
            // A panic is a failure to the breaker, but a bug in the job, not a transient
            // fault of the provider: running it again would only panic again.
            let panicked = matches!(result, Err(Error::Panicked(_)));
            // A timeout at the caller's deadline was recorded as ignored: no time is left to retry.
            if verdict != Some(Verdict::Failure) || panicked || number >= retry.max_attempts() {
                return result;
            }
            let pause = retry.pause(number, self.jitter);
            now = Instant::now();
            // The end bounds the sleep *and* leaves the next attempt some time:
            // a backoff that ends at or past it would only buy an attempt with no time at all.
            if end.is_some_and(|e| now.checked_add(pause).is_none_or(|wake| wake >= e)) {
                log::debug!("dependency {}: no retry, the call's deadline is near", self.name);
                return result;
            }
            // Ask before sleeping: a breaker that this very failure opened (or
            // any that stays open past the backoff) would only refuse the
            // next attempt, after a sleep for nothing.
            if !(self.may_admit)(now, pause) {
                log::debug!("dependency {}: no retry, the breaker would refuse it", self.name);
                return result;
            }
            if !budget.try_withdraw(clock(now)) {
                log::debug!("dependency {}: no retry, the retry budget is spent", self.name);
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
            if end.is_some_and(|e| now >= e) || !(self.may_admit)(now, Duration::ZERO) {
                budget.refund(clock(now));
                return result;
            }
            last = Some(result);
            number += 1;
            (self.retried)();
        }
    }
}
