//! The checkout's configuration: read from `--config` (or the file embedded at
//! build time, `watertight.toml`, the one source of the defaults), the
//! dependencies built from it, and their live values read back and changed
//! while the server runs (`GET /_config`, `PUT /_config/{name}`).
//!
//! A running dependency is read back with `Dependency::config` and changed
//! with `Registry::reconfigure`, which checks the change against the request
//! pool's capacity rule first.

use std::path::Path;

use parking_lot::Mutex;
use watertight::config::Config;
use watertight::dependency::CallShape;
use watertight::registry::RequestPoolGauges;
use watertight::server::Reserve;
use watertight::{
    ConfigError, Dependency, DependencyConfig, Registry,
    registry::{CapacityReport, RequestThreads},
};

use crate::backends::Deps;

/// The defaults of the example, written out: `examples/checkout/watertight.toml`.
pub const DEFAULT_CONFIG: &str = include_str!("watertight.toml");

/// The dependencies the checkout calls; a configuration must describe
/// these (it may leave out the ones the embedded file declares detached,
/// `calls = "detached"`, which then take the embedded file's section) and no
/// others.
pub const DEPENDENCIES: [&str; 4] = ["fraud", "account-access", "account-read", "notification"];

/// Reads a configuration from TOML text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<Config, String> {
    let de = toml::Deserializer::parse(text).map_err(|e| format!("{origin}: {e}"))?;
    let config = Config::from_deserializer(de).map_err(|e| format!("{origin}: {e}"))?;
    for name in config.dependencies.keys() {
        if !DEPENDENCIES.contains(&name.as_str()) {
            return Err(format!(
                "{origin}: dependencies.{name}: the checkout calls no dependency {name:?} \
                 (it calls {})",
                DEPENDENCIES.join(", ")
            ));
        }
    }
    let mut config = config;
    for name in DEPENDENCIES {
        if config.dependencies.contains_key(name) {
            continue;
        }
        // A file written before the checkout sent notifications still runs.
        let embedded = if text != DEFAULT_CONFIG {
            parse(DEFAULT_CONFIG, "the embedded watertight.toml")?
                .dependencies
                .remove(name)
                .filter(|section| section.calls == CallShape::Detached)
        } else {
            None
        };
        match embedded {
            Some(section) => {
                config.dependencies.insert(name.to_owned(), section);
            }
            None => return Err(format!("{origin}: dependencies.{name} is missing")),
        }
    }
    Ok(config)
}

/// Reads `--config PATH`, or the embedded defaults without one.
pub fn load(path: Option<&Path>) -> Result<Config, String> {
    match path {
        None => parse(DEFAULT_CONFIG, "the embedded watertight.toml"),
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            parse(&text, &path.display().to_string())
        }
    }
}

/// Builds the four dependencies, in the order the checkout calls them.
/// Errors name the field's path (`dependencies.fraud.breaker.failure_rate`).
pub fn build_deps(config: &Config) -> Result<Deps, ConfigError> {
    let build = |name: &str| {
        let section = config
            .dependencies
            .get(name)
            .ok_or_else(|| ConfigError::at(format!("dependencies.{name}"), "missing"))?;
        Dependency::builder(name)
            .config(section.clone())
            .build()
            .map_err(|e| e.in_dependency().within(&format!("dependencies.{name}")))
    };
    Ok(Deps {
        fraud: build("fraud")?,
        access: build("account-access")?,
        read: build("account-read")?,
        notification: build("notification")?,
    })
}

/// Why a `PUT /_config/{name}` was refused.
#[derive(Debug)]
pub enum LiveError {
    /// No dependency by that name (404).
    Unknown,
    /// A value its rules refuse (400); the path is relative to the dependency.
    Invalid(ConfigError),
    /// The change would break the request pool's capacity rule (409).
    Capacity(String),
}

