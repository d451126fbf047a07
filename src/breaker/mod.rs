//! The circuit breaker: a [`Breaker`] hands out [`Permit`]s, each permit
//! reports one call's [`Verdict`](crate::Verdict) and duration, and the rates over a sliding
//! window decide when the provider is considered down.
//!
//! # States
//!
//! ```text
//!            failure or slow rate >= threshold
//!   CLOSED ──────────────────────────────────────► OPEN ◄──────────┐
//!     ▲                                             │ open_for      │ probes over threshold,
//!     │ probes under threshold                      ▼ passed (lazy) │ or max wait (default)
//!     └──────────────────────────────────────── HALF_OPEN ──────────┘
//!
//!   DISABLED: permits everything, records nothing.   METRICS_ONLY: permits, measures, never opens.
//!   FORCED_OPEN: rejects everything.                 Only `transition_to` / `reset` leave these.
//! ```
//!
//! Time-driven moves (OPEN -> HALF_OPEN once `open_for` has passed, HALF_OPEN
//! -> `after_max_wait` once `max_wait_in_half_open` has passed) are lazy: they
//! happen on the next [`Breaker::try_acquire`] (or, for the half-open wait,
//! the next report), never on a timer. [`Breaker::state`] and
//! [`Breaker::metrics`] show the state as of the last such call.
//!
//! # Concurrency
//!
//! One `parking_lot` mutex guards everything that changes together: the
//! state, the window, the half-open round, the lifetime counters and the
//! queue of transitions still to announce. Three things live outside it, so
//! that a CLOSED acquire and an OPEN rejection take no lock (a report takes
//! it, once):
//!
//! - `current`: the generation and state packed into one `AtomicU64`, a
//!   read-only mirror of the locked values, written only under the lock
//!   (`Release`, read with `Acquire`). A CLOSED (or METRICS_ONLY, DISABLED)
//!   acquire is one load of it.
//! - `open_until_ns`: while OPEN, the end of the open period in
//!   nanoseconds since the breaker's base instant, written under the lock
//!   before the `Release` store of `current` that enters OPEN. An OPEN
//!   reject is one load of `current`, one clock reading, one load of
//!   `open_until_ns`, a comparison and one relaxed add to `rejected`: no
//!   lock. A reader that saw OPEN in `current` sees this period's end or a
//!   later period's (it is only ever overwritten by a later entry into
//!   OPEN), so it rejects only where the breaker was open at some moment
//!   during the call. Once the period has passed it takes the lock, which
//!   decides on the locked state. On the system clock this path is inlined
//!   into `try_acquire` beside the CLOSED branch and reads `Instant::now`
//!   directly, not through `dyn Clock`.
//! - `rejected`: every rejection, one relaxed counter read by `metrics()`.
//!
//! The lock-free parts are model checked under loom (`tests/loom_breaker.rs`).
//!
//! A stale read of `current` is harmless: a decision taken on it is the one
//! the breaker would have taken a moment earlier, and everything that changes
//! state re-checks under the lock.
//!
//! # Generations
//!
//! Every state change, manual ones included, bumps the generation, and every
//! permit carries the generation it was issued in. A report counts in the
//! window or in the half-open round only when its generation is still the
//! current one. A call permitted in an earlier CLOSED window or an earlier
//! half-open round still counts in the lifetime totals, but can never take
//! or give back a slot of the current round, nor land in a fresh window.
//!
//! # Files
//!
//! `state.rs` (the vocabulary), `machine.rs` (the locked state machine),
//! `announce.rs` (transitions told after the lock), `permit.rs`, `config.rs`
//! and `window.rs` (the sliding windows).

mod announce;
mod config;
mod machine;
mod permit;
mod state;
mod window;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

pub use self::config::{BreakerConfig, OpenBackoff, WindowKind};
use self::machine::{Inner, View, nanos_since};
pub use self::permit::{OwnedPermit, Permit};
pub use self::state::{BreakerMetrics, NotPermitted, State, Transition};
use self::state::{STATE_MASK, pack, state_of};
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::sync::Ordering;

/// A circuit breaker. Cheap to clone: clones share one breaker.
///
/// ```
/// use std::time::Duration;
/// use watertight::{Verdict, breaker::{Breaker, BreakerConfig, State}};
///
/// let breaker = Breaker::new("account", BreakerConfig::count_based(10).minimum_calls(2)).unwrap();
/// for _ in 0..2 {
///     let permit = breaker.try_acquire().expect("closed");
///     // ... call the provider, time it, classify the result ...
///     permit.record(Verdict::Failure, Duration::from_millis(3));
/// }
/// assert_eq!(breaker.state(), State::Open);
/// assert!(breaker.try_acquire().is_err());
/// ```
#[derive(Clone)]
pub struct Breaker {
    inner: Arc<Inner>,
}

