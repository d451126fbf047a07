//! Named dependencies: [`Registry`] and their snapshots; the capacity check
//! ([`Registry::check_capacity`], `capacity.rs`); the gauges of the request
//! pool that serves them ([`RequestPoolGauges`], `gauges.rs`); and the
//! rolling history of every dependency ([`Registry::start_history`],
//! `history.rs`).

mod capacity;
// The caches named beside the dependencies (feature `cache`).
#[cfg(feature = "cache")]
mod caches;
mod gauges;
mod history;

use std::fmt;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub use self::capacity::{CapacityEntry, CapacityLevel, CapacityReport, RequestThreads};
pub use self::gauges::{REFUSAL_REASONS, RequestPoolGauges};
pub use self::history::{DependencyHistory, HistoryPoint};
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
    /// The history's points, shared with its sampler (weakly, see `history.rs`).
    history: Arc<self::history::HistoryState>,
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

    /// How many dependencies are registered.
    pub fn len(&self) -> usize {
        self.deps.read().len()
    }

    /// `true` when none is registered.
    pub fn is_empty(&self) -> bool {
        self.deps.read().is_empty()
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
