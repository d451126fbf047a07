//! [`Hedge`]: when a hedged call starts another attempt, and how many it may
//! start. The hedged call itself is `hedge.rs`.

use std::time::Duration;

use crate::error::ConfigError;
use crate::histogram::LatencyHistogram;
use crate::time::MAX_TIMEOUT;

/// When a hedged call starts another attempt, and how many it may start.
///
/// The delay is fixed ([`after`](Self::after)) or a recent call-time quantile
/// ([`at_quantile`](Self::at_quantile)); [`validate`](Self::validate) names
/// the field it refuses (`hedge.delay`, `hedge.quantile`, ...). In a file (feature
/// `serde`): `hedge = { delay = "20ms" }` or
/// `hedge = { quantile = 0.95, min_delay = "5ms", max_delay = "200ms" }`.
///
/// ```
/// use std::time::Duration;
/// use watertight::dependency::Hedge;
///
/// let fixed = Hedge::after(Duration::from_millis(20));
/// assert!(fixed.validate().is_ok());
/// let adaptive = Hedge::at_quantile(0.95).clamp(Duration::from_millis(5), Duration::from_millis(200));
/// assert!(adaptive.validate().is_ok());
/// assert_eq!(Hedge::at_quantile(1.5).validate().unwrap_err().field(), "hedge.quantile");
/// // Every attempt at once, each on an idle worker.
/// assert!(Hedge::after(Duration::ZERO).max_hedges(2).validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
pub struct Hedge {
    /// Extra attempts a call may start.
    max_hedges: u32,
    /// A fixed delay; `None`: the quantile's.
    #[cfg_attr(
        feature = "serde",
        serde(with = "crate::duration::option", skip_serializing_if = "Option::is_none")
    )]
    delay: Option<Duration>,
    quantile: f64,
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    min_delay: Duration,
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    max_delay: Duration,
    min_samples: u64,
}

impl Default for Hedge {
    /// [`at_quantile(0.95)`](Self::at_quantile).
    fn default() -> Self {
        Hedge {
            max_hedges: 1,
            delay: None,
            quantile: 0.95,
            min_delay: Duration::from_millis(1),
            max_delay: Duration::from_secs(1),
            min_samples: 100,
        }
    }
}

impl Hedge {
    /// A hedge after a fixed `delay`, at most one day. Zero starts every
    /// attempt at once, as Polly's parallel mode and failsafe-go's backup
    /// executions do.
    pub fn after(delay: Duration) -> Self {
        Hedge { delay: Some(delay), ..Hedge::default() }
    }

    /// A hedge after the dependency's recent call time at `quantile` (0.95:
    /// p95), strictly between 0 and 1 (NaN refused); see [`clamp`](Self::clamp)
    /// and [`min_samples`](Self::min_samples).
    pub fn at_quantile(quantile: f64) -> Self {
        Hedge { quantile, ..Hedge::default() }
    }

    /// The most extra attempts one call may start: between 1 and 8. Defaults
    /// to 1.
    pub fn max_hedges(mut self, n: u32) -> Self {
        self.max_hedges = n;
        self
    }

    /// The bounds of a quantile delay: `min` (zero allowed) at most `max`,
    /// `max` at most one day. Defaults to 1 ms and 1 s. A fixed delay
    /// ([`after`](Self::after)) ignores them.
    pub fn clamp(mut self, min: Duration, max: Duration) -> Self {
        self.min_delay = min;
        self.max_delay = max;
        self
    }

    /// Calls the recent window must hold before the quantile is trusted
    /// (before that, the delay is the maximum of [`clamp`](Self::clamp)).
    /// Any count; 0 trusts the quantile from the first call. Defaults to 100.
    pub fn min_samples(mut self, n: u64) -> Self {
        self.min_samples = n;
        self
    }

    /// The most extra attempts one call may start.
    pub fn hedges(&self) -> u32 {
        self.max_hedges
    }

    /// Checks every value; the error names the first one that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=8).contains(&self.max_hedges) {
            return Err(ConfigError::new("hedge.max_hedges", "between 1 and 8", self.max_hedges));
        }
        if let Some(d) = self.delay
            && d > MAX_TIMEOUT
        {
            return Err(ConfigError::new("hedge.delay", "at most one day", format!("{d:?}")));
        }
        // `!(q > 0 && q < 1)` refuses NaN too.
        if !(self.quantile > 0.0 && self.quantile < 1.0) {
            return Err(ConfigError::new("hedge.quantile", "strictly between 0 and 1", self.quantile));
        }
        if self.min_delay > self.max_delay || self.max_delay > MAX_TIMEOUT {
            return Err(ConfigError::new(
                "hedge.min_delay",
                "at most max_delay (at most one day)",
                format!("{:?} .. {:?}", self.min_delay, self.max_delay),
            ));
        }
        Ok(())
    }

    /// The earliest a hedge may start: the fixed delay, or the quantile's minimum.
    pub(crate) fn earliest(&self) -> Duration {
        self.delay.unwrap_or(self.min_delay)
    }

    /// The delay for a call made now, given the dependency's call times.
    pub(crate) fn delay_for(&self, call_time: &LatencyHistogram) -> Duration {
        if let Some(fixed) = self.delay {
            return fixed;
        }
        let recent = call_time.recent();
        match recent.quantile(self.quantile) {
            Some(q) if recent.count() >= self.min_samples => q.clamp(self.min_delay, self.max_delay),
            _ => self.max_delay,
        }
    }
}
