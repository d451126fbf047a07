//! One attempt: admitted by [`Inner::admit`], launched by its driver,
//! settled by [`Attempt::settle`].
//!
//! Every kind of call (once, retried, hedged, detached, on the caller's
//! thread) is made of attempts, and every attempt goes through these
//! functions and no others:
//!
//! - **Admission**, in one fixed order: the deadline, the throttler, the
//!   rate limit, the breaker, the adaptive limit, the priority place. It
//!   returns the admitted [`Attempt`], which its driver launches (submits to
//!   the pool, or runs on the caller's thread); a launch that fails goes to
//!   [`Attempt::not_launched`]. An attempt that no thread waits on where it
//!   was launched (a hedge's leg, a detached call) travels as an
//!   [`SharedAttempt`], which its job and its launcher share. A refusal at any step is counted, logged (in
//!   aggregate, `quiet_log.rs`) and announced there, once; what the attempt
//!   had taken is given back by the [`Attempt`]'s `Drop`. A policy in shadow
//!   (`shadow.rs`) refuses nothing: its refusal goes through
//!   [`Inner::refused_by`], the one place that records it and lets the
//!   attempt on, unseen by that policy. A wait the attempt's deadline ends
//!   is no refusal ([a deadline is a timeout](crate::pool#waiting-for-room-by-time)).
//! - **Settlement**, exactly once: classification under `catch_unwind`, the
//!   late-answer rule (an answer after the deadline is a timeout), the
//!   job's own timeout at the deadline (the same event as the caller's), the
//!   cut-short rule, then the call-time sample, the outcome, the throttler, the breaker,
//!   the limit and the announcement. An attempt dropped unsettled never ran:
//!   its permits drop unrecorded (as ignored).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::priority::Place;
use super::{Counters, Event, Inner};
use crate::breaker::OwnedPermit;
use crate::classify::Verdict;
use crate::error::{Error, Outcome, Rejection, panic_message};
use crate::limit::LimitPermit;
use crate::pool::{Answer, CallContext, SubmitError};
use crate::priority::Priority;
use crate::shadow::{Policy, Shadow};

/// An attempt's deadline, and whose it is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline {
    pub(super) at: Instant,
    /// `true` when the caller's deadline (or a retry's overall timeout) comes
    /// before the dependency's own timeout: a timeout then counts against the
    /// provider only if it had the call for long enough (`cut_short`).
    pub(super) callers: bool,
}

impl Deadline {
    /// The earlier of `now + timeout` and the caller's deadline.
    /// (The builder caps the timeout at one day, so `now + timeout` fits.)
    pub(super) fn new(now: Instant, timeout: Duration, caller: Option<Instant>) -> Deadline {
        let own = now + timeout;
        match caller {
            Some(caller) if caller < own => Deadline { at: caller, callers: true },
            _ => Deadline { at: own, callers: false },
        }
    }
}

/// The kind of call an attempt belongs to: what its admission may wait for,
/// and whom a refusal concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Form {
    /// A caller waits for the answer: it may wait for a rate permit (within
    /// its deadline) and for room.
    Blocking,
    /// Nobody waits: a rate limit with no permit free now refuses it.
    Detached,
    /// An extra attempt of a hedged call: only while the breaker is CLOSED,
    /// with no wait for anything. A hedge that cannot start simply does not:
    /// its refusal is no event, and what it took goes back unrecorded.
    Hedge,
}

/// What one attempt asks to be admitted with.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ask {
    /// Real time, just read.
    pub(super) now: Instant,
    pub(super) deadline: Deadline,
    /// 1-based, shown to the job by `CallContext::attempt`.
    pub(super) number: u32,
    pub(super) priority: Priority,
    pub(super) form: Form,
}

/// Why an attempt was not admitted: refused, or its deadline came while it
/// waited (for a rate permit, for room, for a caller-thread permit).
#[derive(Debug, Clone, Copy)]
pub(super) struct Refusal {
    pub(super) rejection: Rejection,
    /// For the rate limit: when a permit would be free.
    retry_after: Option<Duration>,
    /// The attempt's deadline ended its wait, after this long: a timeout,
    /// not a refusal (`rejection` is then only what the pool said).
    timed_out: Option<Duration>,
}

