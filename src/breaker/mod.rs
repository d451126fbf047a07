//! The circuit breaker: a [`Breaker`] hands out [`Permit`]s, each permit
//! reports one call's [`Verdict`] and duration, and the rates over a sliding
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
//! queue of transitions still to announce. Three things live outside it:
//!
//! - `current`: the generation and state packed into one `AtomicU64`, a
//!   read-only mirror of the locked values, written only under the lock
//!   (`Release`, read with `Acquire`). A CLOSED (or METRICS_ONLY, DISABLED)
//!   acquire is one load of it.
//! - `not_permitted`: a relaxed counter, monotonic, read by `metrics()`.
//! - `OPEN_UNTIL`, a per-thread cache of the end of the open period this
//!   thread was last rejected by, keyed by the breaker's unique id and the
//!   packed `current` word. An open period's end is fixed when OPEN is
//!   entered and every entry bumps the generation, so a cached end that
//!   matches the key is exact, never stale. With it, an OPEN reject is one
//!   load, one clock reading, one `Instant` comparison and one increment: no
//!   lock, and no conversion of the clock reading.
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

mod config;
mod window;

pub use self::config::BreakerConfig;

use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use self::config::WindowKind;
use self::window::{Outcome, Totals, Window};
use crate::classify::Verdict;
use crate::clock::{Clock, SystemClock};
use crate::error::{ConfigError, Error, Rejection};

/// The state of a [`Breaker`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Calls flow; outcomes are measured and may open the breaker.
    Closed,
    /// The provider is considered down: calls are rejected until the open
    /// period has passed.
    Open,
    /// A limited number of probe calls decide between open and closed.
    HalfOpen,
    /// Every call is permitted and nothing is recorded.
    Disabled,
    /// Every call is permitted and measured, but the breaker never opens.
    MetricsOnly,
    /// Every call is rejected, until moved out by hand.
    ForcedOpen,
}

impl State {
    /// A short, stable, lower-case name: `"closed"`, `"open"`, `"half_open"`,
    /// `"disabled"`, `"metrics_only"`, `"forced_open"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half_open",
            State::Disabled => "disabled",
            State::MetricsOnly => "metrics_only",
            State::ForcedOpen => "forced_open",
        }
    }

    const fn bits(self) -> u64 {
        match self {
            State::Closed => 0,
            State::Open => 1,
            State::HalfOpen => 2,
            State::Disabled => 3,
            State::MetricsOnly => 4,
            State::ForcedOpen => 5,
        }
    }

    const fn from_bits(bits: u64) -> State {
        match bits {
            0 => State::Closed,
            1 => State::Open,
            2 => State::HalfOpen,
            3 => State::Disabled,
            4 => State::MetricsOnly,
            _ => State::ForcedOpen,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `current`'s layout: the state in the low byte, the generation above it.
const STATE_MASK: u64 = 0xff;

const fn pack(generation: u64, state: State) -> u64 {
    (generation << 8) | state.bits()
}

const fn state_of(packed: u64) -> State {
    State::from_bits(packed & STATE_MASK)
}

/// One change of state, as announced to [`Breaker::on_transition`] listeners
/// and logged at `info`.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    name: Arc<str>,
    from: State,
    to: State,
    failure_rate: Option<f64>,
    slow_call_rate: Option<f64>,
}

impl Transition {
    /// The name of the breaker that changed state.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The state it left.
    pub fn from(&self) -> State {
        self.from
    }

    /// The state it entered.
    pub fn to(&self) -> State {
        self.to
    }

    /// The failure rate (percent) that caused the change, when rates caused
    /// it: the window's for CLOSED -> OPEN, the probes' for a half-open round
    /// that ended. `None` for time-driven and manual changes.
    pub fn failure_rate(&self) -> Option<f64> {
        self.failure_rate
    }

    /// The slow-call rate (percent) that caused the change; see
    /// [`failure_rate`](Self::failure_rate).
    pub fn slow_call_rate(&self) -> Option<f64> {
        self.slow_call_rate
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "circuit breaker '{}': {} -> {}", self.name, self.from, self.to)?;
        if let (Some(fr), Some(sr)) = (self.failure_rate, self.slow_call_rate) {
            write!(f, " (failure rate {fr:.1} %, slow-call rate {sr:.1} %)")?;
        }
        Ok(())
    }
}

/// The answer of [`Breaker::try_acquire`] when the call may not go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotPermitted {
    state: State,
}

