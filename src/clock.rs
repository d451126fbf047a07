//! Time, injected: [`Clock`], the real [`SystemClock`], and [`ManualClock`] for tests.
//!
//! The breaker, and the timings and retry budget a `Dependency` records on
//! it, read time through an `Arc<dyn Clock>` given to their builder, so a
//! test that owns a [`ManualClock`] moves time for every thread that uses
//! them (workers, listeners, benches) at once. Deadlines are real time
//! everywhere: a caller waits on the real clock, and a deadline on a manual
//! clock would hold it for real. There is no thread-local or `cfg(test)` swap
//! to forget.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// A source of monotonic time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The real monotonic clock, [`Instant::now`]. The default everywhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to.
///
/// Clones share the same time: keep one in the test, give a clone to the
/// builder, and [`advance`](ManualClock::advance) it between steps.
///
/// ```
/// use std::time::Duration;
/// use watertight::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_secs(15));
/// assert_eq!(clock.now() - t0, Duration::from_secs(15));
/// ```
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

struct ManualInner {
    base: Instant,
    /// Nanoseconds added to `base`. Only ever grows, so `now()` is monotonic
    /// for every reader; `Relaxed` is enough because no other memory is
    /// published through it.
    offset_ns: AtomicU64,
}

impl ManualClock {
    /// A manual clock that starts at the current real instant.
    pub fn new() -> Self {
        ManualClock { inner: Arc::new(ManualInner { base: Instant::now(), offset_ns: AtomicU64::new(0) }) }
    }

    /// Moves time forward by `d`, for every clone.
    pub fn advance(&self, d: Duration) {
        let ns = crate::time::saturating_nanos(d);
        let _ = self.inner.offset_ns.fetch_update(Relaxed, Relaxed, |cur| Some(cur.saturating_add(ns)));
    }

    /// How far this clock has been advanced since it was made.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.inner.offset_ns.load(Relaxed))
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.inner.base + self.elapsed()
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock").field("elapsed", &self.elapsed()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_time() {
        let a = ManualClock::new();
        let b = a.clone();
        let t0 = b.now();
        a.advance(Duration::from_millis(1500));
        assert_eq!(b.now() - t0, Duration::from_millis(1500));
        assert_eq!(b.elapsed(), Duration::from_millis(1500));
    }

    #[test]
    fn advance_saturates_instead_of_wrapping() {
        let c = ManualClock::new();
        c.advance(Duration::from_nanos(u64::MAX - 1));
        c.advance(Duration::from_secs(10));
        assert_eq!(c.elapsed(), Duration::from_nanos(u64::MAX));
    }
}
