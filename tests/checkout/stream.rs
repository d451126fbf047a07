//! The checkout example's `GET /circuits/stream` (Server-Sent Events) and
//! `GET /circuits/events`, against the real binary on loopback; and the frames
//! of `examples/checkout/sse.rs`, included by path.
#![cfg(all(
    feature = "ureq",
    feature = "tiny_http",
    feature = "prometheus",
    feature = "testing",
    feature = "serde"
))]

use crate::checkout_bin;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use checkout_bin::{Checkout, exchange, get};
use serde_json::Value;

#[path = "../../examples/checkout/sse.rs"]
mod sse;

const WAIT: Duration = Duration::from_secs(10);

/// The `event:` names of an SSE text, in order.
fn event_names(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.strip_prefix("event: ")).collect()
}

/// `curl -N` on `url` for at most `secs` seconds: its exit code, what it
/// received, and how long it ran. `None` without curl.
fn curl_stream(url: &str, secs: u32) -> Option<(i32, String, Duration)> {
    let began = Instant::now();
    let out = Command::new("curl")
        .args(["-N", "-s", "--max-time", &secs.to_string(), url])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(out) => Some((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            began.elapsed(),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("cannot run curl: {e}"),
    }
}

/// A stream opened on a raw connection: its answer head, and the connection,
/// read up to the end of the first event.
fn open_stream(addr: SocketAddr) -> (String, TcpStream) {
    let mut stream = TcpStream::connect_timeout(&addr, WAIT).expect("connect");
    stream.set_read_timeout(Some(WAIT)).expect("a read timeout");
    stream.write_all(b"GET /circuits/stream HTTP/1.1\r\nHost: x\r\n\r\n").expect("send the request");
    let mut got = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let give_up = Instant::now() + WAIT;
    loop {
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let head = head.to_owned();
            if !head.starts_with("HTTP/1.1 200") || body.contains("event: history") {
                return (format!("{head}\r\n\r\n{body}"), stream);
            }
        }
        assert!(Instant::now() < give_up, "no first event in {WAIT:?}: {text:?}");
        match stream.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), stream),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("reading the stream: {e}; got {:?}", String::from_utf8_lossy(&got)),
        }
    }
}

#[test]
fn an_sse_client_gets_five_events_in_five_seconds() {
    // Behind the guard (which relays an event stream as it comes) and
    // without it (tiny_http alone, whose chunks the frames fill).
    for args in [&[][..], &["--no-guard"][..]] {
        let server = Checkout::start(args);
        let Some((code, text, took)) = curl_stream(&server.url("/circuits/stream"), 5) else {
            eprintln!("SKIPPED the SSE client test: no `curl` on PATH");
            return;
        };
        let names = event_names(&text);
        assert!(names.len() >= 5, "{args:?}: {} events in 5 s: {names:?}", names.len());
        assert_eq!(names[0], "history", "{args:?}: the history comes first");
        assert!(names[1..].iter().all(|n| *n == "snapshot"), "{args:?}: {names:?}");
        // 28: curl's own time limit ended it; the stream was still open.
        assert_eq!(code, 28, "{args:?}: curl's exit code");
        assert!(took < Duration::from_secs(15), "{args:?}: curl ran {took:?}");
        // Every event is one JSON object with the shape the dashboard reads,
        // and the history gains a point a second for every dependency.
        let mut points = 0;
        for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("not JSON ({e}): {data}"));
            assert_eq!(v["circuits"]["request_pool"]["threads"], 16, "{v}");
            let deps = v["dependencies"].as_array().expect("dependencies");
            let names: Vec<&str> = deps.iter().filter_map(|d| d["name"].as_str()).collect();
            assert_eq!(names, ["fraud", "account-access", "account-read", "notification"]);
            assert!(deps.iter().all(|d| d["points"].is_array() && d["events"].is_array()), "{v}");
            for p in deps[0]["points"].as_array().expect("fraud's points") {
                points += 1;
                assert!(p["at_ms"].as_u64().is_some_and(|t| t > 1_600_000_000_000), "{p}");
                assert!(p["interval_ms"].as_f64().is_some_and(|ms| (500.0..2_000.0).contains(&ms)), "{p}");
                assert_eq!((p["state"].as_str(), p["workers"].as_u64()), (Some("closed"), Some(6)), "{p}");
                assert!(p["calls"].is_object() && p["busy"].is_u64() && p["queued"].is_u64(), "{p}");
            }
        }
        assert!(points >= 3, "{args:?}: {points} of fraud's points in 5 s");
    }
}

