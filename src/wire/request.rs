//! Request heads: parsed and checked against [`Limits`], and what is wrong
//! with one said as the answer a server gives ([`Refusal`]).

use super::{Framing, Limits, Refusal};

/// Headers a request head may have; more is answered as a head too large.
const MAX_HEADERS: usize = 100;

/// Headers that describe one connection, not the request: whoever reads the
/// request answers them, and does not pass them on.
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

/// A parsed, checked request head.
#[derive(Debug)]
pub(crate) struct RequestHead {
    pub(crate) method: String,
    /// The request target, ASCII: path and query.
    pub(crate) target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub(crate) minor: u8,
    /// The end-to-end headers, each value trimmed: every header but the
    /// [hop-by-hop](HOP_BY_HOP) ones, which the fields below answer.
    pub(crate) headers: Vec<(String, String)>,
    /// A `Content-Length` here is within `max_body_bytes`.
    pub(crate) framing: Framing,
    pub(crate) expect_continue: bool,
    /// The client keeps the connection open after the answer.
    pub(crate) keep_alive: bool,
}

/// Parses the request head at the front of `buf`: `Ok(None)` while it is
/// incomplete (and within `max_head_bytes`), else the head and its length.
pub(crate) fn parse_request(buf: &[u8], limits: Limits) -> Result<Option<(RequestHead, usize)>, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n > limits.max_head_bytes => Err(Refusal::HEAD_TOO_LARGE),
        Ok(httparse::Status::Complete(n)) => {
            crlf_only(&buf[..n])?;
            Ok(Some((RequestHead::from_parsed(&req, limits)?, n)))
        }
        Ok(httparse::Status::Partial) if buf.len() > limits.max_head_bytes => Err(Refusal::HEAD_TOO_LARGE),
        Ok(httparse::Status::Partial) => crlf_only(buf).map(|()| None),
        Err(httparse::Error::TooManyHeaders) => Err(Refusal::HEAD_TOO_LARGE),
        Err(httparse::Error::Version) => Err(Refusal::VERSION),
        Err(e) => Err(Refusal::bad(parse_error(e))),
    }
}

/// httparse takes a bare LF for a line's end, in the request line, between
/// headers and as the empty line; a proxy that does not would read
/// `X: a\nTransfer-Encoding: chunked` as one header and frame the body by
/// another. Every LF of a head (here, of the bytes so far) must follow a CR.
/// A bare CR, obs-fold and whitespace before a header's colon are httparse's
/// own errors.
fn crlf_only(head: &[u8]) -> Result<(), Refusal> {
    let bare = head.iter().enumerate().any(|(i, &b)| b == b'\n' && (i == 0 || head[i - 1] != b'\r'));
    if bare { Err(Refusal::bad("a line of the request head ends with a bare LF")) } else { Ok(()) }
}

/// Takes a request head off the front of `buf`, calling `fill` to append
/// more bytes while it is incomplete; `Ok(None)` when `fill` found the end
/// of the stream first.
pub(crate) fn read_head<E: From<Refusal>>(
    buf: &mut Vec<u8>,
    limits: Limits,
    mut fill: impl FnMut(&mut Vec<u8>) -> Result<usize, E>,
) -> Result<Option<RequestHead>, E> {
    loop {
        if let Some((head, used)) = parse_request(buf, limits)? {
            buf.drain(..used);
            return Ok(Some(head));
        }
        if fill(buf)? == 0 {
            return Ok(None);
        }
    }
}

