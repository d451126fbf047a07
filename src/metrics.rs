//! What a dependency has done: [`DependencySnapshot`] and [`CallCounts`], and
//! (feature `prometheus`) a `prometheus-client` collector over a
//! [`Registry`](crate::Registry).
//!
//! # Accounting
//!
//! Every attempt a [`Dependency`](crate::Dependency) makes ends in exactly one
//! *outcome kind*, so
//!
//! ```text
//! attempts = successful + failed + ignored
//!          + not_permitted + queue_full + rejected_deadline + shutting_down
//!          + timed_out + panicked
//! ```
//!
//! ([`CallCounts::total`]). A call through `call_retry` makes one attempt per
//! try, and each is counted. The other three counters overlap the outcome
//! kinds instead of adding to them:
//!
//! - `slow`: attempts recorded on the breaker (successful, failed, timed out,
//!   panicked) that took longer than the breaker's `slow_call_duration`;
//! - `retried`: attempts that were retries (at most `attempts - calls`);
//! - `expired`: jobs the pool dropped unstarted, because their deadline passed
//!   in the queue, their caller had gone, or shutdown discarded them. Their
//!   callers already counted them as `timed_out` or `shutting_down`. It is
//!   read from the dependency's own pool.
//!
//! The counters are the dependency's own relaxed atomics, not the breaker's
//! (a disabled breaker records nothing); each is monotonic. A snapshot reads
//! them one by one without a lock, so one taken while calls are in flight may
//! be a few calls apart between fields; one taken at rest adds up exactly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::breaker::State;
use crate::pool::PoolStats;

/// A point-in-time view of one dependency.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DependencySnapshot {
    /// The dependency's name.
    pub name: String,
    /// The breaker's state.
    pub state: State,
    /// The breaker's failure rate in percent, `None` until its window holds
    /// `minimum_calls` (and always `None` when disabled).
    pub failure_rate: Option<f64>,
    /// The breaker's slow-call rate in percent, `None` like `failure_rate`.
    pub slow_call_rate: Option<f64>,
    /// Calls by outcome kind (see the [module docs](self)).
    pub calls: CallCounts,
    /// The worker pool: workers, busy, queued, abandoned, ...
    pub pool: PoolStats,
    /// The bounded queue's capacity.
    pub queue_capacity: usize,
    /// The per-attempt deadline.
    pub deadline: Duration,
    /// The recent mean time a job runs on a worker (an exponentially weighted
    /// moving average), `None` before the first job finished. Deadline-aware
    /// admission estimates queue waits from it.
    pub mean_service_time: Option<Duration>,
}

/// Calls by outcome kind, and the overlapping `slow`, `retried` and `expired`
/// counts (see the [module docs](self) for how they add up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallCounts {
    /// The job returned an outcome its classifier called a success.
    pub successful: u64,
    /// The job returned an outcome its classifier called a failure.
    pub failed: u64,
    /// The job returned an outcome its classifier ignored (a 4xx).
    pub ignored: u64,
    /// Recorded attempts slower than the breaker's `slow_call_duration`
    /// (overlaps the recorded kinds).
    pub slow: u64,
    /// Rejected because the breaker was open.
    pub not_permitted: u64,
    /// Rejected because the workers and the queue were full.
    pub queue_full: u64,
    /// Rejected because the queued work would outlast the deadline.
    pub rejected_deadline: u64,
    /// No answer within the deadline.
    pub timed_out: u64,
    /// Jobs the pool dropped unstarted: deadline passed in the queue, caller
    /// gone, or discarded by shutdown (overlaps `timed_out` and
    /// `shutting_down`; read from the pool).
    pub expired: u64,
    /// The job panicked.
    pub panicked: u64,
    /// Attempts that were retries (overlaps every kind).
    pub retried: u64,
    /// Rejected, or answered, with `ShuttingDown`.
    pub shutting_down: u64,
}

