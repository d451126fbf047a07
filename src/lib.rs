//! Blocking, thread-pool bulkheads for synchronous, thread-per-request servers.
//!
//! A server whose request threads call a provider over blocking I/O loses them
//! all the day that provider hangs, and with them every route, even those that
//! never call it. watertight gives each dependency its own compartment, a
//! [`Dependency`]: a fixed worker [`Pool`](pool::Pool) with a bounded queue,
//! entered through a [`Breaker`](breaker::Breaker) and under a deadline. The
//! request thread gets the job's result, or an [`Error`] saying it was
//! rejected, timed out, failed or panicked, at once or by the deadline.
//!
//! ```
//! use std::time::Duration;
//! use watertight::{CallContext, Dependency, Error, breaker::BreakerConfig};
//!
//! let fraud = Dependency::builder("fraud")
//!     .workers(4)
//!     .queue(2)
//!     .timeout(Duration::from_millis(200))
//!     .breaker(BreakerConfig::count_based(10).minimum_calls(2))
//!     .build()?;
//!
//! // The job runs on a worker and sees what is left of the deadline.
//! let ok = fraud.call(|ctx: &CallContext| Ok::<_, std::io::Error>(ctx.remaining() > Duration::ZERO));
//! assert!(ok.unwrap());
//! // A provider that never answers in time: `Timeout` at the deadline.
//! let late = fraud.call(|ctx: &CallContext| {
//!     std::thread::sleep(ctx.remaining() + Duration::from_millis(50));
//!     Ok::<_, std::io::Error>(false)
//! });
//! assert!(matches!(late, Err(Error::Timeout { .. })));
//! // One failure in two calls opens the breaker: the answer is now immediate.
//! assert!(fraud.call(|_: &CallContext| Ok::<_, std::io::Error>(true)).unwrap_err().is_rejected());
//! # Ok::<(), watertight::ConfigError>(())
//! ```
//!
//! # Where each rule lives
//!
//! - Calling, [what counts as a failure](dependency#what-counts-as-a-failure),
//!   [hang detection](dependency#a-hang-is-caught-within-one-timeout),
//!   [fan-out, hedging and priorities](dependency#fan-out-hedging-priorities),
//!   [caller-thread mode](dependency#where-calls-run): [`dependency`].
//! - [The pool and its deadline](pool#pool-and-deadline), [waiting for
//!   room](pool#waiting-for-room-by-time), [clients that are not
//!   ureq](pool#clients-that-are-not-ureq) (PostgreSQL, sockets): [`pool`].
//! - The breaker's states and windows: [`breaker`]. Retry and its budget:
//!   [`retry`]. Limits and throttling: [`limit`]. Shadow mode: [`shadow`].
//! - [Sizing and `check_capacity`](registry#sizing): [`registry`]. Serving
//!   requests (the request pool, the reserve, the guard): [`server`].
//! - Keeping answers: [`cache`] (feature `cache`). Prometheus and logs:
//!   [`metrics`] (`prometheus`). ureq's deadline and outcome table: [`http`]
//!   (`ureq`). Spans across the hop: feature `tracing`.
//! - Time in tests ([`ManualClock`]): [`clock`]. Latency histograms: [`histogram`].
#![cfg_attr(feature = "serde", doc = "- Configuration files: [`config`] (feature `serde`).")]
#![cfg_attr(not(feature = "serde"), doc = "- Configuration files: `config` (feature `serde`).")]
#![cfg_attr(
    feature = "testing",
    doc = "- Fake providers for incident tests: [`testing`] (feature `testing`)."
)]
#![cfg_attr(
    not(feature = "testing"),
    doc = "- Fake providers for incident tests: `testing` (feature `testing`)."
)]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(rust_2018_idioms)]

// The floor: no module here imports one above it.
mod classify;
pub mod clock;
// Durations as human strings in files (feature `serde`).
#[cfg(feature = "serde")]
mod duration;
mod error;
pub mod histogram;
mod latency;
mod listeners;
// How much a call matters under pressure: read by the dependency's reserved
// share and by the throttle (public as `dependency::Priority`).
mod priority;
mod quiet;
// Public (and re-exported, hidden) only for the loom model in tests/loom_room.rs.
#[cfg(loom)]
pub mod room;
#[cfg(not(loom))]
mod room;
// Shadow mode: which refusing policies decide and record without refusing.
pub mod shadow;
mod sync;
mod time;
// The `tracing` feature's hooks on the call path (empty without it).
mod trace;
mod window;

// The compartment: pool and breaker (which never import each other), then the
// dependency that puts them together, and the registry of dependencies.
pub mod breaker;
pub mod dependency;
pub mod limit;
pub mod pool;
pub mod registry;
pub mod retry;
// Answers worth keeping: a per-key cache in front of a dependency (feature
// `cache`), above the call path and below the registry that names it.
#[cfg(feature = "cache")]
pub mod cache;

// The edges: the request pool of any server (its own server on tiny_http
// behind the feature), and the rest behind features.
#[cfg(feature = "serde")]
pub mod config;
#[cfg(feature = "ureq")]
pub mod http;
#[cfg(feature = "prometheus")]
pub mod metrics;
pub mod server;
#[cfg(feature = "testing")]
pub mod testing;
// The HTTP/1.1 both of them speak, sans IO.
#[cfg(any(feature = "tiny_http", feature = "testing"))]
mod wire;

#[cfg(loom)]
#[doc(hidden)]
pub use crate::pool::queue as __loom_queue;
#[cfg(loom)]
#[doc(hidden)]
pub use crate::pool::slot as __loom_slot;
#[cfg(loom)]
#[doc(hidden)]
pub use crate::room as __loom_room;
pub use crate::{
    classify::{Classify, Verdict},
    clock::{Clock, ManualClock},
    dependency::{
        CallBuilder, CallCounts, Dependency, DependencyBuilder, DependencyConfig, DependencySnapshot, FanLeg,
        FanOut,
    },
    error::{ConfigError, Error, Outcome, Rejection},
    pool::CallContext,
    registry::Registry,
};

/// The tiny_http crate [`server`] is built on (feature `tiny_http`), so that a
/// handler names the same `Request` and `Response` types without pinning a
/// matching version by hand.
#[cfg(feature = "tiny_http")]
pub use tiny_http;
/// The ureq crate [`http`] is built on (feature `ureq`), so that the agent a
/// job uses is the version [`http::WithDeadline`] is implemented for.
#[cfg(feature = "ureq")]
pub use ureq;

// The guide's examples are compiled and run as doctests, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
