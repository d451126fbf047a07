//! Which request a free request thread handles next, so that ordinary
//! requests never take the [reserved share](super::Reserve), and how long an
//! ordinary request waits for an ordinary thread.
//!
//! The request threads are the seats of a [`Room`] (the crate's one
//! primitive for room): ordinary requests are a class that keeps the
//! reserve's seats, reserved requests a class that keeps none. A request a
//! thread takes from tiny_http (or the guard) is classified before its
//! handler runs, and the thread takes a seat for it: a reserved request
//! always finds one (this thread is free, so fewer seats than threads are
//! held), an ordinary one while the ordinary share has one free. An ordinary
//! request that finds none waits in `line` by the room's rule
//! ([admission](crate::server#admission)), else is refused (`503`); its thread goes back
//! for the next request (which may be a reserved one), so a waiting request
//! holds no thread.
//!
//! The thread that finishes a request gives its seat back and, under the
//! same lock, takes the oldest waiting request with a seat for it, answering
//! first the waiting requests whose wait has ended (`503`). An idle thread
//! does the same each time it has waited a while for a new request, so a
//! waiting request is answered by its deadline even while every ordinary
//! thread is held.
//!
//! A reserve in shadow (`Reserve::shadow`) decides the same, and where it
//! would keep an ordinary request waiting (or refuse it) while a reserved
//! thread is free, the request takes that thread, recorded
//! (`Counts::shadow_seat`): with its line empty, as with no reserve.
//!
//! Invariant, under the `line` lock (every seat of this room is taken and
//! given back under it): `line` is not empty only while the ordinary class
//! has no free seat. A request is queued only when that holds, and every
//! seat given back hands itself to the oldest waiting request. So a waiting
//! request is never stranded while a seat is free.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::gate::Counts;
use crate::room::{Line, NoSeat, Room, Seat, Standing};

/// The admission of a request pool whose requests are `T`s (tiny_http's
/// requests in the pool; plain values in the tests).
pub(super) struct Admission<T> {
    /// The request threads as seats: class 0 (ordinary) keeps the reserve's.
    room: Room,
    line: Mutex<Waiting<T>>,
    /// Reserved requests being handled: a gauge, relaxed (it orders nothing).
    /// Shared with the registry's gauges, if any.
    reserved_busy: Arc<AtomicUsize>,
    /// `line.queue.len()`, readable without the lock: a gauge, relaxed.
    waiting: Arc<AtomicUsize>,
    /// The pool's counts, for the reserve in shadow (`Counts::shadow_seat`).
    counts: Option<Counts>,
}

struct Waiting<T> {
    /// Ordinary requests waiting for a seat, oldest first, each with the end
    /// of its wait (`None`: a patient one, see [`Admission::admit`]) and why
    /// it would end there.
    queue: VecDeque<(T, Option<Instant>, NoSeat)>,
    /// Since when requests have waited (see [`Standing`]).
    standing: Standing,
}

/// What [`Admission::admit`] decided.
pub(super) enum Admit<T> {
    /// Handle it now, on the calling thread, in this seat.
    Run(T, Seat),
    /// It waits for an ordinary thread.
    Waits,
    /// Answer it `503`.
    Refused(T, NoSeat),
}

/// The next request a thread that gave its seat back handles (with a seat
/// for it), and the waiting requests whose wait ended, to answer `503`.
pub(super) struct Next<T> {
    pub(super) run: Option<(T, Seat)>,
    pub(super) expired: Vec<(T, NoSeat)>,
}

impl<T> Admission<T> {
    /// An admission over `room` (class 0 ordinary, class 1 reserved) whose
    /// two gauges are `reserved_busy` and `waiting`.
    pub(super) fn new(
        room: Room,
        reserved_busy: Arc<AtomicUsize>,
        waiting: Arc<AtomicUsize>,
    ) -> Admission<T> {
        Admission {
            room,
            line: Mutex::new(Waiting { queue: VecDeque::new(), standing: Standing::default() }),
            reserved_busy,
            waiting,
            counts: None,
        }
    }

    /// The same, whose reserve may be put in shadow through `counts`.
    pub(super) fn with_counts(mut self, counts: Counts) -> Admission<T> {
        self.counts = Some(counts);
        self
    }

    /// A free reserved seat for an ordinary request, when the reserve is in
    /// shadow (`None` otherwise).
    fn shadow_seat(&self) -> Option<Seat> {
        self.counts.as_ref()?.shadow_seat(&self.room)
    }

