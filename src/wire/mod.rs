//! The crate's one HTTP/1.1 wire, sans IO: request and answer heads parsed
//! from bytes with `httparse`, bodies framed by `Content-Length` or chunked,
//! within limits, and heads and answers written into buffers. It owns no
//! socket; its callers do: the guard's connection threads
//! (`server/client.rs`), the hop to the request pool (`server/hop.rs`) and
//! the fake provider (`testing/handler.rs`).
//!
//! # Reading
//!
//! A caller keeps one `Vec<u8>` per connection: the bytes read off it and
//! not yet used. It asks the wire what those bytes hold; the answer is
//! either a result and how many bytes it took from the front (the caller
//! drains them: what stays is the start of a pipelined next request), or
//! `None`, "not yet", after which the caller reads more (with
//! [`read_some`], under whatever deadline is its own) and asks again. So
//! every timeout and every socket error is the caller's, and the wire's
//! answers depend on the bytes alone.
//!
//! ```text
//! request:  parse_request ──head──► BodyDecoder::new(head.framing) ──step…──► done
//! ```
//!
//! [`read_head`] and [`BodyDecoder::drive`] are those loops, with the read
//! passed in as a closure.
//!
//! # Strictness
//!
//! A proxy in front may read a request's framing more leniently or more
//! strictly than this wire does; wherever the two could differ, the
//! request is refused (400, then the close) instead of being guessed at:
//! a bare LF or CR as a line's end, in the head or anywhere in a chunked
//! body; a chunk-size line or a trailer line outside the grammar (`chunk.rs`);
//! two `Content-Length` or two `Host` headers; `Transfer-Encoding` on
//! HTTP/1.0. Otherwise one of the two would take as a body what the other
//! takes as the next request.

// The server uses every part; the fake provider reads requests only.
#![cfg_attr(not(feature = "tiny_http"), allow(dead_code, unused_imports))]

mod body;
mod chunk;
mod request;

use std::io::{self, Read};

pub(crate) use self::body::{BodyDecoder, Framing};
pub(crate) use self::request::{RequestHead, read_head};

/// What a connection may send: the caps of the guard, or of the fake
/// provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The most bytes of a request head; also of a chunk-size line, and of
    /// a chunked body's trailers together.
    pub(crate) max_head_bytes: usize,
    /// The most bytes of a body: a declared `Content-Length` over it is
    /// refused at the head, chunks as soon as they pass it.
    pub(crate) max_body_bytes: u64,
}

/// How much one read asks for.
const READ_CHUNK: usize = 16 * 1024;

/// Reads once from `src` onto the end of `buf`, retrying an interrupted
/// read: `Ok(0)` is the end of the stream.
pub(crate) fn read_some(mut src: impl Read, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut chunk = [0u8; READ_CHUNK];
    let n = loop {
        match src.read(&mut chunk) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            read => break read?,
        }
    };
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// The interim answer to `Expect: 100-continue`.
pub(crate) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A whole answer with a body, after which the connection closes.
pub(crate) fn closing_answer(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + body.len());
    put_status_line(&mut out, 1, status, reason(status));
    put_header(&mut out, "Content-Type", content_type.as_bytes());
    put_header(&mut out, "Content-Length", body.len().to_string().as_bytes());
    put_header(&mut out, "Connection", b"close");
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// `HTTP/1.<minor> <status> <reason>` and its CRLF.
pub(crate) fn put_status_line(out: &mut Vec<u8>, minor: u8, status: u16, reason: &str) {
    out.extend_from_slice(format!("HTTP/1.{minor} {status} {reason}\r\n").as_bytes());
}

/// `<name>: <value>` and its CRLF.
pub(crate) fn put_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The reason phrase of the statuses this crate answers with (the guard's
/// refusals and the fake provider's usual answers).
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

/// An answer a server gives itself instead of passing a request on, after
/// which it closes the connection. What is wrong with a request's bytes is
/// one of these; the guard adds its own (`server/client.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// 0: not an answer (there is no one left to answer).
    pub(crate) status: u16,
    pub(crate) code: &'static str,
    pub(crate) message: &'static str,
}

impl Refusal {
    /// The head (or a chunk-size line, or the trailers) passed
    /// `max_head_bytes`, or it has more than 100 headers (`MAX_HEADERS`).
    pub(crate) const HEAD_TOO_LARGE: Refusal =
        Refusal::new(431, "REQUEST_HEADER_FIELDS_TOO_LARGE", "the request head is too large");
    /// A declared `Content-Length`, or the chunks so far, passed `max_body_bytes`.
    pub(crate) const BODY_TOO_LARGE: Refusal =
        Refusal::new(413, "PAYLOAD_TOO_LARGE", "the request body is too large");
    pub(crate) const UNSUPPORTED_CODING: Refusal =
        Refusal::new(501, "NOT_IMPLEMENTED", "only the chunked transfer coding is supported");
    pub(crate) const EXPECTATION: Refusal =
        Refusal::new(417, "EXPECTATION_FAILED", "only Expect: 100-continue is supported");
    pub(crate) const VERSION: Refusal =
        Refusal::new(505, "HTTP_VERSION_NOT_SUPPORTED", "only HTTP/1.0 and HTTP/1.1 are supported");

    const fn new(status: u16, code: &'static str, message: &'static str) -> Refusal {
        Refusal { status, code, message }
    }

    /// A malformed request: `400`, saying what is wrong.
    pub(crate) fn bad(message: &'static str) -> Refusal {
        Refusal::new(400, "BAD_REQUEST", message)
    }

    /// The whole answer, `Connection: close`, with a JSON body
    /// `{"code", "message"}` like the request pool's own `500`.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let body = format!(r#"{{"code":"{}","message":"{}"}}"#, self.code, self.message);
        closing_answer(self.status, "application/json", body.as_bytes())
    }
}

impl From<Refusal> for std::io::Error {
    fn from(refusal: Refusal) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, refusal.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_a_closing_json_answer_framed_by_its_length() {
        let body = r#"{"code":"PAYLOAD_TOO_LARGE","message":"the request body is too large"}"#;
        let head =
            "HTTP/1.1 413 Content Too Large\r\nContent-Type: application/json\r\nContent-Length: 70\r\n";
        let text = String::from_utf8(Refusal::BODY_TOO_LARGE.bytes()).unwrap();
        assert_eq!(text, format!("{head}Connection: close\r\n\r\n{body}"));
    }

    #[test]
    fn read_some_appends_and_reports_the_end() {
        let mut buf = b"ab".to_vec();
        assert_eq!(read_some(&b"cd"[..], &mut buf).unwrap(), 2);
        assert_eq!(buf, b"abcd");
        assert_eq!(read_some(&b""[..], &mut buf).unwrap(), 0);
    }
}
