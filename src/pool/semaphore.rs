//! [`Semaphore`]: bounded concurrency on the caller's own thread, the
//! other way to build a compartment (Resilience4j's semaphore bulkhead).
//!
//! # The protocol
//!
//! One lock guards `in_use` (permits held), `limit` and the FIFO of
//! waiters. Each waiter is an `Arc<Waiter>` holding its thread and a
//! `granted` flag, written only under the lock.
//!
//! - **acquire**: a permit is taken at once when `in_use < limit` and nobody
//!   waits (waiters are served first: FIFO). Otherwise, when the caller may
//!   wait (its deadline and `max_wait` leave time), it queues itself and
//!   parks until granted or until its wait ends. On giving up it takes the
//!   lock again: if it was granted in the meantime it keeps the permit (the
//!   grant and the give-up raced; the permit is not lost), else it removes
//!   itself from the queue, so a waiter that gives up never holds a place.
//! - **release** (the [`SemaphorePermit`]'s drop, on a panic too): when the
//!   semaphore holds more permits than its limit (it was shrunk), the permit
//!   is absorbed; else it passes straight to the first waiter (`granted`
//!   set, then unparked after the lock is released: a wake-up is never
//!   lost, since the waiter checks `granted` under the lock before parking
//!   and after every wake-up); else `in_use` goes down.
//! - **resize**: a larger limit grants queued waiters at once; a smaller one
//!   sets a target that returning permits absorb. Nothing blocks.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::ConfigError;

struct Waiter {
    thread: Thread,
    /// Set under the lock when a permit is handed to this waiter.
    granted: std::sync::atomic::AtomicBool,
}

struct State {
    in_use: usize,
    limit: usize,
    waiters: VecDeque<Arc<Waiter>>,
}

/// A FIFO semaphore whose waiters wait at most their deadline and a
/// `max_wait`, and leave the queue when they give up.
///
/// ```
/// use std::time::{Duration, Instant};
/// use watertight::pool::Semaphore;
///
/// let sem = Semaphore::new(2, Duration::from_millis(10))?;
/// let deadline = Instant::now() + Duration::from_secs(1);
/// let a = sem.acquire(deadline).expect("free");
/// let _b = sem.acquire(deadline).expect("free");
/// // Full: this caller waits at most 10 ms, then is refused.
/// assert!(sem.acquire(deadline).is_none());
/// drop(a); // released by the guard, on a panic too
/// assert!(sem.acquire(deadline).is_some());
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    max_wait_ns: std::sync::atomic::AtomicU64,
}

/// A permit of a [`Semaphore`]; dropping it releases the permit.
#[must_use = "dropping a SemaphorePermit releases it at once"]
pub struct SemaphorePermit {
    inner: Arc<Inner>,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn check(limit: usize, max_wait: Duration) -> Result<(), ConfigError> {
    if limit == 0 {
        return Err(ConfigError::new("max_concurrent", "at least 1", limit));
    }
    if max_wait > Duration::from_secs(60) {
        return Err(ConfigError::new("max_wait", "at most one minute", format!("{max_wait:?}")));
    }
    Ok(())
}

impl Semaphore {
    /// `limit` permits; a caller finding none free waits at most `max_wait`.
    pub fn new(limit: usize, max_wait: Duration) -> Result<Semaphore, ConfigError> {
        check(limit, max_wait)?;
        Ok(Semaphore {
            inner: Arc::new(Inner {
                state: Mutex::new(State { in_use: 0, limit, waiters: VecDeque::new() }),
                max_wait_ns: std::sync::atomic::AtomicU64::new(ns(max_wait)),
            }),
        })
    }

    /// A permit, at once or after a wait that ends by `deadline` and lasts
    /// at most `max_wait`; `None` when none came in time.
    pub fn acquire(&self, deadline: Instant) -> Option<SemaphorePermit> {
        self.acquire_timed(deadline).map(|(permit, _)| permit)
    }

    /// [`acquire`](Self::acquire), and whether the caller waited for the
    /// permit. A free permit costs no clock read.
    pub(crate) fn acquire_timed(&self, deadline: Instant) -> Option<(SemaphorePermit, bool)> {
        let inner = &self.inner;
        let mut st = inner.state.lock();
        if st.in_use < st.limit && st.waiters.is_empty() {
            st.in_use += 1;
            return Some((SemaphorePermit { inner: Arc::clone(inner) }, false));
        }
        let now = Instant::now();
        let max_wait = Duration::from_nanos(inner.max_wait_ns.load(std::sync::atomic::Ordering::Relaxed));
        let until = deadline.min(now.checked_add(max_wait).unwrap_or(deadline));
        if until <= now {
            return None;
        }
        let me = Arc::new(Waiter { thread: thread::current(), granted: false.into() });
        st.waiters.push_back(Arc::clone(&me));
        loop {
            if me.granted.load(std::sync::atomic::Ordering::Relaxed) {
                return Some((SemaphorePermit { inner: Arc::clone(inner) }, true));
            }
            let now = Instant::now();
            if now >= until {
                // Give up: leave the queue, so the place goes to the next one.
                st.waiters.retain(|w| !Arc::ptr_eq(w, &me));
                return None;
            }
            drop(st);
            thread::park_timeout(until - now);
            st = inner.state.lock();
        }
    }

