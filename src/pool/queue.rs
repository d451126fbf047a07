//! The pool's queue: the jobs waiting for a worker, the stack of idle
//! workers, and the hand-off between them, all under one lock.
//!
//! Generic over the job type and free of estimates (a submission waiting
//! for room asks its [`WaitRule`] whether to join and whether to stay, and reads
//! the clock only to time its wait), so that `tests/loom_pool.rs` can model
//! check it with plain values. Every shared primitive comes from [`crate::sync`].
//!
//! # The lock and what it protects
//!
//! One `Mutex<State>`: the queued jobs (`VecDeque`), the idle workers (a
//! LIFO `Vec` of mailboxes), the capacity, the worker bookkeeping
//! (`workers`, `retire`, `away`), whether the queue is open, and the callers
//! waiting for room: the crate's one line ([`Waiters`], waited in through
//! [`room::wait`](crate::room::wait)). A place that comes free wakes the
//! first waiter, which offers its job again; one that finds the place taken
//! goes back to the front of the line. Every critical section is a few
//! pushes and pops; no user code, no allocation beyond the deque's growth,
//! and no wake-up runs under it (wake-ups are collected and made after
//! unlocking).
//!
//! # Invariants (at every unlock)
//!
//! 1. While a worker is idle, no more jobs are queued than workers are
//!    returning (invariant 3). A submitter queues its job rather than wake a
//!    parked worker only when a returning worker is free to take it (it
//!    reaches the lock within moments, with no wake-up), else hands it to an
//!    idle worker; a worker goes idle only after finding `jobs` empty; and
//!    whatever lowers the returning count (a shrink, a worker that could not
//!    start) first hands the jobs it leaves uncovered to idle workers. So a
//!    queued job never waits for a busy worker while one sleeps, and
//!    shutdown wakes idle workers only to let them exit: the returning
//!    workers drain what is queued.
//! 2. `away` counts the workers that are alive, not in `idle` and not on
//!    their way out: running a job, starting, or coming back to the lock
//!    after answering a call. Each worker's `next` call takes itself out of
//!    `away` on entry and puts itself back when it leaves with a job.
//! 3. `busy` (the pool's counter, passed in) is raised under this lock for
//!    every job given to a worker and lowered by the worker, outside it, just
//!    before it answers. So `away - busy` are workers that will be back at
//!    the lock within moments (`returning`): a job queued for one of them is
//!    taken at once, which is how queue 0 accepts a call for a worker that
//!    has just answered, without spinning for it.
//! 4. `workers` is the worker setting once every requested retirement has
//!    been taken: `retire` more workers will exit when they next come to the
//!    lock.

use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize as StdAtomicUsize;
use std::time::{Duration, Instant};

use crate::room::{self, Waiters};
use crate::sync::{Arc, AtomicBool, AtomicUsize, Mutex, Ordering, Thread, current, park};

/// Why a submission was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No idle worker, no worker about to come back, no room.
    Full,
    /// The queue is closed.
    Closed,
}

/// What a submission waiting for room asks of its pool: whether it may
/// join the line, and whether the line still moves. The queue holds no
/// clock and no estimate; the pool answers these (`submit.rs`).
pub trait WaitRule {
    /// The latest moment to wait until.
    fn until(&self) -> Instant;
    /// Under the queue lock, once: whether a caller may wait, with `ahead`
    /// as the line stands. Plain arithmetic on what it is handed and what
    /// the caller read before: no other lock.
    fn admit(&self, ahead: Ahead, now: Instant) -> bool;
    /// One round of the workers (their mean run): a break in the line
    /// shorter than this does not end it (see `Ahead::standing`).
    fn round(&self) -> Duration;
    /// Outside the lock, right after admission and then when the moment it
    /// named comes: `None` to give up (the line has stopped moving), else
    /// when to look again.
    fn recheck(&self, now: Instant) -> Option<Instant>;
}

pub use crate::room::Ahead;

/// How an accepted job went in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Handed straight to an idle worker, through its mailbox.
    Handed,
    /// Queued, for a busy worker or one about to come back.
    Queued,
}

/// What [`Queue::resize`] asks the pool to do.
#[derive(Debug, PartialEq, Eq)]
pub struct Resized {
    /// New workers to start (already counted in `workers` and `away`; report
    /// any that fail with [`Queue::not_started`]).
    pub start: usize,
}

struct State<J> {
    jobs: VecDeque<J>,
    /// Idle workers, most recently idle last (popped first).
    idle: Vec<Arc<Mailbox<J>>>,
    capacity: usize,
    open: bool,
    /// Workers alive and not asked to exit (see invariant 4).
    workers: usize,
    /// Busy workers asked to exit when they come back.
    retire: usize,
    /// See invariant 2.
    away: usize,
    /// Submitters waiting (`max_wait`) for room, woken first come first served.
    waiters: Waiters,
}

