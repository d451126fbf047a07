//! A fixed request pool serving tiny_http, behind a guard that owns the edge
//! (feature `tiny_http`).
//!
//! This is the *shared* pool of a thread-per-request server: every route is
//! answered by one of its `threads` threads, named `watertight-http-<i>`, and
//! a request holds its thread until the handler returns. That is exactly the
//! resource a hung provider exhausts in the incident the crate answers,
//! so the pool is fixed and its occupancy is observable through
//! [`ServerHandle::busy`]: put every dependency behind a
//! [`Dependency`](crate::Dependency) and this pool keeps room for the routes
//! that do not call it. Where the dependencies' holds together can still
//! fill it, a [`Reserve`] ([`ServerConfigBuilder::reserve`]) keeps a few of
//! its threads for the routes you name, liveness say, that ordinary requests
//! can never take.
//!
//! ```no_run
//! let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let handle = watertight::server::serve(listener, 16, |_req: &mut tiny_http::Request, _ctx: &_| {
//!     tiny_http::Response::from_string("hello").boxed()
//! })?;
//! println!("listening on {:?}, {} threads", handle.addr(), handle.threads());
//! handle.shutdown();
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # A whole service
//!
//! The core of `examples/quote.rs`: a guarded request pool whose handler
//! calls two dependencies within the request's budget, falls back on the
//! second and says why, and serves `/metrics`, where the registry given to
//! [`ServerConfigBuilder::registry`] adds the request pool's own gauges.
//!
//! ```
//! # #[cfg(all(feature = "prometheus", feature = "ureq"))]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use watertight::server::{RequestContext, ServerConfig, serve_with};
//! use watertight::tiny_http::{Request, Response, ResponseBox};
//! use watertight::{Dependency, Registry, metrics};
//!
//! let inventory = Dependency::builder("inventory").workers(3).timeout(Duration::from_millis(300)).build()?;
//! let pricing = Dependency::builder("pricing").workers(3).timeout(Duration::from_millis(100)).build()?;
//! let registry = Registry::new();
//! registry.register(inventory.clone())?;
//! registry.register(pricing.clone())?;
//! let config = ServerConfig::builder().request_budget(Duration::from_secs(1)).registry(&registry).build()?;
//!
//! let handler = move |req: &mut Request, ctx: &RequestContext| -> ResponseBox {
//!     if req.url() == "/metrics" {
//!         return Response::from_string(metrics::encode_text(&registry)).boxed();
//!     }
//!     // Every call ends by the request's deadline; inventory is required.
//!     let stock = inventory.with().deadline(ctx.deadline()).call(|_| Ok::<_, std::io::Error>(true));
//!     if let Err(e) = stock {
//!         return Response::from_string(format!("no quote: {}", e.outcome())).with_status_code(503).boxed();
//!     }
//!     // Pricing hangs here: the quote falls back to the list price and says why.
//!     let price = pricing.with().deadline(ctx.deadline()).call(|ctx| {
//!         std::thread::sleep(ctx.remaining() + Duration::from_millis(50));
//!         Ok::<_, std::io::Error>(1799)
//!     });
//!     match price {
//!         Ok(cents) => Response::from_string(format!("{cents} from pricing")).boxed(),
//!         Err(e) => Response::from_string(format!("1999, list price: {}", e.outcome())).boxed(),
//!     }
//! };
//!
//! let server = serve_with(std::net::TcpListener::bind("127.0.0.1:0")?, 8, config, handler)?;
//! let url = format!("http://{}", server.addr().to_ip().expect("a TCP address"));
//! let quote = ureq::get(format!("{url}/quote/sku-1")).call()?.body_mut().read_to_string()?;
//! assert_eq!(quote, "1999, list price: timed_out");
//! let text = ureq::get(format!("{url}/metrics")).call()?.body_mut().read_to_string()?;
//! assert!(text.contains(r#"watertight_calls_total{dependency="pricing",kind="timed_out"} 1"#));
//! assert!(text.contains("\nwatertight_request_pool_threads 8\n"));
//! server.shutdown();
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "prometheus", feature = "ureq")))]
//! # fn main() {}
//! ```
//!
//! A handler that panics does not take its thread with it: the panic is
//! caught, the client gets a `500` with a JSON body, and the thread goes back
//! to serving.
//!
//! # The guard
//!
//! A slow or hostile client can cost a guard thread (and a request thread at
//! most `write_timeout` for each piece of a long answer), never the process.
//! [`serve`] puts a guard between the clients and tiny_http (settings in
//! [`ServerConfig`]; [`serve_with`] takes your own):
//!
//! ```text
//! client ──TCP──► accept thread ──► connection thread ──in process──► request thread
//!                 (watertight-accept) (watertight-conn, one    (no body)   (watertight-http-<i>,
//!                 503 past the limit   per connection, bounded) ──hop──►    the handler)
//!                                                  (a body: tiny_http on a private socket)
//! ```
//!
//! - **Accepting.** The guard owns the `TcpListener` and its accept thread. An
//!   accept error (out of descriptors, say) is logged and retried after a
//!   pause that doubles from 5 ms up to 1 s; the loop never ends on one.
//! - **Bounds.** At most [`max_connections`](ServerConfig::max_connections)
//!   connections are open, each on one `watertight-conn` thread; past it a new
//!   connection gets `503` (JSON, `Connection: close`) and is closed. No peer
//!   holds more than
//!   [`max_connections_per_peer`](ServerConfig::max_connections_per_peer) of
//!   them (a quarter by default): the accept thread counts the open
//!   connections of each peer (an IPv4 address, or an IPv6 /64) under the
//!   same lock as the total, and a connection past its peer's count gets the
//!   same `503` at once; a connection's end takes it off both counts. A
//!   [trusted proxy](ServerConfig::trusted_proxies) stands for many clients
//!   and is counted in the total only.
//! - **Reading.** The connection thread reads the request head with `httparse`
//!   within [`head_timeout`](ServerConfig::head_timeout) of its first byte, and
//!   the body within [`body_timeout`](ServerConfig::body_timeout) of the end of
//!   the head. A new connection waits
//!   [`first_byte_timeout`](ServerConfig::first_byte_timeout) for the first
//!   byte of its first request, and a kept-alive one
//!   [`idle_timeout`](ServerConfig::idle_timeout) between requests; then it
//!   closes, without an answer. Every read is bounded by what is left of its step's time, so a
//!   byte now and then does not extend it. A late head or body gets `408`.
//! - **Caps.** A head over [`max_head_bytes`](ServerConfig::max_head_bytes) (or
//!   with over 100 headers) gets `431`. A declared `Content-Length` over
//!   [`max_body_bytes`](ServerConfig::max_body_bytes) gets `413` before a byte
//!   of the body is read; a chunked body gets `413` as soon as its chunks pass
//!   the cap. A `Transfer-Encoding` other than `chunked` gets `501`, an
//!   `Expect` other than `100-continue` `417`, a malformed head, both
//!   `Content-Length` and `Transfer-Encoding`, or a header value that is not
//!   ASCII `400`. Every such answer is JSON `{"code", "message"}`, and the
//!   connection is closed after it: the guard stops writing, reads and drops
//!   what the client still sends for at most 1 s and 256 KiB (so that the close
//!   does not reset the connection before the answer is read), and closes.
//! - **Hand-off.** Only a complete head with its whole body, within the caps,
//!   goes on. A request without a body goes to the request pool in process, as
//!   a `tiny_http::Request` the guard builds (`Request::remote_addr` is the
//!   client's TCP peer). One with a body is written again, as HTTP/1.1 with the
//!   body framed by `Content-Length` (a chunked body arrives de-chunked;
//!   `Connection`, `Keep-Alive`, `TE`, `Trailer`, `Expect` and
//!   `Transfer-Encoding` are the guard's and are not passed on), over a
//!   kept-alive connection to an inner `tiny_http::Server` on a private socket
//!   (a Unix socket in a directory of mode 0700; loopback TCP where there is
//!   none), because tiny_http hands a handler a body only from a socket it
//!   reads itself; there `Request::remote_addr` is `None`
//!   ([`RequestContext::peer_addr`] has the client either way). So each
//!   request is parsed once by the guard, and a request with a body a second
//!   time by tiny_http, from bytes the guard wrote.
//! - **Answering.** The request thread prints the handler's response itself,
//!   with tiny_http's own printer, for the client's HTTP version, and passes
//!   the bytes back in process to the client's connection thread, which
//!   writes them within [`write_timeout`](ServerConfig::write_timeout) per
//!   write and never parses them: each answer is framed once, by one party,
//!   and travels only on its own client's connection. Answers up to 256 KiB
//!   reach the connection thread whole, so the request thread never waits on
//!   a slow reader. Nothing is ever read back from the hop, and a hop
//!   connection is reused only once its request has been answered. An event
//!   stream (`Content-Type: text/event-stream`) goes on piece by piece as
//!   tiny_http's chunked encoder writes it (in chunks of up to 8 KiB); to an
//!   HTTP/1.0 client, which has no chunks, the guard prints it itself, piece by
//!   piece as the body is read, ended by the close (`Connection: close`, no
//!   `Content-Length`), where tiny_http would read it whole first. While the
//!   guard waits for a stream's next piece it peeks at the client's socket
//!   every 100 ms; a client that has closed it (or reset it) ends the stream,
//!   and the handler's next write fails, so its request thread is free at the
//!   next event. (A client that half-closes its side while it still reads a
//!   stream is taken for gone, as nginx does.) The guard waits at most
//!   [`answer_timeout`](ServerConfig::answer_timeout) for the answer and for
//!   each next piece (then `504`, or the close). An answer whose framing is
//!   in doubt (a body shorter than its length, a failing reader, a 1xx
//!   status) ends with the close; a header with a control byte in it, which
//!   would end the head early, is answered `500` instead. Keep-alive works as
//!   the client asks. A request thread waits at most `write_timeout` for its
//!   client to take each next piece of a long answer.
//! - **Stopping.** [`ServerHandle::shutdown`] stops the accept loop, closes the
//!   connections waiting for a request, lets every other connection finish the
//!   request it is on (closing after its answer), then stops the request
//!   threads once every request they were given is answered.
//!
//! Threads: one accept thread; at most `max_connections` connection threads
//! serving connections, each of which waits a second for another connection
//! before it exits (a stream of short connections costs no thread start
//! each, and the accept loop keeps up with the listen backlog); one thread
//! (`watertight-hop`) taking what tiny_http parses off the hop; tiny_http's
//! accept thread, and one tiny_http thread per hop connection. Hop
//! connections are opened as requests with a body need them and kept open.
//! Keeping them open works around a lost wake-up in tiny_http 0.12's task
//! pool, and a request on a fresh one that tiny_http does not take up soon
//! opens and closes one more connection to free a tiny_http thread.
//!
//! [`serve_unguarded`] serves a `tiny_http::Server` of your own without the
//! guard, for comparison or behind a proxy. tiny_http 0.12 alone then shows
//! its limits: no read timeouts (a trickled body holds a request thread), a
//! declared body it drains into a buffer of the declared size (a request that
//! declares `Content-Length: 1000000000000` aborts the process once
//! answered), no cap on the head, an accept loop that ends for good on the
//! first accept error, one thread per connection without a limit, and the
//! lost wake-up above, by which a new connection can wait seconds for a
//! thread. A request's client and arrival come from its TCP connection and
//! its request thread.

