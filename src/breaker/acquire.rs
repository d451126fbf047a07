//! Asking for a permit: the lock-free answers of CLOSED (and METRICS_ONLY,
//! DISABLED) and of an OPEN period still running, and the locked decision
//! for everything that may change state (see the module docs of `breaker`);
//! then the permits themselves, which report each call's outcome.

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::machine::{Inner, View, nanos_since};
use super::state::{STATE_MASK, pack, state_of};
use super::{Breaker, State};
use crate::classify::Verdict;
use crate::sync::Ordering;

impl Breaker {
    /// Asks to make one call.
    ///
    /// CLOSED, METRICS_ONLY and DISABLED always permit, without reading the
    /// clock or taking a lock; the rest as the state diagram in the module
    /// docs says.
    ///
    /// The permit must be given the call's outcome with [`Permit::record`];
    /// dropping it counts the call as ignored. A refusal says the state that
    /// refused: [`State::Open`], [`State::ForcedOpen`], or [`State::HalfOpen`]
    /// with every probe slot taken (a call's
    /// [`Rejection::NotPermitted`](crate::Rejection::NotPermitted)).
    #[inline]
    pub fn try_acquire(&self) -> Result<Permit<'_>, State> {
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
    fn acquire_not_closed(&self, current: u64) -> Result<Permit<'_>, State> {
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
    pub fn try_acquire_owned(&self) -> Result<OwnedPermit, State> {
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
    fn acquire_open(&self, now: Instant) -> Result<Permit<'_>, State> {
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
    fn acquire_slow(&self, now: Option<Instant>) -> Result<Permit<'_>, State> {
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
        answer.map(|issued| self.permit(issued)).map_err(|state| inner.reject(state))
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
}

// [`Permit`] and [`OwnedPermit`]: permission to make one call, and the report
// of its outcome.

/// Permission to make one call, from [`Breaker::try_acquire`](crate::breaker::Breaker::try_acquire).
/// It borrows its breaker, so taking one costs no reference count; to hand a
/// permit to a thread that may outlive the breaker's borrow, take an
/// [`OwnedPermit`] instead.
///
/// Report the call's outcome with [`record`](Permit::record). A permit dropped
/// without a verdict counts as [`Verdict::Ignore`]: it is neither a success
/// nor a failure and, in HALF_OPEN, gives its probe slot back, so a lost
/// permit can never wedge the breaker.
#[must_use = "a dropped permit counts as an ignored call; call `record` with the outcome"]
pub struct Permit<'b> {
    pub(super) breaker: &'b Inner,
    pub(super) issued: u64,
}

/// A [`Permit`] that holds its breaker by reference count, from
/// [`Breaker::try_acquire_owned`](crate::breaker::Breaker::try_acquire_owned): it is
/// `'static`, so it can move to any thread, and it keeps the breaker alive.
/// The same rules apply as to a [`Permit`].
#[must_use = "a dropped permit counts as an ignored call; call `record` with the outcome"]
pub struct OwnedPermit {
    pub(super) breaker: Arc<Inner>,
    pub(super) issued: u64,
    /// Set by `record`, so that `Drop` does not report the call again.
    pub(super) reported: bool,
}

// A `Permit` is two words, with no flag for "reported": `record` consumes it
// without running its `Drop` (`ManuallyDrop`, which leaks nothing, since a
// reference needs no drop). So `Result<Permit, State>` is two words
// too (the reference's null niche tells `Err`), and `try_acquire` returns it
// in two registers rather than through memory.

impl Drop for Permit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.breaker.record(self.issued, Verdict::Ignore, Duration::ZERO);
    }
}

impl Drop for OwnedPermit {
    #[inline]
    fn drop(&mut self) {
        if !self.reported {
            self.breaker.record(self.issued, Verdict::Ignore, Duration::ZERO);
        }
    }
}

impl<'b> Permit<'b> {
    /// Reports the call's verdict and how long it took. A success or failure
    /// slower than `slow_call_duration` also counts as slow.
    #[inline]
    pub fn record(self, verdict: Verdict, elapsed: Duration) {
        let (breaker, issued) = self.disarm();
        breaker.record(issued, verdict, elapsed);
    }

    /// The state the permit was issued in: [`State::HalfOpen`] for a probe.
    pub fn state(&self) -> State {
        state_of(self.issued)
    }

    /// The breaker and the issued word, with the permit's report left to
    /// the caller.
    #[inline]
    pub(super) fn disarm(self) -> (&'b Inner, u64) {
        let this = ManuallyDrop::new(self);
        (this.breaker, this.issued)
    }
}

impl OwnedPermit {
    /// Lets the permit go without recording anything, not even an ignored
    /// call: for a permit taken for a call that was then never made (a hedge
    /// with no worker to run it). Only for a permit issued in CLOSED, which
    /// holds no half-open probe slot to hand back.
    pub(crate) fn forget(mut self) {
        debug_assert_eq!(state_of(self.issued), State::Closed);
        self.reported = true;
    }

    /// Reports the call's verdict and how long it took, as [`Permit::record`].
    #[inline]
    pub fn record(mut self, verdict: Verdict, elapsed: Duration) {
        self.reported = true;
        self.breaker.record(self.issued, verdict, elapsed);
    }

    /// The state the permit was issued in: [`State::HalfOpen`] for a probe.
    pub fn state(&self) -> State {
        state_of(self.issued)
    }
}

/// Both permits show the same: their breaker's name and the state they were
/// issued in.
fn debug(kind: &str, breaker: &Inner, issued: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.debug_struct(kind).field("breaker", &&*breaker.name).field("state", &state_of(issued)).finish()
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug("Permit", self.breaker, self.issued, f)
    }
}

impl fmt::Debug for OwnedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug("OwnedPermit", &self.breaker, self.issued, f)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::breaker::BreakerConfig;
    use crate::breaker::tests::breaker;
    use crate::classify::Verdict;
    use crate::clock::Clock;

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
        // So it comes back in registers, not through memory (see `Permit`).
        assert_eq!(std::mem::size_of::<Result<Permit<'_>, State>>(), 2 * std::mem::size_of::<usize>());
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
}
