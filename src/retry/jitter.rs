//! The random part of a backoff: [`Jitter`], how much of it is drawn, and
//! [`JitterSource`], the small PRNG the draws come from.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How much of each backoff is drawn at random
/// ([`RetryBuilder::jitter`](super::RetryBuilder::jitter)).
///
/// Retries of callers that failed together should not arrive together; the
/// cap before retry `n` is `initial x multiplier^(n - 1)`, at most `max`.
/// In a file: `jitter = "full"`, `"equal"` or `"none"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Jitter {
    /// The sleep is drawn uniformly from zero to the cap: the widest spread,
    /// and on average half the cap.
    #[default]
    Full,
    /// Half the cap, plus a draw from zero to the other half: never less than
    /// half the cap, so a retry always waits, and still spread.
    Equal,
    /// The sleep is the cap itself: `200ms` doubling sleeps exactly 200 ms,
    /// 400 ms, 800 ms...
    None,
}

impl Jitter {
    /// A sleep under `cap` as this jitter draws it, from `source`.
    pub(super) fn draw(self, cap: Duration, source: &JitterSource) -> Duration {
        match self {
            Jitter::Full => source.upto(cap),
            Jitter::Equal => {
                let half = cap / 2;
                half + source.upto(cap - half)
            }
            Jitter::None => cap,
        }
    }
}

/// A small, lock-free pseudo-random source for backoff jitter and the
/// throttler's draws (SplitMix64).
///
/// Jitter needs spread, not cryptographic quality, and the core carries no
/// `rand` dependency. Every draw advances one shared atomic by a fixed odd
/// step (so concurrent callers never draw the same state) and mixes it;
/// `Relaxed` is enough because the state publishes no other memory.
#[derive(Debug)]
pub(crate) struct JitterSource {
    state: AtomicU64,
}

impl JitterSource {
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// Seeded from the standard library's per-process random hasher keys.
    pub(crate) fn new() -> Self {
        let seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
        Self::with_seed(seed)
    }

    pub(crate) fn with_seed(seed: u64) -> Self {
        JitterSource { state: AtomicU64::new(seed) }
    }

    fn next_u64(&self) -> u64 {
        let mut z = self.state.fetch_add(Self::GAMMA, Ordering::Relaxed).wrapping_add(Self::GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number drawn uniformly from `[0, 1)`: the top 53 bits of a draw,
    /// as many as an `f64` holds exactly.
    pub(crate) fn fraction(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A duration drawn uniformly from `[0, cap]`.
    pub(crate) fn upto(&self, cap: Duration) -> Duration {
        let nanos = crate::time::saturating_nanos(cap);
        // Multiply-shift maps a 64-bit draw onto [0, nanos] without modulo bias worth
        // mentioning at these sizes.
        let scaled = (u128::from(self.next_u64()) * (u128::from(nanos) + 1)) >> 64;
        Duration::from_nanos(scaled as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::Retry;

    #[test]
    fn jitter_stays_within_the_cap_and_spreads() {
        let j = JitterSource::with_seed(7);
        let cap = Duration::from_millis(100);
        let draws: Vec<Duration> = (0..1000).map(|_| j.upto(cap)).collect();
        assert!(draws.iter().all(|d| *d <= cap));
        let low = draws.iter().filter(|d| **d < cap / 2).count();
        assert!((350..650).contains(&low), "{low} of 1000 draws below half the cap");
        assert_eq!(j.upto(Duration::ZERO), Duration::ZERO);
    }

    fn exponential(jitter: Jitter) -> Retry {
        Retry::builder()
            .max_attempts(6)
            .backoff(Duration::from_millis(200), Duration::from_secs(2))
            .jitter(jitter)
            .build()
            .unwrap()
    }

    #[test]
    fn no_jitter_sleeps_the_cap_exactly() {
        let r = exponential(Jitter::None);
        let j = JitterSource::with_seed(7);
        let pauses: Vec<u64> = (1..=5).map(|n| r.pause(n, &j).as_millis() as u64).collect();
        assert_eq!(pauses, [200, 400, 800, 1600, 2000]);
    }

    #[test]
    fn full_jitter_draws_from_zero_to_the_cap() {
        let r = exponential(Jitter::Full);
        assert_eq!(Retry::new().jitter(), Jitter::Full, "the default");
        // The same seeded source gives the same draws as `upto` itself.
        let (a, b) = (JitterSource::with_seed(7), JitterSource::with_seed(7));
        for n in 1..=5 {
            assert_eq!(r.pause(n, &a), b.upto(r.backoff_cap(n)));
        }
        let j = JitterSource::with_seed(11);
        let cap = r.backoff_cap(1);
        let draws: Vec<Duration> = (0..1000).map(|_| r.pause(1, &j)).collect();
        assert!(draws.iter().all(|d| *d <= cap));
        let low = draws.iter().filter(|d| **d < cap / 2).count();
        assert!((350..650).contains(&low), "{low} of 1000 draws below half the cap");
    }

    #[test]
    fn equal_jitter_keeps_half_the_cap() {
        let r = exponential(Jitter::Equal);
        let j = JitterSource::with_seed(7);
        for n in 1..=5 {
            let cap = r.backoff_cap(n);
            let draws: Vec<Duration> = (0..400).map(|_| r.pause(n, &j)).collect();
            assert!(draws.iter().all(|d| *d >= cap / 2 && *d <= cap), "retry {n}: cap {cap:?}");
            let low = draws.iter().filter(|d| **d < cap * 3 / 4).count();
            assert!((120..280).contains(&low), "retry {n}: {low} of 400 below three quarters of the cap");
        }
        assert_eq!(exponential(Jitter::Equal).pause(0, &j), Duration::ZERO);
    }
}
