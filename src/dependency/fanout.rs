//! Fan-out: [`FanOut`], a request thread that calls several dependencies at
//! once and waits for them under one deadline, with no thread per call.
//!
//! A driver over attempts like the others: every attempt of every leg is
//! admitted by `Inner::admit` and settled once by `Attempt::settle`. Each
//! leg is a `Race` (`hedge.rs`): its attempts are settled on their worker
//! when the job returns, or by the caller at the deadline, so a leg whose
//! caller has left is still settled once. A retried leg runs the steps of
//! the retry loop (`retry/run.rs`: `after` an attempt, `resume` after the
//! pause), a hedged leg the hedge policy, with the budget, backoff and
//! conditions of a blocking call.
//!
//! # Who drives
//!
//! The caller's thread, and no other ([`dependency`](crate::dependency#fan-out-hedging-priorities)).
//! [`FanOut::start`] (or [`CallBuilder::fan`](super::CallBuilder::fan))
//! admits and submits a leg's first attempt and returns, once room comes if
//! it waits for room (start first the legs least likely to wait).
//! [`FanLeg::wait`] and [`FanOut::wait_all`] then drive *every* leg in turn:
//! take in the answers that have come, start a retry or hedge that is due.
//! Between two rounds the thread registers itself on the reply slot of every
//! attempt in flight and parks until one settles or a leg has something due.
//! A slot's `register` looks at the slot once more under its lock, so an
//! answer that comes between a round and the park is never missed; a stray
//! unpark only makes the thread look once more.
//!
//! A [`FanLeg`] dropped before its answer is given up as a caller who left
//! (a running attempt sees [`CallContext::is_cancelled`]); a retry not yet
//! made gives its budget token back.

use std::cell::RefCell;
use std::fmt;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hedge::Race;
use super::{Dependency, Hedge, Priority};
use crate::classify::{ByError, Classifier};
use crate::error::{Error, Rejection};
use crate::pool::CallContext;
use crate::retry::{Next, Retried};
use crate::sync::Thread;

/// Several calls, to several dependencies, under one deadline, driven from
/// the caller's thread (see the module docs): start each leg, then wait for
/// all of them ([`wait_all`](Self::wait_all)) or for each in turn
/// ([`FanLeg::wait`]). Every leg gets exactly one answer, its value or an
/// [`Error`], by the deadline. A `FanOut` and its legs belong to the thread
/// that made them (they are not `Send`).
///
/// ```
/// use std::time::Duration;
/// use watertight::{CallContext, Dependency, FanOut};
///
/// let flights = Dependency::builder("flights").workers(2).build()?;
/// let hotels = Dependency::builder("hotels").workers(2).build()?;
///
/// let fan = FanOut::timeout(Duration::from_millis(800));
/// let f = fan.start(&flights, |_: &CallContext| Ok::<_, std::io::Error>(3));
/// let h = hotels.with().retry().fan(&fan, |_: &CallContext| Ok::<_, std::io::Error>(5));
/// fan.wait_all();
/// assert_eq!((f.wait()?, h.wait()?), (3, 5));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// The compiler keeps it on its thread:
///
/// ```compile_fail
/// fn is_send<T: Send>(_: T) {}
/// is_send(watertight::FanOut::timeout(std::time::Duration::from_secs(1)));
/// ```
#[must_use = "a FanOut makes no call until a leg is started with `start` or `CallBuilder::fan`"]
pub struct FanOut {
    fan: Rc<Fan>,
}

/// What the fan-out and its legs' handles share.
struct Fan {
    deadline: Instant,
    /// Every leg started and not dropped, in order; the handles own them.
    legs: RefCell<Vec<Weak<RefCell<dyn FanDrive>>>>,
}

