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

/// Where one retried call stands between its attempts: what the loop
/// carries from one step to the next, for a caller that blocks
/// ([`Retrier::run`]) or one that drives several calls at once (a fan-out).
pub(crate) struct Retried<T, E> {
    /// The end of the whole call: the earlier of the overall timeout and the
    /// caller's deadline.
    pub(crate) end: Option<Instant>,
    /// The attempt to make next, or being made (1-based).
    pub(crate) number: u32,
    /// The last answer from the provider itself, while a retry of it is
    /// due: what the caller gets when that retry cannot be made.
    last: Option<Result<T, Error<E>>>,
}

/// What to do after an attempt.
pub(crate) enum Next<T, E> {
    /// The call's answer.
    Done(Result<T, Error<E>>),
    /// Retry at this instant (then call [`Retrier::resume`]).
    RetryAt(Instant),
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
        let (mut now, mut state) = self.begin(caller);
        loop {
            let (result, verdict) = attempt(now, state.end, state.number);
            match self.after(&mut state, result, verdict) {
                Next::Done(result) => return result,
                Next::RetryAt(at) => {
                    let pause = at.saturating_duration_since(Instant::now());
                    if !pause.is_zero() {
                        std::thread::sleep(pause);
                    }
                    now = Instant::now();
                    if let Err(result) = self.resume(&mut state, now) {
                        return result;
                    }
                }
            }
        }
    }

    /// A call starts: its end, and its deposit in the retry budget. Returns
    /// the time read, for the first attempt.
    pub(crate) fn begin<T, E>(&self, caller: Option<Instant>) -> (Instant, Retried<T, E>) {
        let now = Instant::now();
        let overall = self.retry.overall_timeout().and_then(|t| now.checked_add(t));
        let end = overall.into_iter().chain(caller).min();
        self.budget.deposit((self.clock)(now));
        (now, Retried { end, number: 1, last: None })
    }

    /// An attempt has answered `result`, recorded as `verdict` (`None`:
    /// refused, nothing recorded): the call's answer, or when to retry. A
    /// retry due has taken its token from the budget.
    pub(crate) fn after<T, E>(
        &self,
        state: &mut Retried<T, E>,
        result: Result<T, Error<E>>,
        verdict: Option<Verdict>,
    ) -> Next<T, E> {
        let (retry, budget, clock) = (self.retry, self.budget, self.clock);
        if verdict.is_none()
            && let Some(previous) = state.last.take()
        {
            // A retry refused after all (the breaker opened or the pool
            // filled during the backoff): the provider's own error is the
            // answer, and the retry it never made gives its token back.
            budget.refund(clock(Instant::now()));
            return Next::Done(previous);
        }
        // A panic is a failure to the breaker, but a bug in the job, not a transient
        // fault of the provider: running it again would only panic again.
        let panicked = matches!(result, Err(Error::Panicked(_)));
        // A timeout at the caller's deadline was recorded as ignored: no time is left to retry.
        if verdict != Some(Verdict::Failure) || panicked || state.number >= retry.max_attempts() {
            return Next::Done(result);
        }
        let pause = retry.pause(state.number, self.jitter);
        let now = Instant::now();
        // The end bounds the sleep *and* leaves the next attempt some time:
        // a backoff that ends at or past it would only buy an attempt with no time at all.
        let wake = now.checked_add(pause).filter(|wake| state.end.is_none_or(|e| *wake < e));
        // Ask before sleeping: a breaker that this very failure opened (or
        // any that stays open past the backoff) would only refuse the
        // next attempt, after a sleep for nothing. The budget is asked last:
        // asking takes a token.
        let why = match wake {
            None => "the call's deadline is near",
            Some(_) if !(self.may_admit)(now, pause) => "the breaker would refuse it",
            Some(_) if !budget.try_withdraw(clock(now)) => "the retry budget is spent",
            Some(wake) => {
                state.last = Some(result);
                return Next::RetryAt(wake);
            }
        };
        log::debug!("dependency {}: no retry, {why}", self.name);
        Next::Done(result)
    }

    /// The pause is over (at `now`): `Ok` to make the next attempt, or the
    /// call's answer when it cannot be made after all. A wake-up may
    /// overshoot: if it ate the rest of the time, the failure that caused the
    /// retry is the answer, not a rejection of an attempt that had no time
    /// left. Nor is an attempt made that the breaker, opened during the
    /// pause, would refuse.
    pub(crate) fn resume<T, E>(
        &self,
        state: &mut Retried<T, E>,
        now: Instant,
    ) -> Result<(), Result<T, Error<E>>> {
        let Some(previous) = state.last.take() else {
            // Unreachable: a retry is due only with the answer it retries.
            return Err(Err(Error::from(crate::error::Rejection::ShuttingDown)));
        };
        if state.end.is_some_and(|e| now >= e) || !(self.may_admit)(now, Duration::ZERO) {
            self.budget.refund((self.clock)(now));
            return Err(previous);
        }
        state.last = Some(previous);
        state.number += 1;
        (self.retried)();
        Ok(())
    }

    /// A call given up during a pause (a fan-out's leg dropped): the retry
    /// it will not make gives its token back.
    pub(crate) fn abandon<T, E>(&self, state: &mut Retried<T, E>) {
        if state.last.take().is_some() {
            self.budget.refund((self.clock)(Instant::now()));
        }
    }
}
