//! Shadow mode, a policy tried on live traffic before it bites:
//! [`DependencyBuilder::shadow`](crate::DependencyBuilder::shadow)`(Policy::Breaker)`
//! (any [`Policy`]; in a file `shadow = ["breaker"]`; live through
//! `reconfigure`, from the next call) puts a policy in shadow. It decides every
//! call as it would and keeps its state as it would, but a call it would have
//! refused goes through, unseen by it (no breaker permit, no limit permit, no
//! place, no throttler request), so its next decisions are the ones it would
//! make enforced: the breaker still opens, half-opens and closes on the calls
//! it permits. Each refusal it would have made is counted
//! ([`DependencySnapshot::shadow_refused`](crate::DependencySnapshot::shadow_refused),
//! `watertight_shadow_refusals_total{dependency,policy,reason}`), announced as
//! [`Event::ShadowRefused`](crate::dependency::Event::ShadowRefused) and logged
//! at `debug` in aggregate; in shadow the rate limit takes its permit but
//! makes nobody wait. Shadow is not off: a policy's kill switch (no limit, a
//! disabled breaker) still turns it off entirely. The request pool's reserve
//! has a switch of its own,
//! [`Reserve::shadow`](crate::server::Reserve::shadow).
//!
//! One mechanism for every policy: a [`Shadow`] set says which [`Policy`]s
//! of a dependency are in shadow, and the one admission
//! (`dependency/attempt.rs`) turns a shadowed policy's refusal
//! into "let through, recorded" in one place, counted per policy
//! ([`ShadowCounts`]) and announced.

use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// A dependency's policy that refuses calls, and so can run in shadow. (The
/// request pool's reserve has a switch of its own: `server::Reserve::shadow`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Policy {
    /// The adaptive throttler ([`DependencyBuilder::throttle`](crate::DependencyBuilder::throttle)).
    Throttle,
    /// The rate limit ([`DependencyBuilder::rate_limit`](crate::DependencyBuilder::rate_limit)).
    RateLimit,
    /// The circuit breaker. In shadow it still moves through its states on
    /// what it sees; a call it would not permit runs unrecorded by it, as a
    /// refused call would have been.
    Breaker,
    /// The adaptive concurrency limit
    /// ([`DependencyBuilder::adaptive_limit`](crate::DependencyBuilder::adaptive_limit)).
    AdaptiveLimit,
    /// Priority shedding: the places a pool keeps for more urgent calls
    /// ([`DependencyBuilder::reserved_for_critical`](crate::DependencyBuilder::reserved_for_critical)).
    Priority,
}

impl Policy {
    /// Every policy, in the order a call meets them.
    pub const ALL: [Policy; 5] =
        [Policy::Throttle, Policy::RateLimit, Policy::Breaker, Policy::AdaptiveLimit, Policy::Priority];

    /// Its label, in files, JSON and the `policy` label of
    /// `watertight_shadow_refusals_total`: `throttle`, `rate_limit`,
    /// `breaker`, `adaptive_limit`, `priority`.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Throttle => "throttle",
            Policy::RateLimit => "rate_limit",
            Policy::Breaker => "breaker",
            Policy::AdaptiveLimit => "adaptive_limit",
            Policy::Priority => "priority",
        }
    }

    /// The reason it refuses with, the `reason` label: the label of the
    /// [`Rejection`](crate::Rejection) it answers when enforced (`throttled`,
    /// `rate_limited`, `not_permitted`, `limit_exceeded`, `shed`).
    pub fn reason(self) -> &'static str {
        use crate::error::Rejection;
        match self {
            Policy::Throttle => Rejection::Throttled.as_str(),
            Policy::RateLimit => Rejection::RateLimited.as_str(),
            Policy::Breaker => Rejection::NotPermitted.as_str(),
            Policy::AdaptiveLimit => Rejection::LimitExceeded.as_str(),
            Policy::Priority => Rejection::Shed.as_str(),
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The policies in shadow: each decides and records, and refuses nothing.
/// Empty by default: every policy enforces.
///
/// In a file, a list of [`Policy`] labels:
///
/// ```toml
/// shadow = ["breaker", "adaptive_limit"]
/// ```
///
/// ```
/// use watertight::shadow::{Policy, Shadow};
///
/// let shadow = Shadow::none().with(Policy::Breaker);
/// assert!(shadow.contains(Policy::Breaker));
/// assert!(!shadow.contains(Policy::RateLimit));
/// assert!(Shadow::all().contains(Policy::Priority));
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Shadow(u8);

impl Shadow {
    /// No policy in shadow: every one enforces.
    pub const fn none() -> Shadow {
        Shadow(0)
    }

    /// Every policy in shadow.
    pub fn all() -> Shadow {
        Policy::ALL.into_iter().fold(Shadow::none(), Shadow::with)
    }

    /// This set with `policy` in shadow.
    #[must_use]
    pub fn with(self, policy: Policy) -> Shadow {
        Shadow(self.0 | policy.bit())
    }

    /// This set with `policy` enforcing.
    #[must_use]
    pub fn without(self, policy: Policy) -> Shadow {
        Shadow(self.0 & !policy.bit())
    }

    /// Whether `policy` is in shadow.
    #[inline]
    pub fn contains(self, policy: Policy) -> bool {
        self.0 & policy.bit() != 0
    }

    /// Whether no policy is in shadow.
    pub fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// The policies in shadow, in [`Policy::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = Policy> {
        Policy::ALL.into_iter().filter(move |p| self.contains(*p))
    }
}