impl RequestHead {
    fn from_parsed(req: &httparse::Request<'_, '_>, limits: Limits) -> Result<RequestHead, Refusal> {
        let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
            return Err(Refusal::bad("incomplete request line"));
        };
        if !target.is_ascii() {
            return Err(Refusal::bad("the request target is not ASCII"));
        }
        let (mut length, mut chunked, mut expect_continue) = (None::<u64>, false, false);
        let mut host = false;
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
                    // A second one is refused even when it agrees: a proxy
                    // in front may have kept either, or joined them.
                    if length.is_some() {
                        return Err(Refusal::bad("more than one Content-Length header"));
                    }
                    // All digits: too many of them for a u64 is simply too large.
                    length = Some(value.parse::<u64>().unwrap_or(u64::MAX));
                }
                "transfer-encoding" => {
                    // RFC 9112 6.1: an HTTP/1.0 message's framing is faulty
                    // with it, since an HTTP/1.0 hop in front does not dechunk.
                    if minor == 0 {
                        return Err(Refusal::bad("Transfer-Encoding on an HTTP/1.0 request"));
                    }
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
                // RFC 9112 3.2: which of two hosts is meant is anyone's guess.
                "host" => {
                    if host {
                        return Err(Refusal::bad("more than one Host header"));
                    }
                    host = true;
                }
                "connection" => {
                    for token in value.split(',').map(str::trim) {
                        close |= token.eq_ignore_ascii_case("close");
                        keep |= token.eq_ignore_ascii_case("keep-alive");
                    }
                }
                _ => {}
            }
            if !HOP_BY_HOP.contains(&name.as_str()) {
                headers.push((h.name.to_owned(), value.to_owned()));
            }
        }
        let framing = match (chunked, length) {
            (true, Some(_)) => return Err(Refusal::bad("both Content-Length and Transfer-Encoding")),
            (true, None) => Framing::Chunked,
            (false, Some(n)) if n > limits.max_body_bytes => return Err(Refusal::BODY_TOO_LARGE),
            (false, Some(n)) => Framing::Length(n),
            (false, None) => Framing::None,
        };
        let keep_alive = !close && (minor == 1 || keep);
        Ok(RequestHead {
            method: method.to_owned(),
            target: target.to_owned(),
            minor,
            headers,
            framing,
            expect_continue,
            keep_alive,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_head_bytes: 256, max_body_bytes: 100 };

    fn parsed(head: &str) -> Result<Option<(RequestHead, usize)>, Refusal> {
        parse_request(head.as_bytes(), LIMITS)
    }

    #[test]
    fn a_head_keeps_its_end_to_end_headers_and_answers_the_rest() {
        let text = "POST /a?b=1 HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\
                    Expect: 100-continue\r\nX-Id:  7 \r\n\r\nhello";
        let (head, used) = parsed(text).unwrap().unwrap();
        assert_eq!(used, text.len() - 5);
        assert_eq!((head.method.as_str(), head.target.as_str(), head.minor), ("POST", "/a?b=1", 0));
        assert_eq!(head.headers, [("Host".to_owned(), "x".to_owned()), ("X-Id".to_owned(), "7".to_owned())]);
        assert_eq!(head.framing, Framing::Length(5));
        assert!(head.expect_continue && head.keep_alive);
        let (head, _) = parsed("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap().unwrap();
        assert_eq!((head.framing, head.keep_alive), (Framing::None, false));
    }

    #[test]
    fn an_incomplete_head_waits_within_its_cap() {
        assert!(parsed("GET / HTTP/1.1\r\nHost: x\r\n").unwrap().is_none());
        let long = format!("GET / HTTP/1.1\r\nX: {}", "y".repeat(300));
        assert_eq!(parsed(&long).unwrap_err(), Refusal::HEAD_TOO_LARGE);
    }

    #[test]
    fn each_bad_head_gets_its_answer() {
        let status = |head: &str| parsed(head).unwrap_err().status;
        assert_eq!(status("GET / HTTP/1.1\r\nContent-Length: 101\r\n\r\n"), 413);
        assert_eq!(status("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), 501);
        assert_eq!(status("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nExpect: magic\r\n\r\n"), 417);
        assert_eq!(status("GET / HTTP/2.0\r\n\r\n"), 505);
        assert_eq!(status("GET / HTTP/1.1\r\nX: caf\u{e9}\r\n\r\n"), 400);
    }

    /// The refusal of `head`, which must be a 400.
    #[track_caller]
    fn bad(head: &str) -> &'static str {
        let refusal = parsed(head).map(|_| ()).unwrap_err();
        assert_eq!(refusal.status, 400, "{head:?}: {refusal:?}");
        refusal.message
    }

    #[test]
    fn a_head_frames_its_body_one_way_only() {
        let twice = "more than one Content-Length header";
        assert_eq!(bad("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n"), twice);
        assert_eq!(bad("POST / HTTP/1.1\r\ncontent-length: 0\r\nContent-Length: 0\r\n\r\n"), twice);
        for value in ["+1", "1 2", "1,1", "1, 1", "0x1", "1.0", ""] {
            let head = format!("POST / HTTP/1.1\r\nContent-Length: {value}\r\n\r\n");
            assert_eq!(bad(&head), "Content-Length is not a number", "{value:?}");
        }
        // Whitespace around the value is the field's, not the number's.
        let (head, _) = parsed("POST / HTTP/1.1\r\nContent-Length:  3 \r\n\r\n").unwrap().unwrap();
        assert_eq!(head.framing, Framing::Length(3));

        let old = "Transfer-Encoding on an HTTP/1.0 request";
        assert_eq!(bad("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), old);
        assert_eq!(bad("POST / HTTP/1.0\r\nTransfer-Encoding: gzip\r\n\r\n"), old);
        assert_eq!(bad("POST / HTTP/1.0\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"), old);
        let (head, _) = parsed("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n").unwrap().unwrap();
        assert_eq!(head.framing, Framing::Chunked);
    }

    #[test]
    fn a_head_names_one_host() {
        assert_eq!(bad("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), "more than one Host header");
        assert_eq!(bad("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"), "more than one Host header");
    }

    #[test]
    fn a_head_has_crlf_lines_only() {
        let bare = "a line of the request head ends with a bare LF";
        // httparse takes each of these as a whole head.
        assert_eq!(bad("GET / HTTP/1.1\r\nX: a\nTransfer-Encoding: chunked\r\n\r\n"), bare);
        assert_eq!(bad("GET / HTTP/1.1\nHost: x\r\n\r\n"), bare);
        assert_eq!(bad("GET / HTTP/1.1\r\nHost: x\r\n\n"), bare);
        assert_eq!(bad("GET / HTTP/1.1\r\nHost: x\n\r\n"), bare);
        assert_eq!(bad("\nGET / HTTP/1.1\r\n\r\n"), bare);
        // Refused as soon as it is there, not at the end of the head.
        assert_eq!(bad("GET / HTTP/1.1\nHost: x"), bare);
        // One empty line before the request line is allowed (RFC 9112 2.2).
        let (head, used) = parsed("\r\nGET / HTTP/1.1\r\n\r\n").unwrap().unwrap();
        assert_eq!((head.target.as_str(), used), ("/", 20));
    }

    #[test]
    fn httparse_refuses_the_other_malformed_lines() {
        // obs-fold: a line that starts with whitespace.
        assert_eq!(bad("GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n"), "invalid header name");
        assert_eq!(bad("GET / HTTP/1.1\r\nX: a\r\n\tfolded\r\n\r\n"), "invalid header name");
        assert_eq!(bad("GET / HTTP/1.1\r\n Host: x\r\n\r\n"), "invalid header name");
        // Whitespace between a name and its colon.
        assert_eq!(bad("GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\n"), "invalid header name");
        assert_eq!(bad("GET / HTTP/1.1\r\nContent-Length\t: 5\r\n\r\n"), "invalid header name");
        // A bare CR, in a value, after the request line or as the empty line.
        assert_eq!(bad("GET / HTTP/1.1\r\nX: a\rb\r\n\r\n"), "invalid header value");
        assert_eq!(bad("GET / HTTP/1.1\r\r\n\r\n"), "invalid line ending");
        assert_eq!(bad("GET / HTTP/1.1\r\nX: a\r\n\rX"), "invalid line ending");
        assert_eq!(bad("\rGET / HTTP/1.1\r\n\r\n"), "invalid line ending");
        // Other control bytes in a value.
        assert_eq!(bad("GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n"), "invalid header value");
    }

    #[test]
    fn a_method_is_kept_as_sent() {
        // Methods are case-sensitive (RFC 9110 9.1): `get` is not `GET`.
        let (head, _) = parsed("get / HTTP/1.1\r\n\r\n").unwrap().unwrap();
        assert_eq!(head.method, "get");
    }

    #[test]
    fn read_head_fills_until_complete_and_keeps_the_rest() {
        let mut chunks = ["GET / HT", "TP/1.1\r\n\r\nGET /next"].into_iter();
        let mut buf = Vec::new();
        let fill = |buf: &mut Vec<u8>| {
            Ok::<_, Refusal>(chunks.next().map_or(0, |c| {
                buf.extend_from_slice(c.as_bytes());
                c.len()
            }))
        };
        let head = read_head(&mut buf, LIMITS, fill).unwrap().unwrap();
        assert_eq!(head.target, "/");
        assert_eq!(buf, b"GET /next");
    }
}
