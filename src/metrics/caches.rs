//! The caches' families: one sample per registered cache, labelled `cache`
//! (see [`Collector`](super::Collector) for the table).

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::{Res, counter};
use crate::cache::CacheSnapshot;

/// The caches' families, one sample per cache, labelled `cache`.
pub(super) fn encode(encoder: &mut DescriptorEncoder<'_>, caches: &[crate::cache::CacheSnapshot]) -> Res {
    type Read = fn(&CacheSnapshot) -> u64;
    let counted: [(&str, &str, Read); 7] = [
        ("watertight_cache_hits", "Cache lookups answered with a fresh value, without a call.", |c| c.hits),
        (
            "watertight_cache_misses",
            "Cache lookups that found no fresh value: each started or joined a shared call.",
            |c| c.misses,
        ),
        ("watertight_cache_stale", "Cache misses answered with the last good value.", |c| c.stale),
        ("watertight_cache_coalesced", "Cache misses that joined a shared call in flight.", |c| c.coalesced),
        (
            "watertight_cache_refused",
            "Cache misses refused at once: max_waiting callers were waiting already.",
            |c| c.refused,
        ),
        ("watertight_cache_refreshes", "Cache refreshes started ahead of expiry.", |c| c.refreshes),
        ("watertight_cache_evictions", "Cache entries pushed out to make room.", |c| c.evictions),
    ];
    for (name, help, read) in counted {
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for cache in caches {
            counter(&mut metric, &[("cache", cache.name.as_str())], read(cache))?;
        }
    }
    type Gauge = fn(&CacheSnapshot) -> usize;
    let gauged: [(&str, &str, Gauge); 3] = [
        ("watertight_cache_entries", "Cache entries kept now.", |c| c.entries),
        ("watertight_cache_in_flight", "Shared calls of the cache in flight now.", |c| c.in_flight),
        ("watertight_cache_waiting", "Callers waiting on the cache's shared calls now.", |c| c.waiting),
    ];
    for (name, help, read) in gauged {
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for cache in caches {
            let labels: &[(&str, &str)] = &[("cache", cache.name.as_str())];
            metric.encode_family(&labels)?.encode_gauge(&read(cache))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::metrics::encode_text;
    use crate::{Dependency, Registry};

    #[test]
    fn registered_caches_are_exported_with_their_label() {
        let deps = Registry::new();
        let dep = Dependency::builder("account").workers(1).build().unwrap();
        let cache: crate::cache::Cache<String, bool> =
            crate::cache::Cache::builder("access").build().unwrap();
        deps.register_cache(&cache).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        for _ in 0..3 {
            cache
                .get_or_call(&dep, "alice", deadline, |_: &crate::CallContext| Ok::<_, String>(true))
                .unwrap();
        }
        let text = encode_text(&deps);
        for line in [
            "# TYPE watertight_cache_hits counter\n",
            "\nwatertight_cache_hits_total{cache=\"access\"} 2\n",
            "\nwatertight_cache_misses_total{cache=\"access\"} 1\n",
            "\nwatertight_cache_stale_total{cache=\"access\"} 0\n",
            "\nwatertight_cache_coalesced_total{cache=\"access\"} 0\n",
            "\nwatertight_cache_evictions_total{cache=\"access\"} 0\n",
            "\nwatertight_cache_entries{cache=\"access\"} 1\n",
            "\nwatertight_cache_in_flight{cache=\"access\"} 0\n",
            "\nwatertight_cache_refused_total{cache=\"access\"} 0\n",
            "\nwatertight_cache_waiting{cache=\"access\"} 0\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
    }
}
