//! The gradient rule: how the limit follows latency, as a plain state machine
//! with no lock and no clock (the caller passes the time of each sample).
//!
//! Per success sample `s` (the call's latency):
//!
//! ```text
//! short    = short + (s - short) * 2 / (short_window + 1)          // short-term latency
//! allowed  = baseline * (1 + tolerance)
//! short <= allowed:                                                 // within tolerance
//!     baseline += (short - baseline) * 2 / (short_window + 1)  if short < baseline  // falls fast
//!     baseline += (short - baseline) * 2 / (long_window + 1)   otherwise             // rises slowly
//!     target   = L + sqrt(L)                                         // probe upward
//! short >  allowed:                                                 // congested
//!     baseline unchanged                                             // never chases the incident
//!     target   = L * max(allowed / short, 1/2)                       // the gradient
//!              = L                     if in_flight < L / 2          // the limit does not bind
//! L = clamp(L + (target - L) * smoothing, min, max)
//! ```
//!
//! Per failure (an error or a timeout): `L = max(L * (1 - failure_cut), min)`.
//!
//! Relearning: once the latency has been above tolerance without a break for
//! `relearn_after`, the baseline is set to the current short-term latency and
//! the limit climbs again.

use std::time::{Duration, Instant};

use super::config::AdaptiveLimit;

/// The smallest latency the rule works with, so that a zero-length sample
/// cannot make a ratio infinite: one nanosecond, in seconds.
const MIN_LATENCY: f64 = 1e-9;
/// The lowest gradient one sample may apply: at most half the limit goes per
/// estimate (before smoothing), as in Gradient2.
const MIN_GRADIENT: f64 = 0.5;

/// The rule's state. Latencies are in seconds.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    min: f64,
    max: f64,
    /// `1 + tolerance / 100`.
    allowance: f64,
    /// `smoothing / 100`.
    smoothing: f64,
    /// `1 - failure_cut / 100`.
    keep_on_failure: f64,
    short_weight: f64,
    long_weight: f64,
    relearn_after: Option<Duration>,

    /// The estimated limit, always in `[min, max]`.
    limit: f64,
    /// The short-term latency; `None` before the first sample.
    short: Option<f64>,
    /// The long-term, no-congestion latency; `None` before the first sample.
    baseline: Option<f64>,
    /// When the current run of samples above tolerance began.
    congested_since: Option<Instant>,
}

/// What one sample did to the baseline, for logging by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BaselineChange {
    None,
    /// The incident outlasted `relearn_after`: the baseline now is the current latency.
    Relearned,
}

impl Rule {
    /// A rule starting at the maximum. `config` is valid and `min <= max`.
    pub(crate) fn new(config: &AdaptiveLimit, max: usize) -> Rule {
        let ewma = |span: u32| 2.0 / (f64::from(span) + 1.0);
        Rule {
            min: config.min_limit as f64,
            max: max as f64,
            allowance: 1.0 + config.tolerance / 100.0,
            smoothing: config.smoothing / 100.0,
            keep_on_failure: 1.0 - config.failure_cut / 100.0,
            short_weight: ewma(config.short_window),
            long_weight: ewma(config.long_window),
            relearn_after: (!config.relearn_after.is_zero()).then_some(config.relearn_after),
            limit: max as f64,
            short: None,
            baseline: None,
            congested_since: None,
        }
    }

    /// The same rule under a new configuration and maximum, keeping what it
    /// has learned (the latencies and the congestion clock); the limit is
    /// brought within the new bounds.
    pub(crate) fn retuned(&self, config: &AdaptiveLimit, max: usize) -> Rule {
        let mut next = Rule::new(config, max);
        next.limit = self.limit.clamp(next.min, next.max);
        next.short = self.short;
        next.baseline = self.baseline;
        next.congested_since = self.congested_since;
        next
    }

    /// The whole number of calls admitted at once.
    pub(crate) fn limit(&self) -> usize {
        // `limit` is in [min, max], both whole numbers, so the floor is too.
        self.limit.floor() as usize
    }

    pub(crate) fn short(&self) -> Option<Duration> {
        self.short.map(Duration::from_secs_f64)
    }

    pub(crate) fn baseline(&self) -> Option<Duration> {
        self.baseline.map(Duration::from_secs_f64)
    }

