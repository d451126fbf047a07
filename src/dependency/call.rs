//! [`CallBuilder`]: how one call is made, said once. Every way of calling a
//! [`Dependency`] beyond the plain [`call`](Dependency::call) and
//! [`spawn`](Dependency::spawn) is a [`with`](Dependency::with) away:
//!
//! | option | default |
//! |---|---|
//! | [`deadline`](CallBuilder::deadline) / [`timeout`](CallBuilder::timeout): the caller's own | none: the dependency's timeout alone |
//! | [`classify`](CallBuilder::classify): what an outcome means to the breaker | [`ByError`]: `Ok` succeeds, an `Err` says through [`Classify`] |
//! | [`retry`](CallBuilder::retry): the dependency's [`Retry`](crate::retry::Retry) | one attempt |
//! | [`hedge`](CallBuilder::hedge): the dependency's [`Hedge`](super::Hedge) | one attempt |
//! | [`priority`](CallBuilder::priority): under pressure, who is refused first | [`Priority::Normal`] |
//!
//! and it ends in [`call`](CallBuilder::call) (blocking),
//! [`spawn`](CallBuilder::spawn) or [`spawn_with`](CallBuilder::spawn_with)
//! (detached), or [`fan`](CallBuilder::fan) (a leg of a [`FanOut`]).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fanout::Fanned;
use super::{Dependency, FanLeg, FanOut, Judged, Priority};
use crate::classify::{ByError, Classifier};
use crate::error::{Error, Rejection};
use crate::pool::CallContext;

/// A [`CallBuilder`] making one attempt (the default).
#[derive(Debug, Clone, Copy)]
pub struct Once;

/// A [`CallBuilder`] hedging with the dependency's
/// [`Hedge`](super::Hedge) policy (from [`CallBuilder::hedge`]).
#[derive(Debug, Clone, Copy)]
pub struct Hedging;

/// A [`CallBuilder`] retrying with the dependency's
/// [`Retry`](crate::retry::Retry) (from [`CallBuilder::retry`]).
#[derive(Debug, Clone, Copy)]
pub struct Retrying;

/// How one call to a [`Dependency`] is made; from [`Dependency::with`].
///
/// A builder of options (see the module's table). It borrows the dependency
/// and is made afresh for every call: building one costs nothing.
///
/// ```
/// use std::time::{Duration, Instant};
/// use watertight::{CallContext, Dependency, Outcome};
///
/// let pricing = Dependency::builder("pricing").workers(2).timeout(Duration::from_secs(2)).build()?;
/// // The request has 50 ms left: so has the call, queue wait included.
/// let deadline = Instant::now() + Duration::from_millis(50);
/// let quick = pricing.with().deadline(deadline).call(|ctx: &CallContext| {
///     assert!(ctx.remaining() <= Duration::from_millis(50));
///     Ok::<_, std::io::Error>(1999)
/// });
/// assert_eq!(quick.unwrap(), 1999);
///
/// // A deadline already past: rejected at once, the provider never asked.
/// let late = pricing.with().deadline(Instant::now()).call(|_: &CallContext| Ok::<_, std::io::Error>(0));
/// assert_eq!(late.unwrap_err().outcome(), Outcome::DeadlineUnmeetable);
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[must_use = "a CallBuilder makes no call until `.call(job)`, `.spawn(job)` or `.spawn_with(on_done, job)`"]
pub struct CallBuilder<'a, C = ByError, R = Once> {
    dependency: &'a Dependency,
    deadline: Option<Instant>,
    priority: Priority,
    classify: C,
    mode: PhantomData<R>,
}

impl<'a> CallBuilder<'a> {
    pub(super) fn new(dependency: &'a Dependency) -> Self {
        CallBuilder {
            dependency,
            deadline: None,
            priority: Priority::Normal,
            classify: ByError,
            mode: PhantomData,
        }
    }
}