impl<J> State<J> {
    /// Workers that have answered (or are starting) and will take a queued
    /// job as soon as they reach the lock, minus those that will exit.
    fn returning(&self, busy: usize) -> usize {
        self.away.saturating_sub(busy).saturating_sub(self.retire)
    }

    /// Wakes the first `n` waiters to offer their jobs again.
    fn wake(&mut self, mut n: usize) -> room::Woken {
        self.waiters.grant(|_| {
            let woken = n > 0;
            n = n.saturating_sub(1);
            woken
        })
    }
}

/// A job offered under the lock: what the caller does once it is released.
enum Offer<J> {
    Handed(Arc<Mailbox<J>>, J),
    Queued,
    Refused(Refused, J),
}

/// The queue, the idle stack and the worker bookkeeping. See the module docs.
pub struct Queue<J> {
    state: Mutex<State<J>>,
    /// `jobs.len()`, mirrored for lock-free reads (`stats`, admission).
    len: StdAtomicUsize,
}

/// How a worker that found no job waits (what `next` returns instead of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Idle;

impl<J> Queue<J> {
    /// A queue of `capacity` for `workers` workers, all counted as starting.
    pub fn new(capacity: usize, workers: usize) -> Self {
        Queue {
            state: Mutex::new(State {
                jobs: VecDeque::with_capacity(capacity.min(1024)),
                idle: Vec::with_capacity(workers),
                capacity,
                open: true,
                workers,
                retire: 0,
                away: workers,
                waiters: Waiters::default(),
            }),
            len: StdAtomicUsize::new(0),
        }
    }

