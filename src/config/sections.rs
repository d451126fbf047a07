//! The sections of a configuration file, one per configuration type, and
//! their conversions to and from the crate's builders.
//!
//! Each section mirrors one type field by field, under the name of the
//! type's setter; every field is optional in a file and takes the type's own
//! default, and a field the section does not know is refused.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigFileError, duration};
use crate::breaker::{BreakerConfig, State};
use crate::dependency::{Dependency, DependencyBuilder, DependencyConfig};
use crate::error::ConfigError;
use crate::limit::AdaptiveLimit;
use crate::retry::Retry;

/// One dependency: its pool, timeout, breaker, retry and adaptive limit.
///
/// The defaults are [`Dependency::builder`]'s: 10 workers, no queue, no
/// wait for room, a 1 s timeout, deadline-aware admission, the breaker's and
/// the retry's own defaults, and no adaptive limit.
///
/// ```toml
/// workers = 6
/// queue = 2
/// max_wait = "100ms"
/// timeout = "3s"
///
/// [breaker]
/// window = "count"
/// window_size = 20
/// minimum_calls = 8
/// open_for = "15s"
///
/// [adaptive_limit]
/// min_limit = 2
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DependencyConfigFile {
    /// Worker threads ([`DependencyBuilder::workers`]).
    pub workers: usize,
    /// Calls that may wait for a worker ([`DependencyBuilder::queue`]).
    pub queue: usize,
    /// How long a call may wait for room ([`DependencyBuilder::max_wait`]).
    #[serde(with = "duration")]
    pub max_wait: Duration,
    /// The per-attempt timeout ([`DependencyBuilder::timeout`]).
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// [`DependencyBuilder::deadline_aware_admission`].
    pub deadline_aware_admission: bool,
    /// The circuit breaker.
    pub breaker: BreakerConfigFile,
    /// How `call_retry` retries.
    pub retry: RetryConfigFile,
    /// The adaptive concurrency limit; absent for a fixed pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive_limit: Option<AdaptiveLimitConfigFile>,
}

impl Default for DependencyConfigFile {
    fn default() -> Self {
        DependencyConfigFile::from(&DependencyConfig::default())
    }
}

impl From<&DependencyConfig> for DependencyConfigFile {
    /// The section that describes `c`, e.g. a running dependency's
    /// [`config`](Dependency::config).
    fn from(c: &DependencyConfig) -> Self {
        DependencyConfigFile {
            workers: c.workers,
            queue: c.queue,
            max_wait: c.max_wait,
            timeout: c.timeout,
            deadline_aware_admission: c.deadline_aware_admission,
            breaker: BreakerConfigFile::from(&c.breaker),
            retry: RetryConfigFile::from(&c.retry),
            adaptive_limit: c.adaptive_limit.as_ref().map(AdaptiveLimitConfigFile::from),
        }
    }
}

impl DependencyConfigFile {
    /// Checks the breaker, retry and adaptive-limit sections, the checks a
    /// builder can make without starting threads. The pool and timeout
    /// fields are checked by [`build`](Self::build).
    ///
    /// The error's path is relative to the section: `breaker.failure_rate`.
    pub fn validate(&self) -> Result<(), ConfigFileError> {
        self.parts().map(drop)
    }

    /// Sets every field of this section on `builder`
    /// ([`DependencyBuilder::config`]), after [`validate`](Self::validate).
    pub fn apply(&self, builder: DependencyBuilder) -> Result<DependencyBuilder, ConfigFileError> {
        Ok(builder.config(self.to_config()?))
    }

    /// The crate's description of the same settings, after
    /// [`validate`](Self::validate): what [`Dependency::reconfigure`] and
    /// [`Registry::reconfigure`](crate::Registry::reconfigure) apply to a
    /// running dependency. Refusals of those name the field as a builder
    /// does; [`ConfigFileError::of_dependency`] gives its path here.
    pub fn to_config(&self) -> Result<DependencyConfig, ConfigFileError> {
        let (breaker, retry, adaptive_limit) = self.parts()?;
        Ok(DependencyConfig {
            workers: self.workers,
            queue: self.queue,
            max_wait: self.max_wait,
            timeout: self.timeout,
            deadline_aware_admission: self.deadline_aware_admission,
            breaker,
            retry,
            adaptive_limit,
        })
    }

