//! [`RequestContext`]: what the request pool knows of the request a handler
//! answers: its deadline, its client, and the pool's own state.
//!
//! With the guard, the connection thread knows the client's address and when
//! the request was read whole, and the request thread needs both. They cross
//! the hop as two private headers the guard sets after removing any a client
//! sent (so a client cannot choose its own address or arrival): the peer as
//! `ip:port`, and the arrival as nanoseconds since a process-wide base instant.
//!
//! Those headers are believed only on the guard's own hop, and the request
//! pool says which side of it a request came from ([`Origin`]): it is never
//! inferred from the request. A request straight from a client (without the
//! guard) has its peer from its TCP connection and its arrival from the
//! request thread, whatever private headers the client sent.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tiny_http::Request;

/// The header carrying the client's address over the hop.
pub(super) const PEER_HEADER: &str = "X-Watertight-Peer";
/// The header carrying the request's arrival over the hop.
pub(super) const RECEIVED_HEADER: &str = "X-Watertight-Received";
/// The prefix of the guard's private headers, removed from what clients send.
pub(super) const PRIVATE_PREFIX: &str = "x-watertight-";
/// The header a client may shorten its budget with.
const TIMEOUT_HEADER: &str = "X-Request-Timeout";

/// The base instant of the arrival header: a fixed instant of this process,
/// taken when the first guarded server starts (before any arrival it
/// encodes, which it could not represent).
pub(super) fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// `at` as the arrival header's value.
pub(super) fn encode_instant(at: Instant) -> String {
    crate::time::saturating_nanos(at.saturating_duration_since(base())).to_string()
}

fn decode_instant(value: &str) -> Option<Instant> {
    let nanos: u64 = value.trim().parse().ok()?;
    base().checked_add(Duration::from_nanos(nanos))
}

/// What the request pool knows of the request a handler is answering.
///
/// Its client and arrival are facts of the connection, never the client's
/// word: behind the guard ([`serve`](super::serve)) they are what the guard
/// saw (it drops any `X-Watertight-*` header a client sends and sets its own
/// on the hop); without it ([`serve_unguarded`](super::serve_unguarded)) they
/// are the TCP peer and the moment a request thread took the request, and any
/// `X-Watertight-*` header is ignored. The only header a client has a say
/// through is `X-Request-Timeout`, which can shorten the budget, never
/// lengthen it.
///
/// ```no_run
/// use watertight::server::{RequestContext, serve};
/// use watertight::tiny_http::{Request, Response};
///
/// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let handle = serve(listener, 8, |_req: &mut Request, ctx: &RequestContext| {
///     // Every dependency call of this request ends by its deadline:
///     // `dependency.with().deadline(ctx.deadline()).call(job)`.
///     let left = ctx.remaining().as_millis();
///     Response::from_string(format!("{left} ms left, {} of {} threads busy", ctx.busy(), ctx.threads())).boxed()
/// })?;
/// # handle.shutdown();
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RequestContext {
    received: Instant,
    deadline: Instant,
    peer: Option<SocketAddr>,
    busy: usize,
    threads: usize,
    reserved: bool,
}

impl RequestContext {
    /// When the request was received: read whole by the guard, or (without
    /// the guard) taken by a request thread. Never a client's claim.
    pub fn received(&self) -> Instant {
        self.received
    }

    /// The request's deadline: its arrival plus the server's
    /// [`request_budget`](super::ServerConfig::request_budget), or sooner if
    /// the client's `X-Request-Timeout` asked for less. Hand it to
    /// [`CallBuilder::deadline`](crate::CallBuilder::deadline)(crate::CallBuilder::deadline).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left until the deadline, zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The client's address: the peer of the guard's client connection, or
    /// (without the guard) tiny_http's TCP peer. Never a client's claim.
    /// `None` for a Unix-socket client.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Request threads busy when this request was taken, this one included.
    pub fn busy(&self) -> usize {
        self.busy
    }

    /// The request pool's size.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether the request is of the pool's reserved share (its route or its
    /// classifier is the [reserve](super::ServerConfig::reserve)'s): a thread
    /// ordinary requests cannot take was there for it.
    pub fn reserved(&self) -> bool {
        self.reserved
    }
}

/// Where the request pool's requests come from, which decides whether the
/// guard's private headers are believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// Over the guard's own hop ([`serve`](super::serve)): the guard removed
    /// every private header a client sent and set its own, so they are the
    /// client's real address and the request's real arrival.
    Guard,
    /// Straight from the clients ([`serve_unguarded`](super::serve_unguarded)):
    /// any private header is the client's own and is ignored; the peer is the
    /// TCP peer and the arrival is when a request thread took the request.
    Client,
}

/// The context of `request`, which came from `origin`, was taken off
/// tiny_http at `taken`, and is handled with `busy` of `threads` threads
/// busy (`reserved`: of the reserved share); or a client error (a malformed
/// `X-Request-Timeout`) to answer instead of calling the handler.
pub(super) fn context(
    request: &Request,
    origin: Origin,
    budget: Duration,
    taken: Instant,
    busy: usize,
    threads: usize,
    reserved: bool,
) -> Result<RequestContext, String> {
    let header =
        |name: &'static str| request.headers().iter().find(|h| h.field.equiv(name)).map(|h| h.value.as_str());
    let (received, peer) = match origin {
        // The guard always sets the arrival; it read the request before this
        // thread took it, so a later one cannot be right.
        Origin::Guard => (
            header(RECEIVED_HEADER).and_then(decode_instant).map_or(taken, |at| at.min(taken)),
            header(PEER_HEADER).and_then(|p| p.parse().ok()),
        ),
        Origin::Client => (taken, request.remote_addr().copied()),
    };
    let budget = match header(TIMEOUT_HEADER) {
        None => budget,
        Some(asked) => parse_timeout(asked)?.min(budget),
    };
    Ok(RequestContext { received, deadline: received + budget, peer, busy, threads, reserved })
}

/// `X-Request-Timeout`: `250ms`, `2s`, or a number of milliseconds.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit_ms) = match (text.strip_suffix("ms"), text.strip_suffix('s')) {
        (Some(n), _) => (n, 1),
        (None, Some(n)) => (n, 1000),
        (None, None) => (text, 1),
    };
    let n: u64 = number
        .trim()
        .parse()
        .map_err(|_| format!("X-Request-Timeout must be a duration like 250ms or 2s, got {text:?}"))?;
    Ok(Duration::from_millis(n.saturating_mul(unit_ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_timeouts_parse_in_three_spellings() {
        assert_eq!(parse_timeout("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_timeout(" 2s "), Ok(Duration::from_secs(2)));
        assert_eq!(parse_timeout("1500"), Ok(Duration::from_millis(1500)));
        assert!(parse_timeout("soon").unwrap_err().contains("X-Request-Timeout"));
        assert!(parse_timeout("-5ms").is_err());
    }

    #[test]
    fn arrivals_cross_the_hop_to_the_nanosecond() {
        base();
        let now = Instant::now();
        let back = decode_instant(&encode_instant(now)).unwrap();
        assert!(back <= now && now - back < Duration::from_micros(1), "{:?}", now - back);
        assert_eq!(decode_instant("not a number"), None);
    }
}