impl NotPermitted {
    /// The state that refused the call: [`State::Open`],
    /// [`State::ForcedOpen`], or [`State::HalfOpen`] when every probe slot is
    /// taken.
    pub fn state(&self) -> State {
        self.state
    }
}

impl fmt::Display for NotPermitted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.state {
            State::HalfOpen => {
                f.write_str("call not permitted: the circuit breaker is half-open and every probe is taken")
            }
            s => write!(f, "call not permitted: the circuit breaker is {s}"),
        }
    }
}

impl std::error::Error for NotPermitted {}

impl From<NotPermitted> for Rejection {
    fn from(_: NotPermitted) -> Self {
        Rejection::CircuitOpen
    }
}

impl<E> From<NotPermitted> for Error<E> {
    fn from(_: NotPermitted) -> Self {
        Error::Rejected(Rejection::CircuitOpen)
    }
}

/// A snapshot of a breaker's state and counters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BreakerMetrics {
    /// The state, as of the last call that could move it.
    pub state: State,
    /// Percentage of failures in the window (CLOSED, METRICS_ONLY) or among
    /// the probes (HALF_OPEN, once all have reported); while OPEN, the rate of
    /// the window or round that opened it. `None` until `minimum_calls` (or
    /// every probe) are in, and in DISABLED and FORCED_OPEN.
    pub failure_rate: Option<f64>,
    /// Percentage of slow calls, over the same calls as `failure_rate`.
    pub slow_call_rate: Option<f64>,
    /// How many calls the window holds (in HALF_OPEN: probes that reported;
    /// while OPEN: what the window or round that opened it held).
    pub buffered_calls: u32,
    /// Lifetime count of calls reported as successes.
    pub successful: u64,
    /// Lifetime count of calls reported as failures.
    pub failed: u64,
    /// Lifetime count of calls reported as ignored, or whose permit was
    /// dropped without a verdict.
    pub ignored: u64,
    /// Lifetime count of successes and failures slower than
    /// `slow_call_duration`.
    pub slow: u64,
    /// Lifetime count of rejected acquisitions.
    pub not_permitted: u64,
}

type Listener = Arc<dyn Fn(&Transition) + Send + Sync + 'static>;

/// Gives every breaker its `uid`; starts at 1 so that the empty cache entry
/// matches none.
static NEXT_UID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// `(breaker uid, packed current, end of that open period)`: see the
    /// module docs. One entry per thread: a thread rejected by several open
    /// breakers in turn just takes the lock more often.
    static OPEN_UNTIL: Cell<(u64, u64, Option<Instant>)> = const { Cell::new((0, 0, None)) };
}

/// Keeps what it wraps on a cache line of its own, so that the read-mostly
/// state word is not invalidated by every lock and unlock of the mutex.
#[repr(align(128))]
struct Padded<T>(T);

/// A circuit breaker. Cheap to clone: clones share one breaker.
///
/// ```
/// use std::time::Duration;
/// use watertight::{Breaker, BreakerConfig, State, Verdict};
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

struct Inner {
    /// Lock-free mirror of `(core.generation, core.state)`, see the module docs.
    current: Padded<AtomicU64>,
    /// Unique among the breakers of this process: the key of `OPEN_UNTIL`.
    uid: u64,
    not_permitted: Padded<AtomicU64>,
    core: Mutex<Core>,
    listeners: Mutex<Arc<Vec<Listener>>>,
    name: Arc<str>,
    config: BreakerConfig,
    min_calls: u64,
    time_window: bool,
    clock: Arc<dyn Clock>,
    /// The clock's reading when the breaker was built: the time window's
    /// seconds and the half-open deadline count from it.
    base: Instant,
}

/// Everything that changes together, under `Inner::core`.
struct Core {
    state: State,
    /// Bumped on every change of state; see the module docs.
    generation: u64,
    /// The CLOSED / METRICS_ONLY window. Kept (not recorded into) while OPEN
    /// so that `metrics()` can show what opened the breaker; cleared when
    /// CLOSED or METRICS_ONLY is entered.
    window: Window,
    /// What `metrics()` shows while OPEN.
    frozen: View,
    /// Valid while OPEN: when the open period ends (`None`: beyond what an
    /// `Instant` can hold, i.e. never).
    open_until: Option<Instant>,
    /// Consecutive openings since the breaker was last CLOSED: picks the
    /// next open period when `open_backoff` is set.
    opens: u32,
    /// Valid while HALF_OPEN.
    round: Round,
    lifetime: Lifetime,
    /// Transitions not yet announced, in the order they happened.
    pending: VecDeque<Transition>,
    /// A thread is announcing `pending`; others just queue. See `deliver`.
    delivering: bool,
}

