//! The Prometheus exporter (feature `prometheus`): a `prometheus-client`
//! [`Collector`] over a [`Registry`], and [`encode_text`] for
//! a `/metrics` route.
//!
//! What is counted, and how the counts add up, is the dependency's own
//! bookkeeping ([`CallCounts`](crate::CallCounts)); this module only exports
//! it. A registry given to the server
//! ([`ServerConfig::registry`](crate::server::ServerConfig::registry)) also
//! carries the request pool's gauges, and they are exported with the rest.
//!
//! # Observability
//!
//! - **Snapshots.** [`Dependency::snapshot`](crate::Dependency::snapshot),
//!   [`Dependency::recent_events`](crate::Dependency::recent_events) (a
//!   sampler of its own may add to them with
//!   [`Dependency::record_event`](crate::Dependency::record_event), as the
//!   checkout example's dashboard does for its history).
//! - **Prometheus.** [`register`] and [`encode_text`]: `watertight_*`
//!   labelled `dependency` (calls by `kind`, the word of
//!   [`Error::outcome`](crate::Error::outcome); breaker state; pool gauges;
//!   the histograms `watertight_call_seconds`, `watertight_queue_wait_seconds`,
//!   `watertight_run_seconds`), and registered caches' counts labelled `cache`.
//! - **Tracing** (feature `tracing`): each job runs in a span whose parent is
//!   the caller's; rejections, timeouts and transitions are events.
//! - **Logs**, through `log`: transitions at `info`, stuck pools and detached
//!   failures at `warn`, refusals and timeouts at `debug` in aggregate (a line
//!   a second per dependency and reason, with the count).
//!
//! ```
//! use watertight::{Dependency, Registry, metrics};
//!
//! let deps = Registry::new();
//! deps.register(Dependency::builder("fraud").workers(1).build()?)?;
//! let text = metrics::encode_text(&deps);
//! assert!(text.contains(r#"watertight_calls_total{dependency="fraud",kind="not_permitted"} 0"#));
//! // Serve it as `Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8`.
//! assert!(metrics::CONTENT_TYPE.starts_with("application/openmetrics-text"));
//! # Ok::<(), watertight::ConfigError>(())
//! ```

// The caches' families (feature `cache`).
#[cfg(feature = "cache")]
mod caches;

/// The `prometheus-client` crate this exporter is built on, so that the
/// application's own metrics can use the same version.
pub use prometheus_client;
/// `prometheus-client`'s registry, named apart from this crate's
/// [`Registry`] of dependencies.
pub use prometheus_client::registry::Registry as PrometheusRegistry;

/// The `Content-Type` of what [`encode_text`] produces (OpenMetrics text
/// 1.0.0). Prometheus also accepts it as the classic text format's successor.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

use std::time::Duration;

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;

use crate::breaker::State;
use crate::dependency::{Dependency, DependencySnapshot};
use crate::histogram::HistogramSnapshot;
use crate::registry::{Registry, RequestPoolGauges};

