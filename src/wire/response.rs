//! Answer heads: parsed off the request pool's side of the hop, and written
//! again for the client that asked.

use super::{Framing, RequestHead, put_header, put_status_line};

/// Headers an answer head may have.
const MAX_HEADERS: usize = 64;

/// A parsed answer head.
#[derive(Debug)]
pub(crate) struct ResponseHead {
    pub(crate) status: u16,
    pub(crate) reason: String,
    /// Every header, as sent.
    pub(crate) headers: Vec<(String, Vec<u8>)>,
    /// As the headers say: chunked if any `Transfer-Encoding`, else a
    /// `Content-Length`, else until the close.
    pub(crate) framing: Framing,
    /// The sender closes the connection after this answer.
    pub(crate) close: bool,
}

/// Parses the answer head at the front of `buf`: `Ok(None)` while it is
/// incomplete within `max_head_bytes`, else the head and its length; `Err`
/// names what is invalid.
pub(crate) fn parse_response(
    buf: &[u8],
    max_head_bytes: usize,
) -> Result<Option<(ResponseHead, usize)>, &'static str> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut slots);
    let used = match resp.parse(buf) {
        Ok(httparse::Status::Complete(used)) => used,
        Ok(httparse::Status::Partial) if buf.len() <= max_head_bytes => return Ok(None),
        _ => return Err("head"),
    };
    let mut framing = Framing::UntilClose;
    let mut close = false;
    let mut headers = Vec::with_capacity(resp.headers.len());
    for h in resp.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            framing = Framing::Chunked;
        } else if h.name.eq_ignore_ascii_case("content-length") && framing != Framing::Chunked {
            framing = Framing::Length(value.trim().parse().map_err(|_| "Content-Length")?);
        } else if h.name.eq_ignore_ascii_case("connection") {
            close = value.to_ascii_lowercase().contains("close");
        }
        headers.push((h.name.to_owned(), h.value.to_vec()));
    }
    let status = resp.code.ok_or("status")?;
    let reason = resp.reason.unwrap_or("").to_owned();
    Ok(Some((ResponseHead { status, reason, headers, framing, close }, used)))
}

/// An answer head written for the client, and how its body goes on.
#[derive(Debug)]
pub(crate) struct Relay {
    pub(crate) head: Vec<u8>,
    /// How the body follows the head (none for `HEAD`, 1xx, 204 and 304).
    pub(crate) framing: Framing,
    /// The body is chunked but the client speaks HTTP/1.0: only its data
    /// goes on, and the close ends it.
    pub(crate) dechunk: bool,
    /// The connection closes after this answer.
    pub(crate) close: bool,
}

impl ResponseHead {
    /// This head as written to the client that sent `request`, in its HTTP
    /// version, closing after it when `close_after` (or when the body needs
    /// the close to end). The answer's own `Connection` and `Keep-Alive`
    /// are the hop's, not the client's, and are replaced.
    pub(crate) fn relay(&self, request: &RequestHead, close_after: bool) -> Relay {
        // Case-sensitive, as methods are (RFC 9110 9.1), and as the request
        // pool (tiny_http) reads them: it answers `head` with a body.
        let no_body =
            request.method == "HEAD" || self.status < 200 || self.status == 204 || self.status == 304;
        let framing = if no_body { Framing::Length(0) } else { self.framing };
        let minor = request.minor;
        let dechunk = framing == Framing::Chunked && minor == 0;
        let close = close_after || dechunk || framing == Framing::UntilClose;

        let mut head = Vec::with_capacity(1024);
        put_status_line(&mut head, minor, self.status, &self.reason);
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            if lower == "connection" || lower == "keep-alive" || (dechunk && lower == "transfer-encoding") {
                continue;
            }
            put_header(&mut head, name, value);
        }
        if close {
            put_header(&mut head, "Connection", b"close");
        } else if minor == 0 {
            put_header(&mut head, "Connection", b"keep-alive");
        }
        head.extend_from_slice(b"\r\n");
        Relay { head, framing, dechunk, close }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Limits;
    use super::super::request::parse_request;
    use super::*;

    fn request(text: &str) -> RequestHead {
        parse_request(text.as_bytes(), Limits::NONE).unwrap().unwrap().0
    }

    fn answer(text: &str) -> ResponseHead {
        let (head, used) = parse_response(text.as_bytes(), 1024).unwrap().unwrap();
        assert_eq!(used, text.len());
        head
    }

    #[test]
    fn an_answer_head_says_its_framing() {
        assert_eq!(answer("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n").framing, Framing::Length(3));
        let chunked = answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n");
        assert_eq!(chunked.framing, Framing::Chunked);
        let closing = answer("HTTP/1.1 200 OK\r\nConnection: Close\r\n\r\n");
        assert_eq!((closing.framing, closing.close), (Framing::UntilClose, true));
        assert_eq!(parse_response(b"HTTP/1.1 200 OK\r\n", 1024).unwrap().map(|_| ()), None);
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", 1024).unwrap_err(),
            "Content-Length"
        );
        assert_eq!(parse_response(b"HTTP/1.1 200 OK\r\n", 4).unwrap_err(), "head");
    }

    #[test]
    fn a_relayed_head_speaks_the_clients_version() {
        let chunked =
            answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n");
        let old = chunked.relay(&request("GET / HTTP/1.0\r\n\r\n"), false);
        assert_eq!(old.head, b"HTTP/1.0 200 OK\r\nConnection: close\r\n\r\n");
        assert!(old.dechunk && old.close);
        let new = chunked.relay(&request("GET / HTTP/1.1\r\n\r\n"), false);
        assert_eq!(new.head, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(!new.dechunk && !new.close);
        let sized = answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n");
        let kept = sized.relay(&request("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"), false);
        assert!(kept.head.ends_with(b"Connection: keep-alive\r\n\r\n"));
        let head = sized.relay(&request("HEAD / HTTP/1.1\r\n\r\n"), true);
        assert_eq!((head.framing, head.close), (Framing::Length(0), true));
        let lower = sized.relay(&request("head / HTTP/1.1\r\n\r\n"), false);
        assert_eq!((lower.framing, lower.close), (Framing::Length(2), false));
    }
}