/// The half-open round.
///
/// Invariant: `done <= admitted <= config.half_open_calls`. `admitted`
/// counts the slots taken in this round (probes in flight plus those that
/// reported a success or failure); an ignored or dropped probe gives its slot
/// back. The round is over when `done == half_open_calls`.
#[derive(Debug, Default, Clone, Copy)]
struct Round {
    admitted: u32,
    done: u32,
    totals: Totals,
    /// Nanoseconds since `base` after which the round is given up
    /// (`u64::MAX`: never).
    deadline_ns: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Lifetime {
    successful: u64,
    failed: u64,
    ignored: u64,
    slow: u64,
}

impl Lifetime {
    /// Every report counts here, late ones included; a slow call only when
    /// it was a success or a failure.
    #[inline]
    fn count(&mut self, verdict: Verdict, slow: bool) {
        match verdict {
            Verdict::Success => self.successful += 1,
            Verdict::Failure => self.failed += 1,
            Verdict::Ignore => return self.ignored += 1,
        }
        self.slow += u64::from(slow);
    }
}

/// Rates and size as `metrics()` shows them.
#[derive(Debug, Default, Clone, Copy)]
struct View {
    failure_rate: Option<f64>,
    slow_call_rate: Option<f64>,
    buffered: u32,
}

impl View {
    fn of(totals: Totals, minimum: u64) -> View {
        let (failure_rate, slow_call_rate) = if totals.calls >= minimum && totals.calls > 0 {
            let (f, s) = totals.rates();
            (Some(f), Some(s))
        } else {
            (None, None)
        };
        View { failure_rate, slow_call_rate, buffered: u32::try_from(totals.calls).unwrap_or(u32::MAX) }
    }
}

/// The clock, read at most once per operation and only if needed.
struct LazyNow<'a> {
    clock: &'a dyn Clock,
    base: Instant,
    now: Option<Instant>,
}

impl LazyNow<'_> {
    fn instant(&mut self) -> Instant {
        let clock = self.clock;
        *self.now.get_or_insert_with(|| clock.now())
    }

    /// Nanoseconds since the breaker's base instant.
    fn ns(&mut self) -> u64 {
        nanos_since(self.base, self.instant())
    }

    fn secs(&mut self) -> u64 {
        self.ns() / 1_000_000_000
    }
}