    /// Jobs waiting (a relaxed read; no lock).
    pub fn queued(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Offers `job`: into the queue for a worker about to come back if one
    /// is free (no wake-up); else to the most recently idle worker if there
    /// is one (the likeliest to be still polling its mailbox); else into the
    /// queue if there is room (capacity, plus one place for each worker
    /// about to come back). `busy` is the pool's busy counter: raised here
    /// for a job handed to a worker.
    pub fn push(&self, job: J, busy: &AtomicUsize) -> Result<Accepted, (Refused, J)> {
        let offer = self.offer(&mut self.state.lock(), job, busy, false);
        Self::deliver(offer)
    }

    /// Under the lock: [`push`](Self::push)'s choice, or with `idle_only`
    /// [`push_to_idle`](Self::push_to_idle)'s (no room beyond the returning
    /// workers).
    fn offer(&self, st: &mut State<J>, job: J, busy: &AtomicUsize, idle_only: bool) -> Offer<J> {
        if !st.open {
            return Offer::Refused(Refused::Closed, job);
        }
        // A worker about to come back takes a queued job with no wake-up
        // (invariant 1): wake a parked one only when every returning worker
        // has a job already.
        let busy_now = busy.load(Ordering::Relaxed);
        let returning_free = st.returning(busy_now) > st.jobs.len();
        if !returning_free && let Some(worker) = st.idle.pop() {
            st.away += 1;
            busy.fetch_add(1, Ordering::Relaxed);
            return Offer::Handed(worker, job);
        }
        let capacity = if idle_only { 0 } else { st.capacity };
        if st.jobs.len() < capacity + st.returning(busy_now) {
            st.jobs.push_back(job);
            self.len.store(st.jobs.len(), Ordering::Relaxed);
            return Offer::Queued;
        }
        Offer::Refused(Refused::Full, job)
    }

    /// After unlocking: posts a handed job.
    fn deliver(offer: Offer<J>) -> Result<Accepted, (Refused, J)> {
        match offer {
            Offer::Handed(worker, job) => {
                worker.post(Letter::Job(job));
                Ok(Accepted::Handed)
            }
            Offer::Queued => Ok(Accepted::Queued),
            Offer::Refused(why, job) => Err((why, job)),
        }
    }

    /// Whether a worker is free right now: idle in the stack, or returning
    /// (starting, or back from a call) with no queued job waiting for it.
    pub fn has_idle(&self, busy: &AtomicUsize) -> bool {
        let st = self.state.lock();
        !st.idle.is_empty() || st.returning(busy.load(Ordering::Relaxed)) > st.jobs.len()
    }

    /// Hands `job` to a free worker, and only to one: a hedge, which must
    /// never wait behind other work. Queued for a returning worker (starting,
    /// or back from a call) that no queued job is waiting for, as `offer`
    /// does, else handed to an idle one; refused (`Full`) when neither is.
    pub fn push_to_idle(&self, job: J, busy: &AtomicUsize) -> Result<Accepted, (Refused, J)> {
        let offer = self.offer(&mut self.state.lock(), job, busy, true);
        Self::deliver(offer)
    }

    /// [`push`](Self::push), waiting for room in the line when the pool is
    /// full, as `line` allows. `waiting` is raised while it waits (only under
    /// this lock, so `line.admit` reads an exact count).
    pub fn push_until(
        &self,
        job: J,
        line: &dyn WaitRule,
        busy: &AtomicUsize,
        waiting: &StdAtomicUsize,
    ) -> Result<Accepted, (Refused, J)> {
        let mut st = self.state.lock();
        let mut job = match self.offer(&mut st, job, busy, false) {
            Offer::Refused(Refused::Full, job) => job,
            offer => {
                drop(st);
                return Self::deliver(offer);
            }
        };
        let now = Instant::now();
        // The calls ahead of this one: the queued jobs, and the callers
        // already waiting for room.
        let ahead = st.jobs.len() + waiting.load(Ordering::Relaxed);
        let round = line.round();
        let standing = st.waiters.stood(now, round);
        if now >= line.until()
            || !line.admit(Ahead { calls: ahead, capacity: st.capacity, seats: st.workers, standing }, now)
        {
            return Err((Refused::Full, job));
        }
        waiting.fetch_add(1, Ordering::Relaxed);
        let me = st.waiters.join(0, now, round);
        drop(st);
        let (mut st, offer) = loop {
            let (mut st, waited) = room::wait(
                || self.state.lock(),
                |st| &mut st.waiters,
                &me,
                line.until(),
                |now| line.recheck(now),
            );
            if waited.is_err() {
                break (st, Offer::Refused(Refused::Full, job));
            }
            match self.offer(&mut st, job, busy, false) {
                // A newcomer took the place: back to the front.
                Offer::Refused(Refused::Full, j) if Instant::now() < line.until() => {
                    job = j;
                    st.waiters.rejoin(&me);
                }
                offer => break (st, offer),
            }
        };
        waiting.fetch_sub(1, Ordering::Relaxed);
        st.waiters.through(Instant::now());
        drop(st);
        Self::deliver(offer)
    }

    /// A worker asks for its next job: on starting, and each time it comes
    /// back from one. Returns `Some(Ok(job))`; `Some(Err(idle))` with the
    /// worker now in the idle stack (poll [`Mailbox::is_posted`] if it likes,
    /// then take the letter with [`Mailbox::wait`]); or `None`: exit (retired, or the queue is closed
    /// and drained).
    pub fn next(&self, me: &Arc<Mailbox<J>>, busy: &AtomicUsize) -> Option<Result<J, Idle>> {
        let (result, woken) = {
            let mut st = self.state.lock();
            st.away -= 1;
            if st.retire > 0 {
                st.retire -= 1;
                return None;
            }
            let result = if let Some(job) = st.jobs.pop_front() {
                st.away += 1;
                busy.fetch_add(1, Ordering::Relaxed);
                self.len.store(st.jobs.len(), Ordering::Relaxed);
                Ok(job)
            } else if !st.open {
                return None;
            } else {
                me.reset();
                st.idle.push(me.clone());
                Err(Idle)
            };
            // A place came free (a queued job left, or this worker is idle).
            (result, st.wake(1))
        };
        woken.unpark();
        Some(result)
    }

    /// Sets the worker count and the capacity. Growing cancels pending
    /// retirements first, then asks for new workers; shrinking retires idle
    /// workers first (the longest idle first) and asks busy ones to exit when
    /// they come back. Queued jobs are never dropped: a smaller capacity only
    /// refuses new submissions.
    pub fn resize(&self, workers: usize, capacity: usize, busy: &AtomicUsize) -> Resized {
        let (handed, retired, woken, start) = {
            let mut st = self.state.lock();
            if !st.open {
                return Resized { start: 0 };
            }
            st.capacity = capacity;
            let (handed, retired, start) = if workers > st.workers {
                let more = workers - st.workers;
                let kept = st.retire.min(more);
                st.retire -= kept;
                st.workers = workers;
                st.away += more - kept;
                (Vec::new(), Vec::new(), more - kept)
            } else {
                // Jobs queued for returning workers first go to idle ones: a
                // returning worker may be the one asked to exit (invariant 1).
                let handed = self.hand_out(&mut st, busy, 0);
                let fewer = st.workers - workers;
                st.workers = workers;
                let from_idle = fewer.min(st.idle.len());
                st.retire += fewer - from_idle;
                (handed, st.idle.drain(..from_idle).collect(), 0)
            };
            // Room may have grown: let every waiter look again.
            let woken = st.wake(usize::MAX);
            (handed, retired, woken, start)
        };
        for (worker, job) in handed {
            worker.post(Letter::Job(job));
        }
        for worker in retired {
            worker.post(Letter::Retire);
        }
        woken.unpark();
        Resized { start }
    }

    /// `n` workers asked for by [`resize`](Self::resize) (or counted by
    /// [`new`](Self::new)) could not be started.
    pub fn not_started(&self, n: usize, busy: &AtomicUsize) {
        let handed = {
            let mut st = self.state.lock();
            st.workers -= n.min(st.workers);
            st.away -= n.min(st.away);
            // Jobs may have been queued for them (invariant 1).
            let returning = st.returning(busy.load(Ordering::Relaxed));
            self.hand_out(&mut st, busy, returning)
        };
        for (worker, job) in handed {
            worker.post(Letter::Job(job));
        }
    }

    /// Under the lock: hands queued jobs to idle workers until no more than
    /// `keep` are left queued or no worker is idle; the letters are posted
    /// by the caller, after unlocking.
    fn hand_out(&self, st: &mut State<J>, busy: &AtomicUsize, keep: usize) -> Vec<(Arc<Mailbox<J>>, J)> {
        let mut handed = Vec::new();
        while st.jobs.len() > keep
            && let Some(worker) = st.idle.pop()
            && let Some(job) = st.jobs.pop_front()
        {
            st.away += 1;
            busy.fetch_add(1, Ordering::Relaxed);
            handed.push((worker, job));
        }
        self.len.store(st.jobs.len(), Ordering::Relaxed);
        handed
    }

    /// Closes the queue: refuses every submission from now on and tells idle
    /// workers to exit; busy ones drain the queue and then exit. `false` if
    /// it was already closed.
    pub fn close(&self) -> bool {
        let (idle, woken) = {
            let mut st = self.state.lock();
            if !st.open {
                return false;
            }
            st.open = false;
            let idle: Vec<_> = st.idle.drain(..).collect();
            // Every waiter looks again, to be refused `Closed`.
            let woken = st.wake(usize::MAX);
            (idle, woken)
        };
        for worker in idle {
            worker.post(Letter::Close);
        }
        woken.unpark();
        true
    }

    /// What the line of callers waiting for room has seen.
    #[cfg(test)]
    pub(crate) fn line_counts(&self) -> room::RoomCounts {
        self.state.lock().waiters.counts
    }

    /// `true` once [`close`](Self::close) has been called.
    pub fn is_closed(&self) -> bool {
        !self.state.lock().open
    }

    /// Takes every queued job out (shutdown's grace is over).
    pub fn drain(&self) -> Vec<J> {
        let mut st = self.state.lock();
        self.len.store(0, Ordering::Relaxed);
        st.jobs.drain(..).collect()
    }
}

/// What a worker is handed through its mailbox.
#[derive(Debug)]
pub enum Letter<J> {
    /// A job to run: the poster has already counted the worker `away` and
    /// `busy`.
    Job(J),
    /// The pool shrank: exit.
    Retire,
    /// The pool shut down (the jobs still queued are the returning
    /// workers', invariant 1): exit.
    Close,
}

/// One idle worker's mailbox. It sits in the idle stack while its worker
/// waits; whoever pops it owns the right to post exactly one letter.
pub struct Mailbox<J> {
    /// Set (`Release`) after the letter is in; the worker spins and parks on
    /// it (`Acquire`).
    posted: AtomicBool,
    letter: Mutex<Option<Letter<J>>>,
    thread: Thread,
}

impl<J> Mailbox<J> {
    /// A mailbox for the calling thread (the worker).
    pub fn for_current_thread() -> Arc<Self> {
        Arc::new(Mailbox { posted: AtomicBool::new(false), letter: Mutex::new(None), thread: current() })
    }

    fn post(&self, letter: Letter<J>) {
        *self.letter.lock() = Some(letter);
        self.posted.store(true, Ordering::Release);
        // After the store: a worker that parks after reading `false` gets
        // the token, one that has not parked yet sees `true`.
        self.thread.unpark();
    }

    /// Empties the mailbox's flag as its worker goes into the idle stack
    /// (under the queue lock; the next poster sets it).
    fn reset(&self) {
        self.posted.store(false, Ordering::Relaxed);
    }

    /// Whether a letter has been posted.
    pub fn is_posted(&self) -> bool {
        self.posted.load(Ordering::Acquire)
    }

    /// Parks until a letter is posted, then takes it.
    pub fn wait(&self) -> Letter<J> {
        while !self.is_posted() {
            // May return spuriously, or for a token left by an earlier
            // letter's unpark: look again.
            park();
        }
        // Only the poster writes, once, before `posted`; only we take.
        self.letter.lock().take().unwrap_or(Letter::Close)
    }
}
