//! [`Room`]: a count of seats with shares kept per class, and one FIFO line
//! of waiters for a seat until a deadline, admitted only when the wait it can
//! expect fits. One primitive for every "wait for room": caller-thread mode's
//! permits (a semaphore bulkhead), the request pools, the cache's waiting
//! callers, and, through [`Waiters`] and [`wait`], the pool's queue (whose
//! room is its idle workers and queue places, counted under its own lock).
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
//! # The line
//!
//! One lock guards the counts, the limit and the line. A waiter in line is
//! either a parked thread ([`Room::acquire_as`]: the caller's own thread
//! waits) or a request value `R` that holds no thread ([`Room::enter`]: the
//! crate's own server, whose free thread goes back for the next request).
//!
//! - **A seat** is taken at once when the caller's class has one free.
//!   Invariant (at every unlock): no parked waiter's class has a free seat;
//!   every change that frees seats grants parked waiters first. So a
//!   newcomer that finds a seat free for its class never passes a waiter of
//!   its class (who would have had it), and FIFO holds within a class.
//! - Otherwise the caller may wait, until its deadline and `max_wait`, when
//!   the wait it can expect fits (see "Admission by time"). A thread queues
//!   itself and parks until granted, until its wait ends, or until the line
//!   is found stuck. On giving up it takes the lock again: if it was granted
//!   in the meantime it keeps the seat (the grant and the give-up raced; the
//!   seat is not lost), else it leaves the line, so a waiter that gives up
//!   never holds a place.
//! - **Release** (the [`Seat`]'s drop, on a panic too): a seat above the
//!   limit (the room was shrunk) is absorbed; else it passes straight to the
//!   first parked waiter whose class may take it (`granted` set, then
//!   unparked after the lock is released: a wake-up is never lost, since the
//!   waiter reads `granted` under the lock before parking and after every
//!   wake-up).
//! - **A waiting request** is handed on by a thread, never woken: the thread
//!   that gives its seat back through [`Room::pass`] (or an idle one, through
//!   [`Room::sweep`]) takes, under the same lock, the oldest waiting request
//!   with a seat for it, after taking out the requests whose wait has ended
//!   (to answer `503`). So a waiting request holds no thread and is answered
//!   by its deadline, as long as a thread sweeps now and then.
//! - **resize**: a larger limit grants parked waiters at once; a smaller one
//!   is absorbed as seats come back. Nothing blocks.
//!
//! # Admission by time
//!
//! The room measures how long a seat is held (the smoothed mean of the
//! holds, [`Latency`]: every hold of a seat taken while the room is more
//! than half full, one in [`SAMPLE_QUIET`] while it is quieter), and shows
//! them, read-only ([`Holds`]), to the [`Rule`] its user gave it, which
//! judges the line: the room is the mechanism, the rule the policy. The
//! crate's rule, [`HoldTime`], is the one the [pool's
//! docs](crate::pool#waiting-for-room-by-time) state, on a seat's hold
//! instead of a job's run; the pool's queue judges its line by the same
//! two functions ([`ByTime`], [`stuck_after`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize as Gauge, Ordering::Relaxed};
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

/// The class of a seat handed back through [`Room::pass`]: its drop does nothing.
const GIVEN_BACK: u32 = u32::MAX;

/// How long a line whose holds normally take `normal` may go without one
/// coming back before it is stuck: [`STUCK_AFTER`] of them, at least
/// [`STUCK_FLOOR`].
pub(crate) fn stuck_after(normal: Duration) -> Duration {
    normal.saturating_mul(STUCK_AFTER).max(STUCK_FLOOR)
}

/// Admission by time: the rule the room, and the pool for its queue, judge
/// a line by (see "Admission by time"), from what each measures of its own
/// holds: the recent `mean` (none timed yet: no wait expected) and the
/// `normal` one (none yet: never stuck).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ByTime {
    pub(crate) mean: Option<Duration>,
    pub(crate) normal: Option<Duration>,
    pub(crate) max_wait: Duration,
    pub(crate) deadline: Instant,
}

/// A line as a caller about to join it finds it.
#[derive(Debug, Clone, Copy)]
pub struct Ahead {
    /// Callers ahead of it: in line (and, in a queue, queued).
    pub calls: usize,
    /// Of those, how many hold places that are not yet room (a queue's capacity).
    pub capacity: usize,
    /// How many are served at a time (a pool's workers, a class's seats).
    pub seats: usize,
    /// How long callers have waited without a break of at least one round
    /// (zero when nobody has, or after such a break).
    pub standing: Duration,
}

