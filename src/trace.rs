//! The `tracing` feature's hooks on the call path; without the feature every
//! hook is an empty inline function over a zero-sized type.
//!
//! A call hops threads: the caller submits, a worker runs the job. A span
//! entered on the caller is not current on the worker, so a trace would stop
//! at the hop. The call path therefore
//!
//! 1. [`capture`]s, on the calling thread at submission, the caller's current
//!    span and its dispatcher (the subscriber in force there, which may be a
//!    scoped one set with `tracing::subscriber::with_default`);
//! 2. [`enter`]s, on the worker, that dispatcher as the thread's default and a
//!    new `job` span whose parent is the captured span, and holds both until
//!    the job returns. The span carries the dependency's name, the attempt, and
//!    the deadline's remaining milliseconds when the job started; events the job
//!    itself emits land inside it.
//!
//! A job that never starts (its deadline passed in the queue, its caller gone,
//! shutdown) makes no span. Rejections, the refusals of a policy in shadow,
//! timeouts and breaker transitions are events with target `watertight`:
//! rejections, shadow refusals and timeouts at `DEBUG` and
//! transitions at `INFO`, the levels the `log` records of the same happenings
//! have. `log` is untouched: a program that bridges `log` into `tracing` sees
//! both.
//!
//! When no subscriber is set anywhere, [`capture`] finds the no-op dispatcher
//! and captures nothing, so the worker does no tracing work at all.

#[cfg(feature = "tracing")]
mod imp {
    use std::time::Duration;

    use tracing::dispatcher::{self, DefaultGuard, Dispatch};
    use tracing::span::EnteredSpan;
    use tracing::subscriber::NoSubscriber;
    use tracing::{Span, debug, info, info_span};

    use crate::breaker::{Breaker, Transition};
    use crate::error::Rejection;
    use crate::pool::CallContext;

    /// The caller's side of the hop: its dispatcher and current span.
    pub(crate) struct Parent(Option<(Dispatch, Span)>);

    /// The worker's side, held while the job runs. Fields drop in order: the
    /// span is exited (by the dispatcher that made it) before the thread's
    /// default dispatcher is put back.
    pub(crate) struct InSpan {
        _span: EnteredSpan,
        _dispatch: DefaultGuard,
    }

    /// On the calling thread, at submission.
    #[inline]
    pub(crate) fn capture() -> Parent {
        let dispatch = dispatcher::get_default(Dispatch::clone);
        if dispatch.is::<NoSubscriber>() {
            return Parent(None);
        }
        Parent(Some((dispatch, Span::current())))
    }

    /// On the worker, first thing in the job; the job runs inside the
    /// returned guard.
    #[inline]
    pub(crate) fn enter(parent: Parent, ctx: &CallContext) -> Option<InSpan> {
        let (dispatch, parent) = parent.0?;
        let guard = dispatcher::set_default(&dispatch);
        // `parent: &Span`: a caller with no current span makes the job a root
        // span, never a child of whatever happens to be current on the worker.
        let span = info_span!(
            target: "watertight",
            parent: &parent,
            "job",
            dependency = ctx.dependency(),
            attempt = ctx.attempt(),
            deadline_ms = millis(ctx.remaining()),
        );
        Some(InSpan { _span: span.entered(), _dispatch: guard })
    }

    /// A call turned away at once.
    #[inline]
    pub(crate) fn rejected(dependency: &str, rejection: Rejection) {
        debug!(target: "watertight", dependency, rejection = rejection.as_str(), "call rejected: {rejection}");
    }

    /// A refusal that a policy in shadow would have made, and did not.
    pub(crate) fn shadow_refused(dependency: &str, policy: crate::shadow::Policy, rejection: Rejection) {
        debug!(
            target: "watertight",
            dependency,
            policy = policy.as_str(),
            reason = rejection.as_str(),
            "{policy} in shadow would have refused a call: {rejection}"
        );
    }

    /// A caller that stopped waiting at the deadline.
    #[inline]
    pub(crate) fn timed_out(dependency: &str, waited: Duration) {
        debug!(target: "watertight", dependency, waited_ms = millis(waited), "no answer within {waited:?}");
    }

    /// Sends every transition of `breaker` to tracing as well.
    pub(crate) fn watch_transitions(breaker: &Breaker) {
        breaker.on_transition(|t: &Transition| {
            info!(
                target: "watertight",
                dependency = t.name(),
                from = t.from().as_str(),
                to = t.to().as_str(),
                failure_rate = t.failure_rate(),
                slow_call_rate = t.slow_call_rate(),
                "breaker {} -> {}",
                t.from().as_str(),
                t.to().as_str(),
            );
        });
    }

    fn millis(d: Duration) -> u64 {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(not(feature = "tracing"))]
mod imp {
    use std::time::Duration;

    use crate::breaker::Breaker;
    use crate::error::Rejection;
    use crate::pool::CallContext;

    pub(crate) struct Parent;

    #[inline(always)]
    pub(crate) fn capture() -> Parent {
        Parent
    }

    #[inline(always)]
    pub(crate) fn enter(_: Parent, _: &CallContext) -> Option<()> {
        None
    }

    #[inline(always)]
    pub(crate) fn rejected(_: &str, _: Rejection) {}

    #[inline(always)]
    pub(crate) fn shadow_refused(_: &str, _: crate::shadow::Policy, _: Rejection) {}

    #[inline(always)]
    pub(crate) fn timed_out(_: &str, _: Duration) {}

    #[inline(always)]
    pub(crate) fn watch_transitions(_: &Breaker) {}
}

pub(crate) use imp::{capture, enter, rejected, shadow_refused, timed_out, watch_transitions};