impl<'a, C, R> CallBuilder<'a, C, R> {
    /// The caller's own deadline (a request's budget, say): each attempt's
    /// deadline is the earlier of it and the dependency's
    /// [`timeout`](crate::DependencyBuilder::timeout). A deadline the queue
    /// cannot meet is refused
    /// [`DeadlineUnmeetable`](Rejection::DeadlineUnmeetable); a wait it ends
    /// is an [`Error::Timeout`] ([a deadline is a
    /// timeout](crate::pool#waiting-for-room-by-time); [hangs](crate::dependency#a-hang-is-caught-within-one-timeout)).
    ///
    /// Defaults to none.
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// [`deadline`](Self::deadline) at `timeout` from now (a timeout too long
    /// to add to now means no deadline of the caller's).
    pub fn timeout(self, timeout: Duration) -> Self {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.deadline(deadline),
            None => self,
        }
    }

    /// How much this call matters when the pool is under pressure
    /// ([`Priority`]; [priorities](crate::dependency#fan-out-hedging-priorities)). Applies to every
    /// call of a pool-mode dependency.
    ///
    /// Defaults to [`Priority::Normal`].
    ///
    /// ```
    /// use watertight::{CallContext, Dependency, dependency::Priority};
    ///
    /// let search = Dependency::builder("search").workers(4).reserved_for_critical(1).build()?;
    /// let hits = search.with().priority(Priority::Sheddable).call(|_: &CallContext| Ok::<_, std::io::Error>(3));
    /// assert_eq!(hits.unwrap(), 3); // idle workers: admitted
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// What the job's outcome means to the breaker; see [`Classifier`]. It
    /// runs on the calling thread (for a detached call, on the worker); if it
    /// panics, the attempt is answered [`Error::Panicked`] and recorded as a
    /// failure.
    ///
    /// Defaults to [`ByError`].
    pub fn classify<C2>(self, classify: C2) -> CallBuilder<'a, C2, R> {
        let CallBuilder { dependency, deadline, priority, .. } = self;
        CallBuilder { dependency, deadline, priority, classify, mode: PhantomData }
    }

    /// The same options, for another way of calling.
    fn into_mode<R2>(self) -> CallBuilder<'a, C, R2> {
        let CallBuilder { dependency, deadline, priority, classify, .. } = self;
        CallBuilder { dependency, deadline, priority, classify, mode: PhantomData }
    }
}

