//! [`Room`]: a count of seats with shares kept per class, and a FIFO wait
//! for a seat until a deadline, admitted only when the wait it can expect
//! fits. One primitive for every "wait for room": caller-thread mode's
//! permits (a semaphore bulkhead), the request pools, and, through
//! [`Waiters`] and [`wait`], the pool's queue (whose room is its idle
//! workers and queue places, counted under its own lock).
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
//! The room learns how long a seat is held (the smoothed mean of the
//! holds, [`Latency`]: every hold of a seat taken while the room is more
//! than half full, one in [`SAMPLE_QUIET`] while it is quieter). A caller
//! that finds no seat is admitted to the line by [`admits`]: `mean x rounds`,
//! `rounds` being the calls ahead of it (the waiters, and itself) shared
//! among its class's seats, fits its wait, and a standing line
//! ([`Standing`]) is joined only for room within one mean hold. Before the
//! first hold is timed, nothing is expected and `max_wait` and the deadline
//! alone bound the wait. A line that does not move is not waited in: when no
//! seat has come back for [`stuck_after`] the normal hold since its class
//! filled, callers are refused at once and waiters leave. The pool's queue
//! judges its line by the same two functions.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::latency::Latency;
use crate::sync::{Arc, AtomicBool, Mutex, Ordering, Thread, current, park_timeout};
use crate::time::deadline_after;

/// A line is stuck when no seat has come back for this many normal holds.
const STUCK_AFTER: u32 = 3;

/// The least time a line is judged stuck after, so that a fast room is not
/// judged on a scheduler's hiccup.
#[cfg(not(loom))]
const STUCK_FLOOR: Duration = Duration::from_millis(20);
/// Under loom, which models no time, the stuck rule (a clock reading) is
/// kept out of the model: no model runs this long.
#[cfg(loom)]
const STUCK_FLOOR: Duration = Duration::from_secs(3600);

/// While a room is less than half full, one seat in this many has its hold
/// timed: each timing costs two clock reads, and the holds that matter for
/// a wait are those of a busy room, every one of which is timed.
const SAMPLE_QUIET: u32 = 16;

/// How long a line whose holds normally take `normal` may go without one
/// coming back before it is stuck: [`STUCK_AFTER`] of them, at least
/// [`STUCK_FLOOR`].
pub(crate) fn stuck_after(normal: Duration) -> Duration {
    normal.saturating_mul(STUCK_AFTER).max(STUCK_FLOOR)
}

/// Whether a caller may join a line (see "Admission by time"): room expected
/// within `for_room`, no later than `max_wait` (within one `mean` hold once
/// the line has `stood` longer than `max_wait`), and served, `for_served`
/// from `now`, before its `deadline`.
pub(crate) fn admits(
    for_room: Duration,
    for_served: Duration,
    mean: Duration,
    stood: Duration,
    max_wait: Duration,
    now: Instant,
    deadline: Instant,
) -> bool {
    let allowed = if stood > max_wait { max_wait.min(mean) } else { max_wait };
    for_room <= allowed && deadline_after(now, for_served) < deadline
}

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
/// one, and since when it has stood.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Line {
    pub(crate) ahead: usize,
    pub(crate) standing: Standing,
}

/// Since when a line has stood. A break shorter than `round` (one mean
/// hold, named by the owner) does not end it: a closed loop of callers
/// whose line empties for an instant, as a round of holds ends together and
/// they come back, is still a standing line. As CoDel judges a queue over
/// an interval, not by its emptiest instant.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Standing {
    since: Option<Instant>,
    /// When the line last emptied, while it has not formed again.
    emptied: Option<Instant>,
}

impl Standing {
    /// The line, empty, has a caller again.
    pub(crate) fn formed(&mut self, now: Instant, round: Duration) {
        if self.stood(now, round).is_zero() {
            self.since = Some(now);
        }
        self.emptied = None;
    }

    /// A waiter went back to the front: the line goes on, unbroken.
    fn resumed(&mut self) {
        self.emptied = None;
    }

    /// The line has emptied.
    pub(crate) fn emptied(&mut self, now: Instant) {
        if self.since.is_some() {
            self.emptied.get_or_insert(now);
        }
    }

    /// How long the line has stood as of `now` (zero after a break of at
    /// least `round`).
    pub(crate) fn stood(&self, now: Instant, round: Duration) -> Duration {
        match (self.since, self.emptied) {
            (Some(since), None) => now.saturating_duration_since(since),
            (Some(since), Some(at)) if now.saturating_duration_since(at) < round => {
                now.saturating_duration_since(since)
            }
            _ => Duration::ZERO,
        }
    }
}

/// What a room's line has seen since it was made (see [`Room::counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoomCounts {
    /// Seats given: at once, or after a wait.
    pub seated: u64,
    /// Callers that joined the line.
    pub waited: u64,
    /// Callers refused: on arrival, or after waiting.
    pub refused: u64,
}

