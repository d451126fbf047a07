//! [`Limiter`]: an adaptive concurrency limit that follows the provider's
//! latency, and its [`LimitPermit`] (`limiter.rs`); [`RateLimiter`], a rate
//! and a burst whose callers wait for a permit only as long as their
//! deadline allows (`rate.rs`); and [`Throttler`], client-side adaptive
//! throttling (`throttle.rs`), asked in this order around the breaker
//! (throttle, rate, breaker, limit), which never records a call they refuse.
//!
//! # A provider in brownout
//!
//! A breaker handles a dead provider and a deadline a hung one; neither
//! handles calls that succeed slowly.
//! [`DependencyBuilder::adaptive_limit`](crate::DependencyBuilder::adaptive_limit)
//! keeps the calls admitted at once between a minimum and the worker count,
//! cut to what Little's law says the provider serves at once; a call over it is
//! refused [`LimitExceeded`](crate::Rejection::LimitExceeded).
//! [`DependencyBuilder::rate_limit`](crate::DependencyBuilder::rate_limit) caps
//! the calls made; a caller waits for a permit only when the wait fits its
//! deadline and `max_wait`, else it is refused `RateLimited` with `retry_after`.
//!
//! # Adaptive throttling
//!
//! A breaker is all or nothing;
//! [`DependencyBuilder::throttle`](crate::DependencyBuilder::throttle) sheds only
//! the share of calls the provider is not accepting (the SRE book's). Over a
//! sliding window (30 s in 1 s buckets) it counts *requests* (attempts the
//! provider answered or timed out on) and *accepts* (those the classifier did
//! not call failures), and refuses each call first, `Throttled`, with
//! probability `max(0, (requests - k x accepts) / (requests + 1))` (`k` 2), once
//! the window holds `min_requests` (20). A refused call is no request, so a
//! provider accepting 40 % settles at 20 % refused, and once it recovers the
//! refusals are gone within a window. A sheddable call is refused with
//! `sqrt(p)`, a critical one with `p^2`.
//!
//! # Why the adaptive limit's rule is shaped so
//!
//! The rule itself is in `rule.rs`, in pseudo-code. It is measured against
//! the provider's *no-load latency*, what a call takes when the provider is
//! not queueing. A cut goes to what Little's law says the provider serves at
//! once (`c * no_load / latency`), at most once per round trip (calls issued
//! before it described the old limit), and only with at least half the limit
//! in use: a limit nobody reaches holds no request thread, so it is not cut
//! on a noisy moment. Above the *knee* (the last limit cut to) the limit
//! climbs by one call per few round trips: a probe past where the provider
//! queued costs a queue.
//!
//! **Queueing, or slower now.** A provider past its capacity queues: fewer
//! calls at once are served as fast. One that is simply slower now (a slower
//! release) takes as long however few calls it gets. The rule tells them
//! apart by concurrency: when the latency stays above tolerance with the
//! limit at its minimum (for `short_window` calls and
//! [`relearn_after`](AdaptiveLimit::relearn_after)), it is the provider's
//! no-load latency now, re-measured there (logged at `info`), and the limit
//! climbs from the minimum until the provider queues again. Envoy's adaptive
//! concurrency filter measures at a reduced concurrency too, but on a timer;
//! here only when the evidence asks, so a healthy provider never pays. A
//! provider slower *and* failing stays at the minimum; the breaker's
//! slow-call rate and the deadline remain the defence there.
//!
//! **Baseline drift.** A baseline that is a long-term average of the latency
//! (Gradient2's, failsafe-go's, see failsafe-go issue 127) follows a long
//! incident up until the limit climbs back to the maximum mid-brownout. Here
//! no queued latency enters the no-load latency: it follows only calls within
//! tolerance issued with at most half the limit (or the minimum) in flight
//! (span [`long_window`](AdaptiveLimit::long_window)), and falls at the
//! short-term pace only when the provider gets twice as fast (a recovery,
//! which also forgets the knee), which noise does not reach.
//!
//! # What "in flight" means
//!
//! From the moment [`Limiter::try_acquire`] grants a permit until it is
//! recorded or dropped. Wired into a dependency, the permit is taken before
//! the job is submitted and released when the caller has its answer: queued
//! plus running calls whose caller waits. An abandoned job is no longer in
//! flight; the pool's worker count still bounds it, and its timeout has cut
//! the limit. Each permit remembers the calls in flight when it was granted
//! ([`LimitPermit::in_flight`]): the concurrency its latency was measured at.
//! A permit is granted only while `in_flight < limit`; a cut revokes none.

mod config;
mod limiter;
mod rate;
mod rule;
mod throttle;

pub use self::config::AdaptiveLimit;
pub use self::limiter::{LimitPermit, Limiter};
pub use self::rate::{RateLimit, RateLimiter};
pub use self::throttle::{Throttle, ThrottleStats, Throttler};

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync + 'static>() {}
    is::<Limiter>();
    is::<LimitPermit>();
    is::<AdaptiveLimit>();
    is::<Throttler>();
}