impl ByTime {
    /// Whether a caller may join a line as it finds it: room expected no
    /// later than `max_wait` (within one mean hold once the line has stood
    /// longer than `max_wait`), and served before the deadline.
    pub(crate) fn admits(&self, ahead: Ahead, now: Instant) -> bool {
        let Ahead { calls, capacity, seats, standing: stood } = ahead;
        let mean = self.mean.unwrap_or(Duration::ZERO);
        let rounds = |c: usize| u32::try_from(c.div_ceil(seats.max(1))).unwrap_or(u32::MAX);
        let for_room = mean.saturating_mul(rounds((calls + 1).saturating_sub(capacity).max(1)));
        let for_served = mean.saturating_mul(rounds(calls + 1));
        let allowed = if stood > self.max_wait { self.max_wait.min(mean) } else { self.max_wait };
        for_room <= allowed && deadline_after(now, for_served) < self.deadline
    }

    /// `None` when the line is stuck: its room has been full for `full_for`
    /// with nothing back, at least [`stuck_after`] the normal hold; else when
    /// that could first be so.
    pub(crate) fn recheck(&self, full_for: Option<Duration>, now: Instant) -> Option<Instant> {
        let Some(after) = self.normal.map(stuck_after) else {
            return Some(deadline_after(now, Duration::from_secs(3600)));
        };
        match full_for {
            Some(full) if full >= after => None,
            Some(full) => Some(deadline_after(now, after - full)),
            None => Some(deadline_after(now, after)),
        }
    }
}

/// What a room measured of one class's holds, as its [`Rule`] sees it (the
/// fields as in [`ByTime`]), and the room's `max_wait`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holds {
    pub(crate) mean: Option<Duration>,
    pub(crate) normal: Option<Duration>,
    pub(crate) max_wait: Duration,
}

/// The policy a [`Room`] admits its line by, asked under its lock (see
/// "Admission by time").
pub(crate) trait Rule: Send + Sync + 'static {
    /// Whether a caller due by `deadline` may join the line as `ahead` finds it.
    fn admits(&self, holds: Holds, ahead: Ahead, deadline: Instant, now: Instant) -> bool;

    /// `None` when the line is stuck: its class has been full for
    /// `full_for` with nothing back; else when that could first be so.
    fn recheck(&self, holds: Holds, full_for: Option<Duration>, now: Instant) -> Option<Instant>;
}

/// Admission by time ([`ByTime`]) on the room's own measured holds: the rule
/// of every room the crate makes (see "Admission by time").
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HoldTime;

impl HoldTime {
    fn by_time(Holds { mean, normal, max_wait }: Holds, deadline: Instant) -> ByTime {
        ByTime { mean, normal, max_wait, deadline }
    }
}

impl Rule for HoldTime {
    fn admits(&self, holds: Holds, ahead: Ahead, deadline: Instant, now: Instant) -> bool {
        Self::by_time(holds, deadline).admits(ahead, now)
    }

    fn recheck(&self, holds: Holds, full_for: Option<Duration>, now: Instant) -> Option<Instant> {
        Self::by_time(holds, now).recheck(full_for, now)
    }
}

/// Why a [`Room`] gave no seat: the one vocabulary of refusals for room, whose
/// [`as_str`](Self::as_str) is the `reason` label of
/// `watertight_request_pool_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoSeat {
    /// The wait the caller could expect passed `max_wait` or its deadline,
    /// or `max_wait` is zero: refused on arrival.
    Full,
    /// It waited, and `max_wait` ended the wait.
    Waited,
    /// The caller's own deadline (a request's budget) ended its wait, or had
    /// passed on arrival.
    Deadline,
    /// No seat had come back for several normal holds: the line did not move.
    Stuck,
}

impl NoSeat {
    /// Every reason, in the order of their labels in `/metrics`.
    pub const ALL: [NoSeat; 4] = [NoSeat::Full, NoSeat::Waited, NoSeat::Deadline, NoSeat::Stuck];

