//! [`DependencyBuilder`]: setters over a [`DependencyConfig`], plus the
//! thread settings, clock and listeners that are not part of it.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Exec;
use super::Mode;
use super::caller::CallerThread;
use super::config::Live;
use super::config::{CallShape, DependencyConfig};
use super::{Counters, Dependency, Event, Inner};
use crate::breaker::{Breaker, BreakerConfig};
use crate::clock::{Clock, SystemClock};
use crate::error::ConfigError;
use crate::histogram::LatencyHistogram;
use crate::limit::{AdaptiveLimit, Limiter, RateLimit, RateLimiter, Throttle, Throttler};
use crate::listeners::{Listener, Listeners};
use crate::pool::{Pool, PoolBuilder};
use crate::retry::{JitterSource, Retry, RetryBudget};

/// Builds a [`Dependency`]; from [`Dependency::builder`].
///
/// Its setters set the fields of the [`DependencyConfig`] it holds, one each
/// ([`config`](Self::config) sets them all at once); the thread settings
/// (stack size, drop grace), the clock and the listeners are the builder's
/// own. [`build`](Self::build) validates and starts the workers.
#[must_use = "a builder does nothing until `build()` is called"]
pub struct DependencyBuilder {
    /// The name, and the thread settings that are not part of the
    /// configuration; its workers, queue, wait and admission are `config`'s.
    pool: PoolBuilder,
    config: DependencyConfig,
    /// `None` for the system clock, read directly (see `Inner::clock_now`).
    clock: Option<Arc<dyn Clock>>,
    /// The throttler's seed; `None`: drawn at random.
    throttle_seed: Option<u64>,
    listeners: Vec<Listener<Event>>,
}

impl fmt::Debug for DependencyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DependencyBuilder")
            .field("pool", &self.pool)
            .field("config", &self.config)
            .field("clock", self.clock.as_ref().map_or(&SystemClock as &dyn fmt::Debug, |c| c))
            .field("listeners", &self.listeners.len())
            .finish()
    }
}

impl DependencyBuilder {
    pub(super) fn new(name: String) -> Self {
        DependencyBuilder {
            pool: Pool::builder(name),
            config: DependencyConfig::default(),
            clock: None,
            throttle_seed: None,
            listeners: Vec::new(),
        }
    }

    /// Worker threads, named `wt-<name>-<i>` (see
    /// [`PoolBuilder::workers`]); 1 to 4096. Defaults to 10.
    pub fn workers(self, n: usize) -> Self {
        self.with_config(|c| c.workers = n)
    }

    /// Jobs that may wait for a worker (see [`PoolBuilder::queue`]; 0: direct
    /// hand-off). At most 2^20. Defaults to 0.
    pub fn queue(self, capacity: usize) -> Self {
        self.with_config(|c| c.queue = capacity)
    }

    /// The stack size of each worker thread, in bytes (see
    /// [`PoolBuilder::stack_size`]); at least 64 KiB. Defaults to the
    /// standard library's.
    pub fn stack_size(self, bytes: usize) -> Self {
        self.with_pool(|p| p.stack_size(bytes))
    }

    /// How long dropping the last handle waits for running and queued work
    /// (see [`PoolBuilder::drop_grace`]). Defaults to 1 s.
    pub fn drop_grace(self, grace: Duration) -> Self {
        self.with_pool(|p| p.drop_grace(grace))
    }

    /// Whether to refuse at once a call whose estimated queue wait exceeds its
    /// deadline (see [`PoolBuilder::deadline_aware_admission`]). Defaults to `true`.
    pub fn deadline_aware_admission(self, enabled: bool) -> Self {
        self.with_config(|c| c.deadline_aware_admission = enabled)
    }

    /// How long a call may wait for room in a full pool, or in caller-thread
    /// mode for a permit (see [`PoolBuilder::max_wait`] and
    /// [waiting by time](crate::pool#waiting-for-room-by-time)). At most one minute and at most
    /// the timeout. Defaults to zero: refused `QueueFull` at once.
    pub fn max_wait(self, wait: Duration) -> Self {
        self.with_config(|c| c.max_wait = wait)
    }