    /// The breaker, retry and adaptive limit, each checked by its own rules.
    fn parts(&self) -> Result<(BreakerConfig, Retry, Option<AdaptiveLimit>), ConfigFileError> {
        let breaker = self.breaker.to_config().map_err(|e| e.within("breaker"))?;
        let retry = self.retry.to_retry().map_err(|e| e.within("retry"))?;
        let limit = match &self.adaptive_limit {
            Some(limit) => Some(limit.to_limit().map_err(|e| e.within("adaptive_limit"))?),
            None => None,
        };
        Ok((breaker, retry, limit))
    }

    /// Builds the dependency called `name` (its worker threads start). Every
    /// error names the field by its path within the section.
    pub fn build(&self, name: &str) -> Result<Dependency, ConfigFileError> {
        self.apply(Dependency::builder(name))?
            .build()
            .map_err(|e| ConfigFileError::invalid(&dependency_path(&e), &e))
    }
}

/// Where the field a [`ConfigError`] names lies in a dependency's section.
///
/// A dependency's builder (and its live reconfiguration) names the field as
/// its setter spells it: `workers`, `timeout`, a breaker's `failure_rate`,
/// a retry's `retry.backoff`, a limit's `min_limit`.
pub(super) fn dependency_path(e: &ConfigError) -> String {
    let field = e.field();
    let breaker = [
        "minimum_calls",
        "failure_rate",
        "slow_call_rate",
        "slow_call_duration",
        "open_for",
        "open_backoff",
        "half_open_calls",
        "after_max_wait",
    ];
    let limit = [
        "min_limit",
        "tolerance",
        "smoothing",
        "failure_cut",
        "short_window",
        "long_window",
        "relearn_after",
    ];
    match field {
        "count_based" | "time_based" => "breaker.window_size".to_owned(),
        f if breaker.contains(&f) => format!("breaker.{f}"),
        f if limit.contains(&f) => format!("adaptive_limit.{f}"),
        f if f.starts_with("retry.") => format!("retry.{}", retry_path(f)),
        // The limit's maximum is the worker count.
        "max_limit" => "workers".to_owned(),
        "name" => String::new(),
        f => f.to_owned(),
    }
}

/// The field of the retry section a `retry.*` error names.
fn retry_path(field: &str) -> &str {
    match field {
        // Refused when the initial backoff exceeds the max.
        "retry.backoff" => "initial_backoff",
        "retry.budget" => "budget_percent",
        other => other.strip_prefix("retry.").unwrap_or(other),
    }
}

/// Which sliding window a breaker decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    /// The last `window_size` calls ([`BreakerConfig::count_based`]).
    Count,
    /// The calls of the last `window_size` seconds ([`BreakerConfig::time_based`]).
    Time,
}

/// The state a half-open breaker moves to when its probes never report
/// ([`BreakerConfig::after_max_wait`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AfterMaxWait {
    /// [`State::Open`].
    Open,
    /// [`State::Closed`].
    Closed,
}

/// A breaker's open period growing with each consecutive opening
/// ([`BreakerConfig::open_backoff`]). Both fields are required.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenBackoffConfigFile {
    /// Each consecutive opening lasts this many times the previous one.
    pub multiplier: f64,
    /// The longest an opening lasts.
    #[serde(with = "duration")]
    pub max: Duration,
}

