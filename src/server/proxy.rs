//! [`TrustedProxies`]: which peers may say who the client is, and
//! [`ClientAddr`]: who a request came from once they have.
//!
//! Behind a reverse proxy every request arrives from the proxy's address;
//! the proxy names the client in `X-Forwarded-For` (or RFC 7239's
//! `Forwarded`). Anyone can send such a header, so it is believed only from
//! a trusted peer, and only as far as trusted hands carried it: the chain is
//! read from the right, over the trusted proxies, and the first address past
//! them is the client. What lies left of it was written by the client. The
//! walk reads at most [`MAX_HOPS`] entries.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::ConfigError;

/// The most chain entries a walk reads; the rest count as unreadable.
const MAX_HOPS: usize = 32;

/// The headers a proxy adds: any of them marks a request as proxied.
const FORWARDING_HEADERS: [&str; 5] =
    ["X-Forwarded-For", "Forwarded", "X-Real-IP", "X-Forwarded-Host", "X-Forwarded-Proto"];

const RULE_ENTRY: &str = "an IP address or CIDR network like 10.0.0.0/8";
const RULE_PREFIX: &str = "a CIDR network whose prefix fits its address (at most /32, /128 for IPv6)";
const RULE_HOST_BITS: &str = "a CIDR network with no host bits set (10.0.0.0/8, not 10.0.0.1/8)";

/// The peers believed to stand for another client: reverse proxies on this
/// host or network.
///
/// Each entry is an address (`127.0.0.2`, `::1`) or a CIDR network
/// (`10.0.0.0/8`, `fd00::/8`). An IPv4 address and its IPv4-mapped IPv6 form
/// (`::ffff:10.1.2.3`) are the same peer: a dual-stack socket reports the
/// second. The default trusts no one, and then every forwarding header is
/// ignored.
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use watertight::server::TrustedProxies;
///
/// // nginx on 127.0.0.2, in front of a client at 203.0.113.7.
/// let proxies = TrustedProxies::parse(["127.0.0.2"])?;
/// let nginx: SocketAddr = "127.0.0.2:41000".parse().unwrap();
/// let client = proxies.resolve(Some(nginx), [("X-Forwarded-For", "203.0.113.7")]);
/// assert_eq!(client.ip, Some("203.0.113.7".parse::<IpAddr>().unwrap()));
/// assert!(client.through_proxy);
///
/// // The same header sent straight by someone else is not believed.
/// let stranger: SocketAddr = "198.51.100.9:5000".parse().unwrap();
/// let forged = proxies.resolve(Some(stranger), [("X-Forwarded-For", "203.0.113.7")]);
/// assert_eq!(forged.ip, Some(stranger.ip()));
/// assert!(forged.through_proxy, "it still says a proxy was claimed");
///
/// // A host part in a network is refused, with the entry named.
/// let err = TrustedProxies::parse(["10.0.0.1/8"]).unwrap_err();
/// assert_eq!((err.field(), err.value()), ("trusted_proxies", "10.0.0.1/8"));
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    /// Networks as (address, prefix length) in IPv6's space, host bits clear;
    /// IPv4 ones as their mapped form (`10.0.0.0/8` is `::ffff:10.0.0.0/104`).
    nets: Vec<(Ipv6Addr, u8)>,
}

/// Who a request came from, as [`TrustedProxies::resolve`] judged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientAddr {
    /// The address believed to be the client's: the TCP peer, or, when the
    /// peer is a trusted proxy, the first untrusted address of its forwarding
    /// chain read from the right. `None` only when the peer is unknown (a
    /// Unix socket).
    pub ip: Option<IpAddr>,
    /// The request came through a proxy: its peer is a trusted proxy, or it
    /// carries a forwarding header (`X-Forwarded-For`, `Forwarded`,
    /// `X-Real-IP`, `X-Forwarded-Host`, `X-Forwarded-Proto`), whoever sent it.
    pub through_proxy: bool,
}

impl TrustedProxies {
    /// Trusts no one (the default): the client is always the TCP peer.
    pub fn none() -> Self {
        TrustedProxies::default()
    }

