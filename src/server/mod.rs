//! The request pool of a synchronous server: [`RequestPool`] for any server
//! (rouille, astra, tiny_http served by hand), with its [`Reserve`], its
//! [`ServerConfig`] and each request's [`RequestContext`]; and, with the
//! `tiny_http` feature, the crate's own server ([`serve`]): a fixed request
//! pool serving tiny_http, behind a guard that owns the edge.
//!
//! Every route is answered by one of the pool's `threads` threads
//! (`watertight-http-<i>`), held until the handler returns: the resource a
//! hung provider exhausts, so the pool is fixed and its occupancy is
//! [`ServerHandle::busy`]. A [`Reserve`] keeps a few threads for the routes
//! you name ([admission](#admission)).
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
//! # Admission
//!
//! Each handler gets a [`RequestContext`] whose `deadline()` is the request's
//! budget (shortened by a client's `X-Request-Timeout`): pass it on with
//! `dep.with().deadline(ctx.deadline())` and the request ends within it.
//!
//! - **A reserved share** ([`Reserve`]) keeps threads other requests never
//!   take. Reserve only routes that call no provider that could hang.
//! - **Any synchronous server.** [`RequestPool::enter`] gives rouille the
//!   same count, reserve, budget and gauges (`examples/trips.rs`). An ordinary
//!   request that finds the ordinary share full waits on its own thread by
//!   the [pool's rule](crate::pool#waiting-for-room-by-time), within
//!   [`max_wait`](ServerConfigBuilder::max_wait) and its budget, else is
//!   refused [`EnterError::Busy`] (`503`). It holds one of the server's own
//!   threads meanwhile: give the server a few more than the pool counts.
//! - **The crate's own server** admits the same way, but a waiting request
//!   holds no thread: it is bounded by its budget, and leaves when the line
//!   stands or stops moving, answered `503 SERVER_BUSY`; on shutdown every
//!   waiting request is answered `503 SERVER_STOPPING`.
//! - **Refusals** are counted in
//!   `watertight_request_pool_refused_total{reason}` (`full`, `max_wait`,
//!   `budget`, `stuck`: the room's one vocabulary of refusals), and logged at
//!   most once a second per reason.
//! - **Behind a proxy.** Only a [trusted proxy](TrustedProxies) has its
//!   `X-Forwarded-For` believed ([`RequestContext::client_ip`]); behind one
//!   every peer is loopback, so admin routes need a token
//!   (`examples/checkout/nginx.conf`).
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
//! A handler that panics does not take its thread with it: the client gets
//! a `500` with a JSON body, and the thread goes back to serving.
//!
//! # The guard
//!
//! [`serve`] puts a guard between the clients and tiny_http (settings in
//! [`ServerConfig`]; [`serve_with`] takes your own). A slow or hostile client
//! can cost a guard thread, never the process.
//!
//! ```text
//! client ──TCP──► accept thread ──► connection thread ──in process──► request thread
//!                 (watertight-accept) (watertight-conn, one    (no body)   (watertight-http-<i>,
//!                 503 past the limit   per connection, bounded) ──hop──►    the handler)
//!                                                  (a body: tiny_http on a private socket)
//! ```
//!
//! - **Accepting.** An accept error (out of descriptors, say) is logged and
//!   retried after a pause doubling from 5 ms to 1 s; the loop never ends.
//! - **Bounds.** The accept thread counts open connections in total and per
//!   peer (an IPv4 address, or an IPv6 /64) under one lock; past
//!   [`max_connections`](ServerConfig::max_connections) or
//!   [`max_connections_per_peer`](ServerConfig::max_connections_per_peer) a
//!   new connection gets `503` and is closed. A
//!   [trusted proxy](ServerConfig::trusted_proxies) counts in the total only.
//! - **Reading.** The head is read with `httparse` within
//!   [`head_timeout`](ServerConfig::head_timeout) of its first byte, the body
//!   within [`body_timeout`](ServerConfig::body_timeout) of the head's end
//!   (else `408`). A new connection waits
//!   [`first_byte_timeout`](ServerConfig::first_byte_timeout) for its first
//!   byte, a kept-alive one [`idle_timeout`](ServerConfig::idle_timeout), then
//!   closes without an answer. Each read is bounded by what is left of its
//!   step's time, so a byte now and then does not extend it.
//! - **Caps.** A head over [`max_head_bytes`](ServerConfig::max_head_bytes)
//!   or 100 headers gets `431`; a body over
//!   [`max_body_bytes`](ServerConfig::max_body_bytes) `413` (before a byte of
//!   a declared body is read); another `Transfer-Encoding` than `chunked`
//!   `501`; another `Expect` than `100-continue` `417`; a malformed head,
//!   both `Content-Length` and `Transfer-Encoding`, or a non-ASCII header
//!   value `400`. Each answer is JSON `{"code", "message"}`, then the guard
//!   drains the client for at most 1 s and 256 KiB (so the close does not
//!   reset the connection before the answer is read) and closes.
//! - **Hand-off.** A request without a body goes to the pool in process, as
//!   a `tiny_http::Request` the guard builds. One with a body is written
//!   again as HTTP/1.1 framed by `Content-Length` (hop-by-hop headers
//!   dropped) to an inner `tiny_http::Server` on a private socket (a Unix
//!   socket in a 0700 directory, else loopback TCP), because tiny_http hands
//!   a handler a body only from a socket it reads itself; there
//!   `Request::remote_addr` is `None` ([`RequestContext::peer_addr`] has the
//!   client either way).
//! - **Answering.** The request thread prints the response with tiny_http's
//!   printer and passes the bytes in process to the client's connection
//!   thread, which writes them within
//!   [`write_timeout`](ServerConfig::write_timeout) per write and never
//!   parses them: each answer is framed once and travels only on its own
//!   client's connection. Answers up to 256 KiB pass whole, so the request
//!   thread never waits on a slow reader; nothing is read back from the hop,
//!   and a hop connection is reused only once its request is answered. An
//!   event stream goes on piece by piece (to HTTP/1.0, printed by the guard
//!   and ended by the close); meanwhile the guard peeks at the client every
//!   100 ms, and a client that closed (or half-closed, as nginx judges it)
//!   ends the stream at the next event. The guard waits at most
//!   [`answer_timeout`](ServerConfig::answer_timeout) for each piece (then
//!   `504`, or the close). An answer whose framing is in doubt ends with the
//!   close; a header with a control byte is answered `500`.
//! - **Stopping.** [`ServerHandle::shutdown`] stops the accept loop, closes
//!   idle connections, lets the others finish their request, then stops the
//!   request threads once every request they were given is answered.
//!
//! Threads: one accept thread; at most `max_connections` connection threads,
//! each waiting a second for another connection before it exits (so short
//! connections cost no thread start); `watertight-hop`; and tiny_http's
//! accept thread and one thread per hop connection. Hop connections are kept
//! open to work around a lost wake-up in tiny_http 0.12's task pool; a
//! request on a fresh one that tiny_http does not take up soon opens one more
//! to free a tiny_http thread.
//!
//! [`serve_unguarded`] serves your own `tiny_http::Server` without the guard.
//! tiny_http 0.12 alone has no read timeouts, drains a declared body into a
//! buffer of the declared size (`Content-Length: 1000000000000` aborts the
//! process), caps no head, ends its accept loop on the first error, starts a
//! thread per connection without a limit, and has the lost wake-up above.

// What any server uses (a foreign one through `RequestPool::enter`).
mod config;
mod gate;
mod proxy;
mod request;
mod reserve;

// The crate's own server on tiny_http.
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
mod reply;
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
