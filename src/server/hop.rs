//! The hop between the guard and tiny_http: a private socket to an inner
//! `tiny_http::Server`, a pool of kept-alive connections over it, and the
//! relay of each answer back to the client.
//!
//! On Unix the inner server listens on a Unix socket in a directory only this
//! user can enter (mode 0700), so no other user can reach tiny_http around the
//! guard; elsewhere on a loopback TCP port.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::request;
use crate::wire::{self, BodyDecoder, Framing, Limits, RequestHead, ResponseHead};

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

/// The request as the guard passes it on: HTTP/1.1, kept alive, the body
/// framed by its length, with the client's address and the request's
/// arrival in the guard's private headers (see [`request`]). A client's own
/// private headers are dropped, so it cannot choose its address or arrival.
pub(super) fn forwarded(
    head: &RequestHead,
    body: &[u8],
    peer: Option<SocketAddr>,
    received: Instant,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(format!("{} {} HTTP/1.1\r\n", head.method, head.target).as_bytes());
    if let Some(peer) = peer {
        wire::put_header(&mut out, request::PEER_HEADER, peer.to_string().as_bytes());
    }
    wire::put_header(&mut out, request::RECEIVED_HEADER, request::encode_instant(received).as_bytes());
    for (name, value) in &head.headers {
        if !name.to_ascii_lowercase().starts_with(request::PRIVATE_PREFIX) {
            wire::put_header(&mut out, name, value.as_bytes());
        }
    }
    if head.framing != Framing::None {
        wire::put_header(&mut out, "Content-Length", body.len().to_string().as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// What became of one exchange.
pub(super) struct Relayed {
    /// The hop connection can carry the next request.
    pub(super) hop_reusable: bool,
    /// The client got the whole answer and may send another request.
    pub(super) client_ok: bool,
}

/// Sends `request` (a head and its body, from [`forwarded`]) over `hop`,
/// and relays the answer to `client`, framed for the client's HTTP version.
/// `Err` when no valid answer head came back (nothing was sent to the client).
pub(super) fn exchange(
    pool: &Hop,
    hop: &mut HopStream,
    fresh: bool,
    request: &[u8],
    head: &RequestHead,
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
    let relay = parsed.relay(head, close_after);
    let stream = parsed.headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case("content-type") && value.starts_with(b"text/event-stream")
    });
    let mut sink = ClientSink { client, out: relay.head, ok: true, stream: stream.then_some(answer.hop) };
    // Verbatim, but for an HTTP/1.0 client a chunked body's data only.
    let verbatim = !relay.dechunk;
    let fill = |buf: &mut Vec<u8>| wire::read_some(answer.hop, buf);
    let push = |used: &[u8], data: &[u8]| sink.push(if verbatim { used } else { data });
    let complete = BodyDecoder::new(relay.framing, Limits::NONE).drive(&mut answer.buf, fill, push);
    sink.flush();
    // An answer until the close is never complete: the hop is spent.
    let complete = complete.unwrap_or(false);
    Ok(Relayed {
        hop_reusable: complete && !parsed.close && answer.buf.is_empty(),
        client_ok: complete && sink.ok && !relay.close,
    })
}

/// Collects the answer for the client, writing it out once it passes
/// [`BUFFER_ANSWER`]; after a failed write it only discards.
///
/// An event stream (`Content-Type: text/event-stream`) is written out as it
/// comes off the hop instead, each piece at once; and once a write to its
/// client fails, the hop is shut down, so that the handler's next write fails
/// and its request thread is freed instead of writing to nobody.
struct ClientSink<'a> {
    client: &'a TcpStream,
    out: Vec<u8>,
    ok: bool,
    /// The hop of an event stream.
    stream: Option<&'a HopStream>,
}

impl ClientSink<'_> {
    fn push(&mut self, bytes: &[u8]) {
        if !self.ok {
            return;
        }
        self.out.extend_from_slice(bytes);
        if self.out.len() >= BUFFER_ANSWER || self.stream.is_some() {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.ok && !self.out.is_empty() {
            self.ok = (&mut &*self.client).write_all(&self.out).is_ok();
            if let (false, Some(hop)) = (self.ok, self.stream) {
                let _ = hop.shutdown(std::net::Shutdown::Both);
            }
        }
        self.out.clear();
    }
}

/// The hop's side of one answer: the bytes read off it and not yet used.
struct AnswerReader<'a> {
    hop: &'a HopStream,
    buf: Vec<u8>,
    /// Set while the connection is fresh: whom to kick when no answer comes.
    kicks: Option<&'a Hop>,
}

impl AnswerReader<'_> {
    fn fill(&mut self) -> io::Result<usize> {
        wire::read_some(self.hop, &mut self.buf)
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

    /// Reads the answer head, and takes it off the buffer.
    fn read_head(&mut self) -> io::Result<ResponseHead> {
        self.first_bytes()?;
        loop {
            match wire::parse_response(&self.buf, MAX_ANSWER_HEAD) {
                Ok(Some((head, used))) => {
                    self.buf.drain(..used);
                    return Ok(head);
                }
                Ok(None) => {
                    if self.fill()? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "no answer from the handler",
                        ));
                    }
                }
                Err(what) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the handler's answer has an invalid {what}"),
                    ));
                }
            }
        }
    }
}
