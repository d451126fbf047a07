//! A client's socket, read under the guard's deadlines: the request head by
//! `head_timeout`, the body by `body_timeout`, parsed and framed by the
//! crate's wire within the guard's caps.

use std::io::{self, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::config::ServerConfig;
use crate::wire::{self, BodyDecoder, Framing, Limits, Refusal, RequestHead};

/// A client socket and the bytes read off it but not yet used (the rest of a
/// read that went past the end of a head or body: a pipelined next request).
pub(super) struct Client<'a> {
    stream: &'a TcpStream,
    buf: Vec<u8>,
}

/// The guard's own answers, beside those the wire gives to bad bytes.
impl Refusal {
    /// The head or the body was not read by its deadline.
    pub(super) const TIMEOUT: Refusal =
        Refusal { status: 408, code: "REQUEST_TIMEOUT", message: "the request was not received in time" };
    /// Past `max_connections`, to a new connection.
    pub(super) const BUSY: Refusal =
        Refusal { status: 503, code: "SERVER_BUSY", message: "too many open connections, try again later" };
    /// Past `max_connections_per_peer`, to a new connection from that peer.
    pub(super) const PEER_BUSY: Refusal = Refusal {
        status: 503,
        code: "SERVER_BUSY",
        message: "too many open connections from your address, try again later",
    };
    /// The request pool gave no answer (it is stopping, or tiny_http refused
    /// what crossed the hop).
    pub(super) const UPSTREAM: Refusal =
        Refusal { status: 502, code: "BAD_GATEWAY", message: "the request handler gave no valid answer" };
    /// The handler did not answer within `answer_timeout`.
    pub(super) const ANSWER_TIMEOUT: Refusal = Refusal {
        status: 504,
        code: "GATEWAY_TIMEOUT",
        message: "the request handler did not answer in time",
    };
    /// Not an answer: the client is gone, there is no one to answer.
    pub(super) const GONE: Refusal = Refusal { status: 0, code: "", message: "" };
}

fn limits(cfg: &ServerConfig) -> Limits {
    Limits { max_head_bytes: cfg.max_head_bytes(), max_body_bytes: cfg.max_body_bytes() }
}

/// Reads once more off `stream` onto `buf`, waiting until `deadline` at
/// most; `Ok(n)` with `n > 0`, else `TIMEOUT` when the deadline passed and
/// `GONE` when the client closed (or reset) the connection.
fn fill(stream: &TcpStream, buf: &mut Vec<u8>, deadline: Instant) -> Result<usize, Refusal> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(Refusal::TIMEOUT);
    }
    // A zero timeout means "none" to the socket; `left` is never zero here.
    stream.set_read_timeout(Some(left)).map_err(|_| Refusal::GONE)?;
    match wire::read_some(stream, buf) {
        Ok(0) => Err(Refusal::GONE),
        Ok(n) => Ok(n),
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
            Err(Refusal::TIMEOUT)
        }
        Err(_) => Err(Refusal::GONE),
    }
}

impl<'a> Client<'a> {
    pub(super) fn new(stream: &'a TcpStream) -> Self {
        Client { stream, buf: Vec::new() }
    }

    pub(super) fn stream(&self) -> &'a TcpStream {
        self.stream
    }

    /// Whether bytes of a next request are already here.
    pub(super) fn has_buffered(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Waits until `deadline` for the first byte of a request.
    pub(super) fn await_request(&mut self, deadline: Instant) -> Result<(), Refusal> {
        if self.buf.is_empty() {
            fill(self.stream, &mut self.buf, deadline)?;
        }
        Ok(())
    }

    /// Reads and parses a request head; the first byte must be here already
    /// ([`await_request`](Client::await_request)).
    pub(super) fn read_head(&mut self, cfg: &ServerConfig) -> Result<RequestHead, Refusal> {
        let deadline = Instant::now() + cfg.head_timeout();
        let read = |buf: &mut Vec<u8>| fill(self.stream, buf, deadline);
        // `fill` never reports the end of the stream: a closed one is `GONE`.
        wire::read_head(&mut self.buf, limits(cfg), read)?.ok_or(Refusal::GONE)
    }

    /// Reads the body `head` announced, whole, by `body_timeout`, within
    /// `max_body_bytes`. Sends `100 Continue` first when the client asked.
    pub(super) fn read_body(&mut self, head: &RequestHead, cfg: &ServerConfig) -> Result<Vec<u8>, Refusal> {
        let deadline = Instant::now() + cfg.body_timeout();
        if matches!(head.framing, Framing::None | Framing::Length(0)) {
            return Ok(Vec::new());
        }
        // HTTP/1.0 has no interim answers (RFC 9110 10.1.1).
        if head.expect_continue && head.minor == 1 && self.buf.is_empty() {
            let mut stream = self.stream;
            stream.set_write_timeout(Some(cfg.write_timeout())).map_err(|_| Refusal::GONE)?;
            stream.write_all(wire::CONTINUE).map_err(|_| Refusal::GONE)?;
        }
        let read = |buf: &mut Vec<u8>| fill(self.stream, buf, deadline);
        BodyDecoder::new(head.framing, limits(cfg)).drive(&mut self.buf, read)?.ok_or(Refusal::GONE)
    }

    /// After a refusal: stop reading what the client sends, for at most
    /// `LINGER` and `LINGER_BYTES`, so that closing with unread data does not
    /// reset the connection before the client has read the answer.
    pub(super) fn linger(&mut self) {
        const LINGER: Duration = Duration::from_secs(1);
        const LINGER_BYTES: usize = 256 * 1024;
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        let deadline = Instant::now() + LINGER;
        let mut seen = 0;
        while seen < LINGER_BYTES {
            self.buf.clear();
            match fill(self.stream, &mut self.buf, deadline) {
                Ok(n) => seen += n,
                Err(_) => break,
            }
        }
    }
}
