//! Trusted proxies, through real nginx (`examples/checkout/nginx.conf`,
//! which connects from 127.0.0.2): a forwarding header is believed only from
//! the configured proxy, and a request that came through any proxy needs the
//! admin token, on the checkout binary. Skipped, saying so, without nginx.
#![cfg(all(feature = "ureq", feature = "tiny_http", feature = "prometheus"))]

use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::time::Duration;

use tiny_http::{Request, Response};
use watertight::server::{RequestContext, ServerConfig, TrustedProxies, serve_with};

use crate::checkout_bin::{self, Checkout};
use crate::nginx;

const TOKEN: &str = "proxy-test-admin-token";
const TIMEOUT: Duration = Duration::from_secs(5);

fn post_fault(addr: SocketAddr, extra: &str) -> u16 {
    let request = format!(
        "POST /_faults/fraud HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: 7\r\nConnection: close\r\n\r\nhealthy"
    );
    checkout_bin::exchange(addr, request.as_bytes(), TIMEOUT).expect("an answer").status
}

#[test]
fn admin_routes_through_nginx_need_the_token_and_forged_forwarding_is_not_believed() {
    if !nginx::installed() {
        eprintln!(
            "SKIPPED admin_routes_through_nginx...: `nginx` is not installed (apt-get install -y nginx)"
        );
        return;
    }
    let checkout = Checkout::start(&["--trusted-proxy", "127.0.0.2", "--admin-token", TOKEN]);
    let proxy = nginx::Nginx::start(checkout.addr);
    let token = format!("X-Admin-Token: {TOKEN}\r\n");
    // Through nginx, from loopback: a proxy all the same.
    assert_eq!(post_fault(proxy.addr, ""), 403, "through nginx without the token");
    assert_eq!(post_fault(proxy.addr, "X-Admin-Token: wrong-token-x\r\n"), 403, "a wrong token");
    assert_eq!(post_fault(proxy.addr, &token), 200, "through nginx with the token");
    // Straight to the guard from 127.0.0.1, which is no trusted proxy: a
    // forged header is not believed, and it marks the request as proxied.
    assert_eq!(post_fault(checkout.addr, "X-Forwarded-For: 127.0.0.1\r\n"), 403, "forged X-Forwarded-For");
    assert_eq!(post_fault(checkout.addr, "Forwarded: for=127.0.0.1\r\n"), 403, "forged Forwarded");
    assert_eq!(post_fault(checkout.addr, &format!("X-Forwarded-For: 127.0.0.1\r\n{token}")), 200);
    // A local client with no forwarding header needs none.
    assert_eq!(post_fault(checkout.addr, ""), 200, "a local client");
    drop(proxy);
}

/// A guarded server with 127.0.0.2 as its one trusted proxy, answering what
/// it believes: `client_ip through_proxy peer_ip`.
fn believer() -> (watertight::server::ServerHandle, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let config = ServerConfig::builder()
        .trusted_proxies(TrustedProxies::parse(["127.0.0.2"]).expect("a valid list"))
        .build()
        .expect("a valid config");
    let handle = serve_with(listener, 2, config, |_: &mut Request, ctx: &RequestContext| {
        let client = ctx.client_ip().map_or("none".to_owned(), |ip| ip.to_string());
        let peer = ctx.peer_addr().map_or("none".to_owned(), |p| p.ip().to_string());
        Response::from_string(format!("{client} {} {peer}", ctx.through_proxy())).boxed()
    })
    .expect("start the server");
    let addr = handle.addr().to_ip().expect("a TCP address");
    (handle, addr)
}

/// `curl` from the local address `from`, with `headers`: the body.
fn curl_from(from: &str, url: &str, headers: &[&str]) -> Option<String> {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "--max-time", "5", "--interface", from, url]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_client_is_read_from_forwarding_headers_of_the_trusted_proxy_only() {
    let (handle, addr) = believer();
    let url = format!("http://{addr}/");
    let forged = "X-Forwarded-For: 203.0.113.7";
    // Straight, no header: the peer, not proxied.
    let plain = checkout_bin::get(addr, "/", TIMEOUT).expect("an answer");
    assert_eq!(plain.body, "127.0.0.1 false 127.0.0.1");
    // Straight from 127.0.0.1 with a forged header: not believed, proxied.
    let request = format!("GET / HTTP/1.1\r\nHost: x\r\n{forged}\r\nConnection: close\r\n\r\n");
    let answer = checkout_bin::exchange(addr, request.as_bytes(), TIMEOUT).expect("an answer");
    assert_eq!(answer.body, "127.0.0.1 true 127.0.0.1");
    match (curl_from("127.0.0.2", &url, &[forged]), curl_from("127.0.0.3", &url, &[forged])) {
        (Some(trusted), Some(other)) => {
            // From the trusted proxy: believed.
            assert_eq!(trusted, "203.0.113.7 true 127.0.0.2");
            // From another loopback address: not.
            assert_eq!(other, "127.0.0.3 true 127.0.0.3");
        }
        _ => eprintln!("SKIPPED the curl --interface half: curl cannot bind 127.0.0.2/127.0.0.3 here"),
    }
    if nginx::installed() {
        let proxy = nginx::Nginx::start(addr);
        // nginx replaces the client's own header with the address it saw.
        let request = format!("GET / HTTP/1.1\r\nHost: x\r\n{forged}\r\nConnection: close\r\n\r\n");
        let answer = checkout_bin::exchange(proxy.addr, request.as_bytes(), TIMEOUT).expect("an answer");
        assert_eq!(answer.body, "127.0.0.1 true 127.0.0.2", "through nginx");
    } else {
        eprintln!("SKIPPED the nginx half: `nginx` is not installed");
    }
    handle.shutdown();
}
