//! [`DependencyConfig`]: every setting of a dependency as one plain value,
//! and its validation. A running dependency applies one with
//! `Dependency::reconfigure` (`dependency/config.rs`).

use std::time::Duration;

use crate::breaker::BreakerConfig;
use crate::error::ConfigError;
use crate::hedge::Hedge;
use crate::limit::{AdaptiveLimit, RateLimit, Throttle};
use crate::pool::Mode;
use crate::retry::Retry;
use crate::shadow::Shadow;
use crate::time::MAX_TIMEOUT;

/// Every setting of a [`Dependency`](crate::Dependency), as one value: what a
/// [`DependencyBuilder`](crate::DependencyBuilder)'s setters set, one field
/// each, what [`Dependency::config`](crate::Dependency::config) reads and [`Dependency::reconfigure`](crate::Dependency::reconfigure)
/// applies. Its fields mean what the builder's setters of the same names say.
///
/// With the `serde` feature it is also the file section of one dependency
/// (`[dependencies.fraud]`, see [`config`](crate::config)) and the JSON a
/// service can read and write live: every field may be left out and takes
/// the builder's default, a field it does not know is refused, durations are
/// strings (`"3s"`), rates percentages.
///
/// ```toml
/// workers = 6
/// queue = 2
/// max_wait = "100ms"
/// timeout = "3s"
///
/// [breaker]
/// window = { count = 20 }
/// minimum_calls = 8
/// open_for = "15s"
///
/// [retry]
/// jitter = "equal"
///
/// [adaptive_limit]
/// min_limit = 2
///
/// [throttle]
/// k = 2.0
/// window = "30s"
/// ```
///
/// ```
/// use std::time::Duration;
/// use watertight::Dependency;
///
/// let dep = Dependency::builder("pricing").workers(4).timeout(Duration::from_secs(1)).build()?;
/// let mut config = dep.config();
/// config.timeout = Duration::from_millis(300);
/// dep.reconfigure(config)?;
/// assert_eq!(dep.timeout(), Duration::from_millis(300));
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
pub struct DependencyConfig {
    /// Worker threads ([`DependencyBuilder::workers`](crate::DependencyBuilder::workers)).
    pub workers: usize,
    /// Jobs that may wait for a worker ([`DependencyBuilder::queue`](crate::DependencyBuilder::queue)).
    pub queue: usize,
    /// How long a call may wait for room in a full pool
    /// ([`DependencyBuilder::max_wait`](crate::DependencyBuilder::max_wait)).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    pub max_wait: Duration,
    /// The per-attempt timeout ([`DependencyBuilder::timeout`](crate::DependencyBuilder::timeout)).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    pub timeout: Duration,
    /// Whether deadline-aware admission is on
    /// ([`DependencyBuilder::deadline_aware_admission`](crate::DependencyBuilder::deadline_aware_admission)).
    pub deadline_aware_admission: bool,
    /// The breaker's configuration.
    pub breaker: BreakerConfig,
    /// How [`retry`](crate::CallBuilder::retry) retries.
    pub retry: Retry,
    /// The adaptive concurrency limit, if any; absent in a file: none.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub adaptive_limit: Option<AdaptiveLimit>,
    /// The rate limit, if any
    /// ([`DependencyBuilder::rate_limit`](crate::DependencyBuilder::rate_limit));
    /// absent in a file: none.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub rate_limit: Option<RateLimit>,
    /// The adaptive throttler, if any
    /// ([`DependencyBuilder::throttle`](crate::DependencyBuilder::throttle));
    /// absent in a file: none.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub throttle: Option<Throttle>,
    /// The hedging policy of [`hedge`](crate::CallBuilder::hedge)d calls, if any
    /// ([`DependencyBuilder::hedge`](crate::DependencyBuilder::hedge));
    /// absent in a file: none, and a hedged call makes one attempt.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub hedge: Option<Hedge>,
    /// Where calls run ([`DependencyBuilder::mode`](crate::DependencyBuilder::mode)):
    /// a pool of `workers` threads, or the caller's own thread with at most
    /// `workers` callers inside. Fixed once built.
    pub mode: Mode,
    /// Places kept for critical calls
    /// ([`DependencyBuilder::reserved_for_critical`](crate::DependencyBuilder::reserved_for_critical)).
    pub reserved_for_critical: usize,
    /// How its callers call it, as the capacity rule counts their hold on
    /// the request pool ([`DependencyBuilder::calls`](crate::DependencyBuilder::calls)).
    /// In a file: `calls = "blocking"`, `calls = "detached"` or
    /// `calls = { fan_out = "search" }`; absent: blocking.
    pub calls: CallShape,
    /// The policies in shadow: each decides as it would and records what it
    /// would have refused, and refuses nothing
    /// ([`DependencyBuilder::shadow`](crate::DependencyBuilder::shadow)).
    /// In a file: `shadow = ["breaker", "rate_limit"]`; absent: none.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Shadow::is_empty"))]
    pub shadow: Shadow,
}