impl Refusal {
    pub(super) fn into_error<E>(self) -> Error<E> {
        match self.timed_out {
            Some(waited) => Error::Timeout { waited },
            None => Error::Rejected { reason: self.rejection, retry_after: self.retry_after },
        }
    }
}

/// Why a launch failed ([`Attempt::not_launched`]): the pool refused the
/// job, or the caller-thread permits did, and whether it was refused for
/// lack of room while every worker was stuck in its job.
pub(super) struct Unlaunched(Rejection, bool);

impl<F> From<SubmitError<F>> for Unlaunched {
    fn from(refused: SubmitError<F>) -> Self {
        Unlaunched(refused.rejection(), refused.stuck)
    }
}

impl From<Rejection> for Unlaunched {
    fn from(rejection: Rejection) -> Self {
        Unlaunched(rejection, false)
    }
}

/// An admitted attempt and what it holds until it is settled: the breaker
/// permit, the limit permit, the priority place, the deadline and its start.
#[must_use = "an attempt is settled with `settle`; dropped, it never ran"]
pub(super) struct Attempt {
    /// `None` when the breaker, in shadow, would have refused the attempt:
    /// then it records nothing of it, as of a refused call.
    permit: Option<OwnedPermit>,
    limit: Option<LimitPermit>,
    /// Moved into the job by [`carry`](Self::carry), so that it is given back
    /// once the job returns on its worker (or is dropped unrun).
    place: Option<Place>,
    pub(super) deadline: Deadline,
    /// Real time at admission: where the caller's wait starts.
    pub(super) called: Instant,
    /// The injected clock's time at admission, for the breaker's elapsed time.
    start: Instant,
    pub(super) number: u32,
    /// The policies that would have refused it and, in shadow, let it
    /// through: none of them records it.
    shadowed: Shadow,
    form: Form,
    /// Whether it took a rate permit (a hedge that cannot start gives it back).
    rate: bool,
}

/// An attempt in flight on a worker, nobody waiting on the thread that
/// launched it (a hedge's leg, a detached call): shared by its job, which
/// settles it when it returns, and by its launching side, which settles it
/// when the job does not return in time or never runs, or takes it back
/// when the pool refuses the job. Whoever
/// [`take`](Self::take)s it settles it; the other finds it gone, so it is
/// settled exactly once. Dropped by both still inside, it never ran (an
/// [`Attempt`] dropped unsettled).
#[derive(Clone)]
pub(super) struct SharedAttempt(Arc<Mutex<Option<Attempt>>>);

impl SharedAttempt {
    pub(super) fn new(attempt: Attempt) -> Self {
        SharedAttempt(Arc::new(Mutex::new(Some(attempt))))
    }

    /// The attempt, to settle, unless the other side has taken it.
    pub(super) fn take(&self) -> Option<Attempt> {
        self.0.lock().take()
    }
}

/// What a settlement answers: the caller's answer, and the verdict recorded
/// (`None`: nothing was; the job never ran, or its leg was settled already).
pub(crate) type Judged<T, E> = (Result<T, Error<E>>, Option<Verdict>);

/// How an attempt ended.
pub(super) enum End<T, E> {
    /// The job returned this (after its deadline, it is a timeout).
    Returned(Result<T, E>),
    /// The job returned this, and the pool handed it over before the
    /// deadline (however late the caller's thread woke to read it).
    InTime(Result<T, E>),
    /// The job panicked, with this message.
    Panicked(String),
    /// No answer by the deadline: still queued, or still running.
    TimedOut,
    /// It never ran, and not for its deadline: shutdown discarded it.
    Discarded,
}

