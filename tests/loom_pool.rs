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
//! - a worker answering (lowering `busy` outside the queue's lock) racing a
//!   submission that reads `busy`: the job is refused (no room seen) or run
//!   exactly once, never stranded;
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

/// The pool's busy counter: a `crate::sync` atomic, so loom's here, and the
/// worker's decrement outside the queue's lock is a step the model explores.
type Busy = loom::sync::atomic::AtomicUsize;

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
        queue.push(1, &busy).expect("a starting or idle worker takes it");
        // Close once the job is in: the worker runs it, then exits.
        queue.close();
        assert_eq!(worker.join().unwrap(), vec![1]);
        assert_eq!(busy.load(std::sync::atomic::Ordering::Relaxed), 0);
    });
}

#[test]
fn a_worker_finishing_racing_a_submission_that_reads_busy() {
    loom::model(|| {
        // One worker, busy with a job (counted `away` and `busy`); queue 0.
        // It answers (lowers `busy`, outside the queue's lock) and comes
        // back, racing a submission whose decision reads `busy`.
        let queue = Arc::new(Queue::new(0, 1));
        let busy = Arc::new(Busy::new(1));
        // Before it answers, the one worker is busy: no room.
        assert!(matches!(queue.push(4, &busy), Err((Refused::Full, 4))), "a busy worker is not coming back");
        let worker = {
            let (queue, busy) = (queue.clone(), busy.clone());
            thread::spawn(move || {
                busy.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                work(&queue, &busy)
            })
        };
        let pushed = queue.push(5, &busy);
        match &pushed {
            // Read `busy` before the decrement: no worker idle or coming
            // back, and no room.
            Err((why, _)) => assert_eq!(*why, Refused::Full),
            // After it: queued for the worker coming back (no wake-up), or
            // handed to it once it was idle.
            Ok(_) => {}
        }
        queue.close();
        let ran = worker.join().unwrap();
        assert_eq!(ran, if pushed.is_ok() { vec![5] } else { vec![] }, "{pushed:?}");
        assert_eq!(busy.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(queue.queued(), 0);
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
        assert_eq!(queue.push(1, &busy).expect("A takes it"), Accepted::Queued);
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