/// A `prometheus-client` collector that reads a [`Registry`] on every
/// scrape, so dependencies registered later appear without more wiring.
///
/// Every rate is a percentage (0 to 100), as everywhere in this crate, and
/// the `kind` label of `watertight_calls_total` is an [`Outcome`](crate::Outcome)'s
/// label, the word [`Rejection::as_str`](crate::Rejection::as_str) and
/// [`CallCounts`](crate::CallCounts) use too.
///
/// Metrics, each labelled `dependency="<name>"`:
///
/// | name | type | extra label | meaning |
/// |---|---|---|---|
/// | `watertight_state` | gauge | `state` | 1 for the breaker's state, 0 for the others |
/// | `watertight_calls_total` | counter | `kind` | attempts by outcome; their sum is every attempt |
/// | `watertight_shadow_refusals_total` | counter | `policy`, `reason` | calls a policy in shadow would have refused, and let through ([`Policy`](crate::shadow::Policy)'s labels, the reason its [`Rejection`](crate::Rejection)'s; the request pool's reserve has no `dependency` label) |
/// | `watertight_slow_calls_total` | counter | | attempts slower than `slow_call_duration` |
/// | `watertight_retries_total` | counter | | attempts that were retries |
/// | `watertight_expired_total` | counter | | jobs the pool dropped unstarted |
/// | `watertight_failure_rate_percent` | gauge | | breaker failure rate, 0 to 100 (absent until computed) |
/// | `watertight_slow_call_rate_percent` | gauge | | breaker slow-call rate, 0 to 100 (absent until computed) |
/// | `watertight_pool_workers` | gauge | | worker threads |
/// | `watertight_pool_busy` | gauge | | workers running a job |
/// | `watertight_pool_queued` | gauge | | jobs waiting in the queue |
/// | `watertight_pool_queue_capacity` | gauge | | the queue's bound |
/// | `watertight_pool_abandoned` | gauge | | running jobs whose caller gave up |
///
/// And, for every cache registered ([`Registry::register_cache`], feature
/// `cache`), each labelled `cache="<name>"`:
///
/// | name | type | meaning |
/// |---|---|---|
/// | `watertight_cache_hits_total` | counter | lookups answered with a fresh value, no call |
/// | `watertight_cache_misses_total` | counter | lookups that found none: each started or joined a shared call |
/// | `watertight_cache_stale_total` | counter | misses answered with the last good value |
/// | `watertight_cache_coalesced_total` | counter | misses that joined a shared call in flight |
/// | `watertight_cache_refused_total` | counter | misses refused at once: `max_waiting` callers were waiting |
/// | `watertight_cache_refreshes_total` | counter | refreshes started ahead of expiry (`refresh_after`) |
/// | `watertight_cache_evictions_total` | counter | entries pushed out to make room (a value replaced for its key is not) |
/// | `watertight_cache_entries` | gauge | entries kept now |
/// | `watertight_cache_in_flight` | gauge | shared calls in flight now |
/// | `watertight_cache_waiting` | gauge | callers waiting on them now |
///
/// And, while a server given the registry runs
/// ([`Registry::request_pool`]), two gauges without labels:
///
/// | name | type | meaning |
/// |---|---|---|
/// | `watertight_request_pool_threads` | gauge | threads of the shared request pool |
/// | `watertight_request_pool_busy` | gauge | request threads handling a request now |
/// | `watertight_request_pool_refused_total` | counter | ordinary requests refused, labelled `reason` (`full`, `max_wait`, `budget`, `stuck`) |
///
/// Durations are in seconds, each the decimal of its exact nanoseconds
/// (a bucket bound of 1.6384 s reads `le="1.6384"`).
///
/// Labels carry only dependency names and fixed words, never request data.
#[derive(Debug, Clone)]
pub struct Collector {
    registry: Registry,
}

impl Collector {
    /// A collector over `registry` (a handle: later registrations show).
    pub fn new(registry: &Registry) -> Self {
        Collector { registry: registry.clone() }
    }
}

/// Registers a [`Collector`] over the dependencies of `registry` with a
/// `prometheus-client` registry, beside the application's own metrics.
///
/// ```
/// use watertight::metrics::{self, PrometheusRegistry};
///
/// let deps = watertight::Registry::new();
/// let mut prom = PrometheusRegistry::default();
/// metrics::register(&deps, &mut prom);
/// ```
pub fn register(registry: &Registry, prometheus: &mut PrometheusRegistry) {
    prometheus.register_collector(Box::new(Collector::new(registry)));
}

/// The OpenMetrics text of `registry`'s metrics alone (what a `/metrics`
/// route serving only them would answer), ending in `# EOF`. Serve it with
/// [`CONTENT_TYPE`].
pub fn encode_text(registry: &Registry) -> String {
    let mut prom = PrometheusRegistry::default();
    register(registry, &mut prom);
    let mut out = String::new();
    // Writing to a String cannot fail, and our collector returns no errors of its own.
    prometheus_client::encoding::text::encode(&mut out, &prom)
        .expect("encoding metrics into a String cannot fail");
    out
}

