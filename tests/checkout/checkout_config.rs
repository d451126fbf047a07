//! The checkout example's configuration file, its admin routes, and
//! `PUT /_config/{name}`, against the real binary on loopback.
#![cfg(all(
    feature = "ureq",
    feature = "tiny_http",
    feature = "prometheus",
    feature = "testing",
    feature = "serde"
))]

use crate::checkout_bin;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use watertight::DependencyConfig;
use watertight::breaker::WindowKind;
use watertight::config::Config;
use watertight::retry::Retry;

use checkout_bin::{Answer, Checkout, binary, exchange, get};

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/checkout/watertight.toml");
const WAIT: Duration = Duration::from_secs(10);

fn parse(text: &str) -> Config {
    let de = toml::Deserializer::parse(text).expect("TOML");
    Config::from_deserializer(de).unwrap_or_else(|e| panic!("{e}"))
}

/// A file of `text` in the target directory, unique to this test.
fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("checkout-config-{}-{name}.toml", std::process::id()));
    std::fs::write(&path, text).expect("write a temporary config");
    path
}

fn json(answer: &Answer) -> Value {
    serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{e}: {}", answer.body))
}

fn dependency<'a>(circuits: &'a Value, name: &str) -> &'a Value {
    circuits["dependencies"]
        .as_array()
        .and_then(|deps| deps.iter().find(|d| d["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {circuits}"))
}

fn request(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &str) -> Answer {
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{headers}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    exchange(addr, raw.as_bytes(), WAIT).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

#[test]
fn the_example_file_holds_the_examples_defaults_and_round_trips() {
    let text = std::fs::read_to_string(FILE).expect("read watertight.toml");
    let config = parse(&text);
    assert_eq!(config.server.request_threads, Some(16));
    let reserve = config.server.reserve.as_ref().expect("a reserved share");
    assert_eq!(reserve.threads, 2);
    assert_eq!(reserve.routes, ["GET /health", "GET /orders/{id}", "GET /circuits", "GET /metrics"]);
    let names: Vec<&str> = config.dependencies.keys().map(String::as_str).collect();
    assert_eq!(names, ["account-access", "account-read", "fraud", "notification"]);

    let fraud = &config.dependencies["fraud"];
    assert_eq!((fraud.workers, fraud.queue), (6, 2));
    assert_eq!((fraud.max_wait, fraud.timeout), (Duration::from_millis(100), Duration::from_secs(3)));
    let b = &fraud.breaker;
    assert_eq!((b.window, b.minimum_calls), (WindowKind::Count(16), 8));
    assert_eq!((b.failure_rate, b.open_for, b.half_open_calls), (50.0, Duration::from_secs(15), 5));
    // Each breaker needs at most as many failures as its dependency can hold.
    for (name, workers) in [("account-access", 4), ("account-read", 2)] {
        let a = &config.dependencies[name];
        assert_eq!((a.workers, a.queue, a.max_wait), (workers, 0, Duration::from_millis(100)), "{name}");
        assert_eq!(a.timeout, Duration::from_secs(4));
        let b = &a.breaker;
        assert_eq!((b.window, b.minimum_calls), (WindowKind::Time(30), workers as u32));
        assert_eq!((b.open_for, b.half_open_calls), (Duration::from_secs(15), 3));
        assert_eq!(b.max_wait_in_half_open, Duration::from_secs(60));
    }
    let n = &config.dependencies["notification"];
    assert_eq!((n.workers, n.queue, n.timeout), (2, 8, Duration::from_secs(2)));
    assert_eq!((n.breaker.window, n.breaker.minimum_calls), (WindowKind::Count(10), 5));
    // Written out and read back, nothing changes.
    let written = toml::to_string(&config).expect("serialize");
    assert_eq!(parse(&written), config, "{written}");
    // It passes the capacity rule for its own request pool, the 14 threads
    // left after the reserve: notification is declared detached (it holds no
    // request thread), and the file's comments name its three warnings.
    assert_eq!(n.calls, watertight::dependency::CallShape::Detached);
    let registry = config.build().unwrap_or_else(|e| panic!("{e}"));
    let pool = config.request_threads().expect("request_threads is set");
    assert_eq!((pool.threads, pool.available()), (16, 14));
    let report = registry.check_capacity(pool).expect("within the capacity rule");
    assert_eq!(report.total_hold, 14);
    let warnings = report.warnings();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings.iter().all(|w| w.contains("`fraud`") || w.contains("together")), "{warnings:?}");
}

