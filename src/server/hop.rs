//! The hop between the guard and tiny_http: a private socket to an inner
//! `tiny_http::Server`, a pool of kept-alive connections over it, and the
//! relay of each answer back to the client.
//!
//! On Unix the inner server listens on a Unix socket in a directory only this
//! user can enter (mode 0700), so no other user can reach tiny_http around the
//! guard; elsewhere on a loopback TCP port.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use parking_lot::Mutex;

use super::wire::Head;

#[cfg(unix)]
pub(super) type HopStream = std::os::unix::net::UnixStream;
#[cfg(not(unix))]
pub(super) type HopStream = TcpStream;

/// Answers up to this size are read off the hop whole before the first byte
/// goes to the client, so that a client slow to read never holds the request
/// thread that wrote the answer (it writes into the hop's socket buffer).
const BUFFER_ANSWER: usize = 256 * 1024;
/// A request body up to this size is written to the hop before its answer is
/// read; it fits in the socket's buffer whatever the handler does. A longer
/// one is written from a scoped thread while the answer is read.
const INLINE_BODY: usize = 64 * 1024;
/// When a fresh hop connection has had no answer after each of these waits,
/// the guard [kicks](Hop::kick) tiny_http once more; after the last it just
/// waits.
///
/// Why: tiny_http 0.12 hands each accepted connection to a task pool that
/// can lose a wake-up. Two connections arriving while one pool thread is
/// being woken both go to that thread's queue; the second then waits until
/// some thread finishes its connection, and hop connections are kept open.
/// A slow handler and a lost wake-up look the same from here, so a kick costs
/// little either way: one connection opened and closed.
const KICKS: [Duration; 3] =
    [Duration::from_millis(50), Duration::from_millis(200), Duration::from_millis(800)];
/// The largest answer head accepted from tiny_http.
const MAX_ANSWER_HEAD: usize = 64 * 1024;

/// Where the inner server listens, and the kept-alive connections to it.
pub(super) struct Hop {
    #[cfg(unix)]
    path: std::path::PathBuf,
    #[cfg(not(unix))]
    addr: std::net::SocketAddr,
    idle: Mutex<Vec<HopStream>>,
    max_idle: usize,
}

impl Hop {
    /// Binds the private socket and starts tiny_http on it. The [`HopDir`]
    /// must outlive the server: tiny_http's `Drop` connects to the socket to
    /// wake its accept thread, then removes the socket's file.
    pub(super) fn bind(max_idle: usize) -> io::Result<(Hop, tiny_http::Server, HopDir)> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let dir = std::env::temp_dir().join(format!("watertight-{}-{n}-{nanos}", std::process::id()));
            std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
            let path = dir.join("hop");
            let listener = std::os::unix::net::UnixListener::bind(&path).inspect_err(|_| {
                let _ = std::fs::remove_dir(&dir);
            })?;
            let server = tiny_http::Server::from_listener(listener, None).map_err(io::Error::other)?;
            Ok((Hop { path, idle: Mutex::new(Vec::new()), max_idle }, server, HopDir(Some(dir))))
        }
        #[cfg(not(unix))]
        {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            let addr = listener.local_addr()?;
            let server = tiny_http::Server::from_listener(listener, None).map_err(io::Error::other)?;
            Ok((Hop { addr, idle: Mutex::new(Vec::new()), max_idle }, server, HopDir(None)))
        }
    }

    /// A kept-alive connection to the inner server (`true`: fresh, not yet
    /// known to be served by a tiny_http thread), or a new one.
    pub(super) fn take(&self) -> io::Result<(HopStream, bool)> {
        if let Some(stream) = self.idle.lock().pop() {
            return Ok((stream, false));
        }
        self.connect().map(|s| (s, true))
    }

    fn connect(&self) -> io::Result<HopStream> {
        #[cfg(unix)]
        let stream = HopStream::connect(&self.path)?;
        #[cfg(not(unix))]
        let stream = {
            let s = HopStream::connect(self.addr)?;
            s.set_nodelay(true)?;
            s
        };
        Ok(stream)
    }

    /// Frees a tiny_http connection thread, so that a connection stuck in
    /// tiny_http's queue is taken up (see [`KICKS`]): a connection that closes
    /// at once ends the task of the thread that takes it, and that thread
    /// then takes the oldest queued one.
    fn kick(&self) {
        log::debug!("guard: a new hop connection got no answer yet; freeing a tiny_http thread");
        drop(self.connect());
    }

    /// Keeps `stream` for the next request, if there is room.
    pub(super) fn give(&self, stream: HopStream) {
        let mut idle = self.idle.lock();
        if idle.len() < self.max_idle {
            idle.push(stream);
        }
    }

    /// Closes every kept connection: tiny_http's connection threads see the
    /// end of their stream and exit.
    pub(super) fn close_idle(&self) {
        self.idle.lock().clear();
    }
}

