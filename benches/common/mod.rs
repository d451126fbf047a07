//! What the `isolation`, `http` and `edge` benches share: the checkout server under
//! test ([`app`]), one server with its fraud provider from start to teardown
//! ([`scenario`]), kept-alive clients that split batches of requests ([`gang`]), and
//! the figures they print ([`report`]).
//!
//! Each bench includes this module with `mod common;` and uses its own part of it.
#![allow(dead_code)] // each bench uses a different part of this module

pub mod app;
pub mod gang;
pub mod report;
pub mod scenario;

use std::time::Duration;

/// The server's request pool: the resource a hung provider exhausts.
pub const REQUEST_THREADS: usize = 16;
/// Orders in the in-memory store (ids 1..=ORDERS).
pub const ORDERS: u64 = 100;
/// Deadlines, the same for the dependencies and for the shared pool's time limiter.
pub const FRAUD_DEADLINE: Duration = Duration::from_secs(1);
pub const ORDERS_DEADLINE: Duration = Duration::from_millis(500);
/// The fraud dependency's workers.
pub const FRAUD_WORKERS: usize = 8;
/// The shared blocking pool's size in `shared_pool`.
pub const SHARED_BLOCKING_THREADS: usize = 16;
/// Rounds of a paired comparison, after one unrecorded warm-up round each.
pub const PAIRED_ROUNDS: usize = 8;

/// The order every `/checkout` client sends.
pub const ORDER_BODY: &str = r#"{"user":"u1","items":[{"sku":"A-1","qty":2}],"total":"42.00"}"#;

/// A client whose requests give up after `timeout` and which sees 4xx/5xx as answers.
pub fn client(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().timeout_global(Some(timeout)).http_status_as_error(false).build().into()
}

/// Which of two side-by-side servers goes first in a paired round: each does, every
/// other round.
pub fn round_order(round: usize) -> [usize; 2] {
    if round.is_multiple_of(2) { [0, 1] } else { [1, 0] }
}