    /// The proxies named by `entries`, each an address (`"127.0.0.2"`,
    /// `"::1"`) or a CIDR network (`"10.0.0.0/8"`, `"fd00::/8"`); spaces
    /// around an entry are ignored. An entry that is neither, a prefix longer
    /// than its address, or a network with host bits set (`10.0.0.1/8`) is
    /// refused, named in the error.
    pub fn parse<I, S>(entries: I) -> Result<TrustedProxies, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nets = entries.into_iter().map(|e| parse_net(e.as_ref())).collect::<Result<_, _>>()?;
        Ok(TrustedProxies { nets })
    }

    /// `true` when no one is trusted.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` is a trusted proxy. An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`) matches its IPv4 entry.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = mapped(ip).to_bits();
        self.nets.iter().any(|&(net, prefix)| ip & mask(prefix) == net.to_bits())
    }

    /// The entries as canonical text: a single address bare (`127.0.0.2`), a
    /// network with its prefix (`10.0.0.0/8`); [`parse`](Self::parse) reads
    /// them back to an equal value.
    pub fn entries(&self) -> Vec<String> {
        let text = |ip: IpAddr, prefix, full| {
            if prefix == full { ip.to_string() } else { format!("{ip}/{prefix}") }
        };
        let entry = |&(net, prefix): &(Ipv6Addr, u8)| match net.to_ipv4_mapped() {
            Some(v4) if prefix >= 96 => text(IpAddr::V4(v4), prefix - 96, 32),
            _ => text(IpAddr::V6(net), prefix, 128),
        };
        self.nets.iter().map(entry).collect()
    }

    /// Who a request came from, given its TCP peer (`None` for a Unix
    /// socket) and its headers as (name, value); names are compared
    /// case-insensitively.
    ///
    /// From a peer that is not trusted, the client is the peer, whatever its
    /// headers say. From a trusted one, the chain is read from every
    /// `X-Forwarded-For` in order (the rightmost entry is the nearest hop), or
    /// where there is none from the `for=` of every `Forwarded`; entries may
    /// carry a port, which is dropped. Walking from the right, trusted
    /// entries are passed over and the first untrusted address is the client.
    /// An entry that is no address (garbage, `unknown`, an obfuscated `_name`,
    /// an empty one, or one past the 32nd) ends the walk at the last trusted
    /// address passed, the nearest the server can vouch for; a chain trusted
    /// throughout gives its leftmost entry, and no chain the peer.
    pub fn resolve<'a>(
        &self,
        peer: Option<SocketAddr>,
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> ClientAddr {
        let peer_ip = peer.map(|p| p.ip());
        let trusted = peer_ip.filter(|&ip| self.contains(ip));
        let mut through_proxy = trusted.is_some();
        let (mut xff, mut forwarded) = (Vec::new(), Vec::new());
        for (name, value) in headers {
            let Some(&header) = FORWARDING_HEADERS.iter().find(|h| h.eq_ignore_ascii_case(name)) else {
                continue;
            };
            through_proxy = true;
            match header {
                "X-Forwarded-For" if trusted.is_some() => xff.push(value),
                "Forwarded" if trusted.is_some() => forwarded.push(value),
                _ => {}
            }
        }
        let ip = match trusted {
            None => peer_ip,
            Some(peer) if !xff.is_empty() => {
                let chain = xff.iter().rev().flat_map(|v| v.rsplit(',')).map(parse_node);
                Some(self.walk(peer, chain))
            }
            Some(peer) if !forwarded.is_empty() => {
                let elements = |v| split_unquoted(v, ',').collect::<Vec<_>>().into_iter().rev();
                let chain = forwarded.iter().rev().flat_map(|v| elements(v));
                Some(self.walk(peer, chain.map(forwarded_for)))
            }
            Some(peer) => Some(peer),
        };
        ClientAddr { ip, through_proxy }
    }

    /// The first untrusted address of `chain` (nearest hop first), or the
    /// last trusted one before an unreadable entry or the end.
    fn walk(&self, peer: IpAddr, chain: impl Iterator<Item = Option<IpAddr>>) -> IpAddr {
        let mut nearest = peer;
        let mut chain = chain.take(MAX_HOPS);
        while let Some(Some(ip)) = chain.next() {
            if !self.contains(ip) {
                return ip;
            }
            nearest = ip;
        }
        nearest
    }
}

impl fmt::Debug for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TrustedProxies({})", self.entries().join(", "))
    }
}

