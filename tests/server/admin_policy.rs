//! The checkout example's admin policy, a pure function: tested with
//! addresses that are never sent a packet.

#[path = "../../examples/checkout/admin.rs"]
#[allow(dead_code)] // the routes use the rest
mod admin;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use admin::{Granted, Refused, admin_access, check_token, is_loopback};

const TOKEN: &str = "s3cret-admin-token";

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("a socket address")
}

#[test]
fn loopback_clients_need_no_token() {
    for client in ["127.0.0.1:50000", "127.1.2.3:1", "[::1]:443", "[::ffff:127.0.0.1]:8080"] {
        for configured in [None, Some(TOKEN)] {
            for presented in [None, Some("wrong"), Some(TOKEN)] {
                assert_eq!(
                    admin_access(Some(addr(client)), false, presented, configured),
                    Ok(Granted::Loopback),
                    "{client} {presented:?} {configured:?}"
                );
            }
        }
    }
}

#[test]
fn other_clients_need_the_token() {
    let others = [
        "10.0.0.7:40000",
        "192.168.1.20:5555",
        "203.0.113.9:1234",
        "0.0.0.0:80",
        "[2001:db8::1]:443",
        "[::ffff:10.0.0.7]:8080",
        "[::]:1",
        "128.0.0.1:1",
    ];
    for client in others {
        let c = Some(addr(client));
        assert_eq!(admin_access(c, false, Some(TOKEN), Some(TOKEN)), Ok(Granted::Token), "{client}");
        assert_eq!(admin_access(c, false, None, Some(TOKEN)), Err(Refused::NoToken), "{client}");
        assert_eq!(admin_access(c, false, Some("s3cret-admin-tokeN"), Some(TOKEN)), Err(Refused::WrongToken));
        assert_eq!(admin_access(c, false, Some("s3cret"), Some(TOKEN)), Err(Refused::WrongToken), "a prefix");
        assert_eq!(admin_access(c, false, Some(""), Some(TOKEN)), Err(Refused::WrongToken), "empty");
        assert_eq!(admin_access(c, false, Some(TOKEN), None), Err(Refused::NoTokenConfigured), "{client}");
    }
    // An unknown client address is not loopback.
    assert_eq!(admin_access(None, false, None, None), Err(Refused::NoTokenConfigured));
    assert_eq!(admin_access(None, false, Some(TOKEN), Some(TOKEN)), Ok(Granted::Token));
}

#[test]
fn a_loopback_peer_through_a_proxy_needs_the_token() {
    // nginx on this host connects from loopback for every client.
    for peer in ["127.0.0.1:50000", "127.0.0.2:1", "[::1]:443"] {
        let p = Some(addr(peer));
        assert_eq!(admin_access(p, true, None, Some(TOKEN)), Err(Refused::NoToken), "{peer}");
        assert_eq!(admin_access(p, true, Some("wrong"), Some(TOKEN)), Err(Refused::WrongToken), "{peer}");
        assert_eq!(admin_access(p, true, Some(TOKEN), Some(TOKEN)), Ok(Granted::Token), "{peer}");
        assert_eq!(admin_access(p, true, Some(TOKEN), None), Err(Refused::NoTokenConfigured), "{peer}");
    }
}

#[test]
fn loopback_is_exactly_the_loopback_ranges() {
    assert!(is_loopback(IpAddr::V4(Ipv4Addr::new(127, 255, 255, 254))));
    assert!(is_loopback(IpAddr::V6(Ipv6Addr::LOCALHOST)));
    assert!(!is_loopback(IpAddr::V4(Ipv4Addr::UNSPECIFIED)));
    assert!(!is_loopback(IpAddr::V6(Ipv6Addr::UNSPECIFIED)));
    assert!(!is_loopback(IpAddr::V4(Ipv4Addr::new(126, 255, 255, 255))));
    // ::127.0.0.1 (IPv4-compatible, deprecated) is not a loopback address.
    assert!(!is_loopback("::127.0.0.1".parse().unwrap()));
}

#[test]
fn tokens_worth_checking() {
    assert!(check_token(TOKEN).is_ok());
    assert!(check_token("").is_err());
    assert!(check_token("short").is_err());
    assert!(check_token("has a space in it").is_err());
    assert!(check_token("newline\nin-token").is_err());
}
