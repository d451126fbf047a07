//! The rule: how the limit follows latency, as a plain state machine with no
//! lock and no clock (each sample carries its own times).
//!
//! Every success is a sample: its latency `s`, when it was issued, and `c`,
//! the calls in flight when it was issued (itself included). `no_load` is the
//! latency of the provider when it is not queueing; `allowed = no_load * (1 +
//! tolerance)`; `short` is an EWMA of `s` (span `short_window`) that restarts
//! at the first sample issued after a cut.
//!
//! ```text
//! issued before the epoch:  ignored        // the last cut, or the provider recovering
//! over  = s > allowed;  trend = short > allowed;  probe = c > knee;  clear = !over && !trend
//! not clear, L at min_limit:               // the latency did not come down with the concurrency
//!     count it; after short_window samples issued with c <= min_limit,
//!     spanning relearn_after:  no_load = their mean (re-measured), knee forgotten
//! over && (trend || probe):                // queueing
//!     c < L / 2:  hold                     // the limit does not bind
//!     otherwise:  L = min(L, max(c - 1 if probe else c * no_load / short, L / 2, min))
//!                 knee = L;  epoch = now    // once per round trip
//! otherwise not clear:  hold
//! clear:
//!     short < no_load / 2:  recovering: knee forgotten, epoch = now
//!     recovering, short < no_load / (1 + tolerance):  no_load falls at the short pace
//!     otherwise, c <= max(L / 2, min):  no_load follows short (span long_window)
//!     after short_window successes in a row:
//!         L += smoothing / L                // above the knee with c > L / 2: a probe,
//!                                           // `smoothing` calls per round trip
//!         L += smoothing * sqrt(L)          // otherwise
//! ```
//!
//! Per failure (an error or a timeout): `L = max(L * (1 - failure_cut), min)`,
//! and growth waits for `short_window` successes in a row.
//!
//! Why each part is there is in the module docs of `limit`.

use std::time::{Duration, Instant};

use super::config::AdaptiveLimit;

/// The smallest latency the rule works with, so that a zero-length sample
/// cannot make a ratio infinite: one nanosecond, in seconds.
const MIN_LATENCY: f64 = 1e-9;
/// The deepest one cut may go: at most half the limit per round trip.
const MIN_GRADIENT: f64 = 0.5;
/// How much faster than the no-load latency the short-term latency must be
/// for the provider to count as recovered (and the no-load latency to follow
/// it at the short-term pace): twice. Noise does not get there; a recovery
/// from a brownout does within a few calls.
const FASTER: f64 = 2.0;

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
    short_window: u32,
    short_weight: f64,
    long_weight: f64,
    relearn_after: Option<Duration>,

    /// The estimated limit, always in `[min, max]`.
    limit: f64,
    /// The short-term latency; `None` before the first sample.
    short: Option<f64>,
    /// `short` restarts from the next sample (one issued after a cut).
    restart_short: bool,
    /// The no-load latency; `None` before the first sample.
    no_load: Option<f64>,
    /// The limit set by the last latency cut: above it the provider queued.
    knee: Option<f64>,
    /// When the last latency cut was made, or the provider was last seen to
    /// get faster: calls issued before it describe a limit or a provider that
    /// is no more.
    epoch: Option<Instant>,
    /// Successes since the last failure (saturating).
    calm: u32,
    /// The provider got twice as fast: the no-load latency follows it down at
    /// the short-term pace until it is within tolerance.
    recovering: bool,
    /// Congested samples taken at the minimum, toward a re-measure.
    at_min: Option<AtMin>,
}

/// Congested samples taken with the limit at its minimum.
#[derive(Debug, Clone, Copy)]
struct AtMin {
    since: Instant,
    count: u32,
    sum: f64,
}

