//! The breaker's vocabulary: its [`State`], a [`Transition`] between states,
//! and the [`BreakerMetrics`] snapshot.

use std::fmt;
use std::sync::Arc;

/// The state of a [`Breaker`](crate::breaker::Breaker).
///
/// With the `serde` feature it reads and writes as [`as_str`](Self::as_str)
/// spells it (`"half_open"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum State {
    /// Calls flow; outcomes are measured and may open the breaker.
    Closed,
    /// The provider is considered down: calls are rejected until the open
    /// period has passed.
    Open,
    /// A limited number of probe calls decide between open and closed.
    HalfOpen,
    /// Every call is permitted and nothing is recorded.
    Disabled,
    /// Every call is permitted and measured, but the breaker never opens.
    MetricsOnly,
    /// Every call is rejected, until moved out by hand.
    ForcedOpen,
}

impl State {
    /// A short, stable, lower-case name: `"closed"`, `"open"`, `"half_open"`,
    /// `"disabled"`, `"metrics_only"`, `"forced_open"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::Disabled => "disabled",
            State::MetricsOnly => "metrics_only",
            State::ForcedOpen => "forced_open",
        }
    }

    pub(super) const fn bits(self) -> u64 {
        // The declaration order: 0 for CLOSED to 5 for FORCED_OPEN.
        self as u64
    }

    const fn from_bits(bits: u64) -> State {
        match bits {
            0 => State::Closed,
            1 => State::Open,
            2 => State::HalfOpen,
            3 => State::Disabled,
            4 => State::MetricsOnly,
            _ => State::ForcedOpen,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `current`'s layout: the state in the low byte, the generation above it.
pub(super) const STATE_MASK: u64 = 0xff;

pub(super) const fn pack(generation: u64, state: State) -> u64 {
    (generation << 8) | state.bits()
}

pub(super) const fn state_of(packed: u64) -> State {
    State::from_bits(packed & STATE_MASK)
}

/// One change of state, as announced to [`Breaker::on_transition`](crate::breaker::Breaker::on_transition) listeners
/// and logged at `info`.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub(super) name: Arc<str>,
    pub(super) from: State,
    pub(super) to: State,
    pub(super) failure_rate: Option<f64>,
    pub(super) slow_call_rate: Option<f64>,
}

impl Transition {
    /// The name of the breaker that changed state.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The state it left.
    pub fn from(&self) -> State {
        self.from
    }

    /// The state it entered.
    pub fn to(&self) -> State {
        self.to
    }

    /// The failure rate (percent) that caused the change, when rates caused
    /// it: the window's for CLOSED -> OPEN, the probes' for a half-open round
    /// that ended. `None` for time-driven and manual changes.
    pub fn failure_rate(&self) -> Option<f64> {
        self.failure_rate
    }

    /// The slow-call rate (percent) that caused the change; see
    /// [`failure_rate`](Self::failure_rate).
    pub fn slow_call_rate(&self) -> Option<f64> {
        self.slow_call_rate
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "circuit breaker '{}': {} -> {}", self.name, self.from, self.to)?;
        if let (Some(fr), Some(sr)) = (self.failure_rate, self.slow_call_rate) {
            write!(f, " (failure rate {fr:.1} %, slow-call rate {sr:.1} %)")?;
        }
        Ok(())
    }
}

/// A snapshot of a breaker's state and counters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BreakerMetrics {
    /// The state, as of the last call that could move it.
    pub state: State,
    /// Percentage of failures in the window (CLOSED, METRICS_ONLY) or among
    /// the probes (HALF_OPEN, once all have reported); while OPEN, the rate of
    /// the window or round that opened it. `None` until `minimum_calls` (or
    /// every probe) are in, and in DISABLED and FORCED_OPEN.
    pub failure_rate: Option<f64>,
    /// Percentage of slow calls, over the same calls as `failure_rate`.
    pub slow_call_rate: Option<f64>,
    /// How many calls the window holds (in HALF_OPEN: probes that reported;
    /// while OPEN: what the window or round that opened it held).
    pub buffered_calls: u32,
    /// Lifetime count of calls reported as successes.
    pub successful: u64,
    /// Lifetime count of calls reported as failures.
    pub failed: u64,
    /// Lifetime count of calls reported as ignored, or whose permit was
    /// dropped without a verdict.
    pub ignored: u64,
    /// Lifetime count of successes and failures slower than
    /// `slow_call_duration`.
    pub slow: u64,
    /// Lifetime count of rejected acquisitions.
    pub not_permitted: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips() {
        for s in [
            State::Closed,
            State::Open,
            State::HalfOpen,
            State::Disabled,
            State::MetricsOnly,
            State::ForcedOpen,
        ] {
            assert_eq!(state_of(pack(12345, s)), s);
            assert_eq!(pack(12345, s) >> 8, 12345);
        }
    }
}