/// Reads back and changes the running dependencies, checking every change
/// against a request pool of `request_threads`.
pub struct LiveConfig {
    request_threads: usize,
    /// The request pool's reserved share, read back with the rest.
    reserve: Option<Reserve>,
    /// One change at a time, so that two `PUT`s to one dependency cannot
    /// interleave their read-back with each other's change.
    changing: Mutex<()>,
    /// The running request pool, once the server has started: where the
    /// reserve is put in shadow and back live.
    running: std::sync::OnceLock<RequestPoolGauges>,
}

impl LiveConfig {
    /// For a request pool of `request_threads` with `reserve`.
    pub fn new(request_threads: usize, reserve: Option<Reserve>) -> LiveConfig {
        LiveConfig { request_threads, reserve, changing: Mutex::new(()), running: std::sync::OnceLock::new() }
    }

    /// The running request pool, once the server has started.
    pub fn attach(&self, pool: RequestPoolGauges) {
        let _ = self.running.set(pool);
    }

    /// The reserve as it runs now: in shadow or enforcing.
    pub fn reserve_now(&self) -> Option<Reserve> {
        let running = self.running.get();
        self.reserve.clone().map(|r| match running {
            Some(pool) => r.shadow(pool.reserve_in_shadow()),
            None => r,
        })
    }

    /// Puts the running reserve in shadow or back to enforcing, from the
    /// next request; `None` without a reserve (or before the server runs).
    pub fn set_reserve_shadow(&self, shadow: bool) -> Option<Reserve> {
        let pool = self.running.get().filter(|_| self.reserve.is_some())?;
        pool.set_reserve_shadow(shadow);
        self.reserve_now()
    }

    /// What the reserve in shadow let onto a reserved thread so far.
    pub fn reserve_shadow_refused(&self) -> u64 {
        self.running.get().map_or(0, RequestPoolGauges::shadow_refused)
    }

    /// The request pool the capacity rule checks against: its threads less
    /// the reserve's, which no dependency can hold.
    pub fn pool(&self) -> RequestThreads {
        RequestThreads::new(self.request_threads).reserved(self.reserve.as_ref().map_or(0, |r| r.threads))
    }

    /// The capacity report of every dependency (a detached one holds no
    /// request thread); a dependency over the rule is in it at the error
    /// level.
    pub fn capacity(&self, registry: &Registry) -> Result<CapacityReport, ConfigError> {
        registry.check_capacity(self.pool())
    }

    /// The capacity report, also when a dependency is over the rule.
    pub fn capacity_report(&self, registry: &Registry) -> CapacityReport {
        registry.capacity_report(self.pool())
    }

    /// The request pool's reserved share, if it keeps one.
    pub fn reserve(&self) -> Option<&Reserve> {
        self.reserve.as_ref()
    }

    /// The running dependency's configuration: the type a file's section is.
    pub fn current(&self, dep: &Dependency) -> DependencyConfig {
        dep.config()
    }

    /// The whole running configuration, as a file would say it.
    pub fn snapshot(&self, registry: &Registry) -> Config {
        let mut config = Config::default();
        config.server.request_threads = Some(self.request_threads);
        config.server.reserve = self.reserve_now();
        for dep in registry.dependencies() {
            config.dependencies.insert(dep.name().to_owned(), self.current(&dep));
        }
        config
    }

    /// Changes the running dependency `name` to `new`, all of it at once:
    /// validated, checked against the capacity rule (a detached one holds no
    /// request thread), then applied while calls run
    /// (`Registry::reconfigure`). Returns the capacity report after the
    /// change; on an error nothing has changed.
    pub fn reconfigure(
        &self,
        registry: &Registry,
        name: &str,
        new: &DependencyConfig,
    ) -> Result<(DependencyConfig, CapacityReport), LiveError> {
        let config = new.clone();
        let _one_at_a_time = self.changing.lock();
        let dep = registry.get(name).ok_or(LiveError::Unknown)?;
        let report = registry.reconfigure(name, config, self.pool()).map_err(|e| match e.field() {
            "capacity" => LiveError::Capacity(e.message()),
            _ => LiveError::Invalid(e.in_dependency()),
        })?;
        Ok((self.current(&dep), report))
    }
}
