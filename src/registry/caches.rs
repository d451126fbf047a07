//! The [`Cache`]s a registry names beside its dependencies, so that the
//! Prometheus exporter and a dashboard read them with the rest.

use std::hash::Hash;

use super::Registry;
use crate::cache::{Cache, CacheSnapshot};
use crate::error::ConfigError;

impl Registry {
    /// Adds `cache` (a handle: it keeps counting). A second cache with the
    /// same name is refused (field `name`), and the registry is left as it was.
    ///
    /// ```
    /// use watertight::{Registry, cache::Cache};
    ///
    /// let registry = Registry::new();
    /// let access: Cache<String, bool> = Cache::builder("access").build()?;
    /// registry.register_cache(&access)?;
    /// assert_eq!(registry.cache_snapshots()[0].name, "access");
    /// assert!(registry.register_cache(&access).is_err());
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn register_cache<K, V>(&self, cache: &Cache<K, V>) -> Result<(), ConfigError>
    where
        K: Hash + Eq + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        let mut caches = self.caches.write();
        if caches.iter().any(|c| c.name() == cache.name()) {
            return Err(ConfigError::new("name", "unique within the registry's caches", cache.name()));
        }
        caches.push(cache.watched());
        Ok(())
    }

    /// A snapshot of every registered cache, in registration order, read as
    /// [`snapshot`](Registry::snapshot) reads the dependencies.
    pub fn cache_snapshots(&self) -> Vec<CacheSnapshot> {
        let caches = self.caches.read().clone();
        caches.iter().map(|c| c.snapshot()).collect()
    }
}