/// What one sample did to the no-load latency, for logging by the caller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum BaselineChange {
    None,
    /// The latency stayed high with the limit at its minimum: the no-load
    /// latency was re-measured there.
    Remeasured {
        from: Duration,
        to: Duration,
    },
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
            short_window: config.short_window,
            short_weight: ewma(config.short_window),
            long_weight: ewma(config.long_window),
            relearn_after: (!config.relearn_after.is_zero()).then_some(config.relearn_after),
            limit: max as f64,
            short: None,
            restart_short: false,
            no_load: None,
            knee: None,
            epoch: None,
            calm: config.short_window,
            recovering: false,
            at_min: None,
        }
    }

    /// The same rule under a new configuration and maximum, keeping what it
    /// has learned (the latencies, the knee, a cut or a re-measure under way);
    /// the limit is brought within the new bounds.
    pub(crate) fn retuned(&self, config: &AdaptiveLimit, max: usize) -> Rule {
        let fresh = Rule::new(config, max);
        Rule {
            limit: self.limit.clamp(fresh.min, fresh.max),
            short: self.short,
            restart_short: self.restart_short,
            no_load: self.no_load,
            knee: self.knee,
            epoch: self.epoch,
            calm: self.calm,
            recovering: self.recovering,
            at_min: self.at_min,
            ..fresh
        }
    }

    /// The whole number of calls admitted at once.
    pub(crate) fn limit(&self) -> usize {
        // `limit` is in [min, max], both whole numbers, so the floor is too.
        self.limit.floor() as usize
    }

    pub(crate) fn short(&self) -> Option<Duration> {
        self.short.map(Duration::from_secs_f64)
    }

    pub(crate) fn no_load(&self) -> Option<Duration> {
        self.no_load.map(Duration::from_secs_f64)
    }

    /// A call issued at `issued`, when `in_flight` calls were in flight (itself
    /// included), answered successfully after `latency`.
    pub(crate) fn on_success(
        &mut self,
        latency: Duration,
        issued: Instant,
        in_flight: usize,
    ) -> BaselineChange {
        self.calm = self.calm.saturating_add(1);
        // A call issued before the last cut measured the limit before it: the
        // cut has already answered what it says. Cutting again on it would cut
        // once per call still in flight instead of once per round trip. One
        // issued before the provider got faster measured the old provider.
        if self.epoch.is_some_and(|epoch| issued < epoch) {
            return BaselineChange::None;
        }
        let done = issued.checked_add(latency).unwrap_or(issued);
        let s = latency.as_secs_f64().max(MIN_LATENCY);
        let c = in_flight.max(1) as f64;
        let short = match self.short {
            Some(prev) if !self.restart_short => prev + (s - prev) * self.short_weight,
            _ => s,
        };
        self.short = Some(short);
        self.restart_short = false;
        let no_load = *self.no_load.get_or_insert(short);
        let allowed = no_load * self.allowance;

        let over = s > allowed;
        let trend = short > allowed;
        let probe = self.knee.is_some_and(|knee| c > knee);
        let clear = !over && !trend;
        if !clear && self.limit < self.min + 1.0 {
            return self.at_minimum(s, c, done, no_load);
        }
        if over && (trend || probe) {
            return self.congested(short, c, probe, done, no_load);
        }
        if !clear {
            // One slow call in a calm trend, or the trend not yet back down.
            return BaselineChange::None;
        }
        self.at_min = None;
        if short * FASTER < no_load {
            // At least twice as fast as the no-load latency: the provider
            // recovered. The knee found at the old latency says nothing about
            // the new one, nor do the calls still out to the old provider.
            self.recovering = true;
            self.knee = None;
            self.epoch = Some(done);
        }
        if self.recovering && short * self.allowance < no_load {
            // Follow it down at the short-term pace until within tolerance.
            self.no_load = Some(no_load + (short - no_load) * self.short_weight);
        } else {
            self.recovering = false;
            if c * 2.0 <= self.limit.max(2.0 * self.min) {
                // Only calls issued with at most half the limit (or the minimum)
                // in flight teach the no-load latency, up or down: a queue of the
                // provider's own making cannot creep into it (see "Baseline
                // drift" in the module docs).
                self.no_load = Some(no_load + (short - no_load) * self.long_weight);
            }
        }
        if self.calm >= self.short_window {
            // Above the knee, a call more at once is a probe of the provider:
            // it may queue, so it is made slowly; unless the limit does not
            // bind, and growing it adds no call at all.
            let probing = self.knee.is_some_and(|knee| self.limit >= knee) && c * 2.0 > self.limit;
            let step = if probing { self.smoothing / self.limit } else { self.smoothing * self.limit.sqrt() };
            self.limit = (self.limit + step).min(self.max);
        }
        BaselineChange::None
    }

    /// A congested sample: hold, count toward a re-measure, or cut.
    fn congested(&mut self, short: f64, c: f64, probe: bool, done: Instant, no_load: f64) -> BaselineChange {
        if c * 2.0 < self.limit.floor() {
            // Under half the limit in use: it does not bind, so cutting it would
            // hold no fewer request threads, and a noisy moment would turn into
            // rejections once load returns. A real brownout fills the limit
            // within one latency (callers keep arriving while calls take longer).
            return BaselineChange::None;
        }
        // A failed probe goes back to the concurrency below it, which was fine;
        // otherwise Little's law: the calls the provider serves at once without
        // queueing are about `c * no_load / latency`.
        let target = if probe { c - 1.0 } else { c * no_load / short };
        let cut = target.max(self.limit * MIN_GRADIENT).max(self.min).min(self.limit);
        self.limit = cut;
        self.knee = Some(cut);
        self.epoch = Some(done);
        self.restart_short = true;
        BaselineChange::None
    }

    /// A sample above tolerance with the limit at its minimum: the latency did
    /// not come down with the concurrency, so it is the provider's no-load
    /// latency now. Taken once it has held for `short_window` samples and
    /// `relearn_after`; a sample back within tolerance starts the count anew.
    fn at_minimum(&mut self, s: f64, c: f64, done: Instant, no_load: f64) -> BaselineChange {
        let Some(after) = self.relearn_after else { return BaselineChange::None };
        if c > self.min {
            // Issued while more calls were in flight (before a reconfiguration).
            return BaselineChange::None;
        }
        let at = self.at_min.get_or_insert(AtMin { since: done, count: 0, sum: 0.0 });
        at.count += 1;
        at.sum += s;
        if at.count < self.short_window || done.saturating_duration_since(at.since) < after {
            return BaselineChange::None;
        }
        let measured = at.sum / f64::from(at.count);
        self.at_min = None;
        self.no_load = Some(measured);
        self.short = Some(measured);
        self.knee = None;
        BaselineChange::Remeasured {
            from: Duration::from_secs_f64(no_load),
            to: Duration::from_secs_f64(measured),
        }
    }

    /// A call failed or timed out.
    pub(crate) fn on_failure(&mut self) {
        self.limit = (self.limit * self.keep_on_failure).max(self.min);
        self.calm = 0;
        self.at_min = None;
    }
}

#[cfg(test)]
#[path = "rule_tests.rs"]
mod tests;
