//! The checkout example's `GET /dashboard`, rendered by a real browser.
//!
//! Starts the checkout binary with its embedded config under a steady load of
//! checkouts, hangs its fraud provider, and opens the page in headless Chromium 10 s
//! later, as an operator would in the middle of the incident. The page draws from
//! `GET /circuits/stream`, whose first event is the history, so the DOM it shows on
//! that first event alone must already hold the incident's onset: fraud OPEN, its
//! CLOSED -> OPEN transition, and its call rate dropped from what it was before the
//! hang; and no card may show an empty or stale field (fraud's timeout reads `3s`,
//! never `deadline –`).
//!
//! Headless Chromium's virtual time stands still while a connection is open, so the
//! page is opened as `/dashboard?frames=N`, which closes the stream after N
//! snapshots (0: right after the history); the DOM is then dumped at once. The
//! virtual-time budget must outlast the stream: one that runs out while the stream
//! is still open never ends.
//!
//! Skipped, with a message saying so, when no `chromium` (or `chromium-browser`) is
//! on `PATH`; `.ci/run` installs Debian's `chromium`. `WATERTIGHT_CHROMIUM` names
//! another browser binary.
//!
//! The README's screenshot is made here too: with `WATERTIGHT_WRITE_SCREENSHOT=1`
//! the test writes `examples/checkout/dashboard.png` (or the path in
//! `WATERTIGHT_DASHBOARD_SCREENSHOT`) of the same page, right after the DOM is read:
//!
//! ```text
//! WATERTIGHT_WRITE_SCREENSHOT=1 cargo test --all-features --test checkout dashboard::
//! ```

use crate::checkout_bin;

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use checkout_bin::{Checkout, exchange, get};
use serde_json::Value;

/// Checkout clients of the steady load: fraud's hold in the embedded config (6
/// workers and a queue of 2), so that when fraud hangs every worker is stuck at
/// once and its breaker opens within a second (the stuck rule), long before the
/// page is opened.
const CHECKOUT_CLIENTS: usize = 8;
/// Each checkout client sends one checkout this often (when answered in time).
const CHECKOUT_EVERY: Duration = Duration::from_millis(250);
/// The load before fraud hangs: the healthy part of the history.
const HEALTHY: Duration = Duration::from_secs(5);
/// How long after the hang the page is opened.
const OPENED_AFTER: Duration = Duration::from_secs(10);
/// Snapshots the screenshot's page draws after the history (a second each).
const SCREENSHOT_FRAMES: u64 = 2;

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

/// Where the screenshot goes, if one is asked for.
fn screenshot_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("WATERTIGHT_DASHBOARD_SCREENSHOT") {
        return Some(PathBuf::from(path));
    }
    let write = std::env::var("WATERTIGHT_WRITE_SCREENSHOT").is_ok_and(|v| v == "1");
    write.then(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/checkout/dashboard.png"))
}

/// The steady load: checkout clients, and one client reading a profile
/// (through account-read) and an order (which calls nothing). Bounded: each
/// stops at `stop` or after two minutes, whichever comes first.
struct Load {
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(addr: SocketAddr, order_id: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let give_up = Instant::now() + Duration::from_secs(120);
        let mut clients: Vec<JoinHandle<()>> = (0..CHECKOUT_CLIENTS)
            .map(|_| {
                let stop = Arc::clone(&stop);
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) && Instant::now() < give_up {
                        let began = Instant::now();
                        let status = checkout(addr);
                        // 201 while fraud is healthy; 202 (manual review) once it is not.
                        assert!(matches!(status, Ok(201) | Ok(202)), "a checkout answered {status:?}");
                        thread::sleep(CHECKOUT_EVERY.saturating_sub(began.elapsed()));
                    }
                })
            })
            .collect();
        let order = format!("/orders/{order_id}");
        let reader_stop = Arc::clone(&stop);
        clients.push(thread::spawn(move || {
            while !reader_stop.load(Ordering::Relaxed) && Instant::now() < give_up {
                assert_eq!(send(addr, "GET", "/me", "alice", ""), Ok(200));
                assert_eq!(send(addr, "GET", &order, "alice", ""), Ok(200));
                thread::sleep(Duration::from_millis(100));
            }
        }));
        Load { stop, clients }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.join().expect("a load client");
        }
    }
}

/// Renders `/dashboard?frames=<frames>` with `args`, retried (bounded) in case
/// the browser is slow to start; its stdout and how long the last try took.
fn render(browser: &Path, server: &Checkout, frames: u64, args: &[String]) -> (String, Duration) {
    let url = server.url(&format!("/dashboard?frames={frames}"));
    let mut args = args.to_vec();
    args.push(format!("--virtual-time-budget={}", (frames + 5) * 1000));
    let give_up = Instant::now() + Duration::from_secs(90);
    loop {
        let began = Instant::now();
        let attempt = browse(browser, &url, &args, Duration::from_secs(30));
        match attempt {
            Ok(out)
                if args.iter().any(|a| a.starts_with("--screenshot"))
                    || text_of(&out, "state-fraud").is_some() =>
            {
                return (out, began.elapsed());
            }
            other => assert!(Instant::now() < give_up, "no rendered dashboard in 90 s; last: {other:?}"),
        }
    }
}

