//! Moves by hand: [`Breaker::transition_to`] and [`Breaker::reset`], for an
//! operator, and the stuck rule's `open_when_stuck`, for the dependency.

use super::machine::View;
use super::{Breaker, State};

impl Breaker {
    /// Moves the breaker to `to` by hand: to FORCED_OPEN during a provider's
    /// maintenance, to DISABLED in an emergency, to HALF_OPEN to let a few
    /// probes decide.
    ///
    /// # Which moves
    ///
    /// Every move from one state to a different one is made (all 30 between
    /// the six states); a move to the state the breaker is in does nothing at
    /// all (to start CLOSED over, [`reset`](Self::reset)). Unlike
    /// Resilience4j, CLOSED -> HALF_OPEN is allowed: a round reads nothing
    /// from an open period before it, so an operator may cut a suspect
    /// provider down to `half_open_calls` probes without first rejecting
    /// every call.
    ///
    /// # What the state entered starts
    ///
    /// - CLOSED: an empty window, and the open backoff starts over.
    /// - METRICS_ONLY: an empty window; the openings counted for the open
    ///   backoff are kept.
    /// - OPEN: an open period like any other: as long as the open backoff's
    ///   next one (`open_for` without it), counted as one more opening, and
    ///   followed by HALF_OPEN on the first call after it. Meanwhile
    ///   [`metrics`](Self::metrics) shows the rates of the state left: the
    ///   window's from CLOSED or METRICS_ONLY, the probes' from HALF_OPEN,
    ///   none from DISABLED or FORCED_OPEN.
    /// - HALF_OPEN: a fresh round of `half_open_calls` probes, its
    ///   `max_wait_in_half_open` counted from now, ended as any round is (in
    ///   CLOSED or OPEN on the probes' rates, or in `after_max_wait`).
    /// - DISABLED and FORCED_OPEN: nothing, and nothing but another move by
    ///   hand leaves them (for DISABLED, also
    ///   [`reconfigure`](Self::reconfigure) with `enabled(true)`).
    ///
    /// Only CLOSED and METRICS_ONLY record into the window and show it.
    /// Entering either empties it; any other move leaves it as it was,
    /// unused, until one of them empties it again. So no outcome from before
    /// a move counts in a window after it.
    ///
    /// # Permits in flight
    ///
    /// None is revoked: a call already permitted goes on, and its report
    /// counts in the lifetime totals only (the module docs, *Generations*). A
    /// permit issued while DISABLED records nothing, as always.
    ///
    /// # Listeners
    ///
    /// A move is one [`Transition`](super::Transition) with no rates, logged
    /// at `info` and announced as any other (see
    /// [`on_transition`](Self::on_transition)). A listener may call
    /// `transition_to` itself; its move is announced after the one it was
    /// told of.
    pub fn transition_to(&self, to: State) {
        let inner = &*self.inner;
        let mut now = inner.lazy_now(None);
        let mut core = inner.core.lock();
        if core.state != to {
            inner.enter(&mut core, to, &mut now, View::default());
        }
        inner.release(core);
    }

    /// Back to CLOSED with a fresh window and the open backoff started over,
    /// from any state (CLOSED included). Permits issued before are counted
    /// in the lifetime totals only.
    pub fn reset(&self) {
        let inner = &*self.inner;
        let mut now = inner.lazy_now(None);
        let mut core = inner.core.lock();
        inner.enter(&mut core, State::Closed, &mut now, View::default());
        inner.release(core);
    }

