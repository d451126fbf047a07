//! Which request a free request thread handles next, so that ordinary
//! requests never take the [reserved share](super::Reserve).
//!
//! Every request thread takes requests from tiny_http as before, and a
//! request it takes is classified (reserved or ordinary) before its handler
//! runs. A reserved request runs at once: the thread that took it is free,
//! and a reserved request may use any free thread. An ordinary request runs
//! at once only while fewer than `ordinary_limit` (the pool's threads less
//! the reserve) ordinary requests are being handled; otherwise it waits in
//! `waiting`, and the thread goes back to tiny_http for the next request
//! (which may be a reserved one). The thread that finishes an ordinary
//! request takes the oldest waiting one before anything else, keeping its
//! ordinary slot.
//!
//! Both steps are decided under the one lock on [`State`], so no two
//! threads can both see the last ordinary slot free.
//!
//! Invariant, under the lock: `waiting` is not empty only while `ordinary ==
//! ordinary_limit`. An ordinary request is pushed only when that holds, and a
//! finished ordinary request hands its slot to the oldest waiting one rather
//! than freeing it. So a waiting request is never stranded: `ordinary_limit`
//! threads (at least one) are handling ordinary requests, and the first of
//! them to finish takes it. This also holds while the pool stops: a thread
//! that leaves on its wake-up leaves no waiting request without a thread to
//! answer it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// The admission of a request pool whose requests are `T`s (tiny_http's
/// requests in the pool; plain values in the tests).
pub(super) struct Admission<T> {
    /// The most ordinary requests handled at once: the pool's threads less
    /// the reserve's (all of them without a reserve). At least 1.
    ordinary_limit: usize,
    state: Mutex<State<T>>,
    /// Reserved requests being handled: a gauge, relaxed (it orders nothing).
    /// Shared with the registry's gauges, if any.
    reserved_busy: Arc<AtomicUsize>,
    /// `state.waiting.len()`, readable without the lock: a gauge, relaxed.
    waiting: Arc<AtomicUsize>,
}

struct State<T> {
    /// Ordinary requests being handled.
    ordinary: usize,
    /// Ordinary requests taken while `ordinary == ordinary_limit`, oldest first.
    waiting: VecDeque<T>,
}

impl<T> Admission<T> {
    #[cfg(test)]
    pub(super) fn new(ordinary_limit: usize) -> Admission<T> {
        Self::with_gauges(ordinary_limit, Arc::default(), Arc::default())
    }

    /// An admission whose two gauges are `reserved_busy` and `waiting`.
    pub(super) fn with_gauges(
        ordinary_limit: usize,
        reserved_busy: Arc<AtomicUsize>,
        waiting: Arc<AtomicUsize>,
    ) -> Admission<T> {
        Admission {
            ordinary_limit: ordinary_limit.max(1),
            state: Mutex::new(State { ordinary: 0, waiting: VecDeque::new() }),
            reserved_busy,
            waiting,
        }
    }

    /// `taken` (`reserved` or not), to handle now on the calling thread
    /// (which is free), or `None` when it waits for an ordinary thread.
    pub(super) fn admit(&self, taken: T, reserved: bool) -> Option<T> {
        if reserved {
            self.reserved_busy.fetch_add(1, Ordering::Relaxed);
            return Some(taken);
        }
        let mut state = self.state.lock();
        if state.ordinary < self.ordinary_limit {
            // By the invariant, nothing is waiting: this one is the oldest.
            state.ordinary += 1;
            return Some(taken);
        }
        state.waiting.push_back(taken);
        self.waiting.store(state.waiting.len(), Ordering::Relaxed);
        None
    }

    /// The calling thread has answered a request (`reserved` or not): the
    /// oldest waiting ordinary request, which it handles next in the slot of
    /// the one it answered, or `None` when it is free.
    pub(super) fn done(&self, reserved: bool) -> Option<T> {
        if reserved {
            self.reserved_busy.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let mut state = self.state.lock();
        let next = state.waiting.pop_front();
        match next {
            Some(_) => self.waiting.store(state.waiting.len(), Ordering::Relaxed),
            None => state.ordinary -= 1,
        }
        next
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
            let admission = Arc::new(Admission::<usize>::new(THREADS - RESERVED));
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
                            let i = match next.take() {
                                Some(i) => i,
                                // The free thread takes the next request, as from tiny_http.
                                None => match rx.try_recv() {
                                    Ok(i) => match admission.admit(i, reserved_of(i)) {
                                        Some(i) => i,
                                        None => continue,
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
                            next = admission.done(reserved);
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
            assert_eq!(admission.state.lock().ordinary, 0);
        }
    }

    #[test]
    fn an_ordinary_request_waits_only_while_the_ordinary_threads_are_full() {
        let admission = Admission::new(2);
        assert_eq!(admission.admit(1, false), Some(1));
        assert_eq!(admission.admit(2, false), Some(2));
        // Full: the next ordinary waits, a reserved one runs.
        assert_eq!(admission.admit(3, false), None);
        assert_eq!(admission.admit(4, false), None);
        assert_eq!(admission.admit(5, true), Some(5));
        assert_eq!((admission.waiting(), admission.reserved_busy()), (2, 1));
        // A reserved request finishing frees no ordinary slot.
        assert_eq!(admission.done(true), None);
        // An ordinary one hands its slot to the oldest waiting.
        assert_eq!(admission.done(false), Some(3));
        assert_eq!(admission.done(false), Some(4));
        assert_eq!(admission.waiting(), 0);
        assert_eq!(admission.done(false), None);
        assert_eq!(admission.admit(6, false), Some(6));
    }
}
