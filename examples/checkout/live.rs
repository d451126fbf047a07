//! The checkout's configuration: read from `--config` (or the file embedded at
//! build time, `watertight.toml`, the one source of the defaults), the
//! dependencies built from it, and their live values read back and changed
//! while the server runs (`GET /_config`, `PUT /_config/{name}`).
//!
//! Reading back and changing a running dependency go through the two adapter
//! functions at the bottom of this file, [`live_config`] and [`apply_live`]:
//! they are the only code that needs the crate's live-reconfiguration API.

use std::collections::BTreeMap;
use std::path::Path;

use parking_lot::Mutex;
use watertight::config::{Config, ConfigFileError, DependencyConfigFile};
use watertight::{CapacityReport, Dependency, Registry};

use crate::backends::Deps;

/// The defaults of the example, written out: `examples/checkout/watertight.toml`.
pub const DEFAULT_CONFIG: &str = include_str!("watertight.toml");

/// The dependencies the checkout calls; a configuration must describe
/// exactly these.
pub const DEPENDENCIES: [&str; 3] = ["fraud", "account-access", "account-read"];

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
    for name in DEPENDENCIES {
        if !config.dependencies.contains_key(name) {
            return Err(format!("{origin}: dependencies.{name} is missing"));
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

/// Builds the three dependencies, in the order the checkout calls them.
/// Errors name the field's path (`dependencies.fraud.breaker.failure_rate`).
pub fn build_deps(config: &Config) -> Result<Deps, ConfigFileError> {
    let build = |name: &str| {
        let section = config
            .dependencies
            .get(name)
            .ok_or_else(|| ConfigFileError::new(format!("dependencies.{name}"), "missing"))?;
        section.build(name).map_err(|e| e.within(&format!("dependencies.{name}")))
    };
    Ok(Deps { fraud: build("fraud")?, access: build("account-access")?, read: build("account-read")? })
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
    /// This build of the crate cannot change a running dependency (501).
    Unsupported(&'static str),
}

/// The configuration each dependency was last given, as far as the running
/// dependency cannot say it itself (see [`live_config`]).
pub struct LiveConfig {
    applied: Mutex<BTreeMap<String, DependencyConfigFile>>,
    request_threads: usize,
}

impl LiveConfig {
    /// Starts from the configuration the dependencies were built with.
    pub fn new(config: &Config, request_threads: usize) -> LiveConfig {
        LiveConfig { applied: Mutex::new(config.dependencies.clone()), request_threads }
    }

    /// The running dependency's configuration.
    pub fn current(&self, dep: &Dependency) -> DependencyConfigFile {
        let applied = self.applied.lock().get(dep.name()).cloned().unwrap_or_default();
        live_config(dep, applied)
    }

    /// The whole running configuration, as a file would say it.
    pub fn snapshot(&self, registry: &Registry) -> Config {
        let mut config = Config::default();
        config.server.request_threads = Some(self.request_threads);
        for dep in registry.dependencies() {
            config.dependencies.insert(dep.name().to_owned(), self.current(&dep));
        }
        config
    }

    /// Changes the running dependency `name` to `new`, all of it at once:
    /// validated, checked against the capacity rule, applied to the calls in
    /// flight. Returns the capacity report after the change.
    pub fn reconfigure(
        &self,
        registry: &Registry,
        name: &str,
        new: DependencyConfigFile,
    ) -> Result<CapacityReport, LiveError> {
        if registry.get(name).is_none() {
            return Err(LiveError::Unknown);
        }
        new.validate().map_err(LiveError::Invalid)?;
        // One change at a time, so that `applied` follows the order in which
        // the changes were made.
        let mut applied = self.applied.lock();
        let report = apply_live(registry, name, &new, self.request_threads)?;
        applied.insert(name.to_owned(), new);
        Ok(report)
    }
}

// ---------------------------------------------------------------------------
// The adapter: the only two functions that need live reconfiguration.
//
// Until `Dependency::config()` and `Registry::reconfigure` exist, the running
// dependency is read through its getters (pool, timeout, retry) and the rest
// is what it was last given; a change is refused as unsupported.
// ---------------------------------------------------------------------------

/// The running `dep`'s configuration. `applied` is the one it was last given.
fn live_config(dep: &Dependency, applied: DependencyConfigFile) -> DependencyConfigFile {
    let pool = dep.pool();
    DependencyConfigFile {
        workers: pool.workers(),
        queue: pool.queue_capacity(),
        max_wait: pool.max_wait(),
        timeout: dep.timeout(),
        // The pool reports whether admission is in effect (never with a
        // queue of 0), not the setting.
        deadline_aware_admission: applied.deadline_aware_admission,
        retry: dep.retry().into(),
        // The breaker's and the limit's settings are not readable from a
        // running dependency in this build: the ones it was built with.
        breaker: applied.breaker,
        adaptive_limit: applied.adaptive_limit,
    }
}

/// Applies `new` to the running dependency `name`, refusing a change that
/// breaks the capacity rule for `request_threads`.
fn apply_live(
    registry: &Registry,
    name: &str,
    new: &DependencyConfigFile,
    request_threads: usize,
) -> Result<CapacityReport, LiveError> {
    let _ = (registry, name, new, request_threads);
    Err(LiveError::Unsupported("this build of watertight cannot change a running dependency"))
}
