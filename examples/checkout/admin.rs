//! Who may use the admin routes (`/_faults`, `/_config`): they change how the
//! server behaves, so they answer loopback clients that came through no
//! proxy, and anyone else only with the admin token given at start
//! (`--admin-token`, header `X-Admin-Token`).
//!
//! A proxy on this host (nginx in `nginx.conf`) connects from loopback for
//! every client, so "the TCP peer is loopback" says nothing of the client
//! behind it. A request that came through a proxy (its peer is a trusted
//! proxy, or it carries a forwarding header, whoever sent it) needs the
//! token, even from a loopback peer.
//!
//! The policy is a pure function of the client's address and the header, so
//! that it can be tested with any address without sending it a packet.
//! std only: `tests/server/admin_policy.rs` includes this file by path.

use std::net::{IpAddr, SocketAddr};

/// The header that carries the admin token.
pub const TOKEN_HEADER: &str = "X-Admin-Token";

/// Why an admin request is let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granted {
    /// The client is on this host and came through no proxy.
    Loopback,
    /// The client presented the admin token.
    Token,
}

/// Why an admin request is refused (answered 403).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not a local client, and no token was configured at start.
    NoTokenConfigured,
    /// Not a local client, and the request carries no token.
    NoToken,
    /// Not a local client, and the token presented is not the admin token.
    WrongToken,
}

impl Refused {
    /// What the 403 answer says.
    pub fn message(self) -> &'static str {
        match self {
            Refused::NoTokenConfigured => {
                "admin routes answer loopback clients that came through no proxy only (no --admin-token was given)"
            }
            Refused::NoToken => {
                "admin routes answer loopback clients that came through no proxy, or requests with the X-Admin-Token header"
            }
            Refused::WrongToken => "the X-Admin-Token header does not match the admin token",
        }
    }
}

/// Whether an admin request from the TCP peer `peer` (unknown: `None`),
/// which came `through_proxy` or not, carrying `presented` in
/// `X-Admin-Token`, may go through, when the server was started with the
/// admin token `configured`.
///
/// A loopback peer that is no proxy, on a request with no forwarding header,
/// always may; anyone else only with the configured token. An unknown peer
/// address is not loopback.
pub fn admin_access(
    peer: Option<SocketAddr>,
    through_proxy: bool,
    presented: Option<&str>,
    configured: Option<&str>,
) -> Result<Granted, Refused> {
    if !through_proxy && peer.is_some_and(|a| is_loopback(a.ip())) {
        return Ok(Granted::Loopback);
    }
    let Some(configured) = configured else { return Err(Refused::NoTokenConfigured) };
    match presented {
        None => Err(Refused::NoToken),
        Some(p) if same_secret(p.as_bytes(), configured.as_bytes()) => Ok(Granted::Token),
        Some(_) => Err(Refused::WrongToken),
    }
}

/// `127.0.0.0/8`, `::1`, and an IPv4 loopback address mapped into IPv6
/// (`::ffff:127.0.0.1`, what a dual-stack socket reports for an IPv4 client).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// Compares two secrets in time that depends on their lengths only, not on
/// where they first differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// Checks a token given at start: it must be worth checking.
pub fn check_token(token: &str) -> Result<(), String> {
    if token.len() < 8 {
        return Err("--admin-token must be at least 8 characters".into());
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("--admin-token must be printable ASCII without spaces (it travels in a header)".into());
    }
    Ok(())
}
