//! A configuration file read and written: the defaults, every window and
//! jitter, and errors that name their path. The round trips of every field
//! are in `src/config/tests.rs`, beside the fields.
#![cfg(feature = "serde")]

use std::time::Duration;

use watertight::config::Config;
use watertight::{
    ConfigError, Dependency, DependencyConfig,
    breaker::{BreakerConfig, State, WindowKind},
    limit::AdaptiveLimit,
    retry::{Jitter, Retry},
};

fn from_toml(text: &str) -> Result<Config, ConfigError> {
    let de = toml::Deserializer::parse(text).map_err(|e| ConfigError::at("", e.to_string()))?;
    Config::from_deserializer(de)
}

fn from_json(text: &str) -> Result<Config, ConfigError> {
    Config::from_deserializer(&mut serde_json::Deserializer::from_str(text))
}

fn build(name: &str, config: &DependencyConfig) -> Result<Dependency, ConfigError> {
    Dependency::builder(name).config(config.clone()).build()
}

#[test]
fn defaults_are_the_builders_defaults() {
    let file = build("from-file", &DependencyConfig::default()).unwrap();
    let plain = Dependency::builder("plain").build().unwrap();
    assert_eq!(file.pool().unwrap().workers(), plain.pool().unwrap().workers());
    assert_eq!(file.pool().unwrap().queue_capacity(), plain.pool().unwrap().queue_capacity());
    assert_eq!(file.pool().unwrap().max_wait(), plain.pool().unwrap().max_wait());
    assert_eq!(
        file.pool().unwrap().deadline_aware_admission(),
        plain.pool().unwrap().deadline_aware_admission()
    );
    assert_eq!(file.timeout(), plain.timeout());
    assert_eq!(file.retry(), plain.retry());
    assert!(file.limiter().is_none());
    assert_eq!(file.config(), plain.config());
    // An empty file, and an empty section, are every default.
    assert_eq!(from_toml("").unwrap(), Config::default());
    let one = from_toml("[dependencies.fraud]").unwrap();
    assert_eq!(one.dependencies["fraud"], DependencyConfig::default());
    let empty = |t: &str| toml::from_str::<toml::Value>(t).unwrap();
    assert_eq!(empty("").try_into::<BreakerConfig>().unwrap(), BreakerConfig::default());
    assert_eq!(empty("").try_into::<Retry>().unwrap(), Retry::new());
    assert_eq!(empty("").try_into::<AdaptiveLimit>().unwrap(), AdaptiveLimit::new());
}

#[test]
fn every_window_and_jitter_reads_back_as_written() {
    // Every window kind and the edge sizes read back as they were written.
    for c in [
        BreakerConfig::count_based(1),
        BreakerConfig::count_based(20).minimum_calls(5),
        BreakerConfig::count_based(1_000_000),
        BreakerConfig::time_based(1),
        BreakerConfig::time_based(86_400).minimum_calls(u32::MAX),
        BreakerConfig::default().after_max_wait(State::Closed).open_backoff(2.0, Duration::from_secs(600)),
    ] {
        let text = toml::to_string(&c).unwrap();
        let back: BreakerConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, c, "{text}");
    }
    for jitter in [Jitter::Full, Jitter::Equal, Jitter::None] {
        let r = Retry::builder().jitter(jitter).build().unwrap();
        let back: Retry = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.jitter(), jitter);
    }
    let none = from_toml("[dependencies.fraud.retry]\njitter = \"none\"").unwrap();
    assert_eq!(none.dependencies["fraud"].retry.jitter(), Jitter::None);
    let count = from_toml("[dependencies.fraud.breaker]\nwindow = { count = 16 }").unwrap();
    assert_eq!(count.dependencies["fraud"].breaker.window, WindowKind::Count(16));
}