/// One leg, as the fan-out drives it; a cache lookup (`Cache::fan`) is one too.
pub(crate) trait FanDrive {
    /// Takes in an answer that has come, starts what is due; never waits.
    fn drive(&mut self);
    /// Whether the leg has its answer.
    fn is_done(&self) -> bool;
    /// The latest instant it must be driven again (`None`: done).
    fn due(&self) -> Option<Instant>;
    /// Asks for `thread` to be unparked when one of its attempts settles;
    /// `false` when one already has.
    fn register(&self, thread: &Thread) -> bool;
}

/// One leg, as its handle reads it.
pub(crate) trait FanAnswer<T, E>: FanDrive {
    /// The answer, once; `None` before it, or after it was taken.
    fn take(&mut self) -> Option<Result<T, Error<E>>>;
}

/// The handle of one leg of a [`FanOut`]: [`wait`](Self::wait) for its
/// answer. Dropped before it, the leg is given up (see the module docs).
#[must_use = "dropping a FanLeg gives its call up: a queued attempt is withdrawn, a running one abandoned"]
pub struct FanLeg<T, E> {
    fan: Rc<Fan>,
    leg: Rc<RefCell<dyn FanAnswer<T, E>>>,
}

/// How a leg makes its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fanned {
    Once,
    Retry,
    Hedge,
}

impl FanOut {
    /// A fan-out whose every leg answers by `deadline`.
    pub fn until(deadline: Instant) -> FanOut {
        FanOut { fan: Rc::new(Fan { deadline, legs: RefCell::new(Vec::new()) }) }
    }

    /// [`until`](Self::until) `timeout` from now (a timeout too long to add
    /// to now is a deadline decades away).
    pub fn timeout(timeout: Duration) -> FanOut {
        FanOut::until(crate::time::deadline_after(Instant::now(), timeout))
    }

    /// The deadline every leg answers by.
    pub fn deadline(&self) -> Instant {
        self.fan.deadline
    }

    /// Starts one call to `dependency`, a leg of this fan-out: admitted and
    /// submitted now, and answered by [`FanLeg::wait`]. Short for
    /// `dependency.with().fan(self, job)`; for a retried or hedged leg, a
    /// classifier or a priority, see
    /// [`CallBuilder::fan`](super::CallBuilder::fan).
    pub fn start<T, E, F>(&self, dependency: &Dependency, job: F) -> FanLeg<T, E>
    where
        ByError: Classifier<T, E>,
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    {
        dependency.with().fan(self, job)
    }

    /// Makes `leg` a leg of this fan-out: driven with the others, answered by
    /// the handle returned. A leg has its answer by the fan-out's deadline.
    pub(crate) fn join<T, E>(&self, leg: impl FanAnswer<T, E> + 'static) -> FanLeg<T, E> {
        let leg = Rc::new(RefCell::new(leg));
        let weak: Weak<RefCell<dyn FanDrive>> = Rc::downgrade(&leg) as Weak<RefCell<dyn FanDrive>>;
        self.fan.legs.borrow_mut().push(weak);
        FanLeg { fan: Rc::clone(&self.fan), leg }
    }

    /// Waits until every leg started (and not dropped) has its answer: by
    /// the deadline, plus scheduling noise. Drives the legs meanwhile.
    pub fn wait_all(&self) {
        self.fan.wait(|| self.fan.live().iter().all(|leg| leg.borrow().is_done()));
    }
}

impl fmt::Debug for FanOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FanOut")
            .field("remaining", &self.fan.deadline.saturating_duration_since(Instant::now()))
            .field("legs", &self.fan.live().len())
            .finish()
    }
}

impl Fan {
    /// The legs not dropped; forgets the dropped ones.
    fn live(&self) -> Vec<Rc<RefCell<dyn FanDrive>>> {
        let mut legs = self.legs.borrow_mut();
        legs.retain(|leg| leg.strong_count() > 0);
        legs.iter().filter_map(Weak::upgrade).collect()
    }

