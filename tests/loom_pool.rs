//! Model check of the pool's reply slot (src/pool/slot.rs) and of its queue
//! (src/pool/queue.rs: idle workers, their mailboxes and parking, resize and
//! close) under loom: every interleaving, for each race the protocols have.
//!
//! Run: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --test loom_pool`
//!
//! What is checked, in every interleaving:
//! - a caller that parks until the slot settles is always woken (a lost
//!   wake-up would be a deadlock, which loom reports);
//! - a caller that gives up and its worker agree on what happened: the answer
//!   is taken by exactly one side (the caller, or the worker gets it back);
//! - `abandoned` is raised before the worker can lower it (never below zero);
//! - a withdrawn job never starts; an expired job never starts.
//!
//! And for the queue:
//! - a job handed to a worker that is going idle (or is already parked) is
//!   run exactly once, and the worker always wakes for it;
//! - a job goes to the worker spinning for work even when a worker that
//!   parked after it sits on top of the idle stack (no wake-up spent);
//! - queue 0 accepts a job for a worker that has answered but is not back yet,
//!   and that worker takes it;
//! - a shrink racing a worker going idle always makes the worker exit (by a
//!   letter or when it comes back), and never strands a job;
//! - close racing a submission: the job is either refused or run, and the
//!   worker exits either way.
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use watertight::__loom_queue::{Accepted, Letter, Mailbox, Queue, Refused};
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

/// The pool's busy counter is a plain std atomic (a statistic); the queue
/// only reads it under its lock.
type Busy = std::sync::atomic::AtomicUsize;