    /// `taken` (`reserved` or not, due by `deadline`), on the calling
    /// thread, which is free. A `patient` ordinary request is never refused:
    /// it waits for an ordinary thread however long. It is one whose answer
    /// costs a thread as long as its client takes to send its body (tiny_http
    /// reads an unread body to its end before it takes the connection's next
    /// request), so that refusing it would hold this thread, reserved or not,
    /// on a client that trickles.
    pub(super) fn admit(&self, taken: T, reserved: bool, patient: bool, deadline: Instant) -> Admit<T> {
        let mut line = self.line.lock();
        let queued = Line { ahead: line.queue.len(), standing: line.standing };
        match self.room.seat_or_wait(usize::from(reserved), deadline, queued) {
            Ok(seat) => {
                if reserved {
                    self.reserved_busy.fetch_add(1, Ordering::Relaxed);
                }
                Admit::Run(taken, seat)
            }
            Err(wait) => {
                if !reserved && let Some(seat) = self.shadow_seat() {
                    return Admit::Run(taken, seat);
                }
                let (until, why) = match wait {
                    Ok(until) if until >= deadline => (Some(until), NoSeat::Deadline),
                    Ok(until) => (Some(until), NoSeat::Waited),
                    Err(why) if !patient => return Admit::Refused(taken, why),
                    Err(why) => (None, why),
                };
                if line.queue.is_empty() {
                    line.standing.formed(Instant::now(), self.room.line_round());
                }
                line.queue.push_back((taken, until.filter(|_| !patient), why));
                self.waiting.store(line.queue.len(), Ordering::Relaxed);
                Admit::Waits
            }
        }
    }

    /// The calling thread has answered the request it held `seat` for:
    /// gives it back and says what the thread does next.
    pub(super) fn done(&self, seat: Seat) -> Next<T> {
        if seat.class() == 1 {
            self.reserved_busy.fetch_sub(1, Ordering::Relaxed);
        }
        let mut line = self.line.lock();
        drop(seat);
        self.next(&mut line)
    }

    /// For an idle thread: the waiting requests whose wait ended, and the
    /// oldest other one if a seat is free for it (none is, by the invariant,
    /// unless the room grew).
    pub(super) fn sweep(&self) -> Next<T> {
        let mut line = self.line.lock();
        self.next(&mut line)
    }

    fn next(&self, line: &mut Waiting<T>) -> Next<T> {
        let now = Instant::now();
        let mut next = Next { run: None, expired: Vec::new() };
        // A line that does not move (every ordinary seat held for several
        // normal holds, none back) is left by all but the patient.
        let stuck = !line.queue.is_empty() && self.room.is_stuck(0);
        if stuck || line.queue.iter().any(|(_, until, _)| until.is_some_and(|u| u <= now)) {
            let mut kept = VecDeque::with_capacity(line.queue.len());
            for (taken, until, why) in line.queue.drain(..) {
                match until {
                    Some(u) if u <= now => next.expired.push((taken, why)),
                    Some(_) if stuck => next.expired.push((taken, NoSeat::Stuck)),
                    _ => kept.push_back((taken, until, why)),
                }
            }
            line.queue = kept;
        }
        if !line.queue.is_empty()
            && let Some(seat) = self.room.try_seat(0).or_else(|| self.shadow_seat())
        {
            let (taken, ..) = line.queue.pop_front().expect("not empty");
            next.run = Some((taken, seat));
        }
        if line.queue.is_empty() {
            line.standing.emptied(now);
        }
        self.waiting.store(line.queue.len(), Ordering::Relaxed);
        next
    }

    /// Every waiting request, oldest first, for a pool that stops.
    pub(super) fn drain(&self) -> Vec<T> {
        let mut line = self.line.lock();
        line.standing = Standing::default();
        self.waiting.store(0, Ordering::Relaxed);
        line.queue.drain(..).map(|(taken, ..)| taken).collect()
    }

    /// Reserved requests being handled now.
    pub(super) fn reserved_busy(&self) -> usize {
        self.reserved_busy.load(Ordering::Relaxed)
    }