    /// Drives every leg until `done`, parking in between (module docs).
    /// Every leg is done by the deadline, so `done` over legs is too.
    fn wait(&self, done: impl Fn() -> bool) {
        let me = crate::sync::current();
        loop {
            let legs = self.live();
            for leg in &legs {
                leg.borrow_mut().drive();
            }
            if done() {
                return;
            }
            let until = legs.iter().filter_map(|leg| leg.borrow().due()).fold(self.deadline, Instant::min);
            let now = Instant::now();
            if now < until && legs.iter().all(|leg| leg.borrow().register(&me)) {
                // May return early (an attempt settled, or spuriously): drive again.
                crate::sync::park_timeout(until - now);
            }
        }
    }
}

impl<T, E> FanLeg<T, E> {
    /// Waits for this leg's answer: its value, or the [`Error`] a blocking
    /// call would have returned. By the fan-out's deadline, plus scheduling
    /// noise. Drives every leg of the fan-out meanwhile, so that their
    /// retries and hedges start when due.
    pub fn wait(self) -> Result<T, Error<E>> {
        self.fan.wait(|| self.leg.borrow().is_done());
        // Unreachable: `wait` consumes the handle, and the leg was done.
        self.leg.borrow_mut().take().unwrap_or(Err(Error::from(Rejection::ShuttingDown)))
    }

    /// Whether the answer is in: [`wait`](Self::wait) would return at once.
    /// Drives nothing.
    pub fn is_done(&self) -> bool {
        self.leg.borrow().is_done()
    }
}

impl<T, E> fmt::Debug for FanLeg<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FanLeg").field("done", &self.is_done()).finish_non_exhaustive()
    }
}

/// Where a leg stands.
enum Stage<T, E, F, C> {
    /// An attempt (and its hedges) in flight.
    Racing(Race<T, E, F, C>),
    /// Between two attempts of a retried leg: the next at this instant.
    Pausing(Instant),
    /// The answer, until the handle takes it.
    Done(Option<Result<T, Error<E>>>),
}

/// One leg: its dependency and options, its job, and where it stands.
struct Driven<T, E, F, C> {
    dependency: Dependency,
    hedge: Option<Hedge>,
    priority: Priority,
    deadline: Instant,
    job: Arc<F>,
    classify: Arc<C>,
    /// `Some` for a retried leg.
    retried: Option<Retried<T, E>>,
    stage: Stage<T, E, F, C>,
}

impl Dependency {
    /// Starts a leg of `fan` (see [`CallBuilder::fan`](super::CallBuilder::fan)).
    pub(super) fn fan<T, E, F, C>(
        &self,
        fan: &FanOut,
        (caller, priority, how): (Option<Instant>, Priority, Fanned),
        classify: C,
        job: F,
    ) -> FanLeg<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
        C: Classifier<T, E> + Send + Sync + 'static,
    {
        let inner = &*self.inner;
        let deadline = caller.map_or(fan.fan.deadline, |c| c.min(fan.fan.deadline));
        let mut driven = Driven {
            dependency: self.clone(),
            hedge: None,
            priority,
            deadline,
            job: Arc::new(job),
            classify: Arc::new(classify),
            retried: None,
            stage: Stage::Done(None),
        };
        if inner.exec.pool().is_none() {
            // Caller-thread mode runs every call where its caller stands: here, now.
            let job = Arc::clone(&driven.job);
            let judge = |r: &Result<T, E>| driven.classify.verdict(r);
            let answer = match how {
                Fanned::Retry => self.retrying(Some(deadline), priority, &judge, move |ctx| job(ctx)),
                _ => self.once(Some(deadline), priority, &judge, move |ctx| job(ctx)),
            };
            driven.stage = Stage::Done(Some(answer));
        } else {
            driven.hedge = inner.live.hedge().filter(|_| how == Fanned::Hedge);
            let now = match how {
                Fanned::Retry => {
                    let (now, retried) = self.with_retrier(|r| r.begin(Some(deadline)));
                    driven.retried = Some(retried);
                    now
                }
                _ => Instant::now(),
            };
            driven.launch(now);
        }
        fan.join(driven)
    }
}

