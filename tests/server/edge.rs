//! Attacks on the edge, against the real checkout binary: exposed directly
//! (the guard in `watertight::server` in front of tiny_http) and behind real
//! nginx with `examples/checkout/nginx.conf`.
//!
//! Each attack is bounded in time and runs on loopback only:
//! - a body declared as 1,000,000,000,000 bytes, 7 of them sent: `413`, and the
//!   process lives;
//! - a 16 KiB header: `431` (nginx answers that one itself with `400`);
//! - 48 clients trickling request heads and 48 trickling 4 KiB bodies at 2 B/s
//!   (from 127.0.0.3 and 127.0.0.4, 48 each: within the per-peer cap),
//!   while `GET /orders/{id}` is polled on new connections: at least 99 %
//!   answered `200`, p99 at most 250 ms;
//! - 200 connections opened at once from 200 addresses (127.0.1.1 to
//!   127.0.1.200), each asking `/health`: all answered within 5 s;
//! - 4,000 connections opened and closed without a byte: the server's
//!   threads and descriptors (`/proc/<pid>/task`, `/proc/<pid>/fd`) come back
//!   to what they were, polled for at most 10 s.
//!
//! The two targets take turns (one lock), so that neither measures the other.
//! The nginx run is skipped, saying so, when `nginx` is not installed
//! (`.ci/run` installs it).
#![cfg(all(feature = "ureq", feature = "tiny_http", feature = "prometheus"))]

use crate::checkout_bin;
use crate::nginx;
use crate::peers::connect_from;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use checkout_bin::Checkout;

/// One target at a time.
pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

const TIMEOUT: Duration = Duration::from_secs(5);

/// What the attacks are aimed at, and the processes whose threads and
/// descriptors they count.
struct Target<'a> {
    name: &'static str,
    addr: SocketAddr,
    checkout: &'a mut Checkout,
    /// nginx's process, when it is in front.
    proxy_pid: Option<u32>,
    /// The statuses a 16 KiB header may get.
    big_header: &'static [u16],
}

impl Target<'_> {
    fn alive(&mut self) -> Result<(), String> {
        if let Some(status) = self.checkout.exited() {
            return Err(format!("the checkout process died: {status}\n{}", self.checkout.stderr()));
        }
        match checkout_bin::get(self.addr, "/health", TIMEOUT) {
            Ok(a) if a.status == 200 => Ok(()),
            other => Err(format!("/health does not answer 200: {other:?}")),
        }
    }

    /// Threads and descriptors of every process of the target.
    fn resources(&self) -> (usize, usize) {
        let (mut threads, mut fds) = (self.checkout.threads(), self.checkout.fds());
        if let Some(pid) = self.proxy_pid {
            threads += count(&format!("/proc/{pid}/task"));
            fds += count(&format!("/proc/{pid}/fd"));
        }
        (threads, fds)
    }
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

fn huge_declared_body(t: &mut Target<'_>) -> Result<String, String> {
    let request = "POST /checkout HTTP/1.1\r\nHost: x\r\nX-User-Id: alice\r\nContent-Type: application/json\r\n\
                   Content-Length: 1000000000000\r\n\r\n{\"a\":1}";
    let answer = checkout_bin::exchange(t.addr, request.as_bytes(), TIMEOUT)?;
    if answer.status != 413 {
        return Err(format!("expected 413, got {answer:?}"));
    }
    t.alive()?;
    Ok("413, and the process lives".to_owned())
}

