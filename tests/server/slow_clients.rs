//! Slow clients against the shared request pool: does `GET /orders/{id}` stay
//! available while 32 clients trickle their requests at one byte per second?
//!
//! The checkout example runs as a real process with its default 16 request
//! threads. Each scenario opens 32 connections, sends what it sends at once, then
//! one more byte per connection every second for 4 s, while a probe asks for an
//! existing order every 100 ms (1 s timeout each). Availability is the share of
//! the probes started between the first and the third second (each could be
//! answered before the trickle ends) that got a 200.
//!
//! This is tiny_http 0.12 *without* the guard (`--no-guard`) and without the
//! reserved share (`--no-reserve`): a record of what the guard in
//! `watertight::server` is for. `tests/server/edge.rs` runs slow clients
//! against the guarded server (the default). A last scenario runs the large
//! bodies again with the example's reserve: the tricklers are ordinary
//! requests, and `GET /orders/{id}` keeps its two reserved threads.
//!
//! What tiny_http 0.12 does with each (see RELIABILITY.md for the figures):
//!
//! - trickled *headers* are read by tiny_http's own per-connection threads: no
//!   request thread is taken, `/orders` stays available;
//! - a trickled body of at most 1 KiB (declared `Content-Length`) is read whole by
//!   those same threads before the request is handed over: the same;
//! - a longer body, or a chunked one, is read by the handler on a request thread:
//!   each such client holds one request thread for as long as it trickles, so 32
//!   of them take all 16, and `/orders` is unavailable until they stop.
//!
//! The last case is asserted as it is: a characterization of tiny_http 0.12 (if it
//! ever starts failing, the documentation in `src/server.rs` and RELIABILITY.md
//! must change with it). Nothing in `watertight::server` can bound it: tiny_http
//! keeps its sockets to itself and has no read timeout (see `src/server.rs`,
//! "Slow clients").
#![cfg(all(feature = "ureq", feature = "tiny_http", feature = "prometheus"))]

use crate::checkout_bin;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use checkout_bin::Checkout;

const CLIENTS: usize = 32;
/// Fewer slow clients than the server's 16 request threads.
const FEW: usize = 12;
const TRICKLE_FOR: Duration = Duration::from_secs(4);
/// A probe starts every 100 ms on a thread of its own, whether or not the last
/// one has been answered, so a stuck probe does not hide the ones after it.
const PROBE_EVERY: Duration = Duration::from_millis(100);
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Probes that start before this are not counted: the slow requests are still
/// arriving. Nor are those whose timeout runs past the end of the trickle: they
/// may be answered only because the slow clients stopped.
const WINDOW_START: Duration = Duration::from_secs(1);
const WINDOW_END: Duration = TRICKLE_FOR.saturating_sub(PROBE_TIMEOUT);

/// What one scenario saw.
#[derive(Debug)]
struct Seen {
    name: &'static str,
    probes: usize,
    ok: usize,
    worst: Duration,
    /// Slow connections the server had closed on us by the end.
    cut_off: usize,
    /// The server's threads before the slow clients came, and the most seen
    /// while they trickled.
    threads: (usize, usize),
    /// Why the first failed probe in the window failed, for the record.
    first_failure: Option<String>,
}

impl Seen {
    fn availability(&self) -> f64 {
        if self.probes == 0 { 0.0 } else { self.ok as f64 * 100.0 / self.probes as f64 }
    }
}

