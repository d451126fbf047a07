//! The few synchronization primitives the pool's and the breaker's
//! protocols are built on, behind one door.
//!
//! Normally these are `std` atomics and threads and a `parking_lot` mutex.
//! Under `cfg(loom)` the same names are loom's models, so the protocols in
//! `pool/slot.rs` (the reply), `pool/queue.rs` (the queue, the idle workers
//! and their parking), `room.rs` (the wait for room) and `breaker/` (the lock-free paths beside the locked
//! state machine), which take everything they share from here, can be model
//! checked without a single edit. Nothing else in the crate needs to go
//! through this module: counters and flags that only feed statistics stay on
//! plain `std` atomics.

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::hint::spin_loop;
    pub(crate) use std::sync::Arc;
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use std::thread::{Thread, current, park, park_timeout, yield_now};

    /// The guard of [`Mutex`].
    pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;

    /// A mutex whose `lock` cannot fail: `parking_lot`'s, which does not
    /// poison. No user code runs under it (the breaker announces its
    /// transitions after letting go), and the slot's and the breaker's
    /// states stay consistent at every store, so there is nothing to poison.
    pub(crate) struct Mutex<T>(parking_lot::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(parking_lot::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
            self.0.lock()
        }

        pub(crate) fn try_lock(&self) -> Option<parking_lot::MutexGuard<'_, T>> {
            self.0.try_lock()
        }
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::Arc;
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use loom::thread::{Thread, current, park, yield_now};

    /// The guard of [`Mutex`].
    pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

    /// Under loom a spin is a yield: it lets the model schedule another thread.
    pub(crate) fn spin_loop() {
        loom::thread::yield_now();
    }

    /// `park_timeout` may always return early (a spurious wake-up), so a
    /// yield is a faithful model of it, and one that cannot deadlock the model.
    pub(crate) fn park_timeout(_: std::time::Duration) {
        loom::thread::yield_now();
    }

    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            // loom's mutex poisons like std's; the protocol never panics while
            // holding it, so a poisoned lock is a bug worth a loud failure.
            self.0.lock().expect("mutex poisoned")
        }

        pub(crate) fn try_lock(&self) -> Option<loom::sync::MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
    }
}

pub(crate) use imp::*;

/// The pool's one wait policy is spin, then park, with a budget for each
/// side of a call:
///
/// - [`CALLER_SPIN`]: a caller waiting for its answer (`Ticket::wait`).
///   Longer than a futex wake-up on a small virtual machine (tens of
///   microseconds), so that a caller whose job went to a parked worker
///   catches the answer without parking itself: a caller that parks there
///   starts a convoy, the worker waking the caller and the caller the worker,
///   two wake-ups a call (at 5 us, 41-46 us a call back to back instead of
///   1.4-1.7 us).
/// - [`WORKER_SPIN`]: an idle worker waiting for its next job (`worker_main`).
///   Short: a caller that calls back to back submits its next call within a
///   microsecond or two of its answer, and a worker that spins longer only
///   burns a core between paced calls (at 50 us, 2.2-2.7x the CPU a call of
///   a bare channel round trip takes, in `benches/overhead.rs`).
///
/// Figures, runs and machine: the benches' notes (`benches/`).
pub(crate) const CALLER_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// See [`CALLER_SPIN`].
pub(crate) const WORKER_SPIN: std::time::Duration = std::time::Duration::from_micros(5);

/// Polls between two clock reads while spinning: a poll of a line nobody
/// writes is free, a clock read is not.
const POLLS_PER_CLOCK_READ: u32 = 64;

/// Polls `ready` until it returns `true` (then `true`) or `budget` has
/// passed (then `false`); the caller parks next.
/// For a waiter that only *reads* a flag another thread will set. It yields
/// between rounds of polls: on a machine with more runnable threads than
/// cores, the thread it waits for may need this very core.
pub(crate) fn spin_until(budget: std::time::Duration, mut ready: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + budget;
    loop {
        for _ in 0..POLLS_PER_CLOCK_READ {
            if ready() {
                return true;
            }
            spin_loop();
        }
        if std::time::Instant::now() >= until {
            return ready();
        }
        yield_now();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{CALLER_SPIN, spin_until};
    use std::time::Instant;

    #[test]
    fn spin_until_polls_for_its_budget_then_gives_up() {
        let began = Instant::now();
        let mut polls = 0u64;
        assert!(!spin_until(CALLER_SPIN, || {
            polls += 1;
            false
        }));
        assert!(began.elapsed() >= CALLER_SPIN);
        assert!(polls > u64::from(super::POLLS_PER_CLOCK_READ));
        let mut n = 0;
        assert!(spin_until(CALLER_SPIN, || {
            n += 1;
            n == 3
        }));
        assert_eq!(n, 3);
    }
}
