//! The one way into a pool: [`Pool::submit`] with its options ([`Submit`]),
//! and the two short forms over it.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::call::{Call, CallContext, QueuedJob, SubmitError};
use super::queue::{Ahead, Refused, WaitRule};
use super::ticket::Ticket;
use super::{Pool, Shared, deadline_after};
use crate::error::{Error, Rejection};
use crate::room;

/// How a job is submitted to a [`Pool`]: its deadline, which attempt it is,
/// and whether it may wait for room.
///
/// ```
/// use std::time::{Duration, Instant};
/// use watertight::pool::{Pool, Submit};
///
/// let pool = Pool::builder("search").workers(2).build()?;
/// let deadline = Instant::now() + Duration::from_millis(500);
/// let ticket = pool.submit(Submit::by(deadline).attempt(2), |ctx| Ok::<_, ()>(ctx.attempt()))?;
/// assert_eq!(ticket.wait().unwrap(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
#[must_use = "a Submit does nothing until handed to `Pool::submit`"]
pub struct Submit {
    deadline: Instant,
    /// The submitter's own reading of the clock, when it has just read it.
    now: Option<Instant>,
    attempt: u32,
    wait: Wait,
    stuck: Option<Duration>,
}

/// Whether and how long a submission waits for room: the one choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// As long as the pool's `max_wait` and the deadline allow, and until
    /// `until` when it is earlier.
    ForRoom { until: Option<Instant> },
    /// Never: a full pool refuses at once.
    Never,
    /// Only to a worker idle right now: never queued, never waiting.
    IdleOnly,
}

impl Submit {
    /// A job to answer by `deadline`. It may wait for room as long as the
    /// pool's [`max_wait`](super::PoolBuilder::max_wait) and the deadline allow.
    pub fn by(deadline: Instant) -> Submit {
        Submit { deadline, now: None, attempt: 1, wait: Wait::ForRoom { until: None }, stuck: None }
    }

    /// A job to answer within `timeout` from now.
    pub fn within(timeout: Duration) -> Submit {
        let now = Instant::now();
        Submit { now: Some(now), ..Submit::by(deadline_after(now, timeout)) }
    }

    /// Attempt number `n` (1-based; [`CallContext::attempt`] shows it to the
    /// job). Defaults to 1.
    pub fn attempt(mut self, n: u32) -> Submit {
        self.attempt = n.max(1);
        self
    }

    /// Never waits for room, whatever the pool's `max_wait`: a full pool
    /// refuses the job at once.
    pub fn no_wait(mut self) -> Submit {
        self.wait = Wait::Never;
        self
    }

    /// Only to a worker that is idle right now: never queued, never waiting
    /// for room (for a hedge, which must not take a place a first attempt
    /// could use). Deadline-aware admission does not apply (there is no
    /// queue wait); a deadline already past is still refused.
    pub fn idle_only(mut self) -> Submit {
        self.wait = Wait::IdleOnly;
        self
    }

    /// When the pool is full and every worker has been inside its job for
    /// at least `after`, the provider is stuck and room will not come: the
    /// submission does not wait for room and its refusal says so
    /// ([`SubmitError::stuck`]).
    pub(crate) fn stuck(mut self, after: Duration) -> Submit {
        self.stuck = Some(after);
        self
    }

    /// Waits for room until `at` at the latest, when that is earlier than
    /// the deadline (a caller who hands the call on once it is in, and
    /// has a deadline of its own for getting it in).
    pub(crate) fn room_until(mut self, at: Instant) -> Submit {
        self.wait = Wait::ForRoom { until: Some(at) };
        self
    }
}

