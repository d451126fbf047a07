//! [`Limiter`]: an adaptive concurrency limit that follows the provider's
//! latency, and its [`LimitPermit`] (`limiter.rs`); and
//! [`RateLimiter`], a rate and a burst whose callers wait for a permit only
//! as long as their deadline allows (`rate.rs`); and [`Throttler`], client-side
//! adaptive throttling, which refuses the share of calls a struggling
//! provider is not accepting (`throttle.rs`, where its rule is told).
//!
//! A fixed pool holds as many request threads as it admits for as long as the
//! provider takes. When a provider browns out (5 ms becomes 500 ms, errors
//! stay rare), every call still succeeds, the breaker stays closed, and the
//! pool keeps its full complement of request threads for the whole incident.
//! A limiter admits fewer calls while the latency is high, so fewer request
//! threads wait on the slow provider, and gives the full limit back once the
//! latency returns.
//!
//! # The rule (see `rule.rs` for it in pseudo-code)
//!
//! The limit is measured against the provider's *no-load latency*: what a
//! call takes when the provider is not queueing. Each success is a sample:
//! its latency, and the calls in flight when it was issued (`c`, itself
//! included). A call counts as queued when it took more than
//! [`tolerance`](AdaptiveLimit::tolerance) above the no-load latency and
//! either the short-term latency (an average over
//! [`short_window`](AdaptiveLimit::short_window) samples) is above it too, or
//! the call was a probe above the knee (below).
//!
//! - **Queueing, with at least half the limit in use**: the limit is cut to
//!   what Little's law says the provider serves at once without queueing,
//!   `c * no_load / latency` (for a probe, back to `c - 1`), never below half
//!   of it, and that limit is remembered as the *knee*. The cut is made once
//!   per round trip: calls issued before it described the old limit and are
//!   not counted again. A limit nobody reaches holds no request thread, so
//!   it is not cut on a noisy moment.
//! - **Within tolerance**: the limit climbs, by
//!   [`smoothing`](AdaptiveLimit::smoothing) percent of `sqrt(L)` per success
//!   below the knee (or when none is known), and by one call per
//!   `smoothing` percent of a call per round trip above it (one call per five
//!   round trips at the default): a probe past the point where the provider
//!   queued costs a queue, so it is made rarely. A limit that does not bind
//!   (at most half of it in use) climbs fast wherever it is: growing it adds
//!   no call to the provider.
//! - **A failure or a timeout** cuts the limit at once by
//!   [`failure_cut`](AdaptiveLimit::failure_cut), and growth waits for
//!   `short_window` successes in a row.
//!
//! The limit stays in `[min_limit, max]`.
//!
//! # Queueing, or a provider that is slower now
//!
//! A provider past its capacity queues: its latency grows with the calls in
//! flight, and fewer calls at once are served as fast, with the same
//! throughput. A provider that is simply slower now (a slower release, a
//! longer route) takes as long however few calls it gets: fewer calls at
//! once would only serve fewer. The rule tells them apart by the concurrency:
//! when the latency stays above tolerance with the limit at its minimum (for
//! `short_window` calls issued there and
//! [`relearn_after`](AdaptiveLimit::relearn_after), default 500 ms), it did not
//! come down with the concurrency, so it is the provider's no-load latency
//! now: it is re-measured there (logged at `info`), and the limit climbs
//! from the minimum until the provider queues again. Against a provider that
//! serves 4 calls at once, 125 ms each, the limit falls from 16 to the
//! minimum at the step from 5 ms, re-measures 125 ms, and settles at 4 (with
//! a rare probe to 5): the 32 calls a second the provider can serve, with a
//! quarter of the request threads. Envoy's adaptive concurrency filter
//! measures its minimum round trip the same way, at a reduced concurrency,
//! but on a timer; here it is measured when the evidence asks for it, so a
//! healthy provider never pays for the measurement.
//!
//! A provider that is slower *and* failing stays at the minimum: each
//! failure cuts, growth waits for a run of successes, and a failure restarts
//! the re-measure. The breaker's slow-call rate and the deadline remain the
//! defence against a provider that is slow whatever the load.
//!
//! # Baseline drift
//!
//! A baseline that is a plain long-term average of the latency (Gradient2's,
//! and failsafe-go's, see failsafe-go issue 127) follows a long incident up:
//! after a few hundred samples at 500 ms the baseline *is* 500 ms, the
//! gradient returns to one, and the limit climbs back to the maximum while
//! the provider is still in brownout. Here no queued latency can enter the
//! no-load latency:
//!
//! - it follows calls within tolerance that were issued with at most half the
//!   limit (or the minimum) in flight (slowly, span
//!   [`long_window`](AdaptiveLimit::long_window)), and is re-measured at the
//!   minimum concurrency: both are measured where the provider does not
//!   queue, and no other call moves it up;
//! - it falls at the short-term pace when the provider gets twice as fast (it
//!   recovered), which also forgets the knee and starts a new epoch: calls
//!   issued before it measured the old provider. Noise does not get there, so
//!   the no-load latency is not worn down to the fastest calls either.
//!
//! A ten-minute saturation therefore keeps the limit at the provider's
//! capacity for as long as it lasts, however many samples it brings (a unit
//! test runs some 19,000). A rule that merely followed the latency up would
//! hold the whole pool again.
//!
//! # What "in flight" means
//!
//! A call is in flight from the moment [`Limiter::try_acquire`] grants its
//! permit until the permit is recorded or dropped. Wired into a dependency,
//! the permit is taken before the job is submitted and released when the
//! caller has its answer, so in flight counts the calls whose caller is
//! waiting: queued plus running. A job whose caller timed out and left
//! (abandoned, still on its worker) is no longer in flight; the pool's worker
//! count still bounds it, and its timeout has cut the limit. Each permit
//! remembers the calls in flight when it was granted, itself included
//! ([`LimitPermit::in_flight`]): the concurrency its latency was measured at.
//!
//! `try_acquire` grants a permit only while `in_flight < limit`. A cut may
//! leave more calls in flight than the new limit: none is revoked, and no new
//! permit is granted until enough of them have finished.

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
