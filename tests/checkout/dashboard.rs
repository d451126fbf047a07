//! The checkout example's `GET /dashboard`, rendered by a real browser.
//!
//! Starts the checkout binary with its embedded config, hangs its fraud provider,
//! drives checkouts until the fraud breaker opens, then loads the page in headless
//! Chromium and reads the rendered DOM: fraud must show OPEN and the other circuits
//! CLOSED, and no card may show an empty or stale field (every value the page reads
//! must be one `/circuits` serves: fraud's timeout reads `3s`, never `deadline –`).
//!
//! Skipped, with a message saying so, when no `chromium` (or `chromium-browser`) is
//! on `PATH`; `.ci/run` installs Debian's `chromium`. `WATERTIGHT_CHROMIUM` names
//! another browser binary.
//!
//! The README's screenshot is made here too: with `WATERTIGHT_WRITE_SCREENSHOT=1`
//! the test writes `examples/checkout/dashboard.png` (or the path in
//! `WATERTIGHT_DASHBOARD_SCREENSHOT`) of the incident as it runs, under a steady
//! load, right after the fraud breaker opened:
//!
//! ```text
//! WATERTIGHT_WRITE_SCREENSHOT=1 cargo test --all-features --test checkout dashboard::
//! ```

use crate::checkout_bin;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use checkout_bin::{Checkout, exchange, get};
use serde_json::Value;

/// Checkouts sent at once: fraud's hold in the embedded config (6 workers and a
/// queue of 2), so that each reaches the hung provider and times out; one round
/// is its `minimum_calls` (8), enough to open it (its stall rule may open it
/// sooner, and a caller that then finds it open is answered at once).
const CHECKOUTS_PER_ROUND: usize = 8;

/// Polls of `/circuits` the screenshot's page makes, one a second of real time.
const SCREENSHOT_POLLS: u64 = 10;

fn find_browser() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("WATERTIGHT_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let dirs = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser"]
        .iter()
        .flat_map(|name| std::env::split_paths(&dirs).map(move |dir| dir.join(name)))
        .find(|path| path.is_file())
}

/// Runs the browser headless on `url` with `args`, killed after `limit`. Its stdout.
fn browse(browser: &Path, url: &str, args: &[String], limit: Duration) -> Result<String, String> {
    static RUN: AtomicU32 = AtomicU32::new(0);
    let profile = std::env::temp_dir().join(format!(
        "watertight-dashboard-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    ));
    let mut child = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", browser.display()))?;
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let give_up = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(status);
        }
        if Instant::now() >= give_up {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap_or_default();
    let _ = std::fs::remove_dir_all(&profile);
    match status {
        Some(s) if s.success() => Ok(out),
        Some(s) => Err(format!("the browser exited with {s}")),
        None => Err(format!("the browser ran past {limit:?} and was killed")),
    }
}

/// The text of the element whose `id` is `id` (up to its first child tag).
fn text_of<'a>(dom: &'a str, id: &str) -> Option<&'a str> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let rest = &dom[at..];
    let start = rest.find('>')? + 1;
    let end = rest[start..].find('<')?;
    Some(rest[start..start + end].trim())
}

fn circuits(server: &Checkout) -> Value {
    let answer = get(server.addr, "/circuits", Duration::from_secs(5)).expect("GET /circuits");
    assert_eq!(answer.status, 200, "{}", answer.body);
    serde_json::from_str(&answer.body)
        .unwrap_or_else(|e| panic!("/circuits is not JSON ({e}): {}", answer.body))
}

fn dependency<'a>(circuits: &'a Value, name: &str) -> &'a Value {
    let deps = circuits["dependencies"].as_array().expect("/circuits lists dependencies");
    deps.iter().find(|d| d["name"] == name).unwrap_or_else(|| panic!("no {name} in {circuits}"))
}

fn fraud_state(server: &Checkout) -> Option<String> {
    dependency(&circuits(server), "fraud")["state"].as_str().map(str::to_owned)
}

/// A configured duration as the page writes it, and as watertight.toml does.
fn setting(ms: u64) -> String {
    if ms.is_multiple_of(1000) { format!("{}s", ms / 1000) } else { format!("{ms}ms") }
}

fn send(addr: SocketAddr, method: &str, path: &str, user: &str, body: &str) -> Result<u16, String> {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nX-User-Id: {user}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(addr, request.as_bytes(), Duration::from_secs(20)).map(|a| a.status)
}

