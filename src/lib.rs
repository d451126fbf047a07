//! Blocking, thread-pool bulkheads for synchronous, thread-per-request servers.
//!
//! (Crate tutorial: written once the call path is complete.)
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(rust_2018_idioms)]

mod classify;
mod clock;
mod error;

// -- pool (src/pool/, src/sync.rs)
mod pool;
mod sync;
#[cfg(loom)]
#[doc(hidden)]
pub use crate::pool::slot as __loom_slot;
pub use crate::pool::{CallContext, Pool, PoolBuilder, PoolStats, SubmitError, Ticket};

// -- breaker (src/breaker/)
mod breaker;
pub use crate::breaker::{Breaker, BreakerConfig, BreakerMetrics, NotPermitted, Permit, State, Transition};

// -- dependency, retry, registry, metrics, http, server
mod dependency;
pub mod metrics;
mod registry;
mod retry;
#[cfg(feature = "tiny_http")]
pub mod server;
pub use crate::dependency::{Dependency, DependencyBuilder, Event};
pub use crate::metrics::{CallCounts, DependencySnapshot};
pub use crate::registry::{CapacityEntry, CapacityError, CapacityLevel, CapacityReport, Registry};
pub use crate::retry::Retry;
#[cfg(feature = "ureq")]
pub mod http;

pub use crate::classify::{Classify, Verdict};
pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use crate::error::{ConfigError, Error, Rejection};
