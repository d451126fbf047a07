//! `GET /circuits/events`: every dependency's last events, as JSON; and
//! `GET /circuits/stream`: a Server-Sent Events stream of the registry's
//! history, then of a snapshot every second, which the dashboard draws from.
//!
//! The stream's first event, `history`, carries what `/circuits` answers now,
//! and for each dependency its history (one point a second, the last five
//! minutes, from `history.rs`) and its last events
//! (`Dependency::recent_events`): a page opened in the middle of an incident
//! shows its past at once. Then one `snapshot` event a second, of the same
//! shape, with only the points and events the client has not had.
//!
//! A stream holds a request thread for as long as it is open, so there are
//! at most [`MAX_STREAMS`] at once (another client gets `503`), each ends
//! after [`STREAM_LIFE`] (EventSource reconnects by itself, and is sent the
//! history again), and all end within a second of the server starting to
//! stop. A client that goes away frees its thread and its place at the next
//! event: while the guard waits for an event it watches the client's
//! connection, and once the client has closed it, the handler's next write
//! fails.
//!
//! An HTTP/1.0 client has no chunked answers. Behind the guard it gets the
//! stream as it goes all the same, ended by the close (no `Content-Length`,
//! `Connection: close`). Without the guard (`--no-guard`) tiny_http would
//! read an answer of unknown length whole before sending it to an HTTP/1.0
//! client, and never notice that client leave: there the stream is refused
//! to HTTP/1.0 with `505`.

use std::collections::HashMap;
use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tiny_http::{Header, Response, ResponseBox, StatusCode};
use watertight::Registry;
use watertight::dependency::{RecordedEvent, RecordedKind};

use crate::history::{History, HistoryPoint};
use crate::routes::{error, json_response};
use crate::sse;

/// Streams open at once; each holds a request thread.
pub const MAX_STREAMS: usize = 2;
/// How long one stream lasts before the server ends it.
pub const STREAM_LIFE: Duration = Duration::from_secs(120);
/// A snapshot event this often.
const EVERY: Duration = Duration::from_secs(1);
/// How long a client waits before it reconnects to an ended stream.
const RETRY_MS: u64 = 1000;
/// The longest a stream sleeps before it looks at the stop flag again.
const NAP: Duration = Duration::from_millis(200);

/// The open streams, and the flag that ends them.
#[derive(Default)]
pub struct Streams {
    open: AtomicUsize,
    stopping: AtomicBool,
    /// Refuse HTTP/1.0 clients: the server runs without the guard.
    refuse_http10: AtomicBool,
}

impl Streams {
    /// Ends every stream at its next tick, and refuses new ones: the server
    /// is stopping, and waits for every request (a stream is one) to end.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Refuses streams to HTTP/1.0 clients from now on: the server runs
    /// without the guard, and tiny_http alone sends them nothing until the
    /// stream ends.
    pub fn refuse_http10(&self) {
        self.refuse_http10.store(true, Ordering::SeqCst);
    }

    /// A place for one more stream, if there is one.
    fn open(self: &Arc<Self>) -> Option<Slot> {
        if self.stopping.load(Ordering::SeqCst) {
            return None;
        }
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_STREAMS).then_some(n + 1))
            .ok()
            .map(|_| Slot(Arc::clone(self)))
    }
}