/// One caller in a line of [`Waiters`].
pub(crate) struct Waiter {
    thread: Thread,
    class: usize,
    /// Set under the owner's lock when room is handed to this waiter.
    granted: AtomicBool,
}

/// A FIFO of callers waiting for room, kept under its owner's lock (the
/// room's, or the pool queue's): the one line of the crate. What "room" is
/// stays with the owner, which grants it with [`grant`](Self::grant) and
/// wakes the granted with [`Woken::unpark`] after unlocking.
#[derive(Default)]
pub(crate) struct Waiters {
    line: VecDeque<Arc<Waiter>>,
    standing: Standing,
    pub(crate) counts: RoomCounts,
}

/// Waiters granted room under a lock, to unpark once it is released.
#[must_use = "granted waiters must be unparked"]
pub(crate) struct Woken(Vec<Arc<Waiter>>);

impl Woken {
    #[inline]
    pub(crate) fn unpark(self) {
        for w in self.0 {
            w.thread.unpark();
        }
    }
}

impl Waiters {
    pub(crate) fn len(&self) -> usize {
        self.line.len()
    }

    /// The line as a newcomer finds it.
    pub(crate) fn line(&self) -> Line {
        Line { ahead: self.line.len(), standing: self.standing }
    }

    /// Queues the calling thread, of `class`, at the back. `round` is one
    /// mean hold of the line: a break shorter than it does not end it.
    pub(crate) fn join(&mut self, class: usize, now: Instant, round: Duration) -> Arc<Waiter> {
        let me = Arc::new(Waiter { thread: current(), class, granted: AtomicBool::new(false) });
        if self.line.is_empty() {
            self.standing.formed(now, round);
        }
        self.counts.waited += 1;
        self.line.push_back(Arc::clone(&me));
        me
    }

    /// Puts a waiter granted room that it could not use back at the front:
    /// it never stopped waiting, so the line goes on without a break.
    pub(crate) fn rejoin(&mut self, me: &Arc<Waiter>) {
        me.granted.store(false, Ordering::Relaxed);
        self.line.push_front(Arc::clone(me));
        self.standing.resumed();
    }

    /// A granted waiter is through (it has its room): if nobody is left in
    /// line, the line has a break from `now`. Not at the grant itself: a
    /// waiter of the pool's line, woken to offer its job again, may find the
    /// place taken and [`rejoin`](Self::rejoin).
    pub(crate) fn through(&mut self, now: Instant) {
        if self.line.is_empty() {
            self.standing.emptied(now);
        }
    }

    fn leave(&mut self, me: &Arc<Waiter>, now: Instant) {
        self.line.retain(|w| !Arc::ptr_eq(w, me));
        self.counts.refused += 1;
        self.through(now);
    }

    /// Grants room first come first served to each waiter for whose class
    /// `take` finds (and takes) some; those it refuses keep their place.
    pub(crate) fn grant(&mut self, mut take: impl FnMut(usize) -> bool) -> Woken {
        let mut woken = Vec::new();
        let mut i = 0;
        while i < self.line.len() {
            if take(self.line[i].class) {
                let w = self.line.remove(i).expect("in range");
                w.granted.store(true, Ordering::Relaxed);
                woken.push(w);
            } else {
                i += 1;
            }
        }
        Woken(woken)
    }
}

/// Why a [`wait`] ended without room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GaveUp {
    /// `until` came.
    Until,
    /// The owner's recheck found the line stuck.
    Stuck,
}

/// The one FIFO wait for room until a deadline: `me` (already joined to the
/// [`Waiters`] that `line` finds under the lock `lock` takes) parks until it
/// is granted, until `until`, or until `recheck` (asked at once, then when
/// the moment it names comes, always outside the lock) answers `None`: the
/// line has stopped moving. Returns the lock held; on giving up, `me` has
/// left the line, so it never holds a place. The owner calls
/// [`Waiters::through`] once a granted waiter is through. A grant racing a give-up wins:
/// the room is not lost. No wake-up is lost either: `granted` is read under
/// the lock before each park, and set under it before the unpark.
pub(crate) fn wait<G>(
    mut lock: impl FnMut() -> G,
    line: impl Fn(&mut G) -> &mut Waiters,
    me: &Arc<Waiter>,
    until: Instant,
    mut recheck: impl FnMut(Instant) -> Option<Instant>,
) -> (G, Result<(), GaveUp>) {
    let mut next = Instant::now();
    loop {
        let now = Instant::now();
        let stuck = now >= next
            && match recheck(now) {
                Some(at) => {
                    next = at;
                    false
                }
                None => true,
            };
        let mut guard = lock();
        if me.granted.load(Ordering::Relaxed) {
            return (guard, Ok(()));
        }
        if stuck || now >= until {
            line(&mut guard).leave(me, now);
            return (guard, Err(if stuck { GaveUp::Stuck } else { GaveUp::Until }));
        }
        drop(guard);
        let wake = until.min(next).saturating_duration_since(now);
        // Under loom a wait that no model outlives is a plain park: only a
        // grant's unpark ends it, so a lost wake-up shows as a deadlock.
        #[cfg(loom)]
        if wake >= Duration::from_millis(1) {
            crate::sync::park();
            continue;
        }
        park_timeout(wake);
    }
}