#[test]
fn streams_are_bounded_and_a_client_gone_frees_its_thread() {
    let server = Checkout::start(&[]);
    let (first, first_conn) = open_stream(server.addr);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let lower = first.to_ascii_lowercase();
    assert!(lower.contains("content-type: text/event-stream"), "{first}");
    assert!(lower.contains("cache-control: no-store"), "{first}");
    let (second, _second_conn) = open_stream(server.addr);
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");

    // A third is refused at once, and every other route still answers.
    let third = get(server.addr, "/circuits/stream", WAIT).expect("a third stream");
    assert_eq!(third.status, 503, "{}", third.body);
    let refused: Value = serde_json::from_str(&third.body).expect("a JSON error");
    assert_eq!(refused["code"], "TOO_MANY_STREAMS", "{refused}");
    assert_eq!(get(server.addr, "/health", WAIT).expect("GET /health").status, 200);

    // The first client goes away: at its next event (a second) its write
    // fails, and its place is free again.
    drop(first_conn);
    let give_up = Instant::now() + Duration::from_secs(15);
    loop {
        let (again, _conn) = open_stream(server.addr);
        if again.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(again.contains("TOO_MANY_STREAMS"), "{again}");
        assert!(Instant::now() < give_up, "the gone client's stream still holds its place after 15 s");
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn wrong_methods_get_405_and_events_list_each_ring() {
    let server = Checkout::start(&[]);
    for path in ["/circuits/stream", "/circuits/events"] {
        let request =
            format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        let answer = exchange(server.addr, request.as_bytes(), WAIT).expect("a POST");
        assert_eq!(answer.status, 405, "{path}: {}", answer.body);
        assert!(answer.head.contains("Allow: GET"), "{path}: {}", answer.head);
        let body: Value = serde_json::from_str(&answer.body).expect("a JSON error");
        assert_eq!(body["code"], "METHOD_NOT_ALLOWED", "{path}");
    }

    let events = |server: &Checkout| -> Value {
        let answer = get(server.addr, "/circuits/events", WAIT).expect("GET /circuits/events");
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert!(
            answer.head.to_ascii_lowercase().contains("content-type: application/json"),
            "{}",
            answer.head
        );
        serde_json::from_str(&answer.body).expect("JSON")
    };
    let before = events(&server);
    let deps = before["dependencies"].as_array().expect("dependencies");
    assert_eq!(deps.len(), 4, "{before}");
    assert!(deps.iter().all(|d| d["events"] == Value::Array(Vec::new())), "nothing happened yet: {before}");

    // A reconfiguration is one event, with the pool and timeout it set.
    let config = get(server.addr, "/_config/account-read", WAIT).expect("GET /_config/account-read");
    assert_eq!(config.status, 200, "{}", config.body);
    let put = format!(
        "PUT /_config/account-read HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{}",
        config.body.len(),
        config.body
    );
    let changed = exchange(server.addr, put.as_bytes(), WAIT).expect("PUT /_config/account-read");
    assert_eq!(changed.status, 200, "{}", changed.body);
    let after = events(&server);
    let read = after["dependencies"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == "account-read"))
        .expect("account-read");
    let recorded = read["events"].as_array().expect("its events");
    assert_eq!(recorded.len(), 1, "{read}");
    let e = &recorded[0];
    assert_eq!((e["seq"].as_u64(), e["kind"].as_str()), (Some(1), Some("reconfigured")), "{e}");
    assert_eq!(
        (e["workers"].as_u64(), e["queue"].as_u64(), e["timeout_ms"].as_u64()),
        (Some(2), Some(0), Some(4_000))
    );
    assert!(e["at_ms"].as_u64().is_some_and(|t| t > 1_600_000_000_000), "wall-clock milliseconds: {e}");
}

/// A model of the chunked encoder tiny_http writes a body through: it keeps
/// up to [`sse::CHUNK`] bytes and sends them only when a write overflows
/// them. What it has sent after each write.
struct Encoder {
    held: usize,
    sent: usize,
}

impl Encoder {
    fn write(&mut self, mut n: usize) {
        while n > 0 {
            let room = sse::CHUNK - self.held;
            let take = room.min(n);
            self.held += take;
            n -= take;
            if n > 0 {
                self.sent += self.held;
                self.held = 0;
            }
        }
    }
}

#[test]
fn every_frame_leaves_only_its_last_byte_in_the_encoder() {
    let mut enc = Encoder { held: 0, sent: 0 };
    let mut written = 0;
    let big = "x".repeat(3 * sse::CHUNK + 17);
    let datas = [
        "{}",
        "{\"a\":1}",
        big.as_str(),
        "two\nlines",
        &"y".repeat(sse::CHUNK - 40),
        &"z".repeat(sse::CHUNK),
    ];
    for (i, data) in datas.iter().enumerate() {
        let first = i == 0;
        let frame = sse::frame(if first { "history" } else { "snapshot" }, i as u64, data, first, 1000);
        assert_eq!(frame.len() % sse::CHUNK, usize::from(first), "frame {i}'s length");
        let text = String::from_utf8(frame.clone()).expect("UTF-8");
        let (event, padding) = text.split_once("\n\n").expect("an event ends with a blank line");
        assert!(
            padding.starts_with(':') && padding.ends_with('\n'),
            "frame {i}: the rest is one comment line"
        );
        assert_eq!(padding.trim_end_matches('\n').trim_start_matches(':').trim_matches(' '), "");
        assert_eq!(first, event.starts_with("retry: 1000\n"), "frame {i}");
        assert!(event.contains(&format!("id: {i}\n")), "frame {i}");
        let lines: Vec<&str> = event.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
        assert_eq!(lines.join("\n"), *data, "frame {i}'s data, line by line");
        // Written in reads of at most 8 KiB, as io::copy does.
        for piece in frame.chunks(8192) {
            enc.write(piece.len());
        }
        written += frame.len();
        assert_eq!((enc.sent, enc.held), (written - 1, 1), "after frame {i}, all but its last byte is sent");
    }
}
