//! A dependency's own bookkeeping: the live [`Counters`] on the call path, and
//! the plain snapshots read from them, [`CallCounts`] and [`DependencySnapshot`].
//!
//! The accounting rules are on [`CallCounts`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::breaker::State;
use crate::error::Outcome;
use crate::histogram::HistogramSnapshot;
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
    /// Attempts by outcome (see [`CallCounts`] for how they add up).
    pub calls: CallCounts,
    /// The worker pool: workers, busy, queued, abandoned, ...
    pub pool: PoolStats,
    /// The bounded queue's capacity.
    pub queue_capacity: usize,
    /// The per-attempt timeout.
    pub timeout: Duration,
    /// The recent mean time a job runs on a worker
    /// ([`Pool::mean_service_time`](crate::pool::Pool::mean_service_time)).
    pub mean_service_time: Option<Duration>,
    /// What a call made now would wait for a worker
    /// ([`Pool::estimated_wait`](crate::pool::Pool::estimated_wait)).
    pub estimated_wait: Option<Duration>,
    /// The adaptive concurrency limit now, if the dependency has one.
    pub limit: Option<usize>,
    /// Latency percentiles over the recent window (30 to 60 s).
    pub latency: DependencyLatency,
    /// Worker time spent on hedged attempts that were still running when
    /// another attempt of their call won (the cost of hedging).
    pub hedge_lost_time: Duration,
    /// What each policy in shadow would have refused: calls let through,
    /// counted apart from [`calls`](Self::calls), where each has its own outcome.
    pub shadow_refused: crate::shadow::ShadowCounts,
}

/// A median and a 99th percentile, `None` without samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Percentiles {
    /// The median.
    pub p50: Option<Duration>,
    /// The 99th percentile.
    pub p99: Option<Duration>,
}

impl Percentiles {
    /// The median and 99th percentile of a histogram snapshot.
    pub fn of(snapshot: &HistogramSnapshot) -> Percentiles {
        Percentiles { p50: snapshot.quantile(0.5), p99: snapshot.quantile(0.99) }
    }
}

/// A dependency's recent latencies, from its three histograms (each within
/// about 10 % of the true value; see [`histogram`](crate::histogram)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DependencyLatency {
    /// From submission to a worker taking the job.
    pub queue_wait: Percentiles,
    /// The job's run on its worker.
    pub run: Percentiles,
    /// The whole attempt as its caller saw it, queue wait included, for
    /// attempts that reached the pool (rejections are not in it).
    pub call: Percentiles,
}

/// Attempts by [`Outcome`], and the overlapping `slow`, `retried` and
/// `expired` counts. Each field is named like its outcome's label.
///
/// # Accounting
///
/// Every attempt a [`Dependency`](crate::Dependency) makes ends in exactly one
/// [`Outcome`], so
///
/// ```text
/// attempts = successful + failed + ignored + timed_out + panicked
///          + not_permitted + queue_full + deadline_unmeetable + shutting_down
///          + limit_exceeded + rate_limited + shed + throttled
/// ```
///
/// ([`CallCounts::total`]); a retried call counts each attempt. `slow`,
/// `retried`, `hedged` and `expired` overlap the outcomes instead of adding
/// to them.
///
/// The counters are the dependency's own relaxed atomics, not the breaker's
/// (a disabled breaker records nothing); each is monotonic. A snapshot reads
/// them one by one without a lock, so one taken while calls are in flight may
/// be a few calls apart between fields; one taken at rest adds up exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallCounts {
    /// [`Outcome::Successful`].
    pub successful: u64,
    /// [`Outcome::Failed`].
    pub failed: u64,
    /// [`Outcome::Ignored`].
    pub ignored: u64,
    /// [`Outcome::TimedOut`].
    pub timed_out: u64,
    /// [`Outcome::Panicked`].
    pub panicked: u64,
    /// [`Outcome::NotPermitted`]: rejected by the breaker.
    pub not_permitted: u64,
    /// [`Outcome::QueueFull`].
    pub queue_full: u64,
    /// [`Outcome::DeadlineUnmeetable`].
    pub deadline_unmeetable: u64,
    /// [`Outcome::ShuttingDown`].
    pub shutting_down: u64,
    /// [`Outcome::LimitExceeded`].
    pub limit_exceeded: u64,
    /// [`Outcome::RateLimited`].
    pub rate_limited: u64,
    /// [`Outcome::Shed`].
    pub shed: u64,
    /// [`Outcome::Throttled`].
    pub throttled: u64,
    /// Recorded attempts slower than the breaker's `slow_call_duration`
    /// (overlaps the recorded outcomes).
    pub slow: u64,
    /// Attempts that were retries (overlaps every outcome).
    pub retried: u64,
    /// Attempts that were hedges ([`CallBuilder::hedge`](crate::CallBuilder::hedge); overlaps every outcome).
    pub hedged: u64,
    /// Hedged calls answered by a hedge rather than their first attempt.
    pub hedges_won: u64,
    /// Jobs the pool dropped unstarted: deadline passed in the queue, caller
    /// gone, or discarded by shutdown (overlaps `timed_out` and
    /// `shutting_down`; read from the pool).
    pub expired: u64,
}

impl CallCounts {
    /// Attempts made: the sum over every [`Outcome`] (see the type's docs).
    pub fn total(&self) -> u64 {
        Outcome::ALL.iter().map(|o| self.get(*o)).sum()
    }

