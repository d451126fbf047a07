//! An answer's way back from a request thread to the client's connection
//! thread, in process: the request thread prints the handler's
//! `tiny_http::Response` itself (tiny_http's own `raw_print` decides its
//! framing, once), into a [`Reply`] whose pieces go over a small bounded
//! channel; the connection thread writes them to its client as they come
//! ([`relay`]) and never parses them.
//!
//! One reply belongs to one request of one connection, so no answer can
//! reach another client's exchange.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use tiny_http::{HTTPVersion, Header, Method, Request, Response, ResponseBox};

/// Answers up to this size reach the connection thread as one piece, before
/// a byte goes to the client, so that a client slow to read never holds the
/// request thread that wrote them (the piece waits in the channel).
const BUFFER_ANSWER: usize = 256 * 1024;
/// Pieces in flight between a request thread and a connection thread: a
/// longer answer waits for its client, a piece at a time.
const PIECES: usize = 4;

/// How often the connection thread looks at the client while it waits for
/// an event stream's next piece: a client that has left frees its request
/// thread and the stream's slot at the stream's next event, not the one
/// after (a first write to a departed client still succeeds).
const WATCH: Duration = Duration::from_millis(100);

/// A piece of an answer.
pub(super) enum Piece {
    /// `stream`: a piece of an event stream, whose next piece may be long in
    /// coming.
    Data { bytes: Vec<u8>, stream: bool },
    /// The answer is whole; `close`: the connection closes after it.
    End { close: bool },
}

/// The request thread's side of one answer.
pub(super) struct Reply {
    tx: Sender<Piece>,
    /// The longest a piece waits for room in the channel: the client's
    /// write timeout, so that a client reading a byte now and then does not
    /// hold the request thread of a long answer for ever.
    wait: Duration,
    /// The connection closes after this answer, whatever the answer says.
    close_after: bool,
    /// 0 for an HTTP/1.0 client, 1 for HTTP/1.1.
    minor: u8,
}

/// A reply for a request of HTTP/1.`minor`, whose pieces wait at most `wait`
/// for room, and the connection thread's receiver of its pieces.
pub(super) fn channel(close_after: bool, minor: u8, wait: Duration) -> (Reply, Receiver<Piece>) {
    let (tx, rx) = crossbeam_channel::bounded(PIECES);
    (Reply { tx, wait, close_after, minor }, rx)
}

impl Reply {
    /// Prints `response` as the answer to `request`, then ends the reply.
    /// `request` is dropped before the end is sent, with nothing written to
    /// its own writer: for a request that came over the hop, tiny_http's
    /// connection is free for the next request once the guard sees the end.
    pub(super) fn send(self, request: Request, response: ResponseBox) {
        let Reply { tx, wait, close_after, minor } = self;
        let response = match invalid_header(&response) {
            None => response,
            Some(name) => {
                log::error!(
                    "request handler answered {} {} with a header that is not valid HTTP ({name:?}): \
                     answering 500 instead",
                    request.method(),
                    request.url()
                );
                internal_error()
            }
        };
        let bodiless = *request.method() == Method::Head;
        let streaming = response
            .headers()
            .iter()
            .any(|h| h.field.equiv("Content-Type") && h.value.as_str().starts_with("text/event-stream"));
        // A 1xx answer would be followed by another: not one this guard relays.
        let doubt = response.status_code().0 < 200;
        // An event stream to an HTTP/1.0 client ends with the close (see
        // `print_close_delimited`).
        let close_delimited = streaming && minor == 0 && response.data_length().is_none() && !doubt;
        let close = close_after || doubt || close_delimited;
        let connection: &[u8] = if close {
            b"Connection: close\r\n"
        } else if minor == 0 {
            b"Connection: keep-alive\r\n"
        } else {
            b""
        };
        let (response, short) = checked(response);
        let mut out = PieceWriter {
            tx: &tx,
            wait,
            buf: Vec::new(),
            streaming,
            connection,
            head_done: false,
            sent: false,
        };
        // The client's version: one that crossed the hop reads 1.1 there.
        let version = HTTPVersion(1, minor);
        // The body is the handler's code too: a panic in it is the answer's
        // failure (502, or the close mid-answer), and the thread lives on.
        let printed = catch_unwind(AssertUnwindSafe(|| {
            if close_delimited {
                print_close_delimited(response, &mut out, bodiless)
            } else {
                response.raw_print(&mut out, version, request.headers(), bodiless, None)
            }
        }))
        .unwrap_or_else(|payload| {
            let msg = crate::error::panic_message(&*payload);
            log::error!("the response body to {} {} panicked: {msg}", request.method(), request.url());
            Err(io::Error::other("the response body panicked"))
        });
        let flushed = printed.and_then(|()| out.flush());
        let sent = out.sent;
        drop(out);
        let close = close || flushed.is_err() || short.load(Ordering::Relaxed);
        if let Err(e) = &flushed {
            log::debug!(
                "request pool: the answer to {} {} was cut short: {e}",
                request.method(),
                request.url()
            );
        }
        // Drops the request's own writer unused (tiny_http would print a
        // 500 into a request dropped with it).
        drop(request.into_writer());
        if flushed.is_err() && !sent {
            // Nothing reached the client (the body's reader failed before a
            // piece was full): no end, so the guard answers 502 itself.
            return;
        }
        // A connection thread that gave up on the answer has gone.
        let _ = tx.send(Piece::End { close });
    }
}

