//! The room: seats, shares per class, the FIFO wait admitted by time.

use super::*;
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

fn far() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

/// Yields until `cond` holds; panics after 10 s.
fn wait_for(mut cond: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < give_up, "the condition never came");
        thread::yield_now();
    }
}

#[test]
fn a_panic_releases_the_permit() {
    let sem = Room::new(1, Duration::ZERO).unwrap();
    let s = sem.clone();
    let r = thread::spawn(move || {
        let _p = s.acquire(far()).unwrap();
        panic!("the job panics");
    })
    .join();
    assert!(r.is_err());
    assert_eq!(sem.in_use(), 0);
    assert!(sem.acquire(far()).is_some());
}

#[test]
fn a_shrink_is_absorbed_by_returning_permits_and_a_grow_serves_waiters() {
    let sem = Room::new(3, Duration::from_secs(5)).unwrap();
    let permits: Vec<_> = (0..3).map(|_| sem.acquire(far()).unwrap()).collect();
    sem.resize(1, Duration::from_secs(5)).unwrap();
    assert_eq!(sem.in_use(), 3, "nobody is blocked or robbed by a shrink");
    let mut permits = permits.into_iter();
    drop(permits.next());
    drop(permits.next());
    assert_eq!(sem.in_use(), 1);
    assert!(sem.acquire(Instant::now()).is_none(), "at the new limit");
    let s = sem.clone();
    let waiter = thread::spawn(move || s.acquire(far()).is_some());
    wait_for(|| sem.waiting() == 1);
    sem.resize(2, Duration::from_secs(5)).unwrap();
    assert!(waiter.join().unwrap(), "a grow hands the new permit to the waiter");
    assert_eq!(sem.resize(0, Duration::ZERO).unwrap_err().field(), "max_concurrent");
}

#[test]
fn never_more_inside_than_the_limit_with_sixteen_threads_racing() {
    const THREADS: usize = 16;
    let sem = Room::new(4, Duration::from_millis(50)).unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (sem, inside, most, start) = (sem.clone(), inside.clone(), most.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let (mut got, mut refused) = (0, 0);
                for _ in 0..500 {
                    match sem.acquire(far()) {
                        Some(p) => {
                            let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(n, Ordering::SeqCst);
                            thread::yield_now();
                            inside.fetch_sub(1, Ordering::SeqCst);
                            drop(p);
                            got += 1;
                        }
                        None => refused += 1,
                    }
                }
                (got, refused)
            })
        })
        .collect();
    let (mut got, mut refused) = (0, 0);
    for t in threads {
        let (g, r) = t.join().unwrap();
        got += g;
        refused += r;
    }
    assert_eq!(got + refused, THREADS * 500, "every acquire answered once");
    assert!(most.load(Ordering::SeqCst) <= 4, "{} inside at once", most.load(Ordering::SeqCst));
    assert_eq!((sem.in_use(), sem.waiting()), (0, 0));
}

#[test]
fn a_class_never_takes_the_seats_it_keeps_and_the_other_class_takes_any() {
    // 4 seats; class 0 keeps 1 for class 1.
    let room = Room::with_shares(4, Duration::ZERO, &[1, 0]).unwrap();
    let ordinary: Vec<_> = (0..3).map(|_| room.acquire_as(0, far()).unwrap()).collect();
    assert_eq!(room.acquire_as(0, far()).unwrap_err(), NoSeat::Full);
    let reserved = room.acquire_as(1, far()).expect("the kept seat");
    assert_eq!(room.acquire_as(1, far()).unwrap_err(), NoSeat::Full, "every seat taken");
    assert_eq!((room.held_by(0), room.held_by(1), room.in_use()), (3, 1, 4));
    drop(ordinary);
    // With the ordinary seats free, class 1 takes any of them.
    let more: Vec<_> = (0..3).map(|_| room.acquire_as(1, far()).unwrap()).collect();
    assert_eq!(room.held_by(1), 4);
    drop((more, reserved));
    assert_eq!(room.in_use(), 0);
}