impl Pool {
    /// Submits `job` as `how` says, and returns at once with a [`Ticket`]
    /// to wait on (or, with a [`max_wait`](super::PoolBuilder::max_wait),
    /// after waiting at most that long for room).
    ///
    /// Refused, with the job handed back, when the queue is full
    /// ([`Rejection::QueueFull`]; with queue 0, when no worker is idle; with
    /// `max_wait`, when none came free within it or before the deadline),
    /// when the pool is shutting down ([`Rejection::ShuttingDown`]), or when
    /// the deadline has already passed or, with deadline-aware admission,
    /// is nearer than the wait behind the queued work
    /// ([`Rejection::DeadlineUnmeetable`]). With queue 0, what counts as idle:
    /// [`PoolBuilder::queue`](super::PoolBuilder::queue).
    pub fn submit<T, E, F>(&self, how: Submit, job: F) -> Result<Ticket<T, E>, SubmitError<F>>
    where
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let now = how.now.unwrap_or_else(Instant::now);
        let h = &*self.inner;
        let stats = &h.shared.stats;
        // A deadline already past, or (with admission on, and a queue to wait
        // in) one nearer than the wait behind the queued work: the job could
        // only time out.
        let behind = || self.estimated_wait().is_some_and(|w| w > how.deadline - now);
        if how.deadline <= now || (how.wait != Wait::IdleOnly && self.deadline_aware_admission() && behind())
        {
            stats.callers.rejected.fetch_add(1, Relaxed);
            return Err(SubmitError::new(Rejection::DeadlineUnmeetable, job, false));
        }
        // The call's one allocation: job, context and reply slot together.
        let call = Arc::new(Call::new(Arc::clone(&h.shared), now, how.deadline, how.attempt, job));
        let queued = QueuedJob::new(call.clone());
        let (queue, busy) = (&h.shared.queue, &stats.workers.busy);
        let mut stuck = false;
        let pushed = match how.wait {
            Wait::IdleOnly => queue.push_to_idle(queued, busy),
            Wait::Never => queue.push(queued, busy),
            // No room: wait for some, unless every worker is stuck.
            Wait::ForRoom { until: room_until } => match queue.push(queued, busy) {
                Err((Refused::Full, queued)) => {
                    stuck = self.is_stuck(now, how.stuck);
                    let max_wait = Duration::from_nanos(h.max_wait_ns.load(Relaxed));
                    if max_wait.is_zero() || stuck {
                        Err((Refused::Full, queued))
                    } else {
                        let until = how.deadline.min(deadline_after(now, max_wait));
                        let until = room_until.map_or(until, |at| until.min(at));
                        let (mean, normal) = (h.shared.service.mean(), h.shared.service.normal());
                        let rule = room::ByTime { mean, normal, max_wait, deadline: how.deadline };
                        let line = InQueue { shared: &h.shared, rule, until };
                        let waited = queue.push_until(queued, &line, busy, &stats.callers.waiting);
                        stuck = matches!(waited, Err((Refused::Full, _)))
                            && self.is_stuck(Instant::now(), how.stuck);
                        waited
                    }
                }
                pushed => pushed,
            },
        };
        match pushed {
            Ok(_) => {
                stats.callers.submitted.fetch_add(1, Relaxed);
                Ok(Ticket::new(call, now))
            }
            Err((refused, queued)) => {
                stats.callers.rejected.fetch_add(1, Relaxed);
                // Defuse the queue wrapper (dropping it would answer the call),
                // so `call` is the only reference left again.
                drop(queued.take());
                let job = Arc::try_unwrap(call).ok().and_then(Call::into_job);
                let job = job.expect("a refused job is referenced only by its submitter");
                Err(match refused {
                    Refused::Full => SubmitError::new(Rejection::QueueFull, job, stuck),
                    Refused::Closed => SubmitError::new(Rejection::ShuttingDown, job, false),
                })
            }
        }
    }

    /// [`submit`](Self::submit) with a deadline `timeout` from now.
    pub fn submit_timeout<T, E, F>(&self, timeout: Duration, job: F) -> Result<Ticket<T, E>, SubmitError<F>>
    where
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.submit(Submit::within(timeout), job)
    }

    /// Runs `job` on the pool and waits for its answer for at most `timeout`:
    /// [`submit_timeout`](Self::submit_timeout) and [`Ticket::wait`]. A
    /// refused submission is `Err(Rejected(_))` (the job is dropped). For
    /// other options, `pool.submit(how, job)?.wait()`.
    pub fn call_timeout<T, E, F>(&self, timeout: Duration, job: F) -> Result<T, Error<E>>
    where
        F: FnOnce(&CallContext) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.submit_timeout(timeout, job)?.wait()
    }

    /// Whether every worker has been inside its job for at least `after`.
    fn is_stuck(&self, now: Instant, after: Option<Duration>) -> bool {
        after.is_some_and(|after| {
            self.inner.shared.running.all_busy_for(now).is_some_and(|busy| busy >= after)
        })
    }
}

/// A caller waiting for room in the queue, judged by the room's rule
/// ([`room::ByTime`]) on the pool's own timings: admitted by the wait it can
/// expect, kept only while the line moves (see
/// [`PoolBuilder::max_wait`](super::PoolBuilder::max_wait)). Before the pool
/// has timed a call there is no normal latency to judge a stuck line by:
/// `max_wait` alone bounds the wait (and a dependency's stuck threshold the
/// breaker).
struct InQueue<'a> {
    shared: &'a Shared,
    rule: room::ByTime,
    until: Instant,
}

impl WaitRule for InQueue<'_> {
    fn until(&self) -> Instant {
        self.until
    }

    fn admit(&self, ahead: Ahead, now: Instant) -> bool {
        // Each call that finishes lets the first queued job go to a worker:
        // room comes for this caller once `calls + 1 - capacity` calls have
        // finished, and it reaches a worker once `calls + 1` have, `workers`
        // at a time, each taking the recent mean.
        self.rule.admits(ahead, now)
    }

    fn round(&self) -> Duration {
        self.rule.mean.unwrap_or(Duration::ZERO)
    }

    fn recheck(&self, now: Instant) -> Option<Instant> {
        // The normal latency as it is now: a call may be timed while this one waits.
        let rule = room::ByTime { normal: self.shared.service.normal(), ..self.rule };
        rule.recheck(self.shared.running.all_busy_for(now), now)
    }
}