impl Breaker {
    /// A breaker on the system clock. Fails if `config` breaks a rule (see
    /// [`BreakerConfig::validate`]).
    pub fn new(name: impl Into<String>, config: BreakerConfig) -> Result<Breaker, ConfigError> {
        Self::build(name, config, None)
    }

    /// A breaker on the given clock, e.g. a [`ManualClock`](crate::ManualClock)
    /// in tests.
    ///
    /// It starts CLOSED, or DISABLED when `config.enabled(false)` was set or
    /// the environment variable `WATERTIGHT_BREAKER_ENABLED` says `false` now.
    ///
    /// The clock may be read while the breaker's lock is held: a `Clock`
    /// must never call back into the breaker.
    pub fn with_clock(
        name: impl Into<String>,
        config: BreakerConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Breaker, ConfigError> {
        Self::build(name, config, Some(clock))
    }

    /// A breaker on `clock`, or on the system clock when `None`.
    pub(crate) fn build(
        name: impl Into<String>,
        config: BreakerConfig,
        clock: Option<Arc<dyn Clock>>,
    ) -> Result<Breaker, ConfigError> {
        config.validate()?;
        let env = std::env::var(config::ENABLED_ENV).ok();
        let state = if config::starts_enabled(config.enabled, env.as_deref()) {
            State::Closed
        } else {
            State::Disabled
        };
        let inner = Inner::new(name.into(), config, clock, state);
        Ok(Breaker { inner: Arc::new(inner) })
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Asks to make one call.
    ///
    /// CLOSED, METRICS_ONLY and DISABLED always permit, without reading the
    /// clock or taking a lock. OPEN rejects until its period has passed; the
    /// first call after that moves the breaker to HALF_OPEN and is its first
    /// probe. HALF_OPEN permits `half_open_calls` probes in all. FORCED_OPEN
    /// rejects.
    ///
    /// The permit must be given the call's outcome with [`Permit::record`];
    /// dropping it counts the call as ignored.
    #[inline]
    pub fn try_acquire(&self) -> Result<Permit<'_>, NotPermitted> {
        let inner = &*self.inner;
        let current = inner.current.0.load(Ordering::Acquire);
        // CLOSED first, as a plain branch: it is the state a healthy breaker lives in.
        if current & STATE_MASK == State::Closed.bits() {
            return Ok(self.permit(current));
        }
        // OPEN on the system clock next, inline too: a breaker that is open
        // is asked again and again, and its answer should cost little more
        // than the clock reading it needs.
        if current & STATE_MASK == State::Open.bits() && inner.system_clock {
            return self.acquire_open(Instant::now());
        }
        self.acquire_not_closed(current)
    }

    /// Every state but CLOSED, and OPEN on an injected clock.
    #[inline(never)]
    fn acquire_not_closed(&self, current: u64) -> Result<Permit<'_>, NotPermitted> {
        let inner = &*self.inner;
        if current & STATE_MASK == State::Open.bits() {
            return self.acquire_open(inner.clock.now());
        }
        match state_of(current) {
            State::Closed | State::MetricsOnly | State::Disabled => Ok(self.permit(current)),
            State::Open | State::HalfOpen => self.acquire_slow(None),
            State::ForcedOpen => Err(inner.reject(State::ForcedOpen)),
        }
    }

    /// Like [`try_acquire`](Self::try_acquire), with a permit that holds the
    /// breaker by reference count: `'static`, for a call whose outcome is
    /// reported on another thread, after this borrow has ended.
    ///
    /// ```
    /// use std::time::Duration;
    /// use watertight::{Verdict, breaker::{Breaker, BreakerConfig}};
    ///
    /// let breaker = Breaker::new("payments", BreakerConfig::count_based(10))?;
    /// let permit = breaker.try_acquire_owned().expect("closed");
    /// std::thread::spawn(move || permit.record(Verdict::Success, Duration::from_millis(3)))
    ///     .join()
    ///     .unwrap();
    /// assert_eq!(breaker.metrics().successful, 1);
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn try_acquire_owned(&self) -> Result<OwnedPermit, NotPermitted> {
        // The borrowed permit hands its report over: it must not report too.
        let (_, issued) = self.try_acquire()?.disarm();
        Ok(OwnedPermit { breaker: Arc::clone(&self.inner), issued, reported: false })
    }

