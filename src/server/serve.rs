//! The crate's own server (feature `tiny_http`): [`serve`] behind the guard,
//! [`serve_unguarded`] without it, and the [`ServerHandle`] that stops it.
//! The module docs (`mod.rs`) tell what the guard does.

use std::fmt;
use std::io;
use std::net::TcpListener;
use std::sync::Arc;
use std::thread::JoinHandle;

use tiny_http::{Request, ResponseBox, Server};

use super::gate::{self, AttachedGauges};
use super::pool::{self, Shared, Source};
use super::{RequestContext, ServerConfig, conn, guard, hop};
use crate::registry::RequestPoolGauges;

/// Serves `listener` behind the guard with [`ServerConfig::default`], on
/// `threads` fixed request threads (at least one, `watertight-http-<i>`),
/// each taking the next request, calling `handler` with it and its
/// [`RequestContext`] (the request's deadline, its client, the pool's state),
/// and sending back the response the handler returned.
///
/// A malformed `X-Request-Timeout` is answered `400` (JSON) without calling
/// the handler; a panic in it `500 {"code":"INTERNAL_ERROR",...}`. The
/// handler may read the request's body (`request.as_reader()`; the guard has
/// read it whole) but must not respond itself.
///
/// # Errors
///
/// If a thread cannot be started or the private socket to tiny_http cannot be
/// bound; every thread already started is stopped first.
pub fn serve<H>(listener: TcpListener, threads: usize, handler: H) -> io::Result<ServerHandle>
where
    H: Fn(&mut Request, &RequestContext) -> ResponseBox + Send + Sync + 'static,
{
    serve_with(listener, threads, ServerConfig::default(), handler)
}

/// [`serve`] with the server's settings given (the guard's, the request
/// budget, the trusted proxies, and the [`registry`](ServerConfig::registry)
/// that carries the request pool's gauges while it runs).
///
/// # Errors
///
/// As [`serve`]; before anything starts, `InvalidInput` and `AlreadyExists`
/// as for [`RequestPool::new`](super::RequestPool::new).
pub fn serve_with<H>(
    listener: TcpListener,
    threads: usize,
    guard: ServerConfig,
    handler: H,
) -> io::Result<ServerHandle>
where
    H: Fn(&mut Request, &RequestContext) -> ResponseBox + Send + Sync + 'static,
{
    let threads = threads.max(1);
    // First, as it is the one check that needs nothing started: dropping
    // `gauges` on any error below detaches them again.
    let (room, counts, gauges) = gate::open(&guard, threads, pool::max_wait(&guard))?;
    let (hop, inner, hop_dir) = hop::Hop::bind(guard.max_connections())?;
    let hop = Arc::new(hop);
    let (source, to_pool) = Source::guard();
    let (shared, joins) = pool::start(source, room, counts, &guard, Box::new(handler), pool::spawn_named)?;
    let mut handle = ServerHandle {
        shared,
        joins,
        threads,
        guard: None,
        intake: None,
        _gauges: gauges,
        _hop_dir: Some(hop_dir),
    };
    // Dropping the handle on an error stops whatever was started.
    handle.intake = Some(hop::Intake::start(Arc::clone(&hop), inner, to_pool.clone())?);
    handle.guard = Some(guard::Guard::start(listener, guard, hop, to_pool, conn::serve_conn)?);
    Ok(handle)
}

/// Serves `server` on `threads` request threads *without* the guard: tiny_http
/// 0.12 reads from the clients itself, with the limits listed in the
/// [module docs](super). For comparison, or behind a proxy that buffers
/// requests and caps their bodies. Of `config`, only the request budget,
/// the [`reserve`](ServerConfig::reserve), the
/// [trusted proxies](ServerConfig::trusted_proxies) and the
/// [`registry`](ServerConfig::registry) apply.
///
/// Every request is taken as coming straight from a client: its
/// [`peer_addr`](RequestContext::peer_addr) is the TCP peer and its
/// [`received`](RequestContext::received) the moment a request thread took
/// it, so a client can choose neither. `X-Watertight-*` headers are ignored
/// by the crate (the handler still sees them, the client's word).
///
/// # Errors
///
/// If a thread cannot be started; every thread already started is stopped
/// first. `InvalidInput` and `AlreadyExists` as in [`serve_with`].
pub fn serve_unguarded<H>(
    server: Server,
    threads: usize,
    config: ServerConfig,
    handler: H,
) -> io::Result<ServerHandle>
where
    H: Fn(&mut Request, &RequestContext) -> ResponseBox + Send + Sync + 'static,
{
    let threads = threads.max(1);
    let (room, counts, gauges) = gate::open(&config, threads, pool::max_wait(&config))?;
    let source = Source::Clients(server);
    let (shared, joins) = pool::start(source, room, counts, &config, Box::new(handler), pool::spawn_named)?;
    Ok(ServerHandle { shared, joins, threads, guard: None, intake: None, _gauges: gauges, _hop_dir: None })
}

