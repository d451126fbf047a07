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
        *{ *self }.field(outcome)
    }

    /// The field that counts `outcome`.
    fn field(&mut self, outcome: Outcome) -> &mut u64 {
        match outcome {
            Outcome::Successful => &mut self.successful,
            Outcome::Failed => &mut self.failed,
            Outcome::Ignored => &mut self.ignored,
            Outcome::TimedOut => &mut self.timed_out,
            Outcome::Panicked => &mut self.panicked,
            Outcome::NotPermitted => &mut self.not_permitted,
            Outcome::QueueFull => &mut self.queue_full,
            Outcome::DeadlineUnmeetable => &mut self.deadline_unmeetable,
            Outcome::ShuttingDown => &mut self.shutting_down,
            Outcome::LimitExceeded => &mut self.limit_exceeded,
            Outcome::RateLimited => &mut self.rate_limited,
            Outcome::Shed => &mut self.shed,
            Outcome::Throttled => &mut self.throttled,
        }
    }

    /// What was counted after `earlier`, an older snapshot of the same
    /// counters: field by field, `self - earlier` (zero where a count went
    /// down, which the dependency's monotonic counters never do).
    pub fn since(&self, earlier: &CallCounts) -> CallCounts {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        let mut since = CallCounts {
            slow: d(self.slow, earlier.slow),
            retried: d(self.retried, earlier.retried),
            hedged: d(self.hedged, earlier.hedged),
            hedges_won: d(self.hedges_won, earlier.hedges_won),
            expired: d(self.expired, earlier.expired),
            ..CallCounts::default()
        };
        for o in Outcome::ALL {
            *since.field(o) = d(self.get(o), earlier.get(o));
        }
        since
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
    pub(super) slow: AtomicU64,
    pub(super) retried: AtomicU64,
    pub(super) hedged: AtomicU64,
    pub(super) hedges_won: AtomicU64,
    /// Worker time of hedged attempts still running when another won, in ns.
    hedge_lost_ns: AtomicU64,
}

impl Counters {
    /// Counts one `o`, at its place in [`Outcome::ALL`] (the order the
    /// outcomes are declared in).
    #[inline]
    pub(crate) fn outcome(&self, o: Outcome) {
        Self::bump(&self.outcomes[o as usize]);
    }

    /// Counts one on `n`: the crate's counters are relaxed, monotonic atomics.
    #[inline]
    pub(crate) fn bump(n: &AtomicU64) {
        n.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn hedge_lost(&self, run: Duration) {
        self.hedge_lost_ns.fetch_add(crate::time::saturating_nanos(run), Ordering::Relaxed);
    }

    /// Worker time spent on hedged attempts that lost.
    pub(crate) fn hedge_lost_time(&self) -> Duration {
        Duration::from_nanos(self.hedge_lost_ns.load(Ordering::Relaxed))
    }

    pub(crate) fn load(&self, expired: u64) -> CallCounts {
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let mut counts = CallCounts {
            slow: load(&self.slow),
            retried: load(&self.retried),
            hedged: load(&self.hedged),
            hedges_won: load(&self.hedges_won),
            expired,
            ..CallCounts::default()
        };
        for o in Outcome::ALL {
            *counts.field(o) = load(&self.outcomes[o as usize]);
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_lands_in_its_own_field() {
        for (i, o) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(o as usize, i, "{o} sits at its place in Outcome::ALL");
            let c = Counters::default();
            c.outcome(o);
            let counts = c.load(0);
            assert_eq!(counts.get(o), 1, "{o}");
            assert_eq!(counts.total(), 1, "{o} counted once");
        }
    }
}
