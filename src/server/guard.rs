//! The guard's accept loop, its bounded set of connections, and its stop.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};

use super::config::ServerConfig;
use super::hop::Hop;
use super::pool::Handed;
use crate::wire::Refusal;

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
    /// The peer it counts against ([`peer_key`]); `None` for a trusted
    /// proxy, which is exempt from the per-peer cap.
    peer: Option<IpAddr>,
}

/// The open connections and the threads serving them, under one lock.
///
/// A connection thread serves one connection, then waits up to [`LINGER`]
/// for another (counted in `idle`) before it exits, so that a stream of
/// short connections costs no thread start each: the accept loop must keep up
/// with clients, or the listen backlog (128 for `std`'s listeners) overflows
/// and new connections wait a second for the client's SYN to be resent.
///
/// The accept loop hands a connection to an idle thread only by taking one
/// off `idle` and sending, both under this lock; a thread whose wait ran out
/// takes the lock, and exits only if no connection is waiting for it in the
/// channel. So a connection sent is always taken.
#[derive(Default)]
struct Threads {
    /// The open connections, by id; its length is the count the limit bounds.
    conns: HashMap<u64, Arc<Conn>>,
    /// Open connections by peer (those in `conns` whose `peer` is set), for
    /// the per-peer cap; a peer with none has no entry.
    peers: HashMap<IpAddr, usize>,
    /// Connection threads waiting for a connection.
    idle: usize,
    /// Connection threads alive, idle or not.
    alive: usize,
}

impl Threads {
    /// Registers `conn` under `id`, or says why not: the guard is at
    /// `max_connections`, or its peer at `max_connections_per_peer`.
    fn register(&mut self, id: u64, conn: &Arc<Conn>, cfg: &ServerConfig) -> Result<(), Refusal> {
        if self.conns.len() >= cfg.max_connections() {
            return Err(Refusal::BUSY);
        }
        if let Some(peer) = conn.peer {
            let open = self.peers.entry(peer).or_insert(0);
            if *open >= cfg.max_connections_per_peer() {
                return Err(Refusal::PEER_BUSY);
            }
            *open += 1;
        }
        self.conns.insert(id, Arc::clone(conn));
        Ok(())
    }

    /// Takes the connection `id` off the books, its peer's count with it.
    fn remove(&mut self, id: u64) -> Option<Arc<Conn>> {
        let conn = self.conns.remove(&id)?;
        if let Some(peer) = conn.peer
            && let Some(open) = self.peers.get_mut(&peer)
        {
            *open -= 1;
            if *open == 0 {
                self.peers.remove(&peer);
            }
        }
        Some(conn)
    }
}

/// The peer a connection from `ip` counts against: an IPv4 address (an
/// IPv4-mapped IPv6 one as such), or the /64 of an IPv6 address, which is
/// what one host is usually given.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((v6.to_bits() & (u128::MAX << 64)).into()),
        v4 => v4,
    }
}

/// How long a connection thread waits for another connection before it exits.
const LINGER: Duration = Duration::from_secs(1);

/// What the accept loop and every connection thread share.
pub(super) struct GuardShared {
    pub(super) cfg: ServerConfig,
    /// For requests with a body (see `hop.rs`).
    pub(super) hop: Arc<Hop>,
    /// Requests without a body go to the request pool straight.
    pub(super) to_pool: Sender<Handed>,
    /// Set by [`Guard::stop`]; read by the accept loop after each accept and
    /// by each connection before it waits for another request.
    pub(super) stopping: AtomicBool,
    /// Connections and connection threads; see [`Threads`].
    threads: Mutex<Threads>,
    /// Notified when a connection or a connection thread ends, for the stop's
    /// wait.
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
        cfg: ServerConfig,
        hop: Arc<Hop>,
        to_pool: Sender<Handed>,
        serve_conn: fn(&GuardShared, &Conn),
    ) -> io::Result<Guard> {
        let local = listener.local_addr()?;
        let shared = Arc::new(GuardShared {
            cfg,
            hop,
            to_pool,
            stopping: AtomicBool::new(false),
            threads: Mutex::new(Threads::default()),
            ended: Condvar::new(),
            next_id: AtomicU64::new(0),
        });
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("watertight-accept".to_owned())
                .spawn(move || accept_loop(&listener, &shared, serve_conn))?
            // The accept loop owns the hand-off channel's sender: when it
            // returns, idle connection threads see the channel closed and exit.
        };
        Ok(Guard { shared, local, accept: Some(accept) })
    }

    pub(super) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Open client connections.
    pub(super) fn connections(&self) -> usize {
        self.shared.threads.lock().conns.len()
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
        let mut threads = self.shared.threads.lock();
        for conn in threads.conns.values() {
            if conn.idle.load(Ordering::SeqCst) {
                let _ = conn.stream.shutdown(Shutdown::Read);
            }
        }
        while !threads.conns.is_empty() || threads.alive > 0 {
            self.shared.ended.wait(&mut threads);
        }
        drop(threads);
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
    let (handoff, waiting) = crossbeam_channel::unbounded::<(u64, Arc<Conn>)>();
    let mut backoff = Duration::ZERO;
    loop {
        let accepted = listener.accept();
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff = Duration::ZERO;
                accepted
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
        admit(stream, peer, shared, &handoff, &waiting, serve_conn);
    }
}

