//! The guarded server leaves no thread behind: after `shutdown`, the process
//! has the threads it had before `serve` (its own file, so no other test's
//! threads come and go meanwhile).
#![cfg(feature = "tiny_http")]

#[path = "support/procfs.rs"]
mod procfs;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

#[test]
fn shutdown_leaves_no_thread_behind() {
    let before = procfs::threads();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let handle = watertight::server::serve(
        listener,
        4,
        |_req: &mut tiny_http::Request, _: &watertight::server::RequestContext| {
            tiny_http::Response::from_string("ok").boxed()
        },
    )
    .expect("start the server");
    let addr = handle.addr().to_ip().expect("a TCP address");
    // Several connections at once, so that the guard opens several hop
    // connections and tiny_http starts a thread for each.
    let clients: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
                let mut answer = String::new();
                let _ = s.read_to_string(&mut answer);
                answer
            })
        })
        .collect();
    for client in clients {
        let answer = client.join().expect("a client");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    }
    assert!(procfs::threads() > before, "the server runs threads");
    handle.shutdown();
    let after = procfs::settle(Duration::from_secs(10), before, procfs::threads);
    assert_eq!(after, before, "threads left after shutdown: {:?}", procfs::thread_names());
}