    /// Ordinary requests waiting for an ordinary thread.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    /// An admission of `threads` seats, `reserved` of them kept from
    /// ordinary requests, whose waiting requests wait up to a minute.
    fn admission<T>(threads: usize, reserved: usize) -> Admission<T> {
        let room = Room::with_shares(threads, Duration::from_secs(60), &[reserved, 0]).unwrap();
        Admission::new(room, Arc::default(), Arc::default())
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    /// The own server's requests take the room's seats: one that finds none
    /// is counted there as waiting, and is seated when a seat comes back.
    #[test]
    fn a_waiting_request_goes_through_the_room() {
        let admission = admission::<&str>(1, 0);
        let Admit::Run("a", seat) = admission.admit("a", false, false, far()) else { panic!("a free seat") };
        assert!(matches!(admission.admit("b", false, false, far()), Admit::Waits));
        let next = admission.done(seat);
        let Some(("b", seat)) = next.run else { panic!("the waiting request is next") };
        drop(seat);
        let counts = admission.room.counts();
        assert_eq!((counts.seated, counts.waited, counts.refused), (2, 1, 0), "{counts:?}");
        assert_eq!((admission.waiting(), admission.room.in_use()), (0, 0));
    }

    /// The line of waiting requests keeps its age across an empty instant
    /// (the thread that seated the last one) and loses it when drained.
    #[test]
    fn the_waiting_line_stands_across_an_empty_instant_and_a_drain_ends_it() {
        let admission = admission::<&str>(1, 0);
        let stood = |round| admission.line.lock().standing.stood(Instant::now(), round);
        let Admit::Run("a", seat) = admission.admit("a", false, false, far()) else { panic!("a free seat") };
        assert_eq!(stood(Duration::from_secs(60)), Duration::ZERO, "nobody waits yet");
        assert!(matches!(admission.admit("b", false, false, far()), Admit::Waits));
        let Some(("b", seat)) = admission.done(seat).run else { panic!("the waiting request is next") };
        assert_eq!(admission.waiting(), 0);
        // Empty now, but for less than one round: still standing.
        assert!(stood(Duration::from_secs(60)) > Duration::ZERO);
        // A break of one round (here zero) ends it.
        assert_eq!(stood(Duration::ZERO), Duration::ZERO);
        assert!(matches!(admission.admit("c", false, false, far()), Admit::Waits));
        assert_eq!(admission.drain(), ["c"]);
        assert_eq!(stood(Duration::from_secs(60)), Duration::ZERO, "a drained line is no line");
        drop(seat);
    }

    /// 16 threads race over a stream of requests, a third of them reserved,
    /// as the request threads do over tiny_http's: ordinary requests never
    /// hold more than their limit, no thread is ever over-counted, and every
    /// request is answered exactly once.
    #[test]
    fn ordinary_requests_never_take_the_reserve_with_16_threads_racing() {
        const THREADS: usize = 16;
        const RESERVED: usize = 3;
        const REQUESTS: usize = 20_000;
        for _round in 0..5 {
            let admission = Arc::new(admission::<usize>(THREADS, RESERVED));
            let (tx, rx) = crossbeam_channel::unbounded();
            for i in 0..REQUESTS {
                tx.send(i).unwrap();
            }
            drop(tx);
            let reserved_of = |i: usize| i.is_multiple_of(3);
            let ordinary_now = Arc::new(AtomicUsize::new(0));
            let all_now = Arc::new(AtomicUsize::new(0));
            let answered: Arc<Vec<AtomicBool>> =
                Arc::new((0..REQUESTS).map(|_| AtomicBool::new(false)).collect());
            let start = Arc::new(Barrier::new(THREADS));
            let threads: Vec<_> = (0..THREADS)
                .map(|_| {
                    let (admission, rx, start) = (Arc::clone(&admission), rx.clone(), Arc::clone(&start));
                    let (ordinary_now, all_now, answered) =
                        (Arc::clone(&ordinary_now), Arc::clone(&all_now), Arc::clone(&answered));
                    std::thread::spawn(move || {
                        start.wait();
                        let (mut most_ordinary, mut most_all) = (0, 0);
                        let mut next = None;
                        loop {
                            let (i, seat) = match next.take() {
                                Some(i) => i,
                                // The free thread takes the next request, as from tiny_http.
                                None => match rx.try_recv() {
                                    Ok(i) => match admission.admit(i, reserved_of(i), false, far()) {
                                        Admit::Run(i, seat) => (i, seat),
                                        Admit::Waits => continue,
                                        Admit::Refused(i, why) => panic!("{i} refused: {why:?}"),
                                    },
                                    Err(_) => break,
                                },
                            };
                            let reserved = reserved_of(i);
                            if !reserved {
                                most_ordinary =
                                    most_ordinary.max(ordinary_now.fetch_add(1, Ordering::SeqCst) + 1);
                            }
                            most_all = most_all.max(all_now.fetch_add(1, Ordering::SeqCst) + 1);
                            // The handler: a few spins, and now and then a yield,
                            // so that requests overlap even on two cores.
                            for _ in 0..(i % 64) {
                                std::hint::spin_loop();
                            }
                            if i.is_multiple_of(4) {
                                std::thread::yield_now();
                            }
                            assert!(!answered[i].swap(true, Ordering::SeqCst), "request {i} answered twice");
                            all_now.fetch_sub(1, Ordering::SeqCst);
                            if !reserved {
                                ordinary_now.fetch_sub(1, Ordering::SeqCst);
                            }
                            let after = admission.done(seat);
                            assert!(after.expired.is_empty(), "a wait of a minute ended");
                            next = after.run;
                        }
                        (most_ordinary, most_all)
                    })
                })
                .collect();
            let mut most = (0, 0);
            for t in threads {
                let (o, a) = t.join().unwrap();
                most = (most.0.max(o), most.1.max(a));
            }
            eprintln!("at most {} ordinary and {} requests at once", most.0, most.1);
            assert!(most.0 <= THREADS - RESERVED, "{} ordinary requests at once", most.0);
            assert!(most.1 <= THREADS, "{} requests at once", most.1);
            let unanswered = answered.iter().filter(|a| !a.load(Ordering::SeqCst)).count();
            assert_eq!(unanswered, 0, "requests left waiting");
            assert_eq!((admission.waiting(), admission.reserved_busy()), (0, 0));
            assert_eq!(admission.room.in_use(), 0);
        }
    }

    #[test]
    fn an_ordinary_request_waits_only_while_the_ordinary_threads_are_full() {
        let admission = admission(3, 1);
        let run = |a: Admit<i32>| match a {
            Admit::Run(i, seat) => (i, seat),
            _ => panic!("not run"),
        };
        let (_, one) = run(admission.admit(1, false, false, far()));
        let (_, two) = run(admission.admit(2, false, false, far()));
        // Full: the next ordinary waits, a reserved one runs.
        assert!(matches!(admission.admit(3, false, false, far()), Admit::Waits));
        assert!(matches!(admission.admit(4, false, false, far()), Admit::Waits));
        let (five, reserved) = run(admission.admit(5, true, false, far()));
        assert_eq!(five, 5);
        assert_eq!((admission.waiting(), admission.reserved_busy()), (2, 1));
        // A reserved request finishing frees no ordinary seat.
        let next = admission.done(reserved);
        assert!(next.run.is_none() && next.expired.is_empty());
        // An ordinary one hands its seat to the oldest waiting.
        let (three, three_seat) = admission.done(one).run.unwrap();
        let (four, four_seat) = admission.done(two).run.unwrap();
        assert_eq!((three, four), (3, 4));
        assert_eq!(admission.waiting(), 0);
        assert!(admission.done(three_seat).run.is_none());
        drop(four_seat);
        assert!(matches!(admission.admit(6, false, false, far()), Admit::Run(6, _)));
    }

    #[test]
    fn a_waiting_request_past_its_wait_is_answered_by_the_next_thread_free() {
        let room = Room::with_shares(2, Duration::from_millis(20), &[1, 0]).unwrap();
        let admission = Admission::new(room, Arc::default(), Arc::default());
        let Admit::Run(_, held) = admission.admit(1, false, false, far()) else { panic!("run") };
        assert!(matches!(admission.admit(2, false, false, far()), Admit::Waits));
        // Its deadline, nearer than max_wait, is the end of its wait.
        assert!(matches!(
            admission.admit(3, false, false, Instant::now() + Duration::from_millis(5)),
            Admit::Waits
        ));
        let give_up = Instant::now() + Duration::from_secs(10);
        let mut expired = Vec::new();
        while expired.len() < 2 {
            assert!(Instant::now() < give_up, "never expired");
            expired.extend(admission.sweep().expired);
            std::thread::yield_now();
        }
        expired.sort_by_key(|(i, _)| *i);
        assert_eq!(expired, [(2, NoSeat::Waited), (3, NoSeat::Deadline)]);
        assert_eq!(admission.waiting(), 0);
        drop(held);
        // max_wait 0: nobody waits.
        let none = Room::with_shares(2, Duration::ZERO, &[1, 0]).unwrap();
        let admission = Admission::new(none, Arc::default(), Arc::default());
        let Admit::Run(_, _held) = admission.admit(1, false, false, far()) else { panic!("run") };
        assert!(matches!(admission.admit(2, false, false, far()), Admit::Refused(2, NoSeat::Full)));
    }

    #[test]
    fn a_stopping_pool_drains_every_waiting_request_oldest_first() {
        let room = Room::with_shares(2, Duration::from_secs(10), &[1, 0]).unwrap();
        let admission = Admission::new(room, Arc::default(), Arc::default());
        let Admit::Run(_, held) = admission.admit(1, false, false, far()) else { panic!("run") };
        assert!(matches!(admission.admit(2, false, false, far()), Admit::Waits));
        assert!(matches!(admission.admit(3, false, false, far()), Admit::Waits));
        assert_eq!(admission.waiting(), 2);
        assert_eq!(admission.drain(), [2, 3]);
        assert_eq!(admission.waiting(), 0);
        // Nothing is left for the seat given back.
        assert!(admission.done(held).run.is_none());
    }

    #[test]
    fn a_patient_request_waits_past_max_wait_and_is_never_refused() {
        let room = Room::with_shares(2, Duration::ZERO, &[1, 0]).unwrap();
        let admission = Admission::new(room, Arc::default(), Arc::default());
        let Admit::Run(_, held) = admission.admit(1, false, false, far()) else { panic!("run") };
        // max_wait 0 refuses an ordinary request at once; a patient one waits.
        assert!(matches!(admission.admit(2, false, false, far()), Admit::Refused(2, NoSeat::Full)));
        assert!(matches!(admission.admit(3, false, true, Instant::now()), Admit::Waits));
        let sweep = admission.sweep();
        assert!(sweep.run.is_none() && sweep.expired.is_empty());
        // The seat given back goes to it.
        assert_eq!(admission.done(held).run.map(|(i, _)| i), Some(3));
    }

    #[test]
    fn a_reserve_in_shadow_lets_ordinary_requests_onto_free_reserved_threads() {
        use crate::shadow::{Policy, Shadow};
        let counts = Counts::default();
        counts.shadow.set(Shadow::none().with(Policy::Reserve));
        let room = Room::with_shares(3, Duration::from_secs(10), &[1, 0]).unwrap();
        let admission = Admission::new(room, Arc::clone(&counts.reserved_busy), Arc::clone(&counts.waiting))
            .with_counts(counts.clone());
        let Admit::Run(_, one) = admission.admit(1, false, false, far()) else {
            panic!("an ordinary thread")
        };
        let Admit::Run(_, two) = admission.admit(2, false, false, far()) else {
            panic!("an ordinary thread")
        };
        // Enforced, the third would wait for an ordinary thread: in shadow it takes the reserved one.
        let Admit::Run(_, three) = admission.admit(3, false, false, far()) else {
            panic!("the reserved thread")
        };
        assert_eq!(three.class(), 1);
        assert_eq!((counts.shadowed.load().get(Policy::Reserve), admission.reserved_busy()), (1, 1));
        // Every thread busy: the pool's own bound, not the reserve's; it waits.
        assert!(matches!(admission.admit(4, false, false, far()), Admit::Waits));
        assert_eq!(counts.shadowed.load().get(Policy::Reserve), 1);
        // The reserved thread given back goes to the one waiting, in shadow too.
        let (four, four_seat) = admission.done(three).run.expect("the waiting request runs");
        assert_eq!((four, four_seat.class(), admission.waiting()), (4, 1, 0));
        assert_eq!(counts.shadowed.load().get(Policy::Reserve), 2);
        // Enforced again (live): the next ordinary request waits for an ordinary thread.
        drop(four_seat);
        counts.shadow.set(Shadow::none());
        assert!(matches!(admission.admit(5, false, false, far()), Admit::Waits));
        assert!(matches!(admission.admit(6, true, false, far()), Admit::Run(6, _)), "the reserve kept");
        assert_eq!(admission.done(one).run.map(|(i, _)| i), Some(5));
        drop(two);
    }
}
