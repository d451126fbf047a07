//! One client connection, on its own guard thread: read a request whole,
//! hand it to the request pool (in process, or over the hop for one with a
//! body), relay its answer, and again while kept alive.
//!
//! Why a request is parsed once, crosses the hop only with a body, and is
//! answered as bytes framed once: the module docs of `server`, *The guard*.

use std::io::Write;
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use tiny_http::{HTTPVersion, Header, Method, Request, TestRequest};

use super::client::Client;
use super::guard::{Conn, GuardShared};
use super::hop::PRIVATE_PREFIX;
use super::hop::{self, Hop, HopStream, Ticket};
use super::pool::{Handed, Incoming};
use super::reply::{self, Piece, Relayed};
use super::request::Arrival;
use crate::wire::{Refusal, RequestHead};

/// Serves `conn` until the client closes, a timeout or a refusal ends it, or
/// the guard stops.
pub(super) fn serve_conn(shared: &GuardShared, conn: &Conn) {
    let cfg = &shared.cfg;
    let stream = &conn.stream;
    if stream.set_write_timeout(Some(cfg.write_timeout())).is_err() {
        return;
    }
    let Ok(peer) = stream.peer_addr() else { return };
    let mut client = Client::new(stream);
    // A new connection has `first_byte_timeout` to begin its first request;
    // a kept-alive one `idle_timeout` between requests.
    let mut wait = cfg.first_byte_timeout();
    loop {
        // Between requests: the stop may close an idle connection; a
        // pipelined request already read in part is finished first.
        if !client.has_buffered() && shared.go_idle(conn) {
            return;
        }
        // No byte in time, or the client left: close, no answer.
        if client.await_request(Instant::now() + wait).is_err() {
            return;
        }
        wait = cfg.idle_timeout();
        conn.idle.store(false, Ordering::SeqCst);
        let (head, body) =
            match client.read_head(cfg).and_then(|head| Ok((client.read_body(&head, cfg)?, head))) {
                Ok((body, head)) => (head, body),
                Err(refusal) => return refuse(&mut client, refusal),
            };
        let close_after = !head.keep_alive || shared.stopping.load(Ordering::SeqCst);
        let headers = head.headers.iter().map(|(name, value)| (name.as_str(), value.as_str()));
        let arrival = Arrival {
            received: Instant::now(),
            peer: Some(peer),
            client: cfg.trusted_proxies().resolve(Some(peer), headers),
        };
        let (reply, rx) = reply::channel(close_after, head.minor, cfg.write_timeout());
        let relayed = if body.is_empty() {
            let Some(request) = in_process(&head, peer) else {
                return refuse(&mut client, Refusal::bad("a header tiny_http cannot represent"));
            };
            let incoming = Incoming { request: Some(request), arrival, reply };
            if shared.to_pool.send(Handed::Request(Box::new(incoming))).is_err() {
                return refuse(&mut client, Refusal::UPSTREAM);
            }
            reply::relay(rx, None, stream, cfg.answer_timeout())
        } else {
            let incoming = Incoming { request: None, arrival, reply };
            through_hop(shared, &head, &body, incoming, rx, stream)
        };
        if !relayed.started && !relayed.ended {
            log::warn!("guard: {} {}: no answer from the request handler", head.method, head.target);
            let refusal = if relayed.timed_out { Refusal::ANSWER_TIMEOUT } else { Refusal::UPSTREAM };
            return refuse(&mut client, refusal);
        }
        if !relayed.keep {
            return;
        }
    }
}

/// The request as tiny_http would have built it, made in process: its
/// method, target, version and end-to-end headers but the guard's private
/// ones, and its client as the remote address. `None` for a header tiny_http
/// cannot hold (the wire checked they are ASCII, so none in practice).
fn in_process(head: &RequestHead, peer: SocketAddr) -> Option<Request> {
    let method: Method = head.method.parse().ok()?;
    let mut request = TestRequest::new()
        .with_method(method)
        .with_path(&head.target)
        .with_http_version(HTTPVersion(1, head.minor))
        .with_remote_addr(peer);
    for (name, value) in &head.headers {
        if !name.to_ascii_lowercase().starts_with(PRIVATE_PREFIX) {
            request = request.with_header(Header::from_bytes(name.as_bytes(), value.as_bytes()).ok()?);
        }
    }
    Some(request.into())
}

/// How far the request is on its way to the hop: only once it is whole may
/// the hop be looked at without blocking (that flag is the socket's, shared
/// with the writer).
const WRITING: u8 = 0;
const WRITTEN: u8 = 1;
const FAILED: u8 = 2;

