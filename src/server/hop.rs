//! The hop between the guard and tiny_http, for requests with a body: a
//! private socket to an inner `tiny_http::Server`, kept-alive connections
//! over it, and the thread that hands what tiny_http parses to the request
//! pool.
//!
//! A request with a body is written again by the guard as HTTP/1.1 framed
//! by `Content-Length`, with one private header, its ticket (why: the module
//! docs of `server`, *Hand-off*). The answer never crosses back: the request
//! thread prints it into the connection's [`Reply`](super::reply::Reply) and
//! drops tiny_http's writer unused, so nothing on a hop connection is read by
//! the guard; a hop connection goes back to the pool only once its request
//! has been answered (tiny_http reads the next request only then).
//!
//! The ticket names, in process, what the guard knows of the request (its
//! client, its arrival, its reply), so no fact crosses as text. A client's
//! own `X-Watertight-*` headers are dropped before the hop, so it cannot
//! name another request's ticket.
//!
//! On Unix the inner server listens on a Unix socket in a directory only this
//! user can enter (mode 0700), so no other user can reach tiny_http around the
//! guard; elsewhere on a loopback TCP port.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::pool::{Handed, Incoming};
use crate::wire::{self, RequestHead};

#[cfg(unix)]
pub(super) type HopStream = std::os::unix::net::UnixStream;
#[cfg(not(unix))]
pub(super) type HopStream = std::net::TcpStream;

/// The prefix of the guard's private headers, removed from what clients send.
pub(super) const PRIVATE_PREFIX: &str = "x-watertight-";
/// The header that carries a request's ticket over the hop.
const TICKET_HEADER: &str = "X-Watertight-Ticket";
/// A request body up to this size is written to the hop before the guard
/// waits for its answer; it fits in the socket's buffer whatever the handler
/// does. A longer one is written from a scoped thread meanwhile.
pub(super) const INLINE_BODY: usize = 64 * 1024;
/// While a request written to a fresh hop connection has not been taken up
/// by tiny_http after each of these waits, the guard [kicks](Hop::kick)
/// tiny_http once more; after the last it just waits.
///
/// Why: tiny_http 0.12 hands each accepted connection to a task pool that
/// can lose a wake-up. Two connections arriving while one pool thread is
/// being woken both go to that thread's queue; the second then waits until
/// some thread finishes its connection, and hop connections are kept open.
/// A kick costs one connection opened and closed.
pub(super) const KICKS: [Duration; 3] =
    [Duration::from_millis(50), Duration::from_millis(200), Duration::from_millis(800)];

/// Where the inner server listens, and the kept-alive connections to it.
pub(super) struct Hop {
    #[cfg(unix)]
    addr: std::path::PathBuf,
    #[cfg(not(unix))]
    addr: std::net::SocketAddr,
    idle: Mutex<Vec<HopStream>>,
    max_idle: usize,
    /// Requests written to the hop and not yet taken up by tiny_http.
    tickets: Mutex<HashMap<u64, Incoming>>,
    next_ticket: AtomicU64,
    /// Written before each ticket and checked on the way back: where the hop
    /// is a loopback port (not Unix), another local process could write to
    /// it, but it cannot guess this.
    secret: u64,
}