impl<T, E> From<Answer<T, E>> for End<T, E> {
    /// The pool's answer as the attempt's end: the one place its terms are
    /// translated. A job the pool ran answered before the deadline, however
    /// late the caller's thread woke to read it; shutdown's discard is not
    /// the provider's doing.
    fn from(answer: Answer<T, E>) -> Self {
        match answer {
            Answer::Ran(returned) => End::InTime(returned),
            Answer::Panicked(msg) => End::Panicked(msg),
            Answer::TimedOut => End::TimedOut,
            Answer::Discarded => End::Discarded,
        }
    }
}

/// How close to its deadline a failed answer may come and still be the
/// deadline's doing: a job's own timeout set to the deadline (ureq's, by
/// `with_deadline`) fires at it, give or take the rounding of its timer.
const AT_DEADLINE: Duration = Duration::from_millis(2);

impl Inner {
    /// The one admission (see the module docs): the admitted attempt, which
    /// the caller then launches (submits its job to the pool, or runs it
    /// here) and settles, or hands to [`Attempt::not_launched`]
    /// if the launch fails.
    pub(super) fn admit(&self, ask: Ask) -> Result<Attempt, Refusal> {
        let hedge = ask.form == Form::Hedge;
        let at = ask.deadline.at;
        if ask.form != Form::Blocking && self.exec.pool().is_none() {
            // Caller-thread mode has no worker to run a job nobody waits for.
            log::warn!("dependency {}: a detached call needs a pool; this one runs on callers", self.name);
            return Err(self.refuse(ask.form, Rejection::QueueFull, None));
        }
        // A deadline already past is refused before the breaker: it must not
        // take a half-open probe slot for a call that cannot be made.
        if at <= ask.now {
            return Err(self.refuse(ask.form, Rejection::DeadlineUnmeetable, None));
        }
        // Every refusal below goes through `refused_by`: enforced, the
        // attempt is refused; in shadow, it is recorded and goes on, and the
        // policy that let it through records nothing of it (`shadowed`).
        // The policies in shadow, and those that have let this one through.
        let mut shadows = (self.live.shadow.get(), Shadow::none());
        // The adaptive throttler, before anything is taken: a call it refuses
        // was never a request to the provider (`limit/throttle.rs`).
        if self.throttle.is_on() && self.throttle.refuses_at(self.clock_now(ask.now), ask.priority) {
            self.refused_by(Policy::Throttle, &mut shadows, ask.form, Rejection::Throttled, None)?;
        }
        // The rate limit, before the breaker: a caller waiting for its permit
        // holds no probe slot. Only a blocking call waits, and only within its
        // deadline; in shadow nobody waits (the permit is taken all the same,
        // so that the limit's next decisions are its enforced ones).
        let mut rate = false;
        let mut now = ask.now;
        if self.live.rate_on() {
            let within = if ask.form == Form::Blocking { at - now } else { Duration::ZERO };
            match self.rate.reserve(within) {
                Ok(wait) if wait.is_zero() || shadows.0.contains(Policy::RateLimit) => rate = true,
                Ok(wait) => {
                    rate = true;
                    std::thread::sleep(wait);
                    now = Instant::now();
                    // Overslept past the deadline: the caller's time ran out
                    // while it waited, a timeout (no permit of the breaker's
                    // has been taken yet).
                    if at <= now {
                        return Err(self.time_out(now.saturating_duration_since(ask.now)));
                    }
                }
                Err(retry_after) => {
                    self.refused_by(
                        Policy::RateLimit,
                        &mut shadows,
                        ask.form,
                        Rejection::RateLimited,
                        Some(retry_after),
                    )?;
                }
            }
        }
        // From here on, a hedge refused never was: its rate permit goes back,
        // its breaker permit is forgotten (not even recorded as ignored).
        let undo = |permit: &mut Option<OwnedPermit>| {
            if hedge {
                if let Some(permit) = permit.take() {
                    permit.forget();
                }
                if rate {
                    self.rate.give_back();
                }
            }
        };
        let start = self.clock_now(now);
        let mut permit = match hedge {
            true => self.breaker.try_acquire_owned_if_closed(),
            false => self.breaker.try_acquire_owned().ok(),
        };
        if permit.is_none() {
            self.refused_by(Policy::Breaker, &mut shadows, ask.form, Rejection::NotPermitted, None)
                .inspect_err(|_| undo(&mut None))?;
        }
        // Over the adaptive limit: the permit drops as ignored (a half-open
        // probe slot goes back): the provider was never asked.
        let limit = match self.live.limit_on().then(|| self.limiter.try_acquire(start)) {
            Some(None) => {
                self.refused_by(
                    Policy::AdaptiveLimit,
                    &mut shadows,
                    ask.form,
                    Rejection::LimitExceeded,
                    None,
                )
                .inspect_err(|_| undo(&mut permit))?;
                None
            }
            Some(granted) => granted,
            None => None,
        };
        // Priority admission, in one step (`priority.rs`); pool mode only.
        let place = match self.exec.pool() {
            Some(pool) => {
                let place = self.occupancy.take(
                    ask.priority,
                    pool.workers(),
                    pool.queue_capacity(),
                    self.live.reserved(),
                );
                if place.is_none() {
                    self.refused_by(Policy::Priority, &mut shadows, ask.form, Rejection::Shed, None)
                        .inspect_err(|_| undo(&mut permit))?;
                }
                place
            }
            None => None,
        };
        Ok(Attempt {
            permit,
            limit,
            place,
            deadline: ask.deadline,
            called: now,
            start,
            number: ask.number,
            shadowed: shadows.1,
            form: ask.form,
            rate,
        })
    }

