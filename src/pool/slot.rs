//! The reply slot: where one call's answer passes from its worker to its
//! caller, and where the caller's giving up passes back to the worker.
//!
//! One slot lives inside each call's single allocation, next to the job. Its
//! whole protocol is this file; the waiting loop (spin, then park with a
//! deadline) and all time keeping are in `call.rs`, so this file reads no clock
//! and takes every shared primitive from [`crate::sync`], which lets it run
//! under loom unchanged. The notes beside this file have the picture.
//!
//! # States
//!
//! | state       | meaning                                  | left by                      | to          |
//! |-------------|------------------------------------------|------------------------------|-------------|
//! | `QUEUED`    | the job waits in the pool's queue        | worker [`start`](Slot::start)       | `RUNNING`   |
//! |             |                                          | worker [`expire`](Slot::expire)     | `EXPIRED`   |
//! |             |                                          | shutdown [`answer`](Slot::answer)   | `READY`     |
//! |             |                                          | caller [`finish`](Slot::finish)     | `CANCELLED` |
//! | `RUNNING`   | a worker runs the job                    | worker [`complete`](Slot::complete) | `READY`     |
//! |             |                                          | caller [`finish`](Slot::finish)     | `ABANDONED` |
//! | `READY`     | the answer is stored (final)             | —                            |             |
//! | `EXPIRED`   | never started: deadline passed (final)   | —                            |             |
//! | `CANCELLED` | caller gone before the start (final)     | —                            |             |
//! | `ABANDONED` | caller gone while running (final)        | —                            |             |
//!
//! Every state has exactly one way into it, and the four final states have
//! none out: a slot settles once, so a caller gets exactly one answer.
//!
//! # Who may change what
//!
//! - The two moves out of `QUEUED` made by the worker without anyone waiting
//!   for data (`start`, `expire`) are lock-free compare-and-swaps. They race
//!   only with the caller's `QUEUED -> CANCELLED`, which is also a CAS, so
//!   exactly one of them wins.
//! - Every move that stores or takes the answer, and every move out of
//!   `RUNNING`, happens while holding the slot's mutex. `RUNNING` is therefore
//!   only ever left under the lock, which is what makes `complete` and the
//!   caller's `finish` mutually exclusive: either the answer is stored and the
//!   caller takes it, or the caller has gone and the worker drops it.
//! - The waiter (the caller's thread handle) is only read or written under the
//!   lock. A caller registers before parking; the worker takes the waiter
//!   under the lock after settling the slot and unparks it after unlocking. A
//!   registration that comes after the settle sees the settled state (it checks
//!   under the same lock) and does not park, so no wake-up is lost.
//!
//! # Memory ordering
//!
//! The answer itself is protected by the mutex, not by the atomic. The atomic
//! is a summary that the caller can poll without the lock while it spins:
//! settling stores `READY`/`EXPIRED` with `Release` and the poll loads with
//! `Acquire`, so everything the worker wrote before settling (the pool's
//! relaxed counters in particular) is visible to the caller once it sees the
//! slot settled. The CASes out of `QUEUED` use `AcqRel` on success so the
//! winner also sees what the loser published before (the caller's withdrawal
//! or the worker's start). Transitions made under the lock could be `Relaxed`
//! as far as the lock is concerned; they keep `Release` because lock-free
//! readers (the spin poll) look at them.

use crate::sync::{AtomicU8, Mutex, Ordering, Thread};

const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const READY: u8 = 2;
const EXPIRED: u8 = 3;
const CANCELLED: u8 = 4;
const ABANDONED: u8 = 5;

/// One call's answer, and the caller's presence.
#[repr(C)]
pub struct Slot<R> {
    /// One of the six states above; see the module docs for who moves it.
    state: AtomicU8,
    /// Keeps everything after `state` off its cache line (and the adjacent
    /// one), so the caller polling `state` does not steal the line the worker
    /// is writing the answer, the mutex or the job to. (Before it, in a call's
    /// allocation, are only the `Arc`'s counts, which change at submission and
    /// at the end.) Bytes, not an alignment, so the allocation stays a plain
    /// `malloc`.
    _pad: [u8; 127],
    /// The answer and the thread to wake. Held only for a few instructions:
    /// no user code runs under it.
    inner: Mutex<Inner<R>>,
}

