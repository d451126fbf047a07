//! The sliding windows a breaker computes its rates over: the last `n`
//! calls, or the last `n` seconds (the crate's [`TimeWindow`], one-second
//! buckets).
//!
//! Both keep running totals, so recording an outcome and reading the rates
//! are O(1) (amortised, for the time window). Neither is synchronised: the
//! breaker only touches a window while it holds its lock.
//!
//! Ignored outcomes never get here: they are neither successes nor failures.

use super::config::WindowKind;
use crate::window::TimeWindow;

/// One recorded (non-ignored) outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) failed: bool,
    pub(crate) slow: bool,
}

impl Sample {
    /// Packs the outcome into the byte a count window stores per call.
    fn bits(self) -> u8 {
        u8::from(self.failed) | (u8::from(self.slow) << 1)
    }
}

/// Running sums over the outcomes in a window.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) calls: u64,
    pub(crate) failures: u64,
    pub(crate) slow: u64,
}

impl Totals {
    fn add(&mut self, bits: u8) {
        self.calls += 1;
        self.failures += u64::from(bits & 1);
        self.slow += u64::from((bits >> 1) & 1);
    }

    fn sub(&mut self, bits: u8) {
        self.calls -= 1;
        self.failures -= u64::from(bits & 1);
        self.slow -= u64::from((bits >> 1) & 1);
    }

    /// Adds one outcome.
    pub(crate) fn record(&mut self, outcome: Sample) {
        self.add(outcome.bits());
    }

    /// `(failure rate, slow-call rate)` in percent. Callers make sure
    /// `calls > 0` (they compare against a minimum of at least 1).
    pub(crate) fn rates(&self) -> (f64, f64) {
        let calls = self.calls as f64;
        (self.failures as f64 * 100.0 / calls, self.slow as f64 * 100.0 / calls)
    }
}

/// A count-based or a time-based sliding window.
#[derive(Debug)]
pub(crate) enum Window {
    Count(CountWindow),
    /// Calls, failures and slow calls a second.
    Time(TimeWindow<3>),
}

impl Window {
    pub(crate) fn new(kind: WindowKind) -> Self {
        match kind {
            WindowKind::Count(n) => Window::Count(CountWindow::new(n)),
            WindowKind::Time(secs) => {
                Window::Time(TimeWindow::new(usize::try_from(secs).expect("window size validated")))
            }
        }
    }

    /// Records one outcome. `now_sec` (whole seconds since the breaker's
    /// start) is read by the time window only.
    #[inline]
    pub(crate) fn record(&mut self, outcome: Sample, now_sec: u64) {
        match self {
            Window::Count(w) => w.record(outcome.bits()),
            Window::Time(w) => w.add(now_sec, [1, u64::from(outcome.failed), u64::from(outcome.slow)]),
        }
    }

    /// Forgets whatever has slid out of the window by `now_sec`. A no-op for
    /// the count window.
    pub(crate) fn advance(&mut self, now_sec: u64) {
        if let Window::Time(w) = self {
            w.advance(now_sec);
        }
    }

    /// The totals as of the last `record` or `advance`.
    #[inline]
    pub(crate) fn totals(&self) -> Totals {
        match self {
            Window::Count(w) => w.totals,
            Window::Time(w) => {
                let [calls, failures, slow] = w.total();
                Totals { calls, failures, slow }
            }
        }
    }

    /// Empties the window.
    pub(crate) fn clear(&mut self) {
        match self {
            Window::Count(w) => w.clear(),
            Window::Time(w) => w.clear(),
        }
    }
}

/// The last `n` outcomes, one byte each, in a ring.
///
/// Invariant: `totals` is the sum over `ring[..len]` (the slots written
/// since the last clear); `head` is the slot the next outcome goes to, which
/// holds the oldest outcome once the ring is full.
#[derive(Debug)]
pub(crate) struct CountWindow {
    ring: Box<[u8]>,
    head: usize,
    len: usize,
    totals: Totals,
}

impl CountWindow {
    fn new(n: u32) -> Self {
        let n = usize::try_from(n).expect("window size validated");
        CountWindow { ring: vec![0; n].into_boxed_slice(), head: 0, len: 0, totals: Totals::default() }
    }

    #[inline]
    fn record(&mut self, bits: u8) {
        if self.len == self.ring.len() {
            self.totals.sub(self.ring[self.head]);
        } else {
            self.len += 1;
        }
        self.ring[self.head] = bits;
        self.totals.add(bits);
        self.head += 1;
        if self.head == self.ring.len() {
            self.head = 0;
        }
    }

    fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
        self.totals = Totals::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: Sample = Sample { failed: false, slow: false };
    const FAIL: Sample = Sample { failed: true, slow: false };
    const SLOW_FAIL: Sample = Sample { failed: true, slow: true };

    fn totals(calls: u64, failures: u64, slow: u64) -> Totals {
        Totals { calls, failures, slow }
    }

    #[test]
    fn count_window_keeps_the_last_n() {
        let mut w = Window::new(WindowKind::Count(3));
        w.record(FAIL, 0);
        w.record(SLOW_FAIL, 0);
        assert_eq!(w.totals(), totals(2, 2, 1));
        w.record(OK, 0);
        w.record(OK, 0); // evicts FAIL
        assert_eq!(w.totals(), totals(3, 1, 1));
        w.record(OK, 0); // evicts SLOW_FAIL
        assert_eq!(w.totals(), totals(3, 0, 0));
        w.clear();
        assert_eq!(w.totals(), totals(0, 0, 0));
        w.record(FAIL, 0);
        assert_eq!(w.totals(), totals(1, 1, 0));
    }
}
