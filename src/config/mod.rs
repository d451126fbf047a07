//! Configuration from files (feature `serde`): the request pool (its
//! `request_threads`, `reserve` and `request_budget`) and each dependency by
//! name. Each section is the part's own configuration type
//! ([`DependencyConfig`], [`BreakerConfig`](crate::breaker::BreakerConfig),
//! [`Retry`](crate::retry::Retry), ...): the one
//! the builders set and [`Dependency::config`](crate::Dependency::config)
//! returns, so a file, a builder and live reconfiguration speak one language.
//! A field left out takes the default, an unknown field is refused, and every
//! error names the path of the bad field. [`Config::build`] fills a
//! [`Registry`] and applies the
//! [capacity rule](crate::registry#sizing). `examples/checkout/watertight.toml`
//! is the demo's, with its sizing reasoned out.
//!
//! [`Dependency::reconfigure`](crate::Dependency::reconfigure) applies new
//! settings while calls run: the pool resizes in place, the breaker keeps its
//! state, every call gets one answer.
//!
//! Durations are `humantime` strings (`"1m 30s"`); a bare number is refused,
//! since `3` could be seconds or milliseconds. The crate reads no file format
//! itself: [`Config::from_deserializer`] takes any serde deserializer, so
//! that the path can be tracked through it (`toml::from_str::<Config>` works
//! too, with the format's own messages and no validation until
//! [`Config::validate`]); [`Config::from_section`] reads one table of the
//! application's own file in place.
//!
//! ```
//! use std::time::Duration;
//! use watertight::config::Config;
//!
//! let text = r#"{
//!     "server": { "request_threads": 16 },
//!     "dependencies": {
//!         "fraud": {
//!             "workers": 6, "queue": 2, "max_wait": "100ms", "timeout": "3s",
//!             "breaker": { "window": { "count": 20 }, "minimum_calls": 8, "open_for": "15s" },
//!             "retry": { "jitter": "none" }
//!         }
//!     }
//! }"#;
//! let config = Config::from_deserializer(&mut serde_json::Deserializer::from_str(text))?;
//! let registry = config.build()?;
//! let fraud = registry.get("fraud").unwrap();
//! assert_eq!(fraud.timeout(), Duration::from_secs(3));
//! assert_eq!(fraud.pool().unwrap().workers(), 6);
//! assert_eq!(fraud.config(), config.dependencies["fraud"]);
//!
//! let bad = r#"{ "dependencies": { "fraud": { "breaker": { "failure_rate": 101 } } } }"#;
//! let err = Config::from_deserializer(&mut serde_json::Deserializer::from_str(bad)).unwrap_err();
//! assert_eq!(err.path(), "dependencies.fraud.breaker.failure_rate");
//! assert_eq!(err.to_string(), "dependencies.fraud.breaker.failure_rate: must be in (0, 100], got 101");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use crate::dependency::{Dependency, DependencyConfig};
use crate::error::ConfigError;
use crate::registry::{Registry, RequestThreads};

/// A configuration file: the server, and the dependencies by name.
///
/// ```toml
/// [server]
/// request_threads = 16
///
/// [dependencies.fraud]
/// workers = 6
/// timeout = "3s"
///
/// [dependencies.fraud.breaker]
/// failure_rate = 50.0
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The server the dependencies are called from.
    pub server: ServerConfigFile,
    /// Every dependency, by name (its threads are `wt-<name>-<i>`).
    pub dependencies: BTreeMap<String, DependencyConfig>,
}

/// The server section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfigFile {
    /// The size of the request pool that calls the dependencies. When set,
    /// [`Config::build`] applies the capacity rule
    /// ([`Registry::check_capacity`]) against it and refuses a dependency
    /// that could hold every request thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_threads: Option<usize>,
    /// A reserved share of the request pool (`[server.reserve]`): the [`Reserve`](crate::server::Reserve)
    /// [`ServerConfigBuilder::reserve`](crate::server::ServerConfigBuilder::reserve)
    /// takes. [`Config::validate`] checks it, and against `request_threads`
    /// when that is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserve: Option<crate::server::Reserve>,
    /// Each request's time budget, as
    /// [`ServerConfigBuilder::request_budget`](crate::server::ServerConfigBuilder::request_budget)
    /// sets it (`request_budget = "800ms"`). When set with `request_threads`,
    /// the capacity rule warns about every dependency whose timeout is
    /// longer (see [`CapacityReport::warnings`](crate::registry::CapacityReport::warnings)).
    /// Defaults to none.
    #[serde(default, with = "crate::duration::option", skip_serializing_if = "Option::is_none")]
    pub request_budget: Option<std::time::Duration>,
}