/// How a dependency's callers call it, declared for the capacity rule
/// ([`Registry::check_capacity`](crate::Registry::check_capacity)): how many
/// request threads its provider can hold while it hangs.
///
/// A declaration, not a restriction: a call of another form still works
/// (a blocking `call` on a dependency declared detached is served as any
/// other, and nothing is logged), but its hold is then not in the report.
///
/// In a file: `calls = "blocking"`, `calls = "detached"`, or
/// `calls = { fan_out = "search" }`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum CallShape {
    /// A request thread waits for each call
    /// ([`call`](crate::Dependency::call), a [`CallBuilder`](crate::CallBuilder)'s
    /// `call`): the dependency can hold `workers + queue` request threads.
    /// The default.
    #[default]
    Blocking,
    /// Only ever called detached ([`spawn`](crate::Dependency::spawn),
    /// `spawn_with`): admitted or refused at once, no request thread ever
    /// waits for it, so it holds none.
    Detached,
    /// A leg of the fan-out group of this name: one request thread starts a
    /// call to every leg of the group and waits for them together, so the
    /// legs hold one request thread between them. The group can hold as many
    /// request threads as its largest leg (`workers + queue`), not their
    /// sum.
    FanOut(String),
}

impl CallShape {
    /// The fan-out group it is a leg of, if any.
    pub fn fan_out_group(&self) -> Option<&str> {
        match self {
            CallShape::FanOut(group) => Some(group),
            _ => None,
        }
    }
}

impl Default for DependencyConfig {
    /// The builder's defaults.
    fn default() -> Self {
        DependencyConfig {
            workers: 10,
            queue: 0,
            max_wait: Duration::ZERO,
            timeout: Duration::from_secs(1),
            deadline_aware_admission: true,
            breaker: BreakerConfig::default(),
            retry: Retry::default(),
            adaptive_limit: None,
            rate_limit: None,
            throttle: None,
            hedge: None,
            mode: Mode::Pool,
            reserved_for_critical: 0,
            calls: CallShape::Blocking,
            shadow: Shadow::none(),
        }
    }
}

impl DependencyConfig {
    /// Checks every setting without starting a thread; the error names the
    /// field as its setter spells it (`workers`, `timeout`, a breaker's
    /// `failure_rate`, `retry.backoff`, a limit's `min_limit`).
    /// [`DependencyBuilder::build`](crate::DependencyBuilder::build) and
    /// [`Dependency::reconfigure`](crate::Dependency::reconfigure) run it first.
    pub fn validate(&self) -> Result<(), ConfigError> {
        crate::pool::check_settings(self.workers, self.queue, self.max_wait)?;
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return Err(ConfigError::new(
                "timeout",
                "greater than zero and at most one day",
                format_args!("{:?}", self.timeout),
            ));
        }
        if self.max_wait > self.timeout {
            return Err(ConfigError::new(
                "max_wait",
                "at most the timeout",
                format_args!("{:?} > timeout {:?}", self.max_wait, self.timeout),
            ));
        }
        if self.mode == Mode::CallerThread && self.queue > 0 {
            return Err(ConfigError::new(
                "queue",
                "0 in caller_thread mode (callers wait, at most max_wait, for a permit)",
                self.queue,
            ));
        }
        if self.reserved_for_critical >= self.workers {
            return Err(ConfigError::new(
                "reserved_for_critical",
                "less than the workers (other calls need one at least)",
                format_args!("{} >= {}", self.reserved_for_critical, self.workers),
            ));
        }
        match &self.calls {
            CallShape::Detached if self.mode == Mode::CallerThread => {
                return Err(ConfigError::new(
                    "calls",
                    "blocking or a fan-out leg in caller_thread mode (it has no detached calls)",
                    "detached",
                ));
            }
            CallShape::FanOut(group) if group.trim().is_empty() => {
                return Err(ConfigError::new("calls.fan_out", "a group name that is not empty", "\"\""));
            }
            _ => {}
        }
        self.breaker.validate()?;
        self.retry.validate()?;
        if let Some(rate) = &self.rate_limit {
            rate.validate()?;
        }
        if let Some(throttle) = &self.throttle {
            throttle.validate()?;
        }
        if let Some(hedge) = &self.hedge {
            hedge.validate()?;
        }
        if let Some(limit) = &self.adaptive_limit {
            limit.validate()?;
            // The limit lives between its minimum and the worker count (which
            // the pool checks on its own).
            if limit.min_limit > self.workers {
                return Err(ConfigError::new(
                    "min_limit",
                    "at most the maximum (the worker count)",
                    format_args!("{} > {}", limit.min_limit, self.workers),
                ));
            }
        }
        Ok(())
    }
}
