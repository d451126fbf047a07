//! A file's capacity rule: call shapes, the reserve, the request budget,
//! the pool's size.
#![cfg(feature = "serde")]

use std::time::Duration;

use watertight::ConfigError;
use watertight::config::Config;
use watertight::dependency::CallShape;

use crate::support::warnings;

/// The configuration of the report: flights and hotels waited on, audit
/// sent fire-and-forget.
const TRIPS: &str = r#"
[server]
request_threads = 32
[dependencies.flights]
workers = 8
queue = 2
max_wait = "50ms"
timeout = "400ms"
breaker = { window = { count = 20 }, minimum_calls = 10, failure_rate = 50.0, open_for = "10s", half_open_calls = 3 }
[dependencies.hotels]
workers = 6
queue = 2
max_wait = "50ms"
timeout = "200ms"
retry = { max_attempts = 2, initial_backoff = "10ms", max_backoff = "50ms", overall_timeout = "500ms" }
[dependencies.audit]
workers = 2
queue = 64
timeout = "1s"
"#;

fn from_toml(text: &str) -> Result<Config, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| ConfigError::at("", e.to_string()))?;
    Config::from_deserializer(de)
}

#[test]
fn a_dependency_declared_detached_holds_no_request_thread() {
    // As reported: audit, only ever spawned, counted as 66 blocking callers.
    let err = from_toml(TRIPS).unwrap().build().unwrap_err();
    assert_eq!(err.path(), "dependencies.audit");
    assert!(err.message().contains("can hold 66 of 32 request threads"), "{err}");
    // Declared detached, it holds none, and the file builds.
    let text = TRIPS.replace("queue = 64\n", "queue = 64\ncalls = \"detached\"\n");
    let config = from_toml(&text).unwrap();
    assert_eq!(config.dependencies["audit"].calls, CallShape::Detached);
    assert_eq!(config.dependencies["flights"].calls, CallShape::Blocking, "the default");
    let registry = config.build().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(registry.get("audit").unwrap().config().calls, CallShape::Detached);
    let report = registry.check_capacity(config.request_threads().unwrap()).unwrap();
    assert_eq!(report.total_hold, 18);
    // Legs of one fan-out: flights and hotels hold one request thread between them.
    let fanned = text
        .replace("timeout = \"400ms\"\n", "timeout = \"400ms\"\ncalls = { fan_out = \"search\" }\n")
        .replace("timeout = \"200ms\"\n", "timeout = \"200ms\"\ncalls = { fan_out = \"search\" }\n");
    let config = from_toml(&fanned).unwrap();
    assert_eq!(config.dependencies["hotels"].calls, CallShape::FanOut("search".into()));
    let registry = config.build().unwrap();
    assert_eq!(registry.check_capacity(32).unwrap().total_hold, 10);
    let err = from_toml(&text.replace("\"detached\"", "\"sometimes\"")).unwrap_err();
    assert_eq!(err.path(), "dependencies.audit.calls", "{err}");
    let err = from_toml(&text.replace("\"detached\"", "{ fan_out = \"\" }")).unwrap_err();
    assert_eq!(err.path(), "dependencies.audit.calls.fan_out", "{err}");
}

#[test]
fn a_timeout_longer_than_the_request_budget_is_warned_about_and_logged() {
    let log = warnings();
    let text = TRIPS
        .replace("request_threads = 32", "request_threads = 32\nrequest_budget = \"800ms\"")
        .replace("timeout = \"400ms\"", "timeout = \"5s\"")
        .replace("queue = 64\n", "queue = 64\ncalls = \"detached\"\n")
        .replace("flights", "flights-budget");
    let config = from_toml(&text).unwrap();
    assert_eq!(config.server.request_budget, Some(Duration::from_millis(800)));
    let registry = config.build().expect("a warning, not an error");
    let warnings = registry.check_capacity(config.request_threads().unwrap()).unwrap().warnings();
    let about =
        |w: &String| w.contains("`flights-budget`") && w.contains("longer than the request budget 800ms");
    assert_eq!(warnings.iter().filter(|w| about(w)).count(), 1, "{warnings:?}");
    // hotels is within the budget; audit is detached, outside any request.
    assert!(
        warnings.iter().filter(|w| w.contains("request budget")).all(|w| w.contains("`flights-budget`")),
        "{warnings:?}"
    );
    let logged = log.lock().unwrap().iter().filter(|w| w.starts_with("capacity: ") && about(w)).count();
    assert_eq!(logged, 1);
    // Written out, the budget reads back.
    assert!(toml::to_string(&config).unwrap().contains("request_budget = \"800ms\""));
    let err = from_toml("[server]\nrequest_budget = \"0s\"").unwrap_err();
    assert_eq!(err.path(), "server.request_budget", "{err}");
}

#[test]
fn no_request_threads_is_a_bad_request_threads() {
    let err = from_toml(&TRIPS.replace("request_threads = 32", "request_threads = 0")).unwrap_err();
    assert_eq!(err.path(), "server.request_threads");
    assert_eq!(err.to_string(), "server.request_threads: must be at least 1: the request pool's size, got 0");
    assert_eq!(err.field(), "request_threads");
}

/// The reserve's threads are not the dependencies': holds are compared with
/// the rest.
#[test]
fn holds_are_compared_with_the_threads_left_after_the_reserve() {
    let file = |workers: usize| {
        format!(
            "[server]\nrequest_threads = 16\n[server.reserve]\nthreads = 2\nroutes = [\"GET /health\"]\n\
             [dependencies.fraud]\nworkers = {workers}\nqueue = 2\n\
             [dependencies.fraud.breaker]\nwindow = {{ count = 14 }}\nminimum_calls = 7\n"
        )
    };
    let config = from_toml(&file(12)).unwrap();
    assert_eq!(config.request_threads().map(|p| (p.threads, p.available())), Some((16, 14)));
    let err = config.build().unwrap_err();
    assert_eq!(err.path(), "dependencies.fraud");
    assert!(
        err.message().contains("can hold 14 of the 14 request threads left after a reserve of 2"),
        "{err}"
    );
    let registry = from_toml(&file(11)).unwrap().build().expect("13 of 14");
    assert_eq!(registry.dependencies().len(), 1);
}
