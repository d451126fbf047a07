//! The breaker's locked core: the state machine that every acquire, report
//! and manual move goes through (see the module docs of `breaker` for the
//! concurrency and generation rules it keeps).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::config::{BreakerConfig, WindowKind};
use super::state::{State, Transition, pack, state_of};
use super::window::{Sample, Totals, Window};
use crate::classify::Verdict;
use crate::clock::{Clock, SystemClock};
use crate::listeners::Listeners;
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};
use crate::time::saturating_nanos;

/// Keeps what it wraps on a cache line of its own: the read-mostly state
/// word, so that it is not invalidated by every lock and unlock of the
/// mutex, and the rejection counter, written by every rejecting thread.
#[repr(align(128))]
pub(super) struct Padded<T>(pub(super) T);

pub(super) struct Inner {
    /// Lock-free mirror of `(core.generation, core.state)`, see the module docs.
    pub(super) current: Padded<AtomicU64>,
    /// While OPEN: when the open period ends, in nanoseconds since `base`
    /// (`u64::MAX`: never). A mirror of `core.open_until`, written under the
    /// lock before the `Release` store of `current` that enters OPEN, so a
    /// reader that loaded an OPEN `current` with `Acquire` sees this
    /// period's end or a later one's (see the module docs).
    pub(super) open_until_ns: AtomicU64,
    /// Every rejection, in every state: one relaxed counter, on a line of
    /// its own so that rejecting threads, which all write it, do not take
    /// away the line of `open_until_ns` and the other mirrors they read.
    pub(super) rejected: Padded<AtomicU64>,
    pub(super) core: Mutex<Core>,
    pub(super) listeners: Listeners<Transition>,
    pub(super) name: Arc<str>,
    /// Mirrors of `core.config`, read before the lock on the report path:
    /// whether the window is time-based, and the slow-call threshold in
    /// nanoseconds. Written under the lock before `current` is published
    /// (`Release`), so a permit issued after a reconfiguration sees them.
    pub(super) time_window: AtomicBool,
    pub(super) slow_ns: AtomicU64,
    pub(super) clock: Arc<dyn Clock>,
    /// `clock` is the system clock: the OPEN reject path reads
    /// `Instant::now` directly, without the call through `dyn Clock`.
    pub(super) system_clock: bool,
    /// The clock's reading when the breaker was built: the time window's
    /// seconds and the half-open deadline count from it.
    pub(super) base: Instant,
}

/// Everything that changes together, under `Inner::core`.
pub(super) struct Core {
    pub(super) state: State,
    /// Bumped on every change of state; see the module docs.
    pub(super) generation: u64,
    /// The CLOSED / METRICS_ONLY window. Kept (not recorded into) while OPEN
    /// so that `metrics()` can show what opened the breaker; cleared when
    /// CLOSED or METRICS_ONLY is entered.
    pub(super) window: Window,
    /// What `metrics()` shows while OPEN.
    pub(super) frozen: View,
    /// Valid while OPEN: when the open period ends (`None`: beyond what an
    /// `Instant` can hold, i.e. never).
    pub(super) open_until: Option<Instant>,
    /// Consecutive openings since the breaker was last CLOSED: picks the
    /// next open period when `open_backoff` is set.
    pub(super) opens: u32,
    /// Valid while HALF_OPEN.
    pub(super) round: Round,
    pub(super) lifetime: Lifetime,
    /// Transitions not yet announced, in the order they happened.
    pub(super) pending: VecDeque<Transition>,
    /// A thread is announcing `pending`; others just queue. See `deliver`.
    pub(super) delivering: bool,
    /// The configuration, replaced whole by `Breaker::reconfigure`.
    pub(super) config: BreakerConfig,
    /// `config`'s effective minimum number of calls.
    pub(super) min_calls: u64,
}

/// The half-open round.
///
/// Invariant: `done <= admitted <= config.half_open_calls`. `admitted`
/// counts the slots taken in this round (probes in flight plus those that
/// reported a success or failure); an ignored or dropped probe gives its slot
/// back. The round is over when `done == half_open_calls`.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Round {
    pub(super) admitted: u32,
    pub(super) done: u32,
    pub(super) totals: Totals,
    /// Nanoseconds since `base` after which the round is given up
    /// (`u64::MAX`: never).
    pub(super) deadline_ns: u64,
}

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Lifetime {
    pub(super) successful: u64,
    pub(super) failed: u64,
    pub(super) ignored: u64,
    pub(super) slow: u64,
}