    /// The pool's settings, all at once, replacing those set so far (its
    /// name stays the dependency's). Defaults to [`Pool::builder`]'s.
    pub fn pool(mut self, pool: PoolBuilder) -> Self {
        let name = self.pool.name().to_owned();
        self.config.workers = pool.workers;
        self.config.queue = pool.queue;
        self.config.max_wait = pool.max_wait;
        self.config.deadline_aware_admission = pool.admission;
        self.pool = pool.rename(name);
        self
    }

    fn with_pool(mut self, set: impl FnOnce(PoolBuilder) -> PoolBuilder) -> Self {
        self.pool = set(self.pool);
        self
    }

    fn with_config(mut self, set: impl FnOnce(&mut DependencyConfig)) -> Self {
        set(&mut self.config);
        self
    }

    /// How long a caller waits for one attempt, from the call, queue wait
    /// included; the job sees what is left in
    /// [`CallContext::remaining`](crate::CallContext::remaining), and a
    /// caller's [`deadline`](crate::CallBuilder::deadline) can only shorten
    /// it. Greater than zero and at most one day. Defaults to 1 s.
    pub fn timeout(self, timeout: Duration) -> Self {
        self.with_config(|c| c.timeout = timeout)
    }

    /// The circuit breaker's configuration. A service making tens of calls a
    /// second wants a smaller window than the default. Defaults to
    /// [`BreakerConfig::default`].
    pub fn breaker(self, config: BreakerConfig) -> Self {
        self.with_config(|c| c.breaker = config)
    }

    /// How [`CallBuilder::retry`](crate::CallBuilder::retry) retries; plain
    /// [`call`](Dependency::call) never retries. Defaults to [`Retry::new`].
    pub fn retry(self, retry: Retry) -> Self {
        self.with_config(|c| c.retry = retry)
    }