    /// Opens the breaker now if it is CLOSED or HALF_OPEN, whatever its
    /// window or round holds, and says which state it left (`None`: neither,
    /// nothing done): the [stuck rule](crate::dependency#a-hang-is-caught-within-one-timeout).
    /// From HALF_OPEN it counts as one more
    /// opening, as a failed round does. The transition carries no rates.
    pub(crate) fn open_when_stuck(&self) -> Option<State> {
        let inner = &*self.inner;
        let mut now = inner.lazy_now(None);
        let mut core = inner.core.lock();
        let left = core.state;
        let opened = matches!(left, State::Closed | State::HalfOpen);
        if opened {
            inner.enter(&mut core, State::Open, &mut now, View::default());
        }
        inner.release(core);
        opened.then_some(left)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;
    use crate::breaker::BreakerConfig;
    use crate::breaker::tests::breaker;
    use crate::classify::Verdict;

    const ALL: [State; 6] =
        [State::Closed, State::Open, State::HalfOpen, State::Disabled, State::MetricsOnly, State::ForcedOpen];

    #[test]
    fn transition_to_makes_every_move_and_announces_each_but_a_stay() {
        for from in ALL {
            for to in ALL {
                let (b, _clock) = breaker(BreakerConfig::count_based(4));
                b.transition_to(from);
                let seen = Arc::new(Mutex::new(Vec::new()));
                let sink = Arc::clone(&seen);
                b.on_transition(move |t| {
                    sink.lock().unwrap().push((t.from(), t.to(), t.failure_rate(), t.slow_call_rate()))
                });
                b.transition_to(to);
                assert_eq!(b.state(), to, "{from} -> {to}");
                let announced = if from == to { vec![] } else { vec![(from, to, None, None)] };
                assert_eq!(*seen.lock().unwrap(), announced, "{from} -> {to}");
            }
        }
    }

    #[test]
    fn a_move_leaves_permits_in_flight_to_the_lifetime_totals_and_a_stay_does_not() {
        let (b, _clock) = breaker(BreakerConfig::count_based(4).minimum_calls(4));
        b.transition_to(State::MetricsOnly);
        let before_stay = b.try_acquire().unwrap();
        b.transition_to(State::MetricsOnly);
        before_stay.record(Verdict::Failure, Duration::ZERO);
        assert_eq!(b.metrics().buffered_calls, 1, "a stay keeps the window and its permits");
        let before_move = b.try_acquire().unwrap();
        b.transition_to(State::Closed);
        before_move.record(Verdict::Failure, Duration::ZERO);
        let m = b.metrics();
        assert_eq!((m.state, m.buffered_calls, m.failed), (State::Closed, 0, 2), "a fresh window");
    }

    #[test]
    fn closed_to_half_open_starts_a_round_of_probes() {
        let config = BreakerConfig::count_based(4).minimum_calls(2).half_open_calls(2);
        for (verdict, concluded) in [(Verdict::Success, State::Closed), (Verdict::Failure, State::Open)] {
            let (b, _clock) = breaker(config.clone());
            b.transition_to(State::HalfOpen);
            let probes = [b.try_acquire().unwrap(), b.try_acquire().unwrap()];
            assert!(probes.iter().all(|p| p.state() == State::HalfOpen));
            assert_eq!(b.try_acquire().unwrap_err(), State::HalfOpen, "two slots, both taken");
            probes.into_iter().for_each(|p| p.record(verdict, Duration::ZERO));
            assert_eq!(b.state(), concluded);
        }
    }

    #[test]
    fn a_stuck_pool_opens_a_closed_breaker_whatever_its_window_holds() {
        let config = BreakerConfig::count_based(20).minimum_calls(10).open_for(Duration::from_secs(15));
        let (b, clock) = breaker(config);
        for _ in 0..20 {
            b.try_acquire().unwrap().record(Verdict::Success, Duration::from_millis(1));
        }
        // A permit taken before the pool was stuck reports late: lifetime totals only.
        let late = b.try_acquire().unwrap();
        assert_eq!(b.open_when_stuck(), Some(State::Closed));
        assert_eq!(b.state(), State::Open);
        assert_eq!(b.open_when_stuck(), None, "an OPEN breaker stays as it is");
        late.record(Verdict::Failure, Duration::from_secs(3));
        assert_eq!(b.state(), State::Open);
        assert!(b.try_acquire().is_err());
        // An ordinary open period: HALF_OPEN once open_for has passed, on the breaker's clock.
        clock.advance(Duration::from_secs(15));
        assert_eq!(b.try_acquire().unwrap().state(), State::HalfOpen);
        // Never out of the operator's states.
        for forced in [State::ForcedOpen, State::Disabled, State::MetricsOnly] {
            b.transition_to(forced);
            assert_eq!(b.open_when_stuck(), None);
            assert_eq!(b.state(), forced);
        }
    }

    #[test]
    fn a_stuck_pool_sends_a_half_open_breaker_back_to_open() {
        let config = BreakerConfig::count_based(4)
            .minimum_calls(2)
            .half_open_calls(2)
            .open_for(Duration::from_secs(10));
        let (b, clock) = breaker(config);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        b.on_transition(move |t| sink.lock().unwrap().push((t.from(), t.to())));
        b.transition_to(State::Open);
        clock.advance(Duration::from_secs(10));
        // A probe admitted, then refused for want of room: its permit drops unrecorded.
        let probe = b.try_acquire().unwrap();
        assert_eq!(probe.state(), State::HalfOpen);
        drop(probe);
        assert_eq!(b.open_when_stuck(), Some(State::HalfOpen));
        assert_eq!(b.state(), State::Open);
        assert!(b.try_acquire().is_err(), "a fresh open period");
        let announced = seen.lock().unwrap().clone();
        assert_eq!(
            announced,
            vec![
                (State::Closed, State::Open),
                (State::Open, State::HalfOpen),
                (State::HalfOpen, State::Open)
            ]
        );
        // The open period is the next of the backoff, and then probes come again.
        clock.advance(Duration::from_secs(10));
        assert_eq!(b.try_acquire().unwrap().state(), State::HalfOpen);
    }
}