    /// Its label, for logs and metrics: `full`, `max_wait`, `budget`, `stuck`.
    pub const fn as_str(self) -> &'static str {
        match self {
            NoSeat::Full => "full",
            NoSeat::Waited => "max_wait",
            NoSeat::Deadline => "budget",
            NoSeat::Stuck => "stuck",
        }
    }
}

impl fmt::Display for NoSeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
    fn formed(&mut self, now: Instant, round: Duration) {
        if self.stood(now, round).is_zero() {
            self.since = Some(now);
        }
        self.emptied = None;
    }

    /// The line has emptied.
    fn emptied(&mut self, now: Instant) {
        if self.since.is_some() {
            self.emptied.get_or_insert(now);
        }
    }

    /// How long the line has stood as of `now` (zero after a break of at
    /// least `round`).
    fn stood(&self, now: Instant, round: Duration) -> Duration {
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

/// A thread parked in a line of [`Waiters`].
pub(crate) struct Parked {
    thread: Thread,
    class: usize,
    /// Set under the owner's lock when room is handed to this waiter.
    granted: AtomicBool,
}

/// A request waiting in a room's line, holding no thread: the end of its
/// wait (`None`: a patient one, never refused) and why it would end there.
#[cfg_attr(not(feature = "tiny_http"), allow(dead_code))] // the own server's line of requests
struct Queued<R> {
    value: R,
    class: usize,
    until: Option<Instant>,
    why: NoSeat,
}

/// One waiter of a line: a parked thread, or a request a thread hands on.
#[cfg_attr(not(feature = "tiny_http"), allow(dead_code))] // the own server's line of requests
enum Waiter<R> {
    Thread(Arc<Parked>),
    Request(Queued<R>),
}

/// A FIFO of waiters for room, kept under its owner's lock (the room's, or
/// the pool queue's): the one line of the crate. What "room" is stays with
/// the owner, which grants it to parked threads with [`grant`](Self::grant)
/// and wakes them with [`Woken::unpark`] after unlocking.
pub(crate) struct Waiters<R = Infallible> {
    line: VecDeque<Waiter<R>>,
    standing: Standing,
    pub(crate) counts: RoomCounts,
}

impl<R> Default for Waiters<R> {
    fn default() -> Self {
        Waiters { line: VecDeque::new(), standing: Standing::default(), counts: RoomCounts::default() }
    }
}

/// Waiters granted room under a lock, to unpark once it is released.
#[must_use = "granted waiters must be unparked"]
pub(crate) struct Woken(Vec<Arc<Parked>>);

impl Woken {
    #[inline]
    pub(crate) fn unpark(self) {
        for w in self.0 {
            w.thread.unpark();
        }
    }
}

impl<R> Waiters<R> {
    pub(crate) fn len(&self) -> usize {
        self.line.len()
    }

    /// How long the line has stood as of `now`, a break shorter than
    /// `round` not ending it (see [`Standing`]).
    pub(crate) fn stood(&self, now: Instant, round: Duration) -> Duration {
        self.standing.stood(now, round)
    }

    fn push(&mut self, waiter: Waiter<R>, now: Instant, round: Duration) {
        if self.line.is_empty() {
            self.standing.formed(now, round);
        }
        self.counts.waited += 1;
        self.line.push_back(waiter);
    }

    /// Queues the calling thread, of `class`, at the back. `round` is one
    /// mean hold of the line: a break shorter than it does not end it.
    pub(crate) fn join(&mut self, class: usize, now: Instant, round: Duration) -> Arc<Parked> {
        let me = Arc::new(Parked { thread: current(), class, granted: AtomicBool::new(false) });
        self.push(Waiter::Thread(Arc::clone(&me)), now, round);
        me
    }

    /// Puts a waiter granted room that it could not use back at the front:
    /// it never stopped waiting, so the line goes on without a break.
    pub(crate) fn rejoin(&mut self, me: &Arc<Parked>) {
        me.granted.store(false, Ordering::Relaxed);
        self.line.push_front(Waiter::Thread(Arc::clone(me)));
        self.standing.emptied = None;
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

    fn leave(&mut self, me: &Arc<Parked>, now: Instant) {
        self.line.retain(|w| !matches!(w, Waiter::Thread(p) if Arc::ptr_eq(p, me)));
        self.counts.refused += 1;
        self.through(now);
    }

    /// Grants room first come first served to each parked waiter for whose
    /// class `take` finds (and takes) some; those it refuses keep their
    /// place, as do waiting requests (a thread hands them on).
    pub(crate) fn grant(&mut self, mut take: impl FnMut(usize) -> bool) -> Woken {
        let mut woken = Vec::new();
        let mut i = 0;
        while i < self.line.len() {
            match &self.line[i] {
                Waiter::Thread(w) if take(w.class) => {
                    w.granted.store(true, Ordering::Relaxed);
                    woken.push(Arc::clone(w));
                    self.line.remove(i);
                }
                _ => i += 1,
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
/// left the line (see "The line" in the module docs). The owner calls
/// [`Waiters::through`] once a granted waiter is through.
pub(crate) fn wait<G, R>(
    mut lock: impl FnMut() -> G,
    line: impl Fn(&mut G) -> &mut Waiters<R>,
    me: &Arc<Parked>,
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

/// Seats held, in all and per class, and waiters in line: written only under
/// the room's lock (so read there, they are exact), read without it as
/// relaxed gauges (a request pool's `busy`, `reserved_busy` and `waiting`).
/// The room's one count of each.
pub(crate) struct Seats {
    in_use: Gauge,
    held: Box<[Gauge]>,
    waiting: Gauge,
}

impl Seats {
    fn new(classes: usize) -> Seats {
        Seats {
            in_use: Gauge::new(0),
            held: (0..classes).map(|_| Gauge::new(0)).collect(),
            waiting: Gauge::new(0),
        }
    }

    /// Seats held now.
    pub(crate) fn in_use(&self) -> usize {
        self.in_use.load(Relaxed)
    }

    /// Seats held now by `class`.
    pub(crate) fn held_by(&self, class: usize) -> usize {
        self.held.get(class).map_or(0, |h| h.load(Relaxed))
    }

    /// Waiters in line now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Relaxed)
    }

    /// Under the lock, the only writer: plain loads and stores.
    fn add(&self, class: usize, up: bool) {
        let step = |g: &Gauge| g.store(if up { g.load(Relaxed) + 1 } else { g.load(Relaxed) - 1 }, Relaxed);
        step(&self.in_use);
        step(&self.held[class]);
    }

    fn free_for(&self, limit: usize, class: usize, kept: &[usize]) -> bool {
        self.in_use() < limit && self.held_by(class) < limit.saturating_sub(kept[class])
    }
}

struct State<R> {
    limit: usize,
    /// Shared with a request pool's gauges; written only here, under the lock.
    seats: std::sync::Arc<Seats>,
    waiters: Waiters<R>,
    /// Per class, when a seat last came back or the class last filled: what
    /// the stuck rule measures from. Per class, since a class that keeps
    /// seats for another fills before the room does.
    moved: Vec<Instant>,
    /// Seats taken while the room was less than half full, for timing one
    /// in [`SAMPLE_QUIET`] of them.
    quiet_takes: u32,
}

impl<R> State<R> {
    fn free_for(&self, class: usize, kept: &[usize]) -> bool {
        self.seats.free_for(self.limit, class, kept)
    }

    /// The line's length into its gauge, after a change.
    fn counted(&mut self) {
        self.seats.waiting.store(self.waiters.len(), Relaxed);
    }

    /// Grants parked waiters: the invariant of the module docs.
    #[inline]
    fn grant(&mut self, kept: &[usize]) -> Woken {
        if self.waiters.len() == 0 {
            return Woken(Vec::new());
        }
        let State { limit, seats, waiters, .. } = self;
        let mut seated = 0;
        let woken = waiters.grant(|class| {
            let free = seats.free_for(*limit, class, kept);
            if free {
                seats.add(class, true);
                seated += 1;
            }
            free
        });
        waiters.counts.seated += seated;
        self.counted();
        woken
    }
}

/// Seats, shares kept per class, and a FIFO wait admitted by time. Cheap
/// to clone: clones share the seats. `R` is a request waiting without a
/// thread (`Room::enter`); a room whose waiters are threads has none.
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
pub struct Room<R = Infallible> {
    inner: Arc<Inner<R>>,
}

impl<R> Clone for Room<R> {
    fn clone(&self) -> Self {
        Room { inner: Arc::clone(&self.inner) }
    }
}

struct Inner<R> {
    state: Mutex<State<R>>,
    /// Seats each class leaves to the others (see the module docs).
    kept: Vec<usize>,
    max_wait_ns: AtomicU64,
    /// How long a seat is held, per class: the classes of a request pool
    /// hold theirs for very different times (a health check, a search).
    hold: Vec<Latency>,
    /// The policy the line is admitted by, given at construction.
    rule: Box<dyn Rule>,
    /// What a timed seat counts its start from.
    epoch: Instant,
}

/// A seat of a [`Room`]; dropping it gives the seat back.
#[must_use = "dropping a Seat gives it back at once"]
pub struct Seat<R = Infallible> {
    inner: Arc<Inner<R>>,
    /// When it was taken, in nanoseconds after the room's `epoch` (at least
    /// 1), for a seat whose hold is timed; 0 in a room that never waits (it
    /// has no use for the time a seat is held), and for the untimed seats of
    /// a quiet room (see [`SAMPLE_QUIET`]). Not an `Option<Instant>`: a seat
    /// of 24 bytes keeps a request pool's `Entered` small enough to move
    /// without a `memcpy`.
    since: u64,
    /// [`GIVEN_BACK`] once handed back through [`Room::pass`].
    class: u32,
}

/// What [`Room::enter`] made of a request.
#[cfg_attr(not(feature = "tiny_http"), allow(dead_code))] // the own server's line of requests
pub(crate) enum Admission<R> {
    /// Handle it now, on the calling thread, in this seat.
    Run(R, Seat<R>),
    /// It waits in line, holding no thread.
    Waits,
    /// Refused (answer it `503`).
    Refused(R, NoSeat),
}

/// What a thread does after [`Room::pass`] or [`Room::sweep`]: the request to
/// handle next, with its seat, and the waiting requests whose wait ended.
#[cfg_attr(not(feature = "tiny_http"), allow(dead_code))] // the own server's line of requests
pub(crate) struct Handoff<R> {
    pub(crate) run: Option<(R, Seat<R>)>,
    pub(crate) expired: Vec<(R, NoSeat)>,
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
        Room::with_rule(limit, max_wait, kept, HoldTime)
    }
}

impl<R> Room<R> {
    /// [`with_shares`](Room::with_shares), for a room whose line may hold
    /// requests `R` ([`enter`](Self::enter)), admitted by `rule`.
    pub(crate) fn with_rule(
        limit: usize,
        max_wait: Duration,
        kept: &[usize],
        rule: impl Rule,
    ) -> Result<Room<R>, crate::ConfigError> {
        check(limit, max_wait)?;
        let kept = if kept.is_empty() { vec![0] } else { kept.to_vec() };
        let hold = kept.iter().map(|_| Latency::default()).collect();
        Ok(Room {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    limit,
                    seats: std::sync::Arc::new(Seats::new(kept.len())),
                    waiters: Waiters::default(),
                    moved: vec![Instant::now(); kept.len()],
                    quiet_takes: 0,
                }),
                kept,
                max_wait_ns: AtomicU64::new(ns(max_wait)),
                hold,
                rule: Box::new(rule),
                epoch: Instant::now(),
            }),
        })
    }

    /// A seat of the first class, at once or after a wait that ends by
    /// `deadline` and lasts at most `max_wait`; `None` when none came.
    pub fn acquire(&self, deadline: Instant) -> Option<Seat<R>> {
        self.acquire_as(0, deadline).ok()
    }

    /// A seat for `class` (out of range reads as the last class), at once
    /// or after a wait admitted by time (see the module docs) that ends by
    /// `deadline` and lasts at most `max_wait`; else why not.
    pub fn acquire_as(&self, class: usize, deadline: Instant) -> Result<Seat<R>, NoSeat> {
        self.acquire_timed(class, deadline).map(|(seat, _)| seat)
    }

    /// [`acquire_as`](Self::acquire_as), and whether the caller waited: the
    /// one wait of a thread for a seat.
    pub(crate) fn acquire_timed(&self, class: usize, deadline: Instant) -> Result<(Seat<R>, bool), NoSeat> {
        let inner = &self.inner;
        let class = self.class(class);
        let mut st = inner.state.lock();
        let now = Instant::now();
        if let Some(seat) = self.take_seat(&mut st, class, None, Some(now)) {
            return Ok((seat, false));
        }
        let (until, ends) = self.may_wait(&st, class, now, deadline).inspect_err(|_| {
            st.waiters.counts.refused += 1;
        })?;
        let me = st.waiters.join(class, now, self.line_round());
        st.counted();
        drop(st);
        let recheck = |now| {
            let st = inner.state.lock();
            self.recheck(&st, class, now)
        };
        let (mut st, waited) = wait(|| inner.state.lock(), |st| &mut st.waiters, &me, until, recheck);
        st.counted();
        // A waiter that gave up has left the line, and `leave` saw to the break.
        if let Err(gave_up) = waited {
            drop(st);
            return Err(match gave_up {
                GaveUp::Stuck => NoSeat::Stuck,
                GaveUp::Until => ends,
            });
        }
        let now = Instant::now();
        st.waiters.through(now);
        drop(st);
        Ok((self.seat(class, Some(now)), true))
    }

    /// A seat for `class` if one is free now, never a wait. Its hold is
    /// timed from what `now` gives (asked only in a room that may make a
    /// caller wait, see [`Seat`]).
    pub(crate) fn try_seat(
        &self,
        class: usize,
        or_class: Option<usize>,
        now: impl FnOnce() -> Instant,
    ) -> Option<Seat<R>> {
        let class = self.class(class);
        let now = (self.inner.max_wait_ns.load(Relaxed) != 0).then(now);
        let mut st = self.inner.state.lock();
        self.take_seat(&mut st, class, or_class, now)
    }

    fn class(&self, class: usize) -> usize {
        class.min(self.inner.kept.len() - 1)
    }

    fn seat(&self, class: usize, since: Option<Instant>) -> Seat<R> {
        let since = since.map_or(0, |at| ns(at.saturating_duration_since(self.inner.epoch)).max(1));
        // `class` is below `kept.len()`, which a room's few classes keep far below u32::MAX.
        Seat { inner: Arc::clone(&self.inner), since, class: class as u32 }
    }

    /// Under the lock, for a caller of `class` that found no seat: until
    /// when it may wait behind the line, and why its wait ends then
    /// (`max_wait` or its deadline); or why it may not (see "Admission by
    /// time" in the module docs).
    fn may_wait(
        &self,
        st: &State<R>,
        class: usize,
        now: Instant,
        deadline: Instant,
    ) -> Result<(Instant, NoSeat), NoSeat> {
        if deadline <= now {
            return Err(NoSeat::Deadline);
        }
        let max_wait = self.max_wait();
        let until = deadline.min(deadline_after(now, max_wait));
        if until <= now {
            return Err(NoSeat::Full);
        }
        if self.recheck(st, class, now).is_none() {
            return Err(NoSeat::Stuck);
        }
        let seats = st.limit.saturating_sub(self.inner.kept[class]);
        let stood = st.waiters.stood(now, self.line_round());
        let ahead = Ahead { calls: st.waiters.len(), capacity: 0, seats, standing: stood };
        match self.inner.rule.admits(self.holds(class), ahead, deadline, now) {
            true => Ok((until, if until >= deadline { NoSeat::Deadline } else { NoSeat::Waited })),
            false => Err(NoSeat::Full),
        }
    }

    /// What the room measured of the holds of `class`, for its rule.
    fn holds(&self, class: usize) -> Holds {
        let hold = &self.inner.hold[class];
        Holds { mean: hold.mean(), normal: hold.normal(), max_wait: self.max_wait() }
    }

    /// One round of the line: the longest of the classes' mean holds (zero
    /// before one is timed). A break shorter than this does not end the
    /// line, whichever classes wait in it.
    fn line_round(&self) -> Duration {
        self.inner.hold.iter().filter_map(Latency::mean).max().unwrap_or(Duration::ZERO)
    }

    /// Under the lock: a seat for `class` if it has one free, else for
    /// `or_class` (the class it may fall back on) if that has.
    fn take_seat(
        &self,
        st: &mut State<R>,
        class: usize,
        or_class: Option<usize>,
        now: Option<Instant>,
    ) -> Option<Seat<R>> {
        let class = [Some(class), or_class.map(|c| self.class(c))]
            .into_iter()
            .flatten()
            .find(|&c| st.free_for(c, &self.inner.kept))?;
        st.seats.add(class, true);
        st.waiters.counts.seated += 1;
        let (limit, in_use) = (st.limit, st.seats.in_use());
        let busy = in_use * 2 > limit;
        if !busy {
            st.quiet_takes = st.quiet_takes.wrapping_add(1);
        }
        let timed = now.filter(|_| busy || st.quiet_takes % SAMPLE_QUIET == 1);
        if let Some(now) = now {
            // The stuck clock of each class this seat filled starts now: its
            // own, if it took its last seat; another's, if it took the room's
            // last seat while that class was below its share.
            let kept = &self.inner.kept;
            for c in 0..kept.len() {
                let filled = match c == class {
                    true => !st.free_for(c, kept),
                    false => in_use == limit && st.seats.held_by(c) < limit.saturating_sub(kept[c]),
                };
                if filled {
                    st.moved[c] = now;
                }
            }
        }
        Some(self.seat(class, timed))
    }

    /// When to look again whether the line of `class` is stuck, `None` once
    /// it is: the class has no free seat and none has come back for several
    /// normal holds.
    fn recheck(&self, st: &State<R>, class: usize, now: Instant) -> Option<Instant> {
        let full_for =
            (!st.free_for(class, &self.inner.kept)).then(|| now.saturating_duration_since(st.moved[class]));
        self.inner.rule.recheck(self.holds(class), full_for, now)
    }

    /// The seats held and the line's length, as gauges readable without the lock.
    pub(crate) fn occupancy(&self) -> std::sync::Arc<Seats> {
        std::sync::Arc::clone(&self.inner.state.lock().seats)
    }

    /// Seats held now.
    pub fn in_use(&self) -> usize {
        self.inner.state.lock().seats.in_use()
    }

    /// Seats held now by `class`.
    pub fn held_by(&self, class: usize) -> usize {
        self.inner.state.lock().seats.held_by(class)
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

    /// Changes the seats and the wait while seats are held (see "resize" in
    /// the module docs).
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

#[cfg_attr(not(feature = "tiny_http"), allow(dead_code))] // the own server's line of requests
impl<R> Room<R> {
    /// A request `value` of `class`, due by `deadline`, on a free thread: a
    /// seat for it now (of `class`, else of `or_class` if given), else a
    /// place in line by the rule of admission by time, holding no thread;
    /// else refused. A `patient` request is never refused: it waits however
    /// long, and no end of its wait or stuck line takes it out.
    pub(crate) fn enter(
        &self,
        class: usize,
        value: R,
        deadline: Instant,
        patient: bool,
        or_class: Option<usize>,
    ) -> Admission<R> {
        let class = self.class(class);
        let mut st = self.inner.state.lock();
        let now = Instant::now();
        if let Some(seat) = self.take_seat(&mut st, class, or_class, Some(now)) {
            return Admission::Run(value, seat);
        }
        let (until, why) = match self.may_wait(&st, class, now, deadline) {
            Ok((until, why)) => (Some(until), why),
            Err(why) if !patient => {
                st.waiters.counts.refused += 1;
                return Admission::Refused(value, why);
            }
            Err(why) => (None, why),
        };
        let until = until.filter(|_| !patient);
        st.waiters.push(Waiter::Request(Queued { value, class, until, why }), now, self.line_round());
        st.counted();
        Admission::Waits
    }

    /// Gives `seat` back and, under the same lock, says what the thread that
    /// held it does next (see [`sweep`](Self::sweep)).
    pub(crate) fn pass(&self, mut seat: Seat<R>, or_class: Option<usize>) -> Handoff<R> {
        let now = seat.timed();
        let mut st = self.inner.state.lock();
        let woken = self.inner.release(&mut st, seat.class(), now);
        seat.class = GIVEN_BACK;
        let next = self.next(&mut st, or_class);
        drop(st);
        woken.unpark();
        next
    }

    /// For a thread that is free: the waiting requests whose wait ended (or
    /// all but the patient, when their line is stuck), and the oldest other
    /// one with a seat for it (of its class, else of `or_class`), if one is free.
    pub(crate) fn sweep(&self, or_class: Option<usize>) -> Handoff<R> {
        let mut st = self.inner.state.lock();
        self.next(&mut st, or_class)
    }

    fn next(&self, st: &mut State<R>, or_class: Option<usize>) -> Handoff<R> {
        let mut next = Handoff { run: None, expired: Vec::new() };
        if st.waiters.len() == 0 {
            return next;
        }
        let now = Instant::now();
        let stuck: Vec<bool> =
            (0..self.inner.kept.len()).map(|c| self.recheck(st, c, now).is_none()).collect();
        let ends = |q: &Queued<R>| match q.until {
            Some(u) if u <= now => Some(q.why),
            Some(_) if stuck[q.class] => Some(NoSeat::Stuck),
            _ => None,
        };
        let line = &mut st.waiters.line;
        if line.iter().any(|w| matches!(w, Waiter::Request(q) if ends(q).is_some())) {
            next.expired = take_requests(line, ends);
        }
        if let Some((i, Waiter::Request(q))) =
            line.iter().enumerate().find(|(_, w)| matches!(w, Waiter::Request(_)))
        {
            let class = q.class;
            let seat = self.take_seat(st, class, or_class, Some(now));
            if let Some(seat) = seat
                && let Some(Waiter::Request(q)) = st.waiters.line.remove(i)
            {
                next.run = Some((q.value, seat));
            }
        }
        st.waiters.through(now);
        st.counted();
        next
    }

    /// Every waiting request, oldest first, for a pool that stops.
    pub(crate) fn drain(&self) -> Vec<R> {
        let mut st = self.inner.state.lock();
        let drained = take_requests(&mut st.waiters.line, |_| Some(NoSeat::Full));
        st.waiters.standing = Standing::default();
        st.counted();
        drained.into_iter().map(|(value, _)| value).collect()
    }
}

/// Takes out of `line` the waiting requests for which `ends` says why,
/// oldest first; every other waiter keeps its place.
#[cfg_attr(not(feature = "tiny_http"), allow(dead_code))] // the own server's line of requests
fn take_requests<R>(
    line: &mut VecDeque<Waiter<R>>,
    ends: impl Fn(&Queued<R>) -> Option<NoSeat>,
) -> Vec<(R, NoSeat)> {
    let mut taken = Vec::new();
    for w in std::mem::take(line) {
        match w {
            Waiter::Request(q) => match ends(&q) {
                Some(why) => taken.push((q.value, why)),
                None => line.push_back(Waiter::Request(q)),
            },
            w => line.push_back(w),
        }
    }
    taken
}

impl<R> Inner<R> {
    /// Under the lock: a seat of `class` comes back (at `now`, if its hold
    /// was timed), and goes to the parked waiters it frees.
    fn release(&self, st: &mut State<R>, class: usize, mut now: Option<Instant>) -> Woken {
        // An untimed seat coming back to a full class still moves its
        // line: the stuck rule needs the time.
        let kept = &self.kept;
        if now.is_none()
            && self.max_wait_ns.load(Relaxed) != 0
            && (0..kept.len()).any(|c| !st.free_for(c, kept))
        {
            now = Some(Instant::now());
        }
        st.seats.add(class, false);
        if let Some(now) = now {
            st.moved.fill(now);
        }
        st.grant(kept)
    }
}

impl<R> Seat<R> {
    /// The class the seat was taken for.
    pub fn class(&self) -> usize {
        self.class as usize
    }

    /// The end of a timed hold: records it, and returns when it ended.
    fn timed(&self) -> Option<Instant> {
        (self.since != 0).then(|| {
            let now = Instant::now();
            let since = self.inner.epoch + Duration::from_nanos(self.since);
            self.inner.hold[self.class()].record(now.saturating_duration_since(since));
            now
        })
    }
}

impl<R> Drop for Seat<R> {
    fn drop(&mut self) {
        if self.class == GIVEN_BACK {
            return;
        }
        let now = self.timed();
        let granted = self.inner.release(&mut self.inner.state.lock(), self.class(), now);
        granted.unpark();
    }
}

impl<R> fmt::Debug for Room<R> {
    /// Never blocks: prints `<locked>` while the state is locked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.inner.state.try_lock() {
            Some(st) => f
                .debug_struct("Room")
                .field("in_use", &st.seats.in_use())
                .field("limit", &st.limit)
                .field("waiting", &st.waiters.len())
                .finish(),
            None => f.write_str("Room(<locked>)"),
        }
    }
}

impl<R> fmt::Debug for Seat<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Seat").field("class", &self.class).finish()
    }
}

#[cfg(test)]
mod tests;
