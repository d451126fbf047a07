//! [`RequestContext`]: what the request pool knows of the request a handler
//! answers: its deadline, its client, and the pool's own state; and the
//! [`Arrival`] it is made from.
//!
//! With the guard, the connection thread knows the client's address and when
//! the request was read whole, and the request thread needs both: they travel
//! with the request in process, as an [`Arrival`], never as headers. A
//! request straight from a client (without the guard) has its peer from its
//! TCP connection and its arrival from the request thread, whatever private
//! headers the client sent.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::proxy::ClientAddr;

/// The header a client may shorten its budget with.
pub(super) const TIMEOUT_HEADER: &str = "X-Request-Timeout";

/// What the guard knows of a request and the request thread needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Arrival {
    /// When the guard had read it whole.
    pub(super) received: Instant,
    /// The TCP peer of its connection.
    pub(super) peer: Option<SocketAddr>,
    /// Who it came from, through the trusted proxies.
    pub(super) client: ClientAddr,
}

/// What the request pool knows of the request a handler is answering.
///
/// Its peer and arrival are facts of the connection (see the module docs),
/// never the client's word. Its [`client_ip`](Self::client_ip) is the peer,
/// unless the peer is a [trusted proxy](super::ServerConfigBuilder::trusted_proxies).
/// The only other header a client has a say through is `X-Request-Timeout`,
/// which can shorten the budget, never lengthen it.
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
    client: ClientAddr,
    /// `busy` and `threads` as `u32` (saturating): a context is moved with
    /// every request, and at 128 bytes or less a move is a few stores.
    busy: u32,
    threads: u32,
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
    /// [`CallBuilder::deadline`](crate::CallBuilder::deadline).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Time left until the deadline, zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The TCP peer of the request's connection: the client, or the proxy
    /// in front of it. Never a client's claim. `None` for a Unix-socket
    /// client.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The client's address: the [peer](Self::peer_addr)'s, or, when the
    /// peer is a trusted proxy, the first untrusted address of its
    /// forwarding chain read from the right. A forwarding header from any
    /// other peer is never believed. `None` for a Unix-socket client.
    pub fn client_ip(&self) -> Option<std::net::IpAddr> {
        self.client.ip
    }

    /// Whether the request came through a proxy: its peer is a trusted
    /// proxy, or it carries a forwarding header (`X-Forwarded-For`,
    /// `Forwarded`, `X-Real-IP`, `X-Forwarded-Host`, `X-Forwarded-Proto`),
    /// whoever sent it. A request that did is not a local one, even from a
    /// loopback peer: gate admin routes on a token then.
    pub fn through_proxy(&self) -> bool {
        self.client.through_proxy
    }

    /// Request threads busy when this request was taken, this one included.
    pub fn busy(&self) -> usize {
        self.busy as usize
    }

    /// The request pool's size.
    pub fn threads(&self) -> usize {
        self.threads as usize
    }

    /// Whether the request is of the pool's reserved share (its route or its
    /// classifier is the [reserve](super::ServerConfig::reserve)'s): a thread
    /// ordinary requests cannot take was there for it.
    pub fn reserved(&self) -> bool {
        self.reserved
    }
}

/// The context of a request which arrived as `arrival` (without the guard:
/// its TCP peer, when a request thread took it) and whose client asked for
/// `asked` in its `X-Request-Timeout`, handled with `busy` of `threads`
/// threads busy (`reserved`: of the reserved share); or a client error (a
/// malformed `X-Request-Timeout`) to answer instead of calling the handler.
pub(super) fn context(
    asked: Option<&str>,
    arrival: Arrival,
    budget: Duration,
    busy: usize,
    threads: usize,
    reserved: bool,
) -> Result<RequestContext, String> {
    let budget = match asked {
        None => budget,
        Some(asked) => parse_timeout(asked)?.min(budget),
    };
    let Arrival { received, peer, client } = arrival;
    let (busy, threads) =
        (u32::try_from(busy).unwrap_or(u32::MAX), u32::try_from(threads).unwrap_or(u32::MAX));
    Ok(RequestContext { received, deadline: received + budget, peer, client, busy, threads, reserved })
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
}
