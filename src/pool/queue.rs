//! The pool's queue: the jobs waiting for a worker, the stack of idle
//! workers, and the hand-off between them (a letter in the worker's
//! [`Mailbox`]), all under one lock.
//!
//! Generic over the job type and free of estimates (a submission waiting
//! for room asks its `Line` whether to join and whether to stay, and reads
//! the clock only to time its park), so that `tests/loom_pool.rs` can model
//! check it with plain values. Every shared primitive comes from [`crate::sync`].
//!
//! # The lock and what it protects
//!
//! One `Mutex<State>`: the queued jobs (`VecDeque`), the idle workers (a
//! LIFO `Vec` of mailboxes), the capacity, the worker bookkeeping
//! (`workers`, `retire`, `away`), whether the queue is open, and the callers
//! waiting for room. Every critical section is a few pushes and pops; no
//! user code, no allocation beyond the deque's growth, and no wake-up runs
//! under it (wake-ups are collected and made after unlocking).
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

use crate::sync::{Arc, AtomicBool, AtomicUsize, Mutex, Ordering, Thread, current, park, park_timeout};

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
pub trait Line {
    /// The latest moment to wait until.
    fn until(&self) -> Instant;
    /// Under the queue lock, once: whether a caller may wait, with `ahead`
    /// as the line stands. Plain arithmetic on what it is handed and what
    /// the caller read before: no other lock.
    fn admit(&self, ahead: Ahead, now: Instant) -> bool;
    /// Outside the lock, right after admission and then when the moment it
    /// named comes: `None` to give up (the line has stopped moving), else
    /// when to look again.
    fn recheck(&self, now: Instant) -> Option<Instant>;
}

/// The line as a caller about to join it finds it.
#[derive(Debug, Clone, Copy)]
pub struct Ahead {
    /// Calls ahead of it: queued, or waiting for room.
    pub calls: usize,
    /// The queue's capacity.
    pub capacity: usize,
    /// The workers.
    pub workers: usize,
    /// How long callers have waited for room without a break (zero when
    /// nobody waits).
    pub standing: Duration,
}

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
    /// Submitters waiting (`max_wait`) for room; woken one at a time.
    room_waiters: VecDeque<Thread>,
    /// Since when callers have waited for room without a break (`None`
    /// while nobody waits): a line older than a burst is a standing one.
    line_since: Option<Instant>,
}

impl<J> State<J> {
    /// Workers that have answered (or are starting) and will take a queued
    /// job as soon as they reach the lock, minus those that will exit.
    fn returning(&self, busy: usize) -> usize {
        self.away.saturating_sub(busy).saturating_sub(self.retire)
    }

