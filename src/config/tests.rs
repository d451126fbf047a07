//! The round trips of a configuration with every field away from its
//! default. [`DependencyConfig`] is `#[non_exhaustive]`: only inside the
//! crate can `everything()` name every field in one struct expression, so
//! that a new field fails to compile here until it is given a value. The
//! other configuration tests are in `tests/dependency/config_*.rs`.

use std::time::Duration;

use super::*;
use crate::{
    Dependency,
    breaker::{BreakerConfig, State},
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

/// A configuration with every field away from its default.
fn everything() -> Config {
    let dep = DependencyConfig {
        workers: 7,
        queue: 3,
        max_wait: Duration::from_millis(150),
        timeout: Duration::from_millis(2500),
        deadline_aware_admission: false,
        breaker: BreakerConfig::time_based(30)
            .minimum_calls(12)
            .failure_rate(40.5)
            .slow_call_rate(80.0)
            .slow_call_duration(Duration::from_millis(900))
            .open_for(Duration::from_secs(12))
            .open_backoff(1.5, Duration::from_secs(120))
            .half_open_calls(4)
            .max_wait_in_half_open(Duration::from_secs(45))
            .after_max_wait(State::Closed)
            .enabled(false),
        retry: Retry::builder()
            .max_attempts(5)
            .backoff(Duration::from_millis(20), Duration::from_millis(700))
            .backoff_multiplier(3.0)
            .jitter(Jitter::Equal)
            .budget(12.5, 4)
            .overall_timeout(Duration::from_secs(9))
            .build()
            .unwrap(),
        adaptive_limit: Some(
            AdaptiveLimit::new()
                .min_limit(3)
                .tolerance(75.0)
                .smoothing(35.0)
                .failure_cut(25.0)
                .short_window(8)
                .long_window(300)
                .relearn_after(Duration::from_secs(120)),
        ),
        rate_limit: Some(
            crate::limit::RateLimit::per_second(250.0).burst(20).max_wait(Duration::from_millis(15)),
        ),
        throttle: Some(
            crate::limit::Throttle::new().k(1.5).window(Duration::from_secs(20)).buckets(40).min_requests(8),
        ),
        hedge: Some(
            crate::dependency::Hedge::at_quantile(0.9)
                .max_hedges(2)
                .clamp(Duration::from_millis(3), Duration::from_millis(80))
                .min_samples(40),
        ),
        mode: crate::dependency::Mode::Pool,
        reserved_for_critical: 2,
        calls: crate::dependency::CallShape::FanOut("search".into()),
        shadow: crate::shadow::Shadow::none()
            .with(crate::shadow::Policy::Breaker)
            .with(crate::shadow::Policy::Throttle),
    };
    let mut server = ServerConfigFile {
        request_threads: Some(32),
        request_budget: Some(Duration::from_secs(5)),
        ..ServerConfigFile::default()
    };
    server.reserve =
        Some(crate::server::Reserve::new(2).for_routes(["GET /health", "GET /orders/{id}"]).shadow(true));
    let mut config = Config { server, ..Config::default() };
    config.dependencies.insert("fraud".into(), dep);
    config.dependencies.insert("account-read".into(), DependencyConfig::default());
    config
}

fn build(name: &str, config: &DependencyConfig) -> Result<Dependency, ConfigError> {
    Dependency::builder(name).config(config.clone()).build()
}

#[test]
fn toml_and_json_round_trip_every_field() {
    let config = everything();
    let toml_text = toml::to_string(&config).unwrap();
    assert_eq!(from_toml(&toml_text).unwrap(), config, "{toml_text}");
    assert!(toml_text.contains("timeout = \"2s 500ms\""), "{toml_text}");
    assert!(toml_text.contains("jitter = \"equal\""), "{toml_text}");
    let json_text = serde_json::to_string(&config).unwrap();
    assert_eq!(from_json(&json_text).unwrap(), config, "{json_text}");
    assert!(json_text.contains(r#""window":{"time":30}"#), "{json_text}");
    // Absent options stay absent.
    let dflt = toml::to_string(&Config::default()).unwrap();
    assert!(!dflt.contains("request_threads") && !dflt.contains("adaptive_limit"), "{dflt}");
}

#[test]
fn a_built_registry_carries_every_value() {
    let registry = everything().build().unwrap();
    let fraud = registry.get("fraud").unwrap();
    assert_eq!(fraud.pool().unwrap().workers(), 7);
    assert_eq!(fraud.pool().unwrap().queue_capacity(), 3);
    assert_eq!(fraud.pool().unwrap().max_wait(), Duration::from_millis(150));
    assert!(!fraud.pool().unwrap().deadline_aware_admission());
    assert_eq!(fraud.timeout(), Duration::from_millis(2500));
    assert_eq!(fraud.retry().max_attempts(), 5);
    assert_eq!(fraud.retry().jitter(), Jitter::Equal);
    assert_eq!(fraud.retry().overall_timeout(), Some(Duration::from_secs(9)));
    let limiter = fraud.limiter().expect("an adaptive limit");
    assert_eq!((limiter.min_limit(), limiter.max_limit()), (3, 7));
    let throttle = fraud.throttler().expect("a throttler").config();
    assert_eq!((throttle.k, throttle.window, throttle.buckets), (1.5, Duration::from_secs(20), 40));
    // `enabled = false`: a disabled breaker.
    assert_eq!(fraud.breaker().state(), State::Disabled);
    assert_eq!(registry.dependencies().len(), 2);
}

#[test]
fn a_running_dependency_reads_back_as_its_section() {
    let config = everything();
    for (name, section) in &config.dependencies {
        let dep = build(name, section).unwrap();
        assert_eq!(dep.config(), *section, "{name}");
    }
}