impl Hop {
    /// Binds the private socket and starts tiny_http on it. The [`HopDir`]
    /// must outlive the server: tiny_http's `Drop` connects to the socket to
    /// wake its accept thread, then removes the socket's file.
    pub(super) fn bind(max_idle: usize) -> io::Result<(Hop, tiny_http::Server, HopDir)> {
        #[cfg(unix)]
        let (addr, server, dir) = {
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
            (path, server, HopDir(Some(dir)))
        };
        #[cfg(not(unix))]
        let (addr, server, dir) = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            let addr = listener.local_addr()?;
            let server = tiny_http::Server::from_listener(listener, None).map_err(io::Error::other)?;
            (addr, server, HopDir(None))
        };
        let (idle, tickets, next_ticket) = (Mutex::default(), Mutex::default(), AtomicU64::new(0));
        Ok((Hop { addr, idle, max_idle, tickets, next_ticket, secret: secret() }, server, dir))
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
        let stream = HopStream::connect(&self.addr)?;
        #[cfg(not(unix))]
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// Frees a tiny_http connection thread, so that a connection stuck in
    /// tiny_http's queue is taken up (see [`KICKS`]): a connection that closes
    /// at once ends the task of the thread that takes it, and that thread
    /// then takes the oldest queued one.
    pub(super) fn kick(&self) {
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

impl Hop {
    /// Keeps `incoming` (its request still to be built by tiny_http) under
    /// a new ticket, and returns the request as written to the hop: HTTP/1.1,
    /// kept alive, the body framed by its length, the ticket in its private
    /// header, and none of the client's private headers.
    pub(super) fn ticket(&self, incoming: Incoming, head: &RequestHead, body: &[u8]) -> Ticket<'_> {
        let id = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        self.tickets.lock().insert(id, incoming);
        let mut out = Vec::with_capacity(256 + body.len());
        out.extend_from_slice(format!("{} {} HTTP/1.1\r\n", head.method, head.target).as_bytes());
        wire::put_header(&mut out, TICKET_HEADER, format!("{:016x}{id:016x}", self.secret).as_bytes());
        for (name, value) in &head.headers {
            if !name.to_ascii_lowercase().starts_with(PRIVATE_PREFIX) {
                wire::put_header(&mut out, name, value.as_bytes());
            }
        }
        wire::put_header(&mut out, "Content-Length", body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        Ticket { hop: self, id, bytes: out }
    }

    /// The request kept under the ticket `value` (as the header carried
    /// it), taken off the list; `None` for a ticket this hop did not write.
    fn claim(&self, value: &str) -> Option<Incoming> {
        let (secret, id) = (value.get(..16)?, value.get(16..)?);
        if u64::from_str_radix(secret, 16).ok()? != self.secret || id.len() != 16 {
            return None;
        }
        self.tickets.lock().remove(&u64::from_str_radix(id, 16).ok()?)
    }
}

/// Whether tiny_http wrote to (or closed) a hop connection it was given a
/// request on: it does only to refuse the request, for the guard never reads
/// an answer there.
pub(super) fn answered_itself(stream: &HopStream) -> bool {
    use std::io::Read;
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let mut byte = [0u8; 1];
    let spoke = match (&*stream).read(&mut byte) {
        Ok(_) => true,
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    };
    spoke || stream.set_nonblocking(false).is_err()
}

/// A number no other process can guess: std's per-process random hash keys.
fn secret() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    hasher.finish()
}

/// A request kept for tiny_http to take up; dropped, it takes its request
/// off the list, so a request tiny_http never took is not kept for ever.
pub(super) struct Ticket<'a> {
    hop: &'a Hop,
    id: u64,
    /// The request as written to the hop.
    pub(super) bytes: Vec<u8>,
}

impl Ticket<'_> {
    /// tiny_http has not yet taken the request up.
    pub(super) fn pending(&self) -> bool {
        self.hop.tickets.lock().contains_key(&self.id)
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.hop.tickets.lock().remove(&self.id);
    }
}

/// The thread that takes what tiny_http parses off the hop and hands it,
/// with what its ticket names, to the request pool.
pub(super) struct Intake {
    inner: Arc<tiny_http::Server>,
    stopping: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl Intake {
    pub(super) fn start(
        hop: Arc<Hop>,
        inner: tiny_http::Server,
        to_pool: Sender<Handed>,
    ) -> io::Result<Intake> {
        let inner = Arc::new(inner);
        let stopping = Arc::new(AtomicBool::new(false));
        let join = {
            let (inner, stopping) = (Arc::clone(&inner), Arc::clone(&stopping));
            std::thread::Builder::new()
                .name("watertight-hop".to_owned())
                .spawn(move || intake(&hop, &inner, &stopping, &to_pool))?
        };
        Ok(Intake { inner, stopping, join: Some(join) })
    }

    pub(super) fn stop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        self.inner.unblock();
        if let Some(join) = self.join.take() {
            let _ = join.join();
        }
    }
}

impl Drop for Intake {
    fn drop(&mut self) {
        self.stop();
    }
}

fn intake(hop: &Hop, inner: &tiny_http::Server, stopping: &AtomicBool, to_pool: &Sender<Handed>) {
    loop {
        let request = match inner.recv() {
            Ok(request) => request,
            Err(e) => {
                if stopping.load(Ordering::Acquire) {
                    return;
                }
                log::warn!("guard: receiving from the hop failed: {e}");
                continue;
            }
        };
        let claimed = request
            .headers()
            .iter()
            .find(|h| h.field.equiv(TICKET_HEADER))
            .and_then(|h| hop.claim(h.value.as_str()));
        match claimed {
            Some(mut incoming) => {
                incoming.request = Some(request);
                if to_pool.send(Handed::Request(Box::new(incoming))).is_err() {
                    return;
                }
            }
            // The guard gave up on it already: nothing is written back.
            None => drop(request.into_writer()),
        }
    }
}
