//! [`Limiter`]: an adaptive concurrency limit that follows the provider's
//! latency, and its [`LimitPermit`]; and [`RateLimiter`], a rate and a burst
//! whose callers wait for a permit only as long as their deadline allows
//! (`rate.rs`).
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
mod rate;
mod rule;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use self::config::AdaptiveLimit;
use self::config::MAX_LIMIT;
pub use self::rate::{RateLimit, RateLimited, RateLimiter};
use self::rule::{BaselineChange, Rule};
use crate::classify::Verdict;
use crate::error::ConfigError;

/// An adaptive limit on the calls in flight to one provider.
///
/// Cheap to clone (an `Arc` inside); clones share the limit. The limiter
/// keeps no clock: the caller passes the time of its injected
/// [`Clock`](crate::Clock) to [`try_acquire`](Self::try_acquire), and a call's
/// completion is that time plus the latency given to
/// [`LimitPermit::record`]. A test that drives it from a
/// [`ManualClock`](crate::ManualClock) therefore needs no sleep.
///
/// ```
/// use std::time::Duration;
/// use watertight::{Clock, ManualClock, Verdict, limit::{AdaptiveLimit, Limiter}};
///
/// let clock = ManualClock::new();
/// let limiter = Limiter::new(AdaptiveLimit::new().min_limit(2), 16)?;
/// assert_eq!(limiter.limit(), 16);
///
/// // One round: as many calls at once as the limit admits, each taking `latency`.
/// let round = |latency: Duration| {
///     let permits: Vec<_> = std::iter::from_fn(|| limiter.try_acquire(clock.now())).collect();
///     clock.advance(latency);
///     permits.into_iter().for_each(|p| p.record(latency, Verdict::Success));
/// };
/// // A healthy provider, 5 ms a call: the limit stays at the maximum.
/// (0..20).for_each(|_| round(Duration::from_millis(5)));
/// assert_eq!(limiter.limit(), 16);
/// // A brownout, 500 ms a call: halved once per round, down to the minimum.
/// (0..3).for_each(|_| round(Duration::from_millis(500)));
/// assert_eq!(limiter.limit(), 2);
/// // Two calls in flight fill it; a third is turned away at once.
/// let (a, b) = (limiter.try_acquire(clock.now()), limiter.try_acquire(clock.now()));
/// assert!(a.is_some() && b.is_some());
/// assert!(limiter.try_acquire(clock.now()).is_none());
/// drop((a, b)); // released without a sample
/// assert_eq!(limiter.in_flight(), 0);
///
/// // Still 500 ms with two calls at once: not a queue but a slower provider.
/// // After ten calls and half a second at the minimum, 500 ms is re-measured as
/// // the no-load latency, and the limit climbs again.
/// (0..5).for_each(|_| round(Duration::from_millis(500)));
/// assert_eq!(limiter.baseline(), Some(Duration::from_millis(500)));
/// (0..30).for_each(|_| round(Duration::from_millis(500)));
/// assert_eq!(limiter.limit(), 16);
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

struct Inner {
    /// The one lock. Invariants, true whenever it is not held:
    /// - `in_flight` equals the number of live permits (each permit takes one
    ///   in `try_acquire` and gives it back exactly once, in `record` or on
    ///   drop);
    /// - `rule.limit()` is in `[min, max]`;
    /// - a permit was granted only when `in_flight < rule.limit()` before it.
    state: Mutex<State>,
}

struct State {
    in_flight: usize,
    rule: Rule,
    config: AdaptiveLimit,
    min: usize,
    max: usize,
}

impl Limiter {
    /// A limiter between `config`'s minimum and `max` (for a dependency, its
    /// worker count), starting at `max`.
    ///
    /// Refuses an invalid `config` (see [`AdaptiveLimit::validate`]), a `max`
    /// outside `[1, 4096]` (field `max_limit`), and a minimum above `max`
    /// (field `min_limit`).
    pub fn new(config: AdaptiveLimit, max: usize) -> Result<Limiter, ConfigError> {
        Self::check(&config, max)?;
        let rule = Rule::new(&config, max);
        let state = State { in_flight: 0, rule, min: config.min_limit, max, config };
        Ok(Limiter { inner: Arc::new(Inner { state: Mutex::new(state) }) })
    }

