//! Named dependencies: [`Registry`] and their snapshots; the capacity check
//! ([`Registry::check_capacity`], `capacity.rs`); and the gauges of the
//! request pool that serves them ([`RequestPoolGauges`], `gauges.rs`).
//!
//! # Sizing
//!
//! Size a dependency's pool twice. For normal load, by Little's law:
//! `workers >= calls per second x latency`, plus a short
//! [`max_wait`](crate::pool#waiting-for-room-by-time) for bursts. For the day
//! its provider hangs: each worker and each queued call then holds a request
//! thread until the timeout, so its *hold* is `workers + queue`; waiters hold
//! theirs for a few normal latencies at most, and once the breaker opens
//! nobody waits. Isolation holds only while the worst hold leaves the request
//! pool room for everything else. The hold depends on who waits, declared by
//! [`CallShape`](crate::dependency::CallShape) (`calls`): `blocking` (the
//! default) holds `workers + queue`, `detached` (only ever spawned) none, a
//! fan-out group's legs the largest leg, once per group.
//!
//! [`Registry::check_capacity`] compares each hold with the request threads
//! left after the reserve (`available`; see [`RequestThreads`], or take it
//! from a server's config with
//! [`ServerConfig::request_threads`](crate::server::ServerConfig::request_threads)).
//! Each finding states the numbers it was found by. It only reports; `Config::build` refuses an error and logs the warnings.
//!
//! | finding | level |
//! |---|---|
//! | one hold `>= available` | error |
//! | one hold `> available / 2`, or `hold + waiters >= available` | warning |
//! | a breaker that needs more failures to open than the pool holds: a hang is then cut by the stuck rule, once every worker has been inside one call for the stuck threshold (a quarter of the timeout, at least twice the least hang threshold of 50 ms, before the provider has answered) | warning |
//! | all holds together `>= available` (providers failing together) | warning |
//! | a timeout, or a retry's whole hold, longer than the request budget (a hung provider then holds each thread for the whole budget, and the breaker opens later) | warning |

mod capacity;
// The caches named beside the dependencies (feature `cache`).
#[cfg(feature = "cache")]
mod caches;
mod gauges;

use std::fmt;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub use self::capacity::{CapacityEntry, CapacityLevel, CapacityReport, RequestThreads};
pub use self::gauges::{REFUSAL_REASONS, RequestPoolGauges};
use crate::dependency::{Dependency, DependencyConfig, DependencySnapshot};
use crate::error::ConfigError;

/// A set of uniquely named [`Dependency`] handles. Cheap to clone; clones
/// share the set.
///
/// ```
/// use watertight::{Dependency, Registry};
///
/// let registry = Registry::new();
/// registry.register(Dependency::builder("fraud").workers(2).build()?)?;
/// assert!(registry.get("fraud").is_some());
/// assert!(registry.register(Dependency::builder("fraud").workers(1).build()?).is_err());
/// assert_eq!(registry.snapshot()[0].name, "fraud");
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    /// Registration order is kept (snapshots and metrics list dependencies in
    /// it). A registry holds a handful of entries, so lookups scan.
    deps: Arc<RwLock<Vec<Dependency>>>,
    /// The gauges of the request pool serving with this registry, while one
    /// does (see [`Registry::request_pool`]). Locked only to attach, detach
    /// and clone the handle; the gauges are read after it is released.
    request_pool: Arc<Mutex<Option<RequestPoolGauges>>>,
    /// The caches registered, in registration order (`caches.rs`).
    #[cfg(feature = "cache")]
    caches: Arc<RwLock<Vec<Arc<dyn crate::cache::Watched>>>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `dep`. A second dependency with the same name is refused (field
    /// `name`), and the registry is left as it was.
    pub fn register(&self, dep: Dependency) -> Result<(), ConfigError> {
        let mut deps = self.deps.write();
        if deps.iter().any(|d| d.name() == dep.name()) {
            return Err(ConfigError::new("name", "unique within the registry", dep.name()));
        }
        deps.push(dep);
        Ok(())
    }

    /// The dependency called `name`, if registered.
    pub fn get(&self, name: &str) -> Option<Dependency> {
        self.deps.read().iter().find(|d| d.name() == name).cloned()
    }

    /// Every registered dependency, in registration order.
    pub fn dependencies(&self) -> Vec<Dependency> {
        self.deps.read().clone()
    }

    /// A snapshot of every dependency, in registration order.
    ///
    /// The list of handles is copied under the read lock and the lock released
    /// before any counter is read, so a slow reader never holds up
    /// `register`.
    pub fn snapshot(&self) -> Vec<DependencySnapshot> {
        self.dependencies().iter().map(Dependency::snapshot).collect()
    }

    /// The gauges of the request pool serving with this registry (its config's
    /// `ServerConfig::registry`), while it runs; `None` before and after.
    pub fn request_pool(&self) -> Option<RequestPoolGauges> {
        self.request_pool.lock().clone()
    }

    /// Attaches a request pool's gauges. At most one pool at a time: its two
    /// gauges carry no label to tell two apart, so a second is refused (with
    /// the gauges already there) while the first runs.
    pub(crate) fn attach_request_pool(&self, gauges: RequestPoolGauges) -> Result<(), RequestPoolGauges> {
        let mut slot = self.request_pool.lock();
        match &*slot {
            Some(running) => Err(running.clone()),
            None => {
                *slot = Some(gauges);
                Ok(())
            }
        }
    }

    /// Detaches `gauges` if they are the ones attached (a pool stopping
    /// leaves another pool's gauges alone).
    pub(crate) fn detach_request_pool(&self, gauges: &RequestPoolGauges) {
        let mut slot = self.request_pool.lock();
        if slot.as_ref().is_some_and(|g| g.same_as(gauges)) {
            *slot = None;
        }
    }

    /// Whether `self` and `other` are handles on the same registry.
    pub(crate) fn same_as(&self, other: &Registry) -> bool {
        Arc::ptr_eq(&self.deps, &other.deps)
    }

    /// Reconfigures the dependency called `name` while calls run (see
    /// [`Dependency::reconfigure`]), refusing, with nothing changed, a change
    /// that does not validate (the builder's error), an unknown `name`, or
    /// one by which this dependency could hold every request thread of
    /// `pool` left after the reserve (the field `capacity`, as
    /// [`check_capacity`](Self::check_capacity)). The report is the
    /// registry's after the change.
    pub fn reconfigure(
        &self,
        name: &str,
        new: DependencyConfig,
        pool: impl Into<RequestThreads>,
    ) -> Result<CapacityReport, ConfigError> {
        let pool = pool.into();
        let dep =
            self.get(name).ok_or_else(|| ConfigError::at("", format!("no dependency named `{name}`")))?;
        new.validate()?;
        let mut configs = self.configs();
        if let Some(slot) = configs.iter_mut().find(|(n, _)| n == name) {
            slot.1 = new.clone();
        }
        let (report, _) = capacity::rule(&configs, pool);
        // Another dependency's hold may be over the rule already: only this one's refuses.
        if report.entries.iter().any(|entry| entry.name == name && entry.level == CapacityLevel::Error) {
            return Err(capacity::refusal(&report, name));
        }
        dep.reconfigure(new)?;
        Ok(self.capacity_report(pool))
    }
}

impl fmt::Debug for Registry {
    /// Never blocks: prints `<locked>` while a registration holds the lock.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.deps.try_read() {
            Some(deps) => f.debug_list().entries(deps.iter().map(|d| d.name().to_owned())).finish(),
            None => f.write_str("Registry(<locked>)"),
        }
    }
}
