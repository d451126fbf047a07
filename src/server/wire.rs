//! Reading a client's request off its socket, under deadlines and caps, with
//! `httparse`: the head, then a `Content-Length` or chunked body.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::net::TcpStream;
use std::time::Instant;

use super::config::ServerConfig;
use super::request;

/// Headers a request head may have; more is answered as a head too large.
const MAX_HEADERS: usize = 100;
/// How much one read asks the socket for.
const READ_CHUNK: usize = 16 * 1024;

/// A client socket and the bytes read off it but not yet used (the rest of a
/// read that went past the end of a head or body: a pipelined next request).
pub(super) struct Wire<'a> {
    stream: &'a TcpStream,
    buf: Vec<u8>,
}

/// Why a read gave up.
#[derive(Debug)]
pub(super) enum ReadFail {
    /// The deadline passed.
    TimedOut,
    /// The client closed (or reset) the connection.
    Closed,
}

impl<'a> Wire<'a> {
    pub(super) fn new(stream: &'a TcpStream) -> Self {
        Wire { stream, buf: Vec::new() }
    }

    pub(super) fn stream(&self) -> &'a TcpStream {
        self.stream
    }

    /// Whether bytes of a next request are already here.
    pub(super) fn has_buffered(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Reads once more, waiting until `deadline` at most; `Ok(n)` with `n > 0`.
    fn fill(&mut self, deadline: Instant) -> Result<usize, ReadFail> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadFail::TimedOut);
        }
        // A zero timeout means "none" to the socket; `left` is never zero here.
        self.stream.set_read_timeout(Some(left)).map_err(|_| ReadFail::Closed)?;
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            match (&mut &*self.stream).read(&mut chunk) {
                Ok(0) => return Err(ReadFail::Closed),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return Err(ReadFail::TimedOut);
                }
                Err(_) => return Err(ReadFail::Closed),
            }
        }
    }

    /// Waits until `deadline` for the first byte of a request.
    pub(super) fn await_request(&mut self, deadline: Instant) -> Result<(), ReadFail> {
        if self.buf.is_empty() {
            self.fill(deadline)?;
        }
        Ok(())
    }

    /// Reads and parses a request head; the first byte must be here already
    /// ([`await_request`](Wire::await_request)).
    pub(super) fn read_head(&mut self, cfg: &ServerConfig) -> Result<Head, Refusal> {
        let deadline = Instant::now() + cfg.head_timeout();
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    if n > cfg.max_head_bytes() {
                        return Err(Refusal::HEAD_TOO_LARGE);
                    }
                    let head = Head::from_parsed(&req, cfg)?;
                    self.buf.drain(..n);
                    return Ok(head);
                }
                Ok(httparse::Status::Partial) => {
                    if self.buf.len() > cfg.max_head_bytes() {
                        return Err(Refusal::HEAD_TOO_LARGE);
                    }
                }
                Err(httparse::Error::TooManyHeaders) => return Err(Refusal::HEAD_TOO_LARGE),
                Err(httparse::Error::Version) => return Err(Refusal::VERSION),
                Err(e) => return Err(Refusal::bad(parse_error(e))),
            }
            self.fill(deadline).map_err(Refusal::from_read)?;
        }
    }

    /// Reads the body `head` announced, whole, by `body_timeout`, within
    /// `max_body_bytes`. Sends `100 Continue` first when the client asked.
    pub(super) fn read_body(&mut self, head: &Head, cfg: &ServerConfig) -> Result<Vec<u8>, Refusal> {
        let deadline = Instant::now() + cfg.body_timeout();
        let announced = match head.framing {
            Framing::Empty => return Ok(Vec::new()),
            Framing::Length(0) => return Ok(Vec::new()),
            Framing::Length(n) => Some(n),
            Framing::Chunked => None,
        };
        if head.expect_continue && self.buf.is_empty() {
            let mut stream = self.stream;
            stream.set_write_timeout(Some(cfg.write_timeout())).map_err(|_| Refusal::GONE)?;
            stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").map_err(|_| Refusal::GONE)?;
        }
        match announced {
            Some(n) => self.read_exact_body(n, deadline),
            None => self.read_chunked(cfg.max_body_bytes(), cfg.max_head_bytes(), deadline),
        }
    }

    fn read_exact_body(&mut self, n: u64, deadline: Instant) -> Result<Vec<u8>, Refusal> {
        // `n` is within the cap (checked with the head); memory grows with what
        // arrives, not with what was declared.
        let n = n as usize;
        while self.buf.len() < n {
            self.fill(deadline).map_err(Refusal::from_read)?;
        }
        let rest = self.buf.split_off(n);
        Ok(std::mem::replace(&mut self.buf, rest))
    }

    fn read_chunked(&mut self, cap: u64, line_cap: usize, deadline: Instant) -> Result<Vec<u8>, Refusal> {
        let mut body = Vec::new();
        loop {
            let (used, size) = loop {
                match httparse::parse_chunk_size(&self.buf) {
                    Ok(httparse::Status::Complete(found)) => break found,
                    Ok(httparse::Status::Partial) if self.buf.len() <= line_cap => {
                        self.fill(deadline).map_err(Refusal::from_read)?;
                    }
                    _ => return Err(Refusal::bad("invalid chunk size line")),
                }
            };
            if size > cap.saturating_sub(body.len() as u64) {
                return Err(Refusal::BODY_TOO_LARGE);
            }
            self.buf.drain(..used);
            if size == 0 {
                return self.skip_trailers(line_cap, deadline).map(|()| body);
            }
            let size = size as usize;
            while self.buf.len() < size + 2 {
                self.fill(deadline).map_err(Refusal::from_read)?;
            }
            if &self.buf[size..size + 2] != b"\r\n" {
                return Err(Refusal::bad("a chunk does not end with CRLF"));
            }
            body.extend_from_slice(&self.buf[..size]);
            self.buf.drain(..size + 2);
        }
    }

    /// Reads trailer lines up to the empty line that ends a chunked body; they
    /// are dropped (tiny_http has no use for them). At most `cap` bytes.
    fn skip_trailers(&mut self, cap: usize, deadline: Instant) -> Result<(), Refusal> {
        let mut seen = 0usize;
        loop {
            match self.buf.windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    self.buf.drain(..2);
                    return Ok(());
                }
                Some(end) => {
                    seen += end + 2;
                    self.buf.drain(..end + 2);
                }
                None => self.fill(deadline).map_err(Refusal::from_read).map(drop)?,
            }
            if seen + self.buf.len() > cap {
                return Err(Refusal::HEAD_TOO_LARGE);
            }
        }
    }

    /// After a refusal: stop reading what the client sends, for at most
    /// `LINGER` and `LINGER_BYTES`, so that closing with unread data does not
    /// reset the connection before the client has read the answer.
    pub(super) fn linger(&mut self) {
        const LINGER: std::time::Duration = std::time::Duration::from_secs(1);
        const LINGER_BYTES: usize = 256 * 1024;
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        let deadline = Instant::now() + LINGER;
        let mut seen = 0;
        while seen < LINGER_BYTES {
            self.buf.clear();
            match self.fill(deadline) {
                Ok(n) => seen += n,
                Err(_) => break,
            }
        }
    }
}

