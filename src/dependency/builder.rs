//! [`DependencyBuilder`]: a dependency's settings. The pool's own settings are
//! a [`PoolBuilder`]'s, reused as they are.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{DependencyConfig, Live};
use super::{Counters, Dependency, Event, Inner};
use crate::breaker::{Breaker, BreakerConfig};
use crate::clock::{Clock, SystemClock};
use crate::error::ConfigError;
use crate::histogram::LatencyHistogram;
use crate::limit::{AdaptiveLimit, Limiter};
use crate::listeners::{Listener, Listeners};
use crate::pool::{Pool, PoolBuilder};
use crate::retry::{Jitter, Retry, RetryBudget};

/// Builds a [`Dependency`]; from [`Dependency::builder`].
#[must_use = "a builder does nothing until `build()` is called"]
pub struct DependencyBuilder {
    pool: PoolBuilder,
    timeout: Duration,
    breaker: BreakerConfig,
    retry: Retry,
    /// `None` for the system clock, read directly (see `Inner::clock_now`).
    clock: Option<Arc<dyn Clock>>,
    listeners: Vec<Listener<Event>>,
    limit: Option<AdaptiveLimit>,
}

impl fmt::Debug for DependencyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DependencyBuilder")
            .field("pool", &self.pool)
            .field("timeout", &self.timeout)
            .field("breaker", &self.breaker)
            .field("retry", &self.retry)
            .field("clock", self.clock.as_ref().map_or(&SystemClock as &dyn fmt::Debug, |c| c))
            .field("listeners", &self.listeners.len())
            .field("adaptive_limit", &self.limit)
            .finish()
    }
}

impl DependencyBuilder {
    pub(super) fn new(name: String) -> Self {
        DependencyBuilder {
            pool: Pool::builder(name),
            timeout: Duration::from_secs(1),
            breaker: BreakerConfig::default(),
            retry: Retry::default(),
            clock: None,
            listeners: Vec::new(),
            limit: None,
        }
    }

    /// Worker threads, named `watertight-<name>-<i>`: [`PoolBuilder::workers`].
    /// Default 10; must be 1 to 4096.
    pub fn workers(self, n: usize) -> Self {
        self.with_pool(|p| p.workers(n))
    }

    /// Jobs that may wait for a worker: [`PoolBuilder::queue`]. Default 0: a
    /// call is handed straight to an idle worker or rejected with
    /// `QueueFull`. At most 2^20.
    pub fn queue(self, capacity: usize) -> Self {
        self.with_pool(|p| p.queue(capacity))
    }

    /// The stack size of each worker thread, in bytes:
    /// [`PoolBuilder::stack_size`]. Default: the standard library's; at
    /// least 64 KiB.
    pub fn stack_size(self, bytes: usize) -> Self {
        self.with_pool(|p| p.stack_size(bytes))
    }

    /// How long dropping the last handle waits for running and queued work:
    /// [`PoolBuilder::drop_grace`]. Default 1 s.
    pub fn drop_grace(self, grace: Duration) -> Self {
        self.with_pool(|p| p.drop_grace(grace))
    }

    /// Whether to reject at once, with
    /// [`Rejection::DeadlineUnmeetable`](crate::Rejection::DeadlineUnmeetable),
    /// a call whose estimated queue wait already exceeds its deadline:
    /// [`PoolBuilder::deadline_aware_admission`]. Default `true`. Such a
    /// rejection is not a provider failure and is not recorded by the breaker.
    pub fn deadline_aware_admission(self, enabled: bool) -> Self {
        self.with_pool(|p| p.deadline_aware_admission(enabled))
    }

    /// How long a call may wait for room when every worker is busy and the
    /// queue is full: [`PoolBuilder::max_wait`]. Default zero (refused at
    /// once with `QueueFull`); at most one minute and at most the timeout.
    pub fn max_wait(self, wait: Duration) -> Self {
        self.with_pool(|p| p.max_wait(wait))
    }

    /// The pool's settings, all at once, replacing those set so far (its
    /// name stays the dependency's).
    pub fn pool(mut self, pool: PoolBuilder) -> Self {
        let name = self.pool.name().to_owned();
        self.pool = pool.rename(name);
        self
    }

    fn with_pool(mut self, set: impl FnOnce(PoolBuilder) -> PoolBuilder) -> Self {
        self.pool = set(self.pool);
        self
    }

