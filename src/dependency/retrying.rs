//! A retried call: blocking attempts (`once.rs`) under the retry loop, which
//! lives with its policy (`retry/run.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Counters, Dependency, Priority};
use crate::classify::Verdict;
use crate::error::Error;
use crate::pool::CallContext;
use crate::retry::Retrier;

impl Dependency {
    /// Retries `job` (see [`CallBuilder::retry`](crate::CallBuilder::retry)).
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
        let job = Arc::new(job);
        self.with_retrier(|retrier| {
            retrier.run(caller, |now, end, number| {
                let job = Arc::clone(&job);
                self.attempt((now, end, number), priority, classify, move |ctx| job(ctx))
            })
        })
    }

    /// Runs `f` with the retry loop over this dependency: its policy, its
    /// budget, its clock and its breaker's word on the next attempt.
    pub(super) fn with_retrier<R>(&self, f: impl FnOnce(&Retrier<'_>) -> R) -> R {
        let inner = &*self.inner;
        let clock = |now: Instant| inner.clock_now(now);
        let may_admit = |now: Instant, after: Duration| {
            inner.clock_now(now).checked_add(after).is_none_or(|at| inner.breaker.may_permit_at(at))
        };
        let retrier = Retrier {
            retry: &inner.live.retry(),
            budget: &inner.budget,
            jitter: &inner.jitter,
            name: &inner.name,
            clock: &clock,
            may_admit: &may_admit,
            retried: &|| Counters::bump(&inner.counters.retried),
        };
        f(&retrier)
    }
}