    /// A permit only while the breaker is CLOSED, decided on one atomic
    /// load: for a hedge, which must never add load to a provider the
    /// breaker has doubts about. `None` in every other state (a half-open
    /// probe slot is never taken).
    pub(crate) fn try_acquire_owned_if_closed(&self) -> Option<OwnedPermit> {
        let current = self.inner.current.0.load(Ordering::Acquire);
        (current & STATE_MASK == State::Closed.bits()).then(|| OwnedPermit {
            breaker: Arc::clone(&self.inner),
            issued: current,
            reported: false,
        })
    }

    /// OPEN as of `current` (just loaded with `Acquire`), at `now`: rejected
    /// while the open period lasts, or decided under the lock once it has
    /// passed. Always inlined, so that the system clock's branch in
    /// `try_acquire` stays as short as it is.
    #[inline(always)]
    fn acquire_open(&self, now: Instant) -> Result<Permit<'_>, NotPermitted> {
        let inner = &*self.inner;
        if nanos_since(inner.base, now) < inner.open_until_ns.load(Ordering::Relaxed) {
            return Err(inner.reject(State::Open));
        }
        self.acquire_slow(Some(now))
    }

    #[inline]
    fn permit(&self, issued: u64) -> Permit<'_> {
        Permit { breaker: &self.inner, issued }
    }

    /// Everything that may change state: OPEN whose period has passed, and
    /// HALF_OPEN. Decided under the lock, on the locked state, whatever the
    /// lock-free read said.
    #[cold]
    #[inline(never)]
    fn acquire_slow(&self, now: Option<Instant>) -> Result<Permit<'_>, NotPermitted> {
        let inner = &*self.inner;
        let mut now = inner.lazy_now(now);
        let mut core = inner.core.lock();
        // Each pass either answers or changes state; a change never leads back
        // to the state it left within one call (open and half-open periods are
        // longer than zero and start at `now`), so this ends within three passes.
        let answer = loop {
            match core.state {
                State::Closed | State::MetricsOnly | State::Disabled => {
                    break Ok(pack(core.generation, core.state));
                }
                State::ForcedOpen => break Err(State::ForcedOpen),
                State::Open => {
                    if core.open_until.is_none_or(|until| now.instant() < until) {
                        break Err(State::Open);
                    }
                    inner.enter(&mut core, State::HalfOpen, &mut now, View::default());
                }
                State::HalfOpen => {
                    if core.round.deadline_ns != u64::MAX && now.ns() >= core.round.deadline_ns {
                        let after = core.config.after_max_wait;
                        inner.enter(&mut core, after, &mut now, View::default());
                        continue;
                    }
                    if core.round.admitted < core.config.half_open_calls {
                        core.round.admitted += 1;
                        break Ok(pack(core.generation, State::HalfOpen));
                    }
                    break Err(State::HalfOpen);
                }
            }
        };
        inner.release(core);
        match answer {
            Ok(issued) => Ok(self.permit(issued)),
            Err(state) => Err(inner.reject(state)),
        }
    }

    /// The current state. One atomic load; time-driven changes show once a
    /// call has driven them (see the module docs).
    pub fn state(&self) -> State {
        state_of(self.inner.current.0.load(Ordering::Acquire))
    }

    /// A snapshot of the state, the current rates and the lifetime counters.
    pub fn metrics(&self) -> BreakerMetrics {
        let inner = &*self.inner;
        let mut now = inner.lazy_now(None);
        let mut core = inner.core.lock();
        let view = inner.view(&mut core, &mut now);
        let life = core.lifetime;
        let state = core.state;
        drop(core);
        BreakerMetrics {
            state,
            failure_rate: view.failure_rate,
            slow_call_rate: view.slow_call_rate,
            buffered_calls: view.buffered,
            successful: life.successful,
            failed: life.failed,
            ignored: life.ignored,
            slow: life.slow,
            not_permitted: inner.rejected.0.load(Ordering::Relaxed),
        }
    }

    /// Moves the breaker to `to` by hand, e.g. to FORCED_OPEN during a
    /// provider's maintenance or to DISABLED in an emergency. Entering CLOSED
    /// or METRICS_ONLY starts a fresh window, OPEN a fresh open period,
    /// HALF_OPEN a fresh round. Nothing happens if the breaker is already in
    /// `to`.
    pub fn transition_to(&self, to: State) {
        let inner = &*self.inner;
        let mut now = inner.lazy_now(None);
        let mut core = inner.core.lock();
        if core.state != to {
            inner.enter(&mut core, to, &mut now, View::default());
        }
        inner.release(core);
    }

    /// Opens the breaker now if it is CLOSED, whatever its window holds, and
    /// says whether it did. The dependency calls this when its pool is
    /// stalled: every worker stuck inside a call for longer than the
    /// provider's answers take is evidence enough, and waiting for the
    /// window to fill would hold request threads for nothing. The
    /// transition carries no rates (none caused it).
    pub(crate) fn open_if_closed(&self) -> bool {
        let inner = &*self.inner;
        let mut now = inner.lazy_now(None);
        let mut core = inner.core.lock();
        let opened = core.state == State::Closed;
        if opened {
            inner.enter(&mut core, State::Open, &mut now, View::default());
        }
        inner.release(core);
        opened
    }

    /// Whether a call at `at` (on the breaker's clock) could be permitted,
    /// as far as can be told now: `false` while FORCED_OPEN, or OPEN until
    /// after `at`, or HALF_OPEN with every probe slot taken. Retry asks this
    /// before it sleeps a backoff, so it never sleeps into a rejection.
    pub(crate) fn may_permit_at(&self, at: Instant) -> bool {
        let core = self.inner.core.lock();
        match core.state {
            State::ForcedOpen => false,
            State::Open => core.open_until.is_some_and(|until| at >= until),
            State::HalfOpen => core.round.admitted < core.config.half_open_calls,
            State::Closed | State::MetricsOnly | State::Disabled => true,
        }
    }

    /// Back to CLOSED with a fresh window and the open backoff started over,
    /// from any state (CLOSED included). Permits issued before are counted
    /// in the lifetime totals only.
    pub fn reset(&self) {
        let inner = &*self.inner;
        let mut now = inner.lazy_now(None);
        let mut core = inner.core.lock();
        core.opens = 0;
        inner.enter(&mut core, State::Closed, &mut now, View::default());
        inner.release(core);
    }

    /// The configuration in force.
    pub fn config(&self) -> BreakerConfig {
        self.inner.core.lock().config.clone()
    }

    /// Replaces the configuration while calls run, keeping the state.
    ///
    /// What carries over and what starts afresh:
    /// - the state is kept (an OPEN breaker stays open until its current
    ///   period ends; the next period uses the new `open_for`);
    /// - rates and thresholds (`failure_rate`, `slow_call_rate`,
    ///   `slow_call_duration`, `minimum_calls`) apply from the next recorded
    ///   outcome, to the calls already in the window;
    /// - a new window kind or size (`count_based(n)` / `time_based(n)`)
    ///   starts an empty window;
    /// - calls permitted before the change and reported after it count in
    ///   the lifetime totals only, like any late report;
    /// - a HALF_OPEN breaker starts a fresh round of `half_open_calls`
    ///   probes (probes in flight count in the lifetime totals only);
    /// - `enabled(false)` moves it to DISABLED, and `enabled(true)` moves a
    ///   DISABLED breaker to CLOSED.
    ///
    /// An invalid configuration is refused with the [`ConfigError`] of
    /// [`BreakerConfig::validate`], and nothing changes.
    pub fn reconfigure(&self, config: BreakerConfig) -> Result<(), ConfigError> {
        config.validate()?;
        let inner = &*self.inner;
        let mut now = inner.lazy_now(None);
        let mut core = inner.core.lock();
        inner.reconfigure(&mut core, config, &mut now);
        inner.release(core);
        Ok(())
    }

    /// Registers a listener for every change of state.
    ///
    /// Listeners run after the breaker's lock is released, so they may call
    /// back into the breaker ([`state`](Self::state), [`metrics`](Self::metrics),
    /// even [`transition_to`](Self::transition_to)). Each transition reaches
    /// each listener once, and all listeners see transitions in the order
    /// they happened: one thread at a time announces them, and a transition
    /// made while another thread announces is announced by that thread. A
    /// listener that panics is logged and skipped; the breaker carries on.
    pub fn on_transition(&self, listener: impl Fn(&Transition) + Send + Sync + 'static) {
        self.inner.listeners.add(Arc::new(listener));
    }
}