    fn has_room(&self, busy: usize) -> bool {
        !self.idle.is_empty() || self.jobs.len() < self.capacity + self.returning(busy)
    }
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
                room_waiters: VecDeque::new(),
                line_since: None,
            }),
            len: StdAtomicUsize::new(0),
        }
    }

    /// Jobs waiting (a relaxed read; no lock).
    pub fn queued(&self) -> usize {
        self.len.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Offers `job`: into the queue for a worker about to come back if one
    /// is free (no wake-up); else to the most recently idle worker if there
    /// is one (the likeliest to be still polling its mailbox); else into the
    /// queue if there is room (capacity, plus one place for each worker
    /// about to come back). `busy` is the pool's busy counter: raised here
    /// for a job handed to a worker.
    pub fn push(&self, job: J, busy: &AtomicUsize) -> Result<Accepted, (Refused, J)> {
        let mut st = self.state.lock();
        if !st.open {
            return Err((Refused::Closed, job));
        }
        // A worker about to come back takes a queued job with no wake-up
        // (invariant 1): wake a parked one only when every returning worker
        // has a job already.
        let busy_now = busy.load(std::sync::atomic::Ordering::Relaxed);
        let returning_free = st.returning(busy_now) > st.jobs.len();
        if !returning_free && let Some(worker) = st.idle.pop() {
            st.away += 1;
            busy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(st);
            worker.post(Letter::Job(job));
            return Ok(Accepted::Handed);
        }
        if st.jobs.len() < st.capacity + st.returning(busy_now) {
            st.jobs.push_back(job);
            self.len.store(st.jobs.len(), std::sync::atomic::Ordering::Relaxed);
            return Ok(Accepted::Queued);
        }
        Err((Refused::Full, job))
    }

    /// Whether a worker waits in the idle stack right now.
    pub fn has_idle(&self) -> bool {
        !self.state.lock().idle.is_empty()
    }

    /// Hands `job` to an idle worker, and only to one: a hedge, which must
    /// never wait in the queue. Refused (`Full`) when no worker is idle in
    /// the stack right now, even if one is about to come back.
    pub fn push_to_idle(&self, job: J, busy: &AtomicUsize) -> Result<Accepted, (Refused, J)> {
        let mut st = self.state.lock();
        if !st.open {
            return Err((Refused::Closed, job));
        }
        let Some(worker) = st.idle.pop() else {
            return Err((Refused::Full, job));
        };
        st.away += 1;
        busy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        drop(st);
        worker.post(Letter::Job(job));
        Ok(Accepted::Handed)
    }

    /// [`push`](Self::push), waiting (parked) for room when the pool is
    /// full, as `line` allows. `waiting` is raised while it waits (only
    /// under this lock, so `line.admit` reads an exact count).
    pub fn push_until(
        &self,
        mut job: J,
        line: &dyn Line,
        busy: &AtomicUsize,
        waiting: &StdAtomicUsize,
    ) -> Result<Accepted, (Refused, J)> {
        // `Some` once registered as a waiter: when to ask `line` again.
        let mut check: Option<Instant> = None;
        let result = loop {
            match self.push(job, busy) {
                Err((Refused::Full, j)) => job = j,
                done => break done,
            }
            // Outside the lock: whether the line still moves.
            let now = Instant::now();
            if let Some(at) = check
                && now >= at
            {
                match line.recheck(now) {
                    Some(next) => check = Some(next),
                    None => break Err((Refused::Full, job)),
                }
            }
            if now >= line.until() {
                break Err((Refused::Full, job));
            }
            let mut st = self.state.lock();
            // Room may have come between the two locks: try again at once.
            if st.has_room(busy.load(std::sync::atomic::Ordering::Relaxed)) || !st.open {
                continue;
            }
            if check.is_none() {
                // The calls ahead of this one: the queued jobs, and the
                // callers already waiting for room.
                let waiters = waiting.load(std::sync::atomic::Ordering::Relaxed);
                let ahead = st.jobs.len() + waiters;
                let standing =
                    st.line_since.map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
                if !line
                    .admit(Ahead { calls: ahead, capacity: st.capacity, workers: st.workers, standing }, now)
                {
                    break Err((Refused::Full, job));
                }
                // Whether the line moves is asked outside the lock, at once.
                check = Some(now);
                if waiters == 0 {
                    st.line_since = Some(now);
                }
                waiting.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let until = check.map_or(line.until(), |at| at.min(line.until()));
            st.room_waiters.push_back(current());
            drop(st);
            park_timeout(until.saturating_duration_since(now));
            // Whoever woke us popped us; a timeout or a spurious wake-up
            // leaves us listed: take ourselves off.
            let me = current().id();
            let mut st = self.state.lock();
            st.room_waiters.retain(|t| t.id() != me);
        };
        if check.is_some() {
            let mut st = self.state.lock();
            // Lowered under the lock, as it is raised.
            if waiting.fetch_sub(1, std::sync::atomic::Ordering::Relaxed) == 1 {
                st.line_since = None;
            }
        }
        if result.is_err() {
            // A wake-up meant for us may have come with room we did not
            // use: pass it on.
            let next = {
                let st = self.state.lock();
                if st.has_room(busy.load(std::sync::atomic::Ordering::Relaxed)) {
                    st.room_waiters.front().cloned()
                } else {
                    None
                }
            };
            if let Some(t) = next {
                t.unpark();
            }
        }
        result
    }

    /// A worker asks for its next job: on starting, and each time it comes
    /// back from one. Returns `Some(Ok(job))`; `Some(Err(idle))` with the
    /// worker now in the idle stack (poll [`Mailbox::is_posted`] if it likes,
    /// then take the letter with [`Mailbox::wait`]); or `None`: exit (retired, or the queue is closed
    /// and drained).
    pub fn next(&self, me: &Arc<Mailbox<J>>, busy: &AtomicUsize) -> Option<Result<J, Idle>> {
        let (result, waiter) = {
            let mut st = self.state.lock();
            st.away -= 1;
            if st.retire > 0 {
                st.retire -= 1;
                return None;
            }
            if let Some(job) = st.jobs.pop_front() {
                st.away += 1;
                busy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.len.store(st.jobs.len(), std::sync::atomic::Ordering::Relaxed);
                (Ok(job), st.room_waiters.pop_front())
            } else if !st.open {
                return None;
            } else {
                me.reset();
                st.idle.push(me.clone());
                // A hand-off waiter can now use this worker.
                (Err(Idle), st.room_waiters.pop_front())
            }
        };
        if let Some(t) = waiter {
            t.unpark();
        }
        Some(result)
    }

    /// Sets the worker count and the capacity. Growing cancels pending
    /// retirements first, then asks for new workers; shrinking retires idle
    /// workers first (the longest idle first) and asks busy ones to exit when
    /// they come back. Queued jobs are never dropped: a smaller capacity only
    /// refuses new submissions.
    pub fn resize(&self, workers: usize, capacity: usize, busy: &AtomicUsize) -> Resized {
        let (handed, retired, waiters, start) = {
            let mut st = self.state.lock();
            if !st.open {
                return Resized { start: 0 };
            }
            st.capacity = capacity;
            let mut retired = Vec::new();
            let mut handed = Vec::new();
            let mut start = 0;
            if workers > st.workers {
                let more = workers - st.workers;
                let kept = st.retire.min(more);
                st.retire -= kept;
                start = more - kept;
                st.workers = workers;
                st.away += start;
            } else {
                // Jobs queued for returning workers first go to idle ones: a
                // returning worker may be the one asked to exit (invariant 1).
                handed = self.hand_out(&mut st, busy, 0);
                let fewer = st.workers - workers;
                st.workers = workers;
                let from_idle = fewer.min(st.idle.len());
                retired = st.idle.drain(..from_idle).collect();
                st.retire += fewer - from_idle;
            }
            // Room may have grown: let every waiter look again.
            let waiters: Vec<Thread> = st.room_waiters.drain(..).collect();
            (handed, retired, waiters, start)
        };
        for (worker, job) in handed {
            worker.post(Letter::Job(job));
        }
        for worker in retired {
            worker.post(Letter::Retire);
        }
        for t in waiters {
            t.unpark();
        }
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
            let returning = st.returning(busy.load(std::sync::atomic::Ordering::Relaxed));
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
            busy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            handed.push((worker, job));
        }
        self.len.store(st.jobs.len(), std::sync::atomic::Ordering::Relaxed);
        handed
    }

    /// Closes the queue: refuses every submission from now on and tells idle
    /// workers to exit; busy ones drain the queue and then exit. `false` if
    /// it was already closed.
    pub fn close(&self) -> bool {
        let (idle, waiters) = {
            let mut st = self.state.lock();
            if !st.open {
                return false;
            }
            st.open = false;
            let idle: Vec<_> = st.idle.drain(..).collect();
            let waiters: Vec<Thread> = st.room_waiters.drain(..).collect();
            (idle, waiters)
        };
        for worker in idle {
            worker.post(Letter::Close);
        }
        for t in waiters {
            t.unpark();
        }
        true
    }

    /// `true` once [`close`](Self::close) has been called.
    pub fn is_closed(&self) -> bool {
        !self.state.lock().open
    }

    /// Takes every queued job out (shutdown's grace is over).
    pub fn drain(&self) -> Vec<J> {
        let mut st = self.state.lock();
        let jobs: Vec<J> = st.jobs.drain(..).collect();
        self.len.store(0, std::sync::atomic::Ordering::Relaxed);
        jobs
    }
}

// A worker's mailbox: how an idle worker is handed its next letter (a job,
// or word to exit) by whoever pops it from the idle stack.

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

    pub(super) fn post(&self, letter: Letter<J>) {
        *self.letter.lock() = Some(letter);
        self.posted.store(true, Ordering::Release);
        // After the store: a worker that parks after reading `false` gets
        // the token, one that has not parked yet sees `true`.
        self.thread.unpark();
    }

    /// Empties the mailbox's flag as its worker goes into the idle stack
    /// (under the queue lock; the next poster sets it).
    pub(super) fn reset(&self) {
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