    /// How long a caller waits for one attempt, measured from the call, time
    /// in the queue included. The job sees what is left of it in
    /// [`CallContext::remaining`](crate::CallContext::remaining). A caller's
    /// own deadline ([`CallBuilder::deadline`](crate::CallBuilder::deadline)) can only shorten it. Default
    /// 1 s; must be greater than zero and at most one day.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The circuit breaker's configuration. Default [`BreakerConfig::default`]:
    /// Resilience4j's defaults, a window of the last 100 calls that decides
    /// nothing before 100 calls are in and opens for 60 s. A service making
    /// tens of calls a second wants a smaller window; see [`BreakerConfig`].
    pub fn breaker(mut self, config: BreakerConfig) -> Self {
        self.breaker = config;
        self
    }

    /// How [`CallBuilder::retry`](crate::CallBuilder::retry) retries. Default [`Retry::new`] (3
    /// attempts, 50 ms to 1 s backoff, a budget of 20 % of calls). Plain
    /// [`call`](Dependency::call) never retries.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// The clock of the breaker (open periods, time windows), of the elapsed
    /// times recorded on it (slow calls), and of the retry budget. Default
    /// [`SystemClock`].
    ///
    /// Deadlines, backoff sleeps and the service-time estimate stay on real
    /// time whatever the clock, because waiting is real: with a
    /// [`ManualClock`](crate::ManualClock), a test moves the breaker through
    /// its states without sleeping, and a hung job still times out at its
    /// real deadline.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = if (&clock as &dyn Any).is::<SystemClock>() { None } else { Some(Arc::new(clock)) };
        self
    }

    /// The clock, already shared. Default [`SystemClock`].
    pub fn clock_arc(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// An adaptive concurrency limit on the calls admitted at once, between
    /// the config's `min_limit` and the worker count. Default none: a fixed
    /// pool. See [`Limiter`] for the rule and what "admitted at once" counts;
    /// a call over the limit is rejected at once with
    /// [`Rejection::LimitExceeded`](crate::Rejection::LimitExceeded), which
    /// the breaker never records.
    pub fn adaptive_limit(mut self, limit: AdaptiveLimit) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Adds a listener for the dependency's [`Event`]s. Default none. May be
    /// called more than once; listeners run in the order they were added.
    pub fn on_event(mut self, listener: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// Every setting at once, replacing those set so far (the name, the
    /// clock and the listeners stay).
    pub fn config(self, config: DependencyConfig) -> Self {
        let mut b = self
            .workers(config.workers)
            .queue(config.queue)
            .max_wait(config.max_wait)
            .deadline_aware_admission(config.deadline_aware_admission)
            .timeout(config.timeout)
            .breaker(config.breaker)
            .retry(config.retry);
        b.limit = config.adaptive_limit;
        b
    }

    /// The settings as one value, for checking.
    fn snapshot_config(&self) -> DependencyConfig {
        DependencyConfig {
            workers: self.pool.configured_workers(),
            queue: self.pool.configured_queue(),
            max_wait: self.pool.configured_max_wait(),
            timeout: self.timeout,
            deadline_aware_admission: self.pool.configured_admission(),
            breaker: self.breaker.clone(),
            retry: self.retry.clone(),
            adaptive_limit: self.limit.clone(),
        }
    }

    /// Validates every field and starts the worker threads.
    ///
    /// The error names the field as its setter spells it: `name` (empty),
    /// `workers`, `queue`, `timeout`, `stack_size`, and the breaker's own
    /// fields (`failure_rate`, ...), and `max_wait`.
    pub fn build(self) -> Result<Dependency, ConfigError> {
        // `name`, `workers`, `queue` and `stack_size` are the pool's to check.
        let config = self.snapshot_config();
        config.check()?;
        let name = self.pool.name().to_owned();
        let pool = self.pool.build()?;
        // The pool has checked the worker count, the limit's maximum.
        let limiter = Limiter::new(
            config.adaptive_limit.clone().unwrap_or_else(|| AdaptiveLimit::new().min_limit(1)),
            config.workers,
        )?;
        let listeners = Arc::new(Listeners::new());
        for listener in self.listeners {
            listeners.add(listener);
        }
        let breaker = Breaker::build(name.clone(), self.breaker.clone(), self.clock.clone())?;
        crate::trace::watch_transitions(&breaker);
        if !listeners.is_empty() {
            let listeners = Arc::clone(&listeners);
            let owner = name.clone();
            breaker.on_transition(move |t| listeners.notify(&Event::Transition(t.clone()), &owner));
        }
        let now = self.clock.as_ref().map_or_else(Instant::now, |c| c.now());
        Ok(Dependency {
            inner: Arc::new(Inner {
                name: name.as_str().into(),
                live: Live::new(&config),
                budget: RetryBudget::new(&self.retry, now),
                jitter: Jitter::new(),
                counters: Counters::default(),
                clock: self.clock,
                listeners,
                breaker,
                limiter,
                pool,
                call_time: LatencyHistogram::new(Duration::from_secs(30)),
                normal: super::hang::Normal::default(),
            }),
        })
    }
}