impl Lifetime {
    /// Every report counts here, late ones included; a slow call only when
    /// it was a success or a failure.
    #[inline]
    pub(super) fn count(&mut self, verdict: Verdict, slow: bool) {
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
pub(super) struct View {
    pub(super) failure_rate: Option<f64>,
    pub(super) slow_call_rate: Option<f64>,
    pub(super) buffered: u32,
}

impl View {
    pub(super) fn of(totals: Totals, minimum: u64) -> View {
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
pub(super) struct LazyNow<'a> {
    pub(super) clock: &'a dyn Clock,
    pub(super) base: Instant,
    pub(super) now: Option<Instant>,
}

impl LazyNow<'_> {
    pub(super) fn instant(&mut self) -> Instant {
        let clock = self.clock;
        *self.now.get_or_insert_with(|| clock.now())
    }

    /// Nanoseconds since the breaker's base instant.
    pub(super) fn ns(&mut self) -> u64 {
        nanos_since(self.base, self.instant())
    }

    pub(super) fn secs(&mut self) -> u64 {
        self.ns() / 1_000_000_000
    }
}

/// Nanoseconds from `base` to `now` (0 if `now` is earlier).
#[inline]
pub(super) fn nanos_since(base: Instant, now: Instant) -> u64 {
    saturating_nanos(now.saturating_duration_since(base))
}

impl Core {
    /// Whether the caller, about to release the lock, must announce the
    /// queued transitions (no other thread is already doing it).
    pub(super) fn must_announce(&self) -> bool {
        !self.pending.is_empty() && !self.delivering
    }
}

impl Inner {
    /// A breaker's state; `clock: None` is the system clock.
    pub(super) fn new(
        name: String,
        config: BreakerConfig,
        clock: Option<Arc<dyn Clock>>,
        state: State,
    ) -> Inner {
        let system_clock = clock.is_none();
        let clock = clock.unwrap_or_else(|| Arc::new(SystemClock));
        let base = clock.now();
        let time_window = AtomicBool::new(matches!(config.window, WindowKind::Time(_)));
        let slow_ns = AtomicU64::new(saturating_nanos(config.slow_call_duration));
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
            min_calls: u64::from(config.effective_minimum_calls()),
            config,
        };
        Inner {
            current: Padded(AtomicU64::new(pack(0, state))),
            open_until_ns: AtomicU64::new(u64::MAX),
            rejected: Padded(AtomicU64::new(0)),
            core: Mutex::new(core),
            listeners: Listeners::new(),
            name: Arc::from(name),
            time_window,
            slow_ns,
            clock,
            system_clock,
            base,
        }
    }

    /// Under the lock: the new configuration, as [`Breaker::reconfigure`]
    /// describes. Every path bumps the generation (directly or through
    /// `enter`), so permits issued under the old configuration can no longer
    /// land in a window or round shaped by the new one.
    pub(super) fn reconfigure(&self, core: &mut Core, config: BreakerConfig, now: &mut LazyNow<'_>) {
        let window_changed = core.config.window != config.window;
        let was_enabled = core.config.enabled;
        let enabled = config.enabled;
        core.min_calls = u64::from(config.effective_minimum_calls());
        self.time_window.store(matches!(config.window, WindowKind::Time(_)), Ordering::Release);
        self.slow_ns.store(saturating_nanos(config.slow_call_duration), Ordering::Release);
        if window_changed {
            core.window = Window::new(config.window);
        }
        core.config = config;
        match core.state {
            _ if was_enabled && !enabled && core.state != State::Disabled => {
                self.enter(core, State::Disabled, now, View::default());
            }
            State::Disabled if !was_enabled && enabled => {
                self.enter(core, State::Closed, now, View::default())
            }
            // A fresh round under the new probe count (entering the state it is in
            // queues no transition).
            State::HalfOpen => self.enter(core, State::HalfOpen, now, View::default()),
            state => {
                core.generation += 1;
                self.current.0.store(pack(core.generation, state), Ordering::Release);
            }
        }
    }

    #[inline]
    pub(super) fn is_time_window(&self) -> bool {
        self.time_window.load(Ordering::Acquire)
    }

    pub(super) fn lazy_now(&self, now: Option<Instant>) -> LazyNow<'_> {
        LazyNow { clock: &*self.clock, base: self.base, now }
    }

    #[inline]
    pub(super) fn reject(&self, state: State) -> State {
        self.rejected.0.fetch_add(1, Ordering::Relaxed);
        state
    }

