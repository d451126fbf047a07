//! Without the guard (`server::serve_unguarded`), the guard's private
//! `X-Watertight-*` headers are the client's word and mean nothing: a
//! request's client is its TCP peer and its deadline runs from when a request
//! thread took it. Loopback only.
#![cfg(feature = "tiny_http")]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tiny_http::{Request, Response, Server};
use watertight::server::{RequestContext, ServerConfig, serve_unguarded};

const BUDGET: Duration = Duration::from_secs(5);

#[test]
fn unguarded_requests_ignore_spoofed_peer_and_arrival_headers() {
    let server = Server::http("127.0.0.1:0").expect("bind a loopback port");
    let config = ServerConfig::builder().request_budget(BUDGET).build().expect("a valid config");
    let (seen, contexts) = mpsc::channel::<(RequestContext, Duration)>();
    let handle = serve_unguarded(server, 2, config, move |_req: &mut Request, ctx: &RequestContext| {
        // What the handler would have left to spend, measured on arrival.
        let _ = seen.send((ctx.clone(), ctx.remaining()));
        Response::from_string("ok").boxed()
    })
    .expect("start the server");
    let addr = handle.addr().to_ip().expect("a TCP address");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();

    // An arrival an hour after the guard's base instant (a deadline an hour
    // away), then the base instant itself (a deadline already past, or close
    // to it).
    for received in ["3600000000000", "0"] {
        let before = Instant::now();
        let mut resp = agent
            .get(format!("http://{addr}/"))
            .header("X-Watertight-Peer", "10.1.2.3:4444")
            .header("X-Watertight-Received", received)
            .call()
            .expect("an answer");
        let after = Instant::now();
        assert_eq!(resp.status().as_u16(), 200);
        assert_eq!(resp.body_mut().read_to_string().expect("a body"), "ok");
        let (ctx, remaining) = contexts.recv_timeout(Duration::from_secs(5)).expect("the handler ran");

        let peer = ctx.peer_addr().expect("a TCP peer");
        assert_eq!(peer.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST), "the TCP peer, not the header: {peer}");
        assert_ne!(peer.port(), 4444, "the client's own port, not the header's: {peer}");

        assert!(
            before <= ctx.received() && ctx.received() <= after,
            "received {received:?}: arrival {:?} after the request was sent, {:?} before its answer",
            ctx.received().checked_duration_since(before),
            after.checked_duration_since(ctx.received()),
        );
        assert_eq!(ctx.deadline() - ctx.received(), BUDGET, "received {received:?}");
        assert!(
            remaining <= BUDGET && remaining >= BUDGET - Duration::from_secs(3),
            "received {received:?}: {remaining:?} left of a {BUDGET:?} budget",
        );
    }
    handle.shutdown();
}