impl CallCounts {
    /// Attempts made: the sum of the outcome kinds (every kind except `slow`,
    /// `expired` and `retried`, which overlap them).
    pub fn total(&self) -> u64 {
        self.kinds().iter().map(|(_, n)| n).sum()
    }

    /// The outcome kinds with their stable names, the `kind` label of
    /// `watertight_calls_total`. Their sum is [`total`](Self::total).
    pub fn kinds(&self) -> [(&'static str, u64); 9] {
        [
            ("successful", self.successful),
            ("failed", self.failed),
            ("ignored", self.ignored),
            ("not_permitted", self.not_permitted),
            ("queue_full", self.queue_full),
            ("rejected_deadline", self.rejected_deadline),
            ("timed_out", self.timed_out),
            ("panicked", self.panicked),
            ("shutting_down", self.shutting_down),
        ]
    }
}

/// The outcome kind of one attempt: exactly one per attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Successful,
    Failed,
    Ignored,
    NotPermitted,
    QueueFull,
    RejectedDeadline,
    TimedOut,
    Panicked,
    ShuttingDown,
}

/// The live counters behind [`CallCounts`]. Each is an independent monotonic
/// count, so `Relaxed` is enough: no other memory is published through them.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    outcomes: [AtomicU64; 9],
    slow: AtomicU64,
    retried: AtomicU64,
}