#[inline]
fn nanos_since(base: Instant, now: Instant) -> u64 {
    // u64 arithmetic rather than `as_nanos()`'s u128: this is on the OPEN
    // reject path, whose cost should be the clock reading and little else.
    let d = now.saturating_duration_since(base);
    d.as_secs().saturating_mul(1_000_000_000).saturating_add(u64::from(d.subsec_nanos()))
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Breaker {
    /// A breaker on the system clock. Fails if `config` breaks a rule (see
    /// [`BreakerConfig::validate`]).
    pub fn new(name: impl Into<String>, config: BreakerConfig) -> Result<Breaker, ConfigError> {
        Self::with_clock(name, config, Arc::new(SystemClock))
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
        config.validate()?;
        let env = std::env::var(config::ENABLED_ENV).ok();
        let state = if config::starts_enabled(config.enabled, env.as_deref()) {
            State::Closed
        } else {
            State::Disabled
        };
        let base = clock.now();
        let core = Core {
            state,
            generation: 0,
            window: Window::new(config.window),
            frozen: View::default(),
            open_until: None,
            opens: 0,
            round: Round::default(),
            lifetime: Lifetime::default(),
            pending: VecDeque::new(),
            delivering: false,
        };
        let inner = Inner {
            current: Padded(AtomicU64::new(pack(0, state))),
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            not_permitted: Padded(AtomicU64::new(0)),
            core: Mutex::new(core),
            listeners: Mutex::new(Arc::new(Vec::new())),
            name: Arc::from(name.into()),
            min_calls: u64::from(config.effective_minimum_calls()),
            time_window: matches!(config.window, WindowKind::Time(_)),
            config,
            clock,
            base,
        };
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
    pub fn try_acquire(&self) -> Result<Permit, NotPermitted> {
        let inner = &*self.inner;
        let current = inner.current.0.load(Ordering::Acquire);
        // CLOSED first, as a plain branch: it is the state a healthy breaker lives in.
        if current & STATE_MASK == State::Closed.bits() {
            return Ok(self.permit(current));
        }
        match state_of(current) {
            State::Closed | State::MetricsOnly | State::Disabled => Ok(self.permit(current)),
            State::Open => {
                let now = inner.clock.now();
                match OPEN_UNTIL.get() {
                    (uid, key, Some(until)) if uid == inner.uid && key == current && now < until => {
                        Err(inner.reject(State::Open))
                    }
                    _ => self.acquire_slow(Some(now)),
                }
            }
            State::HalfOpen => self.acquire_slow(None),
            State::ForcedOpen => Err(inner.reject(State::ForcedOpen)),
        }
    }

    #[inline]
    fn permit(&self, issued: u64) -> Permit {
        Permit { inner: Arc::clone(&self.inner), issued, reported: false }
    }

    /// Everything that may change state: OPEN whose period has passed, and
    /// HALF_OPEN. Decided under the lock, on the locked state, whatever the
    /// lock-free read said.
    #[cold]
    fn acquire_slow(&self, now: Option<Instant>) -> Result<Permit, NotPermitted> {
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
                        // Remember this period's end, so that this thread's next
                        // rejects need no lock (see `OPEN_UNTIL`).
                        OPEN_UNTIL.set((inner.uid, pack(core.generation, State::Open), core.open_until));
                        break Err(State::Open);
                    }
                    inner.enter(&mut core, State::HalfOpen, &mut now, View::default());
                }
                State::HalfOpen => {
                    if core.round.deadline_ns != u64::MAX && now.ns() >= core.round.deadline_ns {
                        inner.enter(&mut core, inner.config.after_max_wait, &mut now, View::default());
                        continue;
                    }
                    if core.round.admitted < inner.config.half_open_calls {
                        core.round.admitted += 1;
                        break Ok(pack(core.generation, State::HalfOpen));
                    }
                    break Err(State::HalfOpen);
                }
            }
        };
        let announce = core.must_announce();
        drop(core);
        if announce {
            inner.deliver();
        }
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
            not_permitted: inner.not_permitted.0.load(Ordering::Relaxed),
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
        let announce = core.must_announce();
        drop(core);
        if announce {
            inner.deliver();
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
        let announce = core.must_announce();
        drop(core);
        if announce {
            inner.deliver();
        }
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
        let mut listeners = self.inner.listeners.lock();
        let mut next = Vec::clone(&listeners);
        next.push(Arc::new(listener));
        *listeners = Arc::new(next);
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

impl Core {
    /// Whether the caller, about to release the lock, must announce the
    /// queued transitions (no other thread is already doing it).
    fn must_announce(&self) -> bool {
        !self.pending.is_empty() && !self.delivering
    }
}

impl Inner {
    fn lazy_now(&self, now: Option<Instant>) -> LazyNow<'_> {
        LazyNow { clock: &*self.clock, base: self.base, now }
    }

    #[inline]
    fn reject(&self, state: State) -> NotPermitted {
        self.not_permitted.0.fetch_add(1, Ordering::Relaxed);
        NotPermitted { state }
    }

    /// What `metrics()` shows in the current state.
    fn view(&self, core: &mut Core, now: &mut LazyNow<'_>) -> View {
        match core.state {
            State::Closed | State::MetricsOnly => {
                if self.time_window {
                    core.window.advance(now.secs());
                }
                View::of(core.window.totals(), self.min_calls)
            }
            State::HalfOpen => View::of(core.round.totals, u64::from(self.config.half_open_calls)),
            State::Open => core.frozen,
            State::Disabled | State::ForcedOpen => View::default(),
        }
    }

    /// Changes state under the lock: bumps the generation, prepares the
    /// state entered, publishes the new `current`, and queues the transition
    /// for `deliver`. `cause` holds the rates that caused it, if any.
    fn enter(&self, core: &mut Core, to: State, now: &mut LazyNow<'_>, cause: View) {
        let from = core.state;
        match to {
            State::Open => {
                core.frozen = self.view(core, now);
                let period = self.config.open_duration(core.opens);
                core.opens = core.opens.saturating_add(1);
                core.open_until = now.instant().checked_add(period);
            }
            State::HalfOpen => {
                let wait = self.config.max_wait_in_half_open;
                let deadline_ns =
                    if wait.is_zero() { u64::MAX } else { now.ns().saturating_add(duration_ns(wait)) };
                core.round = Round { deadline_ns, ..Round::default() };
            }
            State::Closed => {
                core.window.clear();
                core.opens = 0;
            }
            State::MetricsOnly => core.window.clear(),
            State::Disabled | State::ForcedOpen => {}
        }
        core.state = to;
        core.generation += 1;
        self.current.0.store(pack(core.generation, to), Ordering::Release);
        if from != to {
            core.pending.push_back(Transition {
                name: Arc::clone(&self.name),
                from,
                to,
                failure_rate: cause.failure_rate,
                slow_call_rate: cause.slow_call_rate,
            });
        }
    }

    /// Takes one permit's report. `issued` is the packed generation and
    /// state the permit was issued in.
    ///
    /// The common case, a CLOSED permit on a count-based window, is handled
    /// here in one short critical section without reading the clock;
    /// everything else goes to `record_general`.
    #[inline]
    fn record(&self, issued: u64, verdict: Verdict, elapsed: Duration) {
        let issued_in = state_of(issued);
        if issued_in == State::Disabled {
            return;
        }
        let outcome =
            Outcome { failed: verdict == Verdict::Failure, slow: elapsed > self.config.slow_call_duration };
        if issued_in != State::Closed || self.time_window {
            return self.record_general(issued, verdict, outcome);
        }
        let mut core = self.core.lock();
        core.lifetime.count(verdict, outcome.slow);
        // Same generation means the same CLOSED window as at issue (every
        // change of state bumps it); otherwise the report is late and counts
        // in the lifetime totals only.
        if core.generation != issued >> 8 || verdict == Verdict::Ignore {
            return;
        }
        core.window.record(outcome, 0);
        if let Some(cause) = self.over_threshold(core.window.totals()) {
            self.trip(core, cause);
        }
    }

    /// Every report but a CLOSED one on a count-based window.
    #[inline(never)]
    fn record_general(&self, issued: u64, verdict: Verdict, outcome: Outcome) {
        let mut now = self.lazy_now(None);
        if self.time_window && verdict != Verdict::Ignore && state_of(issued) != State::HalfOpen {
            // Read before the lock, to keep the clock out of the critical section.
            now.ns();
        }
        let mut core = self.core.lock();
        core.lifetime.count(verdict, outcome.slow);
        // Same generation means the same state as at issue (every change bumps
        // it), so the permit belongs to the current window or round.
        if core.generation == issued >> 8 {
            match core.state {
                State::Closed | State::MetricsOnly => {
                    if verdict != Verdict::Ignore {
                        let sec = if self.time_window { now.secs() } else { 0 };
                        core.window.record(outcome, sec);
                        if core.state == State::Closed
                            && let Some(cause) = self.over_threshold(core.window.totals())
                        {
                            self.enter(&mut core, State::Open, &mut now, cause);
                        }
                    }
                }
                State::HalfOpen => self.record_probe(&mut core, verdict, outcome, &mut now),
                // These never issue permits that report (DISABLED returns early).
                State::Open | State::ForcedOpen | State::Disabled => {
                    debug_assert!(false, "a permit of generation {} in {:?}", issued >> 8, core.state);
                }
            }
        }
        let announce = core.must_announce();
        drop(core);
        if announce {
            self.deliver();
        }
    }

    /// CLOSED: the rates that open the breaker, if the window holds enough
    /// calls and one of them reaches its threshold.
    #[inline]
    fn over_threshold(&self, t: Totals) -> Option<View> {
        // Thresholds are above zero, so a window without failures or slow calls
        // can never open: skip the divisions on the common path.
        if t.calls < self.min_calls || (t.failures == 0 && t.slow == 0) {
            return None;
        }
        let (fr, sr) = t.rates();
        (fr >= self.config.failure_rate || sr >= self.config.slow_call_rate).then_some(View {
            failure_rate: Some(fr),
            slow_call_rate: Some(sr),
            buffered: 0,
        })
    }

    /// CLOSED -> OPEN from the fast path, then the announcement.
    #[cold]
    #[inline(never)]
    fn trip(&self, mut core: MutexGuard<'_, Core>, cause: View) {
        let mut now = self.lazy_now(None);
        self.enter(&mut core, State::Open, &mut now, cause);
        let announce = core.must_announce();
        drop(core);
        if announce {
            self.deliver();
        }
    }

    fn record_probe(&self, core: &mut Core, verdict: Verdict, outcome: Outcome, now: &mut LazyNow<'_>) {
        if core.round.deadline_ns != u64::MAX && now.ns() >= core.round.deadline_ns {
            // The round was given up before this probe reported: it counts in
            // the lifetime totals only, like any late report.
            self.enter(core, self.config.after_max_wait, now, View::default());
            return;
        }
        let round = &mut core.round;
        debug_assert!(round.done < round.admitted && round.admitted <= self.config.half_open_calls);
        if verdict == Verdict::Ignore {
            // Says nothing about the provider: give the slot to another probe.
            round.admitted -= 1;
            return;
        }
        round.done += 1;
        round.totals.record(outcome);
        if round.done < self.config.half_open_calls {
            return;
        }
        let (fr, sr) = round.totals.rates();
        let cause = View { failure_rate: Some(fr), slow_call_rate: Some(sr), buffered: 0 };
        let to = if fr >= self.config.failure_rate || sr >= self.config.slow_call_rate {
            State::Open
        } else {
            State::Closed
        };
        self.enter(core, to, now, cause);
    }

    /// Announces the queued transitions: logs each once and hands it to
    /// every listener, with no lock held.
    ///
    /// Protocol: the thread that finds `delivering` false sets it and becomes
    /// the announcer; it pops one transition at a time under the lock and
    /// calls the listeners outside it, until the queue is empty, then clears
    /// `delivering` in the same critical section that found the queue empty.
    /// A thread that queues a transition meanwhile sees `delivering` and
    /// leaves it to the announcer. Queueing and popping happen under the one
    /// lock, so no transition is lost, none is announced twice, and all are
    /// announced in the order they happened. A listener that changes the
    /// state itself only queues; the loop picks that up next.
    fn deliver(&self) {
        {
            let mut core = self.core.lock();
            if core.delivering || core.pending.is_empty() {
                return;
            }
            core.delivering = true;
        }
        // Clears `delivering` should anything below unwind (a panicking logger),
        // so that later transitions are still announced.
        struct Announcer<'a>(&'a Inner, bool);
        impl Drop for Announcer<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.core.lock().delivering = false;
                }
            }
        }
        let mut announcer = Announcer(self, false);
        loop {
            let next = {
                let mut core = self.core.lock();
                match core.pending.pop_front() {
                    Some(t) => t,
                    None => {
                        core.delivering = false;
                        announcer.1 = true;
                        return;
                    }
                }
            };
            log::info!("{next}");
            let listeners = Arc::clone(&self.listeners.lock());
            for listener in listeners.iter() {
                if catch_unwind(AssertUnwindSafe(|| listener(&next))).is_err() {
                    log::error!("a transition listener of circuit breaker '{}' panicked", self.name);
                }
            }
        }
    }
}

