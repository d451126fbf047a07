//! ureq through the bulkhead, and the fake providers of `watertight::testing`.
//!
//! One test binary for the area; each file is a module, with the shared
//! `tests/support` helpers declared here once.

#[path = "../support/mod.rs"]
mod support;

mod http;
mod providers;
mod saturated;
