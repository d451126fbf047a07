//! [`Event`]: what a dependency tells its listeners; and [`RecordedEvent`],
//! the ring of its last events, kept for a view opened after the fact (a
//! dashboard opened in the middle of an incident).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::breaker::{Breaker, Transition};
use crate::error::Rejection;
use crate::shadow::Policy;

/// Something that happened to a dependency, delivered to the listeners given
/// to [`DependencyBuilder::on_event`](crate::DependencyBuilder::on_event).
///
/// Listeners run on the thread where it happened (a request thread, or the
/// thread whose call moved the breaker), after every lock is released and
/// after the outcome was counted and recorded; keep them short and never call
/// the same dependency from one. A listener that panics is logged and
/// skipped.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Event {
    /// The breaker changed state (also logged at `info` by the breaker).
    Transition(Transition),
    /// A call was turned away without running: rejected at once, or, having
    /// been queued, discarded by shutdown before it started (`ShuttingDown`).
    /// Also logged at `debug`.
    Rejected {
        /// The dependency's name.
        dependency: Arc<str>,
        /// Why.
        rejection: Rejection,
    },
    /// A policy in shadow would have refused a call, and let it through
    /// (also logged at `debug`; see
    /// [`DependencyBuilder::shadow`](crate::DependencyBuilder::shadow)).
    ShadowRefused {
        /// The dependency's name.
        dependency: Arc<str>,
        /// The policy in shadow.
        policy: crate::shadow::Policy,
        /// What it would have answered.
        rejection: Rejection,
    },
    /// A caller stopped waiting at the deadline (also logged at `debug`).
    TimedOut {
        /// The dependency's name.
        dependency: Arc<str>,
        /// How long the caller waited.
        waited: Duration,
    },
}

/// Events a dependency keeps; the oldest goes when a new one comes.
pub(crate) const RING_CAPACITY: usize = 100;

/// One event of a dependency's recent past, from
/// [`Dependency::recent_events`](crate::Dependency::recent_events).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RecordedEvent {
    /// Its number in the dependency's sequence of events, from 1: a later
    /// event has a larger one, and a reader that saw `seq` so far has seen
    /// everything up to it.
    pub seq: u64,
    /// When it was recorded, by the wall clock (for display; the breaker's
    /// own clock may be a manual one).
    pub at: SystemTime,
    /// What happened.
    pub kind: RecordedKind,
}

impl RecordedEvent {
    /// [`at`](Self::at) in milliseconds since the Unix epoch (0 before it),
    /// as JSON and JavaScript's `Date` count time.
    pub fn at_millis(&self) -> u64 {
        millis_since_epoch(self.at)
    }
}

/// What a [`RecordedEvent`] records.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RecordedKind {
    /// The breaker changed state.
    Transition(Transition),
    /// [`Dependency::reconfigure`](crate::Dependency::reconfigure) applied a
    /// new configuration; its pool and timeout are these.
    Reconfigured {
        /// Worker threads.
        workers: usize,
        /// The queue's bound.
        queue: usize,
        /// The per-attempt timeout.
        timeout: Duration,
    },
    /// A second (or so) in which calls were rejected or timed out, or a
    /// policy in shadow would have refused some: what a sampler of the
    /// dependency's snapshots counted over `over` and recorded
    /// ([`Dependency::record_event`](crate::Dependency::record_event)).
    Summary {
        /// The time the counts cover.
        over: Duration,
        /// Callers that stopped waiting at the deadline.
        timed_out: u64,
        /// Rejections by kind, in [`Rejection::ALL`]'s order; only kinds
        /// that happened.
        rejected: Vec<(Rejection, u64)>,
        /// What each policy in shadow would have refused, in
        /// [`Policy::ALL`]'s order; only policies that would have.
        shadow_refused: Vec<(Policy, u64)>,
    },
}

impl RecordedKind {
    /// Its label: `transition`, `reconfigured` or `summary`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RecordedKind::Transition(_) => "transition",
            RecordedKind::Reconfigured { .. } => "reconfigured",
            RecordedKind::Summary { .. } => "summary",
        }
    }
}