    fn check(config: &AdaptiveLimit, max: usize) -> Result<(), ConfigError> {
        config.validate()?;
        if !(1..=MAX_LIMIT).contains(&max) {
            return Err(ConfigError::new("max_limit", "in [1, 4096]", max));
        }
        if config.min_limit > max {
            return Err(ConfigError::new(
                "min_limit",
                "at most the maximum (the worker count)",
                format_args!("{} > {max}", config.min_limit),
            ));
        }
        Ok(())
    }

    /// Replaces the configuration and the maximum while calls run, checked
    /// as [`new`](Self::new) checks them. What the limit has learned (the
    /// latencies, a congestion under way) is kept and the limit is brought
    /// within the new bounds; permits already out stay valid, and no new one
    /// is granted until fewer than the limit are in flight.
    pub fn reconfigure(&self, config: AdaptiveLimit, max: usize) -> Result<(), ConfigError> {
        Self::check(&config, max)?;
        let mut st = self.inner.state.lock();
        st.rule = st.rule.retuned(&config, max);
        st.min = config.min_limit;
        st.max = max;
        st.config = config;
        Ok(())
    }

    /// The configuration in force.
    pub fn config(&self) -> AdaptiveLimit {
        self.inner.state.lock().config.clone()
    }

    /// A permit for one call if fewer than [`limit`](Self::limit) calls are
    /// in flight, else `None` at once. `now` is the time on the caller's
    /// [`Clock`](crate::Clock): the start of the call, to which the latency
    /// given to [`LimitPermit::record`] is added.
    #[inline]
    pub fn try_acquire(&self, now: Instant) -> Option<LimitPermit> {
        let mut st = self.inner.state.lock();
        if st.in_flight >= st.rule.limit() {
            return None;
        }
        st.in_flight += 1;
        let in_flight = st.in_flight;
        drop(st);
        Some(LimitPermit { inner: Arc::clone(&self.inner), issued: now, in_flight, released: false })
    }

    /// How many calls may be in flight at once now.
    pub fn limit(&self) -> usize {
        self.inner.state.lock().rule.limit()
    }

    /// How many permits are out (see the module docs for what that counts).
    pub fn in_flight(&self) -> usize {
        self.inner.state.lock().in_flight
    }

    /// The lowest the limit goes.
    pub fn min_limit(&self) -> usize {
        self.inner.state.lock().min
    }

    /// The highest the limit goes, where it starts.
    pub fn max_limit(&self) -> usize {
        self.inner.state.lock().max
    }

    /// The no-load latency the limit is measured against: what the provider
    /// takes when it is not queueing (see the module docs); `None` before the
    /// first success.
    pub fn baseline(&self) -> Option<Duration> {
        self.inner.state.lock().rule.no_load()
    }

    /// The short-term latency; `None` before the first success.
    pub fn latency(&self) -> Option<Duration> {
        self.inner.state.lock().rule.short()
    }
}

impl fmt::Debug for Limiter {
    /// Never blocks: prints `<locked>` for the figures while the lock is held.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Limiter");
        match self.inner.state.try_lock() {
            Some(st) => d
                .field("min", &st.min)
                .field("max", &st.max)
                .field("limit", &st.rule.limit())
                .field("in_flight", &st.in_flight),
            None => d.field("limit", &format_args!("<locked>")),
        };
        d.finish()
    }
}

/// Leave to make one call, from [`Limiter::try_acquire`].
///
/// Report how the call went with [`record`](Self::record). A permit dropped
/// without a report is released without a sample: it frees its place and
/// teaches the limit nothing, so a call that was never made (rejected further
/// down the path) or whose outcome is to be ignored leaves the limit as it was.
#[must_use = "a dropped permit is released without a sample; call `record` with the latency and verdict"]
pub struct LimitPermit {
    inner: Arc<Inner>,
    issued: Instant,
    /// The calls in flight when it was granted, itself included.
    in_flight: usize,
    released: bool,
}