/// One stream's place, given back when its response is dropped (ended, or
/// its client gone).
struct Slot(Arc<Streams>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `GET /circuits/events`: `{"dependencies": [{"name", "events": [...]}]}`.
pub fn events(registry: &Registry) -> ResponseBox {
    let deps: Vec<Value> = registry
        .dependencies()
        .iter()
        .map(|d| json!({ "name": d.name(), "events": d.recent_events().iter().map(event_json).collect::<Vec<_>>() }))
        .collect();
    json_response(200, &json!({ "dependencies": deps }))
}

/// `GET /circuits/stream` for a client of HTTP/1.0 (`http10`) or 1.1, with
/// `circuits` the body of `/circuits` now.
pub fn stream(
    streams: &Arc<Streams>,
    registry: &Registry,
    history: &History,
    http10: bool,
    circuits: impl Fn() -> Value + Send + 'static,
) -> ResponseBox {
    if http10 && streams.refuse_http10.load(Ordering::SeqCst) {
        return error(
            505,
            "HTTP_VERSION_NOT_SUPPORTED",
            "an event stream needs HTTP/1.1 on this server: without the guard, an HTTP/1.0 answer of \
             unknown length is sent only once it has ended",
        );
    }
    let Some(slot) = streams.open() else {
        return error(
            503,
            "TOO_MANY_STREAMS",
            &format!("at most {MAX_STREAMS} streams at once, each holding a request thread; try again later"),
        );
    };
    let now = Instant::now();
    let reader = EventStream {
        _slot: slot,
        streams: Arc::clone(streams),
        registry: registry.clone(),
        history: history.clone(),
        circuits: Box::new(circuits),
        pending: Vec::new(),
        at: 0,
        sent: 0,
        ends: now + STREAM_LIFE,
        next: now,
        seen_points: HashMap::new(),
        seen_events: HashMap::new(),
    };
    let headers = vec![
        header("Content-Type", "text/event-stream"),
        header("Cache-Control", "no-store"),
        // A proxy such as nginx would otherwise buffer it.
        header("X-Accel-Buffering", "no"),
    ];
    // No length: tiny_http sends it chunked (see `sse.rs`); the guard sends
    // it to an HTTP/1.0 client as it goes, ended by the close.
    Response::new(StatusCode(200), headers, reader, None, None).boxed()
}

/// The body of a stream: frames made one at a time, as tiny_http reads it.
struct EventStream {
    _slot: Slot,
    streams: Arc<Streams>,
    registry: Registry,
    history: History,
    circuits: Box<dyn Fn() -> Value + Send>,
    /// The frame being read out, and how much of it has been.
    pending: Vec<u8>,
    at: usize,
    /// Frames made so far.
    sent: u64,
    ends: Instant,
    /// When the next snapshot is due.
    next: Instant,
    /// By dependency: the newest point (its `at_ms`) and event (`seq`) sent.
    seen_points: HashMap<String, u64>,
    seen_events: HashMap<String, u64>,
}

impl Read for EventStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at == self.pending.len() {
            if !self.wait_for_next() {
                return Ok(0);
            }
            let name = if self.sent == 0 { "history" } else { "snapshot" };
            let data = self.payload().to_string();
            self.pending = sse::frame(name, self.sent, &data, self.sent == 0, RETRY_MS);
            self.at = 0;
            self.sent += 1;
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl EventStream {
    /// Sleeps until the next frame is due; `false` when the stream ends
    /// instead (its life is over, or the server is stopping).
    fn wait_for_next(&mut self) -> bool {
        loop {
            let now = Instant::now();
            if self.streams.stopping.load(Ordering::SeqCst) || now >= self.ends {
                return false;
            }
            if now >= self.next {
                // Behind (a slow reader): the next is a whole interval from now.
                self.next = (self.next + EVERY).max(now);
                return true;
            }
            std::thread::sleep((self.next - now).min(NAP));
        }
    }

    /// `{"circuits", "interval_ms", "dependencies": [{"name", "points", "events"}]}`
    /// with the points and events not sent yet.
    fn payload(&mut self) -> Value {
        let history = self.history.tracks();
        let deps: Vec<Value> = self
            .registry
            .dependencies()
            .iter()
            .map(|dep| {
                let name = dep.name();
                let seen_point = self.seen_points.get(name).copied().unwrap_or(0);
                let points: Vec<&HistoryPoint> = history
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, points)| points.iter().filter(|p| p.at_millis() > seen_point).collect())
                    .unwrap_or_default();
                if let Some(last) = points.last() {
                    self.seen_points.insert(name.to_owned(), last.at_millis());
                }
                let seen_event = self.seen_events.get(name).copied().unwrap_or(0);
                let events: Vec<RecordedEvent> =
                    dep.recent_events().into_iter().filter(|e| e.seq > seen_event).collect();
                if let Some(last) = events.last() {
                    self.seen_events.insert(name.to_owned(), last.seq);
                }
                json!({
                    "name": name,
                    "points": points.into_iter().map(point_json).collect::<Vec<_>>(),
                    "events": events.iter().map(event_json).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "circuits": (self.circuits)(),
            "interval_ms": EVERY.as_millis() as u64,
            "dependencies": deps,
        })
    }
}

/// One event: `{"seq", "at_ms", "kind", ...}`, its details by kind.
pub fn event_json(e: &RecordedEvent) -> Value {
    let mut out = json!({ "seq": e.seq, "at_ms": e.at_millis(), "kind": e.kind.as_str() });
    let details = match &e.kind {
        RecordedKind::Transition(t) => json!({
            "from": t.from().as_str(),
            "to": t.to().as_str(),
            "failure_rate": t.failure_rate(),
            "slow_call_rate": t.slow_call_rate(),
        }),
        RecordedKind::Reconfigured { workers, queue, timeout } => {
            json!({ "workers": workers, "queue": queue, "timeout_ms": timeout.as_millis() as u64 })
        }
        RecordedKind::Summary { over, timed_out, rejected, shadow_refused, .. } => {
            let rejected: serde_json::Map<String, Value> =
                rejected.iter().map(|(r, n)| (r.as_str().to_owned(), json!(n))).collect();
            let shadow: serde_json::Map<String, Value> =
                shadow_refused.iter().map(|(p, n)| (p.as_str().to_owned(), json!(n))).collect();
            json!({
                "over_ms": over.as_millis() as u64,
                "timed_out": timed_out,
                "rejected": rejected,
                "shadow_refused": shadow,
            })
        }
        _ => json!({}),
    };
    if let (Value::Object(out), Value::Object(details)) = (&mut out, details) {
        out.extend(details);
    }
    out
}

/// One point: `{"at_ms", "interval_ms", "state", "failure_rate", "calls", "p50_ms", "p99_ms", "workers", "busy", "queued"}`,
/// `calls` by outcome label, only those counted in it.
fn point_json(p: &HistoryPoint) -> Value {
    let calls: serde_json::Map<String, Value> = p
        .calls
        .by_outcome()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(o, n)| (o.as_str().to_owned(), json!(n)))
        .collect();
    let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
    json!({
        "at_ms": p.at_millis(),
        "interval_ms": p.interval.as_secs_f64() * 1000.0,
        "state": p.state.as_str(),
        "failure_rate": p.failure_rate,
        "calls": calls,
        "p50_ms": ms(p.latency.p50),
        "p99_ms": ms(p.latency.p99),
        "workers": p.workers,
        "busy": p.busy,
        "queued": p.queued,
    })
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}