    /// A call answered successfully after `latency`, at `done`, with
    /// `in_flight` calls in flight (this one included).
    pub(crate) fn on_success(
        &mut self,
        latency: Duration,
        done: Instant,
        in_flight: usize,
    ) -> BaselineChange {
        let sample = latency.as_secs_f64().max(MIN_LATENCY);
        let short = match self.short {
            None => sample,
            Some(prev) => prev + (sample - prev) * self.short_weight,
        };
        self.short = Some(short);
        let baseline = *self.baseline.get_or_insert(short);
        let allowed = baseline * self.allowance;

        let mut change = BaselineChange::None;
        let target = if short <= allowed {
            self.congested_since = None;
            let weight = if short < baseline { self.short_weight } else { self.long_weight };
            self.baseline = Some(baseline + (short - baseline) * weight);
            self.limit + self.limit.sqrt()
        } else {
            let since = *self.congested_since.get_or_insert(done);
            if self.relearn_after.is_some_and(|after| done.saturating_duration_since(since) >= after) {
                self.baseline = Some(short);
                self.congested_since = None;
                change = BaselineChange::Relearned;
                self.limit
            } else if (in_flight as f64) * 2.0 < self.limit {
                // Under half the limit in use: it does not bind, so cutting it would
                // hold no fewer request threads, and a noisy moment (a busy CPU, a
                // GC pause of the provider) would turn into rejections once load
                // returns. A real brownout fills the limit within one latency
                // (callers keep arriving while the calls take longer) and is cut then.
                self.limit
            } else {
                self.limit * (allowed / short).max(MIN_GRADIENT)
            }
        };
        self.limit = (self.limit + (target - self.limit) * self.smoothing).clamp(self.min, self.max);
        change
    }