struct State {
    limit: usize,
    in_use: usize,
    /// Seats held per class.
    held: Vec<usize>,
    waiters: Waiters,
    /// Per class, when a seat last came back or the class last filled: what
    /// the stuck rule measures from. Per class, since a class that keeps
    /// seats for another fills before the room does.
    moved: Vec<Instant>,
    /// Seats taken while the room was less than half full, for timing one
    /// in [`SAMPLE_QUIET`] of them.
    quiet_takes: u32,
}

fn free_for(limit: usize, in_use: usize, held: &[usize], class: usize, kept: &[usize]) -> bool {
    in_use < limit && held[class] < limit.saturating_sub(kept[class])
}

impl State {
    fn free_for(&self, class: usize, kept: &[usize]) -> bool {
        free_for(self.limit, self.in_use, &self.held, class, kept)
    }

    fn take(&mut self, class: usize) {
        self.in_use += 1;
        self.held[class] += 1;
    }

    /// Grants waiters, first come first served among those whose class has
    /// a free seat, until none has: the invariant of the module docs.
    #[inline]
    fn grant(&mut self, kept: &[usize]) -> Woken {
        if self.waiters.len() == 0 {
            return Woken(Vec::new());
        }
        self.grant_waiting(kept)
    }

    fn grant_waiting(&mut self, kept: &[usize]) -> Woken {
        let State { limit, in_use, held, waiters, .. } = self;
        let mut seated = 0;
        let woken = waiters.grant(|class| {
            let free = free_for(*limit, *in_use, held, class, kept);
            if free {
                *in_use += 1;
                held[class] += 1;
                seated += 1;
            }
            free
        });
        waiters.counts.seated += seated;
        woken
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
    /// What a timed seat counts its start from.
    epoch: Instant,
}

/// A seat of a [`Room`]; dropping it gives the seat back.
#[must_use = "dropping a Seat gives it back at once"]
pub struct Seat {
    inner: Arc<Inner>,
    /// When it was taken, in nanoseconds after the room's `epoch` (at least
    /// 1), for a seat whose hold is timed; 0 in a room that never waits (it
    /// has no use for the time a seat is held), and for the untimed seats of
    /// a quiet room (see [`SAMPLE_QUIET`]). Not an `Option<Instant>`: a seat
    /// of 24 bytes keeps a request pool's `Entered` small enough to move
    /// without a `memcpy`.
    since: u64,
    class: u32,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The longest a room lets a caller wait.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(60);

fn check(limit: usize, max_wait: Duration) -> Result<(), crate::ConfigError> {
    if limit == 0 {
        return Err(crate::ConfigError::new("max_concurrent", "at least 1", limit));
    }
    if max_wait > MAX_WAIT {
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
                    waiters: Waiters::default(),
                    moved: vec![Instant::now(); kept.len()],
                    quiet_takes: 0,
                }),
                kept,
                max_wait_ns: AtomicU64::new(ns(max_wait)),
                hold,
                epoch: Instant::now(),
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
        if let Some(seat) = self.take_seat(&mut st, class, Some(now)) {
            return Ok((seat, false));
        }
        let until = self.may_wait(&st, class, now, deadline, st.waiters.line()).inspect_err(|_| {
            st.waiters.counts.refused += 1;
        })?;
        let me = st.waiters.join(class, now, self.line_round());
        drop(st);
        let recheck = |now| {
            let st = inner.state.lock();
            (!self.stuck(&st, class, now)).then(|| self.next_check(&st, class, now))
        };
        let (mut st, waited) = wait(|| inner.state.lock(), |st| &mut st.waiters, &me, until, recheck);
        // A waiter that gave up has left the line, and `leave` saw to the break.
        if let Err(gave_up) = waited {
            drop(st);
            return Err(match gave_up {
                GaveUp::Stuck => NoSeat::Stuck,
                GaveUp::Until if until == deadline => NoSeat::Deadline,
                GaveUp::Until => NoSeat::Waited,
            });
        }
        let now = Instant::now();
        st.waiters.through(now);
        drop(st);
        Ok((self.seat(class, Some(now)), true))
    }

