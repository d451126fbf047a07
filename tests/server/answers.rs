//! How the guard treats the handler's answers: a bound on waiting for one, an
//! answer whose framing is in doubt ends the connection, no `100 Continue` for
//! HTTP/1.0, and an answer to an HTTP/1.0 client is framed for it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tiny_http::{Header, Request, Response, StatusCode};
use watertight::server::{RequestContext, ServerConfig, ServerHandle, serve_with};

use crate::desync::{connect, read_answer};

fn start(config: ServerConfig) -> (ServerHandle, std::net::SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let handle = serve_with(listener, 2, config, |req: &mut Request, _: &RequestContext| match req.url() {
        "/stuck" => {
            std::thread::sleep(Duration::from_millis(1500));
            Response::from_string("late").boxed()
        }
        // Declares 10 bytes through `Response::new` and has 3.
        "/short" => {
            Response::new(StatusCode(200), vec![], std::io::Cursor::new(b"abc".to_vec()), Some(10), None)
                .boxed()
        }
        // Sets its own framing header.
        "/framed" => Response::new(
            StatusCode(200),
            vec![Header::from_bytes("Content-Length", "2").unwrap()],
            std::io::Cursor::new(b"ok".to_vec()),
            Some(2),
            None,
        )
        .boxed(),
        // A header value taken from the request, unchecked, CRLF and all.
        "/split" => Response::from_string("x")
            .with_header(
                Header::from_bytes("Location", "/a\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK").unwrap(),
            )
            .boxed(),
        "/echo" => {
            let mut body = Vec::new();
            let _ = req.as_reader().read_to_end(&mut body);
            Response::from_data(body).boxed()
        }
        // Many pieces: it waits for its client a piece at a time.
        "/huge" => Response::from_data(vec![b'h'; 3 << 20]).boxed(),
        _ => Response::from_string(format!("{} ok", "y".repeat(40 * 1024))).boxed(),
    })
    .expect("start the server");
    let addr = handle.addr().to_ip().expect("a TCP address");
    (handle, addr)
}

#[test]
fn a_handler_that_does_not_answer_in_time_gets_504_and_the_close() {
    let config = ServerConfig::builder().answer_timeout(Duration::from_millis(200)).build().unwrap();
    let (handle, addr) = start(config);
    let mut conn = connect(addr);
    let started = Instant::now();
    conn.get_mut().write_all(b"GET /stuck HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let answer = read_answer(&mut conn, false).expect("an answer");
    assert_eq!(answer.0, 504, "{answer:?}");
    assert!(answer.1.contains("GATEWAY_TIMEOUT"), "{answer:?}");
    // Generous: the bound is 200 ms, the handler takes 1.5 s.
    assert!(started.elapsed() < Duration::from_millis(1200), "{:?}", started.elapsed());
    assert_eq!(read_answer(&mut conn, false), None, "the connection is closed after a 504");
    handle.shutdown();
}

#[test]
fn an_answer_whose_framing_is_in_doubt_ends_the_connection() {
    let (handle, addr) = start(ServerConfig::default());
    let pipelined = |path: &str| {
        let mut conn = connect(addr);
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n");
        conn.get_mut().write_all(request.as_bytes()).unwrap();
        let mut got = Vec::new();
        let _ = conn.get_mut().shutdown(std::net::Shutdown::Write);
        let _ = conn.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    };
    // Shorter than its length: one answer, cut, and the close; the pipelined
    // request is never answered on that connection.
    let short = pipelined("/short");
    assert_eq!(short.matches("HTTP/1.1 ").count(), 1, "{short}");
    assert!(short.ends_with("abc"), "{short}");
    // A `Content-Length` set by the handler is tiny_http's length: one of
    // it, and the connection goes on.
    let framed = pipelined("/framed");
    assert_eq!(framed.matches("HTTP/1.1 200").count(), 2, "{framed}");
    assert_eq!(framed.matches("Content-Length: 2\r\n").count(), 1, "{framed}");
    handle.shutdown();
}

#[test]
fn the_guard_says_how_the_connection_goes_on() {
    let (handle, addr) = start(ServerConfig::default());
    let mut conn = connect(addr);
    conn.get_mut().write_all(b"GET /big HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
    let mut head = String::new();
    for _ in 0..8 {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut conn, &mut line).unwrap();
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    assert!(head.starts_with("HTTP/1.0 200") && head.contains("Connection: keep-alive\r\n"), "{head}");
    let answer = checkout_bin_get(addr);
    assert!(answer.lines().any(|l| l == "Connection: close"), "{answer}");
    handle.shutdown();
}

fn checkout_bin_get(addr: std::net::SocketAddr) -> String {
    crate::checkout_bin::get(addr, "/big", Duration::from_secs(5)).expect("an answer").head
}

#[test]
fn an_http_1_0_client_gets_no_interim_answer_and_a_length_framed_one() {
    let (handle, addr) = start(ServerConfig::default());
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream.write_all(b"POST /big HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n").unwrap();
    // No interim answer comes; the body follows without one.
    std::thread::sleep(Duration::from_millis(100));
    stream.write_all(b"abc").unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.0 200"), "{}", &text[..text.len().min(200)]);
    assert!(!text.contains("100 Continue"), "an interim answer to HTTP/1.0");
    assert!(!text.contains("Transfer-Encoding"), "a chunked answer to HTTP/1.0");
    assert!(text.ends_with(" ok"), "the whole body, then the close");
    handle.shutdown();
}

#[test]
fn a_large_body_and_a_large_answer_cross_whole_and_the_connection_goes_on() {
    let (handle, addr) = start(ServerConfig::default());
    let mut conn = connect(addr);
    // Over the hop's inline size: written from a thread of its own.
    let body: String = (0..300 * 1024).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let request = format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    conn.get_mut().write_all(request.as_bytes()).unwrap();
    let echoed = read_answer(&mut conn, false).expect("the echo");
    assert_eq!(echoed.0, 200);
    assert!(echoed.1 == body, "the echo differs: {} bytes against {}", echoed.1.len(), body.len());
    conn.get_mut().write_all(b"GET /huge HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let huge = read_answer(&mut conn, false).expect("the huge answer");
    assert_eq!((huge.0, huge.1.len()), (200, 3 << 20));
    assert!(huge.1.bytes().all(|b| b == b'h'));
    conn.get_mut().write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let after = read_answer(&mut conn, false).expect("the next answer");
    assert!(after.1.ends_with(" ok"), "the connection goes on");
    handle.shutdown();
}

#[test]
fn a_header_that_would_split_the_answer_is_answered_500() {
    let (handle, addr) = start(ServerConfig::default());
    let mut conn = connect(addr);
    conn.get_mut()
        .write_all(b"GET /split HTTP/1.1\r\nHost: x\r\n\r\nGET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let answer = read_answer(&mut conn, false).expect("an answer");
    assert_eq!(answer.0, 500, "{answer:?}");
    assert!(answer.1.contains("INTERNAL_ERROR"), "{answer:?}");
    // The next answer on the connection is the next request's, not a forged one.
    let next = read_answer(&mut conn, false).expect("the next answer");
    assert!(next.1.ends_with(" ok"), "{:?}", &next.1[..next.1.len().min(80)]);
    handle.shutdown();
}