fn checkout(addr: SocketAddr) -> Result<u16, String> {
    send(addr, "POST", "/checkout", "alice", r#"{"customer_id":"c-1","amount":42}"#)
}

/// A loopback proxy in front of `target` that forwards each request on a
/// connection of its own, holding every `/circuits` request for `pace`
/// first. Headless Chromium's virtual time stands still while a fetch is
/// pending, so the page's polls, a virtual second apart, then come a real
/// `pace` apart, and the rates it computes between them (over the server's
/// `uptime_ms`) are those of whole seconds, as in a browser a person watches.
fn pacing_proxy(target: SocketAddr, pace: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
    let addr = listener.local_addr().expect("the proxy's address");
    thread::spawn(move || {
        for client in listener.incoming().flatten() {
            thread::spawn(move || forward(client, target, pace));
        }
    });
    addr
}

/// One request from `client` (a GET: a head and no body) to `target`, and
/// its answer back; then both connections close.
fn forward(mut client: TcpStream, target: SocketAddr, pace: Duration) {
    let _ = client.set_read_timeout(Some(Duration::from_secs(30)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let path = text.split(' ').nth(1).unwrap_or("/").to_owned();
    if path.starts_with("/circuits") {
        thread::sleep(pace);
    }
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    if let Ok(mut upstream) = TcpStream::connect(target) {
        let _ = upstream.set_read_timeout(Some(Duration::from_secs(30)));
        if upstream.write_all(request.as_bytes()).is_ok() {
            let _ = upstream.read_to_end(&mut answer);
        }
    }
    let _ = client.write_all(&answer);
}

/// Where the screenshot goes, if one is asked for.
fn screenshot_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("WATERTIGHT_DASHBOARD_SCREENSHOT") {
        return Some(PathBuf::from(path));
    }
    let write = std::env::var("WATERTIGHT_WRITE_SCREENSHOT").is_ok_and(|v| v == "1");
    write.then(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/checkout/dashboard.png"))
}

/// Takes the screenshot at `png` of the page under a steady load (checkouts,
/// which the open breaker answers at once, profile reads through
/// account-read, and reads of order `order_id`, which call nothing), and
/// checks that the breaker stayed OPEN all along.
fn screenshot(browser: &Path, server: &Checkout, png: &Path, order_id: &str) {
    let stop = Arc::new(AtomicBool::new(false));
    let addr = server.addr;
    let order = format!("/orders/{order_id}");
    let load = {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(checkout(addr), Ok(202), "an open fraud breaker means manual review");
                assert_eq!(send(addr, "GET", "/me", "alice", ""), Ok(200));
                assert_eq!(send(addr, "GET", &order, "alice", ""), Ok(200));
                // About ten of each a second: a load to draw, not a stress.
                thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let proxy = pacing_proxy(server.addr, Duration::from_secs(1));
    let tmp = std::env::temp_dir().join(format!("watertight-dashboard-{}.png", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let began = Instant::now();
    let args = [
        format!("--virtual-time-budget={}", SCREENSHOT_POLLS * 1000),
        "--window-size=1280,1280".to_owned(),
        format!("--screenshot={}", tmp.display()),
    ];
    let shot = browse(browser, &format!("http://{proxy}/dashboard"), &args, Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    load.join().expect("the load thread");
    shot.expect("a screenshot");
    let took = began.elapsed();

    let fraud = dependency(&circuits(server), "fraud").clone();
    let open_for = Duration::from_millis(fraud["state_for_ms"].as_u64().unwrap_or(0));
    assert!(
        fraud["state"] == "open" && open_for >= took,
        "the fraud breaker left OPEN during the {took:?} of the screenshot: {fraud}"
    );
    let bytes = std::fs::read(&tmp).expect("the screenshot's file");
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000,
        "not a PNG: {} bytes",
        bytes.len()
    );
    std::fs::write(png, &bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", png.display()));
    let _ = std::fs::remove_file(&tmp);
    eprintln!("dashboard screenshot: {} ({} polls in {took:.1?})", png.display(), SCREENSHOT_POLLS);
}

#[test]
fn dashboard_shows_the_incident_with_every_field_filled() {
    let Some(browser) = find_browser() else {
        eprintln!(
            "SKIPPED dashboard browser test: no `chromium` or `chromium-browser` on PATH \
             (install Debian's `chromium`, as .ci/run does, or set WATERTIGHT_CHROMIUM)"
        );
        return;
    };
    // The example as it ships: the embedded watertight.toml, 16 request threads.
    let server = Checkout::start(&[]);

    let page = get(server.addr, "/dashboard", Duration::from_secs(5)).expect("GET /dashboard");
    assert_eq!(page.status, 200, "{}", page.head);
    assert!(page.head.to_ascii_lowercase().contains("content-type: text/html"), "{}", page.head);
    for external in [" src=", "<link", "@import", "url("] {
        assert!(!page.body.contains(external), "the page loads nothing else ({external:?})");
    }

    // One checkout while fraud is healthy caches alice's access (60 s), so the
    // concurrent checkouts below all get past the access gate to fraud; it is
    // approved, so notification has a call too; and one profile read gives
    // account-read one.
    let order = checkout_bin::place_order(server.addr, "alice").expect("a checkout with healthy providers");
    assert_eq!(send(server.addr, "GET", "/me", "alice", ""), Ok(200));

    let hang =
        b"POST /_faults/fraud HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nhang";
    let set = exchange(server.addr, hang, Duration::from_secs(5)).expect("POST /_faults/fraud");
    assert_eq!(set.status, 200, "{}", set.body);

    // Rounds of concurrent checkouts, each held by the hung provider until fraud's
    // 3 s timeout, until the breaker has seen enough of them to open. A burst may
    // also meet a full queue (not recorded by the breaker), hence rounds, bounded.
    let addr = server.addr;
    let give_up = Instant::now() + Duration::from_secs(60);
    for round in 1.. {
        let clients: Vec<_> =
            (0..CHECKOUTS_PER_ROUND).map(|_| thread::spawn(move || checkout(addr))).collect();
        for client in clients {
            let status = client.join().expect("a client thread").expect("a checkout answer");
            assert_eq!(status, 202, "a hung fraud provider means manual review");
        }
        if fraud_state(&server).as_deref() == Some("open") {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "the fraud breaker did not open in {round} rounds; /circuits: {:?}",
            fraud_state(&server)
        );
    }

    // First, while the breaker has only just opened (it stays OPEN for 15 s
    // under load; without calls it stays until the next one).
    if let Some(png) = screenshot_path() {
        screenshot(&browser, &server, &png, &order);
    }

    // The page renders after its first poll of /circuits; virtual time lets a few
    // polls run. Retried (bounded) in case the browser is slow to start.
    let url = server.url("/dashboard");
    let args = ["--virtual-time-budget=3000".to_owned(), "--dump-dom".to_owned()];
    let give_up = Instant::now() + Duration::from_secs(90);
    let dom = loop {
        let attempt = browse(&browser, &url, &args, Duration::from_secs(30));
        match attempt {
            Ok(dom) if text_of(&dom, "state-fraud").is_some() => break dom,
            other => {
                assert!(Instant::now() < give_up, "no rendered dashboard in 90 s; last: {other:?}");
            }
        }
    };
    let circuits = circuits(&server);
    assert_eq!(text_of(&dom, "state-fraud"), Some("OPEN"), "fraud's state as rendered");
    for name in ["account-access", "account-read", "notification"] {
        assert_eq!(text_of(&dom, &format!("state-{name}")), Some("CLOSED"), "{name}");
    }
    let since = text_of(&dom, "since-fraud").expect("fraud's time in state");
    assert!(since.starts_with("in OPEN for ") && since.contains(" s · "), "{since}");
    // A breaker opens on its rates or on a stall, and says which it has.
    assert!(since.contains(" s · failure rate ") || since.contains(" s · no rate until 8 calls"), "{since}");

    // Every card's settings, as /circuits serves them: nothing empty, nothing stale.
    let rendered = &dom[..dom.find("<script").unwrap_or(dom.len())];
    for stale in ["deadline ", "undefined", "NaN", "null", "[object"] {
        assert!(!rendered.contains(stale), "the page shows {stale:?}:\n{rendered}");
    }
    assert_eq!(text_of(&dom, "timeout-fraud"), Some("3s"), "fraud's timeout");
    assert_eq!(text_of(&dom, "max-wait-fraud"), Some("100ms"), "fraud's max wait");
    assert_eq!(text_of(&dom, "max-wait-notification"), Some("none"), "notification waits for no room");
    for dep in circuits["dependencies"].as_array().expect("dependencies") {
        let name = dep["name"].as_str().expect("a name");
        let timeout = dep["timeout_ms"].as_u64().unwrap_or_else(|| panic!("no timeout_ms in {dep}"));
        assert_eq!(text_of(&dom, &format!("timeout-{name}")), Some(setting(timeout).as_str()), "{name}");
        // Each had a call in the recent window (the checkouts, the notification
        // of the approved one, the profile read).
        let p99 = text_of(&dom, &format!("p99-{name}")).expect("a p99");
        assert!(p99.ends_with(" ms") || p99.ends_with(" s"), "{name}'s call time p99: {p99:?}");
        assert!(text_of(&dom, &format!("mean-run-{name}")).is_some(), "{name}");
        assert!(
            text_of(&dom, &format!("abandoned-{name}")).is_some_and(|a| a.parse::<u64>().is_ok()),
            "{name}"
        );
    }
    let mean_run = text_of(&dom, "mean-run-fraud").expect("fraud's mean run time");
    assert!(mean_run.ends_with(" ms") || mean_run.ends_with(" s"), "fraud's runs ended: {mean_run:?}");

    // The request pool: its size and busy threads, from /circuits.
    let threads = circuits["request_pool"]["threads"].as_u64().expect("request_pool.threads");
    assert_eq!(threads, 16, "the embedded config's request pool");
    assert_eq!(text_of(&dom, "request-pool-threads"), Some("16"));
    assert!(text_of(&dom, "request-pool-busy-now").is_some_and(|b| b.parse::<u64>().is_ok()));
    assert!(dom.contains("id=\"request-pool-busy\""), "the request pool's busy threads are drawn");
    assert!(dom.contains(" / 16<"), "the request pool's size (16) is drawn");
    let totals = text_of(&dom, "totals-fraud").expect("fraud's totals");
    assert!(
        totals.contains("timed_out ") || totals.contains("failed "),
        "the hung calls are counted: {totals}"
    );
}