    /// A blocking attempt whose deadline ended its wait (for a rate permit,
    /// for room, for a caller-thread permit): counted `timed_out` and
    /// announced as a timeout, and recorded by nobody: the provider was
    /// never asked, and the dependency did not refuse.
    fn time_out(&self, waited: Duration) -> Refusal {
        self.counters.outcome(Outcome::TimedOut);
        self.announce_timeout(waited);
        Refusal { rejection: Rejection::DeadlineUnmeetable, retry_after: None, timed_out: Some(waited) }
    }

    /// A call found no room while every worker was stuck in its call. Neither
    /// the breaker nor the limit learns anything from a refusal, but a stuck pool
    /// says the provider hangs: a CLOSED breaker opens, and a HALF_OPEN one
    /// (a probe that found no room) goes back to OPEN, for a round of probes
    /// that cannot start would never end. When at least half of the workers
    /// are still inside calls well past their deadline (a grace for a job's
    /// own timeout firing a moment late), the job is not ending at its
    /// deadline: that is warned of once per episode (`Pool::abandoned_alarm`).
    fn stuck(&self) {
        let over = self.stuck_threshold();
        match self.breaker.open_when_stuck() {
            Some(crate::breaker::State::HalfOpen) => log::warn!(
                "dependency {}: a probe found no room, every worker inside one call for over {over:?}; \
                 breaker back to open",
                self.name
            ),
            Some(_) => log::warn!(
                "dependency {}: every worker has been inside one call for over {over:?}; breaker opened",
                self.name
            ),
            None => {}
        }
        if let Some((abandoned, workers)) = self.exec.pool().and_then(|p| p.abandoned_alarm(Instant::now())) {
            log::warn!(
                "dependency {}: {abandoned} of {workers} workers are abandoned: stuck for over {over:?} in \
                 calls past their deadline; the job does not end at its deadline (hand \
                 `ctx.remaining()` to its I/O, as `with_deadline` does for ureq)",
                self.name
            );
        }
    }

    /// The one place where shadow mode is decided: `policy` would refuse
    /// this attempt with `rejection`. Enforced, the attempt is refused
    /// ([`refuse`](Self::refuse)). In `shadow`, the refusal it would have
    /// been is counted, logged at `debug` in aggregate, traced and announced (a hedge's,
    /// like its refusal, is not), and the attempt goes on, `policy` added to
    /// the attempt's `shadowed`.
    #[inline]
    fn refused_by(
        &self,
        policy: Policy,
        (shadow, shadowed): &mut (Shadow, Shadow),
        form: Form,
        rejection: Rejection,
        retry_after: Option<Duration>,
    ) -> Result<(), Refusal> {
        if !shadow.contains(policy) {
            return Err(self.refuse(form, rejection, retry_after));
        }
        if form != Form::Hedge {
            self.shadow_refused(policy, rejection);
        }
        *shadowed = shadowed.with(policy);
        Ok(())
    }

