//! A fixed request pool serving a [`tiny_http::Server`] (feature `tiny_http`).
//!
//! This is the *shared* pool of a thread-per-request server: every route is
//! answered by one of its `threads` threads, named `watertight-http-<i>`, and
//! a request holds its thread until the handler returns. That is exactly the
//! resource a hung provider exhausts in the incident the crate answers (seed
//! 001), so the pool is fixed and its occupancy is observable through
//! [`ServerHandle::busy`]: put every dependency behind a
//! [`Dependency`](crate::Dependency) and this pool keeps room for the routes
//! that do not call it.
//!
//! ```no_run
//! use std::io::Cursor;
//! let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
//! let handle = watertight::server::serve(server, 16, |_req: &mut tiny_http::Request| {
//!     tiny_http::Response::from_string("hello").boxed()
//! });
//! println!("listening on {:?}, {} threads", handle.addr(), handle.threads());
//! handle.shutdown();
//! ```
//!
//! A handler that panics does not take its thread with it: the panic is
//! caught, the client gets a `500` with a JSON body, and the thread goes back
//! to serving.
//!
//! Connections and bodies are tiny_http's, and so are two limits of tiny_http
//! 0.12 that this pool cannot change:
//! - each open connection holds one of tiny_http's own connection threads,
//!   and handing a new connection to them can lose a wake-up: in a burst of
//!   new connections, one may wait until another connection closes, however
//!   idle this pool is;
//! - a request dropped with part of its `Content-Length` body unread has the
//!   rest discarded through a buffer as large as that rest, so a request that
//!   *declares* a huge body can exhaust memory whatever the handler does.
//!   Expose such a server through a proxy that caps request bodies.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use tiny_http::{Header, Request, Response, ResponseBox, Server};

/// Serves `server` on `threads` fixed threads (at least one), each taking the
/// next request, calling `handler` with it and sending back the response the
/// handler returned.
///
/// The threads are named `watertight-http-<i>`, `i` from 0. A panic in the
/// handler is caught and answered with `500 {"code":"INTERNAL_ERROR",...}`;
/// the thread survives and takes the next request. The handler may read the
/// request's body (`request.as_reader()`) but must not respond itself: the
/// pool sends what it returns.
///
/// # Panics
///
/// If the operating system refuses to start a thread.
pub fn serve<H>(server: Server, threads: usize, handler: H) -> ServerHandle
where
    H: Fn(&mut Request) -> ResponseBox + Send + Sync + 'static,
{
    let threads = threads.max(1);
    let shared = Arc::new(Shared {
        server,
        busy: AtomicUsize::new(0),
        stopping: AtomicBool::new(false),
        handler: Box::new(handler),
    });
    let joins = (0..threads)
        .map(|i| {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("watertight-http-{i}"))
                .spawn(move || shared.run())
                .expect("failed to spawn a request thread")
        })
        .collect();
    ServerHandle { shared, joins, threads }
}

type Handler = Box<dyn Fn(&mut Request) -> ResponseBox + Send + Sync>;

struct Shared {
    server: Server,
    /// Requests taken off the server and not yet answered: incremented right
    /// after `recv` returns one, decremented after `respond` returns (a
    /// [`BusyGuard`] does it, so a panic cannot leak a count). Relaxed: it is
    /// a gauge read for display and tests, it orders nothing.
    busy: AtomicUsize,
    /// Set before `shutdown` unblocks the threads. A thread that sees `recv`
    /// fail checks it: set means exit, clear means a transient accept error.
    stopping: AtomicBool,
    handler: Handler,
}

impl Shared {
    fn run(&self) {
        loop {
            let mut request = match self.server.recv() {
                Ok(request) => request,
                // `recv` fails when `unblock` was called (one wake-up per
                // call, consumed by exactly one thread) or on an accept error.
                Err(err) => {
                    if self.stopping.load(Ordering::Acquire) {
                        return;
                    }
                    log::warn!("request pool: receiving a request failed: {err}");
                    continue;
                }
            };
            let _busy = BusyGuard::enter(&self.busy);
            let response = match catch_unwind(AssertUnwindSafe(|| (self.handler)(&mut request))) {
                Ok(response) => response,
                Err(payload) => {
                    let msg = panic_message(&*payload);
                    log::error!("request handler panicked on {} {}: {msg}", request.method(), request.url());
                    internal_error()
                }
            };
            // A client that went away is not the server's error.
            if let Err(err) = request.respond(response) {
                log::debug!("request pool: sending a response failed: {err}");
            }
        }
    }
}

struct BusyGuard<'a>(&'a AtomicUsize);

impl<'a> BusyGuard<'a> {
    fn enter(busy: &'a AtomicUsize) -> Self {
        busy.fetch_add(1, Ordering::Relaxed);
        BusyGuard(busy)
    }
}

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

fn internal_error() -> ResponseBox {
    // The panic message stays in the log: it may name internals the client
    // has no business seeing.
    let body = r#"{"code":"INTERNAL_ERROR","message":"the request handler failed"}"#;
    Response::from_string(body)
        .with_status_code(500)
        .with_header(Header::from_bytes("Content-Type", "application/json").expect("a valid header"))
        .boxed()
}

/// The running request pool returned by [`serve`].
///
/// Dropping the handle shuts the pool down as [`ServerHandle::shutdown`]
/// does; keep it alive for as long as the server should run.
pub struct ServerHandle {
    shared: Arc<Shared>,
    joins: Vec<JoinHandle<()>>,
    threads: usize,
}

impl ServerHandle {
    /// Requests being handled right now (taken off the server, not yet
    /// answered). At most [`threads`](ServerHandle::threads).
    pub fn busy(&self) -> usize {
        self.shared.busy.load(Ordering::Relaxed)
    }

    /// The number of request threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The address the server listens on (`to_ip()` gives the socket address
    /// of a TCP server, e.g. one bound to port 0).
    pub fn addr(&self) -> tiny_http::ListenAddr {
        self.shared.server.server_addr()
    }

    /// Stops taking requests and waits for every request thread to finish the
    /// request it is handling and exit.
    ///
    /// Requests already received by the server are still answered first. A
    /// handler that never returns keeps this waiting: bound the handler's
    /// work (that is what a [`Dependency`](crate::Dependency)'s deadline is
    /// for).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        // Publish `stopping` before any wake-up, so that a thread woken by
        // `unblock` sees it (Release here pairs with the Acquire in `run`).
        self.shared.stopping.store(true, Ordering::Release);
        // tiny_http's `unblock` queues one wake-up that exactly one `recv`
        // consumes; every thread exits on the first one it sees, so one per
        // thread wakes them all. They queue behind requests already
        // received, which are answered first.
        for _ in 0..self.joins.len() {
            self.shared.server.unblock();
        }
        for join in self.joins.drain(..) {
            // The loop catches handler panics, so a thread cannot end in one.
            let _ = join.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if !self.joins.is_empty() {
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
