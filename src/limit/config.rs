//! [`AdaptiveLimit`]: the knobs of an adaptive concurrency limit, their
//! defaults and their validation.

use std::time::Duration;

use crate::error::ConfigError;

/// The largest limit a [`Limiter`](crate::limit::Limiter) accepts, the same bound as
/// a pool's worker count.
pub(crate) const MAX_LIMIT: usize = 4096;
/// The longest `relearn_after`: one day, like a dependency's deadline.
const MAX_RELEARN: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest averaging window, in samples.
const MAX_WINDOW: u32 = 1_000_000;
/// The largest latency tolerance: ten times the no-load latency.
const MAX_TOLERANCE: f64 = 1000.0;

/// The configuration of an adaptive concurrency limit (the rule: the
/// [`limit`](crate::limit) module docs). Rates and tolerances are in
/// percent, as everywhere in this crate.
///
/// ```
/// use std::time::Duration;
/// use watertight::limit::AdaptiveLimit;
///
/// let config = AdaptiveLimit::new()
///     .min_limit(2)
///     .tolerance(15.0)
///     .failure_cut(20.0)
///     .relearn_after(Duration::from_millis(500));
/// assert!(config.validate().is_ok());
///
/// let err = AdaptiveLimit::new().failure_cut(100.0).validate().unwrap_err();
/// assert_eq!(err.field(), "failure_cut");
/// ```
///
/// Every setting is a public field named like its setter; with the `serde`
/// feature the type is a file section (`[dependencies.fraud.adaptive_limit]`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
pub struct AdaptiveLimit {
    /// [`min_limit`](Self::min_limit).
    pub min_limit: usize,
    /// [`tolerance`](Self::tolerance), in percent.
    pub tolerance: f64,
    /// [`smoothing`](Self::smoothing), in percent.
    pub smoothing: f64,
    /// [`failure_cut`](Self::failure_cut), in percent.
    pub failure_cut: f64,
    /// [`short_window`](Self::short_window), in samples.
    pub short_window: u32,
    /// [`long_window`](Self::long_window), in samples.
    pub long_window: u32,
    /// [`relearn_after`](Self::relearn_after); zero never relearns.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    pub relearn_after: Duration,
}

impl Default for AdaptiveLimit {
    fn default() -> Self {
        AdaptiveLimit {
            min_limit: 2,
            tolerance: 15.0,
            smoothing: 20.0,
            failure_cut: 20.0,
            short_window: 10,
            long_window: 500,
            relearn_after: Duration::from_millis(500),
        }
    }
}

impl AdaptiveLimit {
    /// Every default (see each setter).
    pub fn new() -> Self {
        Self::default()
    }

    /// The lowest the limit goes: this many calls are always admitted at
    /// once, however slow the provider; at least 1 and at most the maximum
    /// (the worker count). Defaults to 2.
    pub fn min_limit(mut self, calls: usize) -> Self {
        self.min_limit = calls;
        self
    }

    /// How far, in percent above the no-load latency, a call's latency may be
    /// before it counts as queueing; in [0, 1000]. Small enough to tell one
    /// call queued behind a provider's capacity from none (at a capacity of
    /// 4, a fifth call at once makes every call take 1.25 times as long),
    /// large enough that the short-term average's noise does not look like a
    /// queue. Defaults to 15 (a call may take 1.15 times the no-load latency).
    pub fn tolerance(mut self, percent: f64) -> Self {
        self.tolerance = percent;
        self
    }

    /// How fast the limit climbs: below the knee (the limit at which the
    /// provider last queued) or when none is known, by `smoothing` percent of
    /// `sqrt(L)` per success; above it, by `smoothing` percent of one call per
    /// round trip (one call per five round trips at the default); in (0, 100].
    /// Defaults to 20.
    pub fn smoothing(mut self, percent: f64) -> Self {
        self.smoothing = percent;
        self
    }

    /// How much of the limit, in percent, a failure or a timeout takes away
    /// at once; in (0, 100). Defaults to 20 (the limit is multiplied by 0.8).
    pub fn failure_cut(mut self, percent: f64) -> Self {
        self.failure_cut = percent;
        self
    }

    /// The span, in samples, of the short-term latency (an exponentially
    /// weighted moving average with weight `2 / (span + 1)`); also the
    /// successes in a row that growth waits for after a failure, and the
    /// samples a re-measure of the no-load latency takes; at least 1 (1: the
    /// latest sample alone). Defaults to 10.
    pub fn short_window(mut self, samples: u32) -> Self {
        self.short_window = samples;
        self
    }