/// Prints an answer of unknown length to an HTTP/1.0 client as it goes,
/// its end marked by the close (RFC 9112 6.3, rule 8): no `Content-Length`,
/// `Connection: close` (the writer adds it), and every piece of the body
/// sent as it is read. tiny_http would read the body whole first to learn its
/// length (HTTP/1.0 has no chunks), so an event stream would reach its client
/// only at its end, and a client that left would never be noticed.
fn print_close_delimited(response: ResponseBox, out: &mut PieceWriter<'_>, bodiless: bool) -> io::Result<()> {
    let status = response.status_code();
    let mut head = format!("HTTP/1.0 {} {}\r\n", status.0, status.default_reason_phrase());
    for header in response.headers() {
        head.push_str(&format!("{header}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    if !bodiless && !matches!(status.0, 204 | 304) {
        io::copy(&mut response.into_reader(), out)?;
    }
    Ok(())
}

/// `response` rebuilt for the guard to print, its body held to its declared
/// length; and a flag set once the body turns out shorter than its length.
/// (tiny_http's `Response` keeps no framing header of the handler's own:
/// `add_header` turns `Content-Length` into the length and drops
/// `Connection`, `Transfer-Encoding`, `Trailer` and `Upgrade`.)
fn checked(response: ResponseBox) -> (ResponseBox, Arc<AtomicBool>) {
    let status = response.status_code();
    let threshold = response.chunked_threshold();
    let length = response.data_length();
    let headers = response.headers().to_vec();
    let short = Arc::new(AtomicBool::new(false));
    let body = Exact { inner: response.into_reader(), left: length, short: Arc::clone(&short) };
    let rebuilt = Response::new(status, headers, Box::new(body) as Box<dyn Read + Send>, length, None)
        .with_chunked_threshold(threshold);
    (rebuilt, short)
}

/// The first header of `response` that would not print as one valid header
/// line: a name that is not a token, or a value with a control byte (a CR
/// or LF there would end the head early, and whatever follows would be read
/// as another answer). tiny_http's `Header` takes any ASCII.
fn invalid_header(response: &ResponseBox) -> Option<String> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let field = |b: u8| b == b'\t' || (b' '..=b'~').contains(&b);
    response.headers().iter().find_map(|h| {
        let (name, value) = (h.field.as_str().as_bytes(), h.value.as_bytes());
        let valid = !name.is_empty() && name.iter().all(|&b| token(b)) && value.iter().all(|&b| field(b));
        (!valid).then(|| h.field.as_str().to_string())
    })
}

/// A body held to its declared length: never more, and `short` set when the
/// handler's reader ends before it.
struct Exact {
    inner: Box<dyn Read + Send>,
    left: Option<usize>,
    short: Arc<AtomicBool>,
}

impl Read for Exact {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(left) = self.left else { return self.inner.read(buf) };
        if left == 0 {
            return Ok(0);
        }
        let want = buf.len().min(left);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            self.short.store(true, Ordering::Relaxed);
        }
        self.left = Some(left - n);
        Ok(n)
    }
}

/// Collects printed bytes into pieces of up to [`BUFFER_ANSWER`]; an event
/// stream goes piece by piece as it is written. A write fails once the
/// connection thread has gone (its client left, or it gave up).
///
/// tiny_http's printer writes no `Connection` header (its own server decides
/// the connection apart from the answer), so the guard's is put in here, at
/// the end of the head: the first empty line of what was printed.
struct PieceWriter<'a> {
    tx: &'a Sender<Piece>,
    wait: Duration,
    buf: Vec<u8>,
    /// A piece has gone to the connection thread.
    sent: bool,
    streaming: bool,
    /// The `Connection` header line to add to the head, or nothing.
    connection: &'static [u8],
    /// The head is whole in `buf` (or sent), its `Connection` added.
    head_done: bool,
}

impl PieceWriter<'_> {
    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::take(&mut self.buf);
        self.sent = true;
        let piece = Piece::Data { bytes, stream: self.streaming };
        self.tx.send_timeout(piece, self.wait).map_err(|e| match e {
            SendTimeoutError::Timeout(_) => {
                io::Error::new(io::ErrorKind::TimedOut, "the client reads too slowly")
            }
            SendTimeoutError::Disconnected(_) => {
                io::Error::new(io::ErrorKind::BrokenPipe, "the client's connection has gone")
            }
        })
    }
}

