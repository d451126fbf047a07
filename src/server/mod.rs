//! The request pool of a synchronous server: [`RequestPool`] for any server
//! (rouille, astra, tiny_http served by hand), with its [`Reserve`], its
//! [`ServerConfig`] and each request's [`RequestContext`]; and, with the
//! `tiny_http` feature, the crate's own server ([`serve`]): a fixed request
//! pool serving tiny_http, behind a guard that owns the edge.
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

// What any server uses (a foreign one through `RequestPool::enter`).
mod config;
mod gate;
mod proxy;
mod request;
mod reserve;

// The crate's own server on tiny_http.
#[cfg(feature = "tiny_http")]
mod admission;
#[cfg(feature = "tiny_http")]
mod answer;
#[cfg(feature = "tiny_http")]
mod client;
#[cfg(feature = "tiny_http")]
mod conn;
#[cfg(feature = "tiny_http")]
mod guard;
#[cfg(feature = "tiny_http")]
mod hop;
#[cfg(feature = "tiny_http")]
mod pool;
#[cfg(feature = "tiny_http")]
mod serve;

pub use self::config::{ServerConfig, ServerConfigBuilder};
pub use self::gate::{EnterError, Entered, RequestPool};
pub use self::proxy::{ClientAddr, TrustedProxies};
pub use self::request::RequestContext;
pub use self::reserve::Reserve;
#[cfg(feature = "serde")]
pub(crate) use self::reserve::check_threads;
#[cfg(feature = "tiny_http")]
pub use self::serve::{ServerHandle, serve, serve_unguarded, serve_with};
