//! The fake providers do what their faults say, seen through real ureq calls on
//! loopback.
#![cfg(feature = "testing")]

use crate::support;

use std::io;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use support::{Call, FakeProvider, Fault, agent, provider, wait_until};

const LONG: Duration = Duration::from_secs(5);

fn get(p: &FakeProvider, timeout: Duration) -> Result<String, ureq::Error> {
    agent(timeout).get(format!("{}/probe", p.url())).call()?.body_mut().read_to_string()
}

fn io_kind(err: &ureq::Error) -> Option<io::ErrorKind> {
    match err {
        ureq::Error::Io(e) => Some(e.kind()),
        _ => None,
    }
}

#[test]
fn faults_parse_and_display_round_trip() {
    let all = [
        Fault::Healthy,
        Fault::Slow(Duration::from_millis(250)),
        Fault::Hang,
        Fault::Error(503),
        Fault::Refuse,
        Fault::Reset,
        Fault::Garbage,
        Fault::Trickle(Duration::from_millis(20)),
        Fault::Close,
        Fault::Cut,
    ];
    for fault in all {
        assert_eq!(fault.to_string().parse::<Fault>(), Ok(fault));
    }
    assert_eq!(" Error:429\n".parse::<Fault>(), Ok(Fault::Error(429)));
    for bad in ["", "sick", "slow", "slow:soon", "error:700", "error:", "hang:5", "refuse:1"] {
        let err = bad.parse::<Fault>().unwrap_err().to_string();
        assert!(err.starts_with("fault must be healthy, slow:<ms>"), "{bad:?} gave {err:?}");
    }
}

#[test]
fn healthy_answers_with_the_responder_and_counts_hits() {
    let p = FakeProvider::start("echo", Fault::Healthy, |call: &Call| {
        (201, format!("{} {} {}", call.method, call.url, call.body))
    })
    .unwrap();
    let mut response = agent(LONG).post(format!("{}/orders?x=1", p.url())).send("amount=12").unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.body_mut().read_to_string().unwrap(), "POST /orders?x=1 amount=12");
    assert_eq!(get(&p, LONG).unwrap(), "GET /probe ");
    assert_eq!(p.hits(), 2);
    assert!(wait_until(LONG, || p.in_flight() == 0));
}

#[test]
fn error_answers_that_status() {
    let p = provider(Fault::Error(503));
    let err = get(&p, LONG).unwrap_err();
    assert!(matches!(err, ureq::Error::StatusCode(503)), "{err:?}");
    p.set_fault(Fault::Error(404));
    assert!(matches!(get(&p, LONG), Err(ureq::Error::StatusCode(404))));
    assert_eq!(p.hits(), 2);
}

#[test]
fn script_runs_before_the_standing_fault() {
    let p = provider(Fault::Healthy);
    p.script([Fault::Error(503), Fault::Error(429)]);
    assert!(matches!(get(&p, LONG), Err(ureq::Error::StatusCode(503))));
    assert!(matches!(get(&p, LONG), Err(ureq::Error::StatusCode(429))));
    assert_eq!(get(&p, LONG).unwrap(), "ok");
    assert_eq!(get(&p, LONG).unwrap(), "ok");
    assert_eq!(p.hits(), 4);
    assert_eq!(p.fault(), Fault::Healthy);
}

#[test]
fn refuse_closes_the_port_and_healthy_reopens_it() {
    let p = provider(Fault::Healthy);
    assert_eq!(get(&p, LONG).unwrap(), "ok");
    p.set_fault(Fault::Refuse);
    for _ in 0..3 {
        let err = get(&p, LONG).unwrap_err();
        assert_eq!(io_kind(&err), Some(io::ErrorKind::ConnectionRefused), "{err:?}");
    }
    p.set_fault(Fault::Healthy);
    assert_eq!(get(&p, LONG).unwrap(), "ok", "same URL works again");
    assert_eq!(p.hits(), 2, "refused connections are not hits");
}

#[test]
fn starting_refused_refuses() {
    let p = provider(Fault::Refuse);
    let err = get(&p, LONG).unwrap_err();
    assert_eq!(io_kind(&err), Some(io::ErrorKind::ConnectionRefused), "{err:?}");
    p.set_fault(Fault::Healthy);
    assert_eq!(get(&p, LONG).unwrap(), "ok");
}

#[test]
fn reset_is_an_io_error() {
    let p = provider(Fault::Reset);
    let err = get(&p, LONG).unwrap_err();
    assert!(
        matches!(io_kind(&err), Some(io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe)),
        "{err:?}"
    );
    assert_eq!(p.hits(), 1);
}