/// `(file, path of the error, words its message must contain)`.
const READ_ERRORS: &[(&str, &str, &str)] = &[
    (
        "[dependencies.fraud.breaker]\nfailure_rate = 101",
        "dependencies.fraud.breaker.failure_rate",
        "must be in (0, 100], got 101",
    ),
    (
        "[dependencies.fraud.breaker]\nfailure_rate = \"fifty\"",
        "dependencies.fraud.breaker.failure_rate",
        "invalid type",
    ),
    (
        "[dependencies.fraud.breaker]\nfailure_ratio = 50",
        "dependencies.fraud.breaker.failure_ratio",
        "unknown field `failure_ratio`",
    ),
    (
        "[dependencies.fraud.breaker]\nwindow = { sliding = 10 }",
        "dependencies.fraud.breaker.window",
        "unknown variant `sliding`",
    ),
    (
        // The earlier shape: the kind alone, its size beside it.
        "[dependencies.fraud.breaker]\nwindow = \"count\"",
        "dependencies.fraud.breaker.window.count",
        "expected newtype variant",
    ),
    (
        "[dependencies.fraud.breaker]\nwindow_size = 16",
        "dependencies.fraud.breaker.window_size",
        "unknown field `window_size`",
    ),
    (
        "[dependencies.fraud.breaker]\nwindow = { count = 0 }",
        "dependencies.fraud.breaker.window.count",
        "must be in [1, 1000000], got 0",
    ),
    (
        "[dependencies.fraud.breaker]\nwindow = { time = 90000 }",
        "dependencies.fraud.breaker.window.time",
        "86400",
    ),
    (
        "[dependencies.fraud.retry]\njitter = \"half\"",
        "dependencies.fraud.retry.jitter",
        "unknown variant `half`",
    ),
    (
        "[dependencies.fraud.breaker]\nopen_backoff = { multiplier = 0.5, max = \"1m\" }",
        "dependencies.fraud.breaker.open_backoff",
        "multiplier",
    ),
    (
        "[dependencies.fraud.breaker]\nopen_backoff = { multiplier = 2.0 }",
        "dependencies.fraud.breaker.open_backoff",
        "missing field `max`",
    ),
    (
        "[dependencies.fraud.breaker]\nafter_max_wait = \"half_open\"",
        "dependencies.fraud.breaker.after_max_wait",
        "must be open or closed, got half_open",
    ),
    (
        "[dependencies.fraud.breaker]\nafter_max_wait = \"ajar\"",
        "dependencies.fraud.breaker.after_max_wait",
        "unknown variant",
    ),
    ("[dependencies.fraud]\ntimeout = 3", "dependencies.fraud.timeout", "a duration such as \"3s\""),
    (
        "[dependencies.fraud]\ntimeout = \"3 parsecs\"",
        "dependencies.fraud.timeout",
        "invalid duration \"3 parsecs\"",
    ),
    ("[dependencies.fraud]\nworkers = -1", "dependencies.fraud.workers", "invalid value"),
    ("[dependencies.fraud]\nworker = 4", "dependencies.fraud.worker", "unknown field `worker`"),
    (
        "[dependencies.fraud.retry]\ninitial_backoff = \"2s\"\nmax_backoff = \"1s\"",
        "dependencies.fraud.retry.initial_backoff",
        "initial <= max",
    ),
    (
        "[dependencies.fraud.retry]\nbudget_percent = 150",
        "dependencies.fraud.retry.budget_percent",
        "got 150",
    ),
    ("[dependencies.fraud.retry]\nmax_attempts = 0", "dependencies.fraud.retry.max_attempts", "at least 1"),
    (
        "[dependencies.fraud.retry]\noverall_timeout = \"0s\"",
        "dependencies.fraud.retry.overall_timeout",
        "greater than zero",
    ),
    (
        "[dependencies.fraud.adaptive_limit]\nfailure_cut = 100",
        "dependencies.fraud.adaptive_limit.failure_cut",
        "(0, 100)",
    ),
    ("[dependencies.fraud.throttle]\nk = 0.5", "dependencies.fraud.throttle.k", "in [1, 100], got 0.5"),
    (
        "[dependencies.fraud.throttle]\nwindow = \"500ms\"",
        "dependencies.fraud.throttle.window",
        "at least 1s",
    ),
    ("[dependencies.fraud.throttle]\nkay = 2", "dependencies.fraud.throttle.kay", "unknown field `kay`"),
    (
        "[dependencies.\"a.b\".breaker]\nminimum_calls = 0",
        "dependencies.\"a.b\".breaker.minimum_calls",
        "at least 1",
    ),
    ("[server]\nrequest_threads = \"many\"", "server.request_threads", "invalid type"),
    ("[servers]\nrequest_threads = 4", "servers", "unknown field `servers`"),
];

