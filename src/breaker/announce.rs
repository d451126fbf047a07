//! Announcing transitions: after the lock is released, once each, in order.

use super::machine::{Core, Inner};

impl Inner {
    /// Releases the lock, then announces what the critical section queued,
    /// unless another thread is already announcing (it will pick it up).
    /// Every state change ends here: the one way a transition leaves the lock.
    pub(super) fn release(&self, core: crate::sync::MutexGuard<'_, Core>) {
        let announce = core.must_announce();
        drop(core);
        if announce {
            self.deliver();
        }
    }

    /// Announces the queued transitions: logs each once and hands it to
    /// every listener, with no lock held.
    ///
    /// Protocol: the thread that finds `delivering` false sets it and becomes
    /// the announcer; it pops one transition at a time under the lock and
    /// calls the listeners outside it, until the queue is empty, then clears
    /// `delivering` in the same critical section that found the queue empty.
    /// A thread that queues a transition meanwhile sees `delivering` and
    /// leaves it to the announcer. Queueing and popping happen under the one
    /// lock, so no transition is lost, none is announced twice, and all are
    /// announced in the order they happened. A listener that changes the
    /// state itself only queues; the loop picks that up next.
    fn deliver(&self) {
        {
            let mut core = self.core.lock();
            if core.delivering || core.pending.is_empty() {
                return;
            }
            core.delivering = true;
        }
        // Clears `delivering` should anything below unwind (a panicking logger),
        // so that later transitions are still announced.
        struct Announcer<'a>(&'a Inner, bool);
        impl Drop for Announcer<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.core.lock().delivering = false;
                }
            }
        }
        let mut announcer = Announcer(self, false);
        loop {
            let next = {
                let mut core = self.core.lock();
                match core.pending.pop_front() {
                    Some(t) => t,
                    None => {
                        core.delivering = false;
                        announcer.1 = true;
                        return;
                    }
                }
            };
            log::info!("{next}");
            self.listeners.notify(&next, &self.name);
        }
    }
}