/// The ring itself: one short lock, taken to record an event (rare: a
/// transition, a reconfiguration, at most one summary a second) and to copy
/// the ring out.
#[derive(Debug, Default)]
pub(crate) struct EventRing {
    state: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    events: VecDeque<RecordedEvent>,
    /// The last `seq` given out.
    last: u64,
}

impl EventRing {
    /// A ring that records every transition of `breaker`.
    pub(crate) fn watching(breaker: &Breaker) -> Arc<EventRing> {
        let ring = Arc::new(EventRing::default());
        let recorder = Arc::clone(&ring);
        // Listeners run after the breaker's lock is released, one transition
        // at a time and in order, so `seq` follows the breaker's order.
        breaker
            .on_transition(move |t| recorder.record(SystemTime::now(), RecordedKind::Transition(t.clone())));
        ring
    }

    /// Records `kind` as happened `at`.
    pub(crate) fn record(&self, at: SystemTime, kind: RecordedKind) {
        let mut ring = self.state.lock();
        ring.last += 1;
        let seq = ring.last;
        if ring.events.len() == RING_CAPACITY {
            ring.events.pop_front();
        }
        ring.events.push_back(RecordedEvent { seq, at, kind });
    }

    /// Records a reconfiguration, now.
    pub(crate) fn reconfigured(&self, workers: usize, queue: usize, timeout: Duration) {
        self.record(SystemTime::now(), RecordedKind::Reconfigured { workers, queue, timeout });
    }

    /// Every event kept, oldest first.
    pub(crate) fn recent(&self) -> Vec<RecordedEvent> {
        self.state.lock().events.iter().cloned().collect()
    }
}

/// `at` in milliseconds since the Unix epoch, 0 before it.
pub(crate) fn millis_since_epoch(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(timed_out: u64) -> RecordedKind {
        RecordedKind::Summary {
            over: Duration::from_secs(1),
            timed_out,
            rejected: Vec::new(),
            shadow_refused: Vec::new(),
        }
    }

    #[test]
    fn the_ring_keeps_the_last_hundred_in_order() {
        let ring = EventRing::default();
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        for i in 0..250u64 {
            ring.record(t0 + Duration::from_millis(i), summary(i));
            let kept = ring.recent();
            assert_eq!(kept.len(), (i as usize + 1).min(RING_CAPACITY), "after {} events", i + 1);
        }
        let kept = ring.recent();
        let seqs: Vec<u64> = kept.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (151..=250).collect::<Vec<u64>>(), "the newest hundred, oldest first");
        for e in &kept {
            assert_eq!(e.kind, summary(e.seq - 1), "each event kept whole, with its own seq");
            assert_eq!(e.at_millis(), 1_000_000 + e.seq - 1);
        }
    }

    #[test]
    fn an_empty_ring_and_times_before_the_epoch() {
        let ring = EventRing::default();
        assert!(ring.recent().is_empty());
        ring.record(UNIX_EPOCH - Duration::from_secs(1), summary(0));
        assert_eq!(ring.recent()[0].at_millis(), 0);
        assert_eq!(ring.recent()[0].seq, 1);
        assert_eq!(ring.recent()[0].kind.as_str(), "summary");
    }

    #[test]
    fn transitions_are_recorded_in_the_order_they_happened() {
        use crate::breaker::{BreakerConfig, State};
        let breaker = Breaker::build("b", BreakerConfig::default(), None).expect("a breaker");
        let ring = EventRing::watching(&breaker);
        for to in [State::ForcedOpen, State::Closed, State::Open, State::HalfOpen, State::Closed] {
            breaker.transition_to(to);
        }
        let moves: Vec<(State, State)> = ring
            .recent()
            .iter()
            .map(|e| match &e.kind {
                RecordedKind::Transition(t) => (t.from(), t.to()),
                other => panic!("not a transition: {other:?}"),
            })
            .collect();
        assert_eq!(
            moves,
            [
                (State::Closed, State::ForcedOpen),
                (State::ForcedOpen, State::Closed),
                (State::Closed, State::Open),
                (State::Open, State::HalfOpen),
                (State::HalfOpen, State::Closed),
            ]
        );
    }
}