type Res = Result<(), std::fmt::Error>;

/// `d` in seconds: the `f64` nearest to its exact decimal (`nanos / 10^9`,
/// one correctly rounded division), so that the shortest decimal that
/// round-trips, which the encoder prints, is that decimal itself (`1.6384`).
/// `Duration::as_secs_f64` adds the fraction to the whole seconds, a second
/// rounding that can land on a neighbour (`1.6383999999999999`).
fn seconds(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e9
}

/// A request pool's gauges and refusals, and its reserved share's three
/// gauges when it keeps one: what [`Collector`] exports for a registry that
/// carries them, and what the gauges export as a collector of their own.
fn encode_request_pool(enc: &mut DescriptorEncoder<'_>, pool: &RequestPoolGauges) -> Res {
    gauge(enc, "watertight_request_pool_threads", "Threads of the shared request pool.", pool.threads())?;
    gauge(enc, "watertight_request_pool_busy", "Request threads handling a request now.", pool.busy())?;
    let mut metric = enc.encode_descriptor(
        "watertight_request_pool_refused",
        "Ordinary requests the request pool refused, by reason.",
        None,
        MetricType::Counter,
    )?;
    for (reason, n) in pool.refused() {
        counter(&mut metric, &[("reason", reason)], n)?;
    }
    if let Some((threads, busy, waiting)) = pool.reserve() {
        let reserved = "Request threads kept for the reserved routes.";
        gauge(enc, "watertight_request_pool_reserved_threads", reserved, threads)?;
        gauge(enc, "watertight_request_pool_reserved_busy", "Reserved requests being handled now.", busy)?;
        let help = "Ordinary requests waiting for an ordinary thread.";
        gauge(enc, "watertight_request_pool_waiting", help, waiting)?;
    }
    Ok(())
}

/// One gauge without labels.
fn gauge(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: usize) -> Res {
    encoder.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&value)
}

/// With the `prometheus` feature, a request pool's gauges are a
/// `prometheus-client` collector of their own, for a `prometheus-client`
/// registry built by hand: `prometheus.register_collector(Box::new(pool.gauges()))`
/// (from [`RequestPool::gauges`](crate::server::RequestPool::gauges)). A pool
/// whose config names a [`Registry`] needs none of that: [`register`] over
/// that registry exports the same families (register one or the other, not
/// both, or each is exported twice).
impl prometheus_client::collector::Collector for RequestPoolGauges {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Res {
        encode_request_pool(&mut encoder, self)
    }
}

/// A gauge family with one sample per dependency; `value` returning `None`
/// leaves that dependency's sample out (a rate not yet computed).
fn gauges<V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    snaps: &[DependencySnapshot],
    value: impl Fn(&DependencySnapshot) -> Option<V>,
) -> Res {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for snap in snaps {
        if let Some(v) = value(snap) {
            let labels: &[(&str, &str)] = &[("dependency", snap.name.as_str())];
            metric.encode_family(&labels)?.encode_gauge(&v)?;
        }
    }
    Ok(())
}

/// A counter family with one sample per dependency.
fn counters<V: EncodeCounterValue>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    snaps: &[DependencySnapshot],
    value: impl Fn(&DependencySnapshot) -> V,
) -> Res {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for snap in snaps {
        let labels: &[(&str, &str)] = &[("dependency", snap.name.as_str())];
        counter(&mut metric, labels, value(snap))?;
    }
    Ok(())
}

