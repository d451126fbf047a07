//! Listeners: callbacks told of events after every lock is released, each
//! guarded so that a panicking one cannot unwind into the code that told it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// One listener of events of type `E`.
pub(crate) type Listener<E> = Arc<dyn Fn(&E) + Send + Sync + 'static>;

/// A list of listeners that may grow while events are delivered.
///
/// Delivery clones the current list (an `Arc`) under a short lock and calls
/// the listeners with no lock held, so a listener may add listeners or cause
/// more events. `any` mirrors "the list is not empty" so that the common case,
/// nobody listening, costs one relaxed load and no lock; it is set after the
/// push, so a delivery that sees it set finds the listener in the list.
pub(crate) struct Listeners<E> {
    list: Mutex<Arc<[Listener<E>]>>,
    any: AtomicBool,
}

impl<E> Listeners<E> {
    pub(crate) fn new() -> Self {
        Listeners { list: Mutex::new(Arc::new([])), any: AtomicBool::new(false) }
    }

    pub(crate) fn add(&self, listener: Listener<E>) {
        let mut list = self.list.lock();
        let mut next = list.to_vec();
        next.push(listener);
        *list = next.into();
        self.any.store(true, Ordering::Release);
    }

    /// `true` while nobody listens.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// Calls every listener with `event`, in the order they were added. A
    /// listener that panics is logged (naming `owner`) and skipped.
    pub(crate) fn notify(&self, event: &E, owner: &str) {
        if self.is_empty() {
            return;
        }
        let list = Arc::clone(&self.list.lock());
        for listener in list.iter() {
            if catch_unwind(AssertUnwindSafe(|| listener(event))).is_err() {
                log::error!("a listener of '{owner}' panicked; the others are still told");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn every_listener_is_told_in_order_even_after_a_panic() {
        let listeners = Listeners::<u32>::new();
        assert!(listeners.is_empty());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s1 = Arc::clone(&seen);
        listeners.add(Arc::new(move |e: &u32| s1.lock().push(("first", *e))));
        listeners.add(Arc::new(|_: &u32| panic!("a bad listener")));
        let s3 = Arc::clone(&seen);
        listeners.add(Arc::new(move |e: &u32| s3.lock().push(("third", *e))));
        listeners.notify(&7, "test");
        assert_eq!(*seen.lock(), vec![("first", 7), ("third", 7)]);
    }

    #[test]
    fn a_listener_may_add_another_while_told() {
        let listeners = Arc::new(Listeners::<()>::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let (l, c) = (Arc::clone(&listeners), Arc::clone(&calls));
        listeners.add(Arc::new(move |_: &()| {
            c.fetch_add(1, Ordering::Relaxed);
            let c = Arc::clone(&c);
            l.add(Arc::new(move |_: &()| {
                c.fetch_add(1, Ordering::Relaxed);
            }));
        }));
        listeners.notify(&(), "test");
        assert_eq!(calls.load(Ordering::Relaxed), 1, "the new listener hears the next event");
        listeners.notify(&(), "test");
        assert_eq!(calls.load(Ordering::Relaxed), 3);
    }
}
