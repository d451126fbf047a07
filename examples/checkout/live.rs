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
use watertight::config::{Config, ConfigFileError};
use watertight::server::Reserve;
use watertight::{
    Dependency, DependencyConfig, Registry,
    registry::{CapacityError, CapacityReport, ReconfigureError},
};

use crate::backends::Deps;

/// The defaults of the example, written out: `examples/checkout/watertight.toml`.
pub const DEFAULT_CONFIG: &str = include_str!("watertight.toml");

/// The dependencies the checkout calls; a configuration must describe
/// these (it may leave out the [`DETACHED`] ones, which then take the embedded
/// file's section) and no others.
pub const DEPENDENCIES: [&str; 4] = ["fraud", "account-access", "account-read", "notification"];

/// The dependencies the checkout calls only detached (`Dependency::spawn`):
/// no request thread ever waits for them, so they hold none, and the
/// capacity rule (which counts `workers + queue` request threads per
/// dependency) leaves them out.
pub const DETACHED: [&str; 1] = ["notification"];

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
        let embedded = if DETACHED.contains(&name) && text != DEFAULT_CONFIG {
            parse(DEFAULT_CONFIG, "the embedded watertight.toml")?.dependencies.remove(name)
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

/// The dependencies that can hold request threads: every one but the
/// [`DETACHED`] ones, in a registry of their own for the capacity rule.
pub fn holding(registry: &Registry) -> Registry {
    let holding = Registry::new();
    for dep in registry.dependencies() {
        if !DETACHED.contains(&dep.name()) {
            // Names are unique in `registry` already.
            let _ = holding.register(dep);
        }
    }
    holding
}

/// The capacity report of the dependencies that can hold request threads;
/// a dependency over the rule is in it at the error level.
pub fn capacity(registry: &Registry, request_threads: usize) -> Result<CapacityReport, CapacityError> {
    holding(registry).check_capacity(request_threads)
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
pub fn build_deps(config: &Config) -> Result<Deps, ConfigFileError> {
    let build = |name: &str| {
        let section = config
            .dependencies
            .get(name)
            .ok_or_else(|| ConfigFileError::new(format!("dependencies.{name}"), "missing"))?;
        Dependency::builder(name)
            .config(section.clone())
            .build()
            .map_err(|e| ConfigFileError::of_dependency(&e).within(&format!("dependencies.{name}")))
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
    Invalid(ConfigFileError),
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
}

impl LiveConfig {
    /// For a request pool of `request_threads` with `reserve`.
    pub fn new(request_threads: usize, reserve: Option<Reserve>) -> LiveConfig {
        LiveConfig { request_threads, reserve, changing: Mutex::new(()) }
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
        config.server.reserve = self.reserve.clone();
        for dep in registry.dependencies() {
            config.dependencies.insert(dep.name().to_owned(), self.current(&dep));
        }
        config
    }

    /// Changes the running dependency `name` to `new`, all of it at once:
    /// validated, checked against the capacity rule (but for a [`DETACHED`]
    /// one, which holds no request thread), then applied while calls run
    /// (`Registry::reconfigure`). Returns the capacity report of the
    /// dependencies that hold request threads after the change; on an error
    /// nothing has changed.
    pub fn reconfigure(
        &self,
        registry: &Registry,
        name: &str,
        new: &DependencyConfig,
    ) -> Result<(DependencyConfig, CapacityReport), LiveError> {
        let config = new.clone();
        let _one_at_a_time = self.changing.lock();
        let dep = registry.get(name).ok_or(LiveError::Unknown)?;
        if DETACHED.contains(&name) {
            dep.reconfigure(config).map_err(|e| LiveError::Invalid(ConfigFileError::of_dependency(&e)))?;
        } else {
            registry.reconfigure(name, config, self.request_threads).map_err(|e| match e {
                ReconfigureError::UnknownDependency(_) => LiveError::Unknown,
                ReconfigureError::Invalid(e) => LiveError::Invalid(ConfigFileError::of_dependency(&e)),
                ReconfigureError::Capacity(e) => LiveError::Capacity(e.to_string()),
                other => LiveError::Capacity(other.to_string()),
            })?;
        }
        // Another dependency's hold may already be over the rule: this change did not cause it.
        let report = capacity(registry, self.request_threads).unwrap_or_else(|e| e.report().clone());
        Ok((self.current(&dep), report))
    }
}