#[test]
fn read_errors_name_the_path() {
    for &(text, path, words) in READ_ERRORS {
        let err = from_toml(text).expect_err(text);
        assert_eq!(err.path(), path, "{text}\n{err}");
        assert!(err.message().contains(words), "{text}\n{err}");
        let shown = err.to_string();
        assert!(shown.starts_with(path), "{shown}");
    }
}

/// The server's reserve, checked on reading, against `request_threads` too.
#[test]
fn reserve_errors_name_the_path() {
    let text = "[server]\nrequest_threads = 8\n[server.reserve]\nthreads = 2\nroutes = [\"GET /health\"]";
    let reserve = from_toml(text).unwrap().server.reserve.unwrap();
    assert_eq!((reserve.threads, reserve.routes.as_slice()), (2, ["GET /health".to_owned()].as_slice()));
    let cases: &[(&str, &str, &str)] = &[
        ("[server.reserve]\nthreads = 0\nroutes = [\"GET /health\"]", "server.reserve.threads", "at least 1"),
        ("[server.reserve]\nthreads = 2", "server.reserve.routes", "at least one route"),
        ("[server.reserve]\nthreads = 2\nroutes = [\"health\"]", "server.reserve.routes", "got \"health\""),
        (
            "[server]\nrequest_threads = 2\n[server.reserve]\nthreads = 2\nroutes = [\"GET /health\"]",
            "server.reserve.threads",
            "got 2 of 2 request threads",
        ),
        ("[server.reserve]\nthreads = 2\npaths = []", "server.reserve.paths", "unknown field"),
    ];
    for &(text, path, words) in cases {
        let err = from_toml(text).expect_err(text);
        assert_eq!(err.path(), path, "{text}\n{err}");
        assert!(err.message().contains(words), "{text}\n{err}");
    }
}