impl<'a, C> CallBuilder<'a, C, Once> {
    /// Retries with the dependency's [`Retry`](crate::retry::Retry) (its
    /// [rules](crate::retry#rules)). The job is shared
    /// by every attempt, so it must be `Fn` ([`CallContext::attempt`] tells
    /// them apart).
    ///
    /// Defaults to one attempt.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use watertight::{CallContext, Dependency};
    /// # let dep = Dependency::builder("d").workers(1).build()?;
    /// let answer = dep.with().timeout(Duration::from_millis(300)).retry().call(|ctx: &CallContext| {
    ///     if ctx.attempt() == 1 {
    ///         Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
    ///     } else {
    ///         Ok(ctx.attempt())
    ///     }
    /// });
    /// assert_eq!(answer.unwrap(), 2);
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn retry(self) -> CallBuilder<'a, C, Retrying> {
        self.into_mode()
    }

    /// Hedges with the dependency's [`Hedge`](super::Hedge) policy
    /// ([hedging](crate::dependency#fan-out-hedging-priorities)). A hedge also needs the deadline to
    /// leave it the provider's normal latency. The job is shared by every
    /// attempt, so it must be `Fn`, and the classifier runs on the workers.
    ///
    /// Defaults to one attempt, as does a dependency with no hedge policy.
    ///
    /// ```
    /// use std::time::Duration;
    /// use watertight::{CallContext, Dependency, dependency::Hedge};
    ///
    /// let search = Dependency::builder("search")
    ///     .workers(4)
    ///     .hedge(Hedge::after(Duration::from_millis(20)))
    ///     .build()?;
    /// // The first attempt is slow; the hedge, started 20 ms in, answers first.
    /// let answer = search.with().hedge().call(|ctx: &CallContext| {
    ///     if ctx.attempt() == 1 {
    ///         std::thread::sleep(Duration::from_millis(300));
    ///     }
    ///     Ok::<_, std::io::Error>(ctx.attempt())
    /// });
    /// assert_eq!(answer.unwrap(), 2);
    /// assert_eq!(search.snapshot().calls.hedges_won, 1);
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn hedge(self) -> CallBuilder<'a, C, Hedging> {
        self.into_mode()
    }

    /// Runs `job` once on a worker, through the breaker and under the
    /// deadline, and waits for its answer: at once when rejected, and never
    /// later than the deadline (plus scheduling noise) otherwise.
    pub fn call<T, E, F>(self, job: F) -> Result<T, Error<E>>
    where
        C: Classifier<T, E>,
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    {
        self.dependency.once(self.deadline, self.priority, &|r: &Result<T, E>| self.classify.verdict(r), job)
    }

    /// Starts `job` as a leg of `fan` ([`FanOut`]): admitted and submitted
    /// now, one attempt under the earlier of the fan-out's deadline and the
    /// caller's, answered by [`FanLeg::wait`]. The classifier runs on the
    /// worker. [`retry`](Self::retry) and [`hedge`](Self::hedge) have a
    /// `fan` too, whose retries and hedges start while the caller waits. In
    /// caller-thread mode the call is made here and now, as `call` makes it.
    pub fn fan<T, E, F>(self, fan: &FanOut, job: F) -> FanLeg<T, E>
    where
        C: Classifier<T, E> + Send + Sync + 'static,
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    {
        // One attempt, and no hedge: the job runs once at most.
        let once = parking_lot::Mutex::new(Some(job));
        let job = move |ctx: &CallContext| match once.lock().take() {
            Some(job) => job(ctx),
            None => unreachable!("a leg of one attempt runs its job once"),
        };
        let how = (self.deadline, self.priority, Fanned::Once);
        self.dependency.fan(fan, how, self.classify, job)
    }

    /// [`Dependency::spawn`] with these options: the caller's deadline bounds
    /// the detached call too, and the classifier judges its outcome on the
    /// worker.
    pub fn spawn<T, E, F>(self, job: F) -> Result<(), Rejection>
    where
        C: Classifier<T, E> + Send + 'static,
        T: Send + 'static,
        E: fmt::Display + Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
    {
        let (dependency, name) =
            (Arc::downgrade(&self.dependency.inner), Arc::clone(&self.dependency.inner.name));
        self.spawn_with(
            move |answer: Result<T, Error<E>>| match (answer, dependency.upgrade()) {
                (Err(err), Some(inner)) => inner.detached_failed(&err),
                // The dependency has gone (shut down, its last handle dropped).
                (Err(err), None) => log::warn!("dependency {name}: detached call failed: {err}"),
                (Ok(_), _) => {}
            },
            job,
        )
    }

    /// A detached call whose answer goes to `on_done` instead of the log: the
    /// job's value, or the [`Error`] a blocking call would have returned
    /// ([`Timeout`](Error::Timeout) for a job that returned, or was still
    /// queued, after its deadline; [`Panicked`](Error::Panicked);
    /// [`Rejected`](Error::Rejected)`(`[`ShuttingDown`](Rejection::ShuttingDown)`)`
    /// for a queued job that shutdown discarded).
    ///
    /// `on_done` is called exactly once for every call admitted (`Ok(())`),
    /// and never for a call refused at once (the `Err` is its answer). It
    /// runs after the outcome is counted and recorded, on the worker that ran
    /// the job; for a job that never started, on the thread that dropped it
    /// (the worker that found it expired, or the thread calling
    /// [`shutdown`](Dependency::shutdown)). Keep it short, and do not shut the
    /// dependency down from it. A panic in it is caught and logged.
    ///
    /// ```
    /// use std::sync::mpsc;
    /// use std::time::Duration;
    /// use watertight::{CallContext, Dependency, Error};
    ///
    /// let notification = Dependency::builder("notification").workers(1).build()?;
    /// let (tx, rx) = mpsc::channel();
    /// notification.with().spawn_with(
    ///     move |answer: Result<u16, Error<std::io::Error>>| {
    ///         let _ = tx.send(answer.map_err(|e| e.to_string()));
    ///     },
    ///     |_ctx: &CallContext| Ok(202),
    /// )?;
    /// assert_eq!(rx.recv_timeout(Duration::from_secs(5))?, Ok(202));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_with<T, E, F, D>(self, on_done: D, job: F) -> Result<(), Rejection>
    where
        C: Classifier<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        D: FnOnce(Result<T, Error<E>>) + Send + 'static,
    {
        self.spawn_judged(None, move |(answer, _): Judged<T, E>| on_done(answer), job)
    }

    /// [`spawn_with`](Self::spawn_with), but `on_done` also has the verdict
    /// the settlement recorded, and a full pool is waited for, as a blocking
    /// call waits (within `max_wait`), until `room_until` at the latest
    /// (`None`: not at all); once in, the call is detached. For a caller
    /// that hands the call on to others (the cache's shared call).
    pub(crate) fn spawn_judged<T, E, F, D>(
        self,
        room_until: Option<Instant>,
        on_done: D,
        job: F,
    ) -> Result<(), Rejection>
    where
        C: Classifier<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        D: FnOnce(Judged<T, E>) + Send + 'static,
    {
        self.dependency.detach(self.deadline, room_until, self.priority, self.classify, on_done, job)
    }
}