impl Write for PieceWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        // Where the head's end may begin: it may straddle the last write.
        let from = self.buf.len().saturating_sub(3);
        self.buf.extend_from_slice(bytes);
        if !self.head_done {
            // The buffer starts with the head until the head is done.
            let Some(end) = self.buf[from..].windows(4).position(|w| w == b"\r\n\r\n") else {
                return Ok(bytes.len());
            };
            let at = from + end + 2;
            self.buf.splice(at..at, self.connection.iter().copied());
            self.head_done = true;
        }
        if self.streaming || self.buf.len() >= BUFFER_ANSWER {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// How one answer went, on the connection thread's side.
pub(super) struct Relayed {
    /// Its end came: the request thread is done with it.
    pub(super) ended: bool,
    /// The client got all of it and the connection may carry another request.
    pub(super) keep: bool,
    /// Bytes were written to the client (or tried): nothing else may be.
    pub(super) started: bool,
    /// It stopped because no piece came within the bound.
    pub(super) timed_out: bool,
}

/// Writes the pieces of one answer to `client` as they come, waiting at most
/// `bound` for each. After a failed write it stops, and while it waits for an
/// event stream's next piece it stops as soon as the client has closed its
/// side or reset the connection (looked at every [`WATCH`]): either way,
/// dropping `rx` makes the request thread's next write fail.
pub(super) fn relay(
    rx: Receiver<Piece>,
    first: Option<Piece>,
    client: &TcpStream,
    bound: Duration,
) -> Relayed {
    let mut relayed = Relayed { ended: false, keep: false, started: false, timed_out: false };
    let mut next = first;
    // The last piece was an event stream's: watch the client meanwhile.
    let mut watch = false;
    loop {
        let piece = match next.take() {
            Some(piece) => piece,
            None => match next_piece(&rx, client, bound, watch) {
                Ok(piece) => piece,
                Err(Waited::TimedOut) => {
                    log::warn!("guard: no answer from the request handler within {bound:?}; closing");
                    relayed.timed_out = true;
                    return relayed;
                }
                Err(Waited::Ended) => return relayed,
                Err(Waited::ClientGone) => {
                    log::debug!("guard: an event stream's client has left; ending it");
                    return relayed;
                }
            },
        };
        match piece {
            Piece::Data { bytes, stream } => {
                relayed.started = true;
                watch = stream;
                if (&mut &*client).write_all(&bytes).is_err() {
                    return relayed;
                }
            }
            Piece::End { close } => {
                relayed.ended = true;
                relayed.keep = !close;
                return relayed;
            }
        }
    }
}

/// Why no next piece came.
enum Waited {
    TimedOut,
    /// The request thread dropped the reply without an end.
    Ended,
    ClientGone,
}

/// The next piece within `bound`; while `watch`, the client is looked at
/// every [`WATCH`] meanwhile.
fn next_piece(
    rx: &Receiver<Piece>,
    client: &TcpStream,
    bound: Duration,
    watch: bool,
) -> Result<Piece, Waited> {
    let deadline = Instant::now() + bound;
    loop {
        let until = if watch { deadline.min(Instant::now() + WATCH) } else { deadline };
        match rx.recv_deadline(until) {
            Ok(piece) => return Ok(piece),
            Err(RecvTimeoutError::Disconnected) => return Err(Waited::Ended),
            Err(RecvTimeoutError::Timeout) if Instant::now() >= deadline => return Err(Waited::TimedOut),
            Err(RecvTimeoutError::Timeout) => {
                if client_gone(client) {
                    return Err(Waited::ClientGone);
                }
            }
        }
    }
}

/// Whether `client` has closed its side of the connection or reset it: a
/// peek that sees the end of the stream or an error. Bytes waiting (a
/// pipelined request) are left where they are.
fn client_gone(client: &TcpStream) -> bool {
    if client.set_nonblocking(true).is_err() {
        return true;
    }
    let mut byte = [0u8; 1];
    let gone = match client.peek(&mut byte) {
        Ok(n) => n == 0,
        Err(e) => !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted),
    };
    gone || client.set_nonblocking(false).is_err()
}

/// The request pool's own `500`, for a handler that failed.
pub(super) fn internal_error() -> ResponseBox {
    // The panic message stays in the log: it may name internals the client
    // has no business seeing.
    json_error(500, "INTERNAL_ERROR", "the request handler failed")
}

/// `{"code": .., "message": ..}` with `status`.
pub(super) fn json_error(status: u16, code: &str, message: &str) -> ResponseBox {
    let escaped: String = message
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c if c.is_control() => vec![' '],
            c => vec![c],
        })
        .collect();
    let body = format!(r#"{{"code":"{code}","message":"{escaped}"}}"#);
    Response::from_string(body)
        .with_status_code(status)
        .with_header(Header::from_bytes("Content-Type", "application/json").expect("a valid header"))
        .boxed()
}