/// A worker's loop, as `worker_main` runs it (without spinning, which loom
/// could not tell from parking): returns the jobs it ran.
fn work(queue: &Queue<u32>, busy: &Busy) -> Vec<u32> {
    let me = Mailbox::for_current_thread();
    let mut ran = Vec::new();
    while let Some(next) = queue.next(&me, busy) {
        let job = match next {
            Ok(job) => job,
            Err(_idle) => match me.wait() {
                Letter::Job(job) => job,
                Letter::Retire | Letter::Close => break,
            },
        };
        ran.push(job);
        // The job answers: the worker is no longer busy, and comes back.
        busy.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
    ran
}

/// A worker that comes to the queue once: takes a queued job, or goes idle
/// and parks for its letter; `None` if told to exit at the lock.
fn park_for_a_letter(queue: &Arc<Queue<u32>>, busy: &Arc<Busy>) -> thread::JoinHandle<Option<Letter<u32>>> {
    let (queue, busy) = (queue.clone(), busy.clone());
    thread::spawn(move || {
        let me = Mailbox::for_current_thread();
        match queue.next(&me, &busy)? {
            Ok(job) => Some(Letter::Job(job)),
            Err(_idle) => Some(me.wait()),
        }
    })
}

#[test]
fn a_job_handed_to_an_idle_worker_runs_once_and_wakes_it() {
    loom::model(|| {
        // One worker, starting; queue 0.
        let queue = Arc::new(Queue::new(0, 1));
        let busy = Arc::new(Busy::new(0));
        let worker = {
            let (queue, busy) = (queue.clone(), busy.clone());
            thread::spawn(move || work(&queue, &busy))
        };
        // The worker is starting or idle: either way the job is accepted
        // (for a worker about to come back, or handed to the idle one).
        let accepted = queue.push(1, &busy).expect("a starting or idle worker takes it");
        assert!(matches!(accepted, Accepted::Queued { .. } | Accepted::Handed(_)));
        // Close once the job is in: the worker runs it, then exits.
        queue.close();
        assert_eq!(worker.join().unwrap(), vec![1]);
        assert_eq!(busy.load(std::sync::atomic::Ordering::Relaxed), 0);
    });
}

#[test]
fn a_spinning_worker_below_a_parked_one_takes_the_job_without_a_wake_up() {
    loom::model(|| {
        // Two workers, queue 0. This thread plays the first: it goes idle
        // and spins for work. The second goes idle (on top of the idle
        // stack) and parks, before or after the job comes.
        let queue = Arc::new(Queue::new(0, 2));
        let busy = Arc::new(Busy::new(0));
        let me = Mailbox::for_current_thread();
        assert!(matches!(queue.next(&me, &busy), Some(Err(_))), "nothing is queued yet");
        assert!(queue.start_spinning(&me), "the only spinner");
        let parker = park_for_a_letter(&queue, &busy);
        // Whether the parked worker is on top or not, the spinner gets it.
        assert_eq!(queue.push(1, &busy).expect("two idle workers"), Accepted::Handed(true));
        assert!(me.is_posted());
        queue.stop_spinning(&me);
        assert!(matches!(me.wait(), Letter::Job(1)));
        queue.close();
        assert!(matches!(parker.join().unwrap(), None | Some(Letter::Close)));
    });
}

#[test]
fn close_racing_a_submission_either_refuses_or_runs_it() {
    loom::model(|| {
        let queue = Arc::new(Queue::new(1, 1));
        let busy = Arc::new(Busy::new(0));
        let worker = {
            let (queue, busy) = (queue.clone(), busy.clone());
            thread::spawn(move || work(&queue, &busy))
        };
        let closer = {
            let queue = queue.clone();
            thread::spawn(move || queue.close())
        };
        let pushed = queue.push(7, &busy);
        assert!(closer.join().unwrap());
        let ran = worker.join().unwrap();
        match pushed {
            Ok(_) => assert_eq!(ran, vec![7], "an accepted job was not run"),
            Err((why, job)) => {
                assert_eq!((why, job), (Refused::Closed, 7));
                assert!(ran.is_empty());
            }
        }
        assert_eq!(queue.queued(), 0);
    });
}

#[test]
fn a_shrink_racing_an_idle_worker_always_lets_it_exit() {
    loom::model(|| {
        // Two workers; one is modelled, the other stays "away" (busy
        // elsewhere) for the whole model. Shrink to one: the modelled worker
        // must exit whether it is idle (a letter) or coming back (the
        // retire count), and the job offered meanwhile is never stranded.
        let queue = Arc::new(Queue::new(1, 2));
        let busy = Arc::new(Busy::new(1));
        let worker = {
            let (queue, busy) = (queue.clone(), busy.clone());
            thread::spawn(move || work(&queue, &busy))
        };
        let shrinker = {
            let (queue, busy) = (queue.clone(), busy.clone());
            thread::spawn(move || queue.resize(1, 1, &busy))
        };
        let pushed = queue.push(3, &busy).is_ok();
        assert_eq!(shrinker.join().unwrap().start, 0);
        let ran = worker.join().unwrap();
        if pushed && ran.is_empty() {
            // Queued behind the busy worker, which runs it when it comes back.
            assert_eq!(queue.queued(), 1);
        } else {
            assert_eq!(ran.len(), usize::from(pushed));
            assert_eq!(queue.queued(), 0);
        }
    });
}

#[test]
fn a_job_offered_while_a_worker_returns_waits_for_it_and_a_shrink_never_strands_it() {
    loom::model(|| {
        // Three workers, queue 0: one busy elsewhere for the whole model,
        // one (B) going idle and parking, and this thread (A), which has just
        // answered a call and is coming back to the lock.
        let queue = Arc::new(Queue::new(0, 3));
        let busy = Arc::new(Busy::new(1));
        let parker = park_for_a_letter(&queue, &busy);
        // Whether B is idle yet or not, A is on its way back: the job waits
        // for A rather than waking B.
        assert_eq!(queue.push(1, &busy).expect("A takes it"), Accepted::Queued { ahead: 0 });
        // Shrink to one, racing A's return and B's going idle. An idle B is
        // retired before busy workers, and A may be asked to exit when it
        // comes back: the job must not be left queued while B sleeps.
        let shrinker = {
            let (queue, busy) = (queue.clone(), busy.clone());
            thread::spawn(move || queue.resize(1, 0, &busy))
        };
        let me = Mailbox::for_current_thread();
        let a = match queue.next(&me, &busy) {
            Some(Ok(job)) => Some(Letter::Job(job)),
            // B took the job on its way in: A idles until it is retired.
            Some(Err(_idle)) => Some(me.wait()),
            None => None,
        };
        assert_eq!(shrinker.join().unwrap().start, 0);
        let b = parker.join().unwrap();
        let ran = [&a, &b].iter().filter(|l| matches!(l, Some(Letter::Job(1)))).count();
        // Run once, by A or by B; or, when both were asked to exit before B
        // went idle, queued for the one worker left (busy elsewhere), as any
        // job queued behind a busy worker is.
        assert_eq!(ran + queue.queued(), 1, "A: {a:?}, B: {b:?}");
        if queue.queued() == 1 {
            assert!(b.is_none(), "B idled and was retired while the job waited: {b:?}");
        }
    });
}
