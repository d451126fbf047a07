//! The checkout example and the quote example, driven as users run them: the real binaries on free loopback ports.
//!
//! One test binary for the area; each file is a module, with the shared
//! `tests/support` helpers declared here once.

#[path = "../support/checkout_bin.rs"]
mod checkout_bin;
#[path = "../support/mod.rs"]
mod support;

mod access_cache;
mod checkout;
mod checkout_config;
mod checkout_input;
mod checkout_notification;
mod dashboard;
mod quote;
mod reserve;
mod stream;
mod trips;