    /// The count of one outcome.
    pub fn get(&self, outcome: Outcome) -> u64 {
        match outcome {
            Outcome::Successful => self.successful,
            Outcome::Failed => self.failed,
            Outcome::Ignored => self.ignored,
            Outcome::TimedOut => self.timed_out,
            Outcome::Panicked => self.panicked,
            Outcome::NotPermitted => self.not_permitted,
            Outcome::QueueFull => self.queue_full,
            Outcome::DeadlineUnmeetable => self.deadline_unmeetable,
            Outcome::ShuttingDown => self.shutting_down,
            Outcome::LimitExceeded => self.limit_exceeded,
            Outcome::RateLimited => self.rate_limited,
            Outcome::Shed => self.shed,
            Outcome::Throttled => self.throttled,
        }
    }

    /// What was counted after `earlier`, an older snapshot of the same
    /// counters: field by field, `self - earlier` (zero where a count went
    /// down, which the dependency's monotonic counters never do).
    pub fn since(&self, earlier: &CallCounts) -> CallCounts {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        CallCounts {
            successful: d(self.successful, earlier.successful),
            failed: d(self.failed, earlier.failed),
            ignored: d(self.ignored, earlier.ignored),
            timed_out: d(self.timed_out, earlier.timed_out),
            panicked: d(self.panicked, earlier.panicked),
            not_permitted: d(self.not_permitted, earlier.not_permitted),
            queue_full: d(self.queue_full, earlier.queue_full),
            deadline_unmeetable: d(self.deadline_unmeetable, earlier.deadline_unmeetable),
            shutting_down: d(self.shutting_down, earlier.shutting_down),
            limit_exceeded: d(self.limit_exceeded, earlier.limit_exceeded),
            rate_limited: d(self.rate_limited, earlier.rate_limited),
            shed: d(self.shed, earlier.shed),
            throttled: d(self.throttled, earlier.throttled),
            slow: d(self.slow, earlier.slow),
            retried: d(self.retried, earlier.retried),
            hedged: d(self.hedged, earlier.hedged),
            hedges_won: d(self.hedges_won, earlier.hedges_won),
            expired: d(self.expired, earlier.expired),
        }
    }

    /// Every outcome with its count, in [`Outcome::ALL`]'s order: the `kind`
    /// samples of `watertight_calls_total`. Their sum is [`total`](Self::total).
    pub fn by_outcome(&self) -> [(Outcome, u64); 13] {
        Outcome::ALL.map(|o| (o, self.get(o)))
    }
}

/// The live counters behind [`CallCounts`]. Each is an independent monotonic
/// count, so `Relaxed` is enough: no other memory is published through them.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Indexed by the outcome's position in [`Outcome::ALL`].
    outcomes: [AtomicU64; 13],
    slow: AtomicU64,
    retried: AtomicU64,
    hedged: AtomicU64,
    hedges_won: AtomicU64,
    /// Worker time of hedged attempts still running when another won, in ns.
    hedge_lost_ns: AtomicU64,
}

impl Counters {
    #[inline]
    pub(crate) fn outcome(&self, o: Outcome) {
        self.outcomes[Self::index(o)].fetch_add(1, Ordering::Relaxed);
    }

    #[inline]
    fn index(o: Outcome) -> usize {
        match o {
            Outcome::Successful => 0,
            Outcome::Failed => 1,
            Outcome::Ignored => 2,
            Outcome::TimedOut => 3,
            Outcome::Panicked => 4,
            Outcome::NotPermitted => 5,
            Outcome::QueueFull => 6,
            Outcome::DeadlineUnmeetable => 7,
            Outcome::ShuttingDown => 8,
            Outcome::LimitExceeded => 9,
            Outcome::RateLimited => 10,
            Outcome::Shed => 11,
            Outcome::Throttled => 12,
        }
    }

    pub(crate) fn slow(&self) {
        self.slow.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn retried(&self) {
        self.retried.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn hedged(&self) {
        self.hedged.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn hedge_won(&self) {
        self.hedges_won.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn hedge_lost(&self, run: Duration) {
        self.hedge_lost_ns.fetch_add(crate::time::saturating_nanos(run), Ordering::Relaxed);
    }

    /// Worker time spent on hedged attempts that lost.
    pub(crate) fn hedge_lost_time(&self) -> Duration {
        Duration::from_nanos(self.hedge_lost_ns.load(Ordering::Relaxed))
    }

    pub(crate) fn load(&self, expired: u64) -> CallCounts {
        let o = |k: Outcome| self.outcomes[Self::index(k)].load(Ordering::Relaxed);
        CallCounts {
            successful: o(Outcome::Successful),
            failed: o(Outcome::Failed),
            ignored: o(Outcome::Ignored),
            timed_out: o(Outcome::TimedOut),
            panicked: o(Outcome::Panicked),
            not_permitted: o(Outcome::NotPermitted),
            queue_full: o(Outcome::QueueFull),
            deadline_unmeetable: o(Outcome::DeadlineUnmeetable),
            shutting_down: o(Outcome::ShuttingDown),
            limit_exceeded: o(Outcome::LimitExceeded),
            rate_limited: o(Outcome::RateLimited),
            shed: o(Outcome::Shed),
            throttled: o(Outcome::Throttled),
            slow: self.slow.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            hedged: self.hedged.load(Ordering::Relaxed),
            hedges_won: self.hedges_won.load(Ordering::Relaxed),
            expired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_lands_in_its_own_field() {
        for (i, o) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(Counters::index(o), i, "{o} sits at its place in Outcome::ALL");
            let c = Counters::default();
            c.outcome(o);
            let counts = c.load(0);
            assert_eq!(counts.get(o), 1, "{o}");
            assert_eq!(counts.total(), 1, "{o} counted once");
        }
    }
}