/// A [`BreakerConfig`]. Rates are percentages (`50.0` is 50 %); the defaults
/// are [`BreakerConfig::default`]'s (Resilience4j's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfigFile {
    /// `count` (default) or `time`.
    pub window: WindowKind,
    /// Calls (count window) or seconds (time window). Default 100.
    pub window_size: u32,
    /// [`BreakerConfig::minimum_calls`].
    pub minimum_calls: u32,
    /// [`BreakerConfig::failure_rate`], in percent.
    pub failure_rate: f64,
    /// [`BreakerConfig::slow_call_rate`], in percent.
    pub slow_call_rate: f64,
    /// [`BreakerConfig::slow_call_duration`].
    #[serde(with = "duration")]
    pub slow_call_duration: Duration,
    /// [`BreakerConfig::open_for`].
    #[serde(with = "duration")]
    pub open_for: Duration,
    /// [`BreakerConfig::open_backoff`]; absent: no growth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_backoff: Option<OpenBackoffConfigFile>,
    /// [`BreakerConfig::half_open_calls`].
    pub half_open_calls: u32,
    /// [`BreakerConfig::max_wait_in_half_open`]; `"0s"` waits forever.
    #[serde(with = "duration")]
    pub max_wait_in_half_open: Duration,
    /// [`BreakerConfig::after_max_wait`]: `open` or `closed`.
    pub after_max_wait: AfterMaxWait,
    /// [`BreakerConfig::enabled`].
    pub enabled: bool,
}

impl Default for BreakerConfigFile {
    fn default() -> Self {
        BreakerConfigFile::from(&BreakerConfig::default())
    }
}

impl BreakerConfigFile {
    /// The breaker configuration, validated; the error's path is the field's
    /// name in this section.
    pub fn to_config(&self) -> Result<BreakerConfig, ConfigFileError> {
        let base = match self.window {
            WindowKind::Count => BreakerConfig::count_based(self.window_size),
            WindowKind::Time => BreakerConfig::time_based(self.window_size),
        };
        let mut config = base
            .minimum_calls(self.minimum_calls)
            .failure_rate(self.failure_rate)
            .slow_call_rate(self.slow_call_rate)
            .slow_call_duration(self.slow_call_duration)
            .open_for(self.open_for)
            .half_open_calls(self.half_open_calls)
            .max_wait_in_half_open(self.max_wait_in_half_open)
            .after_max_wait(match self.after_max_wait {
                AfterMaxWait::Open => State::Open,
                AfterMaxWait::Closed => State::Closed,
            })
            .enabled(self.enabled);
        if let Some(b) = self.open_backoff {
            config = config.open_backoff(b.multiplier, b.max);
        }
        config.validate().map_err(|e| {
            let path = match e.field() {
                "count_based" | "time_based" => "window_size",
                field => field,
            };
            ConfigFileError::invalid(path, &e)
        })?;
        Ok(config)
    }
}

impl From<&BreakerConfig> for BreakerConfigFile {
    fn from(c: &BreakerConfig) -> Self {
        let (window, window_size) = window_of(c);
        BreakerConfigFile {
            window,
            window_size,
            minimum_calls: c.minimum_calls,
            failure_rate: c.failure_rate,
            slow_call_rate: c.slow_call_rate,
            slow_call_duration: c.slow_call_duration,
            open_for: c.open_for,
            open_backoff: c.backoff.map(|b| OpenBackoffConfigFile { multiplier: b.multiplier, max: b.max }),
            half_open_calls: c.half_open_calls,
            max_wait_in_half_open: c.max_wait_in_half_open,
            // Validation allows nothing else; an invalid config reads as open.
            after_max_wait: if c.after_max_wait == State::Closed {
                AfterMaxWait::Closed
            } else {
                AfterMaxWait::Open
            },
            enabled: c.enabled,
        }
    }
}

/// The window of `c`, as the breaker reports its shape.
fn window_of(c: &BreakerConfig) -> (WindowKind, u32) {
    match c.window_shape() {
        (true, seconds) => (WindowKind::Time, seconds),
        (false, calls) => (WindowKind::Count, calls),
    }
}

/// A [`Retry`]. The budget is a percentage of calls; the defaults are
/// [`Retry::new`]'s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfigFile {
    /// Attempts per call, the first included ([`RetryBuilder::max_attempts`](crate::retry::RetryBuilder::max_attempts)).
    pub max_attempts: u32,
    /// The backoff before the first retry.
    #[serde(with = "duration")]
    pub initial_backoff: Duration,
    /// The cap the backoff grows to.
    #[serde(with = "duration")]
    pub max_backoff: Duration,
    /// How the backoff grows from one retry to the next.
    pub backoff_multiplier: f64,
    /// Retries may be at most this percentage of calls...
    pub budget_percent: f64,
    /// ...plus this many a second.
    pub budget_min_per_sec: u32,
    /// The most one call may take, all attempts included; absent: none.
    #[serde(with = "duration::option", skip_serializing_if = "Option::is_none")]
    pub overall_timeout: Option<Duration>,
}

