//! [`Room`]: a count of seats with shares kept per class, and a FIFO wait
//! for a seat until a deadline, admitted only when the wait it can expect
//! fits. One primitive for every "wait for room" outside the pool's queue:
//! caller-thread mode's permits (a semaphore bulkhead), and the request
//! pool of a server that is not this crate's own.
//!
//! # Seats and classes
//!
//! A room has `limit` seats. Each class of caller (a small index given at
//! construction) may hold at most `limit - kept[class]` of them: a class
//! with `kept = 0` may take any free seat, one with `kept = 2` leaves the
//! last two to the others. That is a reserved share: the request pool's
//! ordinary requests are a class that keeps the reserve's seats; reserved
//! requests are a class that keeps none.
//!
//! # The protocol
//!
//! One lock guards the counts, the limit and the FIFO of waiters. Each
//! waiter is an `Arc<Waiter>` holding its thread, its class and a `granted`
//! flag, written only under the lock.
//!
//! - **acquire**: a seat is taken at once when the caller's class has one
//!   free. Invariant (at every unlock): no waiter's class has a free seat;
//!   every change that frees seats grants waiters first. So a newcomer that
//!   finds a seat free for its class never passes a waiter of its class (who
//!   would have had it), and FIFO holds within a class.
//! - Otherwise the caller may wait, until its deadline and `max_wait`, when
//!   the wait it can expect fits (see "Admission by time"). It queues itself
//!   and parks until granted, until its wait ends, or until the line is
//!   found stuck. On giving up it takes the lock again: if it was granted in
//!   the meantime it keeps the seat (the grant and the give-up raced; the
//!   seat is not lost), else it leaves the queue, so a waiter that gives up
//!   never holds a place.
//! - **release** (the [`Seat`]'s drop, on a panic too): a seat above the
//!   limit (the room was shrunk) is absorbed; else it passes straight to the
//!   first waiter whose class may take it (`granted` set, then unparked after
//!   the lock is released: a wake-up is never lost, since the waiter reads
//!   `granted` under the lock before parking and after every wake-up).
//! - **resize**: a larger limit grants waiters at once; a smaller one is
//!   absorbed as seats come back. Nothing blocks.
//!
//! # Admission by time
//!
//! The room learns how long a seat is held (the smoothed mean of every
//! seat's hold, [`Latency`]). A caller that finds no seat is admitted to the
//! line only when `mean x rounds` fits its wait, where `rounds` is the calls
//! ahead of it (the waiters, and itself) shared among its class's seats.
//! Before the first hold is timed, nothing is expected and `max_wait` and
//! the deadline alone bound the wait. Two more rules, the pool's own:
//!
//! - A line that has stood without a break for longer than `max_wait` is a
//!   standing one: a caller joins it only if room comes within one mean hold.
//! - A line that does not move is not waited in: when no seat has come back
//!   for [`STUCK_AFTER`] normal holds (at least [`STUCK_FLOOR`]) while every
//!   seat is taken, callers are refused at once and waiters leave.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::latency::Latency;
use crate::time::deadline_after;

/// A line is stuck when no seat has come back for this many normal holds.
pub(crate) const STUCK_AFTER: u32 = 3;

/// The least time a line is judged stuck after, so that a fast room is not
/// judged on a scheduler's hiccup.
pub(crate) const STUCK_FLOOR: Duration = Duration::from_millis(20);

/// Why a [`Room`] gave no seat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoSeat {
    /// The wait the caller could expect passed `max_wait` or its deadline,
    /// or `max_wait` is zero: refused on arrival.
    Full,
    /// It waited, and `max_wait` ended the wait.
    Waited,
    /// The caller's own deadline ended its wait (or had passed on arrival).
    Deadline,
    /// No seat had come back for several normal holds: the line did not move.
    Stuck,
}

impl NoSeat {
    /// A label for logs and metrics: `full`, `waited`, `deadline`, `stuck`.
    pub fn as_str(self) -> &'static str {
        match self {
            NoSeat::Full => "full",
            NoSeat::Waited => "waited",
            NoSeat::Deadline => "deadline",
            NoSeat::Stuck => "stuck",
        }
    }
}

/// A line of callers waiting for a seat: how many are ahead of the next
/// one, and since when it has stood without a break (`None`: nobody waits).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Line {
    pub(crate) ahead: usize,
    pub(crate) since: Option<Instant>,
}

struct Waiter {
    thread: Thread,
    class: usize,
    /// Set under the lock when a seat is handed to this waiter.
    granted: AtomicBool,
}

