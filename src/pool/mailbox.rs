//! A worker's mailbox: how an idle worker is handed its next letter (a job,
//! or word to exit) by whoever pops it from the queue's idle stack.

use crate::sync::{Arc, AtomicBool, Mutex, Ordering, Thread, current, park};

/// What a worker is handed through its mailbox.
#[derive(Debug)]
pub enum Letter<J> {
    /// A job to run: the poster has already counted the worker `away` and
    /// `busy`.
    Job(J),
    /// The pool shrank: exit.
    Retire,
    /// The pool shut down (the jobs still queued are the returning
    /// workers', invariant 1): exit.
    Close,
}

/// One idle worker's mailbox. It sits in the idle stack while its worker
/// waits; whoever pops it owns the right to post exactly one letter.
pub struct Mailbox<J> {
    /// Set (`Release`) after the letter is in; the worker spins and parks on
    /// it (`Acquire`).
    posted: AtomicBool,
    letter: Mutex<Option<Letter<J>>>,
    thread: Thread,
}

impl<J> Mailbox<J> {
    /// A mailbox for the calling thread (the worker).
    pub fn for_current_thread() -> Arc<Self> {
        Arc::new(Mailbox { posted: AtomicBool::new(false), letter: Mutex::new(None), thread: current() })
    }

    pub(super) fn post(&self, letter: Letter<J>) {
        *self.letter.lock() = Some(letter);
        self.posted.store(true, Ordering::Release);
        // After the store: a worker that parks after reading `false` gets
        // the token, one that has not parked yet sees `true`.
        self.thread.unpark();
    }

    /// Empties the mailbox's flag as its worker goes into the idle stack
    /// (under the queue lock; the next poster sets it).
    pub(super) fn reset(&self) {
        self.posted.store(false, Ordering::Relaxed);
    }

    /// Whether a letter has been posted.
    pub fn is_posted(&self) -> bool {
        self.posted.load(Ordering::Acquire)
    }

    /// Parks until a letter is posted, then takes it.
    pub fn wait(&self) -> Letter<J> {
        while !self.is_posted() {
            // May return spuriously, or for a token left by an earlier
            // letter's unpark: look again.
            park();
        }
        // Only the poster writes, once, before `posted`; only we take.
        self.letter.lock().take().unwrap_or(Letter::Close)
    }
}