impl fmt::Debug for Breaker {
    /// Never blocks: reads the lock-free state only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("name", &self.name())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Breaker>();
    send_sync::<Permit<'static>>();
    send_sync::<OwnedPermit>();
    send_sync::<Transition>();
    send_sync::<NotPermitted>();
    send_sync::<BreakerMetrics>();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::classify::Verdict;
    use crate::clock::{Clock, ManualClock};

    fn breaker(config: BreakerConfig) -> (Breaker, ManualClock) {
        let clock = ManualClock::new();
        (Breaker::with_clock("t", config, Arc::new(clock.clone())).unwrap(), clock)
    }

    #[test]
    fn a_stalled_pool_opens_a_closed_breaker_whatever_its_window_holds() {
        let config = BreakerConfig::count_based(20).minimum_calls(10).open_for(Duration::from_secs(15));
        let (b, clock) = breaker(config);
        for _ in 0..20 {
            b.try_acquire().unwrap().record(Verdict::Success, Duration::from_millis(1));
        }
        // A permit taken before the stall reports late: lifetime totals only.
        let late = b.try_acquire().unwrap();
        assert!(b.open_if_closed());
        assert_eq!(b.state(), State::Open);
        assert!(!b.open_if_closed(), "only a CLOSED breaker is opened");
        late.record(Verdict::Failure, Duration::from_secs(3));
        assert_eq!(b.state(), State::Open);
        assert!(b.try_acquire().is_err());
        // An ordinary open period: HALF_OPEN once open_for has passed, on the breaker's clock.
        clock.advance(Duration::from_secs(15));
        assert_eq!(b.try_acquire().unwrap().state(), State::HalfOpen);
        // Never out of the operator's states.
        for forced in [State::ForcedOpen, State::Disabled, State::MetricsOnly] {
            b.transition_to(forced);
            assert!(!b.open_if_closed());
            assert_eq!(b.state(), forced);
        }
    }