struct Inner<R> {
    /// `Some` exactly while the state is `READY` and the caller has not taken
    /// it yet.
    value: Option<R>,
    /// The caller's thread, registered before it parks; taken by whoever
    /// settles the slot.
    waiter: Option<Thread>,
}

/// What the caller learns when it stops waiting.
#[derive(Debug, PartialEq, Eq)]
pub enum Finish<R> {
    /// The answer was there: the caller takes it.
    Ready(R),
    /// The job was never started because its deadline passed in the queue.
    Expired,
    /// The job was still queued: it is withdrawn and will never start.
    Withdrawn,
    /// The job was running: it is abandoned and its answer will be dropped.
    Abandoned,
}

impl<R> Slot<R> {
    /// A slot for a job that has just been queued.
    pub fn new() -> Self {
        Slot {
            state: AtomicU8::new(QUEUED),
            _pad: [0; 127],
            inner: Mutex::new(Inner { value: None, waiter: None }),
        }
    }

    // ---- worker side ----

    /// Claims the job for running: `QUEUED -> RUNNING`. `false` when the
    /// caller has already gone (`CANCELLED`): the job must not run.
    pub fn start(&self) -> bool {
        self.state.compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Marks a job that will never run because its deadline passed in the
    /// queue: `QUEUED -> EXPIRED`, then wakes the caller if it is parked so
    /// it can report its timeout at once. `false` when the caller had already
    /// gone.
    pub fn expire(&self) -> bool {
        if self.state.compare_exchange(QUEUED, EXPIRED, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        // The caller may have registered before the CAS; registrations after
        // it see EXPIRED under the lock and do not park.
        let waiter = self.inner.lock().waiter.take();
        if let Some(t) = waiter {
            t.unpark();
        }
        true
    }

    /// Stores the answer of a job that ran: `RUNNING -> READY`, and wakes the
    /// caller. When the caller has abandoned the job the answer comes back as
    /// `Err` so the worker can drop it outside the lock.
    pub fn complete(&self, value: R) -> Result<(), R> {
        self.settle(RUNNING, value)
    }

    /// Answers a job that will never run (shutdown): `QUEUED -> READY`.
    /// `Err` hands the answer back when the caller has gone.
    pub fn answer(&self, value: R) -> Result<(), R> {
        self.settle(QUEUED, value)
    }

    fn settle(&self, from: u8, value: R) -> Result<(), R> {
        let waiter = {
            let mut inner = self.inner.lock();
            // Moves out of RUNNING happen only under this lock, so for
            // `from == RUNNING` a load-then-store cannot be overtaken. Out of
            // QUEUED the worker's lock-free CASes cannot run here (only the
            // worker that dequeued the job calls either), but the caller's
            // withdrawal can, hence the CAS.
            if self.state.compare_exchange(from, READY, Ordering::AcqRel, Ordering::Acquire).is_err() {
                return Err(value);
            }
            // The state says READY before the value is in, but the caller
            // takes the value under this lock, which we still hold.
            inner.value = Some(value);
            inner.waiter.take()
        };
        // Unpark after unlocking, so the woken caller does not immediately
        // block on the lock we hold.
        if let Some(t) = waiter {
            t.unpark();
        }
        Ok(())
    }

    // ---- caller side ----

    /// `true` once the slot holds an answer or the job has expired; the
    /// caller then calls [`finish`](Slot::finish). Lock-free: this is what
    /// the caller spins on.
    pub fn is_settled(&self) -> bool {
        matches!(self.state.load(Ordering::Acquire), READY | EXPIRED)
    }

    /// The state's name, for `Debug` output.
    pub fn state_name(&self) -> &'static str {
        match self.state.load(Ordering::Acquire) {
            QUEUED => "queued",
            RUNNING => "running",
            READY => "ready",
            EXPIRED => "expired",
            CANCELLED => "cancelled",
            _ => "abandoned",
        }
    }

    /// Registers `thread` to be unparked when the slot settles. `false` when
    /// it has already settled: do not park, call [`finish`](Slot::finish).
    pub fn register(&self, thread: Thread) -> bool {
        let mut inner = self.inner.lock();
        if self.is_settled() {
            return false;
        }
        inner.waiter = Some(thread);
        true
    }

    /// The caller's last word, on an answer or on giving up: takes the answer
    /// if there is one, otherwise withdraws (`QUEUED -> CANCELLED`) or
    /// abandons (`RUNNING -> ABANDONED`). `on_abandon` runs under the lock
    /// when the job is abandoned, so a count it raises is raised before the
    /// worker can see the abandonment and lower it.
    pub fn finish(&self, on_abandon: impl FnOnce()) -> Finish<R> {
        let mut inner = self.inner.lock();
        inner.waiter = None;
        let mut current = self.state.load(Ordering::Acquire);
        loop {
            let next = match current {
                READY => {
                    // `value` is None only if the answer was already taken,
                    // which a caller (it finishes once) never sees.
                    return match inner.value.take() {
                        Some(v) => Finish::Ready(v),
                        None => Finish::Withdrawn,
                    };
                }
                EXPIRED => return Finish::Expired,
                QUEUED => CANCELLED,
                RUNNING => ABANDONED,
                // Already gone: a second finish changes nothing.
                CANCELLED => return Finish::Withdrawn,
                _ => return Finish::Abandoned,
            };
            // QUEUED can be left concurrently by the worker's lock-free
            // start/expire, so this is a CAS; on failure look again.
            match self.state.compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) if next == ABANDONED => {
                    on_abandon();
                    return Finish::Abandoned;
                }
                Ok(_) => return Finish::Withdrawn,
                Err(actual) => current = actual,
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn answer_reaches_the_caller() {
        let s = Slot::new();
        assert!(s.start());
        assert!(!s.is_settled());
        assert_eq!(s.complete(7), Ok(()));
        assert!(s.is_settled());
        assert_eq!(s.finish(|| panic!("not abandoned")), Finish::Ready(7));
    }

    #[test]
    fn withdrawn_job_never_starts() {
        let s: Slot<u32> = Slot::new();
        assert_eq!(s.finish(|| panic!("not running")), Finish::Withdrawn);
        assert_eq!(s.state_name(), "cancelled");
        assert!(!s.start());
        assert!(!s.expire());
        assert_eq!(s.answer(1), Err(1));
    }

    #[test]
    fn abandoned_answer_comes_back_to_the_worker() {
        let s = Slot::new();
        assert!(s.start());
        let mut abandoned = false;
        assert_eq!(s.finish(|| abandoned = true), Finish::Abandoned);
        assert!(abandoned);
        assert_eq!(s.state_name(), "abandoned");
        assert_eq!(s.complete(3), Err(3));
    }

    #[test]
    fn expired_job_settles_without_an_answer() {
        let s: Slot<u32> = Slot::new();
        assert!(s.register(std::thread::current()));
        assert!(s.expire());
        assert!(s.is_settled());
        assert!(!s.register(std::thread::current()));
        assert_eq!(s.finish(|| {}), Finish::Expired);
        assert!(!s.start());
    }

    #[test]
    fn shutdown_answer_from_queued() {
        let s = Slot::new();
        assert_eq!(s.answer(9), Ok(()));
        assert!(!s.start());
        assert_eq!(s.finish(|| {}), Finish::Ready(9));
    }

    #[test]
    fn completion_wakes_a_registered_waiter() {
        let s = std::sync::Arc::new(Slot::new());
        assert!(s.start());
        assert!(s.register(std::thread::current()));
        let worker = {
            let s = s.clone();
            std::thread::spawn(move || s.complete(42u64))
        };
        // Bounded: if the unpark were lost this would give up after 10 s.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !s.is_settled() && std::time::Instant::now() < until {
            std::thread::park_timeout(std::time::Duration::from_secs(1));
        }
        assert_eq!(worker.join().unwrap(), Ok(()));
        assert_eq!(s.finish(|| {}), Finish::Ready(42));
    }
}
