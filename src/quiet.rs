//! [`Quiet`]: lines about events that may come by the thousand a second
//! (refused calls, refused requests), logged in aggregate: at most one line a
//! second per kind of event, with the count since the last line.
//!
//! The first event of a kind is a line at once; the ones that follow within
//! the second are only counted, and the first one after it is a line with
//! that count. There is no thread: a count left when the events stop is
//! told with the next one. Nothing is taken (not even the lock) while the
//! line's level is off for its target.

use std::fmt;
use std::time::{Duration, Instant};

use log::Level;
use parking_lot::Mutex;

/// A line per kind comes at most this often.
const EVERY: Duration = Duration::from_secs(1);

/// The aggregate log of `N` kinds of event, each known by its index.
#[derive(Debug)]
pub(crate) struct Quiet<const N: usize> {
    /// Per kind: when its last line was written (`None`: never), and the
    /// events counted since.
    lines: Mutex<[(Option<Instant>, u64); N]>,
}

impl<const N: usize> Default for Quiet<N> {
    fn default() -> Self {
        Quiet { lines: Mutex::new([(None, 0); N]) }
    }
}

impl<const N: usize> Quiet<N> {
    /// Counts one event of kind `kind` (none past `N`) and, when a line is
    /// due, logs `line` at `level` to `target`: alone for one event, else
    /// with how many there were since the last line and over how long.
    pub(crate) fn log(&self, target: &str, level: Level, kind: usize, line: fmt::Arguments<'_>) {
        if !log::log_enabled!(target: target, level) {
            return;
        }
        match self.count(kind, Instant::now()) {
            Some((1, _)) => log::log!(target: target, level, "{line}"),
            Some((n, ago)) => log::log!(target: target, level, "{line} ({n} times in the last {ago:?})"),
            None => {}
        }
    }

    /// Counts one event of kind `kind` at `now`: `Some` when a line is due,
    /// with the events it tells of (the one at hand included) and the time
    /// since the last line of its kind.
    fn count(&self, kind: usize, now: Instant) -> Option<(u64, Duration)> {
        let mut lines = self.lines.lock();
        let (last, count) = lines.get_mut(kind)?;
        *count += 1;
        let ago = last.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        if last.is_some() && ago < EVERY {
            return None;
        }
        *last = Some(now);
        Some((std::mem::take(count), ago))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_thousand_events_within_a_second_are_one_line_and_the_next_line_counts_them() {
        let quiet = Quiet::<3>::default();
        let t0 = Instant::now();
        // 1,000 events in half a second: the first is a line, the rest are counted.
        let lines: Vec<_> =
            (0..1000u64).filter_map(|i| quiet.count(0, t0 + Duration::from_micros(500 * i))).collect();
        assert_eq!(lines, [(1, ms(0))]);
        // Another kind has its own line.
        assert_eq!(quiet.count(1, t0 + ms(1)), Some((1, ms(0))));
        assert_eq!(quiet.count(2, t0 + ms(2)), Some((1, ms(0))));
        // Still within the second: counted.
        assert_eq!(quiet.count(0, t0 + ms(999)), None);
        // A second after the last line: one line for the 1,000 counted since and this one.
        assert_eq!(quiet.count(0, t0 + ms(1000)), Some((1001, ms(1000))));
        // Quiet for a while: the next event is a line of its own.
        assert_eq!(quiet.count(0, t0 + ms(5000)), Some((1, ms(4000))));
        // A kind it does not know is never a line.
        assert_eq!(quiet.count(3, t0), None);
    }
}