    /// The clock of the breaker (open periods, time windows, slow calls) and
    /// of the retry budget; deadlines, backoff sleeps and the service-time
    /// estimate stay on real time (see [`clock`](crate::clock)). Defaults to
    /// [`SystemClock`].
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = if (&clock as &dyn Any).is::<SystemClock>() { None } else { Some(Arc::new(clock)) };
        self
    }

    /// The clock, already shared. Defaults to [`SystemClock`].
    pub fn clock_arc(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// An adaptive limit on the calls admitted at once, between the config's
    /// `min_limit` and the worker count; see [`Limiter`] and
    /// [brownout](crate::limit#a-provider-in-brownout). Defaults to none: a fixed pool.
    pub fn adaptive_limit(self, limit: AdaptiveLimit) -> Self {
        self.with_config(|c| c.adaptive_limit = Some(limit))
    }

    /// A rate limit on the calls made, waited for on the caller's thread
    /// before the breaker (see [`RateLimit`] and
    /// [`limit`](crate::limit#a-provider-in-brownout)). Detached calls never wait for a permit. Defaults to none.
    pub fn rate_limit(self, limit: RateLimit) -> Self {
        self.with_config(|c| c.rate_limit = Some(limit))
    }

    /// Client-side adaptive throttling; see [`Throttler`] and
    /// [`limit`](crate::limit#adaptive-throttling). Defaults to none.
    pub fn throttle(self, throttle: Throttle) -> Self {
        self.with_config(|c| c.throttle = Some(throttle))
    }

    /// The seed of the throttler's draws: the same calls with the same
    /// answers on the same [`clock`](Self::clock) then make the same
    /// decisions, for a test. Defaults to a seed drawn at random.
    pub fn throttle_seed(mut self, seed: u64) -> Self {
        self.throttle_seed = Some(seed);
        self
    }

    /// The hedging policy of calls made with
    /// [`with().hedge()`](crate::CallBuilder::hedge); its settings' limits are
    /// in [`Hedge`](crate::dependency::Hedge)'s setters. Defaults to none: a
    /// hedged call makes one attempt.
    pub fn hedge(self, hedge: crate::dependency::Hedge) -> Self {
        self.with_config(|c| c.hedge = Some(hedge))
    }

    /// Places of the pool (workers and queue) kept for calls of
    /// [`Priority::Critical`](crate::dependency::Priority)
    /// ([priorities](crate::dependency#fan-out-hedging-priorities)). It applies to every call of a pool-mode
    /// dependency, each hedge taking a place too. Defaults to 0: nothing
    /// reserved (a sheddable call still never queues).
    pub fn reserved_for_critical(self, places: usize) -> Self {
        self.with_config(|c| c.reserved_for_critical = places)
    }

    /// Puts `policy` in shadow: it decides and records, and refuses nothing
    /// (see [`shadow`](crate::shadow)). Call once per policy; a policy not
    /// configured has nothing to shadow. Defaults to none: every policy enforces.
    pub fn shadow(self, policy: crate::shadow::Policy) -> Self {
        self.with_config(|c| c.shadow = c.shadow.with(policy))
    }

    /// How callers call it, declared for the capacity rule; see
    /// [`CallShape`]. Detached is refused in caller-thread mode, which has no
    /// detached calls. Defaults to [`CallShape::Blocking`].
    pub fn calls(self, shape: CallShape) -> Self {
        self.with_config(|c| c.calls = shape)
    }

    /// Where calls run: on a worker pool, or on the caller's own thread; see
    /// [`Mode`] for what differs and when to pick which. Fixed once built.
    /// Defaults to [`Mode::Pool`].
    pub fn mode(self, mode: Mode) -> Self {
        self.with_config(|c| c.mode = mode)
    }

    /// Adds a listener for the dependency's [`Event`]s. May be called more
    /// than once; listeners run in the order they were added. Defaults to
    /// none.
    pub fn on_event(mut self, listener: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// Every field of the configuration at once (a file's section, another
    /// dependency's [`config`](Dependency::config)), replacing those set so
    /// far; the name, thread settings, clock and listeners stay. Defaults to
    /// [`DependencyConfig::default`].
    pub fn config(mut self, config: DependencyConfig) -> Self {
        self.config = config;
        self
    }

    /// Validates every field and starts the worker threads.
    ///
    /// The error names the field as its setter spells it
    /// ([`DependencyConfig::validate`]), or `name` (empty) and `stack_size`.
    pub fn build(self) -> Result<Dependency, ConfigError> {
        let config = self.config;
        config.validate()?;
        let name = self.pool.name().to_owned();
        // `name` and `stack_size` are the pool's to check.
        let exec = match config.mode {
            Mode::Pool => Exec::Pool(
                self.pool
                    .workers(config.workers)
                    .queue(config.queue)
                    .max_wait(config.max_wait)
                    .deadline_aware_admission(config.deadline_aware_admission)
                    .build()?,
            ),
            Mode::CallerThread => {
                if name.is_empty() {
                    return Err(ConfigError::new("name", "not empty", "\"\""));
                }
                Exec::Caller(CallerThread::new(&name, config.workers, config.max_wait)?)
            }
        };
        // The pool has checked the worker count, the limit's maximum.
        let limiter = Limiter::new(
            config.adaptive_limit.clone().unwrap_or_else(|| AdaptiveLimit::new().min_limit(1)),
            config.workers,
        )?;
        let clock: Arc<dyn Clock> = match &self.clock {
            Some(clock) => Arc::clone(clock),
            None => Arc::new(SystemClock),
        };
        // Always built, like the limiter; in force while `live.rate_on()`.
        let rate = RateLimiter::with_clock(
            config.rate_limit.unwrap_or(RateLimit::per_second(1.0)),
            Arc::clone(&clock),
        )?;
        // Always built too; in force while its configuration is set.
        let throttle = Throttler::for_dependency(config.throttle.clone(), clock, self.throttle_seed)?;
        let listeners = Arc::new(Listeners::new());
        for listener in self.listeners {
            listeners.add(listener);
        }
        let breaker = Breaker::build(name.clone(), config.breaker.clone(), self.clock.clone())?;
        crate::trace::watch_transitions(&breaker);
        let ring = super::events::EventRing::watching(&breaker);
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
                budget: RetryBudget::new(&config.retry, now),
                jitter: JitterSource::new(),
                counters: Counters::default(),
                clock: self.clock,
                listeners,
                breaker,
                limiter,
                rate,
                throttle,
                exec,
                call_time: LatencyHistogram::new(Duration::from_secs(30)),
                normal: crate::latency::Latency::default(),
                occupancy: Arc::default(),
                ring,
                log: Default::default(),
                detached_failures: Default::default(),
                shadow_counts: Default::default(),
            }),
        })
    }
}