impl Default for RetryConfigFile {
    fn default() -> Self {
        RetryConfigFile::from(&Retry::default())
    }
}

impl RetryConfigFile {
    /// The retry configuration, validated by [`RetryBuilder::build`](crate::retry::RetryBuilder::build);
    /// the error's path is the field's name in this section.
    pub fn to_retry(&self) -> Result<Retry, ConfigFileError> {
        let mut builder = Retry::builder()
            .max_attempts(self.max_attempts)
            .backoff(self.initial_backoff, self.max_backoff)
            .backoff_multiplier(self.backoff_multiplier)
            .budget(self.budget_percent, self.budget_min_per_sec);
        if let Some(t) = self.overall_timeout {
            builder = builder.overall_timeout(t);
        }
        builder.build().map_err(|e| ConfigFileError::invalid(retry_path(e.field()), &e))
    }
}

impl From<&Retry> for RetryConfigFile {
    fn from(r: &Retry) -> Self {
        let (initial_backoff, max_backoff) = r.backoff();
        let (budget_percent, budget_min_per_sec) = r.budget();
        RetryConfigFile {
            max_attempts: r.max_attempts(),
            initial_backoff,
            max_backoff,
            backoff_multiplier: r.backoff_multiplier(),
            budget_percent,
            budget_min_per_sec,
            overall_timeout: r.overall_timeout(),
        }
    }
}

/// An [`AdaptiveLimit`]. Tolerances and cuts are percentages; the defaults
/// are [`AdaptiveLimit::new`]'s. The limit's maximum is the dependency's
/// worker count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveLimitConfigFile {
    /// [`AdaptiveLimit::min_limit`].
    pub min_limit: usize,
    /// [`AdaptiveLimit::tolerance`], in percent.
    pub tolerance: f64,
    /// [`AdaptiveLimit::smoothing`], in percent.
    pub smoothing: f64,
    /// [`AdaptiveLimit::failure_cut`], in percent.
    pub failure_cut: f64,
    /// [`AdaptiveLimit::short_window`], in samples.
    pub short_window: u32,
    /// [`AdaptiveLimit::long_window`], in samples.
    pub long_window: u32,
    /// [`AdaptiveLimit::relearn_after`]; `"0s"` never relearns.
    #[serde(with = "duration")]
    pub relearn_after: Duration,
}

impl Default for AdaptiveLimitConfigFile {
    fn default() -> Self {
        AdaptiveLimitConfigFile::from(&AdaptiveLimit::default())
    }
}

impl AdaptiveLimitConfigFile {
    /// The limit's configuration, validated by [`AdaptiveLimit::validate`]
    /// (its minimum is checked against the worker count when the dependency
    /// is built); the error's path is the field's name in this section.
    pub fn to_limit(&self) -> Result<AdaptiveLimit, ConfigFileError> {
        let limit = AdaptiveLimit::new()
            .min_limit(self.min_limit)
            .tolerance(self.tolerance)
            .smoothing(self.smoothing)
            .failure_cut(self.failure_cut)
            .short_window(self.short_window)
            .long_window(self.long_window)
            .relearn_after(self.relearn_after);
        limit.validate().map_err(|e| ConfigFileError::invalid(e.field(), &e))?;
        Ok(limit)
    }
}

impl From<&AdaptiveLimit> for AdaptiveLimitConfigFile {
    fn from(l: &AdaptiveLimit) -> Self {
        AdaptiveLimitConfigFile {
            min_limit: l.min_limit,
            tolerance: l.tolerance,
            smoothing: l.smoothing,
            failure_cut: l.failure_cut,
            short_window: l.short_window,
            long_window: l.long_window,
            relearn_after: l.relearn_after,
        }
    }
}