struct State {
    limit: usize,
    in_use: usize,
    /// Seats held per class.
    held: Vec<usize>,
    waiters: VecDeque<Arc<Waiter>>,
    /// Since when callers have waited without a break (`None` while nobody waits).
    line_since: Option<Instant>,
    /// When a seat last came back, or the room last filled: what the stuck
    /// rule measures from.
    moved: Instant,
}

impl State {
    fn free_for(&self, class: usize, kept: &[usize]) -> bool {
        let ceiling = self.limit.saturating_sub(kept[class]);
        self.in_use < self.limit && self.held[class] < ceiling
    }

    fn take(&mut self, class: usize) {
        self.in_use += 1;
        self.held[class] += 1;
    }

    /// Grants waiters, first come first served among those whose class has
    /// a free seat, until none has: the invariant of the module docs.
    fn grant(&mut self, kept: &[usize]) -> Vec<Arc<Waiter>> {
        let mut granted = Vec::new();
        let mut i = 0;
        while i < self.waiters.len() && self.in_use < self.limit {
            let class = self.waiters[i].class;
            if self.free_for(class, kept) {
                let w = self.waiters.remove(i).expect("in range");
                w.granted.store(true, Relaxed);
                self.take(class);
                granted.push(w);
            } else {
                i += 1;
            }
        }
        if self.waiters.is_empty() {
            self.line_since = None;
        }
        granted
    }
}

/// Seats, shares kept per class, and a FIFO wait admitted by time (see the
/// module docs). Cheap to clone: clones share the seats.
///
/// ```
/// use std::time::{Duration, Instant};
/// use watertight::pool::Room;
///
/// let room = Room::new(2, Duration::from_millis(10))?;
/// let deadline = Instant::now() + Duration::from_secs(1);
/// let a = room.acquire(deadline).expect("free");
/// let _b = room.acquire(deadline).expect("free");
/// // Full: this caller waits at most 10 ms, then is refused.
/// assert!(room.acquire(deadline).is_none());
/// drop(a); // given back by the seat, on a panic too
/// assert!(room.acquire(deadline).is_some());
///
/// // Two classes: the first keeps 1 seat of 3 for the second.
/// let shared = Room::with_shares(3, Duration::ZERO, &[1, 0])?;
/// let first: Vec<_> = (0..2).map(|_| shared.acquire_as(0, deadline).unwrap()).collect();
/// assert!(shared.acquire_as(0, deadline).is_err(), "the kept seat");
/// assert!(shared.acquire_as(1, deadline).is_ok());
/// # drop(first);
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Room {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Seats each class leaves to the others (see the module docs).
    kept: Vec<usize>,
    max_wait_ns: AtomicU64,
    /// How long a seat is held, per class: the classes of a request pool
    /// hold theirs for very different times (a health check, a search).
    hold: Vec<Latency>,
}

/// A seat of a [`Room`]; dropping it gives the seat back.
#[must_use = "dropping a Seat gives it back at once"]
pub struct Seat {
    inner: Arc<Inner>,
    class: usize,
    since: Instant,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn check(limit: usize, max_wait: Duration) -> Result<(), crate::ConfigError> {
    if limit == 0 {
        return Err(crate::ConfigError::new("max_concurrent", "at least 1", limit));
    }
    if max_wait > Duration::from_secs(60) {
        return Err(crate::ConfigError::new("max_wait", "at most one minute", format!("{max_wait:?}")));
    }
    Ok(())
}

impl Room {
    /// `limit` seats, one class; a caller finding none free waits at most
    /// `max_wait` (at most one minute), when the wait it can expect fits.
    pub fn new(limit: usize, max_wait: Duration) -> Result<Room, crate::ConfigError> {
        Self::with_shares(limit, max_wait, &[0])
    }

