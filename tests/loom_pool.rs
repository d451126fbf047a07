//! Model check of the pool's reply slot (src/pool/slot.rs) under loom: every
//! interleaving of a worker and its caller, for each race the protocol has.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --test loom_pool --release`
//!
//! What is checked, in every interleaving:
//! - a caller that parks until the slot settles is always woken (a lost
//!   wake-up would be a deadlock, which loom reports);
//! - a caller that gives up and its worker agree on what happened: the answer
//!   is taken by exactly one side (the caller, or the worker gets it back);
//! - `abandoned` is raised before the worker can lower it (never below zero);
//! - a withdrawn job never starts; an expired job never starts.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use watertight::__loom_slot::{Finish, Slot};

/// Parks (loom's park) until the slot settles, registering first the way
/// `Ticket::wait` does.
fn wait_settled<R>(slot: &Slot<R>) {
    if slot.register(thread::current()) {
        while !slot.is_settled() {
            thread::park();
        }
    }
}

#[test]
fn completion_always_wakes_a_parked_caller() {
    loom::model(|| {
        let slot = Arc::new(Slot::new());
        let worker = {
            let slot = slot.clone();
            thread::spawn(move || {
                assert!(slot.start());
                assert_eq!(slot.complete(42u32), Ok(()));
            })
        };
        wait_settled(&slot);
        assert_eq!(slot.finish(|| panic!("nothing was abandoned")), Finish::Ready(42));
        worker.join().unwrap();
    });
}

#[test]
fn giving_up_races_start_and_completion() {
    loom::model(|| {
        let slot = Arc::new(Slot::new());
        let abandoned = Arc::new(AtomicUsize::new(0));
        let worker = {
            let (slot, abandoned) = (slot.clone(), abandoned.clone());
            thread::spawn(move || {
                if !slot.start() {
                    return "withdrawn";
                }
                match slot.complete(7u32) {
                    Ok(()) => "delivered",
                    Err(answer) => {
                        assert_eq!(answer, 7);
                        let before = abandoned.fetch_sub(1, Ordering::Relaxed);
                        assert_eq!(before, 1, "abandoned lowered before it was raised");
                        "abandoned"
                    }
                }
            })
        };
        // The caller registers, then gives up at once (its deadline passed).
        let _ = slot.register(thread::current());
        let finish = slot.finish(|| {
            abandoned.fetch_add(1, Ordering::Relaxed);
        });
        let seen_by_worker = worker.join().unwrap();
        match finish {
            Finish::Ready(v) => {
                assert_eq!(v, 7);
                assert_eq!(seen_by_worker, "delivered");
            }
            Finish::Withdrawn => assert_eq!(seen_by_worker, "withdrawn"),
            Finish::Abandoned => assert_eq!(seen_by_worker, "abandoned"),
            Finish::Expired => panic!("nobody expired the job"),
        }
        assert_eq!(abandoned.load(Ordering::Relaxed), 0);
    });
}

#[test]
fn expiry_races_withdrawal_and_wakes_the_caller() {
    loom::model(|| {
        let slot: Arc<Slot<u32>> = Arc::new(Slot::new());
        let worker = {
            let slot = slot.clone();
            thread::spawn(move || slot.expire())
        };
        let _ = slot.register(thread::current());
        let finish = slot.finish(|| panic!("an expired job is never running"));
        let expired = worker.join().unwrap();
        match finish {
            Finish::Expired => assert!(expired),
            Finish::Withdrawn => assert!(!expired),
            other => panic!("unexpected {other:?}"),
        }
        assert!(!slot.start(), "a settled or withdrawn job started");
    });
}

#[test]
fn expiry_wakes_a_parked_caller() {
    loom::model(|| {
        let slot: Arc<Slot<u32>> = Arc::new(Slot::new());
        let worker = {
            let slot = slot.clone();
            thread::spawn(move || assert!(slot.expire()))
        };
        wait_settled(&slot);
        assert_eq!(slot.finish(|| {}), Finish::Expired);
        worker.join().unwrap();
    });
}

#[test]
fn shutdown_answer_reaches_a_parked_caller() {
    loom::model(|| {
        let slot = Arc::new(Slot::new());
        let drainer = {
            let slot = slot.clone();
            thread::spawn(move || assert_eq!(slot.answer("shutting down"), Ok(())))
        };
        wait_settled(&slot);
        assert_eq!(slot.finish(|| {}), Finish::Ready("shutting down"));
        drainer.join().unwrap();
    });
}
