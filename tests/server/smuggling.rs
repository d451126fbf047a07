//! A list of request-smuggling and parser-differential payloads (CL.TE,
//! TE.CL, duplicate lengths, obs-fold, odd chunk sizes, method and header
//! casing, pipelining, private headers), each sent by an attacker, straight
//! to the guard and through real nginx (which pools its connections to the
//! guard across clients), each followed by a victim's requests on another
//! connection: the victim always gets exactly its own answers, and the
//! attacker never gets an answer for a request it did not frame plainly.

use std::io::Write;
use std::net::SocketAddr;

use crate::desync::{connect, read_answer, start, victim_round};
use crate::nginx;

/// A request any parser reads alike, smuggled after each payload.
const SMUGGLED: &str = "GET /big?id=smuggled HTTP/1.1\r\nHost: x\r\n\r\n";

/// The payloads: a name, whether it is a well-framed request (so that
/// `SMUGGLED` after it is a pipelined request of its own), and the
/// attacker's bytes.
fn payloads() -> Vec<(&'static str, bool, String)> {
    let s = SMUGGLED;
    let post = "POST /echo?id=a HTTP/1.1\r\nHost: x\r\n";
    vec![
        (
            "CL.TE",
            false,
            format!("{post}Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{s}"),
        ),
        (
            "TE.CL",
            false,
            format!("{post}Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\n{s}\r\n0\r\n\r\n"),
        ),
        ("two lengths", false, format!("{post}Content-Length: 0\r\nContent-Length: 44\r\n\r\n{s}")),
        ("two equal lengths", false, format!("{post}Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc{s}")),
        ("a length list", false, format!("{post}Content-Length: 3, 3\r\n\r\nabc{s}")),
        ("a signed length", false, format!("{post}Content-Length: +3\r\n\r\nabc{s}")),
        ("a hex length", false, format!("{post}Content-Length: 0x3\r\n\r\nabc{s}")),
        ("a length with a space", false, format!("{post}Content-Length: 3 3\r\n\r\nabc{s}")),
        (
            "TE chunked twice",
            false,
            format!("{post}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{s}"),
        ),
        (
            "TE identity, chunked",
            false,
            format!("{post}Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n{s}"),
        ),
        (
            "TE chunked, identity",
            false,
            format!("{post}Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{s}"),
        ),
        ("TE with a tab", true, format!("{post}Transfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n{s}")),
        ("TE in capitals", true, format!("{post}TRANSFER-ENCODING: CHUNKED\r\n\r\n0\r\n\r\n{s}")),
        ("TE xchunked", false, format!("{post}Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n{s}")),
        (
            "TE with a space before the colon",
            false,
            format!("{post}Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n{s}"),
        ),
        ("TE folded", false, format!("{post}Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n{s}")),
        ("an obs-fold", false, format!("{post}X-A: 1\r\n Content-Length: 44\r\n\r\n{s}")),
        (
            "TE on HTTP/1.0",
            false,
            format!("POST /echo?id=a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{s}"),
        ),
        (
            "a bare LF in the head",
            false,
            format!("{post}X-A: 1\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{s}"),
        ),
        ("a bare CR in the head", false, format!("{post}X-A: 1\rContent-Length: 44\r\n\r\n{s}")),
        ("a NUL in a header", false, format!("{post}X-A: a\0b\r\nContent-Length: 0\r\n\r\n{s}")),
        (
            "a chunk size with a plus",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n+3\r\nabc\r\n0\r\n\r\n{s}"),
        ),
        (
            "a negative chunk size",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n{s}"),
        ),
        (
            "a 0x chunk size",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n{s}"),
        ),
        (
            "an overlong chunk size",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n{}3\r\nabc\r\n0\r\n\r\n{s}", "0".repeat(20)),
        ),
        (
            "a space after the chunk size",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n3 \r\nabc\r\n0\r\n\r\n{s}"),
        ),
        (
            "a bare LF after the chunk size",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n{s}"),
        ),
        (
            "a bare LF in a chunk extension",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n3;a\nb\r\nabc\r\n0\r\n\r\n{s}"),
        ),
        (
            "an empty chunk-size line",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n\r\n{s}"),
        ),
        (
            "chunk data too long",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n{s}"),
        ),
        (
            "chunk data without CRLF",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n3\r\nabc0\r\n\r\n{s}"),
        ),
        ("trailers ended by a bare LF", false, format!("{post}Transfer-Encoding: chunked\r\n\r\n0\r\n\n{s}")),
        (
            "a malformed trailer",
            false,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n0\r\nX-T : 1\r\n\r\n{s}"),
        ),
        (
            "a smuggled trailer",
            true,
            format!("{post}Transfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 44\r\n\r\n{s}"),
        ),
        ("two hosts", false, format!("GET /big?id=a HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n{s}")),
        ("a lowercase head", true, format!("head /big?id=a HTTP/1.1\r\nHost: x\r\n\r\n{s}")),
        (
            "a mixed-case head with a body",
            true,
            format!("hEaD /big?id=a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc{s}"),
        ),
        ("a lowercase get", true, format!("get /big?id=a HTTP/1.1\r\nHost: x\r\n\r\n{s}")),
        ("HTTP/1.2", false, format!("GET /big?id=a HTTP/1.2\r\nHost: x\r\n\r\n{s}")),
        ("HTTP/2.0 in a 1.1 head", false, format!("GET /big?id=a HTTP/2.0\r\nHost: x\r\n\r\n{s}")),
        ("a lowercase version", false, format!("GET /big?id=a http/1.1\r\nHost: x\r\n\r\n{s}")),
        ("a space in the target", false, format!("GET /big?id=a b HTTP/1.1\r\nHost: x\r\n\r\n{s}")),
        (
            "a private header",
            true,
            format!("GET /big?id=a HTTP/1.1\r\nHost: x\r\nX-Watertight-Ticket: 0\r\n\r\n{s}"),
        ),
        (
            "a private peer header",
            true,
            format!("GET /big?id=a HTTP/1.1\r\nHost: x\r\nX-Watertight-Peer: 1.2.3.4:5\r\n\r\n{s}"),
        ),
        (
            "expect on HTTP/1.0",
            true,
            format!(
                "POST /echo?id=a HTTP/1.0\r\nConnection: keep-alive\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc{s}"
            ),
        ),
        (
            "an unknown expectation",
            false,
            format!("{post}Expect: 101-switch\r\nContent-Length: 3\r\n\r\nabc{s}"),
        ),
        (
            "a connection upgrade",
            true,
            format!("GET /big?id=a HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n{s}"),
        ),
        ("a plain pipeline", true, format!("GET /big?id=a HTTP/1.1\r\nHost: x\r\n\r\n{s}")),
    ]
}