    /// `limit` seats for `kept.len()` classes (at least one), of which class
    /// `c` may hold at most `limit - kept[c]`.
    pub fn with_shares(limit: usize, max_wait: Duration, kept: &[usize]) -> Result<Room, crate::ConfigError> {
        check(limit, max_wait)?;
        let kept = if kept.is_empty() { vec![0] } else { kept.to_vec() };
        let hold = kept.iter().map(|_| Latency::default()).collect();
        Ok(Room {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    limit,
                    in_use: 0,
                    held: vec![0; kept.len()],
                    waiters: VecDeque::new(),
                    line_since: None,
                    moved: Instant::now(),
                }),
                kept,
                max_wait_ns: AtomicU64::new(ns(max_wait)),
                hold,
            }),
        })
    }

    /// A seat of the first class, at once or after a wait that ends by
    /// `deadline` and lasts at most `max_wait`; `None` when none came.
    pub fn acquire(&self, deadline: Instant) -> Option<Seat> {
        self.acquire_as(0, deadline).ok()
    }

    /// A seat for `class` (out of range reads as the last class), at once
    /// or after a wait admitted by time (see the module docs) that ends by
    /// `deadline` and lasts at most `max_wait`; else why not.
    pub fn acquire_as(&self, class: usize, deadline: Instant) -> Result<Seat, NoSeat> {
        self.acquire_timed(class, deadline).map(|(seat, _)| seat)
    }

    /// [`acquire_as`](Self::acquire_as), and whether the caller waited.
    pub(crate) fn acquire_timed(&self, class: usize, deadline: Instant) -> Result<(Seat, bool), NoSeat> {
        let inner = &self.inner;
        let class = class.min(inner.kept.len() - 1);
        let mut st = inner.state.lock();
        let now = Instant::now();
        if let Some(seat) = self.take_seat(&mut st, class, now) {
            return Ok((seat, false));
        }
        let until =
            self.may_wait(&st, class, now, deadline, Line { ahead: st.waiters.len(), since: st.line_since })?;
        let me = Arc::new(Waiter { thread: thread::current(), class, granted: AtomicBool::new(false) });
        if st.waiters.is_empty() {
            st.line_since = Some(now);
        }
        st.waiters.push_back(Arc::clone(&me));
        loop {
            if me.granted.load(Relaxed) {
                return Ok((self.seat(class, Instant::now()), true));
            }
            let now = Instant::now();
            let gave_up = if now >= until {
                Some(if until == deadline { NoSeat::Deadline } else { NoSeat::Waited })
            } else if self.stuck(&st, class, now) {
                Some(NoSeat::Stuck)
            } else {
                None
            };
            if let Some(why) = gave_up {
                // Leave the queue, so the place goes to the next one.
                st.waiters.retain(|w| !Arc::ptr_eq(w, &me));
                if st.waiters.is_empty() {
                    st.line_since = None;
                }
                return Err(why);
            }
            let wake = until.min(self.next_check(&st, class, now));
            drop(st);
            thread::park_timeout(wake.saturating_duration_since(now));
            st = inner.state.lock();
        }
    }

    fn seat(&self, class: usize, since: Instant) -> Seat {
        Seat { inner: Arc::clone(&self.inner), class, since }
    }

    /// Under the lock, for a caller of `class` that found no seat: until
    /// when it may wait in `line`, or why it may not (see "Admission by time"
    /// in the module docs).
    fn may_wait(
        &self,
        st: &State,
        class: usize,
        now: Instant,
        deadline: Instant,
        line: Line,
    ) -> Result<Instant, NoSeat> {
        if deadline <= now {
            return Err(NoSeat::Deadline);
        }
        let max_wait = self.max_wait();
        let until = deadline.min(deadline_after(now, max_wait));
        if until <= now {
            return Err(NoSeat::Full);
        }
        if self.stuck(st, class, now) {
            return Err(NoSeat::Stuck);
        }
        let mean = self.inner.hold[class].mean().unwrap_or(Duration::ZERO);
        let seats = st.limit.saturating_sub(self.inner.kept[class]).max(1);
        let rounds = u32::try_from((line.ahead + 1).div_ceil(seats)).unwrap_or(u32::MAX);
        let expected = mean.saturating_mul(rounds);
        let standing = line.since.is_some_and(|since| now.saturating_duration_since(since) > max_wait);
        let allowed = if standing { max_wait.min(mean) } else { max_wait };
        if expected <= allowed && deadline_after(now, expected) < deadline {
            Ok(until)
        } else {
            Err(NoSeat::Full)
        }
    }

    /// For a line kept outside the room (the crate's own server keeps its
    /// waiting requests, not its threads, in line): a seat for `class` if one
    /// is free now, else until when a caller with `deadline` may wait behind
    /// `line`, or why it may not. The caller keeps the line and asks
    /// [`try_seat`](Self::try_seat) again as seats come back.
    #[cfg(feature = "tiny_http")]
    pub(crate) fn seat_or_wait(
        &self,
        class: usize,
        deadline: Instant,
        line: Line,
    ) -> Result<Seat, Result<Instant, NoSeat>> {
        let class = class.min(self.inner.kept.len() - 1);
        let mut st = self.inner.state.lock();
        let now = Instant::now();
        match self.take_seat(&mut st, class, now) {
            Some(seat) => Ok(seat),
            None => Err(self.may_wait(&st, class, now, deadline, line)),
        }
    }

    /// A seat for `class` if one is free now.
    #[cfg(feature = "tiny_http")]
    pub(crate) fn try_seat(&self, class: usize) -> Option<Seat> {
        let class = class.min(self.inner.kept.len() - 1);
        let mut st = self.inner.state.lock();
        self.take_seat(&mut st, class, Instant::now())
    }

    /// Whether `class` has no free seat and none of its seats has come back
    /// for several normal holds: a line behind it would not move.
    #[cfg(feature = "tiny_http")]
    pub(crate) fn is_stuck(&self, class: usize) -> bool {
        let class = class.min(self.inner.kept.len() - 1);
        let st = self.inner.state.lock();
        self.stuck(&st, class, Instant::now())
    }

    /// Under the lock: a seat for `class` if it has one free.
    fn take_seat(&self, st: &mut State, class: usize, now: Instant) -> Option<Seat> {
        if !st.free_for(class, &self.inner.kept) {
            return None;
        }
        st.take(class);
        if st.in_use == st.limit {
            st.moved = now;
        }
        Some(self.seat(class, now))
    }

    /// The time after which a class with no free seat, none of whose seats
    /// has come back, is stuck; `None` before its first hold is timed.
    fn stuck_after(&self, class: usize) -> Option<Duration> {
        let normal = self.inner.hold[class].normal()?;
        Some(normal.saturating_mul(STUCK_AFTER).max(STUCK_FLOOR))
    }

    fn stuck(&self, st: &State, class: usize, now: Instant) -> bool {
        !st.free_for(class, &self.inner.kept)
            && self.stuck_after(class).is_some_and(|after| now.saturating_duration_since(st.moved) >= after)
    }

    /// When the stuck rule could first hold, for a waiter's park.
    fn next_check(&self, st: &State, class: usize, now: Instant) -> Instant {
        match self.stuck_after(class) {
            Some(after) => deadline_after(st.moved, after).max(now),
            None => deadline_after(now, Duration::from_secs(3600)),
        }
    }

    /// Seats held now.
    pub fn in_use(&self) -> usize {
        self.inner.state.lock().in_use
    }

    /// Seats held now by `class`.
    pub fn held_by(&self, class: usize) -> usize {
        self.inner.state.lock().held.get(class).copied().unwrap_or(0)
    }

    /// Callers waiting for a seat now.
    pub fn waiting(&self) -> usize {
        self.inner.state.lock().waiters.len()
    }

    /// The longest a caller waits for a seat.
    pub fn max_wait(&self) -> Duration {
        Duration::from_nanos(self.inner.max_wait_ns.load(Relaxed))
    }

    /// The seats in force.
    pub fn limit(&self) -> usize {
        self.inner.state.lock().limit
    }

    /// The mean time a seat of `class` has been held, `None` before the first.
    pub fn mean_hold(&self, class: usize) -> Option<Duration> {
        self.inner.hold.get(class)?.mean()
    }

    /// Changes the seats and the wait while seats are held: more seats are
    /// handed to waiters at once; fewer are absorbed as seats come back.
    pub fn resize(&self, limit: usize, max_wait: Duration) -> Result<(), crate::ConfigError> {
        check(limit, max_wait)?;
        self.inner.max_wait_ns.store(ns(max_wait), Relaxed);
        let granted = {
            let mut st = self.inner.state.lock();
            st.limit = limit;
            st.grant(&self.inner.kept)
        };
        for w in granted {
            w.thread.unpark();
        }
        Ok(())
    }
}

impl Seat {
    /// The class the seat was taken for.
    pub fn class(&self) -> usize {
        self.class
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let now = Instant::now();
        self.inner.hold[self.class].record(now.saturating_duration_since(self.since));
        let granted = {
            let mut st = self.inner.state.lock();
            st.in_use -= 1;
            st.held[self.class] -= 1;
            st.moved = now;
            st.grant(&self.inner.kept)
        };
        for w in granted {
            w.thread.unpark();
        }
    }
}

impl fmt::Debug for Room {
    /// Never blocks: prints `<locked>` while the state is locked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.inner.state.try_lock() {
            Some(st) => f
                .debug_struct("Room")
                .field("in_use", &st.in_use)
                .field("limit", &st.limit)
                .field("held", &st.held)
                .field("waiting", &st.waiters.len())
                .finish(),
            None => f.write_str("Room(<locked>)"),
        }
    }
}

impl fmt::Debug for Seat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Seat").field("class", &self.class).finish()
    }
}

#[cfg(test)]
mod tests;