    fn seat(&self, class: usize, since: Option<Instant>) -> Seat {
        let since = since.map_or(0, |at| ns(at.saturating_duration_since(self.inner.epoch)).max(1));
        // `class` is below `kept.len()`, which a room's few classes keep far below u32::MAX.
        Seat { inner: Arc::clone(&self.inner), since, class: class as u32 }
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
        let stood = line.standing.stood(now, self.line_round());
        match admits(expected, expected, mean, stood, max_wait, now, deadline) {
            true => Ok(until),
            false => Err(NoSeat::Full),
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
        if let Some(seat) = self.take_seat(&mut st, class, Some(now)) {
            return Ok(seat);
        }
        let may = self.may_wait(&st, class, now, deadline, line);
        match may {
            Ok(_) => st.waiters.counts.waited += 1,
            Err(_) => st.waiters.counts.refused += 1,
        }
        Err(may)
    }

    /// A seat for `class` if one is free now.
    pub(crate) fn try_seat(&self, class: usize) -> Option<Seat> {
        self.try_seat_at(class, Instant::now)
    }

    /// [`try_seat`](Self::try_seat) for a caller that has read the clock
    /// already: its hold is timed from what `now` gives (asked only in a
    /// room that may make a caller wait, see [`Seat`]).
    pub(crate) fn try_seat_at(&self, class: usize, now: impl FnOnce() -> Instant) -> Option<Seat> {
        let class = class.min(self.inner.kept.len() - 1);
        let now = (self.inner.max_wait_ns.load(Relaxed) != 0).then(now);
        let mut st = self.inner.state.lock();
        self.take_seat(&mut st, class, now)
    }

    /// One round of the line: the longest of the classes' mean holds (zero
    /// before one is timed). A break shorter than this does not end the
    /// line, whichever classes wait in it.
    pub(crate) fn line_round(&self) -> Duration {
        self.inner.hold.iter().filter_map(Latency::mean).max().unwrap_or(Duration::ZERO)
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
    fn take_seat(&self, st: &mut State, class: usize, now: Option<Instant>) -> Option<Seat> {
        if !st.free_for(class, &self.inner.kept) {
            return None;
        }
        st.take(class);
        st.waiters.counts.seated += 1;
        let busy = st.in_use * 2 > st.limit;
        if !busy {
            st.quiet_takes = st.quiet_takes.wrapping_add(1);
        }
        let timed = now.filter(|_| busy || st.quiet_takes % SAMPLE_QUIET == 1);
        if let Some(now) = now {
            // The stuck clock of each class this seat filled starts now: its
            // own, if it took its last seat; another's, if it took the room's
            // last seat while that class was below its share.
            let (limit, kept) = (st.limit, &self.inner.kept);
            for c in 0..kept.len() {
                let filled = match c == class {
                    true => !st.free_for(c, kept),
                    false => st.in_use == limit && st.held[c] < limit.saturating_sub(kept[c]),
                };
                if filled {
                    st.moved[c] = now;
                }
            }
        }
        Some(self.seat(class, timed))
    }

    /// The time after which a class with no free seat, none of whose seats
    /// has come back, is stuck; `None` before its first hold is timed.
    fn stuck_after(&self, class: usize) -> Option<Duration> {
        self.inner.hold[class].normal().map(stuck_after)
    }

    fn stuck(&self, st: &State, class: usize, now: Instant) -> bool {
        !st.free_for(class, &self.inner.kept)
            && self
                .stuck_after(class)
                .is_some_and(|after| now.saturating_duration_since(st.moved[class]) >= after)
    }

    /// When the stuck rule could first hold, for a waiter's park.
    fn next_check(&self, st: &State, class: usize, now: Instant) -> Instant {
        match self.stuck_after(class) {
            Some(after) => deadline_after(st.moved[class], after).max(now),
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

    /// The seats given at once, the callers that waited, and those refused,
    /// since the room was made.
    pub fn counts(&self) -> RoomCounts {
        self.inner.state.lock().waiters.counts
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
        granted.unpark();
        Ok(())
    }
}

impl Seat {
    /// The class the seat was taken for.
    pub fn class(&self) -> usize {
        self.class as usize
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let inner = &self.inner;
        let class = self.class();
        let mut now = (self.since != 0).then(|| {
            let now = Instant::now();
            let since = inner.epoch + Duration::from_nanos(self.since);
            inner.hold[class].record(now.saturating_duration_since(since));
            now
        });
        let granted = {
            let mut st = inner.state.lock();
            // An untimed seat coming back to a full class still moves its
            // line: the stuck rule needs the time.
            let kept = &inner.kept;
            if now.is_none()
                && inner.max_wait_ns.load(Relaxed) != 0
                && (0..kept.len()).any(|c| !st.free_for(c, kept))
            {
                now = Some(Instant::now());
            }
            st.in_use -= 1;
            st.held[class] -= 1;
            if let Some(now) = now {
                st.moved.fill(now);
            }
            st.grant(kept)
        };
        granted.unpark();
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