/// Permission to make one call, from [`Breaker::try_acquire`].
///
/// Report the call's outcome with [`record`](Permit::record). A permit dropped
/// without a verdict counts as [`Verdict::Ignore`]: it is neither a success
/// nor a failure and, in HALF_OPEN, gives its probe slot back, so a lost
/// permit can never wedge the breaker.
#[must_use = "a dropped permit counts as an ignored call; call `record` with the outcome"]
pub struct Permit {
    inner: Arc<Inner>,
    /// The packed generation and state this permit was issued in.
    issued: u64,
    reported: bool,
}

impl Permit {
    /// Reports the call's verdict and how long it took. A success or failure
    /// slower than `slow_call_duration` also counts as slow.
    #[inline]
    pub fn record(mut self, verdict: Verdict, elapsed: Duration) {
        self.reported = true;
        self.inner.record(self.issued, verdict, elapsed);
    }

    /// The state the permit was issued in: [`State::HalfOpen`] for a probe.
    pub fn state(&self) -> State {
        state_of(self.issued)
    }
}

impl Drop for Permit {
    #[inline]
    fn drop(&mut self) {
        if !self.reported {
            self.inner.record(self.issued, Verdict::Ignore, Duration::ZERO);
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit").field("breaker", &&*self.inner.name).field("state", &self.state()).finish()
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Breaker>();
    send_sync::<Permit>();
    send_sync::<Transition>();
    send_sync::<NotPermitted>();
    send_sync::<BreakerMetrics>();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn breaker(config: BreakerConfig) -> (Breaker, ManualClock) {
        let clock = ManualClock::new();
        (Breaker::with_clock("t", config, Arc::new(clock.clone())).unwrap(), clock)
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