#[test]
fn a_file_without_the_notification_section_takes_the_embedded_one() {
    let text = std::fs::read_to_string(FILE).unwrap();
    let before = text.split("\n# Order notifications").next().unwrap();
    assert!(!before.contains("[dependencies.notification]"));
    let path = temp_file("no-notification", before);
    let server = Checkout::start(&["--config", path.to_str().unwrap()]);
    let circuits = json(&get(server.addr, "/circuits", WAIT).expect("GET /circuits"));
    let notification = dependency(&circuits, "notification");
    assert_eq!(notification["pool"]["workers"], 2, "{notification}");
    assert_eq!(notification["timeout_ms"], 2000, "{notification}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn the_binary_runs_with_the_file_and_shows_its_values() {
    let server = Checkout::start(&["--config", FILE]);
    let circuits = json(&get(server.addr, "/circuits", WAIT).expect("GET /circuits"));
    assert_eq!(circuits["request_pool"]["threads"], 16);
    let fraud = dependency(&circuits, "fraud");
    assert_eq!(fraud["pool"]["workers"], 6);
    assert_eq!(fraud["pool"]["queue_capacity"], 2);
    assert_eq!(fraud["timeout_ms"], 3000);
    assert_eq!(fraud["max_wait_ms"], 100);
    assert_eq!(fraud["config"]["breaker"]["window"]["count"], 16);
    assert_eq!(fraud["config"]["breaker"]["failure_rate"], 50.0);
    assert_eq!(fraud["config"]["retry"]["max_attempts"], 3);
    assert_eq!(fraud["limit"], Value::Null, "no adaptive limit in the file");
    assert_eq!(dependency(&circuits, "account-read")["pool"]["workers"], 2);

    // /_config says the same as the file, in the file's own schema.
    let live = get(server.addr, "/_config", WAIT).expect("GET /_config");
    assert_eq!(live.status, 200, "{}", live.body);
    let live = Config::from_deserializer(&mut serde_json::Deserializer::from_str(&live.body))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(live, parse(&std::fs::read_to_string(FILE).unwrap()));
}

#[test]
fn without_a_file_the_embedded_defaults_apply() {
    let server = Checkout::start(&[]);
    let live = get(server.addr, "/_config", WAIT).expect("GET /_config");
    let live = Config::from_deserializer(&mut serde_json::Deserializer::from_str(&live.body))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(live, parse(&std::fs::read_to_string(FILE).unwrap()));
}

#[test]
fn another_file_changes_the_dependencies() {
    let text = std::fs::read_to_string(FILE)
        .unwrap()
        .replace("workers = 6", "workers = 3")
        .replace("timeout = \"3s\"", "timeout = \"2s\"")
        .replace("request_threads = 16", "request_threads = 24");
    let path = temp_file("changed", &text);
    let server = Checkout::start(&["--config", path.to_str().unwrap()]);
    let circuits = json(&get(server.addr, "/circuits", WAIT).expect("GET /circuits"));
    assert_eq!(circuits["request_pool"]["threads"], 24);
    let fraud = dependency(&circuits, "fraud");
    assert_eq!(fraud["pool"]["workers"], 3);
    assert_eq!(fraud["timeout_ms"], 2000);
    // The flag wins over the file.
    drop(server);
    let server = Checkout::start(&["--config", path.to_str().unwrap(), "--request-threads", "20"]);
    let circuits = json(&get(server.addr, "/circuits", WAIT).expect("GET /circuits"));
    assert_eq!(circuits["request_pool"]["threads"], 20);
    let _ = std::fs::remove_file(path);
}

/// Runs the binary with `args`, expecting it to exit by itself (bounded);
/// its exit success and stderr.
fn run_to_exit(args: &[&str]) -> (bool, String) {
    let mut child = Command::new(binary())
        .args(["--addr", "127.0.0.1:0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the checkout example");
    let give_up = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > give_up {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server started with {args:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.success(), stderr)
}

#[test]
fn a_bad_file_stops_the_start_and_names_the_field() {
    let text = std::fs::read_to_string(FILE).unwrap();
    let cases = [
        (
            "rate",
            text.replacen("failure_rate = 50.0", "failure_rate = 101.0", 1),
            "dependencies.fraud.breaker.failure_rate",
        ),
        ("unknown", text.replacen("queue = 2", "queue = 2\nqeue = 3", 1), "dependencies.fraud.qeue"),
        ("duration", text.replacen("timeout = \"3s\"", "timeout = 3", 1), "dependencies.fraud.timeout"),
        ("workers", text.replacen("workers = 6", "workers = 0", 1), "dependencies.fraud.workers"),
        ("extra", format!("{text}\n[dependencies.pricing]\nworkers = 1\n"), "dependencies.pricing"),
    ];
    for (name, text, path) in cases {
        let file = temp_file(name, &text);
        let (ok, stderr) = run_to_exit(&["--config", file.to_str().unwrap()]);
        assert!(!ok, "{name}: started");
        assert!(stderr.contains(path), "{name}: {stderr}");
        assert!(stderr.contains(file.to_str().unwrap()), "{name}: names the file: {stderr}");
        let _ = std::fs::remove_file(file);
    }
    let (ok, stderr) = run_to_exit(&["--config", "/nonexistent/watertight.toml"]);
    assert!(!ok && stderr.contains("cannot read /nonexistent/watertight.toml"), "{stderr}");
    let (ok, stderr) = run_to_exit(&["--admin-token", "short"]);
    assert!(!ok && stderr.contains("at least 8 characters"), "{stderr}");
}

#[test]
fn admin_routes_answer_loopback_clients_on_every_address() {
    for listen in ["127.0.0.1:0", "0.0.0.0:0"] {
        let server = Checkout::start_on(listen, &["--admin-token", "s3cret-admin-token"]);
        assert!(server.addr.ip().is_loopback(), "{listen}: talk through 127.0.0.1");
        let faults = get(server.addr, "/_faults", WAIT).expect("GET /_faults");
        assert_eq!(faults.status, 200, "{listen}: {}", faults.body);
        assert_eq!(json(&faults)["fraud"], "healthy");
        // A loopback client needs no token, and a wrong one does not lock it out.
        let set = request(server.addr, "POST", "/_faults/fraud", "X-Admin-Token: wrong\r\n", "slow:10");
        assert_eq!(set.status, 200, "{listen}: {}", set.body);
        let config = request(server.addr, "GET", "/_config/fraud", "", "");
        assert_eq!(config.status, 200, "{listen}: {}", config.body);
        assert_eq!(json(&config)["workers"], 6);
    }
}

#[test]
fn put_config_refuses_what_it_cannot_apply() {
    let server = Checkout::start(&[]);
    let put = |path: &str, body: &str| request(server.addr, "PUT", path, "", body);

    let unknown = put("/_config/pricing", r#"{"workers":2}"#);
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(json(&unknown)["code"], "UNKNOWN_DEPENDENCY");

    // `(body, field named)`: bad JSON, bad types, unknown fields, bad values.
    let cases = [
        (r#"{"workers": 2,"#, ""),
        (r#"{"workers": "two"}"#, "workers"),
        (r#"{"timeout": 3}"#, "timeout"),
        (r#"{"timeout": "3 fortnights"}"#, "timeout"),
        (r#"{"colour": "red"}"#, "colour"),
        (r#"{"breaker": {"failure_rate": 101}}"#, "breaker.failure_rate"),
        (r#"{"breaker": {"window": "sliding"}}"#, "breaker.window"),
        (r#"{"breaker": {"window": {"count": 0}}}"#, "breaker.window.count"),
        (r#"{"retry": {"jitter": "half"}}"#, "retry.jitter"),
        (r#"{"retry": {"initial_backoff": "2s", "max_backoff": "1s"}}"#, "retry.initial_backoff"),
        (r#"{"adaptive_limit": {"failure_cut": 0}}"#, "adaptive_limit.failure_cut"),
    ];
    for (body, field) in cases {
        let answer = put("/_config/fraud", body);
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        let answer = json(&answer);
        assert_eq!(answer["code"], "INVALID_CONFIG", "{body}");
        assert_eq!(answer["field"], field, "{body}: {answer}");
        assert!(answer["message"].as_str().unwrap().starts_with(field), "{body}: {answer}");
    }
    let wrong_method = request(server.addr, "POST", "/_config/fraud", "", "{}");
    assert_eq!(wrong_method.status, 405);
    // Nothing was changed by any of it.
    let fraud = json(&request(server.addr, "GET", "/_config/fraud", "", ""));
    let fraud: DependencyConfig = serde_json::from_value(fraud).expect("a dependency section");
    assert_eq!(fraud, parse(&std::fs::read_to_string(FILE).unwrap()).dependencies["fraud"]);
}

/// Live reconfiguration through `PUT /_config/{name}`: the whole section, as
/// `GET /_config/{name}` gives it, changed and sent back.
#[test]
fn put_config_changes_a_dependency_live() {
    let server = Checkout::start(&[]);
    let get_fraud = || {
        let answer = request(server.addr, "GET", "/_config/fraud", "", "");
        assert_eq!(answer.status, 200, "{}", answer.body);
        serde_json::from_value::<DependencyConfig>(json(&answer)).expect("a dependency section")
    };
    let mut fraud = get_fraud();
    fraud.timeout = Duration::from_millis(1500);
    fraud.breaker.failure_rate = 40.0;
    fraud.breaker.window = WindowKind::Count(30);
    assert_eq!(fraud.retry, Retry::new(), "the example retries with the defaults");
    fraud.retry = Retry::builder().max_attempts(2).build().unwrap();
    fraud.adaptive_limit = Some(Default::default());
    let answer = request(server.addr, "PUT", "/_config/fraud", "", &serde_json::to_string(&fraud).unwrap());
    assert_eq!(answer.status, 200, "{}", answer.body);
    let back: DependencyConfig = serde_json::from_value(json(&answer)["config"].clone()).unwrap();
    assert_eq!(back, fraud);
    assert_eq!(get_fraud(), fraud);

    let circuits = json(&get(server.addr, "/circuits", WAIT).expect("GET /circuits"));
    let live = dependency(&circuits, "fraud");
    assert_eq!(live["timeout_ms"], 1500);
    assert_eq!(live["max_wait_ms"], 100);
    assert_eq!(live["config"]["breaker"]["failure_rate"], 40.0);
    assert_eq!(live["config"]["breaker"]["window"]["count"], 30);
    assert_eq!(live["config"]["retry"]["max_attempts"], 2);
    assert_eq!(live["adaptive_limit"]["max"], 6, "{live}");
    // The others are untouched.
    assert_eq!(dependency(&circuits, "account-read")["timeout_ms"], 4_000);

    // 12 + 4 = 16 of the 14 request threads left after the reserve: refused
    // by the capacity rule, and nothing changes.
    let mut greedy = fraud.clone();
    greedy.workers = 12;
    greedy.queue = 4;
    let answer = request(server.addr, "PUT", "/_config/fraud", "", &serde_json::to_string(&greedy).unwrap());
    assert_eq!(answer.status, 409, "{}", answer.body);
    let answer = json(&answer);
    assert_eq!(answer["code"], "CAPACITY_EXCEEDED");
    assert!(
        answer["message"].as_str().unwrap().contains("`fraud` can hold 16 of the 14 request threads left"),
        "{answer}"
    );
    assert_eq!(get_fraud(), fraud);

    // A value only the running dependency can refuse names its field too.
    let mut late = fraud.clone();
    late.max_wait = Duration::from_secs(2);
    late.timeout = Duration::from_secs(1);
    let answer = request(server.addr, "PUT", "/_config/fraud", "", &serde_json::to_string(&late).unwrap());
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(json(&answer)["field"], "max_wait");
    assert_eq!(get_fraud(), fraud);
}

/// `--shadow`: fraud answering 503 opens its breaker in shadow, and the
/// checkouts still reach fraud, each one the breaker would have refused
/// counted in `/circuits`; `PUT /_config/fraud` without `shadow` and
/// `PUT /_config/reserve` switch both back to enforcing, from the next
/// request.
#[test]
fn shadow_records_what_the_breaker_would_refuse_until_switched_off_live() {
    use watertight::shadow::{Policy, Shadow};
    let server = Checkout::start(&["--shadow", "--fraud", "error:503"]);
    let circuits = || json(&request(server.addr, "GET", "/circuits", "", ""));
    let order = r#"{"customer_id":"c1","amount":20}"#;
    let checkout = || request(server.addr, "POST", "/checkout", "X-User-Id: alice\r\n", order).status;
    let mut fraud: DependencyConfig =
        serde_json::from_value(json(&request(server.addr, "GET", "/_config/fraud", "", ""))).unwrap();
    assert_eq!(fraud.shadow, Shadow::all(), "a dependency's every policy");
    assert_eq!(circuits()["request_pool"]["reserve_shadow"], true);
    for _ in 0..20 {
        assert_eq!(checkout(), 202, "fraud unavailable: manual review");
    }
    let now = circuits();
    let dep = dependency(&now, "fraud");
    assert_eq!(dep["state"], "open", "{dep}");
    assert!(dep["shadow_refused"]["breaker"].as_u64().unwrap() >= 10, "{dep}");
    assert_eq!(dep["calls"]["not_permitted"], 0, "in shadow nothing is refused: {dep}");
    let failed = dep["calls"]["failed"].as_u64().unwrap();
    assert!(failed >= 20, "every checkout reached fraud: {dep}");

    fraud.shadow = Shadow::none().with(Policy::Throttle);
    let answer = request(server.addr, "PUT", "/_config/fraud", "", &serde_json::to_string(&fraud).unwrap());
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(checkout(), 202);
    let dep = dependency(&circuits(), "fraud").clone();
    assert!(
        dep["calls"]["not_permitted"].as_u64().unwrap() >= 1,
        "the next call is refused by the breaker: {dep}"
    );
    assert_eq!(dep["calls"]["failed"], failed, "and never reached fraud: {dep}");

    let answer = request(server.addr, "PUT", "/_config/reserve", "", r#"{"shadow":false}"#);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(circuits()["request_pool"]["reserve_shadow"], false);
    let bad = request(server.addr, "PUT", "/_config/reserve", "", r#"{"shadow":"no"}"#);
    assert_eq!(bad.status, 400, "{}", bad.body);
}
