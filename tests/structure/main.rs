//! The crate's structure: its layers, the call path of one call, its
//! public error types and its tracing spans.
//!
//! One test binary for the area; each file is a module, with the shared
//! `tests/support` helpers declared here once.

mod call_path;
mod determinism;
mod error_types;
mod layering;
mod tracing_span;