    /// A call failed or timed out.
    pub(crate) fn on_failure(&mut self) {
        self.limit = (self.limit * self.keep_on_failure).max(self.min);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    const MAX: usize = 16;

    fn rule(config: AdaptiveLimit) -> (Rule, ManualClock) {
        config.validate().unwrap();
        (Rule::new(&config, MAX), ManualClock::new())
    }

    /// Feeds `n` successes of `latency`, moving the clock by `latency / limit`
    /// before each (what `limit` calls in parallel would give), and returns
    /// the limit after each sample.
    fn feed(rule: &mut Rule, clock: &ManualClock, latency: Duration, n: usize) -> Vec<usize> {
        (0..n)
            .map(|_| {
                clock.advance(latency / rule.limit() as u32);
                rule.on_success(latency, clock.now(), rule.limit());
                rule.limit()
            })
            .collect()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn starts_at_the_maximum_and_stays_there_while_healthy() {
        let (mut r, clock) = rule(AdaptiveLimit::new());
        assert_eq!(r.limit(), MAX);
        let limits = feed(&mut r, &clock, ms(5), 1000);
        assert!(limits.iter().all(|&l| l == MAX), "{limits:?}");
        let base = r.baseline().unwrap();
        assert!(base >= ms(4) && base <= ms(6), "{base:?}");
    }

    #[test]
    fn a_step_from_5ms_to_500ms_shrinks_to_the_minimum_within_30_samples() {
        let (mut r, clock) = rule(AdaptiveLimit::new());
        feed(&mut r, &clock, ms(5), 200);
        let limits = feed(&mut r, &clock, ms(500), 30);
        // Each sample takes 10 % (half the gradient floor, smoothed by 20 %):
        // 16 * 0.9^k reaches 3 at k = 16, and the floor 2 by k = 20.
        assert_eq!(limits[0], 14, "the very first slow sample already cuts: {limits:?}");
        assert!(limits.windows(2).all(|w| w[1] <= w[0]), "monotone: {limits:?}");
        assert!(limits[16] <= 3, "{limits:?}");
        assert_eq!(*limits.last().unwrap(), 2, "{limits:?}");
    }

    #[test]
    fn a_moderate_rise_within_tolerance_does_not_cut() {
        let (mut r, clock) = rule(AdaptiveLimit::new());
        feed(&mut r, &clock, ms(10), 200);
        let limits = feed(&mut r, &clock, ms(14), 300);
        assert!(limits.iter().all(|&l| l == MAX), "{limits:?}");
    }

    #[test]
    fn a_rise_while_the_limit_is_not_half_used_does_not_cut() {
        let (mut r, clock) = rule(AdaptiveLimit::new());
        feed(&mut r, &clock, ms(5), 200);
        for _ in 0..100 {
            clock.advance(ms(5));
            r.on_success(ms(40), clock.now(), MAX / 2 - 1);
        }
        assert_eq!(r.limit(), MAX);
        // The same latency with the limit in use is cut.
        clock.advance(ms(5));
        r.on_success(ms(40), clock.now(), MAX / 2);
        assert!(r.limit() < MAX);
        assert!(r.baseline().unwrap() <= ms(6), "the baseline never took the rise in");
    }

    #[test]
    fn failures_and_timeouts_cut_multiplicatively() {
        let (mut r, _clock) = rule(AdaptiveLimit::new().min_limit(1));
        let mut expect = MAX as f64;
        for _ in 0..8 {
            r.on_failure();
            expect *= 0.8;
            assert_eq!(r.limit(), expect.floor() as usize);
        }
        // 16 * 0.8^8 = 2.68; four more cuts reach the floor and stay there.
        for _ in 0..20 {
            r.on_failure();
        }
        assert_eq!(r.limit(), 1);
    }

    #[test]
    fn recovery_returns_to_the_maximum_within_80_samples() {
        let (mut r, clock) = rule(AdaptiveLimit::new());
        feed(&mut r, &clock, ms(5), 200);
        feed(&mut r, &clock, ms(500), 100);
        assert_eq!(r.limit(), 2);
        let limits = feed(&mut r, &clock, ms(5), 80);
        // The short-term latency needs ~27 samples to fall under 7.5 ms, then
        // each sample adds a fifth of sqrt(L): some 26 more from 2 to 16.
        let back = limits.iter().position(|&l| l == MAX).expect("back to the maximum");
        assert!(back < 80, "{limits:?}");
        assert!(limits[back..].iter().all(|&l| l == MAX), "{limits:?}");
        assert!(r.baseline().unwrap() <= ms(6), "the incident did not move the baseline");
    }

    #[test]
    fn a_long_brownout_does_not_let_the_baseline_drift() {
        // Four minutes at 500 ms, under the five-minute relearn time: some
        // thousand samples, far more than the long window of 500 that would
        // have carried an always-moving average to 500 ms.
        let (mut r, clock) = rule(AdaptiveLimit::new());
        feed(&mut r, &clock, ms(5), 500);
        let start = clock.elapsed();
        let mut worst = 0;
        let mut samples = 0;
        while clock.elapsed() - start < Duration::from_secs(240) {
            let l = feed(&mut r, &clock, ms(500), 1)[0];
            samples += 1;
            if samples > 20 {
                worst = worst.max(l);
            }
        }
        assert!(samples > 900, "{samples}");
        assert_eq!(worst, 2, "the limit stayed at the minimum for the whole incident");
        assert!(r.baseline().unwrap() <= ms(6), "{:?}", r.baseline());
    }

    #[test]
    fn a_stray_fast_answer_does_not_restart_the_incident_clock() {
        // A single fast sample pulls the short-term EWMA only a fifth of the way
        // down: still congested, so the relearn timer keeps running.
        let (mut r, clock) = rule(AdaptiveLimit::new().relearn_after(Duration::from_secs(60)));
        feed(&mut r, &clock, ms(5), 200);
        for _ in 0..200 {
            feed(&mut r, &clock, ms(500), 3);
            feed(&mut r, &clock, ms(5), 1);
        }
        assert!(r.baseline().unwrap() > ms(100), "relearned after 60 s of incident: {:?}", r.baseline());
    }

    #[test]
    fn an_incident_past_relearn_after_becomes_the_new_normal() {
        let (mut r, clock) = rule(AdaptiveLimit::new().relearn_after(Duration::from_secs(30)));
        feed(&mut r, &clock, ms(5), 200);
        let start = clock.elapsed();
        let mut relearned_at = None;
        while clock.elapsed() - start < Duration::from_secs(90) {
            clock.advance(ms(250));
            if r.on_success(ms(500), clock.now(), r.limit()) == BaselineChange::Relearned {
                relearned_at.get_or_insert(clock.elapsed() - start);
            }
        }
        let at = relearned_at.expect("relearned");
        assert!(at >= Duration::from_secs(30) && at < Duration::from_secs(31), "{at:?}");
        assert!(r.baseline().unwrap() > ms(400));
        assert_eq!(r.limit(), MAX, "the new normal gets the full limit back");
    }

    #[test]
    fn relearning_can_be_switched_off() {
        let (mut r, clock) = rule(AdaptiveLimit::new().relearn_after(Duration::ZERO));
        feed(&mut r, &clock, ms(5), 200);
        for _ in 0..10_000 {
            clock.advance(Duration::from_secs(1));
            assert_eq!(r.on_success(ms(500), clock.now(), r.limit()), BaselineChange::None);
        }
        assert_eq!(r.limit(), 2);
        assert!(r.baseline().unwrap() <= ms(6));
    }

    #[test]
    fn zero_latency_samples_are_harmless() {
        let (mut r, clock) = rule(AdaptiveLimit::new());
        feed(&mut r, &clock, Duration::ZERO, 50);
        feed(&mut r, &clock, ms(1), 50);
        assert!((2..=MAX).contains(&r.limit()));
        assert!(r.short().unwrap() > Duration::ZERO);
    }
}