    #[cold]
    fn shadow_refused(&self, policy: Policy, rejection: Rejection) {
        self.shadow_counts.add(policy);
        self.log.shadow_refused(&self.name, policy, rejection);
        crate::trace::shadow_refused(&self.name, policy, rejection);
        if !self.listeners.is_empty() {
            let event = Event::ShadowRefused { dependency: Arc::clone(&self.name), policy, rejection };
            self.listeners.notify(&event, &self.name);
        }
    }

    /// Counts, logs and announces a refusal, unless it is a hedge's.
    pub(super) fn refuse(&self, form: Form, rejection: Rejection, retry_after: Option<Duration>) -> Refusal {
        if form != Form::Hedge {
            self.counters.outcome(rejection.outcome());
            self.log.refused(&self.name, rejection);
            crate::trace::rejected(&self.name, rejection);
            if !self.listeners.is_empty() {
                let event = Event::Rejected { dependency: Arc::clone(&self.name), rejection };
                self.listeners.notify(&event, &self.name);
            }
        }
        Refusal { rejection, retry_after, timed_out: None }
    }

    /// The provider's normal latency, once it has answered successfully.
    pub(super) fn normal_latency(&self) -> Option<Duration> {
        self.normal.normal()
    }

    /// See `config.rs`.
    fn hang_threshold(&self) -> Duration {
        super::config::hang_threshold(self.normal.normal(), self.live.slow_call_duration())
    }

    /// See `config.rs`.
    pub(super) fn stuck_threshold(&self) -> Duration {
        super::config::stuck_threshold(
            self.normal.normal(),
            self.live.slow_call_duration(),
            self.live.timeout(),
        )
    }

    /// The verdict on a timeout: a failure at the dependency's own timeout;
    /// at the caller's deadline, a failure only once the provider had had
    /// the call (`had`; `None`: it never started) for longer than the hang
    /// threshold. A provider that answers in 20 ms and says nothing in
    /// 300 ms is hung, whoever stopped waiting; a shorter run says only that
    /// the caller was in a hurry: ignored.
    fn timeout_verdict(&self, deadline: Deadline, had: Option<Duration>) -> Verdict {
        match had {
            _ if !deadline.callers => Verdict::Failure,
            Some(had) if had > self.hang_threshold() => Verdict::Failure,
            _ => Verdict::Ignore,
        }
    }

    /// Tells the trace and the listeners of a timeout, once it is counted and
    /// recorded (so that a slow or panicking listener cannot change what the
    /// breaker saw).
    fn announce_timeout(&self, waited: Duration) {
        self.log.timed_out(&self.name, waited);
        crate::trace::timed_out(&self.name, waited);
        if !self.listeners.is_empty() {
            let event = Event::TimedOut { dependency: Arc::clone(&self.name), waited };
            self.listeners.notify(&event, &self.name);
        }
    }
}

