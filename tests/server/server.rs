//! The shared request pool (`watertight::server`) over real loopback sockets.
#![cfg(feature = "tiny_http")]

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tiny_http::{Request, Response, ResponseBox};
use watertight::server::{RequestContext, ServerHandle, serve};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into()
}

fn start<H>(threads: usize, handler: H) -> (ServerHandle, SocketAddr)
where
    H: Fn(&mut Request) -> ResponseBox + Send + Sync + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let handle = serve(listener, threads, move |req: &mut Request, _: &RequestContext| handler(req))
        .expect("start the server");
    let addr = handle.addr().to_ip().expect("a TCP address");
    (handle, addr)
}

fn get(agent: &ureq::Agent, addr: SocketAddr, path: &str) -> (u16, String) {
    let mut resp = agent.get(format!("http://{addr}{path}")).call().expect("an answer");
    let status = resp.status().as_u16();
    (status, resp.body_mut().read_to_string().expect("a text body"))
}

#[test]
fn requests_run_on_named_pool_threads() {
    let (handle, addr) = start(3, |_req| {
        let name = std::thread::current().name().unwrap_or("unnamed").to_owned();
        Response::from_string(name).boxed()
    });
    assert_eq!(handle.threads(), 3);
    let agent = agent();
    for _ in 0..10 {
        let (status, name) = get(&agent, addr, "/");
        assert_eq!(status, 200);
        let i: usize = name
            .strip_prefix("watertight-http-")
            .unwrap_or_else(|| panic!("unexpected thread name {name:?}"))
            .parse()
            .expect("a thread index");
        assert!(i < 3, "{name}");
    }
    handle.shutdown();
}

#[test]
fn busy_counts_requests_in_flight() {
    const N: usize = 3;
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let release_rx = Mutex::new(release_rx);
    let (handle, addr) = start(4, move |_req| {
        entered_tx.lock().unwrap().send(()).unwrap();
        // Bounded: a test that goes wrong answers after 5 s instead of hanging.
        let _ = release_rx.lock().unwrap().recv_timeout(Duration::from_secs(5));
        Response::from_string("done").boxed()
    });
    assert_eq!(handle.busy(), 0);

    let clients: Vec<_> = (0..N)
        .map(|_| {
            std::thread::spawn(move || {
                let agent = agent();
                get(&agent, addr, "/slow").0
            })
        })
        .collect();
    for _ in 0..N {
        entered_rx.recv_timeout(Duration::from_secs(5)).expect("a handler entered");
    }
    assert_eq!(handle.busy(), N, "every held request counts as busy");

    for _ in 0..N {
        release_tx.send(()).unwrap();
    }
    for c in clients {
        assert_eq!(c.join().unwrap(), 200);
    }
    // The count drops once `respond` has returned, which may be a moment
    // after the client read its answer: poll, bounded.
    let until = Instant::now() + Duration::from_secs(5);
    while handle.busy() != 0 && Instant::now() < until {
        std::thread::yield_now();
    }
    assert_eq!(handle.busy(), 0);
    handle.shutdown();
}

#[test]
fn a_panicking_handler_answers_500_and_keeps_its_thread() {
    // One thread: if the panic killed it, the second request would never be answered.
    let (handle, addr) = start(1, |req| {
        if req.url() == "/boom" {
            panic!("handler exploded");
        }
        Response::from_string("still here").boxed()
    });
    let agent = agent();
    let (status, body) = get(&agent, addr, "/boom");
    assert_eq!(status, 500);
    let json: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    assert_eq!(json["code"], "INTERNAL_ERROR");
    assert!(!body.contains("exploded"), "the panic message stays in the log: {body}");

    for _ in 0..3 {
        assert_eq!(get(&agent, addr, "/ok"), (200, "still here".to_owned()));
    }
    assert_eq!(handle.busy(), 0);
    handle.shutdown();
}

