//! The request pool and the guard: servers on loopback, the reserved share, hostile clients, nginx in front, the trust of private headers, stopping.
//!
//! One test binary for the area; each file is a module, with the shared
//! `tests/support` helpers declared here once.

#[path = "../support/checkout_bin.rs"]
mod checkout_bin;
#[path = "../support/nginx.rs"]
mod nginx;

mod admin_policy;
mod answers;
mod desync;
mod edge;
mod peers;
mod proxies;
mod reserve;
mod server;
mod slow_clients;
mod smuggling;
mod stop;
mod unguarded_trust;
