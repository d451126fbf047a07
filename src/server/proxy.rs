//! Placeholder: trusted proxies (replaced by the full module).
use std::net::{IpAddr, SocketAddr};

/// The peers believed to stand for another client.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct TrustedProxies {
    nets: Vec<(IpAddr, u8)>,
}

impl TrustedProxies {
    /// Trusts no one.
    pub fn none() -> Self {
        TrustedProxies::default()
    }
    /// Parses.
    pub fn parse<I, S>(entries: I) -> Result<TrustedProxies, crate::ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut nets = Vec::new();
        for e in entries {
            let ip: IpAddr = e.as_ref().parse().map_err(|_| crate::ConfigError::new("trusted_proxies", "an IP", e.as_ref()))?;
            nets.push((ip, 32));
        }
        Ok(TrustedProxies { nets })
    }
    /// Empty.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }
    /// Contains.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|(n, _)| *n == ip)
    }
    /// Entries.
    pub fn entries(&self) -> Vec<String> {
        self.nets.iter().map(|(n, _)| n.to_string()).collect()
    }
    /// Resolves.
    pub fn resolve<'a>(&self, peer: Option<SocketAddr>, headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> ClientAddr {
        let through = headers.into_iter().any(|(n, _)| n.eq_ignore_ascii_case("x-forwarded-for"));
        ClientAddr { ip: peer.map(|p| p.ip()), through_proxy: through || peer.is_some_and(|p| self.contains(p.ip())) }
    }
}

/// Who a request came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientAddr {
    /// The client.
    pub ip: Option<IpAddr>,
    /// Through a proxy.
    pub through_proxy: bool,
}
