//! [`Limiter`]: the limit, the calls in flight under it, and the one lock
//! that keeps the two together; and [`LimitPermit`], one call's place under
//! the limit, and its report.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::config::{AdaptiveLimit, MAX_LIMIT};
use super::rule::{BaselineChange, Rule};
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

pub(super) struct Inner {
    /// The one lock. Invariants, true whenever it is not held:
    /// - `in_flight` equals the number of live permits (each permit takes one
    ///   in `try_acquire` and gives it back exactly once, in `record` or on
    ///   drop);
    /// - `rule.limit()` is in `[min, max]`;
    /// - a permit was granted only when `in_flight < rule.limit()` before it.
    pub(super) state: Mutex<State>,
}

pub(super) struct State {
    pub(super) in_flight: usize,
    pub(super) rule: Rule,
    /// Its `min_limit` is the lower bound.
    config: AdaptiveLimit,
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
        let state = State { in_flight: 0, rule, max, config };
        Ok(Limiter { inner: Arc::new(Inner { state: Mutex::new(state) }) })
    }

    fn check(config: &AdaptiveLimit, max: usize) -> Result<(), ConfigError> {
        config.validate()?;
        ConfigError::check((1..=MAX_LIMIT).contains(&max), "max_limit", "in [1, 4096]", max)?;
        let (min, rule) = (config.min_limit, "at most the maximum (the worker count)");
        ConfigError::check(min <= max, "min_limit", rule, format_args!("{min} > {max}"))
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

    /// How many permits are out (see [the module docs](crate::limit#what-in-flight-means)
    /// for what that counts).
    pub fn in_flight(&self) -> usize {
        self.inner.state.lock().in_flight
    }

    /// The lowest the limit goes.
    pub fn min_limit(&self) -> usize {
        self.inner.state.lock().config.min_limit
    }

    /// The highest the limit goes, where it starts.
    pub fn max_limit(&self) -> usize {
        self.inner.state.lock().max
    }

    /// The no-load latency the limit is measured against: what the provider
    /// takes when it is not queueing (see [the module docs](crate::limit));
    /// `None` before the first success.
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
                .field("min", &st.config.min_limit)
                .field("max", &st.max)
                .field("limit", &st.rule.limit())
                .field("in_flight", &st.in_flight),
            None => d.field("limit", &format_args!("<locked>")),
        };
        d.finish()
    }
}

/// Leave to make one call, from [`Limiter::try_acquire`](super::Limiter::try_acquire).
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
    ///   by [`failure_cut`](super::AdaptiveLimit::failure_cut) at once; the latency is
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::Verdict;
    use crate::clock::{Clock, ManualClock};
    use proptest::prelude::*;
    use proptest::test_runner::RngSeed;

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
        #![proptest_config(ProptestConfig { rng_seed: RngSeed::Fixed(0x5eed), ..ProptestConfig::default() })]

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
