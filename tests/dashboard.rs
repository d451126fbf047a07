//! The checkout example's `GET /dashboard`, rendered by a real browser.
//!
//! Starts the checkout binary, hangs its fraud provider, drives checkouts until the
//! fraud breaker opens, then loads the page in headless Chromium and reads the
//! rendered DOM: fraud must show OPEN, both account circuits CLOSED.
//!
//! Skipped, with a message saying so, when no `chromium` (or `chromium-browser`) is
//! on `PATH`; `.ci/run` installs Debian's `chromium`. `WATERTIGHT_CHROMIUM` names
//! another browser binary. With `WATERTIGHT_DASHBOARD_SCREENSHOT=<path.png>` it also
//! saves a screenshot of that state (how examples/checkout/dashboard.png was made).

#[path = "support/checkout_bin.rs"]
mod checkout_bin;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use checkout_bin::{Checkout, exchange, get};

/// Checkouts sent at once: fewer than fraud's workers (10), so that most reach
/// the hung provider and time out; two rounds pass its `minimum_calls` (10).
const CHECKOUTS_PER_ROUND: usize = 8;

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

fn fraud_state(server: &Checkout) -> Option<String> {
    let answer = get(server.addr, "/circuits", Duration::from_secs(5)).ok()?;
    let json: serde_json::Value = serde_json::from_str(&answer.body).ok()?;
    let deps = json["dependencies"].as_array()?;
    let fraud = deps.iter().find(|d| d["name"] == "fraud")?;
    fraud["state"].as_str().map(str::to_owned)
}

#[test]
fn dashboard_shows_the_fraud_breaker_open_and_account_closed() {
    let Some(browser) = find_browser() else {
        eprintln!(
            "SKIPPED dashboard browser test: no `chromium` or `chromium-browser` on PATH \
             (install Debian's `chromium`, as .ci/run does, or set WATERTIGHT_CHROMIUM)"
        );
        return;
    };
    let server = Checkout::start(&["--request-threads", "32"]);

    let page = get(server.addr, "/dashboard", Duration::from_secs(5)).expect("GET /dashboard");
    assert_eq!(page.status, 200, "{}", page.head);
    assert!(page.head.to_ascii_lowercase().contains("content-type: text/html"), "{}", page.head);
    for external in [" src=", "<link", "@import", "url("] {
        assert!(!page.body.contains(external), "the page loads nothing else ({external:?})");
    }

    // One checkout while fraud is healthy caches alice's access (60 s), so the
    // concurrent checkouts below all get past the access gate to fraud.
    checkout_bin::place_order(server.addr, "alice").expect("a checkout with healthy providers");

    let hang =
        b"POST /_faults/fraud HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nhang";
    let set = exchange(server.addr, hang, Duration::from_secs(5)).expect("POST /_faults/fraud");
    assert_eq!(set.status, 200, "{}", set.body);

    // Rounds of concurrent checkouts, each held by the hung provider until fraud's
    // 3 s deadline, until the breaker has seen enough of them to open. A burst may
    // also meet a full queue (not recorded by the breaker), hence rounds, bounded.
    let addr = server.addr;
    let give_up = Instant::now() + Duration::from_secs(60);
    for round in 1.. {
        let clients: Vec<_> = (0..CHECKOUTS_PER_ROUND)
            .map(|_| {
                thread::spawn(move || {
                    let body = r#"{"customer_id":"c-1","amount":42}"#;
                    let request = format!(
                        "POST /checkout HTTP/1.1\r\nHost: x\r\nX-User-Id: alice\r\nContent-Type: \
                         application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    exchange(addr, request.as_bytes(), Duration::from_secs(20)).map(|a| a.status)
                })
            })
            .collect();
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
    assert_eq!(text_of(&dom, "state-fraud"), Some("OPEN"), "fraud's state as rendered");
    assert_eq!(text_of(&dom, "state-account-access"), Some("CLOSED"));
    assert_eq!(text_of(&dom, "state-account-read"), Some("CLOSED"));
    let since = text_of(&dom, "since-fraud").expect("fraud's time in state");
    assert!(since.starts_with("in OPEN for ") && since.contains(" s"), "{since}");
    assert!(dom.contains("id=\"request-pool-busy\""), "the request pool's busy threads are drawn");
    assert!(dom.contains(" / 32<"), "the request pool's size (32) is drawn");
    let totals = text_of(&dom, "totals-fraud").expect("fraud's totals");
    assert!(
        totals.contains("timed_out ") || totals.contains("failed "),
        "the hung calls are counted: {totals}"
    );

    if let Some(png) = std::env::var_os("WATERTIGHT_DASHBOARD_SCREENSHOT") {
        let args = [
            "--virtual-time-budget=5000".to_owned(),
            "--window-size=1280,860".to_owned(),
            format!("--screenshot={}", PathBuf::from(&png).display()),
        ];
        browse(&browser, &url, &args, Duration::from_secs(60)).expect("a screenshot");
        eprintln!("dashboard screenshot: {}", PathBuf::from(png).display());
    }
}