/// The private directory of the hop's socket, removed on drop (once the
/// inner server, which removes the socket itself, is gone).
pub(super) struct HopDir(Option<std::path::PathBuf>);

impl Drop for HopDir {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            // tiny_http removed the socket; anything else left is removed too.
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// What became of one exchange.
pub(super) struct Relayed {
    /// The hop connection can carry the next request.
    pub(super) hop_reusable: bool,
    /// The client got the whole answer and may send another request.
    pub(super) client_ok: bool,
}

/// Sends `request` (a head and its body, from [`Head::forwarded`]) over `hop`,
/// and relays the answer to `client`, framed for the client's HTTP version.
/// `Err` when no valid answer head came back (nothing was sent to the client).
pub(super) fn exchange(
    pool: &Hop,
    hop: &mut HopStream,
    fresh: bool,
    request: &[u8],
    head: &Head,
    client: &TcpStream,
    close_after: bool,
) -> io::Result<Relayed> {
    let mut answer =
        AnswerReader { hop: &*hop, buf: Vec::new(), kicks: if fresh { Some(pool) } else { None } };
    let parsed = if request.len() <= INLINE_BODY {
        (&*hop).write_all(request)?;
        answer.read_head()?
    } else {
        let writer = &*hop;
        std::thread::scope(|s| {
            let sending = s.spawn(move || (&*writer).write_all(request));
            let parsed = answer.read_head();
            let sent = sending.join().unwrap_or_else(|_| Err(io::Error::other("the writer panicked")));
            let parsed = parsed?;
            sent.map(|()| parsed)
        })?
    };
    let AnswerHead { status, reason, headers, used, framing, hop_close } = parsed;
    answer.buf.drain(..used);

    let no_body = head.method.eq_ignore_ascii_case("HEAD") || status < 200 || status == 204 || status == 304;
    let framing = if no_body { AnswerFraming::Length(0) } else { framing };
    // An HTTP/1.0 client cannot read chunks: it gets the data, ended by the close.
    let dechunk = framing == AnswerFraming::Chunked && head.minor == 0;
    let close = close_after || dechunk || framing == AnswerFraming::UntilClose;

    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(format!("HTTP/1.{} {status} {reason}\r\n", head.minor).as_bytes());
    for (name, value) in &headers {
        let lower = name.to_ascii_lowercase();
        if lower == "connection" || lower == "keep-alive" || (dechunk && lower == "transfer-encoding") {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if head.minor == 0 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");

    let mut sink = ClientSink { client, out, ok: true };
    let complete = match framing {
        AnswerFraming::Length(n) => answer.copy_exact(n, &mut sink),
        AnswerFraming::Chunked => answer.copy_chunked(!dechunk, &mut sink),
        AnswerFraming::UntilClose => answer.copy_to_end(&mut sink).map(|()| false),
    };
    sink.flush();
    let complete = complete.unwrap_or(false);
    Ok(Relayed {
        hop_reusable: complete && !hop_close && answer.buf.is_empty(),
        client_ok: complete && sink.ok && !close,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnswerFraming {
    Length(u64),
    Chunked,
    UntilClose,
}

struct AnswerHead {
    status: u16,
    reason: String,
    headers: Vec<(String, Vec<u8>)>,
    used: usize,
    framing: AnswerFraming,
    hop_close: bool,
}

/// Collects the answer for the client, writing it out once it passes
/// [`BUFFER_ANSWER`]; after a failed write it only discards.
struct ClientSink<'a> {
    client: &'a TcpStream,
    out: Vec<u8>,
    ok: bool,
}

impl ClientSink<'_> {
    fn push(&mut self, bytes: &[u8]) {
        if !self.ok {
            return;
        }
        self.out.extend_from_slice(bytes);
        if self.out.len() >= BUFFER_ANSWER {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.ok && !self.out.is_empty() {
            self.ok = (&mut &*self.client).write_all(&self.out).is_ok();
        }
        self.out.clear();
    }
}

struct AnswerReader<'a> {
    hop: &'a HopStream,
    buf: Vec<u8>,
    /// Set while the connection is fresh: whom to kick when no answer comes.
    kicks: Option<&'a Hop>,
}

impl AnswerReader<'_> {
    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match (&mut &*self.hop).read(&mut chunk) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(n);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits for the first bytes of the answer, kicking tiny_http after each
    /// of [`KICKS`] on a fresh connection.
    fn first_bytes(&mut self) -> io::Result<()> {
        let Some(pool) = self.kicks.take() else { return Ok(()) };
        for wait in KICKS {
            self.hop.set_read_timeout(Some(wait))?;
            match self.fill() {
                Ok(_) => return self.hop.set_read_timeout(None),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    pool.kick()
                }
                Err(e) => return Err(e),
            }
        }
        self.hop.set_read_timeout(None)
    }

    fn read_head(&mut self) -> io::Result<AnswerHead> {
        self.first_bytes()?;
        loop {
            let mut slots = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut slots);
            match resp.parse(&self.buf) {
                Ok(httparse::Status::Complete(used)) => {
                    let mut framing = AnswerFraming::UntilClose;
                    let mut hop_close = false;
                    let mut headers = Vec::with_capacity(resp.headers.len());
                    for h in resp.headers.iter() {
                        let value = String::from_utf8_lossy(h.value);
                        if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            framing = AnswerFraming::Chunked;
                        } else if h.name.eq_ignore_ascii_case("content-length")
                            && framing != AnswerFraming::Chunked
                        {
                            let n = value.trim().parse().map_err(|_| bad_answer("Content-Length"))?;
                            framing = AnswerFraming::Length(n);
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            hop_close = value.to_ascii_lowercase().contains("close");
                        }
                        headers.push((h.name.to_owned(), h.value.to_vec()));
                    }
                    let status = resp.code.ok_or_else(|| bad_answer("status"))?;
                    let reason = resp.reason.unwrap_or("").to_owned();
                    return Ok(AnswerHead { status, reason, headers, used, framing, hop_close });
                }
                Ok(httparse::Status::Partial) if self.buf.len() <= MAX_ANSWER_HEAD => {
                    if self.fill()? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "no answer from the handler",
                        ));
                    }
                }
                _ => return Err(bad_answer("head")),
            }
        }
    }

    fn copy_exact(&mut self, n: u64, sink: &mut ClientSink<'_>) -> io::Result<bool> {
        let mut left = n;
        loop {
            let take = (self.buf.len() as u64).min(left) as usize;
            sink.push(&self.buf[..take]);
            self.buf.drain(..take);
            left -= take as u64;
            if left == 0 {
                return Ok(true);
            }
            if self.fill()? == 0 {
                return Ok(false);
            }
        }
    }

    /// Relays a chunked body: verbatim when `keep_chunks`, else the data only.
    fn copy_chunked(&mut self, keep_chunks: bool, sink: &mut ClientSink<'_>) -> io::Result<bool> {
        loop {
            let (used, size) = loop {
                match httparse::parse_chunk_size(&self.buf) {
                    Ok(httparse::Status::Complete(found)) => break found,
                    Ok(httparse::Status::Partial) => {
                        if self.fill()? == 0 {
                            return Ok(false);
                        }
                    }
                    Err(_) => return Err(bad_answer("chunk size")),
                }
            };
            if keep_chunks {
                sink.push(&self.buf[..used]);
            }
            self.buf.drain(..used);
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") else {
                        if self.fill()? == 0 {
                            return Ok(false);
                        }
                        continue;
                    };
                    if keep_chunks {
                        sink.push(&self.buf[..end + 2]);
                    }
                    self.buf.drain(..end + 2);
                    if end == 0 {
                        return Ok(true);
                    }
                }
            }
            let data_end = size.saturating_add(2);
            let mut left = data_end;
            while left > 0 {
                if self.buf.is_empty() && self.fill()? == 0 {
                    return Ok(false);
                }
                let take = (self.buf.len() as u64).min(left) as usize;
                // The chunk's data, then its CRLF (kept only with the chunks).
                let data = take.min(left.saturating_sub(2) as usize);
                sink.push(&self.buf[..if keep_chunks { take } else { data }]);
                self.buf.drain(..take);
                left -= take as u64;
            }
        }
    }

    fn copy_to_end(&mut self, sink: &mut ClientSink<'_>) -> io::Result<()> {
        loop {
            sink.push(&self.buf);
            self.buf.clear();
            if self.fill()? == 0 {
                return Ok(());
            }
        }
    }
}

fn bad_answer(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("the handler's answer has an invalid {what}"))
}