    /// What `metrics()` shows in the current state.
    pub(super) fn view(&self, core: &mut Core, now: &mut LazyNow<'_>) -> View {
        match core.state {
            State::Closed | State::MetricsOnly => {
                if self.is_time_window() {
                    core.window.advance(now.secs());
                }
                View::of(core.window.totals(), core.min_calls)
            }
            State::HalfOpen => View::of(core.round.totals, u64::from(core.config.half_open_calls)),
            State::Open => core.frozen,
            State::Disabled | State::ForcedOpen => View::default(),
        }
    }

    /// Changes state under the lock: bumps the generation, prepares the
    /// state entered, publishes the new `current`, and queues the transition
    /// for `deliver`. `cause` holds the rates that caused it, if any.
    pub(super) fn enter(&self, core: &mut Core, to: State, now: &mut LazyNow<'_>, cause: View) {
        let from = core.state;
        match to {
            State::Open => {
                core.frozen = self.view(core, now);
                let period = core.config.open_duration(core.opens);
                core.opens = core.opens.saturating_add(1);
                core.open_until = now.instant().checked_add(period);
                let until_ns = core.open_until.map_or(u64::MAX, |until| nanos_since(self.base, until));
                self.open_until_ns.store(until_ns, Ordering::Relaxed);
            }
            State::HalfOpen => {
                let wait = core.config.max_wait_in_half_open;
                let deadline_ns =
                    if wait.is_zero() { u64::MAX } else { now.ns().saturating_add(saturating_nanos(wait)) };
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
    pub(super) fn record(&self, issued: u64, verdict: Verdict, elapsed: Duration) {
        let slow = saturating_nanos(elapsed) > self.slow_ns.load(Ordering::Relaxed);
        let issued_in = state_of(issued);
        if issued_in == State::Disabled {
            return;
        }
        let outcome = Sample { failed: verdict == Verdict::Failure, slow };
        if issued_in != State::Closed || self.is_time_window() {
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
        if let Some(cause) = Self::over_threshold(&core, core.window.totals()) {
            self.trip(core, cause);
        }
    }

    /// Every report but a CLOSED one on a count-based window.
    #[inline(never)]
    pub(super) fn record_general(&self, issued: u64, verdict: Verdict, outcome: Sample) {
        let mut now = self.lazy_now(None);
        if self.is_time_window() && verdict != Verdict::Ignore && state_of(issued) != State::HalfOpen {
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
                        let sec = if self.is_time_window() { now.secs() } else { 0 };
                        core.window.record(outcome, sec);
                        if core.state == State::Closed
                            && let Some(cause) = Self::over_threshold(&core, core.window.totals())
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
        self.release(core);
    }

    /// CLOSED: the rates that open the breaker, if the window holds enough
    /// calls and one of them reaches its threshold.
    #[inline]
    pub(super) fn over_threshold(core: &Core, t: Totals) -> Option<View> {
        // Thresholds are above zero, so a window without failures or slow calls
        // can never open: skip the divisions on the common path.
        if t.calls < core.min_calls || (t.failures == 0 && t.slow == 0) {
            return None;
        }
        let (fr, sr) = t.rates();
        (fr >= core.config.failure_rate || sr >= core.config.slow_call_rate).then_some(View {
            failure_rate: Some(fr),
            slow_call_rate: Some(sr),
            buffered: 0,
        })
    }

    /// CLOSED -> OPEN from the fast path, then the announcement.
    #[cold]
    #[inline(never)]
    pub(super) fn trip(&self, mut core: MutexGuard<'_, Core>, cause: View) {
        let mut now = self.lazy_now(None);
        self.enter(&mut core, State::Open, &mut now, cause);
        self.release(core);
    }

    pub(super) fn record_probe(
        &self,
        core: &mut Core,
        verdict: Verdict,
        outcome: Sample,
        now: &mut LazyNow<'_>,
    ) {
        if core.round.deadline_ns != u64::MAX && now.ns() >= core.round.deadline_ns {
            // The round was given up before this probe reported: it counts in
            // the lifetime totals only, like any late report.
            self.enter(core, core.config.after_max_wait, now, View::default());
            return;
        }
        let round = &mut core.round;
        debug_assert!(round.done < round.admitted && round.admitted <= core.config.half_open_calls);
        if verdict == Verdict::Ignore {
            // Says nothing about the provider: give the slot to another probe.
            round.admitted -= 1;
            return;
        }
        round.done += 1;
        round.totals.record(outcome);
        if round.done < core.config.half_open_calls {
            return;
        }
        let (fr, sr) = round.totals.rates();
        let cause = View { failure_rate: Some(fr), slow_call_rate: Some(sr), buffered: 0 };
        let open = fr >= core.config.failure_rate || sr >= core.config.slow_call_rate;
        let to = if open { State::Open } else { State::Closed };
        self.enter(core, to, now, cause);
    }
}
