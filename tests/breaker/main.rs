//! The breaker: scripted state walks on a manual clock, a reference model, and its paths under threads.
//!
//! One test binary for the area; each file is a module, with the shared
//! `tests/support` helpers declared here once.

mod breaker;
mod breaker_paths;
