//! A scriptable fake HTTP provider on loopback, for incident tests (feature
//! `testing`, off by default).
//!
//! A [`FakeProvider`] listens on `127.0.0.1:<free port>` and handles every
//! request on its own thread, so a hung request holds only itself. How it
//! answers is its [`Fault`], switchable at any time
//! ([`FakeProvider::set_fault`]) and scriptable one request at a time
//! ([`FakeProvider::script`]):
//!
//! | fault          | what the client sees                                                   |
//! |----------------|------------------------------------------------------------------------|
//! | `healthy`      | the responder's status and body                                        |
//! | `slow:<ms>`    | the same, `<ms>` milliseconds later                                    |
//! | `hang`         | nothing: the request is read and never answered; the connection closes when the fault changes, the provider is dropped, after 60 s, or (see [`FakeProvider::release_on_client_close`]) when the client leaves |
//! | `error:<code>` | status `<code>` with a small JSON body (the responder is not asked)    |
//! | `refuse`       | "connection refused": nothing listens on the port any more             |
//! | `reset`        | the connection is reset (TCP RST) before any answer                    |
//! | `garbage`      | bytes that are not HTTP, then the connection closes                    |
//! | `trickle:<ms>` | a valid answer, one byte every `<ms>` milliseconds                     |
//! | `close`        | the request is read, then the connection closes with no answer         |
//! | `cut`          | a `200` head announcing a body, half of that body, then a TCP RST      |
//! | `saturated:<n>:<ms>` | the responder's answer; at most `<n>` requests are served at once, each for `<ms>` milliseconds, and the rest wait their turn: latency grows with load, as in a brownout |
//!
//! Its counters say what it saw: [`hits`](FakeProvider::hits),
//! [`in_flight`](FakeProvider::in_flight) (hung requests included) and
//! [`clients_gone`](FakeProvider::clients_gone) (held requests whose client
//! closed: proof that a caller's deadline freed the socket).
//!
//! # A provider and its responder
//!
//! The responder makes the `healthy`, `slow` and `trickle` answers from the
//! request ([`Call`]): a status and a body (JSON when it starts with `{` or `[`).
//!
//! ```
//! use watertight::testing::{FakeProvider, Fault};
//!
//! let fraud = FakeProvider::start("fraud", Fault::Healthy, |call| match call.url.as_str() {
//!     "/verify" => (200, r#"{"decision":"approve"}"#.to_owned()),
//!     _ => (404, r#"{"error":"not found"}"#.to_owned()),
//! })?;
//! let body = ureq::get(format!("{}/verify", fraud.url())).call()?.body_mut().read_to_string()?;
//! assert_eq!(body, r#"{"decision":"approve"}"#);
//!
//! // One-shot faults come first, then the standing fault applies again.
//! fraud.script([Fault::Error(503)]);
//! let err = ureq::get(format!("{}/verify", fraud.url())).call().unwrap_err();
//! assert!(matches!(err, ureq::Error::StatusCode(503)));
//! assert!(ureq::get(format!("{}/verify", fraud.url())).call().is_ok());
//! assert_eq!(fraud.hits(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # An incident test
//!
//! The provider hangs; the caller must get its answer by the deadline, the
//! breaker must open, and once the provider heals (and the breaker lets a probe
//! through) calls must succeed again.
//!
//! ```
//! # #[cfg(feature = "ureq")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::{Duration, Instant};
//! use watertight::http::WithDeadline;
//! use watertight::testing::{FakeProvider, Fault};
//! use watertight::{Dependency, Error, ManualClock, breaker::{BreakerConfig, State}};
//!
//! let provider = FakeProvider::start("fraud", Fault::Hang, |_| (200, "ok".to_owned()))?;
//! let clock = ManualClock::new();
//! let fraud = Dependency::builder("fraud")
//!     .workers(2)
//!     .timeout(Duration::from_millis(200))
//!     .breaker(BreakerConfig::count_based(2).minimum_calls(2).open_for(Duration::from_secs(30)))
//!     .clock(clock.clone())
//!     .build()?;
//! let agent = ureq::Agent::new_with_defaults();
//! let call = |fraud: &Dependency| {
//!     let (agent, url) = (agent.clone(), format!("{}/verify", provider.url()));
//!     fraud.call(move |ctx| agent.get(&url).with_deadline(ctx).call()?.body_mut().read_to_string())
//! };
//!
//! for _ in 0..2 {
//!     let began = Instant::now();
//!     let result = call(&fraud);
//!     // Our deadline, or ureq's own timeout made from it: a failure either way.
//!     assert!(matches!(result, Err(Error::Timeout { .. }) | Err(Error::Failed(_))), "{result:?}");
//!     assert!(began.elapsed() < Duration::from_secs(2), "answered by the deadline");
//! }
//! assert_eq!(fraud.breaker().state(), State::Open);
//! assert!(call(&fraud).unwrap_err().is_rejected(), "an open breaker answers at once");
//!
//! provider.set_fault(Fault::Healthy);
//! clock.advance(Duration::from_secs(30));
//! assert_eq!(call(&fraud)?, "ok");
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "ureq"))]
//! # fn main() {}
//! ```
//!
//! # Faults as text
//!
//! [`Fault`] parses what it displays, so a fault can come from a command line or
//! an HTTP body (the checkout example's `POST /_faults/fraud` takes `hang`).
//!
//! ```
//! use std::time::Duration;
//! use watertight::testing::Fault;
//!
//! assert_eq!("slow:250".parse::<Fault>(), Ok(Fault::Slow(Duration::from_millis(250))));
//! assert_eq!(Fault::Error(503).to_string(), "error:503");
//! let bad = "error:99".parse::<Fault>().unwrap_err();
//! assert!(bad.to_string().contains("error:<status 100-599>"));
//! ```
//!
//! # How it speaks HTTP
//!
//! HTTP/1.1 over `std::net`, read with the guard's parser; a head or body
//! over 1 MiB drops the connection. Every answer says `Connection: close`,
//! so each request gets the fault in force when it arrives. No server
//! library, because a fault must act on the raw socket and on the very next
//! request: tiny_http 0.12 can neither reset nor close a connection without
//! answering, drops a `Connection` response header, and keeps connections
//! alive past its server. It binds `127.0.0.1` only.

use std::time::Duration;

mod fault;
mod handler;
mod provider;

pub use self::fault::Fault;
pub use self::provider::FakeProvider;

/// The longest a `hang` holds a request.
const HANG_CAP: Duration = Duration::from_secs(60);
/// A client that stops sending (or reading) cannot hold a handler longer than this.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a request (head and body) may carry.
const MAX_REQUEST: u64 = 1 << 20;
/// How often a held (hung or slow) request looks whether its client has left.
const WATCH_EVERY: Duration = Duration::from_millis(25);

/// One request as the responder sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Call {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The request target: path and query, e.g. `/verify?fast=1`.
    pub url: String,
    /// The request body (lossy UTF-8).
    pub body: String,
}
