//! Model check of [`Room`] (src/room.rs: the seats, the shares per class and
//! the one FIFO wait for room, `Waiters` and `wait`) under loom: every
//! interleaving of a seat given back with callers arriving, waiting and
//! giving up.
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --test loom_room`
//!
//! What is checked, in every interleaving:
//! - a seat given back always reaches a waiter (a lost wake-up would leave
//!   it parked, which loom reports as a deadlock);
//! - waiters are served in the order they joined, and a seat given back
//!   wakes exactly the next waiter, no other;
//! - a waiter whose wait ends leaves the line holding no seat, and the seat
//!   is not lost, whether or not it raced the grant;
//! - a class never holds more than its ceiling, and the share kept for the
//!   other class is always there for it, at once.
#![cfg(loom)]

use std::time::{Duration, Instant};

use loom::sync::{Arc, Mutex};
use loom::thread;
use watertight::__loom_room::{NoSeat, Room};

/// A wait long enough never to end within a model.
fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// Yields (loom's spin) until `cond` holds.
fn until(mut cond: impl FnMut() -> bool) {
    while !cond() {
        thread::yield_now();
    }
}

#[test]
fn a_seat_given_back_always_reaches_the_waiter() {
    loom::model(|| {
        let room = Room::new(1, Duration::from_secs(60)).unwrap();
        let held = room.acquire(far()).expect("a free seat");
        let waiter = {
            let room = room.clone();
            thread::spawn(move || {
                let seat = room.acquire(far()).expect("the seat given back");
                assert_eq!(room.in_use(), 1);
                drop(seat);
            })
        };
        drop(held);
        waiter.join().unwrap();
        assert_eq!((room.in_use(), room.waiting()), (0, 0));
        let counts = room.counts();
        assert_eq!((counts.seated, counts.refused), (2, 0), "{counts:?}");
    });
}

#[test]
fn waiters_are_served_in_the_order_they_joined() {
    // Three threads, one spinning until the first waits: bounded preemption
    // (a bound of 2 to 3 finds nearly every concurrency bug) keeps the model
    // to seconds; unbounded, it runs out of branches.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        let room = Room::new(1, Duration::from_secs(60)).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let held = room.acquire(far()).expect("a free seat");
        let first = {
            let (room, order) = (room.clone(), order.clone());
            thread::spawn(move || {
                let seat = room.acquire(far()).expect("the seat given back");
                // The one seat is this waiter's: the next is still in line.
                assert_eq!(room.in_use(), 1);
                order.lock().unwrap().push("first");
                drop(seat);
            })
        };
        until(|| room.waiting() == 1);
        // The seat is given back while this thread joins the line behind
        // the first waiter (or after it was served).
        let giver = thread::spawn(move || drop(held));
        let seat = room.acquire(far()).expect("a seat in turn");
        assert_eq!(room.in_use(), 1);
        order.lock().unwrap().push("second");
        drop(seat);
        first.join().unwrap();
        giver.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["first", "second"]);
        assert_eq!((room.in_use(), room.waiting()), (0, 0));
    });
}

#[test]
fn a_waiter_whose_wait_ends_leaves_without_a_seat() {
    loom::model(|| {
        // A wait of a nanosecond: over by the waiter's first look, unless
        // the seat was granted first (then it keeps it: not lost).
        let room = Room::new(1, Duration::from_nanos(1)).unwrap();
        let held = room.acquire(far()).expect("a free seat");
        let waiter = {
            let room = room.clone();
            thread::spawn(move || match room.acquire_as(0, far()) {
                Ok(seat) => {
                    assert_eq!(room.in_use(), 1);
                    drop(seat);
                    true
                }
                Err(why) => {
                    assert!(matches!(why, NoSeat::Waited | NoSeat::Full), "{why:?}");
                    false
                }
            })
        };
        drop(held);
        let seated = waiter.join().unwrap();
        assert_eq!((room.in_use(), room.waiting()), (0, 0), "no seat held, nobody in line");
        assert_eq!(room.counts().refused, u64::from(!seated));
        // The seat came back either way.
        assert!(room.acquire(far()).is_some());
    });
}

#[test]
fn a_class_keeps_to_its_ceiling_and_the_kept_share_is_there_at_once() {
    loom::model(|| {
        // Two seats; the first class leaves one to the second. No waiting:
        // a caller finding no seat for its class is refused at once.
        let room = Room::with_shares(2, Duration::ZERO, &[1, 0]).unwrap();
        let ordinary = room.acquire_as(0, far()).expect("a free seat");
        let other = {
            let room = room.clone();
            thread::spawn(move || match room.acquire_as(0, far()) {
                Ok(seat) => {
                    assert_eq!(room.held_by(0), 1, "the ceiling of the first class");
                    drop(seat);
                    true
                }
                Err(why) => {
                    assert_eq!(why, NoSeat::Full);
                    false
                }
            })
        };
        // Whatever the first class holds, the kept seat is free at once.
        let kept = room.acquire_as(1, far()).expect("the kept seat, at once");
        assert!(room.held_by(0) <= 1);
        drop(ordinary);
        drop(kept);
        let seated = u64::from(other.join().unwrap());
        let counts = room.counts();
        assert_eq!((counts.seated, counts.refused, counts.waited), (2 + seated, 1 - seated, 0));
        assert_eq!((room.in_use(), room.waiting()), (0, 0));
    });
}
