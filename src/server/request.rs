//! [`RequestContext`]: what the request pool knows of the request a handler
//! answers: its deadline, its client, and the pool's own state.
//!
//! With the guard, the connection thread knows the client's address and when
//! the request was read whole, and the request thread needs both. They cross
//! the hop as two private headers the guard sets after removing any a client
//! sent (so a client cannot choose its own address or arrival): the peer as
//! `ip:port`, and the arrival as nanoseconds since a process-wide base instant.

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
    at.saturating_duration_since(base()).as_nanos().to_string()
}

fn decode_instant(value: &str) -> Option<Instant> {
    let nanos: u64 = value.trim().parse().ok()?;
    base().checked_add(Duration::from_nanos(nanos))
}

/// What the request pool knows of the request a handler is answering.
///
/// ```no_run
/// use watertight::server::{RequestContext, serve};
/// use watertight::tiny_http::{Request, Response};
///
/// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let handle = serve(listener, 8, |_req: &mut Request, ctx: &RequestContext| {
///     // Every dependency call of this request ends by its deadline:
///     // `dependency.within(ctx.deadline()).call(job)`.
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
}

impl RequestContext {
    /// When the request was received: read whole by the guard, or (without
    /// the guard) taken by a request thread.
    pub fn received(&self) -> Instant {
        self.received
    }

    /// The request's deadline: its arrival plus the server's
    /// [`request_budget`](super::ServerConfig::request_budget), or sooner if
    /// the client's `X-Request-Timeout` asked for less. Hand it to
    /// [`Dependency::within`](crate::Dependency::within).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left until the deadline, zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The client's address: the guard's peer, or tiny_http's without the
    /// guard. `None` for a Unix-socket client.
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
}

/// The context of `request`, taken by a request thread at `taken` with `busy`
/// of `threads` threads busy; or a client error (a malformed
/// `X-Request-Timeout`) to answer instead of calling the handler.
pub(super) fn context(
    request: &Request,
    budget: Duration,
    taken: Instant,
    busy: usize,
    threads: usize,
) -> Result<RequestContext, String> {
    let header =
        |name: &'static str| request.headers().iter().find(|h| h.field.equiv(name)).map(|h| h.value.as_str());
    let guarded = header(RECEIVED_HEADER).and_then(decode_instant);
    let received = guarded.unwrap_or(taken);
    let peer = match guarded {
        Some(_) => header(PEER_HEADER).and_then(|p| p.parse().ok()),
        None => request.remote_addr().copied(),
    };
    let budget = match header(TIMEOUT_HEADER) {
        None => budget,
        Some(asked) => parse_timeout(asked)?.min(budget),
    };
    Ok(RequestContext { received, deadline: received + budget, peer, busy, threads })
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