    /// Permits held now.
    pub fn in_use(&self) -> usize {
        self.inner.state.lock().in_use
    }

    /// Callers waiting for a permit now.
    pub fn waiting(&self) -> usize {
        self.inner.state.lock().waiters.len()
    }

    /// The longest a caller waits for a permit.
    pub fn max_wait(&self) -> Duration {
        Duration::from_nanos(self.inner.max_wait_ns.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The limit in force.
    pub fn limit(&self) -> usize {
        self.inner.state.lock().limit
    }

    /// Changes the limit and the wait while permits are held: more permits
    /// are handed to waiters at once; fewer are absorbed as permits return.
    pub fn resize(&self, limit: usize, max_wait: Duration) -> Result<(), ConfigError> {
        check(limit, max_wait)?;
        self.inner.max_wait_ns.store(ns(max_wait), std::sync::atomic::Ordering::Relaxed);
        let mut st = self.inner.state.lock();
        st.limit = limit;
        let mut wake = Vec::new();
        while st.in_use < st.limit {
            let Some(w) = st.waiters.pop_front() else { break };
            w.granted.store(true, std::sync::atomic::Ordering::Relaxed);
            st.in_use += 1;
            wake.push(w);
        }
        drop(st);
        for w in wake {
            w.thread.unpark();
        }
        Ok(())
    }
}

impl Drop for SemaphorePermit {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock();
        let next = if st.in_use > st.limit { None } else { st.waiters.pop_front() };
        match next {
            // Handed over: `in_use` stays, the waiter owns the permit now.
            Some(w) => {
                w.granted.store(true, std::sync::atomic::Ordering::Relaxed);
                drop(st);
                w.thread.unpark();
            }
            None => st.in_use -= 1,
        }
    }
}

impl fmt::Debug for Semaphore {
    /// Never blocks: prints `<locked>` while the state is locked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.inner.state.try_lock() {
            Some(st) => f
                .debug_struct("Semaphore")
                .field("in_use", &st.in_use)
                .field("limit", &st.limit)
                .field("waiting", &st.waiters.len())
                .finish(),
            None => f.write_str("Semaphore(<locked>)"),
        }
    }
}

impl fmt::Debug for SemaphorePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SemaphorePermit")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicUsize, Ordering};

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
    fn a_waiter_that_gives_up_frees_its_place() {
        let sem = Semaphore::new(1, Duration::from_millis(30)).unwrap();
        let held = sem.acquire(far()).unwrap();
        assert!(sem.acquire(far()).is_none(), "gave up after max_wait");
        assert_eq!(sem.waiting(), 0, "and left the queue");
        drop(held);
        assert_eq!(sem.in_use(), 0);
        assert!(sem.acquire(far()).is_some(), "the place went to nobody");
    }

    #[test]
    fn waiters_are_served_in_order_and_never_past_their_deadline() {
        let sem = Semaphore::new(1, Duration::from_secs(5)).unwrap();
        let held = sem.acquire(far()).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        for i in 0..3 {
            let (s, order) = (sem.clone(), Arc::clone(&order));
            threads.push(thread::spawn(move || {
                let p = s.acquire(far()).unwrap();
                order.lock().push(i);
                drop(p);
            }));
            // Queued one after the other.
            wait_for(|| sem.waiting() == i + 1);
        }
        // One with a short deadline gives up on its own, well within its bound.
        let began = Instant::now();
        assert!(sem.acquire(Instant::now() + Duration::from_millis(20)).is_none());
        assert!(began.elapsed() < Duration::from_secs(2), "{:?}", began.elapsed());
        drop(held);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock(), [0, 1, 2]);
        assert_eq!((sem.in_use(), sem.waiting()), (0, 0));
    }

    #[test]
    fn a_panic_releases_the_permit() {
        let sem = Semaphore::new(1, Duration::ZERO).unwrap();
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
        let sem = Semaphore::new(3, Duration::from_secs(5)).unwrap();
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
        let sem = Semaphore::new(4, Duration::from_millis(50)).unwrap();
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
}