impl LimitPermit {
    /// Reports the call and releases its place. `latency` is the time from
    /// the call (the `now` given to `try_acquire`) to its answer.
    ///
    /// - [`Verdict::Success`]: a latency sample for the gradient.
    /// - [`Verdict::Failure`] (an error, a timeout, a panic): the limit is cut
    ///   by [`failure_cut`](AdaptiveLimit::failure_cut) at once; the latency is
    ///   not sampled (a timeout's latency is only the deadline).
    /// - [`Verdict::Ignore`] (a 4xx): no sample, as when dropped.
    pub fn record(mut self, latency: Duration, verdict: Verdict) {
        self.released = true;
        let changed = {
            let mut st = self.inner.state.lock();
            st.in_flight -= 1;
            match verdict {
                Verdict::Success => st.rule.on_success(latency, self.issued, self.in_flight),
                Verdict::Failure => {
                    st.rule.on_failure();
                    BaselineChange::None
                }
                Verdict::Ignore => BaselineChange::None,
            }
        };
        if let BaselineChange::Remeasured { from, to } = changed {
            log::info!(
                "adaptive limit: the latency stayed high at the minimum concurrency; \
                 no-load latency re-measured there: {from:?} -> {to:?}"
            );
        }
    }

    /// When the call started, on the caller's clock.
    pub fn issued(&self) -> Instant {
        self.issued
    }

    /// The calls in flight when this permit was granted, itself included.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl Drop for LimitPermit {
    fn drop(&mut self) {
        if !self.released {
            self.inner.state.lock().in_flight -= 1;
        }
    }
}

