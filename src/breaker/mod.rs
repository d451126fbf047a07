//! The circuit breaker: a [`Breaker`] hands out [`Permit`]s, each permit
//! reports one call's [`Verdict`](crate::Verdict) and duration, and the rates over a sliding
//! window decide when the provider is considered down.
//!
//! # Rules
//!
//! Windows are count-based (the last N calls) or time-based (the last N
//! seconds, one-second buckets). Once [`minimum_calls`](BreakerConfig::minimum_calls)
//! are in the window, CLOSED opens when the failure rate or the slow-call rate
//! (calls longer than `slow_call_duration`, successes too) reaches its
//! threshold; [what counts as a failure](crate::dependency#what-counts-as-a-failure)
//! is the call's classifier's word, and an ignored outcome counts in neither
//! rate. OPEN rejects with [`NotPermitted`](crate::Rejection::NotPermitted) for
//! `open_for` (growing with [`OpenBackoff`] if set); the next call moves it to
//! HALF_OPEN, which admits `half_open_calls` probes and decides when all have
//! reported. It also opens when its workers are stuck ([the stuck
//! rule](crate::dependency#a-hang-is-caught-within-one-timeout)). Defaults are
//! Resilience4j's; transitions are logged at `info` and sent to listeners.
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

mod acquire;
mod announce;
mod config;
mod machine;
mod manual;

mod state;
mod window;

use std::fmt;
use std::sync::Arc;

pub use self::acquire::{OwnedPermit, Permit};
pub use self::config::{BreakerConfig, OpenBackoff, WindowKind};
use self::machine::Inner;
use self::state::state_of;
pub use self::state::{BreakerMetrics, State, Transition};
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
    /// It starts CLOSED, or DISABLED as [`BreakerConfig::enabled`] says.
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
        let enabled = config::starts_enabled(config.enabled, env.as_deref());
        let state = if enabled { State::Closed } else { State::Disabled };
        let inner = Inner::new(name.into(), config, clock, state);
        Ok(Breaker { inner: Arc::new(inner) })
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.inner.name
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
    send_sync::<BreakerMetrics>();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::classify::Verdict;
    use crate::clock::ManualClock;

    /// A breaker named "t" on a manual clock of its own.
    pub(super) fn breaker(config: BreakerConfig) -> (Breaker, ManualClock) {
        let clock = ManualClock::new();
        (Breaker::with_clock("t", config, Arc::new(clock.clone())).unwrap(), clock)
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
