//! The checkout example as a real process on a free loopback port, and raw HTTP/1.1
//! over `std::net` for requests no HTTP client would send.
//!
//! Included by path (`#[path = "support/checkout_bin.rs"] mod checkout_bin;`) from
//! the tests that drive the binary with hostile input.
#![allow(dead_code)] // each test file uses a different part of this module

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

/// The checkout example's binary (see [`example`]).
pub fn binary() -> PathBuf {
    example("checkout")
}

/// An example's binary (`target/<profile>/examples/<name>`), brought up to
/// date once per test process and name (a filtered run may not have built
/// it, and a binary left from an earlier build may be stale), with every
/// feature, as the README's test command builds it.
pub fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile_dir.join("examples").join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let mut built = BUILT.get_or_init(|| Mutex::new(Vec::new())).lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|b| b == name) {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--all-features", "--example", name]).current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build --example");
        assert!(status.success(), "building the {name} example failed");
        built.push(name.to_owned());
    }
    path
}

/// A running checkout server. Dropping it kills the process.
pub struct Checkout {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Checkout {
    /// Starts the server on a free port with `args`, and waits (bounded) for its
    /// first line, `listening on http://<addr>`.
    pub fn start(args: &[&str]) -> Checkout {
        Checkout::start_on("127.0.0.1:0", args)
    }

    /// [`start`](Self::start) listening on `listen` (`0.0.0.0:0`, say). The
    /// address read back is the one it prints; [`url`](Self::url) and the
    /// raw helpers then connect through 127.0.0.1 whatever it listens on.
    pub fn start_on(listen: &str, args: &[&str]) -> Checkout {
        let mut with_addr = vec!["--addr", listen];
        with_addr.extend_from_slice(args);
        Checkout::start_example("checkout", &with_addr)
    }

    /// Starts the example `name` with `args`, and waits (bounded) for its
    /// first line, `listening on http://<addr>`.
    pub fn start_example(name: &str, args: &[&str]) -> Checkout {
        let mut child = Command::new(example(name))
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the checkout example");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr_pipe = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(String::new()));
        {
            let stderr = Arc::clone(&stderr);
            thread::spawn(move || {
                for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
                    let mut log = stderr.lock().unwrap_or_else(|e| e.into_inner());
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            for _ in lines {}
        });
        let first = rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the server printed no address; stderr:\n{}", stderr.lock().unwrap())
        });
        let mut addr: SocketAddr = first
            .strip_prefix("listening on http://")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
        // Tests talk to 127.0.0.1 only, even to a server listening on every address.
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        Checkout { child, addr, stderr }
    }

    /// `http://<addr><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Everything the server wrote to stderr so far (its log, at `info`).
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The server process's threads, as `/proc/<pid>/task` counts them.
    pub fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.child.id())).map_or(0, |d| d.count())
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server process's open file descriptors, as `/proc/<pid>/fd` counts them.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).map_or(0, |d| d.count())
    }

    /// Sends `signal` (e.g. `"TERM"`) to the server with `kill(1)`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits up to `timeout` for the process to exit; its status, or `None`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let give_up = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if std::time::Instant::now() >= give_up {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// `None` while the process runs; its exit status once it has died.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer read off a raw connection.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// Sends `request` (raw bytes) on a new connection, half-closes it, and reads the
/// answer until the server closes or `timeout` passes. `Err` with what happened
/// when no status line came back.
pub fn exchange(addr: SocketAddr, request: &[u8], timeout: Duration) -> Result<Answer, String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    // The server may answer (and close) before it has read everything, so a
    // failed write is not yet a failure: the answer decides.
    let _ = stream.write_all(request);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut got = Vec::new();
    let end = stream.read_to_end(&mut got);
    parse_answer(&got)
        .ok_or_else(|| format!("no HTTP answer ({end:?}), got {:?}", String::from_utf8_lossy(&got)))
}

/// Splits an answer into status, head and body: the first final answer, after
/// any `100 Continue`.
pub fn parse_answer(bytes: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(bytes);
    let mut rest: &str = &text;
    loop {
        let (head, body) = rest.split_once("\r\n\r\n")?;
        let status: u16 = head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
        if (100..200).contains(&status) {
            rest = body;
            continue;
        }
        return Some(Answer { status, head: head.to_owned(), body: body.to_owned() });
    }
}

/// A `GET` for `path`, closing the connection after the answer.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<Answer, String> {
    exchange(addr, format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(), timeout)
}

/// A `POST /checkout` with a valid order for `user`; the order's id on 201.
pub fn place_order(addr: SocketAddr, user: &str) -> Result<String, String> {
    let body = r#"{"customer_id":"c-1","amount":42}"#;
    let request = format!(
        "POST /checkout HTTP/1.1\r\nHost: x\r\nX-User-Id: {user}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = exchange(addr, request.as_bytes(), Duration::from_secs(10))?;
    if answer.status != 201 {
        return Err(format!("checkout answered {}: {}", answer.status, answer.body));
    }
    let json: serde_json::Value = serde_json::from_str(&answer.body).map_err(|e| e.to_string())?;
    json["order_id"].as_str().map(str::to_owned).ok_or_else(|| format!("no order_id in {}", answer.body))
}