impl Attempt {
    /// Moves the attempt's priority place into `job`, so that the place is
    /// given back once the job returns (on its worker, the caller gone or
    /// not) or is dropped unrun.
    pub(super) fn carry<T, E>(
        &mut self,
        job: impl FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    ) -> impl FnOnce(&CallContext) -> Result<T, E> + Send + 'static {
        let place = self.place.take();
        move |ctx| {
            let _place = place;
            job(ctx)
        }
    }

    /// An admitted attempt whose launch failed: `refused` by the pool or
    /// the caller-thread permits. What it took goes back unrecorded (a
    /// hedge's is forgotten, rate permit included: it never was), a stuck
    /// pool opens the breaker, and the failure is counted once: as the
    /// caller's timeout when a blocking attempt is refused room at or past
    /// its deadline (the pool's `max_wait` wait and the permits' wait both
    /// end at the earlier of `max_wait` and the deadline, and say only "no
    /// room"; its breaker permit is then let go unrecorded, or in HALF_OPEN
    /// dropped, so that its probe slot goes back), else as the dependency's
    /// refusal.
    pub(super) fn not_launched(self, inner: &Inner, refused: impl Into<Unlaunched>) -> Refusal {
        let Unlaunched(rejection, stuck) = refused.into();
        let Attempt { permit, limit, place, form, rate, called, deadline, .. } = self;
        drop((limit, place));
        let now = Instant::now();
        let waiting = matches!(rejection, Rejection::QueueFull | Rejection::DeadlineUnmeetable);
        let timed_out = form == Form::Blocking && waiting && now >= deadline.at;
        let closed = |p: &OwnedPermit| p.state() == crate::breaker::State::Closed;
        let forget = form == Form::Hedge || (timed_out && permit.as_ref().is_some_and(closed));
        // Let go of (unrecorded, or forgotten) before the stuck rule acts.
        if let Some(permit) = permit.filter(|_| forget) {
            permit.forget();
        }
        if form == Form::Hedge && rate {
            inner.rate.give_back();
        }
        if stuck {
            inner.stuck();
        }
        match timed_out {
            true => inner.time_out(now.saturating_duration_since(called)),
            false => inner.refuse(form, rejection, None),
        }
    }

    /// The one settlement (see the module docs): judges how the attempt
    /// ended, records it, and returns the caller's answer with the verdict
    /// recorded (`None`: nothing was, the job never ran). `began`: when the
    /// job started, if it did; `ended`: when it returned or was given up.
    /// `inner` is `None` once the dependency is gone (a detached call or a
    /// losing hedge finishing late): only the breaker is told then.
    pub(super) fn settle<T, E, C>(
        self,
        inner: Option<&Inner>,
        end: End<T, E>,
        began: Option<Instant>,
        ended: Instant,
        classify: &C,
    ) -> Judged<T, E>
    where
        C: Fn(&Result<T, E>) -> Verdict + ?Sized,
    {
        let Attempt { permit, limit, place, deadline, called, start, shadowed, .. } = self;
        drop(place);
        let waited = ended.saturating_duration_since(called);
        // How long the provider had the call: until the deadline cut it
        // short, not until a thread happened to wake up after it.
        let had = began.map(|b| deadline.at.min(ended).saturating_duration_since(b));
        let timeout = |had| inner.map_or(Verdict::Failure, |i| i.timeout_verdict(deadline, had));
        let (result, verdict, outcome) = match end {
            End::Returned(result) if ended >= deadline.at => {
                drop_quietly(result);
                (Err(Error::Timeout { waited }), timeout(had), Outcome::TimedOut)
            }
            End::Returned(result) | End::InTime(result) => match classified(classify, result) {
                // The job's own timeout at the attempt's deadline (ureq's, set
                // by `with_deadline`) is the caller's timeout, whichever fired
                // first: one event, one outcome, the same cut-short judgement.
                (Err(Error::Failed(e)), Verdict::Failure, _) if at_deadline(ended, began, deadline.at) => {
                    drop_quietly(e);
                    (Err(Error::Timeout { waited }), timeout(had), Outcome::TimedOut)
                }
                judged => judged,
            },
            End::Panicked(msg) => (Err(Error::Panicked(msg)), Verdict::Failure, Outcome::Panicked),
            End::TimedOut => (Err(Error::Timeout { waited }), timeout(had), Outcome::TimedOut),
            End::Discarded => {
                drop((permit, limit));
                if let Some(inner) = inner {
                    inner.refuse(Form::Blocking, Rejection::ShuttingDown, None);
                }
                return (Err(Error::from(Rejection::ShuttingDown)), None);
            }
        };
        let Some(inner) = inner else {
            if let Some(permit) = permit {
                permit.record(verdict, waited);
            }
            return (result, Some(verdict));
        };
        inner.call_time.record_at(waited, ended);
        let elapsed = inner.clock_now(ended).saturating_duration_since(start);
        if verdict == Verdict::Success
            && let Some(began) = began
        {
            inner.normal.record(ended.saturating_duration_since(began));
        }
        inner.counters.outcome(outcome);
        // A request the provider answered: accepted unless a failure or a timeout.
        if inner.throttle.is_on() && !shadowed.contains(Policy::Throttle) {
            let accepted = matches!(outcome, Outcome::Successful | Outcome::Ignored);
            inner.throttle.record_at(inner.clock_now(ended), accepted);
        }
        if verdict != Verdict::Ignore && inner.live.is_slow(elapsed) {
            Counters::bump(&inner.counters.slow);
        }
        if let Some(permit) = permit {
            permit.record(verdict, elapsed);
        }
        // An ignored outcome says nothing about the provider's latency.
        if let Some(limit) = limit
            && verdict != Verdict::Ignore
        {
            limit.record(elapsed, verdict);
        }
        if outcome == Outcome::TimedOut {
            inner.announce_timeout(waited);
        }
        (result, Some(verdict))
    }
}