#[test]
fn a_waiter_of_the_kept_class_is_not_passed_by_the_other_and_a_reserved_one_passes_it() {
    let room = Room::with_shares(2, Duration::from_secs(5), &[1, 0]).unwrap();
    let held = room.acquire_as(0, far()).unwrap();
    // Class 0 is at its ceiling (1 of 2): its next caller waits.
    let r = room.clone();
    let waiter = thread::spawn(move || r.acquire_as(0, far()).map(|s| s.class()));
    wait_for(|| room.waiting() == 1);
    // A class-1 caller takes the free seat at once, past the waiter.
    let reserved = room.acquire_as(1, Instant::now() + Duration::from_millis(1)).expect("free for class 1");
    drop(reserved);
    assert_eq!(room.waiting(), 1, "the free seat is still not the waiter's");
    drop(held);
    assert_eq!(waiter.join().unwrap(), Ok(0));
}

#[test]
fn a_caller_whose_expected_wait_passes_max_wait_is_refused_on_arrival() {
    // 2 seats held 400 ms each, max_wait 1 s: a caller expects 400 ms x
    // rounds, one round per 2 callers ahead.
    let room = Room::new(2, Duration::from_secs(1)).unwrap();
    (0..4).for_each(|_| room.inner.hold[0].record(Duration::from_millis(400)));
    assert_eq!(room.mean_hold(0), Some(Duration::from_millis(400)));
    let held: Vec<_> = (0..2).map(|_| room.acquire(far()).unwrap()).collect();
    // Waiters join while `mean x rounds` fits 1 s (2 rounds of 2 seats:
    // 4 waiters); the rest are refused at once. (The two seats given back
    // at the end add their holds to the mean.)
    let stop = Instant::now() + Duration::from_secs(5);
    let mut waiting = Vec::new();
    let mut refused = 0;
    for _ in 0..8 {
        let r = room.clone();
        let before = room.waiting();
        let began = Instant::now();
        let t = thread::spawn(move || r.acquire_as(0, stop).map(drop));
        // Either it joins the line, or it is refused at once.
        loop {
            if room.waiting() > before {
                waiting.push(t);
                break;
            }
            if t.is_finished() {
                assert_eq!(t.join().unwrap(), Err(NoSeat::Full));
                assert!(began.elapsed() < Duration::from_millis(500), "refused on arrival");
                refused += 1;
                break;
            }
            thread::yield_now();
        }
    }
    let joined = waiting.len();
    assert_eq!(joined, 4, "{joined} joined, {refused} refused");
    assert_eq!(joined + refused, 8);
    drop(held);
    for t in waiting {
        // Each gets a seat in turn, or leaves at max_wait: never refused on arrival.
        assert_ne!(t.join().unwrap(), Err(NoSeat::Full));
    }
}

#[test]
fn a_line_that_does_not_move_is_left() {
    let room = Room::new(1, Duration::from_secs(30)).unwrap();
    // A normal hold of 2 ms (stuck after the 20 ms floor), then a seat
    // that never comes back.
    (0..8).for_each(|_| room.inner.hold[0].record(Duration::from_millis(2)));
    let stuck = room.acquire(far()).unwrap();
    let began = Instant::now();
    let r = room.clone();
    let waiter = thread::spawn(move || r.acquire_as(0, far()).map(drop));
    assert_eq!(waiter.join().unwrap().unwrap_err(), NoSeat::Stuck);
    // Left after a few normal holds (at least 20 ms), far before max_wait.
    assert!(began.elapsed() < Duration::from_secs(5), "{:?}", began.elapsed());
    // Once stuck, a newcomer is refused at once.
    thread::sleep(Duration::from_millis(100));
    assert_eq!(room.acquire_as(0, far()).unwrap_err(), NoSeat::Stuck);
    drop(stuck);
    assert!(room.acquire(far()).is_some(), "moves again once a seat comes back");
}