#[test]
fn shutdown_finishes_the_request_in_flight_then_joins_every_thread() {
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let release_rx = Mutex::new(release_rx);
    let live = Arc::new(()); // one clone per running handler closure owner
    let live_in_handler = Arc::clone(&live);
    let (handle, addr) = start(4, move |_req| {
        let _keep = &live_in_handler;
        entered_tx.lock().unwrap().send(()).unwrap();
        let _ = release_rx.lock().unwrap().recv_timeout(Duration::from_secs(5));
        Response::from_string("finished").boxed()
    });

    let client = std::thread::spawn(move || get(&agent(), addr, "/held"));
    entered_rx.recv_timeout(Duration::from_secs(5)).expect("the request reached a handler");

    let (done_tx, done_rx) = mpsc::channel();
    let stopper = std::thread::spawn(move || {
        let started = Instant::now();
        handle.shutdown();
        done_tx.send(started.elapsed()).unwrap();
    });
    // Shutdown waits for the request in flight.
    assert!(done_rx.recv_timeout(Duration::from_millis(200)).is_err(), "shutdown did not wait");
    release_tx.send(()).unwrap();
    let took = done_rx.recv_timeout(Duration::from_secs(5)).expect("shutdown returned");
    stopper.join().unwrap();
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(client.join().unwrap(), (200, "finished".to_owned()));

    // Every thread has exited and dropped its share of the handler (and the
    // handler its captures): only the test's own reference is left.
    assert_eq!(Arc::strong_count(&live), 1);
    // The listener is closed: nothing answers any more.
    let after = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(2)))
        .build()
        .new_agent()
        .get(format!("http://{addr}/"))
        .call();
    assert!(after.is_err(), "a request was answered after shutdown: {after:?}");
}

#[test]
fn dropping_the_handle_shuts_down() {
    let live = Arc::new(());
    let live_in_handler = Arc::clone(&live);
    let (handle, addr) = start(2, move |_req| {
        let _keep = &live_in_handler;
        Response::from_string("ok").boxed()
    });
    assert_eq!(get(&agent(), addr, "/").0, 200);
    drop(handle);
    assert_eq!(Arc::strong_count(&live), 1, "threads and handler are gone");
}

#[test]
fn zero_threads_means_one() {
    let (handle, addr) = start(0, |_req| Response::from_string("ok").boxed());
    assert_eq!(handle.threads(), 1);
    assert_eq!(get(&agent(), addr, "/").0, 200);
    assert!(format!("{handle:?}").contains("threads: 1"));
    handle.shutdown();
}

/// The handler's context: a deadline from the request budget that a client's
/// `X-Request-Timeout` can shorten but not lengthen, the client's address
/// across the guard's hop, and the pool's own state.
#[test]
fn the_handler_sees_its_deadline_its_client_and_the_pool() {
    let config =
        watertight::server::ServerConfig::builder().request_budget(Duration::from_secs(2)).build().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let handle =
        watertight::server::serve_with(listener, 3, config, |_req: &mut Request, ctx: &RequestContext| {
            let budget = ctx.deadline() - ctx.received();
            let peer = ctx.peer_addr().map(|p| p.ip().to_string()).unwrap_or_default();
            Response::from_string(format!("{} {} {} {}", budget.as_millis(), peer, ctx.busy(), ctx.threads()))
                .boxed()
        })
        .expect("start the server");
    let addr = handle.addr().to_ip().expect("a TCP address");
    let agent = agent();
    let ask = |timeout: Option<&str>| {
        let mut req = agent.get(format!("http://{addr}/"));
        if let Some(t) = timeout {
            req = req.header("X-Request-Timeout", t);
        }
        let mut resp = req.call().expect("an answer");
        (resp.status().as_u16(), resp.body_mut().read_to_string().expect("a body"))
    };
    let fields = |body: &str| body.split(' ').map(str::to_owned).collect::<Vec<_>>();

    let (status, body) = ask(None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(fields(&body), ["2000", "127.0.0.1", "1", "3"], "budget, peer, busy, threads");
    assert_eq!(fields(&ask(Some("250ms")).1)[0], "250", "a client may shorten the budget");
    assert_eq!(fields(&ask(Some("1")).1)[0], "1", "a bare number is milliseconds");
    assert_eq!(fields(&ask(Some("60s")).1)[0], "2000", "never lengthen it");
    let (status, body) = ask(Some("soon"));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("INVALID_REQUEST_TIMEOUT"), "{body}");
    // A client cannot pose as another address or arrival through the guard's headers.
    let mut resp = agent
        .get(format!("http://{addr}/"))
        .header("X-Watertight-Peer", "203.0.113.9:1")
        .header("X-Watertight-Received", "1")
        .call()
        .expect("an answer");
    let body = resp.body_mut().read_to_string().unwrap();
    assert_eq!(fields(&body)[..2], ["2000", "127.0.0.1"], "{body}");
    handle.shutdown();
}