/// Takes the screenshot at `png`, and checks that the breaker stayed OPEN all
/// along.
fn screenshot(browser: &Path, server: &Checkout, png: &Path) {
    let tmp = std::env::temp_dir().join(format!("watertight-dashboard-{}.png", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let began = Instant::now();
    let args = ["--window-size=1280,1400".to_owned(), format!("--screenshot={}", tmp.display())];
    render(browser, server, SCREENSHOT_FRAMES, &args);
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
    eprintln!(
        "dashboard screenshot: {} ({SCREENSHOT_FRAMES} snapshots after the history, {took:.1?})",
        png.display()
    );
}

/// A number the page shows, as `text_of` finds it.
fn number(dom: &str, id: &str) -> f64 {
    let text = text_of(dom, id).unwrap_or_else(|| panic!("no #{id}"));
    text.parse().unwrap_or_else(|_| panic!("#{id} is not a number: {text:?}"))
}

/// An attribute of the element whose `id` is `id`.
fn attribute_of<'a>(dom: &'a str, id: &str, name: &str) -> Option<&'a str> {
    let at = dom.find(&format!("id=\"{id}\""))?;
    let open = dom[..at].rfind('<')?;
    let tag = &dom[open..at + dom[at..].find('>')?];
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(&tag[start..start + tag[start..].find('"')?])
}

#[test]
fn dashboard_opened_during_a_hang_shows_its_onset_at_once() {
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
    // checkouts below all get past the access gate to fraud; it is approved, so
    // notification has a call too.
    let order = checkout_bin::place_order(server.addr, "alice").expect("a checkout with healthy providers");
    let load = Load::start(server.addr, &order);
    thread::sleep(HEALTHY);

    let hang =
        b"POST /_faults/fraud HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nhang";
    let set = exchange(server.addr, hang, Duration::from_secs(5)).expect("POST /_faults/fraud");
    assert_eq!(set.status, 200, "{}", set.body);
    let hung = Instant::now();
    thread::sleep(OPENED_AFTER);
    assert_eq!(
        fraud_state(&server).as_deref(),
        Some("open"),
        "fraud's breaker {OPENED_AFTER:?} into the hang"
    );

    // The page as it is the moment its first event, the history, has arrived.
    let args = ["--dump-dom".to_owned()];
    let (dom, took) = render(&browser, &server, 0, &args);
    eprintln!("dashboard opened {:.1?} into the hang, rendered in {took:.1?}", hung.elapsed());
    assert!(took < Duration::from_secs(30), "the browser took {took:?}");
    let first_ms: u64 = dom
        .split("data-first-render-ms=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|ms| ms.parse().ok())
        .expect("the page says when it first rendered");
    assert!(first_ms < 1000, "the page first rendered {first_ms} ms after it opened");
    assert!(
        text_of(&dom, "status").is_some_and(|s| s.contains("stream closed after 0 snapshots")),
        "what is shown came from the history alone: {:?}",
        text_of(&dom, "status")
    );

    // The onset: OPEN, the transition that opened it, and the call rate's drop.
    // OPEN, or HALF_OPEN when a loaded machine took longer than `open_for`
    // to render it: either way not CLOSED, and its opening is in the events.
    let state = text_of(&dom, "state-fraud");
    assert!(matches!(state, Some("OPEN" | "HALF_OPEN")), "fraud's state as rendered: {state:?}");
    let events = &dom[dom.find("id=\"events-fraud\"").expect("fraud's events")..];
    let events = &events[..events.find("</ul>").expect("the end of the list")];
    assert!(events.contains("CLOSED → OPEN"), "fraud's events show its opening: {events}");
    let peak = number(&dom, "calls-peak-fraud");
    let now = number(&dom, "calls-now-fraud");
    assert!(peak >= 5.0, "fraud took {peak} calls/s at most before the hang");
    assert!(now <= peak / 4.0, "fraud's call rate dropped: {now} calls/s now, {peak} at most");
    assert!(number(&dom, "refused-now-fraud") > 0.0, "the open breaker refuses the checkouts' calls");
    assert_eq!(attribute_of(&dom, "health-fraud", "class"), Some("health bad"), "fraud's health colour");
    let points: usize = attribute_of(&dom, "spark-fraud", "data-points")
        .and_then(|n| n.parse().ok())
        .expect("fraud's sparkline says how many points it drew");
    let healthy_and_hung = (HEALTHY + OPENED_AFTER).as_secs() as usize;
    assert!(points + 3 >= healthy_and_hung, "the sparkline draws the whole history: {points} points");
    for name in ["account-access", "account-read", "notification"] {
        assert_eq!(text_of(&dom, &format!("state-{name}")), Some("CLOSED"), "{name}");
    }

    if let Some(png) = screenshot_path() {
        screenshot(&browser, &server, &png);
    }
    load.stop();

    let since = text_of(&dom, "since-fraud").expect("fraud's time in state");
    let in_state = format!("in {} for ", state.unwrap_or_default());
    assert!(since.starts_with(&in_state) && since.contains(" s · "), "{since}");
    // A breaker opens on its rates or on a stall, and says which it has.
    assert!(since.contains(" s · failure rate ") || since.contains(" s · no rate until "), "{since}");

    // Every card's settings, as /circuits serves them: nothing empty, nothing stale.
    let circuits = circuits(&server);
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
        // of the approved ones, the profile reads).
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