/// A histogram family with one sample per dependency, in seconds: every
/// fourth bound of [`LatencyHistogram`](crate::histogram::LatencyHistogram)
/// (doublings from 100 us to 26.2 s, then 30 s and `+Inf`), counted since the
/// dependency was built.
fn histograms(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    deps: &[Dependency],
    snapshot: impl Fn(&Dependency) -> Option<HistogramSnapshot>,
) -> Res {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    // A dependency in caller-thread mode has no queue wait or run of its own.
    for (dep, snap) in deps.iter().filter_map(|d| snapshot(d).map(|s| (d, s))) {
        let mut below = 0;
        let buckets: Vec<(f64, u64)> = snap
            .cumulative(4)
            .into_iter()
            .map(|(bound, cumulative)| {
                let in_bucket = cumulative.saturating_sub(below);
                below = cumulative;
                (bound.map_or(f64::MAX, seconds), in_bucket)
            })
            .collect();
        let labels: &[(&str, &str)] = &[("dependency", dep.name())];
        metric.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
            seconds(snap.sum()),
            snap.count(),
            &buckets,
            None,
        )?;
    }
    Ok(())
}

fn counter<V: EncodeCounterValue>(metric: &mut MetricEncoder<'_>, labels: &[(&str, &str)], v: V) -> Res {
    metric.encode_family(&labels)?.encode_counter::<NoLabelSet, V, u64>(&v, None)
}