/// Opens `clients` connections to the server, writes `head` on each, then one byte
/// of `drip` per connection per second for `TRICKLE_FOR`, while probing
/// `probe_path`. Closes everything before returning.
fn trickle(
    name: &'static str,
    server: &Checkout,
    clients: usize,
    head: &str,
    drip: &[u8],
    probe_path: &str,
) -> Seen {
    let addr = server.addr;
    let threads_before = server.threads();
    let mut slow: Vec<TcpStream> = (0..clients)
        .map(|_| {
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
            s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
            s.write_all(head.as_bytes()).expect("write the head");
            s
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let dripper = {
        let stop = Arc::clone(&stop);
        let drip = drip.to_vec();
        thread::spawn(move || {
            let mut cut_off = vec![false; slow.len()];
            let began = Instant::now();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) && began.elapsed() < TRICKLE_FOR {
                let byte = [drip[i % drip.len()]];
                for (s, cut) in slow.iter_mut().zip(cut_off.iter_mut()) {
                    if !*cut && s.write_all(&byte).is_err() {
                        *cut = true;
                    }
                }
                i += 1;
                // One byte a second, in steps short enough to stop promptly.
                let next = began + Duration::from_secs(i as u64);
                while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                    thread::sleep(Duration::from_millis(20));
                }
            }
            // A connection the server closed reads as end-of-file (or reset).
            for (s, cut) in slow.iter_mut().zip(cut_off.iter_mut()) {
                s.set_nonblocking(true).unwrap();
                let mut buf = [0u8; 512];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => {
                            *cut = true;
                            break;
                        }
                        Ok(_) => continue,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            *cut = true;
                            break;
                        }
                    }
                }
            }
            cut_off.iter().filter(|c| **c).count()
        })
    };
    let began = Instant::now();
    let mut probing = Vec::new();
    let mut tick = 0;
    let mut threads_most = threads_before;
    while began.elapsed() < TRICKLE_FOR {
        threads_most = threads_most.max(server.threads());
        let at = began.elapsed();
        let path = probe_path.to_owned();
        probing.push(thread::spawn(move || {
            let asked = Instant::now();
            let answer = checkout_bin::get(addr, &path, PROBE_TIMEOUT);
            let ok = answer.as_ref().is_ok_and(|a| a.status == 200);
            let why = (!ok).then(|| format!("{answer:?}"));
            (at, ok, asked.elapsed(), why)
        }));
        tick += 1;
        if let Some(wait) = (began + PROBE_EVERY * tick).checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
    }
    let (mut probes, mut ok, mut worst, mut first_failure) = (0, 0, Duration::ZERO, None);
    for probe in probing {
        let (at, answered, took, why) = probe.join().expect("a probe thread");
        if (WINDOW_START..=WINDOW_END).contains(&at) {
            probes += 1;
            ok += usize::from(answered);
            worst = worst.max(took);
            first_failure = first_failure.or(why.map(|w| format!("at {at:?} after {took:?}: {w}")));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let cut_off = dripper.join().expect("the dripper");
    let seen =
        Seen { name, probes, ok, worst, cut_off, threads: (threads_before, threads_most), first_failure };
    println!(
        "slow clients: {:<14} {clients:>2} clients at 1 B/s for {TRICKLE_FOR:?}: /orders available {:>3.0}% \
         ({}/{} probes), slowest probe {:.0?}, cut off by the server: {}, server threads {} -> {}",
        seen.name,
        seen.availability(),
        seen.ok,
        seen.probes,
        seen.worst,
        seen.cut_off,
        seen.threads.0,
        seen.threads.1,
    );
    if let Some(why) = &seen.first_failure {
        println!("  first failed probe {why}");
    }
    seen
}

/// Waits (bounded) until `path` answers 200 again after a scenario.
fn recovers(addr: SocketAddr, path: &str) -> bool {
    let give_up = Instant::now() + Duration::from_secs(10);
    while Instant::now() < give_up {
        if checkout_bin::get(addr, path, PROBE_TIMEOUT).is_ok_and(|a| a.status == 200) {
            return true;
        }
        thread::sleep(Duration::from_millis(50));
    }
    false
}

const POST_HEAD: &str =
    "POST /checkout HTTP/1.1\r\nHost: x\r\nX-User-Id: slow\r\nContent-Type: application/json\r\n";

#[test]
fn slow_clients_against_the_checkout_example() {
    let mut server = Checkout::start(&["--no-guard", "--no-reserve"]);
    let addr = server.addr;
    let order = checkout_bin::place_order(addr, "alice").expect("an order to look up");
    let path = format!("/orders/{order}");
    assert!(recovers(addr, &path), "the order can be read: {:?}\n{}", server.exited(), server.stderr());

    let head = "POST /checkout HTTP/1.1\r\nHost: x\r\nX-Pad: ";
    let headers = trickle("headers", &server, CLIENTS, head, b"abcdefgh", &path);
    assert!(
        recovers(addr, &path),
        "/orders answers after the header tricklers: {:?}\n{}",
        server.exited(),
        server.stderr()
    );
    let head = format!("{POST_HEAD}Content-Length: 1000\r\n\r\n");
    let small = trickle("body <= 1 KiB", &server, CLIENTS, &head, b" ", &path);
    assert!(
        recovers(addr, &path),
        "/orders answers after the small-body tricklers: {:?}\n{}",
        server.exited(),
        server.stderr()
    );
    let head_large = format!("{POST_HEAD}Content-Length: 60000\r\n\r\n");
    let large = trickle("body > 1 KiB", &server, CLIENTS, &head_large, b" ", &path);
    assert!(
        recovers(addr, &path),
        "/orders answers again once the large-body tricklers stop: {:?}\n{}",
        server.exited(),
        server.stderr()
    );
    // Fewer tricklers than request threads: each holds one, the rest serve.
    let few = trickle("body > 1 KiB", &server, FEW, &head_large, b" ", &path);
    assert!(
        recovers(addr, &path),
        "/orders answers after the few large-body tricklers: {:?}\n{}",
        server.exited(),
        server.stderr()
    );
    let head = format!("{POST_HEAD}Transfer-Encoding: chunked\r\n\r\n");
    let chunked = trickle("chunked body", &server, CLIENTS, &head, b"1\r\n \r\n", &path);
    assert!(
        recovers(addr, &path),
        "/orders answers again once the chunked tricklers stop: {:?}\n{}",
        server.exited(),
        server.stderr()
    );
    assert!(server.exited().is_none(), "the server survived; stderr:\n{}", server.stderr());

    // tiny_http reads these on its own threads (one per connection, so the
    // server grows by about one thread per slow client): no request thread is taken.
    assert!(headers.availability() >= 90.0, "{headers:?}");
    assert!(small.availability() >= 90.0, "{small:?}");
    assert!(headers.threads.1 >= headers.threads.0 + CLIENTS / 2, "{headers:?}");
    // Read by the handler on a request thread: one thread per trickler. 12 leave
    // 4 of the 16 free; 32 hold all 16. A characterization of tiny_http 0.12
    // behind a plain `serve`, not a goal.
    assert!(few.availability() >= 90.0, "{few:?}");
    assert!(large.availability() <= 10.0, "{large:?}");
    assert!(chunked.availability() <= 10.0, "{chunked:?}");
    drop(server);

    // The same 32 large-body tricklers with the example's reserved share:
    // they hold the 14 ordinary threads (the others wait for one), and
    // `/orders` is answered on the 2 reserved ones.
    let server = Checkout::start(&["--no-guard"]);
    let order = checkout_bin::place_order(server.addr, "alice").expect("an order to look up");
    let path = format!("/orders/{order}");
    let reserved = trickle("body > 1 KiB, reserve", &server, CLIENTS, &head_large, b" ", &path);
    assert!(reserved.availability() >= 90.0, "{reserved:?}");
}