mod admission;
mod answer;
mod client;
mod config;
mod conn;
mod gate;
mod guard;
mod hop;
mod pool;
mod proxy;
mod request;

pub use crate::reserve::Reserve;
pub use config::{ServerConfig, ServerConfigBuilder};
pub use gate::{EnterError, Entered, RequestPool};
pub use proxy::{ClientAddr, TrustedProxies};
pub use request::RequestContext;

use std::fmt;
use std::io;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use tiny_http::{Request, ResponseBox, Server};

use gate::{AttachedGauges, attach_gauges, check_reserve_of};
use pool::{Shared, Source};

/// Serves `listener` behind the guard with [`ServerConfig::default`], on
/// `threads` fixed request threads (at least one), each taking the next
/// request, calling `handler` with it and its [`RequestContext`] (the
/// request's deadline, its client, the pool's state), and sending back the
/// response the handler returned.
///
/// A malformed `X-Request-Timeout` is answered `400` (JSON) by the pool
/// itself; the handler is not called.
///
/// The threads are named `watertight-http-<i>`, `i` from 0. A panic in the
/// handler is caught and answered with `500 {"code":"INTERNAL_ERROR",...}`;
/// the thread survives and takes the next request. The handler may read the
/// request's body (`request.as_reader()`; the guard has read it whole) but must
/// not respond itself: the pool sends what it returns.
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
/// As [`serve`]; `InvalidInput` if the config's [`reserve`](ServerConfig::reserve)
/// leaves no thread for ordinary requests (the error's inner error is the
/// [`ConfigError`](crate::ConfigError), field `reserve.threads`), before
/// anything starts; and `AlreadyExists` if the config's registry already
/// carries the gauges of another running request pool.
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
    check_reserve_of(&guard, threads)?;
    // First, as it is the one check that needs nothing started: dropping
    // `gauges` on any error below detaches them again.
    let (counts, gauges) = attach_gauges(&guard, threads)?;
    let (hop, inner, hop_dir) = hop::Hop::bind(guard.max_connections())?;
    let hop = Arc::new(hop);
    let (source, to_pool) = Source::guard();
    let (shared, joins) = pool::start(source, threads, &guard, counts, Box::new(handler), pool::spawn_named)?;
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
/// [module docs](self). For comparison, or behind a proxy that buffers
/// requests and caps their bodies. Of `config`, only the request budget,
/// the [`reserve`](ServerConfig::reserve), the
/// [trusted proxies](ServerConfig::trusted_proxies) and the
/// [`registry`](ServerConfig::registry) apply.
///
/// Every request is taken as coming straight from a client. Its
/// [`RequestContext`] has the TCP peer (`Request::remote_addr`) as its
/// [`peer_addr`](RequestContext::peer_addr), and the moment a request thread
/// took it as its [`received`](RequestContext::received), from which the
/// deadline runs: a client cannot choose its address or its arrival. Any
/// `X-Watertight-*` header a client sends is ignored by the crate (the
/// handler still sees it in `request.headers()`: the client's word, never a
/// fact to act on). Behind a proxy, the peer is the proxy's address, and the
/// client is read from it only if it is one of the config's
/// [trusted proxies](ServerConfigBuilder::trusted_proxies).
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
    check_reserve_of(&config, threads)?;
    let (counts, gauges) = attach_gauges(&config, threads)?;
    let source = Source::Clients(server);
    let (shared, joins) =
        pool::start(source, threads, &config, counts, Box::new(handler), pool::spawn_named)?;
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
        self.shared.busy.load(Ordering::Relaxed)
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
        self.shared.admission.reserved_busy()
    }

    /// Ordinary requests taken by a free thread that wait for an ordinary
    /// thread, because every thread but the reserved ones is busy with one.
    /// Requests no thread has taken yet are not counted.
    pub fn waiting(&self) -> usize {
        self.shared.admission.waiting()
    }

    /// A handle on the request pool's gauges that outlives this borrow (for
    /// a metrics exporter, say).
    pub fn request_pool(&self) -> RequestPool {
        let reserved = self.shared.reserve.as_ref().map(|r| r.share.threads);
        RequestPool::of_server(self.threads, reserved, self.shared.counts.clone())
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
    /// request it is handling and exit.
    ///
    /// Behind the guard: no new connection is accepted, idle connections are
    /// closed, and every request already being read or handled is answered
    /// first (with `Connection: close`). Without it, requests already received
    /// by tiny_http are answered first. A
    /// handler that never returns keeps this waiting: bound the handler's
    /// work (that is what a [`Dependency`](crate::Dependency)'s deadline is
    /// for).
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
