//! The few synchronization primitives the pool's and the breaker's
//! protocols are built on, behind one door.
//!
//! Normally these are `std` atomics and threads and a `parking_lot` mutex.
//! Under `cfg(loom)` the same names are loom's models, so the protocols in
//! `pool/slot.rs` (the reply), `pool/queue.rs` (the queue, the idle workers
//! and their parking) and `breaker/` (the lock-free paths beside the locked
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
    }
}

pub(crate) use imp::*;

/// How long a waiter spins before yielding, as in crossbeam's back-off
/// (rounds of 1, 2, ... 64 spins: 127 in all); see [`spin_until`]. The limits are crossbeam's, on purpose: a pool round trip
/// should wait the way a crossbeam channel round trip does, so it costs the
/// same. Spinning first matters on small virtual machines, where a futex
/// sleep and wake-up costs tens of microseconds and a short job usually
/// answers within the spin.
const SPIN_LIMIT: u32 = 6;
/// Rounds of back-off (spins, then yields) before a waiter parks.
const YIELD_LIMIT: u32 = 10;

/// Polls `ready` until it returns `true` or the spin-and-yield budget is
/// spent; returns the last answer. For a waiter that only *reads* a flag
/// another thread will set.
///
/// The budget is crossbeam's back-off (127 spins, then 4 yields), but the
/// flag is read after every spin instead of after exponentially growing
/// rounds: a
/// read of a cache line nobody writes costs no traffic between cores, so
/// polling often is free, and it notices the answer up to a whole round
/// sooner. (Exponential rounds are for retrying a contended write.)
pub(crate) fn spin_until(mut ready: impl FnMut() -> bool) -> bool {
    const SPINS: u32 = (1 << (SPIN_LIMIT + 1)) - 1;
    const YIELDS: u32 = YIELD_LIMIT - SPIN_LIMIT;
    for _ in 0..SPINS {
        if ready() {
            return true;
        }
        spin_loop();
    }
    for _ in 0..YIELDS {
        if ready() {
            return true;
        }
        yield_now();
    }
    ready()
}

/// Polls `ready` until it returns `true` (then `true`) or `until` passes
/// (then `false`). Reads the clock once every 64 polls: a poll of a line
/// nobody writes is free, a clock read is not. After the first two rounds it
/// yields between rounds: on a machine with more runnable threads than cores,
/// the thread this one waits for may need this very core, and a wait that
/// only spins would hold it off until the budget runs out.
pub(crate) fn spin_until_instant(mut ready: impl FnMut() -> bool, until: std::time::Instant) -> bool {
    let mut round = 0u32;
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            spin_loop();
        }
        if std::time::Instant::now() >= until {
            return ready();
        }
        round += 1;
        if round > 2 {
            yield_now();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::spin_until;

    #[test]
    fn spin_until_polls_the_whole_budget_then_gives_up() {
        let mut polls = 0;
        assert!(!spin_until(|| {
            polls += 1;
            false
        }));
        // 127 spins + 4 yields, one poll before each, and a last look.
        assert_eq!(polls, 127 + 4 + 1);
        let mut n = 0;
        assert!(spin_until(|| {
            n += 1;
            n == 3
        }));
        assert_eq!(n, 3);
    }
}
