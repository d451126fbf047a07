//! A job's cancel hook ([`CallContext::on_cancel`](super::CallContext::on_cancel))
//! and the one thread that fires hooks: the deadline watch.
//!
//! A hook is fired by the watch thread, never by a worker. A call with a
//! caller waiting fires it when its caller leaves: its wait ends at the
//! deadline (a timeout), or it dropped its ticket, or a hedge's other leg
//! won. Leaving first, the caller has its `Timeout` before the cancelled job
//! can answer. A call nobody waits for (detached, or run on its caller's own
//! thread) fires it at its deadline. The watch is started with the first
//! hook; a process that never registers one never starts it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, OnceLock, Weak};
use std::thread;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

/// A registered hook: fired at most once, and never once disarmed. Shared by
/// the call's context, which disarms it as soon as the job returns, and the
/// watch, which holds it weakly and fires it when due. `fire` runs the hook
/// under the lock, so a disarm that comes meanwhile waits for it: once the
/// worker has seen its job return, the hook does not run.
pub(super) struct Hook(Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl Hook {
    pub(super) fn new(f: impl FnOnce() + Send + 'static) -> Arc<Hook> {
        Arc::new(Hook(Mutex::new(Some(Box::new(f)))))
    }

    fn fire(&self) {
        let mut hook = self.0.lock();
        if let Some(f) = hook.take() {
            let _ = catch_unwind(AssertUnwindSafe(f));
        }
    }

    /// The job has returned: the hook never runs.
    pub(super) fn disarm(&self) {
        let f = self.0.lock().take();
        // Its captures' `Drop` is user code, run unlocked; a panic there must
        // not take the worker down.
        let _ = catch_unwind(AssertUnwindSafe(move || drop(f)));
    }
}

type Due = (Instant, Weak<Hook>);

/// Has `hook` fired at `at` (at once when that has passed) on the watch
/// thread, unless it is disarmed first. If the watch thread cannot be
/// started (the system refuses a thread), hooks do not fire.
pub(super) fn fire_at(at: Instant, hook: &Arc<Hook>) {
    static WATCH: OnceLock<Option<Sender<Due>>> = OnceLock::new();
    let watch = WATCH.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded();
        let started = thread::Builder::new().name("wt-cancel".to_owned()).spawn(move || watch(&rx));
        started.ok().map(|_| tx)
    });
    if let Some(tx) = watch {
        let _ = tx.send((at, Arc::downgrade(hook)));
    }
}

/// The watch: fires each hook when due, and forgets those whose call has
/// ended (a weak reference that no longer upgrades).
fn watch(rx: &Receiver<Due>) {
    let mut due: Vec<Due> = Vec::new();
    loop {
        let now = Instant::now();
        due.retain(|(at, hook)| match hook.upgrade() {
            Some(hook) if *at <= now => {
                hook.fire();
                false
            }
            live => live.is_some(),
        });
        let next = match due.iter().map(|(at, _)| *at).min() {
            Some(at) => rx.recv_deadline(at).ok(),
            None => match rx.recv() {
                Ok(d) => Some(d),
                Err(_) => return,
            },
        };
        due.extend(next);
    }
}
