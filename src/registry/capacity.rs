//! The capacity rule: how many request threads each dependency can hold
//! while its provider hangs ([`Registry::check_capacity`]), and the report
//! that says so.

use std::fmt;
use std::time::Duration;

use super::Registry;
use crate::breaker::BreakerConfig;

impl Registry {
    /// Checks every dependency's worst-case hold on a request pool of
    /// `request_threads` threads.
    ///
    /// A request thread that calls a dependency waits for the answer, so while a
    /// provider hangs, one dependency can hold at most `workers + queue` request
    /// threads (each for at most its timeout): more callers than that are
    /// answered `QueueFull` at once. The bound is for single attempts
    /// ([`Dependency::call`](crate::Dependency::call)): a caller of
    /// [`retry`](crate::CallBuilder::retry) also holds its request
    /// thread while it sleeps between attempts, outside the pool, for up to
    /// `max_attempts` timeouts plus the backoffs in all;
    /// [`Retry::overall_timeout`](crate::retry::Retry::overall_timeout) bounds that.
    /// Isolation holds only while that *hold*, for
    /// the worst dependency, leaves the request pool room for everything else.
    /// This check applies the rule to every dependency:
    ///
    /// - **error**: `hold >= request_threads`. One hung provider can take every
    ///   request thread, and the server stops answering anything, even routes
    ///   that never call that provider.
    /// - **warning**: `hold > request_threads / 2`. One hung provider can take
    ///   more than half of the request threads.
    /// - **warning** (for the whole registry): the holds add up to
    ///   `request_threads` or more, so providers failing together (a network
    ///   partition) can still take every request thread.
    ///
    /// The breaker opening, deadline-aware admission and short timeouts all make
    /// the real hold smaller; the rule takes the worst case because that is what
    /// a hung provider produces before the breaker's window has filled.
    ///
    /// Callers waiting for room ([`max_wait`](crate::DependencyBuilder::max_wait))
    /// are *short* holds: each holds its request thread for at most `max_wait`,
    /// never for the timeout, and while a provider hangs they are refused when
    /// it ends. They are reported (`CapacityEntry::max_wait`), not counted in
    /// `hold`: a dependency on every request's path can thus be sized for its
    /// normal load (Little's law, see the README's "Sizing") with a small pool
    /// and a short wait, instead of a hold as large as the request pool.
    ///
    /// `Ok` carries the report, warnings included; `Err` names the dependency
    /// with the largest hold among those that can take every request thread,
    /// and carries the report too.
    ///
    /// ```
    /// use watertight::{Dependency, Registry, breaker::BreakerConfig};
    ///
    /// let registry = Registry::new();
    /// let fraud = Dependency::builder("fraud").workers(10).queue(5);
    /// // A breaker one wave of hung calls can open: 10 failures in a window of 20.
    /// registry.register(fraud.breaker(BreakerConfig::count_based(20).minimum_calls(10)).build()?)?;
    /// let report = registry.check_capacity(15).unwrap_err();
    /// assert_eq!(report.dependency(), "fraud");
    /// assert!(registry.check_capacity(40).unwrap().warnings().is_empty());
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn check_capacity(&self, request_threads: usize) -> Result<CapacityReport, CapacityError> {
        let entries: Vec<CapacityEntry> = self
            .dependencies()
            .iter()
            .map(|d| {
                // In caller-thread mode: the permits, and no queue.
                let config = d.config();
                let (workers, max_wait, queue) = (config.workers, config.max_wait, config.queue);
                let hold = workers.saturating_add(queue);
                let waiters = if max_wait.is_zero() { 0 } else { workers };
                let level = if hold >= request_threads {
                    CapacityLevel::Error
                } else if hold > request_threads / 2 {
                    CapacityLevel::Warning
                } else {
                    CapacityLevel::Ok
                };
                CapacityEntry {
                    name: d.name().to_owned(),
                    workers,
                    queue,
                    hold,
                    room_left: request_threads.saturating_sub(hold),
                    timeout: d.timeout(),
                    max_wait,
                    waiters,
                    failures_to_open: failures_to_open(&d.breaker().config()),
                    level,
                }
            })
            .collect();
        let total_hold = entries.iter().fold(0usize, |acc, e| acc.saturating_add(e.hold));
        let report = CapacityReport { request_threads, total_hold, entries };
        let worst = report
            .entries
            .iter()
            .filter(|e| e.level == CapacityLevel::Error)
            .max_by_key(|e| e.hold)
            .map(|e| e.name.clone());
        match worst {
            Some(dependency) => Err(CapacityError { dependency, report }),
            None => Ok(report),
        }
    }
}

/// How one dependency's hold compares with the request pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacityLevel {
    /// At most half of the request threads.
    Ok,
    /// More than half of the request threads.
    Warning,
    /// Every request thread.
    Error,
}