/// Every state, for the enum-like `watertight_state` gauge.
const STATES: [State; 6] =
    [State::Closed, State::Open, State::HalfOpen, State::Disabled, State::MetricsOnly, State::ForcedOpen];

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Res {
        // One snapshot per dependency per scrape (see `Registry::snapshot`),
        // so every family below shows the same moment.
        let deps = self.registry.dependencies();
        let snaps: Vec<DependencySnapshot> = deps.iter().map(Dependency::snapshot).collect();
        let enc = &mut encoder;

        #[cfg(feature = "cache")]
        self::caches::encode(enc, &self.registry.cache_snapshots())?;

        if let Some(pool) = self.registry.request_pool() {
            encode_request_pool(enc, &pool)?;
        }

        histograms(
            enc,
            "watertight_queue_wait_seconds",
            "Time from submission to a worker taking the job.",
            &deps,
            |d| d.pool().map(|p| p.queue_wait_histogram().snapshot()),
        )?;
        histograms(enc, "watertight_run_seconds", "Time a job ran on its worker.", &deps, |d| {
            d.pool().map(|p| p.run_histogram().snapshot())
        })?;
        histograms(
            enc,
            "watertight_call_seconds",
            "Attempts that reached the pool, as their callers saw them (queue wait included).",
            &deps,
            |d| Some(d.call_histogram().snapshot()),
        )?;
        gauges(
            enc,
            "watertight_mean_service_seconds",
            "Recent mean run time of a job (the admission estimate's).",
            &snaps,
            |s| s.mean_service_time.map(seconds),
        )?;
        gauges(
            enc,
            "watertight_estimated_wait_seconds",
            "What a call made now would wait for a worker; absent while nothing is queued.",
            &snaps,
            |s| s.estimated_wait.map(seconds),
        )?;
        gauges(
            enc,
            "watertight_limit",
            "The adaptive concurrency limit now; absent without one.",
            &snaps,
            |s| s.limit,
        )?;

        {
            let mut metric = enc.encode_descriptor(
                "watertight_state",
                "Circuit breaker state: 1 for the current state, 0 for the others.",
                None,
                MetricType::Gauge,
            )?;
            for snap in &snaps {
                for state in STATES {
                    let labels: &[(&str, &str)] =
                        &[("dependency", snap.name.as_str()), ("state", state.as_str())];
                    metric.encode_family(&labels)?.encode_gauge(&u32::from(snap.state == state))?;
                }
            }
        }
        {
            let mut metric = enc.encode_descriptor(
                "watertight_calls",
                "Attempts by outcome; the outcomes add up to every attempt made.",
                None,
                MetricType::Counter,
            )?;
            for snap in &snaps {
                for (outcome, n) in snap.calls.by_outcome() {
                    let labels: &[(&str, &str)] =
                        &[("dependency", snap.name.as_str()), ("kind", outcome.as_str())];
                    counter(&mut metric, labels, n)?;
                }
            }
        }
        {
            let mut metric = enc.encode_descriptor(
                "watertight_shadow_refusals",
                "Calls a policy in shadow would have refused, and let through.",
                None,
                MetricType::Counter,
            )?;
            for snap in &snaps {
                for (policy, n) in snap.shadow_refused.iter() {
                    let labels: &[(&str, &str)] = &[
                        ("dependency", snap.name.as_str()),
                        ("policy", policy.as_str()),
                        ("reason", policy.reason()),
                    ];
                    counter(&mut metric, labels, n)?;
                }
            }
            // The request pool's reserve, which belongs to no dependency.
            if let Some(pool) = self.registry.request_pool().filter(|p| p.reserve().is_some()) {
                let labels: &[(&str, &str)] = &[("policy", "reserve"), ("reason", "server_busy")];
                counter(&mut metric, labels, pool.shadow_refused())?;
            }
        }
        counters(
            enc,
            "watertight_slow_calls",
            "Recorded attempts slower than the breaker's slow_call_duration.",
            &snaps,
            |s| s.calls.slow,
        )?;
        counters(enc, "watertight_retries", "Attempts that were retries.", &snaps, |s| s.calls.retried)?;
        counters(enc, "watertight_hedges", "Attempts that were hedges.", &snaps, |s| s.calls.hedged)?;
        counters(
            enc,
            "watertight_hedges_won",
            "Hedged calls answered by a hedge rather than their first attempt.",
            &snaps,
            |s| s.calls.hedges_won,
        )?;
        counters(
            enc,
            "watertight_hedge_lost_seconds",
            "Worker time spent on hedged attempts still running when another won, in seconds.",
            &snaps,
            |s| s.hedge_lost_time.as_secs_f64(),
        )?;
        counters(
            enc,
            "watertight_expired",
            "Jobs dropped unstarted: deadline passed in the queue, caller gone, or shutdown.",
            &snaps,
            |s| s.calls.expired,
        )?;
        gauges(
            enc,
            "watertight_failure_rate_percent",
            "Breaker failure rate over its window, in percent; absent until minimum_calls.",
            &snaps,
            |s| s.failure_rate,
        )?;
        gauges(
            enc,
            "watertight_slow_call_rate_percent",
            "Breaker slow-call rate over its window, in percent; absent until minimum_calls.",
            &snaps,
            |s| s.slow_call_rate,
        )?;
        gauges(enc, "watertight_pool_workers", "Worker threads.", &snaps, |s| Some(s.pool.workers))?;
        gauges(enc, "watertight_pool_busy", "Workers running a job.", &snaps, |s| Some(s.pool.busy))?;
        gauges(enc, "watertight_pool_queued", "Jobs waiting in the queue.", &snaps, |s| Some(s.pool.queued))?;
        gauges(enc, "watertight_pool_queue_capacity", "The queue's bound.", &snaps, |s| {
            Some(s.queue_capacity)
        })?;
        gauges(
            enc,
            "watertight_pool_abandoned",
            "Running jobs whose caller stopped waiting.",
            &snaps,
            |s| Some(s.pool.abandoned),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// The exact decimal of `d` in seconds, without trailing zeros.
    fn exact_decimal(d: Duration) -> String {
        let nanos = d.as_nanos();
        let text = format!("{}.{:09}", nanos / 1_000_000_000, nanos % 1_000_000_000);
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    }

    #[test]
    fn every_bucket_bound_is_the_nearest_f64_to_its_exact_decimal() {
        let bounds =
            crate::histogram::LatencyHistogram::new(Duration::from_secs(30)).snapshot().cumulative(1);
        assert_eq!(bounds.len(), crate::histogram::BOUNDS + 1);
        for (bound, _) in bounds.into_iter().filter_map(|(b, n)| b.map(|b| (b, n))) {
            let exact = exact_decimal(bound);
            let secs = seconds(bound);
            assert_eq!(secs, exact.parse::<f64>().unwrap(), "{bound:?}");
            // The shortest decimal that round-trips is then the exact one.
            assert_eq!(secs.to_string(), exact, "{bound:?}");
        }
        // `as_secs_f64` rounds twice, and lands on a neighbour of 1.6384 s.
        assert_eq!(Duration::from_nanos(1_638_400_000).as_secs_f64().to_string(), "1.6383999999999999");
    }

    /// The room's one vocabulary of refusals is the metric's: each reason a
    /// room refuses with, counted once, is the `reason` label of one line.
    #[test]
    fn each_room_refusal_is_its_metric_label() {
        let deps = Registry::new();
        let room = crate::room::Room::new(2, Duration::ZERO).unwrap();
        let gauges = RequestPoolGauges::new(2, room.occupancy(), None);
        for why in crate::room::NoSeat::ALL {
            gauges.counts.refuse(why);
        }
        deps.attach_request_pool(gauges).unwrap();
        let text = encode_text(&deps);
        let labels: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("watertight_request_pool_refused_total{reason=\""))
            .filter_map(|l| l.strip_suffix("\"} 1"))
            .collect();
        assert_eq!(labels, ["full", "max_wait", "budget", "stuck"], "{text}");
        assert_eq!(labels, crate::registry::REFUSAL_REASONS);
    }

    #[test]
    fn a_registry_carrying_request_pool_gauges_exports_them() {
        let deps = Registry::new();
        assert!(!encode_text(&deps).contains("watertight_request_pool"), "none before a pool is attached");
        let room = crate::room::Room::new(8, Duration::ZERO).unwrap();
        let far = Instant::now() + Duration::from_secs(60);
        let _held: Vec<_> = (0..3).map(|_| room.acquire(far).unwrap()).collect();
        let gauges = RequestPoolGauges::new(8, room.occupancy(), None);
        deps.attach_request_pool(gauges.clone()).unwrap();
        let text = encode_text(&deps);
        assert!(text.contains("# TYPE watertight_request_pool_threads gauge\n"), "{text}");
        assert!(text.contains("\nwatertight_request_pool_threads 8\n"), "{text}");
        assert!(text.contains("\nwatertight_request_pool_busy 3\n"), "{text}");
        assert!(!text.contains("reserved"), "no reserve, no reserve gauges: {text}");
        // A second pool is refused while the first is attached, and detaching
        // someone else's gauges leaves them.
        let other =
            RequestPoolGauges::new(4, crate::room::Room::new(4, Duration::ZERO).unwrap().occupancy(), None);
        assert_eq!(deps.attach_request_pool(other.clone()).unwrap_err().threads(), 8);
        deps.detach_request_pool(&other);
        assert_eq!(deps.request_pool().map(|g| g.busy()), Some(3));
        deps.detach_request_pool(&gauges);
        assert!(deps.request_pool().is_none());
        assert!(!encode_text(&deps).contains("watertight_request_pool"), "gone once detached");
        // With a reserved share: its three gauges too.
        let shared = crate::room::Room::with_shares(8, Duration::ZERO, &[2, 0]).unwrap();
        let _reserved = shared.acquire_as(1, far).unwrap();
        let reserved = RequestPoolGauges::new(8, shared.occupancy(), Some(2));
        deps.attach_request_pool(reserved).unwrap();
        let text = encode_text(&deps);
        assert!(text.contains("\nwatertight_request_pool_reserved_threads 2\n"), "{text}");
        assert!(text.contains("\nwatertight_request_pool_reserved_busy 1\n"), "{text}");
        assert!(text.contains("\nwatertight_request_pool_waiting 0\n"), "{text}");
    }
}