/// An address in IPv6's space: an IPv4 one as its mapped form.
fn mapped(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// The top `prefix` of 128 bits.
fn mask(prefix: u8) -> u128 {
    !u128::MAX.checked_shr(prefix.into()).unwrap_or(0)
}

/// One entry of [`TrustedProxies::parse`].
fn parse_net(entry: &str) -> Result<(Ipv6Addr, u8), ConfigError> {
    let entry = entry.trim();
    let err = |rule| ConfigError::new("trusted_proxies", rule, entry);
    let (addr, prefix) = entry.split_once('/').map_or((entry, None), |(a, p)| (a, Some(p)));
    let addr: IpAddr = addr.parse().map_err(|_| err(RULE_ENTRY))?;
    let full = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => full,
        Some(p) if (1..=3).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()) => {
            p.parse::<u8>().ok().filter(|&p| p <= full).ok_or_else(|| err(RULE_PREFIX))?
        }
        Some(_) => return Err(err(RULE_ENTRY)),
    };
    let (net, prefix) = (mapped(addr), prefix + (128 - full));
    if net.to_bits() & !mask(prefix) != 0 {
        return Err(err(RULE_HOST_BITS));
    }
    Ok((net, prefix))
}

/// A chain entry's address: `1.2.3.4`, `1.2.3.4:80`, `::1`, `[::1]`,
/// `[::1]:80`, spaces around it allowed; a port may be RFC 7239's obfuscated
/// `_name`. Anything else is no address.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim_matches([' ', '\t']);
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    let (ip, port) = match node.strip_prefix('[') {
        Some(rest) => {
            let (v6, after) = rest.split_once(']')?;
            let port = if after.is_empty() { None } else { Some(after.strip_prefix(':')?) };
            (IpAddr::V6(v6.parse::<Ipv6Addr>().ok()?), port)
        }
        None => {
            let (v4, port) = node.split_once(':')?;
            (IpAddr::V4(v4.parse::<Ipv4Addr>().ok()?), Some(port))
        }
    };
    let port_ok = |p: &str| {
        let obfuscated = p.len() > 1
            && p.starts_with('_')
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        obfuscated || p.parse::<u16>().is_ok_and(|_| p.bytes().all(|b| b.is_ascii_digit()))
    };
    port.is_none_or(port_ok).then_some(ip)
}

/// The address of one `Forwarded` element's `for=`, if it has exactly one
/// and it is an address.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let mut value = None;
    for pair in split_unquoted(element, ';') {
        let Some((name, v)) = pair.split_once('=') else { continue };
        if name.trim_matches([' ', '\t']).eq_ignore_ascii_case("for") {
            if value.is_some() {
                return None;
            }
            value = Some(v.trim_matches([' ', '\t']));
        }
    }
    parse_node(unquote(value?)?)
}

/// `s` split at each `sep` outside a quoted string.
fn split_unquoted(s: &str, sep: char) -> impl Iterator<Item = &str> {
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let text = rest?;
        let (mut quoted, mut escaped) = (false, false);
        for (i, c) in text.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                c if c == sep && !quoted => {
                    rest = Some(&text[i + 1..]);
                    return Some(&text[..i]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(text)
    })
}