/// The running request pool returned by [`serve`].
///
/// Dropping the handle shuts the pool down as [`ServerHandle::shutdown`]
/// does; keep it alive for as long as the server should run.
pub struct ServerHandle {
    shared: Arc<Shared>,
    joins: Vec<JoinHandle<()>>,
    threads: usize,
    guard: Option<guard::Guard>,
    /// The thread that takes requests with a body off the hop.
    intake: Option<hop::Intake>,
    /// The gauges attached to the config's registry; detached when the
    /// handle drops, after the threads have stopped.
    _gauges: Option<AttachedGauges>,
    /// Last, so that it drops after `intake` (which owns the inner tiny_http
    /// server).
    _hop_dir: Option<hop::HopDir>,
}

impl ServerHandle {
    /// Requests being handled right now (a thread is on them, not yet
    /// answered). At most [`threads`](ServerHandle::threads); at most
    /// `threads - reserved_threads` of them ordinary.
    pub fn busy(&self) -> usize {
        self.shared.counts.gauges.busy()
    }

    /// The number of request threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The request threads ordinary requests can never take (the
    /// [reserve](ServerConfig::reserve)'s threads; 0 without one).
    pub fn reserved_threads(&self) -> usize {
        self.shared.reserve.as_ref().map_or(0, |r| r.share.threads)
    }

    /// Reserved requests being handled right now, on any thread (part of
    /// [`busy`](Self::busy)).
    pub fn reserved_busy(&self) -> usize {
        self.shared.counts.gauges.reserved_busy()
    }

    /// Ordinary requests taken by a free thread that wait for an ordinary
    /// thread, because every thread but the reserved ones is busy with one.
    /// Requests no thread has taken yet are not counted.
    pub fn waiting(&self) -> usize {
        self.shared.counts.gauges.waiting()
    }

    /// The request pool's gauges, a handle that outlives this borrow (for a
    /// metrics exporter, say), which also puts the reserve in shadow and
    /// back ([`RequestPoolGauges::set_reserve_shadow`]).
    pub fn request_pool(&self) -> RequestPoolGauges {
        self.shared.counts.gauges.clone()
    }

    /// The address the server listens on (`to_ip()` gives the socket address
    /// of a TCP server, e.g. one bound to port 0).
    pub fn addr(&self) -> tiny_http::ListenAddr {
        match &self.guard {
            Some(guard) => tiny_http::ListenAddr::IP(guard.local_addr()),
            None => self.shared.server_addr().expect("an unguarded pool serves its own server"),
        }
    }

    /// Client connections open at the guard right now (0 without the guard).
    pub fn connections(&self) -> usize {
        self.guard.as_ref().map_or(0, guard::Guard::connections)
    }

    /// Stops taking requests and waits for every request thread to finish the
    /// request it is handling and exit (behind the guard, as the [module
    /// docs](super)' *Stopping* says, answered with `Connection: close`;
    /// without it, requests tiny_http already received are answered first).
    /// A handler that never returns keeps this waiting: bound its work (that
    /// is what a [`Dependency`](crate::Dependency)'s deadline is for).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        // The guard first: it finishes the requests it has read, which the
        // request threads answer; only then do those threads stop.
        if let Some(mut guard) = self.guard.take() {
            guard.stop();
        }
        if let Some(mut intake) = self.intake.take() {
            intake.stop();
        }
        pool::stop(&self.shared, &mut self.joins);
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if !self.joins.is_empty() || self.guard.is_some() {
            self.stop();
        }
    }
}

impl fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerHandle")
            .field("addr", &self.addr())
            .field("threads", &self.threads)
            .field("busy", &self.busy())
            .finish()
    }
}