impl fmt::Debug for LimitPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitPermit")
            .field("issued", &self.issued)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync + 'static>() {}
    is::<Limiter>();
    is::<LimitPermit>();
    is::<AdaptiveLimit>();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn construction_checks_the_bounds() {
        assert_eq!(Limiter::new(AdaptiveLimit::new(), 0).unwrap_err().field(), "max_limit");
        assert_eq!(Limiter::new(AdaptiveLimit::new(), 4097).unwrap_err().field(), "max_limit");
        assert_eq!(Limiter::new(AdaptiveLimit::new().min_limit(5), 4).unwrap_err().field(), "min_limit");
        assert_eq!(Limiter::new(AdaptiveLimit::new().smoothing(0.0), 4).unwrap_err().field(), "smoothing");
        let l = Limiter::new(AdaptiveLimit::new().min_limit(4), 4).unwrap();
        assert_eq!((l.limit(), l.min_limit(), l.max_limit()), (4, 4, 4));
    }

    #[test]
    fn permits_count_in_flight_and_the_limit_is_enforced() {
        let clock = ManualClock::new();
        let l = Limiter::new(AdaptiveLimit::new(), 3).unwrap();
        let permits: Vec<_> = (0..3).map(|_| l.try_acquire(clock.now()).unwrap()).collect();
        assert_eq!(l.in_flight(), 3);
        assert!(l.try_acquire(clock.now()).is_none());
        let mut permits = permits.into_iter();
        permits.next().unwrap().record(ms(5), Verdict::Success);
        assert_eq!(l.in_flight(), 2);
        permits.next().unwrap().record(ms(5), Verdict::Ignore);
        drop(permits);
        assert_eq!(l.in_flight(), 0);
        assert_eq!(l.limit(), 3, "successes within tolerance keep the maximum");
    }

    #[test]
    fn a_cut_below_in_flight_revokes_nothing_and_admits_nothing_until_drained() {
        let clock = ManualClock::new();
        let l = Limiter::new(AdaptiveLimit::new().min_limit(1).failure_cut(50.0), 8).unwrap();
        let mut held: Vec<_> = (0..8).map(|_| l.try_acquire(clock.now()).unwrap()).collect();
        held.pop().unwrap().record(ms(3000), Verdict::Failure);
        held.pop().unwrap().record(ms(3000), Verdict::Failure);
        assert_eq!(l.limit(), 2);
        assert_eq!(l.in_flight(), 6);
        assert!(l.try_acquire(clock.now()).is_none());
        held.truncate(2);
        assert_eq!(l.in_flight(), 2);
        assert!(l.try_acquire(clock.now()).is_none(), "2 in flight, limit 2");
        held.pop();
        assert!(l.try_acquire(clock.now()).is_some());
    }

    #[test]
    fn timeouts_cut_the_limiter_multiplicatively() {
        let clock = ManualClock::new();
        let l = Limiter::new(AdaptiveLimit::new(), 16).unwrap();
        let mut seen = vec![l.limit()];
        for _ in 0..6 {
            let p = l.try_acquire(clock.now()).unwrap();
            clock.advance(Duration::from_secs(3));
            p.record(Duration::from_secs(3), Verdict::Failure);
            seen.push(l.limit());
        }
        // 16, 12.8, 10.24, 8.19, 6.55, 5.24, 4.19
        assert_eq!(seen, [16, 12, 10, 8, 6, 5, 4]);
    }

    #[test]
    fn concurrent_callers_never_exceed_the_limit() {
        let l = Limiter::new(AdaptiveLimit::new().min_limit(1), 4).unwrap();
        let clock = ManualClock::new();
        let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (l, clock, peak, barrier) =
                    (l.clone(), clock.clone(), Arc::clone(&peak), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    for n in 0..2000u64 {
                        if let Some(p) = l.try_acquire(clock.now()) {
                            peak.fetch_max(l.in_flight(), std::sync::atomic::Ordering::Relaxed);
                            let verdict = if (n + i) % 97 == 0 { Verdict::Failure } else { Verdict::Success };
                            p.record(ms(1 + n % 7), verdict);
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(l.in_flight(), 0);
        assert!(peak.load(std::sync::atomic::Ordering::Relaxed) <= 4);
        assert!((1..=4).contains(&l.limit()));
    }

    #[derive(Debug, Clone)]
    enum Step {
        Acquire,
        Record(u64, u8),
        Drop,
        Advance(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => Just(Step::Acquire),
            3 => (0u64..5_000, 0u8..3).prop_map(|(ms, v)| Step::Record(ms, v)),
            1 => Just(Step::Drop),
            1 => (0u64..600_000).prop_map(Step::Advance),
        ]
    }

    fn config() -> impl Strategy<Value = (AdaptiveLimit, usize)> {
        (1usize..=8, 1usize..=64, 0.0f64..300.0, 1.0f64..=100.0, 1.0f64..99.0, 1u32..50, 0u64..120).prop_map(
            |(min, extra, tol, smooth, cut, short, relearn)| {
                let config = AdaptiveLimit::new()
                    .min_limit(min)
                    .tolerance(tol)
                    .smoothing(smooth)
                    .failure_cut(cut)
                    .short_window(short)
                    .long_window(short * 10)
                    .relearn_after(Duration::from_secs(relearn));
                (config, min + extra - 1)
            },
        )
    }

    proptest! {
        #[test]
        fn limit_stays_in_bounds_and_in_flight_matches_permits(
            (config, max) in config(),
            steps in proptest::collection::vec(step(), 1..400),
        ) {
            let min = config.min_limit;
            let clock = ManualClock::new();
            let l = Limiter::new(config, max).unwrap();
            let mut held = Vec::new();
            for s in steps {
                match s {
                    Step::Acquire => {
                        let before = (l.in_flight(), l.limit());
                        match l.try_acquire(clock.now()) {
                            Some(p) => {
                                prop_assert!(before.0 < before.1);
                                held.push(p);
                            }
                            None => prop_assert!(before.0 >= before.1),
                        }
                    }
                    Step::Record(lat, v) => {
                        if let Some(p) = held.pop() {
                            let verdict = [Verdict::Success, Verdict::Failure, Verdict::Ignore][usize::from(v)];
                            p.record(ms(lat), verdict);
                        }
                    }
                    Step::Drop => {
                        held.pop();
                    }
                    Step::Advance(by) => clock.advance(ms(by)),
                }
                prop_assert!((min..=max).contains(&l.limit()), "limit {} outside [{min}, {max}]", l.limit());
                prop_assert_eq!(l.in_flight(), held.len());
            }
        }
    }
}