impl fmt::Debug for Shadow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<Policy> for Shadow {
    fn from_iter<I: IntoIterator<Item = Policy>>(policies: I) -> Shadow {
        policies.into_iter().fold(Shadow::none(), Shadow::with)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Shadow {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Shadow {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Shadow, D::Error> {
        let policies: Vec<Policy> = serde::Deserialize::deserialize(deserializer)?;
        Ok(policies.into_iter().collect())
    }
}

/// The live [`Shadow`] set of a running policy holder, changed by a
/// reconfiguration and read on the call path: one relaxed load (it
/// publishes no other memory; a call reads the set in force when it is
/// admitted, so a switch takes effect on the next call).
#[derive(Debug, Default)]
pub(crate) struct LiveShadow(AtomicU8);

impl LiveShadow {
    pub(crate) fn new(shadow: Shadow) -> LiveShadow {
        LiveShadow(AtomicU8::new(shadow.0))
    }

    #[inline]
    pub(crate) fn get(&self) -> Shadow {
        Shadow(self.0.load(Ordering::Relaxed))
    }

    pub(crate) fn set(&self, shadow: Shadow) {
        self.0.store(shadow.0, Ordering::Relaxed);
    }
}

/// Refusals the policies in shadow would have made, per policy: a plain
/// snapshot of relaxed counters (see
/// [`DependencySnapshot::shadow_refused`](crate::DependencySnapshot::shadow_refused)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShadowCounts {
    counts: [u64; Policy::ALL.len()],
}

impl ShadowCounts {
    /// What `policy` would have refused.
    pub fn get(&self, policy: Policy) -> u64 {
        self.counts[policy as usize]
    }

    /// What every policy would have refused, together.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Each policy with what it would have refused, in [`Policy::ALL`]'s
    /// order, zeros included.
    pub fn iter(&self) -> impl Iterator<Item = (Policy, u64)> + '_ {
        Policy::ALL.into_iter().map(|p| (p, self.get(p)))
    }
}

/// The live counts behind [`ShadowCounts`]: relaxed, monotonic (they order
/// nothing; a snapshot may be a call apart between policies).
#[derive(Debug, Default)]
pub(crate) struct ShadowCounters([AtomicU64; Policy::ALL.len()]);

impl ShadowCounters {
    pub(crate) fn add(&self, policy: Policy) {
        self.0[policy as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn load(&self) -> ShadowCounts {
        ShadowCounts { counts: std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_holds_what_was_put_in_and_lists_it_in_order() {
        let set = Shadow::none().with(Policy::Priority).with(Policy::Breaker);
        assert_eq!(set.iter().collect::<Vec<_>>(), [Policy::Breaker, Policy::Priority]);
        assert!(!set.without(Policy::Breaker).contains(Policy::Breaker));
        assert!(set.without(Policy::Breaker).contains(Policy::Priority));
        assert_eq!(Shadow::all().iter().count(), Policy::ALL.len());
        assert!(Shadow::default().is_empty());
        assert_eq!(format!("{set:?}"), "{Breaker, Priority}");
        assert_eq!(Policy::ALL.iter().map(|p| p.bit()).fold(0, |a, b| a | b).count_ones(), 5);
    }

    #[test]
    fn counters_count_per_policy() {
        let counters = ShadowCounters::default();
        counters.add(Policy::Breaker);
        counters.add(Policy::Breaker);
        counters.add(Policy::Throttle);
        let counts = counters.load();
        assert_eq!(counts.get(Policy::Breaker), 2);
        assert_eq!(counts.get(Policy::Throttle), 1);
        assert_eq!(counts.get(Policy::Priority), 0);
        assert_eq!(counts.total(), 3);
        assert_eq!(Policy::Breaker.reason(), "not_permitted");
    }

    #[test]
    fn live_switch_reads_what_was_set() {
        let live = LiveShadow::new(Shadow::none());
        assert!(live.get().is_empty());
        live.set(Shadow::none().with(Policy::RateLimit));
        assert!(live.get().contains(Policy::RateLimit));
    }

    #[cfg(feature = "serde")]
    #[test]
    fn in_files_a_list_of_labels() {
        let set = Shadow::none().with(Policy::AdaptiveLimit).with(Policy::Throttle);
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(json, r#"["throttle","adaptive_limit"]"#);
        assert_eq!(serde_json::from_str::<Shadow>(&json).unwrap(), set);
        assert!(serde_json::from_str::<Shadow>(r#"["breakr"]"#).is_err());
    }
}