/// How a request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// Neither a length nor chunked: no body.
    Empty,
    /// `Content-Length`, within the cap.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A parsed, checked request head.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) method: String,
    pub(super) target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(super) minor: u8,
    /// Every header but the hop-by-hop ones and the framing, which the guard
    /// answers for itself.
    pub(super) headers: Vec<(String, String)>,
    pub(super) framing: Framing,
    pub(super) expect_continue: bool,
    /// The client keeps the connection open after the answer.
    pub(super) keep_alive: bool,
}

/// Headers the guard consumes and does not pass on.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "content-length",
    "expect",
];

impl Head {
    fn from_parsed(req: &httparse::Request<'_, '_>, cfg: &ServerConfig) -> Result<Head, Refusal> {
        let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
            return Err(Refusal::bad("incomplete request line"));
        };
        if !target.is_ascii() {
            return Err(Refusal::bad("the request target is not ASCII"));
        }
        let (mut length, mut chunked, mut expect_continue) = (None::<u64>, false, false);
        let (mut close, mut keep) = (false, false);
        let mut headers = Vec::with_capacity(req.headers.len());
        for h in req.headers.iter() {
            let value = std::str::from_utf8(h.value)
                .ok()
                .filter(|v| v.is_ascii())
                .ok_or_else(|| Refusal::bad("a header value is not ASCII"))?
                .trim();
            let name = h.name.to_ascii_lowercase();
            match name.as_str() {
                "content-length" => {
                    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(Refusal::bad("Content-Length is not a number"));
                    }
                    // All digits: too many of them for a u64 is simply too large.
                    let n = value.parse::<u64>().unwrap_or(u64::MAX);
                    if length.is_some_and(|l| l != n) {
                        return Err(Refusal::bad("conflicting Content-Length headers"));
                    }
                    length = Some(n);
                }
                "transfer-encoding" => {
                    if !value.eq_ignore_ascii_case("chunked") || chunked {
                        return Err(Refusal::UNSUPPORTED_CODING);
                    }
                    chunked = true;
                }
                "expect" => {
                    if !value.eq_ignore_ascii_case("100-continue") {
                        return Err(Refusal::EXPECTATION);
                    }
                    expect_continue = true;
                }
                "connection" => {
                    for token in value.split(',').map(str::trim) {
                        close |= token.eq_ignore_ascii_case("close");
                        keep |= token.eq_ignore_ascii_case("keep-alive");
                    }
                }
                _ => {}
            }
            // The guard's own headers are set by the guard alone: a client's
            // are dropped, so it cannot choose its address or arrival.
            if !HOP_BY_HOP.contains(&name.as_str()) && !name.starts_with(request::PRIVATE_PREFIX) {
                headers.push((h.name.to_owned(), value.to_owned()));
            }
        }
        let framing = match (chunked, length) {
            (true, Some(_)) => return Err(Refusal::bad("both Content-Length and Transfer-Encoding")),
            (true, None) => Framing::Chunked,
            (false, Some(n)) if n > cfg.max_body_bytes() => return Err(Refusal::BODY_TOO_LARGE),
            (false, Some(n)) => Framing::Length(n),
            (false, None) => Framing::Empty,
        };
        let keep_alive = !close && (minor == 1 || keep);
        Ok(Head {
            method: method.to_owned(),
            target: target.to_owned(),
            minor,
            headers,
            framing,
            expect_continue,
            keep_alive,
        })
    }

    /// The request as the guard passes it on: HTTP/1.1, kept alive, the body
    /// framed by its length, with the client's address and the request's
    /// arrival in the guard's private headers.
    pub(super) fn forwarded(&self, body: &[u8], peer: Option<SocketAddr>, received: Instant) -> Vec<u8> {
        let mut out = Vec::with_capacity(256 + body.len());
        out.extend_from_slice(format!("{} {} HTTP/1.1\r\n", self.method, self.target).as_bytes());
        if let Some(peer) = peer {
            out.extend_from_slice(format!("{}: {peer}\r\n", request::PEER_HEADER).as_bytes());
        }
        out.extend_from_slice(
            format!("{}: {}\r\n", request::RECEIVED_HEADER, request::encode_instant(received)).as_bytes(),
        );
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if self.framing != Framing::Empty {
            out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        out
    }
}