    /// The span, in samples, over which the no-load latency follows calls
    /// within tolerance issued with at most half the limit in flight (see
    /// the [`limit`](crate::limit) module docs); at least `short_window`.
    /// Defaults to 500.
    pub fn long_window(mut self, samples: u32) -> Self {
        self.long_window = samples;
        self
    }

    /// How long the latency must stay above tolerance with the limit at its
    /// minimum (and for `short_window` calls issued there) before it is taken
    /// as the new no-load latency (see the [`limit`](crate::limit) module
    /// docs). [`Duration::ZERO`] means never; at most one day. Defaults to
    /// 500 ms.
    pub fn relearn_after(mut self, duration: Duration) -> Self {
        self.relearn_after = duration;
        self
    }

    /// Checks every value against its rule; the first one broken is named in
    /// the error. The minimum is checked against the maximum by
    /// [`Limiter::new`](crate::limit::Limiter::new), which knows the maximum.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let min = self.min_limit;
        ConfigError::check((1..=MAX_LIMIT).contains(&min), "min_limit", "in [1, 4096]", min)?;
        // Range checks and `x > 0.0` are false for NaN, so NaN is refused as well.
        let ok = (0.0..=MAX_TOLERANCE).contains(&self.tolerance);
        ConfigError::check(ok, "tolerance", "in [0, 1000] percent", self.tolerance)?;
        let ok = self.smoothing > 0.0 && self.smoothing <= 100.0;
        ConfigError::check(ok, "smoothing", "in (0, 100] percent", self.smoothing)?;
        let ok = self.failure_cut > 0.0 && self.failure_cut < 100.0;
        ConfigError::check(ok, "failure_cut", "in (0, 100) percent", self.failure_cut)?;
        let ok = (1..=MAX_WINDOW).contains(&self.short_window);
        ConfigError::check(ok, "short_window", "in [1, 1000000] samples", self.short_window)?;
        let ok = (self.short_window..=MAX_WINDOW).contains(&self.long_window);
        let rule = "at least short_window and at most 1000000 samples";
        ConfigError::check(ok, "long_window", rule, self.long_window)?;
        let (ok, relearn) = (self.relearn_after <= MAX_RELEARN, format_args!("{:?}", self.relearn_after));
        ConfigError::check(ok, "relearn_after", "at most one day (zero: never)", relearn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(AdaptiveLimit::new().validate(), Ok(()));
    }

    #[test]
    fn each_bad_value_names_its_field() {
        let cases: Vec<(AdaptiveLimit, &str)> = vec![
            (AdaptiveLimit::new().min_limit(0), "min_limit"),
            (AdaptiveLimit::new().min_limit(5000), "min_limit"),
            (AdaptiveLimit::new().tolerance(-1.0), "tolerance"),
            (AdaptiveLimit::new().tolerance(f64::NAN), "tolerance"),
            (AdaptiveLimit::new().tolerance(1000.5), "tolerance"),
            (AdaptiveLimit::new().smoothing(0.0), "smoothing"),
            (AdaptiveLimit::new().smoothing(100.1), "smoothing"),
            (AdaptiveLimit::new().smoothing(f64::NAN), "smoothing"),
            (AdaptiveLimit::new().failure_cut(0.0), "failure_cut"),
            (AdaptiveLimit::new().failure_cut(100.0), "failure_cut"),
            (AdaptiveLimit::new().failure_cut(f64::INFINITY), "failure_cut"),
            (AdaptiveLimit::new().short_window(0), "short_window"),
            (AdaptiveLimit::new().short_window(20).long_window(19), "long_window"),
            (AdaptiveLimit::new().long_window(2_000_000), "long_window"),
            (AdaptiveLimit::new().relearn_after(Duration::from_secs(86_401)), "relearn_after"),
        ];
        for (config, field) in cases {
            let err = config.validate().expect_err(field);
            assert_eq!(err.field(), field, "{err}");
        }
    }

    #[test]
    fn edges_are_accepted() {
        let ok = [
            AdaptiveLimit::new().min_limit(1),
            AdaptiveLimit::new().tolerance(0.0),
            AdaptiveLimit::new().smoothing(100.0),
            AdaptiveLimit::new().short_window(1).long_window(1),
            AdaptiveLimit::new().relearn_after(Duration::ZERO),
        ];
        for config in ok {
            assert_eq!(config.validate(), Ok(()), "{config:?}");
        }
    }
}