impl<T, E, F, C> Driven<T, E, F, C>
where
    T: Send + 'static,
    E: Send + 'static,
    F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    C: Classifier<T, E> + Send + Sync + 'static,
{
    /// Starts an attempt (the next of a retried leg), or takes its refusal.
    fn launch(&mut self, now: Instant) {
        let (number, caller) = match &self.retried {
            Some(retried) => (retried.number, retried.end),
            None => (1, Some(self.deadline)),
        };
        let how = (self.hedge, self.priority, number);
        let (job, classify) = (Arc::clone(&self.job), Arc::clone(&self.classify));
        match Race::start(&self.dependency, how, now, caller, job, classify) {
            Ok(race) => self.stage = Stage::Racing(race),
            Err(refused) => self.attempted(Err(refused.into_error()), None),
        }
    }

    /// An attempt has its answer (`verdict`: as recorded; `None`, refused):
    /// the leg's answer, or a retry after a pause.
    fn attempted(&mut self, answer: Result<T, Error<E>>, verdict: Option<crate::classify::Verdict>) {
        self.stage = match &mut self.retried {
            None => Stage::Done(Some(answer)),
            // A timeout at the deadline whose attempt its worker recorded a
            // moment before (no verdict here) was made, not refused: it is
            // the leg's answer, and its retry keeps the budget's token.
            Some(_) if verdict.is_none() && matches!(answer, Err(Error::Timeout { .. })) => {
                Stage::Done(Some(answer))
            }
            Some(retried) => match self.dependency.with_retrier(|r| r.after(retried, answer, verdict)) {
                Next::Done(answer) => Stage::Done(Some(answer)),
                Next::RetryAt(at) => Stage::Pausing(at),
            },
        };
    }
}

impl<T, E, F, C> FanDrive for Driven<T, E, F, C>
where
    T: Send + 'static,
    E: Send + 'static,
    F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    C: Classifier<T, E> + Send + Sync + 'static,
{
    fn drive(&mut self) {
        loop {
            match &mut self.stage {
                Stage::Racing(race) => match race.poll() {
                    Some((answer, verdict)) => self.attempted(answer, verdict),
                    None => return,
                },
                Stage::Pausing(at) => {
                    let now = Instant::now();
                    if now < *at {
                        return;
                    }
                    let Some(retried) = self.retried.as_mut() else { return };
                    match self.dependency.with_retrier(|r| r.resume(retried, now)) {
                        Ok(()) => self.launch(now),
                        Err(answer) => self.stage = Stage::Done(Some(answer)),
                    }
                }
                Stage::Done(_) => return,
            }
        }
    }

    fn is_done(&self) -> bool {
        matches!(self.stage, Stage::Done(_))
    }

    fn due(&self) -> Option<Instant> {
        match &self.stage {
            Stage::Racing(race) => Some(race.until()),
            Stage::Pausing(at) => Some(*at),
            Stage::Done(_) => None,
        }
    }

    fn register(&self, thread: &Thread) -> bool {
        match &self.stage {
            Stage::Racing(race) => race.register(thread),
            _ => true,
        }
    }
}

impl<T, E, F, C> FanAnswer<T, E> for Driven<T, E, F, C>
where
    T: Send + 'static,
    E: Send + 'static,
    F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    C: Classifier<T, E> + Send + Sync + 'static,
{
    fn take(&mut self) -> Option<Result<T, Error<E>>> {
        match &mut self.stage {
            Stage::Done(answer) => answer.take(),
            _ => None,
        }
    }
}

impl<T, E, F, C> Drop for Driven<T, E, F, C> {
    /// A leg given up during a pause: the retry it will not make gives its
    /// budget token back. (A race in flight gives itself up: `Race`'s `Drop`.)
    fn drop(&mut self) {
        if let (Stage::Pausing(_), Some(retried)) = (&self.stage, self.retried.as_mut()) {
            self.dependency.with_retrier(|r| r.abandon(retried));
        }
    }
}
