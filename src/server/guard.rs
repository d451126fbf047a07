//! The guard's accept loop, its bounded set of connections, and its stop.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::config::GuardConfig;
use super::hop::Hop;
use super::wire::Refusal;

/// Stack of a connection thread: it parses with fixed arrays of at most a
/// hundred headers and keeps its buffers on the heap.
const CONN_STACK: usize = 256 * 1024;
/// The longest pause of the accept loop after an accept error.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// One open client connection, as the guard's stop sees it.
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    /// Waiting for the first byte of a request (nothing half-read, nothing in
    /// flight): the stop may close it at once.
    pub(super) idle: AtomicBool,
}

/// What the accept loop and every connection thread share.
pub(super) struct GuardShared {
    pub(super) cfg: GuardConfig,
    pub(super) hop: Hop,
    /// Set by [`Guard::stop`]; read by the accept loop after each accept and
    /// by each connection before it waits for another request.
    pub(super) stopping: AtomicBool,
    /// The open connections, by id; its length is the count the limit bounds.
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    /// Notified when a connection ends, for the stop's wait.
    ended: Condvar,
    next_id: AtomicU64,
}

impl GuardShared {
    /// Marks `conn` idle, and says whether it must close instead of waiting
    /// for another request (the guard is stopping).
    ///
    /// `idle` is stored before `stopping` is read, and the stop stores
    /// `stopping` before it reads each `idle` (both `SeqCst`): so either this
    /// sees `stopping`, or the stop sees `idle` and shuts the socket's read
    /// side, which ends the wait.
    pub(super) fn go_idle(&self, conn: &Conn) -> bool {
        conn.idle.store(true, Ordering::SeqCst);
        self.stopping.load(Ordering::SeqCst)
    }
}

/// The running guard: owns the listener and its accept thread.
pub(super) struct Guard {
    shared: Arc<GuardShared>,
    local: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl Guard {
    /// Starts the accept loop on `listener`; each connection is served by
    /// `serve_conn` on a thread of its own.
    pub(super) fn start(
        listener: TcpListener,
        cfg: GuardConfig,
        hop: Hop,
        serve_conn: fn(&GuardShared, &Conn),
    ) -> io::Result<Guard> {
        let local = listener.local_addr()?;
        let shared = Arc::new(GuardShared {
            cfg,
            hop,
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            ended: Condvar::new(),
            next_id: AtomicU64::new(0),
        });
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("watertight-accept".to_owned())
                .spawn(move || accept_loop(&listener, &shared, serve_conn))?
        };
        Ok(Guard { shared, local, accept: Some(accept) })
    }

    pub(super) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Open client connections.
    pub(super) fn connections(&self) -> usize {
        self.shared.conns.lock().len()
    }

    /// Stops accepting, closes idle connections, and waits for the others to
    /// finish the request they are on (each is bounded by the read timeouts
    /// and by the handler). Then closes the hop's kept connections.
    pub(super) fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            // `accept` blocks: one connection of our own wakes it, and it sees
            // `stopping`. If even that fails the thread is left to exit on the
            // next connection, rather than this stop waiting for ever.
            match TcpStream::connect_timeout(&wake_addr(self.local), Duration::from_secs(1)) {
                Ok(_) => {
                    let _ = accept.join();
                }
                Err(e) => log::warn!("guard: could not wake the accept loop ({e}); leaving it behind"),
            }
        }
        let mut conns = self.shared.conns.lock();
        for conn in conns.values() {
            if conn.idle.load(Ordering::SeqCst) {
                let _ = conn.stream.shutdown(Shutdown::Read);
            }
        }
        while !conns.is_empty() {
            self.shared.ended.wait(&mut conns);
        }
        drop(conns);
        self.shared.hop.close_idle();
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.accept.is_some() {
            self.stop();
        }
    }
}

/// The address to connect to in order to reach `local` (a listener on an
/// unspecified address is reached on loopback).
fn wake_addr(local: SocketAddr) -> SocketAddr {
    let mut addr = local;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    addr
}

fn accept_loop(listener: &TcpListener, shared: &Arc<GuardShared>, serve_conn: fn(&GuardShared, &Conn)) {
    let mut backoff = Duration::ZERO;
    loop {
        let accepted = listener.accept();
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff = Duration::ZERO;
                stream
            }
            Err(e) => {
                // Out of descriptors or memory, or a connection that died
                // before it was taken: none of it ends the loop. A pause
                // that doubles up to a second keeps a persistent error (EMFILE)
                // from spinning while connections close and free descriptors.
                backoff = (backoff * 2).clamp(Duration::from_millis(5), MAX_BACKOFF);
                log::warn!("guard: accept failed: {e}; retrying in {backoff:?}");
                std::thread::sleep(backoff);
                continue;
            }
        };
        admit(stream, shared, serve_conn);
    }
}

/// Registers `stream` and starts its thread, or answers `503` and closes it
/// when the guard is at its limit (or cannot start a thread).
fn admit(stream: TcpStream, shared: &Arc<GuardShared>, serve_conn: fn(&GuardShared, &Conn)) {
    let _ = stream.set_nodelay(true);
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let conn = {
        let mut conns = shared.conns.lock();
        if conns.len() >= shared.cfg.max_connections() {
            drop(conns);
            refuse_busy(stream);
            return;
        }
        let conn = Arc::new(Conn { stream, idle: AtomicBool::new(true) });
        conns.insert(id, Arc::clone(&conn));
        conn
    };
    let thread_shared = Arc::clone(shared);
    let thread_conn = Arc::clone(&conn);
    let spawned = std::thread::Builder::new().name("watertight-conn".to_owned()).stack_size(CONN_STACK).spawn(
        move || {
            // Deregisters even if serving panics (it does not; this is cheap).
            let _done = Deregister { shared: &thread_shared, id };
            serve_conn(&thread_shared, &thread_conn);
        },
    );
    if let Err(e) = spawned {
        log::warn!("guard: cannot start a connection thread ({e}); answering 503");
        shared.conns.lock().remove(&id);
        shared.ended.notify_all();
        if let Ok(conn) = Arc::try_unwrap(conn) {
            refuse_busy(conn.stream);
        }
    }
}

struct Deregister<'a> {
    shared: &'a GuardShared,
    id: u64,
}

impl Drop for Deregister<'_> {
    fn drop(&mut self) {
        let removed = self.shared.conns.lock().remove(&self.id);
        // Close the socket now, not when the last `Arc` goes.
        if let Some(conn) = removed {
            let _ = conn.stream.shutdown(Shutdown::Both);
        }
        self.shared.ended.notify_all();
    }
}

/// A `503` written without waiting (the accept loop must not block on a
/// client), then the close.
fn refuse_busy(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&Refusal::BUSY.bytes());
    let _ = stream.shutdown(Shutdown::Write);
}