#[test]
fn close_without_answer_is_an_error() {
    let p = provider(Fault::Close);
    let err = get(&p, LONG).unwrap_err();
    assert_eq!(io_kind(&err), Some(io::ErrorKind::UnexpectedEof), "{err:?}");
    assert_eq!(p.hits(), 1);
}

#[test]
fn cut_breaks_off_mid_body() {
    use std::io::{Read, Write};
    let p = provider(Fault::Cut);
    // Seen raw: the whole head, part of the body it announces, then a reset.
    let mut raw = std::net::TcpStream::connect(p.addr()).unwrap();
    raw.set_read_timeout(Some(LONG)).unwrap();
    raw.write_all(b"GET /probe HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let end = raw.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    let (head, body) = text.split_once("\r\n\r\n").expect("the head arrives whole");
    let announced: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.parse().ok())
        .expect("a Content-Length");
    assert!(head.starts_with("HTTP/1.1 200"), "{head:?}");
    assert!(!body.is_empty() && body.len() < announced, "{} of {announced} body bytes", body.len());
    // The reset usually comes as ECONNRESET; if it overtakes nothing, as a plain end.
    assert!(matches!(&end, Err(e) if e.kind() == io::ErrorKind::ConnectionReset) || end.is_ok(), "{end:?}");
    // Through ureq: an I/O error while reading the body.
    let err = get(&p, LONG).unwrap_err();
    assert!(
        matches!(io_kind(&err), Some(io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof)),
        "{err:?}"
    );
    assert_eq!(p.hits(), 2);
}

#[test]
fn garbage_is_a_protocol_error() {
    let p = provider(Fault::Garbage);
    let err = get(&p, LONG).unwrap_err();
    assert!(matches!(err, ureq::Error::Protocol(_)), "{err:?}");
}

#[test]
fn hang_holds_until_the_client_times_out_and_the_fault_changes() {
    let p = provider(Fault::Hang);
    let started = Instant::now();
    let err = get(&p, Duration::from_millis(200)).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, ureq::Error::Timeout(_)), "{err:?}");
    assert!(took < Duration::from_millis(1500), "timed out after {took:?}");
    assert!(wait_until(LONG, || p.in_flight() == 1), "the hung request is held");
    p.set_fault(Fault::Healthy);
    assert!(wait_until(LONG, || p.in_flight() == 0), "set_fault releases it");
    assert_eq!(get(&p, LONG).unwrap(), "ok");
}

#[test]
fn slow_answers_late() {
    let p = provider(Fault::Slow(Duration::from_millis(150)));
    let started = Instant::now();
    assert_eq!(get(&p, LONG).unwrap(), "ok");
    assert!(started.elapsed() >= Duration::from_millis(150));
    let err = get(&p, Duration::from_millis(50)).unwrap_err();
    assert!(matches!(err, ureq::Error::Timeout(_)), "{err:?}");
}

#[test]
fn trickle_defeats_read_timeouts_but_not_a_global_one() {
    // About 90 bytes at 2 ms each: arrives whole, slowly.
    let p = provider(Fault::Trickle(Duration::from_millis(2)));
    assert_eq!(get(&p, LONG).unwrap(), "ok");
    // At 20 ms a byte, each read gets a byte well within 300 ms, yet the whole answer
    // takes seconds: only the global timeout ends it.
    p.set_fault(Fault::Trickle(Duration::from_millis(20)));
    let per_read: ureq::Agent = ureq::Agent::config_builder()
        .timeout_per_read(Some(Duration::from_millis(300)))
        .timeout_global(Some(Duration::from_millis(800)))
        .build()
        .into();
    let started = Instant::now();
    let err = per_read.get(p.url()).call().and_then(|mut r| r.body_mut().read_to_string());
    let err = err.unwrap_err();
    assert!(matches!(err, ureq::Error::Timeout(ureq::Timeout::Global)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn drop_releases_hung_requests_promptly() {
    let p = provider(Fault::Hang);
    let url = p.url();
    let (tx, rx) = mpsc::channel();
    let client = thread::spawn(move || {
        let result = agent(Duration::from_secs(30)).get(url).call().map(|_| ());
        tx.send(Instant::now()).unwrap();
        result
    });
    assert!(wait_until(LONG, || p.in_flight() == 1), "the request arrived");
    let dropped = Instant::now();
    drop(p);
    let answered = rx.recv_timeout(LONG).expect("the client was released");
    assert!(answered.duration_since(dropped) < Duration::from_secs(2));
    assert!(client.join().unwrap().is_err(), "a hung request gets no answer");
}
