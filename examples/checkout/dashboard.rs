//! `GET /dashboard`: one self-contained HTML page (embedded at build time) that
//! draws from `/circuits/stream` (see `stream.rs`); and the time each breaker
//! entered its state, which `/circuits` reports as `state_for_ms`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tiny_http::{Header, Response, ResponseBox};
use watertight::Registry;

/// The page: no CDN, no build step, nothing else to serve.
const PAGE: &str = include_str!("dashboard.html");

/// The dashboard page.
pub fn page() -> ResponseBox {
    let html =
        Header::from_bytes(&b"Content-Type"[..], &b"text/html; charset=utf-8"[..]).expect("a valid header");
    let no_store = Header::from_bytes(&b"Cache-Control"[..], &b"no-store"[..]).expect("a valid header");
    Response::from_string(PAGE).with_header(html).with_header(no_store).boxed()
}

/// When each dependency's breaker last changed state (or when watching began,
/// for one that has not changed since).
#[derive(Clone, Default)]
pub struct StateClock {
    since: Arc<Mutex<HashMap<String, Instant>>>,
}

impl StateClock {
    /// Watches every dependency registered so far.
    pub fn watch(registry: &Registry) -> StateClock {
        let clock = StateClock::default();
        let now = Instant::now();
        for dep in registry.dependencies() {
            clock.since.lock().insert(dep.name().to_owned(), now);
            let since = Arc::clone(&clock.since);
            dep.breaker().on_transition(move |t| {
                since.lock().insert(t.name().to_owned(), Instant::now());
            });
        }
        clock
    }

    /// How long `name`'s breaker has been in its current state.
    pub fn state_for(&self, name: &str) -> Option<Duration> {
        self.since.lock().get(name).map(Instant::elapsed)
    }
}