impl Counters {
    pub(crate) fn outcome(&self, o: Outcome) {
        self.outcomes[o as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn slow(&self) {
        self.slow.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn retried(&self) {
        self.retried.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn load(&self, expired: u64) -> CallCounts {
        let o = |k: Outcome| self.outcomes[k as usize].load(Ordering::Relaxed);
        CallCounts {
            successful: o(Outcome::Successful),
            failed: o(Outcome::Failed),
            ignored: o(Outcome::Ignored),
            slow: self.slow.load(Ordering::Relaxed),
            not_permitted: o(Outcome::NotPermitted),
            queue_full: o(Outcome::QueueFull),
            rejected_deadline: o(Outcome::RejectedDeadline),
            timed_out: o(Outcome::TimedOut),
            expired,
            panicked: o(Outcome::Panicked),
            retried: self.retried.load(Ordering::Relaxed),
            shutting_down: o(Outcome::ShuttingDown),
        }
    }
}

#[cfg(feature = "prometheus")]
pub use self::prom::{Collector, encode_text, register_prometheus};

#[cfg(feature = "prometheus")]
mod prom {
    use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, MetricEncoder, NoLabelSet};
    use prometheus_client::metrics::MetricType;

    use super::DependencySnapshot;
    use crate::breaker::State;
    use crate::registry::Registry;

    /// A `prometheus-client` collector that reads a [`Registry`] on every
    /// scrape, so dependencies registered later appear without more wiring.
    ///
    /// Metrics, each labelled `dependency="<name>"`:
    ///
    /// | name | type | extra label | meaning |
    /// |---|---|---|---|
    /// | `watertight_state` | gauge | `state` | 1 for the breaker's state, 0 for the others |
    /// | `watertight_calls_total` | counter | `kind` | attempts by outcome kind; their sum is every attempt |
    /// | `watertight_slow_calls_total` | counter | | attempts slower than `slow_call_duration` |
    /// | `watertight_retries_total` | counter | | attempts that were retries |
    /// | `watertight_expired_total` | counter | | jobs the pool dropped unstarted |
    /// | `watertight_failure_ratio` | gauge | | breaker failure rate, 0 to 1 (absent until computed) |
    /// | `watertight_slow_call_ratio` | gauge | | breaker slow-call rate, 0 to 1 (absent until computed) |
    /// | `watertight_pool_workers` | gauge | | worker threads |
    /// | `watertight_pool_busy` | gauge | | workers running a job |
    /// | `watertight_pool_queued` | gauge | | jobs waiting in the queue |
    /// | `watertight_pool_queue_capacity` | gauge | | the queue's bound |
    /// | `watertight_pool_abandoned` | gauge | | running jobs whose caller gave up |
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

    /// Registers a [`Collector`] over `registry` with a `prometheus-client`
    /// registry.
    ///
    /// ```
    /// let deps = watertight::Registry::new();
    /// let mut prom = prometheus_client::registry::Registry::default();
    /// watertight::metrics::register_prometheus(&deps, &mut prom);
    /// ```
    pub fn register_prometheus(registry: &Registry, prometheus: &mut prometheus_client::registry::Registry) {
        prometheus.register_collector(Box::new(Collector::new(registry)));
    }

    /// The OpenMetrics text of `registry`'s metrics alone (what a `/metrics`
    /// route serving only them would answer), ending in `# EOF`.
    pub fn encode_text(registry: &Registry) -> String {
        let mut prom = prometheus_client::registry::Registry::default();
        register_prometheus(registry, &mut prom);
        let mut out = String::new();
        // Writing to a String cannot fail, and our collector returns no errors of its own.
        prometheus_client::encoding::text::encode(&mut out, &prom)
            .expect("encoding metrics into a String cannot fail");
        out
    }

    type Res = Result<(), std::fmt::Error>;

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
    fn counters(
        encoder: &mut DescriptorEncoder<'_>,
        name: &str,
        help: &str,
        snaps: &[DependencySnapshot],
        value: impl Fn(&DependencySnapshot) -> u64,
    ) -> Res {
        let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for snap in snaps {
            let labels: &[(&str, &str)] = &[("dependency", snap.name.as_str())];
            counter(&mut metric, labels, value(snap))?;
        }
        Ok(())
    }

    fn counter(metric: &mut MetricEncoder<'_>, labels: &[(&str, &str)], v: u64) -> Res {
        metric.encode_family(&labels)?.encode_counter::<NoLabelSet, u64, u64>(&v, None)
    }

    /// Every state, for the enum-like `watertight_state` gauge.
    const STATES: [State; 6] =
        [State::Closed, State::Open, State::HalfOpen, State::Disabled, State::MetricsOnly, State::ForcedOpen];

    impl prometheus_client::collector::Collector for Collector {
        fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Res {
            // One snapshot per dependency per scrape (see `Registry::snapshot`),
            // so every family below shows the same moment.
            let snaps = self.registry.snapshot();
            let enc = &mut encoder;

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
                    "Attempts by outcome kind; the kinds add up to every attempt made.",
                    None,
                    MetricType::Counter,
                )?;
                for snap in &snaps {
                    for (kind, n) in snap.calls.kinds() {
                        counter(&mut metric, &[("dependency", snap.name.as_str()), ("kind", kind)], n)?;
                    }
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
            counters(
                enc,
                "watertight_expired",
                "Jobs dropped unstarted: deadline passed in the queue, caller gone, or shutdown.",
                &snaps,
                |s| s.calls.expired,
            )?;
            gauges(
                enc,
                "watertight_failure_ratio",
                "Breaker failure rate over its window, 0 to 1; absent until minimum_calls.",
                &snaps,
                |s| s.failure_rate.map(|r| r / 100.0),
            )?;
            gauges(
                enc,
                "watertight_slow_call_ratio",
                "Breaker slow-call rate over its window, 0 to 1; absent until minimum_calls.",
                &snaps,
                |s| s.slow_call_rate.map(|r| r / 100.0),
            )?;
            gauges(enc, "watertight_pool_workers", "Worker threads.", &snaps, |s| Some(s.pool.workers))?;
            gauges(enc, "watertight_pool_busy", "Workers running a job.", &snaps, |s| Some(s.pool.busy))?;
            gauges(enc, "watertight_pool_queued", "Jobs waiting in the queue.", &snaps, |s| {
                Some(s.pool.queued)
            })?;
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
}