/// The attacker's answers until the close, as (status, body).
fn attack(addr: SocketAddr, bytes: &str) -> Vec<(u16, String)> {
    let mut attacker = connect(addr);
    let _ = attacker.get_mut().write_all(bytes.as_bytes());
    let _ = attacker.get_mut().shutdown(std::net::Shutdown::Write);
    let mut answers = Vec::new();
    while let Some(answer) = read_answer(&mut attacker, false) {
        answers.push(answer);
        if answers.len() > 3 {
            break;
        }
    }
    answers
}

/// Straight to the guard: a well-framed payload gets its answer and the
/// smuggled request's, a malformed one a single refusal and the close.
fn check_attacker(name: &str, plain: bool, answers: &[(u16, String)]) {
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    if plain {
        assert_eq!(answers.len(), 2, "{name}: {statuses:?}");
        assert!(answers[0].0 < 400 && !answers[0].1.ends_with("id=smuggled"), "{name}: {statuses:?}");
        assert!(answers[1].1.ends_with("id=smuggled"), "{name}: the pipelined request's answer");
    } else {
        assert_eq!(answers.len(), 1, "{name}: one refusal, then the close: {statuses:?}");
        assert!((400..600).contains(&answers[0].0), "{name}: {statuses:?}");
        assert!(!answers[0].1.ends_with("id=smuggled"), "{name}: the smuggled request was answered");
    }
}

fn run_list(addr: SocketAddr, straight: bool) {
    let mut victim = connect(addr);
    for (round, (name, plain, bytes)) in payloads().iter().enumerate() {
        let answers = attack(addr, bytes);
        if straight {
            check_attacker(name, *plain, &answers);
        }
        victim_round(&mut victim, round, name);
    }
}

#[test]
fn no_payload_reaches_another_clients_answer_straight_or_through_nginx() {
    let (handle, addr) = start();
    assert!(payloads().len() >= 45);
    run_list(addr, true);
    if nginx::installed() {
        let proxy = nginx::Nginx::start(addr);
        // nginx answers some payloads itself; either way the victim, whose
        // requests share nginx's kept connections to the guard, gets its own.
        run_list(proxy.addr, false);
    } else {
        eprintln!("SKIPPED the nginx half: `nginx` is not installed");
    }
    handle.shutdown();
}