impl Config {
    /// Reads a configuration from `deserializer`, then checks every
    /// dependency as [`validate`](Self::validate) does. Errors name the path
    /// of the field.
    pub fn from_deserializer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Config, ConfigError> {
        let config: Config = from_deserializer(deserializer)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every field of every dependency that can be checked without
    /// starting threads ([`DependencyConfig::validate`]), and the server's
    /// reserve, naming its path. The capacity rule is checked by
    /// [`build`](Self::build).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.server.request_threads == Some(0) {
            let e = ConfigError::new("request_threads", "at least 1: the request pool's size", 0);
            return Err(e.within("server"));
        }
        if let Some(budget) = self.server.request_budget
            && (budget.is_zero() || budget > crate::time::MAX_TIMEOUT)
        {
            let e = ConfigError::new(
                "request_budget",
                "greater than zero and at most one day",
                format_args!("{budget:?}"),
            );
            return Err(e.within("server"));
        }
        if let Some(reserve) = &self.server.reserve {
            let checked = reserve.validate().and_then(|()| match self.server.request_threads {
                Some(threads) => crate::server::check_threads(reserve.threads, threads),
                None => Ok(()),
            });
            // The builder names `reserve.threads`; the file, `server.reserve.threads`.
            checked.map_err(|e| e.within("server"))?;
        }
        for (name, dep) in &self.dependencies {
            dep.validate().map_err(|e| e.in_dependency().within(&dependency_path(name)))?;
        }
        Ok(())
    }

    /// The request pool the file describes, for the capacity rule: its
    /// `request_threads`, less the reserve's threads, under its
    /// `request_budget`; `None` without `request_threads`.
    pub fn request_threads(&self) -> Option<RequestThreads> {
        let mut pool = RequestThreads::new(self.server.request_threads?);
        if let Some(reserve) = &self.server.reserve {
            pool = pool.reserved(reserve.threads);
        }
        if let Some(budget) = self.server.request_budget {
            pool = pool.request_budget(budget);
        }
        Some(pool)
    }

    /// Builds every dependency (their worker threads start) into a new
    /// registry, in the order of their names, and applies the capacity rule
    /// against [`request_threads`](Self::request_threads) when set: a
    /// dependency that can hold every thread is refused, and every warning
    /// is logged at `warn`. The first error stops the build (the
    /// dependencies built so far are dropped, and their threads stop).
    pub fn build(&self) -> Result<Registry, ConfigError> {
        let registry = Registry::new();
        for (name, dep) in &self.dependencies {
            let prefix = dependency_path(name);
            let built = Dependency::builder(name)
                .config(dep.clone())
                .build()
                .map_err(|e| e.in_dependency().within(&prefix))?;
            registry.register(built).map_err(|e| e.placed(prefix))?;
        }
        if let Some(pool) = self.request_threads() {
            match registry.check_capacity(pool) {
                Ok(report) => {
                    for warning in report.warnings() {
                        log::warn!("capacity: {warning}");
                    }
                }
                Err(e) => {
                    let path = dependency_path(e.path());
                    return Err(e.placed(path));
                }
            }
        }
        Ok(registry)
    }
}

impl DependencyConfig {
    /// Reads one dependency's section from `deserializer` (a request body,
    /// say), then checks it ([`validate`](Self::validate)). Paths are
    /// relative to the section: `breaker.failure_rate`.
    pub fn from_deserializer<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<DependencyConfig, ConfigError> {
        let dep: DependencyConfig = from_deserializer(deserializer)?;
        dep.validate().map_err(ConfigError::in_dependency)?;
        Ok(dep)
    }
}

/// `dependencies.<name>`, with a name that is not a plain word quoted, so
/// that a dot in it cannot be mistaken for a level.
fn dependency_path(name: &str) -> String {
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        format!("dependencies.{name}")
    } else {
        format!("dependencies.{name:?}")
    }
}

/// Deserializes a `T`, tracking the path to the first error.
fn from_deserializer<'de, T: Deserialize<'de>, D: Deserializer<'de>>(d: D) -> Result<T, ConfigError> {
    from_seed(d, std::marker::PhantomData::<T>)
}

/// Deserializes with `seed`, tracking the path to the first error.
fn from_seed<'de, S: serde::de::DeserializeSeed<'de>, D: Deserializer<'de>>(
    d: D,
    seed: S,
) -> Result<S::Value, ConfigError> {
    let mut track = serde_path_to_error::Track::new();
    let read = seed.deserialize(serde_path_to_error::Deserializer::new(d, &mut track));
    read.map_err(|inner| {
        let e = serde_path_to_error::Error::new(track.path(), inner);
        // The root is written ".", and a place the error could not be tied
        // to (a syntax error at the end of a map) "?": the path stops at the
        // last known level.
        let mut path = e.path().to_string();
        while let Some(known) = path.strip_suffix(".?") {
            path.truncate(known.len());
        }
        if path == "." || path == "?" {
            path.clear();
        }
        ConfigError::at(path, e.into_inner().to_string())
    })
}

impl ConfigError {
    /// A dependency's refusal ([`DependencyConfig::validate`], a builder's
    /// or a running dependency's), at the path of the field within the
    /// dependency's section: a breaker's `failure_rate` at
    /// `breaker.failure_rate`, `retry.budget` at `retry.budget_percent`,
    /// `min_limit` at `adaptive_limit.min_limit`.
    pub fn in_dependency(self) -> Self {
        let path = field_path(&self);
        self.placed(path)
    }
}

/// Where the field a [`ConfigError`] names lies in a dependency's section:
/// validation names it as its setter spells it (`min_limit`).
fn field_path(e: &ConfigError) -> String {
    let field = e.field();
    let breaker = [
        "minimum_calls",
        "failure_rate",
        "slow_call_rate",
        "slow_call_duration",
        "open_for",
        "open_backoff",
        "half_open_calls",
        "after_max_wait",
    ];
    let limit = [
        "min_limit",
        "tolerance",
        "smoothing",
        "failure_cut",
        "short_window",
        "long_window",
        "relearn_after",
    ];
    match field {
        "count_based" => "breaker.window.count".to_owned(),
        "time_based" => "breaker.window.time".to_owned(),
        f if breaker.contains(&f) => format!("breaker.{f}"),
        f if limit.contains(&f) => format!("adaptive_limit.{f}"),
        // Refused when the initial backoff exceeds the max.
        "retry.backoff" => "retry.initial_backoff".to_owned(),
        "retry.budget" => "retry.budget_percent".to_owned(),
        f if f.starts_with("retry.") => f.to_owned(),
        // The limit's maximum is the worker count.
        "max_limit" => "workers".to_owned(),
        "name" => String::new(),
        f => f.to_owned(),
    }
}

mod section;
#[cfg(test)]
mod tests;