/// Writes a request with a body over a hop connection and relays its answer.
/// The hop goes back to the pool only once the answer has ended (tiny_http
/// has dropped the request, so the connection is ready for the next one);
/// after anything else it is closed.
fn through_hop(
    shared: &GuardShared,
    head: &RequestHead,
    body: &[u8],
    incoming: Incoming,
    rx: Receiver<Piece>,
    client: &std::net::TcpStream,
) -> Relayed {
    let ticket = shared.hop.ticket(incoming, head, body);
    let (hop_stream, fresh) = match shared.hop.take() {
        Ok(taken) => taken,
        Err(e) => {
            log::error!("guard: cannot reach the request pool: {e}");
            return NONE_RELAYED;
        }
    };
    let bound = shared.cfg.answer_timeout();
    // A write to tiny_http that cannot finish (a lost wake-up, a socket
    // buffer smaller than Linux's) gives up with the answer's bound.
    if fresh && hop_stream.set_write_timeout(Some(bound)).is_err() {
        return NONE_RELAYED;
    }
    let written = AtomicU8::new(WRITING);
    let write = || {
        let sent = (&hop_stream).write_all(&ticket.bytes).is_ok();
        written.store(if sent { WRITTEN } else { FAILED }, Ordering::Release);
        sent
    };
    let relay = |rx: Receiver<Piece>| match await_intake(
        &shared.hop,
        &ticket,
        &rx,
        fresh,
        &hop_stream,
        &written,
        bound,
    ) {
        Ok(first) => reply::relay(rx, first, client, bound),
        Err(()) => NONE_RELAYED,
    };
    let (relayed, sent) = if ticket.bytes.len() <= hop::INLINE_BODY {
        if write() { (relay(rx), true) } else { (NONE_RELAYED, false) }
    } else {
        std::thread::scope(|s| {
            let writing =
                std::thread::Builder::new().name("watertight-hop-writer".to_owned()).spawn_scoped(s, write);
            let Ok(writer) = writing else {
                log::warn!("guard: cannot start a thread to write a large body to the hop");
                return (NONE_RELAYED, false);
            };
            let relayed = relay(rx);
            if !relayed.ended {
                // A writer blocked on tiny_http that will never read.
                let _ = hop_stream.shutdown(Shutdown::Both);
            }
            let sent = matches!(writer.join(), Ok(true));
            (relayed, sent)
        })
    };
    if relayed.ended && sent {
        shared.hop.give(hop_stream);
    }
    relayed
}

const NONE_RELAYED: Relayed = Relayed { ended: false, keep: false, started: false, timed_out: false };

/// Waits until tiny_http has taken the request off the hop (its ticket is
/// claimed) or its answer begins, kicking tiny_http after each of
/// [`hop::KICKS`] on a fresh connection. The hop is looked at only once the
/// request is `written` whole. `Ok(Some)`: the first piece of the
/// answer. `Err`: tiny_http refused the request (it wrote to the hop, or
/// closed it) or took none of it within `bound`.
fn await_intake(
    hop: &Hop,
    ticket: &Ticket<'_>,
    rx: &Receiver<Piece>,
    fresh: bool,
    hop_stream: &HopStream,
    written: &AtomicU8,
    bound: Duration,
) -> Result<Option<Piece>, ()> {
    let give_up = Instant::now() + bound;
    let mut kicks: &[Duration] = if fresh { &hop::KICKS } else { &[] };
    loop {
        let wait = kicks.first().copied().unwrap_or(Duration::from_millis(200));
        match rx.recv_timeout(wait) {
            Ok(piece) => return Ok(Some(piece)),
            Err(RecvTimeoutError::Disconnected) => return Err(()),
            Err(RecvTimeoutError::Timeout) => {}
        }
        if !ticket.pending() {
            return Ok(None);
        }
        let refused = match written.load(Ordering::Acquire) {
            WRITTEN => hop::answered_itself(hop_stream),
            FAILED => true,
            _ => false,
        };
        if refused || Instant::now() >= give_up {
            return Err(());
        }
        if let Some((_, rest)) = kicks.split_first() {
            hop.kick();
            kicks = rest;
        }
    }
}

/// Answers `refusal` (unless the client is gone) and closes the connection
/// after a short linger.
fn refuse(client: &mut Client<'_>, refusal: Refusal) {
    if refusal.status == 0 {
        return;
    }
    log::debug!("guard: answering {} ({})", refusal.status, refusal.message);
    let mut stream = client.stream();
    if stream.write_all(&refusal.bytes()).is_ok() {
        client.linger();
    }
}
