//! Blocking, thread-pool bulkheads for synchronous, thread-per-request servers.
//!
//! A server with a fixed pool of request threads that calls a provider over
//! blocking I/O loses every request thread to that provider the day it hangs,
//! and with them every endpoint, even those that never call it. watertight
//! gives each dependency its own compartment, a [`Dependency`]:
//!
//! - a fixed [`Pool`](pool::Pool) of worker threads with a bounded queue, so a hung
//!   provider floods only its own workers;
//! - a [`Breaker`](breaker::Breaker) in front of it, so a failing provider is not called at all
//!   while it recovers;
//! - a timeout on every call, so the request thread waits at most that long,
//!   and the job sees what is left of it ([`CallContext::remaining`]) to use
//!   as its own socket timeout.
//!
//! The request thread gets an explicit answer at once or by the deadline:
//! the job's result, or an [`Error`] saying it was rejected, timed out,
//! failed or panicked.
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
//! // A healthy call: the job runs on a worker named "watertight-fraud-<i>".
//! let ok = fraud.call(|ctx: &CallContext| Ok::<_, std::io::Error>(ctx.remaining() > Duration::ZERO));
//! assert!(ok.unwrap());
//!
//! // A provider that never answers in time: the caller gets `Timeout` at the deadline.
//! let late = fraud.call(|ctx: &CallContext| {
//!     std::thread::sleep(ctx.remaining() + Duration::from_millis(50));
//!     Ok::<_, std::io::Error>(false)
//! });
//! assert!(matches!(late, Err(Error::Timeout { .. })));
//!
//! // One success and one timeout: a 50 % failure rate over `minimum_calls(2)`
//! // opens the breaker, and from now on the answer is immediate.
//! let rejected = fraud.call(|_ctx: &CallContext| Ok::<_, std::io::Error>(true)).unwrap_err();
//! assert!(rejected.is_rejected());
//! # Ok::<(), watertight::ConfigError>(())
//! ```
//!
//! What counts as a failure is decided by [`Classify`] (or a classifier given
//! to [`CallBuilder::classify`](crate::CallBuilder::classify)); retries
//! ([`Retry`](retry::Retry), through [`CallBuilder::retry`](crate::CallBuilder::retry))
//! sit outside the breaker. The rules are the README's Semantics.
//!
//! [`server`] is the request pool of any synchronous server
//! ([`RequestPool`](server::RequestPool)). The features, and what each adds
//! ([`http`], [`server::serve`], [`metrics`], [`cache`], [`testing`], `tracing`):
//! the README's *Features*.
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

// The README's examples are compiled and run as doctests, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