fn big_header(t: &mut Target<'_>) -> Result<String, String> {
    let request = format!("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(16 * 1024));
    let answer = checkout_bin::exchange(t.addr, request.as_bytes(), TIMEOUT)?;
    if !t.big_header.contains(&answer.status) {
        return Err(format!("expected one of {:?}, got {answer:?}", t.big_header));
    }
    t.alive()?;
    Ok(format!("{}", answer.status))
}

const TRICKLERS: usize = 48;
const TRICKLE_FOR: Duration = Duration::from_secs(6);
const PROBE_EVERY: Duration = Duration::from_millis(50);

fn tricklers(t: &mut Target<'_>, order_path: &str) -> Result<String, String> {
    let addr = t.addr;
    let mut slow = Vec::new();
    for i in 0..2 * TRICKLERS {
        // Two peers, each within its share of the connections.
        let from = if i < TRICKLERS { "127.0.0.3" } else { "127.0.0.4" };
        let mut s = connect_from(from, addr).map_err(|e| format!("connect: {e}"))?;
        s.set_write_timeout(Some(Duration::from_secs(1))).map_err(|e| e.to_string())?;
        let head = if i % 2 == 0 {
            "GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ".to_owned()
        } else {
            "POST /checkout HTTP/1.1\r\nHost: x\r\nX-User-Id: slow\r\nContent-Type: application/json\r\n\
             Content-Length: 4096\r\n\r\n"
                .to_owned()
        };
        s.write_all(head.as_bytes()).map_err(|e| format!("write a head: {e}"))?;
        slow.push(s);
    }
    let began = Instant::now();
    // 2 B/s per connection: one byte each every 500 ms, until the end.
    let dripper = thread::spawn(move || {
        let mut tick = 0u32;
        while began.elapsed() < TRICKLE_FOR {
            for s in &mut slow {
                let _ = s.write_all(b"a");
            }
            tick += 1;
            if let Some(wait) =
                (began + Duration::from_millis(500) * tick).checked_duration_since(Instant::now())
            {
                thread::sleep(wait.min(TRICKLE_FOR.saturating_sub(began.elapsed())));
            }
        }
        slow
    });
    let mut latencies = Vec::new();
    let mut failures = Vec::new();
    let mut n = 0u32;
    while began.elapsed() < TRICKLE_FOR {
        let asked = Instant::now();
        match checkout_bin::get(addr, order_path, Duration::from_secs(2)) {
            Ok(a) if a.status == 200 => latencies.push(asked.elapsed()),
            other => failures.push(format!("{:?}: {other:?}", asked - began)),
        }
        n += 1;
        if let Some(wait) = (began + PROBE_EVERY * n).checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
    }
    let slow = dripper.join().map_err(|_| "the dripper panicked")?;
    drop(slow);
    let probes = latencies.len() + failures.len();
    latencies.sort();
    let p99 = latencies.get((latencies.len() * 99 / 100).saturating_sub(1)).copied().unwrap_or(Duration::MAX);
    let share = latencies.len() as f64 * 100.0 / probes.max(1) as f64;
    let seen = format!(
        "{}/{probes} probes answered 200 ({share:.1} %), p50 {:.1?}, p99 {p99:.1?}, max {:.1?}",
        latencies.len(),
        latencies.get(latencies.len() / 2).copied().unwrap_or_default(),
        latencies.last().copied().unwrap_or_default(),
    );
    if probes < 50 || share < 99.0 || p99 > Duration::from_millis(250) {
        return Err(format!("{seen}; first failures: {:?}", &failures[..failures.len().min(3)]));
    }
    t.alive()?;
    Ok(seen)
}

fn burst(t: &mut Target<'_>) -> Result<String, String> {
    const N: usize = 200;
    let addr = t.addr;
    let start = Arc::new(Barrier::new(N + 1));
    let clients: Vec<_> = (0..N)
        .map(|i| {
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                let began = Instant::now();
                let answer = get_from(&format!("127.0.1.{}", i + 1), addr, "/health");
                (answer.map(|a| a.status), began.elapsed())
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    let results: Vec<_> = clients.into_iter().map(|c| c.join().expect("a client thread")).collect();
    let all = began.elapsed();
    let ok = results.iter().filter(|(s, _)| matches!(s, Ok(200))).count();
    let slowest = results.iter().map(|(_, d)| *d).max().unwrap_or_default();
    let seen = format!("{ok}/{N} answered 200, slowest {slowest:.1?}, all within {all:.1?}");
    if ok != N || all > Duration::from_secs(5) {
        let bad: Vec<_> = results.iter().filter(|(s, _)| !matches!(s, Ok(200))).take(3).collect();
        return Err(format!("{seen}; e.g. {bad:?}"));
    }
    t.alive()?;
    Ok(seen)
}

/// `GET path` on a new connection from the address `from`.
fn get_from(from: &str, addr: SocketAddr, path: &str) -> Result<checkout_bin::Answer, String> {
    let mut stream = connect_from(from, addr).map_err(|e| format!("connect: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(|e| format!("write: {e}"))?;
    let mut got = Vec::new();
    let end = stream.read_to_end(&mut got);
    checkout_bin::parse_answer(&got)
        .ok_or_else(|| format!("no HTTP answer ({end:?}), got {:?}", String::from_utf8_lossy(&got)))
}

fn empty_connections(t: &mut Target<'_>) -> Result<String, String> {
    const N: usize = 4_000;
    // A baseline that has stopped moving for 1.5 s: earlier attacks'
    // connections are gone, and so are the guard's idle connection threads
    // (they wait 1 s for another connection).
    let mut before = t.resources();
    let (mut still_since, settle_until) = (Instant::now(), Instant::now() + Duration::from_secs(10));
    while still_since.elapsed() < Duration::from_millis(1500) && Instant::now() < settle_until {
        thread::sleep(Duration::from_millis(100));
        let now = t.resources();
        if now != before {
            (before, still_since) = (now, Instant::now());
        }
    }
    // 25 clients side by side: a connection whose SYN the full listen backlog
    // dropped (the kernel resends it after a second) delays one client, not
    // the whole run.
    const CLIENTS: usize = 25;
    let began = Instant::now();
    let addr = t.addr;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            thread::spawn(move || -> Result<(), String> {
                for i in 0..N / CLIENTS {
                    let s = TcpStream::connect_timeout(&addr, TIMEOUT)
                        .map_err(|e| format!("connect #{i}: {e}"))?;
                    drop(s);
                }
                Ok(())
            })
        })
        .collect();
    let mut most = before;
    while !clients.iter().all(|c| c.is_finished()) {
        let now = t.resources();
        most = (most.0.max(now.0), most.1.max(now.1));
        thread::sleep(Duration::from_millis(50));
    }
    for client in clients {
        client.join().map_err(|_| "a client panicked")??;
    }
    let took = began.elapsed();
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut after = t.resources();
    while (after.0 > before.0 || after.1 > before.1) && Instant::now() < give_up {
        thread::sleep(Duration::from_millis(20));
        after = t.resources();
    }
    let seen = format!(
        "{N} in {took:.1?}; threads {} -> at most {} -> {}, descriptors {} -> at most {} -> {}",
        before.0, most.0, after.0, before.1, most.1, after.1
    );
    if after.0 > before.0 || after.1 > before.1 {
        return Err(seen);
    }
    t.alive()?;
    Ok(seen)
}

/// One attack: what it saw, or why it failed.
type Attack<'a> = &'a dyn Fn(&mut Target<'_>) -> Result<String, String>;

/// Runs every attack, prints what each saw, and fails with all that failed.
fn attack(t: &mut Target<'_>) {
    let order = checkout_bin::place_order(t.checkout.addr, "alice").expect("an order to look up");
    let order_path = format!("/orders/{order}");
    let mut failed = Vec::new();
    let attacks: [(&str, Attack<'_>); 5] = [
        ("huge declared body", &huge_declared_body),
        ("16 KiB header", &big_header),
        ("96 tricklers at 2 B/s", &|t| tricklers(t, &order_path)),
        ("200 connections at once", &burst),
        ("4,000 empty connections", &empty_connections),
    ];
    for (name, run) in attacks {
        let began = Instant::now();
        let outcome = run(t);
        println!("edge [{}] {name}: {outcome:?} ({:.1?})", t.name, began.elapsed());
        if let Err(e) = outcome {
            failed.push(format!("{name}: {e}"));
        }
    }
    assert!(
        failed.is_empty(),
        "[{}] failed:\n{}\nserver log:\n{}",
        t.name,
        failed.join("\n"),
        t.checkout.stderr()
    );
}

#[test]
fn the_attack_list_against_the_binary_exposed_directly() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut checkout = Checkout::start(&[]);
    let addr = checkout.addr;
    let mut target =
        Target { name: "direct", addr, checkout: &mut checkout, proxy_pid: None, big_header: &[431] };
    attack(&mut target);
}

#[test]
fn the_attack_list_through_nginx() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !nginx::installed() {
        println!(
            "SKIPPED the_attack_list_through_nginx: `nginx` is not installed (apt-get install -y nginx)"
        );
        return;
    }
    // nginx connects from 127.0.0.2 (the recipe's `proxy_bind`): a trusted
    // proxy, exempt from the per-peer cap.
    let mut checkout = Checkout::start(&["--trusted-proxy", "127.0.0.2"]);
    let proxy = nginx::Nginx::start(checkout.addr);
    let mut target = Target {
        name: "nginx",
        addr: proxy.addr,
        checkout: &mut checkout,
        proxy_pid: Some(proxy.pid()),
        big_header: &[400, 431],
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| attack(&mut target)));
    if let Err(panic) = outcome {
        eprintln!("nginx error log:\n{}", proxy.error_log());
        std::panic::resume_unwind(panic);
    }
}