#[test]
fn a_caller_deadline_is_told_apart_from_max_wait() {
    let room = Room::new(1, Duration::from_millis(50)).unwrap();
    let held = room.acquire(far()).unwrap();
    assert_eq!(room.acquire_as(0, Instant::now() + Duration::from_millis(10)).unwrap_err(), NoSeat::Deadline);
    assert_eq!(room.acquire_as(0, far()).unwrap_err(), NoSeat::Waited);
    assert_eq!(room.acquire_as(0, Instant::now()).unwrap_err(), NoSeat::Deadline);
    drop(held);
}

#[test]
fn a_class_that_fills_after_a_quiet_spell_is_not_stuck() {
    // Class 0 keeps one seat of three; a normal hold of about 65 ms (stuck
    // after about 200 ms), then a quiet spell longer than that.
    let room = Room::with_shares(3, Duration::from_secs(30), &[1, 0]).unwrap();
    (0..8).for_each(|_| room.inner.hold[0].record(Duration::from_millis(60)));
    thread::sleep(Duration::from_millis(600));
    // A burst fills the class (not the room): its line is new, not stuck.
    let held: Vec<_> = (0..2).map(|_| room.acquire_as(0, far()).unwrap()).collect();
    let r = room.clone();
    let waiter = thread::spawn(move || r.acquire_as(0, far()).map(drop));
    wait_for(|| room.waiting() == 1 || waiter.is_finished());
    drop(held);
    assert_eq!(waiter.join().unwrap(), Ok(()), "a seat came back within one normal hold");
}

#[test]
fn a_quiet_room_times_one_hold_in_sixteen_and_a_busy_room_every_hold() {
    let room = Room::new(4, Duration::from_secs(1)).unwrap();
    // The first quiet seat is timed: a hold of a few microseconds.
    drop(room.acquire(far()).unwrap());
    let quick = room.mean_hold(0).expect("the first hold is timed");
    // Three seats of four held 50 ms: the third, taken in a busy room, is timed.
    let held: Vec<_> = (0..3).map(|_| room.acquire(far()).unwrap()).collect();
    thread::sleep(Duration::from_millis(50));
    drop(held);
    let busy = room.mean_hold(0).unwrap();
    assert!(busy > quick + Duration::from_millis(4), "{quick:?} -> {busy:?}");
    // Fifteen quick holds in a quiet room: at most one is timed, so the
    // mean stays near the busy hold (all fifteen would take it below 1 ms).
    for _ in 0..15 {
        drop(room.acquire(far()).unwrap());
    }
    let after = room.mean_hold(0).unwrap();
    assert!(after * 8 >= busy * 7 - Duration::from_micros(100), "{busy:?} -> {after:?}");
}

#[test]
fn a_break_shorter_than_one_round_does_not_end_a_standing_line() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let round = ms(30);
    let mut line: Waiters = Waiters::default();
    assert_eq!(line.stood(t0, round), Duration::ZERO, "nobody has waited");
    line.join(0, t0, round);
    assert_eq!(line.stood(t0 + ms(150), round), ms(150));
    // A round of holds ends together: every waiter is granted at once, and
    // is through at 150 ms.
    assert_eq!(line.grant(|_| true).0.len(), 1);
    line.through(t0 + ms(150));
    // Its callers come back 5 ms later: the line still stands, from t0.
    assert_eq!(line.stood(t0 + ms(155), round), ms(155), "an empty instant is no break");
    line.join(0, t0 + ms(155), round);
    assert_eq!(line.stood(t0 + ms(160), round), ms(160));
    // A waiter woken to find its place taken goes back to the front: no break.
    let woken = line.grant(|_| true);
    line.rejoin(&woken.0[0]);
    assert_eq!(line.stood(t0 + ms(170), round), ms(170));
    // A break of one round or more ends it: the next caller starts a new line.
    let _ = line.grant(|_| true);
    line.through(t0 + ms(200));
    assert_eq!(line.stood(t0 + ms(230), round), Duration::ZERO);
    line.join(0, t0 + ms(240), round);
    assert_eq!(line.stood(t0 + ms(250), round), ms(10));
    // Before any hold is timed (a round of zero), every break ends the line.
    let _ = line.grant(|_| true);
    line.through(t0 + ms(300));
    line.join(0, t0 + ms(300), Duration::ZERO);
    assert_eq!(line.stood(t0 + ms(300), Duration::ZERO), Duration::ZERO);
}