/// Registers `stream` and gives it to an idle connection thread or a new
/// one, or answers `503` and closes it when the guard or its peer is at its
/// limit (or no thread can be started). A trusted proxy's connections are
/// bounded by the guard's limit alone.
fn admit(
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<GuardShared>,
    handoff: &crossbeam_channel::Sender<(u64, Arc<Conn>)>,
    waiting: &crossbeam_channel::Receiver<(u64, Arc<Conn>)>,
    serve_conn: fn(&GuardShared, &Conn),
) {
    let _ = stream.set_nodelay(true);
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let peer = (!shared.cfg.trusted_proxies().contains(peer.ip())).then(|| peer_key(peer.ip()));
    let conn = Arc::new(Conn { stream, idle: AtomicBool::new(true), peer });
    let mut threads = shared.threads.lock();
    if let Err(refusal) = threads.register(id, &conn, &shared.cfg) {
        drop(threads);
        if let Ok(conn) = Arc::try_unwrap(conn) {
            refuse_busy(conn.stream, refusal);
        }
        return;
    }
    if threads.idle > 0 {
        threads.idle -= 1;
        // Cannot fail: the accept loop holds a receiver too.
        let _ = handoff.send((id, conn));
        return;
    }
    threads.alive += 1;
    drop(threads);
    let thread_shared = Arc::clone(shared);
    let waiting = waiting.clone();
    let first = Arc::clone(&conn);
    let spawned = std::thread::Builder::new()
        .name("watertight-conn".to_owned())
        .stack_size(CONN_STACK)
        .spawn(move || conn_thread(&thread_shared, (id, first), &waiting, serve_conn));
    if let Err(e) = spawned {
        log::warn!("guard: cannot start a connection thread ({e}); answering 503");
        let mut threads = shared.threads.lock();
        threads.remove(id);
        threads.alive -= 1;
        drop(threads);
        shared.ended.notify_all();
        if let Ok(conn) = Arc::try_unwrap(conn) {
            refuse_busy(conn.stream, Refusal::BUSY);
        }
    }
}

/// A connection thread: serves `first`, then every connection handed to it,
/// until none comes within [`LINGER`] or the accept loop has ended.
fn conn_thread(
    shared: &GuardShared,
    first: (u64, Arc<Conn>),
    waiting: &crossbeam_channel::Receiver<(u64, Arc<Conn>)>,
    serve_conn: fn(&GuardShared, &Conn),
) {
    let mut next = Some(first);
    while let Some((id, conn)) = next.take() {
        {
            // Deregisters even if serving panics (it does not; this is cheap).
            let _done = Deregister { shared, id };
            serve_conn(shared, &conn);
        }
        shared.threads.lock().idle += 1;
        next = match waiting.recv_timeout(LINGER) {
            Ok(handed) => Some(handed),
            Err(_) => {
                // Under the lock: a connection sent before it was taken is
                // served; otherwise this thread leaves the idle count.
                let mut threads = shared.threads.lock();
                match waiting.try_recv() {
                    Ok(handed) => Some(handed),
                    Err(_) => {
                        threads.idle -= 1;
                        None
                    }
                }
            }
        };
    }
    shared.threads.lock().alive -= 1;
    shared.ended.notify_all();
}

struct Deregister<'a> {
    shared: &'a GuardShared,
    id: u64,
}

impl Drop for Deregister<'_> {
    fn drop(&mut self) {
        let removed = self.shared.threads.lock().remove(self.id);
        // Close the socket now, not when the last `Arc` goes.
        if let Some(conn) = removed {
            let _ = conn.stream.shutdown(Shutdown::Both);
        }
        self.shared.ended.notify_all();
    }
}

/// A `503` written without waiting (the accept loop must not block on a
/// client), then the close.
fn refuse_busy(mut stream: TcpStream, refusal: Refusal) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(&refusal.bytes());
    let _ = stream.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::peer_key;
    use std::net::IpAddr;

    #[test]
    fn a_peer_is_an_ipv4_address_or_an_ipv6_64() {
        let key = |s: &str| peer_key(s.parse::<IpAddr>().unwrap()).to_string();
        assert_eq!(key("127.0.0.3"), "127.0.0.3");
        assert_eq!(key("::ffff:10.1.2.3"), "10.1.2.3");
        assert_eq!(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::");
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
    }
}