#[test]
fn json_errors_name_the_same_paths() {
    let err = from_json(r#"{"dependencies":{"fraud":{"breaker":{"slow_call_rate":0}}}}"#).unwrap_err();
    assert_eq!(err.to_string(), "dependencies.fraud.breaker.slow_call_rate: must be in (0, 100], got 0");
    assert_eq!(err.field(), "slow_call_rate");
    let err = from_json(r#"{"dependencies":{"fraud":{"queue":"two"}}}"#).unwrap_err();
    assert_eq!(err.path(), "dependencies.fraud.queue");
    assert!(err.field().is_empty(), "no builder's field: the format could not read it");
    let err = from_json(r#"{"dependencies":{"fraud":{"timeout":"3s",}}}"#).unwrap_err();
    assert!(err.message().contains("trailing comma"), "{err}");
    // One dependency alone (a request body): paths relative to it.
    let one = |t: &str| DependencyConfig::from_deserializer(&mut serde_json::Deserializer::from_str(t));
    assert_eq!(one(r#"{"breaker":{"half_open_calls":0}}"#).unwrap_err().path(), "breaker.half_open_calls");
    assert_eq!(one(r#"{"workers":4,"colour":"red"}"#).unwrap_err().path(), "colour");
    assert_eq!(one(r#"{"workers":4}"#).unwrap().workers, 4);
}

/// Errors only building can find: the pool's rules, the limit against the
/// worker count, the capacity rule.
#[test]
fn build_errors_name_the_path() {
    let cases: &[(&str, &str, &str)] = &[
        ("[dependencies.fraud]\nworkers = 0", "dependencies.fraud.workers", "got 0"),
        ("[dependencies.fraud]\nqueue = 2000000", "dependencies.fraud.queue", "got 2000000"),
        ("[dependencies.fraud]\ntimeout = \"0s\"", "dependencies.fraud.timeout", "greater than zero"),
        (
            "[dependencies.fraud]\ntimeout = \"1s\"\nmax_wait = \"2s\"",
            "dependencies.fraud.max_wait",
            "at most the timeout",
        ),
        (
            "[dependencies.fraud]\nworkers = 4\n[dependencies.fraud.adaptive_limit]\nmin_limit = 6",
            "dependencies.fraud.adaptive_limit.min_limit",
            "6 > 4",
        ),
        (
            "[server]\nrequest_threads = 8\n[dependencies.fraud]\nworkers = 6\nqueue = 2",
            "dependencies.fraud",
            "can hold 8 of 8 request threads",
        ),
    ];
    for &(text, path, words) in cases {
        // Found on reading where validation can, else on building.
        let err = from_toml(text).and_then(|c| c.build().map(drop)).expect_err(text);
        assert_eq!(err.path(), path, "{text}\n{err}");
        assert!(err.message().contains(words), "{text}\n{err}");
    }
    // Under the capacity rule's error, a warning still builds.
    let ok =
        from_toml("[server]\nrequest_threads = 12\n[dependencies.fraud]\nworkers = 6\nqueue = 2").unwrap();
    assert_eq!(ok.build().unwrap().dependencies().len(), 1);
}

#[test]
fn paths_nest() {
    let e = ConfigError::at("failure_rate", "bad").within("breaker").within("dependencies.fraud");
    assert_eq!(e.path(), "dependencies.fraud.breaker.failure_rate");
    assert_eq!(ConfigError::at("", "bad").within("x").path(), "x");
    assert_eq!(ConfigError::at("", "no field").to_string(), "no field");
    // A builder's own error names its field; placed in a file, the path.
    let e = ConfigError::new("failure_rate", "in (0, 100]", 101);
    assert_eq!(e.to_string(), "failure_rate must be in (0, 100], got 101");
    assert_eq!(e.within("breaker").to_string(), "breaker.failure_rate: must be in (0, 100], got 101");
}

#[test]
fn a_dependency_error_lands_on_its_section() {
    let cases = [
        (ConfigError::new("workers", "in [1, 4096]", 0), "workers"),
        (ConfigError::new("failure_rate", "in (0, 100]", 101), "breaker.failure_rate"),
        (ConfigError::new("time_based", "in [1, 86400] seconds", 0), "breaker.window.time"),
        (ConfigError::new("count_based", "in [1, 1000000]", 0), "breaker.window.count"),
        (ConfigError::new("retry.backoff", "initial <= max", "x"), "retry.initial_backoff"),
        (ConfigError::new("retry.budget", "a percentage in [0, 100]", 150), "retry.budget_percent"),
        (ConfigError::new("retry.max_attempts", "at least 1", 0), "retry.max_attempts"),
        (ConfigError::new("min_limit", "at most the maximum", "6 > 4"), "adaptive_limit.min_limit"),
        (ConfigError::new("max_limit", "in [1, 4096]", 0), "workers"),
    ];
    for (e, path) in cases {
        let f = e.clone().in_dependency();
        assert_eq!(f.path(), path, "{e}");
        assert_eq!((f.field(), f.rule(), f.value()), (e.field(), e.rule(), e.value()));
        assert_eq!(f.message(), format!("must be {}, got {}", e.rule(), e.value()));
    }
}

#[test]
fn a_syntax_error_names_no_field() {
    let err = from_json(r#"{"dependencies": {"fraud": {"workers": 2,"#).unwrap_err();
    assert!(err.message().contains("EOF while parsing"), "{err}");
    assert_eq!(err.path(), "dependencies.fraud", "{err}");
    let err = from_json(r#"{"dependencies": "#).unwrap_err();
    assert_eq!(err.path(), "dependencies", "{err}");
}
