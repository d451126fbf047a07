//! No peer can hold the edge: a per-peer cap on open connections, a
//! first-byte timeout shorter than the idle timeout, a trusted proxy exempt
//! from the cap, and an event stream to an HTTP/1.0 client written as it goes
//! and ended when its client leaves.
//!
//! The attacker's connections come from 127.0.0.3 (a client socket bound
//! with `socket2`; any address of 127/8 is this host), the other clients'
//! from 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use tiny_http::{Header, Request, Response, StatusCode};
use watertight::server::{RequestContext, ServerConfig, ServerHandle, TrustedProxies, serve_with};

const TIMEOUT: Duration = Duration::from_secs(5);
/// The attacker's address.
const ATTACKER: &str = "127.0.0.3";
/// An event stream's interval in these tests: long enough that "at the next
/// event" (within one interval of the client's leaving) and "at the one
/// after" (two) stay apart on a loaded machine.
const INTERVAL: Duration = Duration::from_secs(2);

/// A stream of one small event every [`INTERVAL`] for at most 30 s, which
/// counts itself in `open` while its body lives.
struct Events {
    open: Arc<AtomicUsize>,
    pending: Vec<u8>,
    at: usize,
    sent: u32,
    next: Instant,
    ends: Instant,
}

impl Read for Events {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.pending.len() {
            let now = Instant::now();
            if now >= self.ends {
                return Ok(0);
            }
            std::thread::sleep(self.next.saturating_duration_since(now));
            self.next += INTERVAL;
            self.pending = format!("event: tick\ndata: {}\n\n", self.sent).into_bytes();
            self.at = 0;
            self.sent += 1;
        }
        let n = buf.len().min(self.pending.len() - self.at);
        buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A server of 4 request threads: `/stream` is an event stream counted in
/// the returned `open`; any other path answers `200 ok`.
fn start(config: ServerConfig) -> (ServerHandle, SocketAddr, Arc<AtomicUsize>) {
    let open = Arc::new(AtomicUsize::new(0));
    let streams = Arc::clone(&open);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let handle = serve_with(listener, 4, config, move |req: &mut Request, _: &RequestContext| {
        if req.url() != "/stream" {
            return Response::from_string("ok").boxed();
        }
        streams.fetch_add(1, Ordering::SeqCst);
        let now = Instant::now();
        let body = Events {
            open: Arc::clone(&streams),
            pending: Vec::new(),
            at: 0,
            sent: 0,
            next: now,
            ends: now + Duration::from_secs(30),
        };
        let headers = vec![Header::from_bytes("Content-Type", "text/event-stream").unwrap()];
        Response::new(StatusCode(200), headers, body, None, None).boxed()
    })
    .expect("start the server");
    let addr = handle.addr().to_ip().expect("a TCP address");
    (handle, addr, open)
}

/// A connection to `addr` from the address `from`.
pub(crate) fn connect_from(from: &str, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    let local: IpAddr = from.parse().expect("an address");
    socket.bind(&SocketAddr::new(local, 0).into())?;
    socket.connect_timeout(&addr.into(), TIMEOUT)?;
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    Ok(stream)
}

/// `GET path` on a new connection from 127.0.0.1: the status (0 when no
/// answer came) and how long it took.
fn get(addr: SocketAddr, path: &str) -> (u16, Duration) {
    let began = Instant::now();
    let status = (|| -> Option<u16> {
        let mut stream = connect_from("127.0.0.1", addr).ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).ok()?;
        let mut got = Vec::new();
        let _ = stream.read_to_end(&mut got);
        String::from_utf8_lossy(&got).split(' ').nth(1)?.parse().ok()
    })();
    (status.unwrap_or(0), began.elapsed())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// What a connection got before its close (or within `within`).
fn read_all(stream: &mut TcpStream, within: Duration) -> String {
    let _ = stream.set_read_timeout(Some(within));
    let mut got = Vec::new();
    let _ = stream.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}

/// 300 silent connections from [`ATTACKER`] to `target`, then 30 `GET`s
/// from 127.0.0.1 to it, the first within the attack's first second, each
/// followed by one to `control`, a twin server no one attacks: every one
/// answered `200`, and the attacked median within 2x the twin's, or 20 ms
/// more: beside busy loops a loopback `GET` waits for one scheduler slice
/// (4 ms or so) or a few now and then, in either server, and the median of
/// 30 jumps between them. An attacker holding the edge costs seconds. The twin, asked at the same
/// moments, is the healthy latency whatever else the machine is doing.
/// Returns the silent connections.
fn hold_and_probe(target: (SocketAddr, &str), control: (SocketAddr, &str)) -> Vec<TcpStream> {
    let probe = |(addr, path): (SocketAddr, &str), what: &str, i: usize| {
        let (status, took) = get(addr, path);
        assert_eq!(status, 200, "GET {path} #{i} from 127.0.0.1 {what}");
        took
    };
    let before = median((0..30).map(|i| probe(target, "before the attack", i)).collect());
    let attack_began = Instant::now();
    let idle: Vec<TcpStream> = (0..300)
        .map(|i| connect_from(ATTACKER, target.0).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    let opened = attack_began.elapsed();
    let (mut attacked, mut healthy) = (Vec::new(), Vec::new());
    for i in 0..30 {
        attacked.push(probe(target, &format!("{:?} into the attack", attack_began.elapsed()), i));
        if i == 0 {
            let first = attack_began.elapsed() - opened;
            assert!(
                first < Duration::from_secs(1),
                "the first answer came {first:?} after the 300th connection"
            );
        }
        healthy.push(probe(control, "to the twin", i));
    }
    let (attacked, healthy) = (median(attacked), median(healthy));
    assert!(
        attacked <= (2 * healthy).max(healthy + Duration::from_millis(20)),
        "median GET {} {attacked:?} under attack, {healthy:?} from its twin",
        target.1
    );
    eprintln!(
        "300 idle connections from {ATTACKER}: GET {} from 127.0.0.1 median {attacked:?}; its twin {healthy:?}; \
         before the attack {before:?}",
        target.1
    );
    idle
}

#[test]
fn three_hundred_idle_connections_from_one_address_leave_the_edge_to_the_others() {
    // The case, with the defaults: 256 connections, a quarter of
    // them per peer, a first byte within 5 s.
    let (handle, addr, _) = start(ServerConfig::default());
    let (twin, twin_addr, _) = start(ServerConfig::default());
    let idle = hold_and_probe((addr, "/orders/1"), (twin_addr, "/orders/1"));
    // The attacker holds its share, no more; the rest were refused at once.
    let held = handle.connections();
    assert!(held <= ServerConfig::default().max_connections_per_peer() + 1, "{held} connections open");
    let mut refused = 0;
    for mut conn in idle.into_iter().rev().take(200) {
        let text = read_all(&mut conn, Duration::from_millis(500));
        if text.starts_with("HTTP/1.1 503") {
            assert!(text.contains("SERVER_BUSY") && text.contains("from your address"), "{text}");
            refused += 1;
        }
    }
    assert_eq!(refused, 200, "the last 200 of 300 connections from one address are refused");
    handle.shutdown();
    twin.shutdown();
}

#[test]
fn three_hundred_idle_connections_leave_the_checkouts_orders_to_the_others() {
    let _turn = crate::edge::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = crate::checkout_bin::Checkout::start(&[]);
    let twin = crate::checkout_bin::Checkout::start(&[]);
    let order = crate::checkout_bin::place_order(server.addr, "alice").expect("an order to look up");
    let twin_order = crate::checkout_bin::place_order(twin.addr, "alice").expect("an order to look up");
    let orders = (format!("/orders/{order}"), format!("/orders/{twin_order}"));
    drop(hold_and_probe((server.addr, &orders.0), (twin.addr, &orders.1)));
}

#[test]
fn a_peer_at_its_cap_is_refused_at_once_and_its_silent_connections_close_at_the_first_byte_timeout() {
    let first_byte = Duration::from_secs(1);
    let config = ServerConfig::builder()
        .max_connections(64)
        .max_connections_per_peer(8)
        .first_byte_timeout(first_byte)
        .idle_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let (handle, addr, _) = start(config);
    let began = Instant::now();
    let mut idle: Vec<TcpStream> = (0..40).map(|_| connect_from(ATTACKER, addr).expect("connect")).collect();
    assert_eq!(get(addr, "/orders/1").0, 200, "another address is served");
    // The ninth and later are refused at once (all of them, before the
    // first eight are closed).
    for (i, conn) in idle[8..].iter_mut().enumerate() {
        let text = read_all(conn, Duration::from_millis(500));
        assert!(text.starts_with("HTTP/1.1 503") && text.contains("SERVER_BUSY"), "{}: {text}", i + 8);
    }
    assert!(began.elapsed() < first_byte, "{:?}", began.elapsed());
    // The first eight, silent, are closed at the first-byte timeout (the
    // idle timeout is 10 s), without an answer.
    for (i, conn) in idle[..8].iter_mut().enumerate() {
        let text = read_all(conn, TIMEOUT);
        assert_eq!(text, "", "connection {i}");
    }
    let closed = began.elapsed();
    assert!(closed >= first_byte && closed < Duration::from_secs(3), "closed after {closed:?}");
    // Its share is free again.
    let mut again = connect_from(ATTACKER, addr).expect("connect");
    again.write_all(b"GET /orders/1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = BufReader::new(again);
    let mut line = String::new();
    answer.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line} ({} open)", handle.connections());
    // Between requests a kept-alive connection waits the idle timeout, not
    // the first-byte timeout.
    let mut rest = String::new();
    while answer.read_line(&mut rest).unwrap() > 2 {
        rest.clear();
    }
    let mut body = [0u8; 2];
    answer.read_exact(&mut body).unwrap();
    std::thread::sleep(first_byte + Duration::from_millis(500));
    answer.get_mut().write_all(b"GET /orders/2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let second = read_all(answer.get_mut(), TIMEOUT);
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    handle.shutdown();
}

#[test]
fn a_trusted_proxy_is_exempt_from_the_per_peer_cap() {
    let config = ServerConfig::builder()
        .max_connections(64)
        .max_connections_per_peer(2)
        .trusted_proxies(TrustedProxies::parse(["127.0.0.2"]).unwrap())
        .build()
        .unwrap();
    let (handle, addr, _) = start(config);
    let proxied: Vec<TcpStream> =
        (0..10).map(|_| connect_from("127.0.0.2", addr).expect("connect")).collect();
    let mine: Vec<TcpStream> = (0..3).map(|_| connect_from(ATTACKER, addr).expect("connect")).collect();
    for (i, mut conn) in proxied.into_iter().enumerate() {
        conn.write_all(b"GET /orders/1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let text = read_all(&mut conn, TIMEOUT);
        assert!(text.starts_with("HTTP/1.1 200"), "the proxy's connection {i}: {text}");
    }
    let mut third = mine.into_iter().nth(2).unwrap();
    let text = read_all(&mut third, TIMEOUT);
    assert!(text.starts_with("HTTP/1.1 503"), "a third from an untrusted peer: {text}");
    handle.shutdown();
}

/// Opens `/stream` over HTTP/1.0 and reads its head and first `events`
/// events as they come: the head, and the connection.
fn open_http10_stream(addr: SocketAddr, events: usize) -> (String, BufReader<TcpStream>) {
    let mut conn = connect_from("127.0.0.1", addr).expect("connect");
    conn.write_all(b"GET /stream HTTP/1.0\r\n\r\n").unwrap();
    let mut conn = BufReader::new(conn);
    let (mut head, mut line) = (String::new(), String::new());
    while conn.read_line(&mut line).expect("the head, as it comes") > 2 {
        head.push_str(&line);
        line.clear();
    }
    let mut seen = 0;
    while seen < events {
        line.clear();
        conn.read_line(&mut line).expect("an event, as it comes");
        assert!(!line.is_empty(), "the stream ended; head {head}");
        if line.starts_with("data: ") {
            seen += 1;
        }
    }
    (head, conn)
}

#[test]
fn an_http10_event_stream_is_written_as_it_goes_and_a_client_gone_frees_its_thread_at_the_next_event() {
    let (handle, addr, open) = start(ServerConfig::default());
    let began = Instant::now();
    let (head, conn) = open_http10_stream(addr, 2);
    // Two events, one interval apart, as they came: not buffered to the end.
    assert!(began.elapsed() < INTERVAL + INTERVAL / 2, "{:?}", began.elapsed());
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("connection: close"), "{head}");
    assert!(lower.contains("content-type: text/event-stream"), "{head}");
    assert!(!lower.contains("content-length") && !lower.contains("transfer-encoding"), "{head}");
    assert_eq!((open.load(Ordering::SeqCst), handle.busy()), (1, 1));

    // The client leaves just after an event: by the next one its stream's
    // body is dropped and its request thread free.
    drop(conn);
    let left = Instant::now();
    while open.load(Ordering::SeqCst) > 0 || handle.busy() > 0 {
        assert!(
            left.elapsed() < INTERVAL + INTERVAL / 2,
            "the stream of a client gone is still open {:?} later (open {}, busy {})",
            left.elapsed(),
            open.load(Ordering::SeqCst),
            handle.busy()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("an HTTP/1.0 stream client gone: its thread freed {:?} after it left", left.elapsed());
    // A HEAD of it over HTTP/1.0 is the head alone, then the close.
    let mut conn = connect_from("127.0.0.1", addr).expect("connect");
    conn.write_all(b"HEAD /stream HTTP/1.0\r\n\r\n").unwrap();
    let text = read_all(&mut conn, TIMEOUT);
    assert!(text.starts_with("HTTP/1.0 200") && text.ends_with("\r\n\r\n"), "{text}");
    handle.shutdown();
}

/// `GET /circuits/stream` over HTTP/1.0 on the checkout example: the head,
/// and the connection read up to the end of the first event (or the close).
fn checkout_http10_stream(addr: SocketAddr) -> (String, BufReader<TcpStream>) {
    let mut conn = connect_from("127.0.0.1", addr).expect("connect");
    conn.write_all(b"GET /circuits/stream HTTP/1.0\r\n\r\n").unwrap();
    let mut conn = BufReader::new(conn);
    let (mut text, mut line) = (String::new(), String::new());
    let mut in_event = false;
    loop {
        line.clear();
        if conn.read_line(&mut line).unwrap_or(0) == 0 {
            return (text, conn);
        }
        text.push_str(&line);
        if !text.contains("\r\n\r\n") {
            continue;
        }
        in_event |= line.starts_with("event: ");
        if in_event && line == "\n" {
            return (text, conn);
        }
    }
}

#[test]
fn the_checkout_dashboards_stream_to_an_http10_client_goes_as_it_goes_and_frees_its_place_when_it_leaves() {
    let _turn = crate::edge::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = crate::checkout_bin::Checkout::start(&[]);
    let (first, first_conn) = checkout_http10_stream(server.addr);
    assert!(first.starts_with("HTTP/1.0 200") && first.contains("Connection: close\r\n"), "{first}");
    assert!(!first.to_ascii_lowercase().contains("content-length"), "{first}");
    let (second, _second_conn) = checkout_http10_stream(server.addr);
    assert!(second.starts_with("HTTP/1.0 200"), "{second}");
    // Both places taken.
    let (third, _) = checkout_http10_stream(server.addr);
    assert!(third.starts_with("HTTP/1.0 503") && third.contains("TOO_MANY_STREAMS"), "{third}");

    // The first client leaves: by the next event (one a second) its place
    // and its request thread are free.
    drop(first_conn);
    let left = Instant::now();
    loop {
        let (again, _conn) = checkout_http10_stream(server.addr);
        if again.starts_with("HTTP/1.0 200") {
            break;
        }
        assert!(again.contains("TOO_MANY_STREAMS"), "{again}");
        assert!(
            // One event a second: at the next, not the one after (2 s).
            left.elapsed() < Duration::from_millis(1800),
            "the place is still held {:?} later",
            left.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("checkout: an HTTP/1.0 stream client gone, its place free {:?} after it left", left.elapsed());
    drop(server);

    // Without the guard tiny_http would buffer it whole: refused, and said why.
    let unguarded = crate::checkout_bin::Checkout::start(&["--no-guard"]);
    let (refused, _) = checkout_http10_stream(unguarded.addr);
    assert!(
        refused.starts_with("HTTP/1.0 505") && refused.contains("HTTP_VERSION_NOT_SUPPORTED"),
        "{refused}"
    );
}