/// Whether a failed answer that came back at `ended` from a job started at
/// `began` came back at (or past) the attempt's deadline `at`, having run
/// for at least half of what it had: a job started a moment before its
/// deadline (late, on a loaded machine, or as the last attempt of a retry)
/// that fails at once has failed, not timed out. (A job that had 4 ms or more
/// and came back within `AT_DEADLINE` of the deadline always ran that long.)
fn at_deadline(ended: Instant, began: Option<Instant>, at: Instant) -> bool {
    began.is_some_and(|began| {
        let had = at.saturating_duration_since(began);
        let ran = ended.saturating_duration_since(began);
        ended + AT_DEADLINE >= at && ran * 2 >= had
    })
}

/// The job's own outcome, its verdict and its outcome kind. A classifier
/// that panics makes the attempt a panicked one: a failure, answered
/// [`Error::Panicked`], so that every attempt is still counted once.
fn classified<T, E, C>(classify: &C, result: Result<T, E>) -> (Result<T, Error<E>>, Verdict, Outcome)
where
    C: Fn(&Result<T, E>) -> Verdict + ?Sized,
{
    match catch_unwind(AssertUnwindSafe(|| classify(&result))) {
        Ok(verdict) => (result.map_err(Error::Failed), verdict, Outcome::of_verdict(verdict)),
        Err(payload) => {
            drop_quietly(result);
            let msg = format!("the classifier panicked: {}", panic_message(payload.as_ref()));
            (Err(Error::Panicked(msg)), Verdict::Failure, Outcome::Panicked)
        }
    }
}

/// The job of an attempt settled on its worker (a detached call, a hedged
/// call's leg): runs `job` in the caller's span, then hands how it ended,
/// when it began and when it ended to `settle`; a panic goes on unwinding
/// after `settle` (the pool catches it again and answers `Panicked`).
pub(super) fn settled_on_worker<T, E, R>(
    job: impl FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    settle: impl FnOnce(End<T, E>, Instant, Instant) -> R + Send + 'static,
) -> impl FnOnce(&CallContext) -> R + Send + 'static {
    let parent_span = crate::trace::capture();
    move |ctx: &CallContext| {
        let _span = crate::trace::enter(parent_span, ctx);
        let began = Instant::now();
        let ran = catch_unwind(AssertUnwindSafe(|| job(ctx)));
        let ended = Instant::now();
        match ran {
            Ok(result) => settle(End::Returned(result), began, ended),
            Err(payload) => {
                drop(settle(End::Panicked(panic_message(payload.as_ref())), began, ended));
                resume_unwind(payload)
            }
        }
    }
}

/// Drops a value whose `Drop` is user code, so that a panic there cannot
/// keep the attempt from being settled.
pub(super) fn drop_quietly<V>(value: V) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(value)));
}