impl<C> CallBuilder<'_, C, Retrying> {
    /// Runs `job` with retries (see [`retry`](CallBuilder::retry)) and waits
    /// for the last answer.
    pub fn call<T, E, F>(self, job: F) -> Result<T, Error<E>>
    where
        C: Classifier<T, E>,
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    {
        let classify = self.classify;
        self.dependency.retrying(self.deadline, self.priority, &|r: &Result<T, E>| classify.verdict(r), job)
    }

    /// Starts `job` as a retried leg of `fan` ([`FanOut`]): each retry
    /// starts from the waiting caller once its pause is over, under the
    /// rules of [`retry`](CallBuilder::retry). The classifier runs on the
    /// workers.
    pub fn fan<T, E, F>(self, fan: &FanOut, job: F) -> FanLeg<T, E>
    where
        C: Classifier<T, E> + Send + Sync + 'static,
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    {
        let how = (self.deadline, self.priority, Fanned::Retry);
        self.dependency.fan(fan, how, self.classify, job)
    }
}

impl<C> CallBuilder<'_, C, Hedging> {
    /// Runs `job`, hedged (see [`hedge`](CallBuilder::hedge)), and waits for
    /// the first acceptable answer, or the last answer when none is.
    pub fn call<T, E, F>(self, job: F) -> Result<T, Error<E>>
    where
        C: Classifier<T, E> + Send + Sync + 'static,
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    {
        self.dependency.hedged(self.deadline, self.priority, self.classify, job)
    }

    /// Starts `job` as a hedged leg of `fan` ([`FanOut`]): each hedge
    /// starts from the waiting caller when due, under the rules of
    /// [`hedge`](CallBuilder::hedge).
    pub fn fan<T, E, F>(self, fan: &FanOut, job: F) -> FanLeg<T, E>
    where
        C: Classifier<T, E> + Send + Sync + 'static,
        T: Send + 'static,
        E: Send + 'static,
        F: Fn(&CallContext) -> Result<T, E> + Send + Sync + 'static,
    {
        let how = (self.deadline, self.priority, Fanned::Hedge);
        self.dependency.fan(fan, how, self.classify, job)
    }
}

impl<C, R> fmt::Debug for CallBuilder<'_, C, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallBuilder")
            .field("dependency", &self.dependency.name())
            .field("remaining", &self.deadline.map(|d| d.saturating_duration_since(Instant::now())))
            .field("mode", &std::any::type_name::<R>().rsplit("::").next().unwrap_or("?"))
            .finish_non_exhaustive()
    }
}