/// A token as is, or a quoted string's content; `None` for a broken one,
/// or one with escapes (an address has nothing to escape).
fn unquote(v: &str) -> Option<&str> {
    let Some(inner) = v.strip_prefix('"') else { return Some(v) };
    inner.strip_suffix('"').filter(|inner| !inner.contains(['\\', '"']))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn proxies(entries: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(entries).unwrap()
    }

    /// The client `proxies` sees behind `peer`, with these headers.
    fn client(proxies: &TrustedProxies, peer: &str, headers: &[(&str, &str)]) -> IpAddr {
        let peer = SocketAddr::new(ip(peer), 40000);
        proxies.resolve(Some(peer), headers.iter().copied()).ip.unwrap()
    }

    #[test]
    fn parses_addresses_and_networks() {
        let p = proxies(&["127.0.0.2", " 10.0.0.0/8 ", "::1", "fd00::/8", "192.168.1.0/32"]);
        assert_eq!(p.entries(), ["127.0.0.2", "10.0.0.0/8", "::1", "fd00::/8", "192.168.1.0"]);
        assert_eq!(TrustedProxies::parse(p.entries()).unwrap(), p, "entries read back");
        assert_eq!(format!("{p:?}"), "TrustedProxies(127.0.0.2, 10.0.0.0/8, ::1, fd00::/8, 192.168.1.0)");
        assert_eq!(proxies(&["0.0.0.0/0", "::/0"]).entries(), ["0.0.0.0/0", "::/0"]);
        let none = TrustedProxies::none();
        assert!(none.is_empty() && !none.contains(ip("::1")) && !p.is_empty());
        assert!(p.contains(ip("10.200.3.4")) && p.contains(ip("fd12::7")) && p.contains(ip("::1")));
        assert!(!p.contains(ip("fe80::1")) && !proxies(&["10.0.0.0/8"]).contains(ip("11.0.0.1")));
    }

    #[test]
    fn refuses_bad_entries_naming_them() {
        let bad: [(&str, &[&str]); 3] = [
            (
                RULE_ENTRY,
                &["", "localhost", "10.0.0.0/", "10.0.0.0/+8", "10.0.0.0/8/8", "1.2.3.4:80", "[::1]"],
            ),
            (RULE_PREFIX, &["10.0.0.0/33", "::/129", "10.0.0.0/999", "::ffff:10.0.0.0/129"]),
            (RULE_HOST_BITS, &["10.0.0.1/8", "fd00::1/8", "::ffff:10.0.0.1/104"]),
        ];
        for (rule, entries) in bad {
            for &entry in entries {
                let err = TrustedProxies::parse(["127.0.0.1", entry]).unwrap_err();
                assert_eq!((err.field(), err.rule(), err.value()), ("trusted_proxies", rule, entry));
            }
        }
        let err = TrustedProxies::parse(["10.0.0.1/8"]).unwrap_err();
        assert!(err.to_string().starts_with("trusted_proxies must be a CIDR network with no host bits"));
    }

    #[test]
    fn mapped_addresses_are_their_ipv4() {
        let p = proxies(&["10.0.0.0/8", "::ffff:192.0.2.1", "::ffff:198.51.100.0/120"]);
        assert_eq!(p.entries(), ["10.0.0.0/8", "192.0.2.1", "198.51.100.0/24"]);
        assert!(p.contains(ip("::ffff:10.1.2.3")) && p.contains(ip("192.0.2.1")));
        assert!(p.contains(ip("198.51.100.77")) && !p.contains(ip("::ffff:11.0.0.1")));
        // An IPv6 network over the mapped range holds the IPv4 addresses too.
        let all_mapped = proxies(&["::ffff:0:0/96"]);
        assert_eq!(all_mapped.entries(), ["0.0.0.0/0"]);
        assert!(proxies(&["::/0"]).contains(ip("203.0.113.7")));
        assert!(!proxies(&["0.0.0.0/0"]).contains(ip("2001:db8::1")));
    }

    #[test]
    fn an_untrusted_peer_is_the_client_but_its_headers_still_mark_it() {
        let p = proxies(&["127.0.0.2"]);
        let stranger = Some(SocketAddr::new(ip("198.51.100.9"), 5000));
        for name in ["X-Forwarded-For", "forwarded", "X-REAL-IP", "x-forwarded-host", "X-Forwarded-Proto"] {
            let got = p.resolve(stranger, [(name, "203.0.113.7")]);
            assert_eq!(got, ClientAddr { ip: Some(ip("198.51.100.9")), through_proxy: true }, "{name}");
        }
        let plain = p.resolve(stranger, [("Host", "example.com")]);
        assert_eq!(plain, ClientAddr { ip: Some(ip("198.51.100.9")), through_proxy: false });
        // Trusting no one, even loopback's headers are ignored.
        let none = TrustedProxies::none()
            .resolve(Some(SocketAddr::new(ip("127.0.0.2"), 1)), [("X-Forwarded-For", "1.1.1.1")]);
        assert_eq!(none, ClientAddr { ip: Some(ip("127.0.0.2")), through_proxy: true });
        // No peer: no address, whatever the headers claim.
        let unix = p.resolve(None, [("x-forwarded-for", "203.0.113.7")]);
        assert_eq!(unix, ClientAddr { ip: None, through_proxy: true });
    }

    #[test]
    fn a_trusted_peer_is_walked_past() {
        let p = proxies(&["127.0.0.2", "10.0.0.0/8"]);
        let peer = Some(SocketAddr::new(ip("127.0.0.2"), 1));
        assert_eq!(p.resolve(peer, []), ClientAddr { ip: Some(ip("127.0.0.2")), through_proxy: true });
        let xff = |v| client(&p, "127.0.0.2", &[("X-Forwarded-For", v)]);
        assert_eq!(xff("203.0.113.7"), ip("203.0.113.7"));
        // Proxies on the right are passed over; the client's own claims on the left are not read.
        assert_eq!(xff("6.6.6.6, 203.0.113.7, 10.1.1.1, 10.2.2.2"), ip("203.0.113.7"));
        // Every hop trusted: the leftmost.
        assert_eq!(xff("10.3.3.3, 10.1.1.1"), ip("10.3.3.3"));
        // Garbage stops the walk at the nearest trusted hop behind it.
        assert_eq!(xff("203.0.113.7, nonsense, 10.1.1.1"), ip("10.1.1.1"));
        assert_eq!(xff("203.0.113.7, , 10.1.1.1"), ip("10.1.1.1"));
        assert_eq!(xff("203.0.113.7, unknown"), ip("127.0.0.2"));
        assert_eq!(xff(""), ip("127.0.0.2"));
        // Ports and spaces are dropped.
        assert_eq!(xff(" 203.0.113.7:5678 ,10.1.1.1:80"), ip("203.0.113.7"));
        assert_eq!(xff("[2001:db8::1]:80"), ip("2001:db8::1"));
        assert_eq!(xff("\t[2001:db8::1]\t"), ip("2001:db8::1"));
        assert_eq!(xff("203.0.113.7:99999, 10.1.1.1"), ip("10.1.1.1"));
        // A mapped hop is trusted as its IPv4.
        assert_eq!(xff("203.0.113.7, ::ffff:10.1.1.1"), ip("203.0.113.7"));
        // Every X-Forwarded-For, in order.
        let headers = [
            ("X-Forwarded-For", "6.6.6.6, 203.0.113.7"),
            ("Host", "example.com"),
            ("x-forwarded-for", "10.1.1.1"),
            ("X-FORWARDED-FOR", "10.2.2.2"),
        ];
        assert_eq!(client(&p, "127.0.0.2", &headers), ip("203.0.113.7"));
        // X-Forwarded-For wins over Forwarded, whichever comes first.
        let both = [("Forwarded", "for=198.51.100.1"), ("X-Forwarded-For", "203.0.113.7")];
        assert_eq!(client(&p, "127.0.0.2", &both), ip("203.0.113.7"));
    }

    #[test]
    fn forwarded_is_read_per_rfc_7239() {
        let p = proxies(&["127.0.0.2", "10.0.0.0/8"]);
        let fwd = |v| client(&p, "127.0.0.2", &[("Forwarded", v)]);
        assert_eq!(fwd("for=203.0.113.7"), ip("203.0.113.7"));
        assert_eq!(fwd("For=\"203.0.113.7:4711\";proto=https"), ip("203.0.113.7"));
        assert_eq!(fwd("for=\"[2001:db8::1]:4711\", for=10.1.1.1;by=10.0.0.9"), ip("2001:db8::1"));
        assert_eq!(fwd("proto=http; FOR = \"[2001:db8::1]\" ; host=\"a;b,c\""), ip("2001:db8::1"));
        assert_eq!(fwd("for=\"[2001:db8::1]:_port\""), ip("2001:db8::1"));
        assert_eq!(fwd("for=\"203.0.113.\\7\""), ip("127.0.0.2"));
        // Not addresses: the walk stops at the nearest trusted hop.
        assert_eq!(fwd("for=203.0.113.7, for=unknown, for=10.1.1.1"), ip("10.1.1.1"));
        assert_eq!(fwd("for=203.0.113.7, for=_hidden"), ip("127.0.0.2"));
        assert_eq!(fwd("for=203.0.113.7, proto=https"), ip("127.0.0.2"));
        assert_eq!(fwd("for=203.0.113.7;for=6.6.6.6"), ip("127.0.0.2"));
        assert_eq!(fwd("for=\"203.0.113.7"), ip("127.0.0.2"));
        // A quoted comma does not split an element.
        assert_eq!(fwd("for=203.0.113.7;host=\"x,for=10.9.9.9\""), ip("203.0.113.7"));
        // Several headers, in order.
        let headers = [("Forwarded", "for=203.0.113.7"), ("FORWARDED", "for=10.1.1.1")];
        assert_eq!(client(&p, "127.0.0.2", &headers), ip("203.0.113.7"));
    }

    #[test]
    fn the_walk_reads_at_most_32_entries() {
        let p = proxies(&["10.0.0.0/8"]);
        // The client just within reach, then just past it.
        let mut chain: Vec<_> = (1..=31).map(|i| format!("10.0.0.{i}")).collect();
        chain.insert(0, "203.0.113.7".into());
        assert_eq!(client(&p, "10.9.9.9", &[("X-Forwarded-For", &chain.join(","))]), ip("203.0.113.7"));
        chain.insert(1, "10.0.0.200".into());
        let past = chain.join(",");
        assert_eq!(client(&p, "10.9.9.9", &[("X-Forwarded-For", &past)]), ip("10.0.0.200"));
        let fwd = vec!["for=10.0.0.1"; 40].join(",") + ",for=10.0.0.2";
        assert_eq!(client(&p, "10.9.9.9", &[("Forwarded", &fwd)]), ip("10.0.0.1"));
    }
}
