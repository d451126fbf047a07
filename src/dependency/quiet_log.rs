//! Refusals and timeouts, logged at `debug` in aggregate: at most one line
//! a second per dependency and outcome, with the count since the last line.
//!
//! An overloaded dependency refuses thousands of calls a second; a line
//! each buries everything else in the log (2,127 lines in 3 s were seen).
//! The first refusal for a reason logs its line at once; the ones that
//! follow within the second are only counted, and the first one after it
//! logs a line with that count. There is no thread: a count left when the
//! refusals stop is told with the next one. Nothing is taken (not even the
//! lock) while `debug` is off for this module.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Outcome, Rejection};

/// A line per outcome comes at most this often.
const EVERY: Duration = Duration::from_secs(1);

/// One dependency's aggregate log (see the module docs).
#[derive(Debug, Default)]
pub(super) struct QuietLog {
    /// Per outcome, in the order of [`Outcome::ALL`]: when its last line
    /// was written (`None`: never), and the calls counted since.
    lines: Mutex<[(Option<Instant>, u64); Outcome::ALL.len()]>,
}

/// A line due: the calls it tells of (the one at hand included) and how
/// long ago the last line was written (`None`: the first line).
pub(super) type Due = (u64, Option<Duration>);

impl QuietLog {
    /// Counts one call ended with `outcome` at `now`: `Some` when a line is
    /// due, with what it tells of.
    pub(super) fn note(&self, outcome: Outcome, now: Instant) -> Option<Due> {
        let index = Outcome::ALL.iter().position(|o| *o == outcome)?;
        let mut lines = self.lines.lock();
        let (last, count) = &mut lines[index];
        *count += 1;
        let ago = match *last {
            Some(at) if now.saturating_duration_since(at) < EVERY => return None,
            Some(at) => Some(now.saturating_duration_since(at)),
            None => None,
        };
        *last = Some(now);
        Some((std::mem::take(count), ago))
    }

    /// Logs a refused call, in aggregate.
    pub(super) fn refused(&self, name: &str, rejection: Rejection) {
        if !log::log_enabled!(log::Level::Debug) {
            return;
        }
        match self.note(rejection.outcome(), Instant::now()) {
            Some((1, _)) => log::debug!("dependency {name}: call rejected: {rejection}"),
            Some((n, ago)) => log::debug!(
                "dependency {name}: {n} calls rejected in the last {:?}: {rejection}",
                ago.unwrap_or_default()
            ),
            None => {}
        }
    }

    /// Logs a call that timed out after `waited`, in aggregate.
    pub(super) fn timed_out(&self, name: &str, waited: Duration) {
        if !log::log_enabled!(log::Level::Debug) {
            return;
        }
        match self.note(Outcome::TimedOut, Instant::now()) {
            Some((1, _)) => log::debug!("dependency {name}: no answer within {waited:?}"),
            Some((n, ago)) => log::debug!(
                "dependency {name}: {n} calls with no answer by their deadline in the last {:?} \
                 (the last waited {waited:?})",
                ago.unwrap_or_default()
            ),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_thousand_refusals_within_a_second_are_one_line_and_the_next_line_counts_them() {
        let log = QuietLog::default();
        let t0 = Instant::now();
        let full = Rejection::QueueFull.outcome();
        // 1,000 refusals in half a second: the first is a line, the rest are counted.
        let lines: Vec<_> =
            (0..1000u64).filter_map(|i| log.note(full, t0 + Duration::from_micros(500 * i))).collect();
        assert_eq!(lines, [(1, None)]);
        // Another reason has its own line.
        assert_eq!(log.note(Rejection::NotPermitted.outcome(), t0 + ms(1)), Some((1, None)));
        assert_eq!(log.note(Outcome::TimedOut, t0 + ms(2)), Some((1, None)));
        // Still within the second: counted.
        assert_eq!(log.note(full, t0 + ms(999)), None);
        // A second after the last line: one line for the 1,000 counted since and this one.
        assert_eq!(log.note(full, t0 + ms(1000)), Some((1001, Some(ms(1000)))));
        // Quiet for a while: the next refusal is a line of its own.
        assert_eq!(log.note(full, t0 + ms(5000)), Some((1, Some(ms(4000)))));
    }
}