/// A room whose line holds requests `T` (the crate's own server's), of
/// `threads` seats, `reserved` of them kept from class 0.
fn for_requests<T>(threads: usize, reserved: usize, max_wait: Duration) -> Room<T> {
    Room::with_rule(threads, max_wait, &[reserved, 0], HoldTime).unwrap()
}

fn run<T>(admission: Admission<T>) -> (T, Seat<T>) {
    match admission {
        Admission::Run(value, seat) => (value, seat),
        _ => panic!("not run"),
    }
}

/// A waiting request holds no thread: it waits in the room's line, and the
/// thread that gives a seat back takes it, oldest first, in its class.
#[test]
fn a_waiting_request_is_handed_on_by_the_thread_that_gives_a_seat_back() {
    let room = for_requests(3, 1, Duration::from_secs(60));
    let (_, one) = run(room.enter(0, 1, far(), false, None));
    let (_, two) = run(room.enter(0, 2, far(), false, None));
    // Full for ordinary requests: they wait; a reserved one runs.
    assert!(matches!(room.enter(0, 3, far(), false, None), Admission::Waits));
    assert!(matches!(room.enter(0, 4, far(), false, None), Admission::Waits));
    let (_, reserved) = run(room.enter(1, 5, far(), false, None));
    assert_eq!((room.waiting(), room.held_by(1)), (2, 1));
    // A reserved seat given back frees no ordinary one.
    let next = room.pass(reserved, None);
    assert!(next.run.is_none() && next.expired.is_empty());
    let (three, three_seat) = room.pass(one, None).run.unwrap();
    let (four, _four_seat) = room.pass(two, None).run.unwrap();
    assert_eq!((three, four, room.waiting()), (3, 4, 0));
    assert!(room.pass(three_seat, None).run.is_none());
    let counts = room.counts();
    assert_eq!((counts.seated, counts.waited, counts.refused), (5, 2, 0), "{counts:?}");
}

/// Requests whose wait ended are answered by the next thread free (told
/// apart: `max_wait`, or their own deadline); with `max_wait` 0 nobody waits
/// but a patient request, which no end of its wait takes out.
#[test]
fn a_request_past_its_wait_is_answered_by_the_next_thread_free_and_a_patient_one_waits() {
    let room = for_requests(2, 1, Duration::from_millis(20));
    let (_, held) = run(room.enter(0, 1, far(), false, None));
    assert!(matches!(room.enter(0, 2, far(), false, None), Admission::Waits));
    let soon = Instant::now() + Duration::from_millis(5);
    assert!(matches!(room.enter(0, 3, soon, false, None), Admission::Waits));
    let mut expired = Vec::new();
    wait_for(|| {
        expired.extend(room.sweep(None).expired);
        expired.len() == 2
    });
    expired.sort_by_key(|(i, _)| *i);
    assert_eq!(expired, [(2, NoSeat::Waited), (3, NoSeat::Deadline)]);
    drop(held);
    let none = for_requests(2, 1, Duration::ZERO);
    let (_, held) = run(none.enter(0, 1, far(), false, None));
    assert!(matches!(none.enter(0, 2, far(), false, None), Admission::Refused(2, NoSeat::Full)));
    assert!(matches!(none.enter(0, 3, Instant::now(), true, None), Admission::Waits));
    assert!(none.sweep(None).expired.is_empty());
    assert!(matches!(none.enter(0, 4, far(), true, None), Admission::Waits));
    assert_eq!(none.pass(held, None).run.map(|(i, _)| i), Some(3));
    assert_eq!(none.drain(), [4], "a stopping pool drains what waits");
    assert_eq!(none.waiting(), 0);
}