/// An answer the guard gives itself, after which it closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) status: u16,
    pub(super) code: &'static str,
    pub(super) message: &'static str,
}

impl Refusal {
    pub(super) const HEAD_TOO_LARGE: Refusal = Refusal {
        status: 431,
        code: "REQUEST_HEADER_FIELDS_TOO_LARGE",
        message: "the request head is too large",
    };
    pub(super) const BODY_TOO_LARGE: Refusal =
        Refusal { status: 413, code: "PAYLOAD_TOO_LARGE", message: "the request body is too large" };
    pub(super) const UNSUPPORTED_CODING: Refusal = Refusal {
        status: 501,
        code: "NOT_IMPLEMENTED",
        message: "only the chunked transfer coding is supported",
    };
    pub(super) const EXPECTATION: Refusal = Refusal {
        status: 417,
        code: "EXPECTATION_FAILED",
        message: "only Expect: 100-continue is supported",
    };
    pub(super) const VERSION: Refusal = Refusal {
        status: 505,
        code: "HTTP_VERSION_NOT_SUPPORTED",
        message: "only HTTP/1.0 and HTTP/1.1 are supported",
    };
    pub(super) const TIMEOUT: Refusal =
        Refusal { status: 408, code: "REQUEST_TIMEOUT", message: "the request was not received in time" };
    pub(super) const BUSY: Refusal =
        Refusal { status: 503, code: "SERVER_BUSY", message: "too many open connections, try again later" };
    pub(super) const UPSTREAM: Refusal =
        Refusal { status: 502, code: "BAD_GATEWAY", message: "the request handler gave no valid answer" };
    /// Not an answer: the client is gone, there is no one to answer.
    pub(super) const GONE: Refusal = Refusal { status: 0, code: "", message: "" };

    pub(super) fn bad(message: &'static str) -> Refusal {
        Refusal { status: 400, code: "BAD_REQUEST", message }
    }

    fn from_read(fail: ReadFail) -> Refusal {
        match fail {
            ReadFail::TimedOut => Refusal::TIMEOUT,
            ReadFail::Closed => Refusal::GONE,
        }
    }

    /// The whole answer, `Connection: close`, with a JSON body like the
    /// request pool's own `500`.
    pub(super) fn bytes(&self) -> Vec<u8> {
        let body = format!(r#"{{"code":"{}","message":"{}"}}"#, self.code, self.message);
        format!(
            "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.status,
            reason(self.status),
            body.len()
        )
        .into_bytes()
    }
}

fn parse_error(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid token in the request line",
        httparse::Error::TooManyHeaders => "too many headers",
        httparse::Error::Version => "invalid HTTP version",
    }
}

/// The reason phrase of the statuses the guard answers with.
pub(super) fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        408 => "Request Timeout",
        413 => "Content Too Large",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}
