//! No client can touch another client's answer: rounds of requests whose
//! framing a sloppy edge reads wrongly (a `head` in any case but `HEAD` with
//! an answer over 4 KiB, lenient chunk framing), each followed by requests
//! from another, kept-alive connection, which must get exactly their own
//! answers. The server is the guard in front of tiny_http (`server::serve`);
//! every answer names the request it belongs to.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use tiny_http::{Request, Response};
use watertight::server::{RequestContext, ServerHandle, serve};

const ROUNDS: usize = 200;
const TIMEOUT: Duration = Duration::from_secs(5);
/// Each answer of `/big` is this long, then its id.
const PAD: usize = 5 * 1024;

/// `/big?id=X`: `PAD` bytes and `id=X`, whatever the method; `/echo`: the
/// body sent, then the id.
pub(crate) fn start() -> (ServerHandle, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let handle = serve(listener, 4, |req: &mut Request, _: &RequestContext| {
        let url = req.url().to_owned();
        let id = url.split_once("id=").map_or("none", |(_, id)| id).to_owned();
        let mut body = String::new();
        let _ = req.as_reader().read_to_string(&mut body);
        if url.starts_with("/echo") {
            Response::from_string(format!("{body}|id={id}")).boxed()
        } else {
            Response::from_string(format!("{}id={id}", "x".repeat(PAD))).boxed()
        }
    })
    .expect("start the server");
    let addr = handle.addr().to_ip().expect("a TCP address");
    (handle, addr)
}

pub(crate) fn connect(addr: SocketAddr) -> BufReader<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(TIMEOUT)).unwrap();
    BufReader::new(stream)
}

/// One answer off `conn`: its status and body (framed by its length or
/// chunked; none when `bodiless`). `None` when the connection ended first.
pub(crate) fn read_answer(conn: &mut BufReader<TcpStream>, bodiless: bool) -> Option<(u16, String)> {
    let mut line = String::new();
    if conn.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
    let (mut length, mut chunked) = (None, false);
    loop {
        line.clear();
        conn.read_line(&mut line).ok()?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.trim().eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if bodiless {
    } else if chunked {
        loop {
            line.clear();
            conn.read_line(&mut line).ok()?;
            let size = usize::from_str_radix(line.trim_end().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2];
            conn.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        body.resize(length?, 0);
        conn.read_exact(&mut body).ok()?;
    }
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The victim's two requests, one with a body (across the hop) and one
/// without, on its kept-alive connection: each gets its own answer.
pub(crate) fn victim_round(victim: &mut BufReader<TcpStream>, round: usize, after: &str) {
    let body = format!("victim-{round}");
    let requests = format!(
        "POST /echo?id=v{round} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}\
         GET /big?id=w{round} HTTP/1.1\r\nHost: x\r\n\r\n",
        body.len()
    );
    victim.get_mut().write_all(requests.as_bytes()).expect("the victim's requests");
    let echo = read_answer(victim, false);
    assert_eq!(echo, Some((200, format!("{body}|id=v{round}"))), "round {round}, after {after}");
    let big = read_answer(victim, false).unwrap_or_else(|| panic!("round {round}, after {after}: no answer"));
    assert_eq!(big.0, 200, "round {round}, after {after}");
    assert!(big.1.ends_with(&format!("id=w{round}")), "round {round}, after {after}: {:?}", &big.1[PAD..]);
    assert_eq!(big.1.len(), PAD + format!("id=w{round}").len(), "round {round}, after {after}");
}

#[test]
fn a_head_in_any_case_never_reaches_another_clients_answer() {
    let (handle, addr) = start();
    let mut victim = connect(addr);
    let methods = ["head", "Head", "hEaD", "HEAD"];
    for round in 0..ROUNDS {
        let method = methods[round % methods.len()];
        let mut attacker = connect(addr);
        // Half the rounds with a body (so the request crosses the hop), and
        // every other round the attacker leaves without reading.
        let request = if round % 2 == 0 {
            format!("{method} /big?id=a{round} HTTP/1.1\r\nHost: x\r\n\r\n")
        } else {
            format!("{method} /big?id=a{round} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        };
        attacker.get_mut().write_all(request.as_bytes()).expect("the attacker's request");
        if round % 4 < 2 {
            // Only the exact `HEAD` is bodiless (RFC 9110 9.1); either way
            // the answer is framed as the attacker's own.
            let answer = read_answer(&mut attacker, method == "HEAD").expect("the attacker's answer");
            assert_eq!(answer.0, 200, "round {round} ({method})");
            if method != "HEAD" {
                assert!(answer.1.ends_with(&format!("id=a{round}")), "round {round} ({method})");
            }
        }
        drop(attacker);
        victim_round(&mut victim, round, method);
    }
    handle.shutdown();
}

#[test]
fn lenient_chunk_framing_is_refused_and_never_reaches_another_client() {
    let (handle, addr) = start();
    let mut victim = connect(addr);
    let smuggled = "GET /big?id=smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let cases = [
        ("a bare LF in a chunk extension", format!("3;a\nb\r\nabc\r\n0\r\n\r\n{smuggled}")),
        ("an empty chunk-size line", format!("3\r\nabc\r\n\r\n{smuggled}")),
        ("trailers ended by a bare LF", format!("3\r\nabc\r\n0\r\n\n{smuggled}")),
    ];
    for round in 0..ROUNDS {
        let (case, body) = &cases[round % cases.len()];
        let mut attacker = connect(addr);
        let request =
            format!("POST /echo?id=a{round} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{body}");
        attacker.get_mut().write_all(request.as_bytes()).expect("the attacker's request");
        // One answer, a refusal, and then the close: the pipelined request
        // is never read as one.
        let answer = read_answer(&mut attacker, false).expect("an answer to the attacker");
        assert_eq!(answer.0, 400, "round {round}: {case}: {answer:?}");
        assert_eq!(read_answer(&mut attacker, false), None, "round {round}: {case}: a second answer");
        victim_round(&mut victim, round, case);
    }
    handle.shutdown();
}