/// One dependency's line in a [`CapacityReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CapacityEntry {
    /// The dependency's name.
    pub name: String,
    /// Its worker threads.
    pub workers: usize,
    /// Its queue bound.
    pub queue: usize,
    /// `workers + queue`: the request threads it can hold while its provider
    /// hangs.
    pub hold: usize,
    /// Request threads left for everything else while it holds that many.
    pub room_left: usize,
    /// How long it holds each of them at most (its timeout).
    pub timeout: Duration,
    /// How long any further caller may wait for room (a short hold), zero
    /// when a full pool refuses at once.
    pub max_wait: Duration,
    /// How many callers may wait for room at once (one per worker, when
    /// `max_wait` is not zero): each holds its request thread for at most
    /// `max_wait`, on top of `hold`.
    pub waiters: usize,
    /// How many failed calls the breaker needs to open, at the worst: a
    /// count window full of successes, or a time window's minimum. When it
    /// exceeds `hold`, one wave of hung calls cannot open it by its rates
    /// alone (the stall rule still can, see the README's "Semantics").
    pub failures_to_open: u32,
    /// The verdict for this dependency.
    pub level: CapacityLevel,
}

/// The result of [`Registry::check_capacity`]: one entry per dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CapacityReport {
    /// The request pool size checked against.
    pub request_threads: usize,
    /// The holds of every dependency added up (all providers hung at once).
    pub total_hold: usize,
    /// One entry per dependency, in registration order.
    pub entries: Vec<CapacityEntry>,
}

/// The failures a breaker needs to open at the worst (see
/// [`CapacityEntry::failures_to_open`]).
fn failures_to_open(config: &BreakerConfig) -> u32 {
    let minimum = config.effective_minimum_calls();
    match config.window_shape() {
        // A window of `n` successes: ceil(n * rate / 100) of them must be failures.
        (false, n) => minimum.max((f64::from(n) * config.failure_rate / 100.0).ceil() as u32),
        (true, _) => minimum,
    }
}

impl CapacityReport {
    /// One line per finding that is not an error: dependencies above half the
    /// request pool, or at all of it with their waiters; breakers that need
    /// more failures to open than their dependency can hold; and the holds
    /// adding up to all of it.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .entries
            .iter()
            .filter(|e| e.level == CapacityLevel::Warning)
            .map(|e| {
                format!(
                    "dependency `{}` can hold {} of {} request threads (workers {} + queue {}), more than half",
                    e.name, e.hold, self.request_threads, e.workers, e.queue
                )
            })
            .collect();
        for e in &self.entries {
            if e.level != CapacityLevel::Error && e.waiters > 0 && e.hold + e.waiters >= self.request_threads
            {
                out.push(format!(
                    "dependency `{}` can hold {} of {} request threads with its {} waiters, for up to {:?} each",
                    e.name,
                    e.hold + e.waiters,
                    self.request_threads,
                    e.waiters,
                    e.max_wait
                ));
            }
            if e.failures_to_open as usize > e.hold {
                out.push(format!(
                    "dependency `{}`: its breaker needs {} failures to open, more than the {} calls it can hold \
                     (workers {} + queue {}); one wave of hung calls cannot open it by its rates",
                    e.name, e.failures_to_open, e.hold, e.workers, e.queue
                ));
            }
        }
        if self.entries.len() > 1 && self.total_hold >= self.request_threads {
            out.push(format!(
                "all dependencies together can hold {} of {} request threads if their providers hang at once",
                self.total_hold, self.request_threads
            ));
        }
        out
    }
}

impl fmt::Display for CapacityReport {
    /// A small table, one dependency a line, for start-up logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "request threads: {}", self.request_threads)?;
        for e in &self.entries {
            writeln!(
                f,
                "  {:<20} workers {:>3} + queue {:>3} = hold {:>3} for <= {:?}, room left {:>3} ({:?}){}",
                e.name,
                e.workers,
                e.queue,
                e.hold,
                e.timeout,
                e.room_left,
                e.level,
                if e.max_wait.is_zero() {
                    String::new()
                } else {
                    format!("; others wait <= {:?}", e.max_wait)
                },
            )?;
        }
        write!(f, "  total hold {}", self.total_hold)?;
        for warning in self.warnings() {
            write!(f, "\n  warning: {warning}")?;
        }
        Ok(())
    }
}

/// A dependency whose hold leaves the request pool no room (see
/// [`Registry::check_capacity`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityError {
    pub(super) dependency: String,
    pub(super) report: CapacityReport,
}

impl CapacityError {
    /// The dependency with the largest hold among those at or above the
    /// request pool size.
    pub fn dependency(&self) -> &str {
        &self.dependency
    }

    /// The full report, warnings included.
    pub fn report(&self) -> &CapacityReport {
        &self.report
    }
}

impl fmt::Display for CapacityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.report.entries.iter().find(|e| e.name == self.dependency);
        match e {
            Some(e) => write!(
                f,
                "dependency `{}` can hold {} of {} request threads (workers {} + queue {}), leaving none for other work",
                e.name, e.hold, self.report.request_threads, e.workers, e.queue
            ),
            None => write!(f, "dependency `{}` can hold every request thread", self.dependency),
        }
    }
}

impl std::error::Error for CapacityError {}