    #[test]
    fn may_permit_at_tells_a_retry_whether_to_sleep() {
        let config = BreakerConfig::count_based(2)
            .minimum_calls(2)
            .open_for(Duration::from_secs(10))
            .half_open_calls(1);
        let (b, clock) = breaker(config);
        let now = clock.now();
        assert!(b.may_permit_at(now));
        for _ in 0..2 {
            b.try_acquire().unwrap().record(Verdict::Failure, Duration::ZERO);
        }
        assert_eq!(b.state(), State::Open);
        assert!(!b.may_permit_at(now + Duration::from_millis(200)), "a backoff into the open period");
        assert!(b.may_permit_at(now + Duration::from_secs(10)), "a backoff past it");
        clock.advance(Duration::from_secs(10));
        let probe = b.try_acquire().unwrap();
        assert!(!b.may_permit_at(clock.now()), "the one probe slot is taken");
        drop(probe);
        assert!(b.may_permit_at(clock.now()), "and given back");
        b.transition_to(State::ForcedOpen);
        assert!(!b.may_permit_at(clock.now() + Duration::from_secs(3600)));
    }

    #[test]
    fn an_answer_to_try_acquire_is_two_words() {
        // So it comes back in registers, not through memory (`permit.rs`).
        assert_eq!(std::mem::size_of::<Result<Permit<'_>, NotPermitted>>(), 2 * std::mem::size_of::<usize>());
    }

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

    #[test]
    fn late_permit_from_an_earlier_round_takes_no_slot() {
        let config = BreakerConfig::count_based(2)
            .minimum_calls(1)
            .half_open_calls(1)
            .open_for(Duration::from_secs(1))
            .max_wait_in_half_open(Duration::from_secs(5));
        let (b, clock) = breaker(config);
        b.try_acquire().unwrap().record(Verdict::Failure, Duration::ZERO);
        clock.advance(Duration::from_secs(1));
        let old_probe = b.try_acquire().unwrap();
        assert_eq!(old_probe.state(), State::HalfOpen);
        clock.advance(Duration::from_secs(5));
        assert!(b.try_acquire().is_err()); // max wait: OPEN again
        clock.advance(Duration::from_secs(2));
        let new_probe = b.try_acquire().unwrap();
        assert_eq!(b.state(), State::HalfOpen);
        // The late probe's failure must not conclude the new round.
        old_probe.record(Verdict::Failure, Duration::ZERO);
        assert_eq!(b.state(), State::HalfOpen);
        assert!(b.try_acquire().is_err(), "the one slot is still the new probe's");
        new_probe.record(Verdict::Success, Duration::ZERO);
        assert_eq!(b.state(), State::Closed);
        assert_eq!(b.metrics().failed, 2);
    }

    #[test]
    fn frozen_rates_while_open() {
        let (b, _clock) = breaker(BreakerConfig::count_based(4).minimum_calls(2));
        b.try_acquire().unwrap().record(Verdict::Success, Duration::ZERO);
        b.try_acquire().unwrap().record(Verdict::Failure, Duration::ZERO);
        let m = b.metrics();
        assert_eq!((m.state, m.failure_rate, m.buffered_calls), (State::Open, Some(50.0), 2));
    }

    #[test]
    fn debug_never_blocks() {
        let (b, _clock) = breaker(BreakerConfig::default());
        let _held = b.inner.core.lock();
        assert!(format!("{b:?}").contains("Closed"));
    }
}