/// With a second class to fall back on (the reserve in shadow), a request
/// takes a free seat of it rather than wait; every seat held, it waits.
#[test]
fn a_request_may_take_a_free_seat_of_the_class_it_falls_back_on() {
    let room = for_requests(3, 1, Duration::from_secs(10));
    let (_, _one) = run(room.enter(0, 1, far(), false, Some(1)));
    let (_, two) = run(room.enter(0, 2, far(), false, Some(1)));
    let (_, three) = run(room.enter(0, 3, far(), false, Some(1)));
    assert_eq!(three.class(), 1);
    assert!(matches!(room.enter(0, 4, far(), false, Some(1)), Admission::Waits));
    let (four, seat) = room.pass(three, Some(1)).run.expect("the waiting request runs");
    assert_eq!((four, seat.class()), (4, 1));
    // Enforced: an ordinary request waits for an ordinary seat.
    drop(seat);
    assert!(matches!(room.enter(0, 5, far(), false, None), Admission::Waits));
    assert_eq!(room.pass(two, None).run.map(|(i, _)| i), Some(5));
}

/// 16 threads race over a stream of requests, a third of them reserved, as
/// the request threads do over tiny_http's: ordinary requests never hold
/// more than their share, and every request is answered exactly once.
#[test]
fn ordinary_requests_never_take_the_reserve_with_16_threads_racing() {
    const THREADS: usize = 16;
    const RESERVED: usize = 3;
    const REQUESTS: usize = 20_000;
    let room = for_requests::<usize>(THREADS, RESERVED, Duration::from_secs(60));
    let (tx, rx) = crossbeam_channel::unbounded();
    (0..REQUESTS).for_each(|i| tx.send(i).unwrap());
    drop(tx);
    let ordinary_now = Arc::new(AtomicUsize::new(0));
    let answered: Arc<Vec<AtomicUsize>> = Arc::new((0..REQUESTS).map(|_| AtomicUsize::new(0)).collect());
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (room, rx, start) = (room.clone(), rx.clone(), Arc::clone(&start));
            let (ordinary_now, answered) = (Arc::clone(&ordinary_now), Arc::clone(&answered));
            thread::spawn(move || {
                start.wait();
                let mut most = 0;
                let mut next = None;
                loop {
                    let (i, seat) = match next.take() {
                        Some(taken) => taken,
                        None => match rx.try_recv() {
                            Ok(i) => match room.enter(usize::from(i % 3 == 0), i, far(), false, None) {
                                Admission::Run(i, seat) => (i, seat),
                                Admission::Waits => continue,
                                Admission::Refused(i, why) => panic!("{i} refused: {why:?}"),
                            },
                            Err(_) => break,
                        },
                    };
                    let ordinary = i % 3 != 0;
                    if ordinary {
                        most = most.max(ordinary_now.fetch_add(1, Ordering::SeqCst) + 1);
                    }
                    if i.is_multiple_of(4) {
                        thread::yield_now();
                    }
                    answered[i].fetch_add(1, Ordering::SeqCst);
                    if ordinary {
                        ordinary_now.fetch_sub(1, Ordering::SeqCst);
                    }
                    let after = room.pass(seat, None);
                    assert!(after.expired.is_empty(), "a wait of a minute ended");
                    next = after.run;
                }
                most
            })
        })
        .collect();
    let most = threads.into_iter().map(|t| t.join().unwrap()).max().unwrap();
    assert!(most <= THREADS - RESERVED, "{most} ordinary requests at once");
    assert!(answered.iter().all(|a| a.load(Ordering::SeqCst) == 1), "each request answered once");
    assert_eq!((room.waiting(), room.in_use()), (0, 0));
}
