//! The capacity rule: how many request threads each dependency can hold
//! while its provider hangs ([`Registry::check_capacity`]), and the report
//! that says so.

use std::fmt;
use std::time::Duration;

use std::collections::BTreeMap;

use super::Registry;
use crate::breaker::BreakerConfig;
use crate::dependency::{CallShape, DependencyConfig};
use crate::error::ConfigError;
use crate::retry::Retry;

impl Registry {
    /// Checks every dependency's worst-case hold on a request pool: its size
    /// alone (`check_capacity(16)`), or a [`RequestThreads`] that also says
    /// the share reserved for other routes and each request's budget. The
    /// rule, its findings and their levels: [`registry`](crate::registry#sizing).
    ///
    /// The rule takes the worst case (no breaker open yet, no admission by
    /// deadline) because that is what a hung provider produces before the
    /// breaker's window has filled. Waiters for room are short holds: reported
    /// ([`CapacityEntry::waiters`]), not counted in `hold`.
    ///
    /// `Ok` carries the report, warnings included; `Err` names the dependency
    /// with the largest hold among those that can take every request thread,
    /// and carries the report too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use watertight::{Dependency, Registry, breaker::BreakerConfig};
    /// use watertight::dependency::CallShape;
    /// use watertight::registry::RequestThreads;
    ///
    /// let registry = Registry::new();
    /// let fraud = Dependency::builder("fraud").workers(10).queue(5);
    /// // A breaker one wave of hung calls can open: 10 failures in a window of 20.
    /// registry.register(fraud.breaker(BreakerConfig::count_based(20).minimum_calls(10)).build()?)?;
    /// // Sent fire-and-forget: it holds no request thread.
    /// let audit = Dependency::builder("audit").workers(2).queue(64).calls(CallShape::Detached);
    /// registry.register(audit.breaker(BreakerConfig::count_based(20).minimum_calls(10)).build()?)?;
    /// let refused = registry.check_capacity(15).unwrap_err();
    /// assert_eq!(refused.path(), "fraud");
    /// assert_eq!(refused.field(), "capacity");
    /// assert_eq!(registry.capacity_report(15).entries[0].room_left, 0);
    /// assert!(registry.check_capacity(40).unwrap().warnings().is_empty());
    /// // 2 of 32 threads reserved: fraud's 15 are checked against 30.
    /// let pool = RequestThreads::new(32).reserved(2).request_budget(Duration::from_millis(800));
    /// assert_eq!(registry.check_capacity(pool).unwrap().available(), 30);
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn check_capacity(&self, pool: impl Into<RequestThreads>) -> Result<CapacityReport, ConfigError> {
        match rule(&self.configs(), pool.into()) {
            (report, Some(worst)) => Err(refusal(&report, &worst)),
            (report, None) => Ok(report),
        }
    }

    /// The report of [`check_capacity`](Self::check_capacity), also when
    /// the rule refuses: each entry's level says where it stands.
    pub fn capacity_report(&self, pool: impl Into<RequestThreads>) -> CapacityReport {
        rule(&self.configs(), pool.into()).0
    }

    /// Every dependency's name and configuration, in registration order.
    pub(super) fn configs(&self) -> Vec<(String, DependencyConfig)> {
        self.dependencies().iter().map(|d| (d.name().to_owned(), d.config())).collect()
    }
}

/// The request pool the capacity rule checks against: its size, the share
/// reserved for routes that call no provider, and each request's budget.
/// A plain size converts into one (`check_capacity(16)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestThreads {
    /// The request pool's size.
    pub threads: usize,
    /// The threads reserved for requests that call no provider (the
    /// server's [`Reserve`](crate::server::Reserve));
    /// the dependencies share the rest.
    pub reserved: usize,
    /// Each request's time budget, if known: a dependency whose timeout is
    /// longer is warned about.
    pub request_budget: Option<Duration>,
}

impl RequestThreads {
    /// A pool of `threads` request threads, nothing reserved, no budget.
    pub fn new(threads: usize) -> Self {
        RequestThreads { threads, reserved: 0, request_budget: None }
    }

    /// `threads` of them reserved for requests that call no provider.
    /// Defaults to 0.
    pub fn reserved(mut self, threads: usize) -> Self {
        self.reserved = threads;
        self
    }

    /// Each request's time budget. Defaults to none: no timeout is compared
    /// with it.
    pub fn request_budget(mut self, budget: Duration) -> Self {
        self.request_budget = Some(budget);
        self
    }

    /// The threads the dependencies share: `threads - reserved`.
    pub fn available(&self) -> usize {
        self.threads.saturating_sub(self.reserved)
    }
}

impl From<usize> for RequestThreads {
    fn from(threads: usize) -> Self {
        RequestThreads::new(threads)
    }
}

/// The capacity rule over `deps` (name and configuration, in registration
/// order) for `pool`: what [`Registry::check_capacity`] reports, and what
/// [`Registry::reconfigure`] checks a change with before making it. With the
/// report, the dependency with the largest hold of those over the rule.
pub(super) fn rule(
    deps: &[(String, DependencyConfig)],
    pool: RequestThreads,
) -> (CapacityReport, Option<String>) {
    let available = pool.available();
    let entries: Vec<CapacityEntry> = deps
        .iter()
        .map(|(name, config)| {
            // In caller-thread mode: the permits, and no queue.
            let (workers, max_wait, queue) = (config.workers, config.max_wait, config.queue);
            let detached = config.calls == CallShape::Detached;
            let hold = if detached { 0 } else { workers.saturating_add(queue) };
            // A spawn is admitted or refused at once: nobody waits for room.
            let waiters = if max_wait.is_zero() || detached { 0 } else { workers };
            let level = if detached {
                CapacityLevel::Ok
            } else if hold >= available {
                CapacityLevel::Error
            } else if hold > available / 2 {
                CapacityLevel::Warning
            } else {
                CapacityLevel::Ok
            };
            CapacityEntry {
                name: name.clone(),
                calls: config.calls.clone(),
                workers,
                queue,
                hold,
                room_left: available.saturating_sub(hold),
                timeout: config.timeout,
                retry_hold: retry_hold(&config.retry, config.timeout),
                max_wait,
                waiters,
                failures_to_open: failures_to_open(&config.breaker),
                throttled: config.throttle.is_some(),
                level,
            }
        })
        .collect();
    let report = CapacityReport {
        request_threads: pool.threads,
        reserved: pool.reserved,
        request_budget: pool.request_budget,
        total_hold: total_hold(&entries),
        entries,
    };
    let worst = report
        .entries
        .iter()
        .filter(|e| e.level == CapacityLevel::Error)
        .max_by_key(|e| e.hold)
        .map(|e| e.name.clone());
    (report, worst)
}

/// Every hold added up, a fan-out group's once (its largest leg's): the
/// request threads all providers hung at once can take.
fn total_hold(entries: &[CapacityEntry]) -> usize {
    let mut groups: BTreeMap<&str, usize> = BTreeMap::new();
    let mut total = 0usize;
    for e in entries {
        match e.calls.fan_out_group() {
            Some(group) => {
                let largest = groups.entry(group).or_default();
                *largest = (*largest).max(e.hold);
            }
            None => total = total.saturating_add(e.hold),
        }
    }
    groups.values().fold(total, |acc, hold| acc.saturating_add(*hold))
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
    /// How it is called, as declared: what its hold counts.
    pub calls: CallShape,
    /// Its worker threads.
    pub workers: usize,
    /// Its queue bound.
    pub queue: usize,
    /// `workers + queue`: the request threads it can hold while its provider
    /// hangs; 0 when it is called detached only.
    pub hold: usize,
    /// Request threads left for everything else (after the reserve) while
    /// it holds that many.
    pub room_left: usize,
    /// How long it holds each of them at most (its timeout).
    pub timeout: Duration,
    /// How long a [`retry`](crate::CallBuilder::retry)ing caller can hold its
    /// request thread at most, when it gives the call no deadline of its own:
    /// every attempt's timeout and every backoff between them, or the retry's
    /// overall timeout when that is shorter. `None` when retries are off
    /// (`max_attempts` 1).
    pub retry_hold: Option<Duration>,
    /// How long any further caller may wait for room (a short hold), zero
    /// when a full pool refuses at once.
    pub max_wait: Duration,
    /// How many callers wait for room once the line stands (one round, a
    /// caller per worker, when `max_wait` is not zero; a burst that drains
    /// within `max_wait` may briefly line up more): each holds its request
    /// thread for at most `max_wait`, on top of `hold`.
    pub waiters: usize,
    /// How many failed calls the breaker needs to open, at the worst: a
    /// count window full of successes, or a time window's minimum.
    pub failures_to_open: u32,
    /// Whether an adaptive throttler sheds its calls while its provider
    /// fails ([`DependencyBuilder::throttle`](crate::DependencyBuilder::throttle)):
    /// a share of them is refused at once, holding no request thread.
    pub throttled: bool,
    /// The verdict for this dependency.
    pub level: CapacityLevel,
}

/// The result of [`Registry::check_capacity`]: one entry per dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CapacityReport {
    /// The request pool's size.
    pub request_threads: usize,
    /// The threads of it reserved for requests that call no provider; the
    /// holds are compared with the rest ([`available`](Self::available)).
    pub reserved: usize,
    /// Each request's time budget, when the check was told it.
    pub request_budget: Option<Duration>,
    /// The holds of every dependency added up, a fan-out group's once (all
    /// providers hung at once).
    pub total_hold: usize,
    /// One entry per dependency, in registration order.
    pub entries: Vec<CapacityEntry>,
}

/// The longest a retried call can hold its caller (see
/// [`CapacityEntry::retry_hold`]). Past 64 retries the backoff is taken at
/// its 64th value, a lower bound (it only grows), which is all a warning needs.
fn retry_hold(retry: &Retry, timeout: Duration) -> Option<Duration> {
    let attempts = retry.max_attempts();
    if attempts <= 1 {
        return None;
    }
    let retries = attempts - 1;
    let mut hold = timeout.saturating_mul(attempts);
    for n in 1..=retries.min(64) {
        hold = hold.saturating_add(retry.backoff_cap(n));
    }
    hold = hold.saturating_add(retry.backoff_cap(64).saturating_mul(retries.saturating_sub(64)));
    Some(retry.overall_timeout().map_or(hold, |overall| hold.min(overall)))
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
    /// The request threads the dependencies share: `request_threads -
    /// reserved`, what every hold is compared with.
    pub fn available(&self) -> usize {
        self.request_threads.saturating_sub(self.reserved)
    }

    /// `of 32 request threads`, or `of the 30 request threads left after a
    /// reserve of 2 (of 32)`.
    fn of_threads(&self) -> String {
        if self.reserved == 0 {
            format!("of {} request threads", self.request_threads)
        } else {
            format!(
                "of the {} request threads left after a reserve of {} (of {})",
                self.available(),
                self.reserved,
                self.request_threads
            )
        }
    }

    /// One line per finding that is not an error ([sizing](crate::registry#sizing)).
    pub fn warnings(&self) -> Vec<String> {
        let (available, of) = (self.available(), self.of_threads());
        let over_half = self.entries.iter().filter(|e| e.level == CapacityLevel::Warning);
        let mut out: Vec<String> = over_half
            .map(|e| {
                let (name, hold, workers, queue) = (&e.name, e.hold, e.workers, e.queue);
                format!(
                    "dependency `{name}` can hold {hold} {of} (workers {workers} + queue {queue}), more than half"
                )
            })
            .collect();
        for e in &self.entries {
            let (name, workers, queue, waiters, timeout) =
                (&e.name, e.workers, e.queue, e.waiters, e.timeout);
            if e.level != CapacityLevel::Error && waiters > 0 && e.hold + waiters >= available {
                out.push(format!(
                    "dependency `{name}` can hold {} {of} with its {waiters} waiters, for up to {:?} each \
                     (workers {workers} + queue {queue} + {waiters} waiters)",
                    e.hold + waiters,
                    e.max_wait
                ));
            }
            // Detached calls fill the pool too: the breaker must open within
            // what the pool (not the request pool) can hold.
            let places = workers.saturating_add(queue);
            if e.failures_to_open as usize > places {
                // Before the provider has answered: its normal latency is unknown.
                let stuck = crate::dependency::stuck_threshold(None, e.timeout, e.timeout);
                let quarter = timeout / 4;
                let why = if stuck > quarter {
                    let floor = stuck / 2; // the least hang threshold, doubled
                    format!(
                        "the stuck threshold's floor, twice the least hang threshold of {floor:?}, above a \
                         quarter of the timeout {timeout:?} ({quarter:?})"
                    )
                } else {
                    format!("the stuck threshold: a quarter of the timeout {timeout:?}")
                };
                out.push(format!(
                    "dependency `{name}`: its breaker opens by its rates only after {} failures, more than the \
                     {places} calls it can hold (workers {workers} + queue {queue}): a hang is cut by the stuck \
                     rule instead, which opens it once every worker has been inside one call for {stuck:?} \
                     ({why}; once the provider has answered, twice its normal latency if that is longer)",
                    e.failures_to_open
                ));
            }
            let Some(budget) = self.request_budget.filter(|_| e.calls != CallShape::Detached) else {
                continue;
            };
            if timeout > budget {
                out.push(format!(
                    "dependency `{name}`: its timeout {timeout:?} is longer than the request budget {budget:?}: \
                     its callers are cut short by the budget, so a hung provider holds each request thread for \
                     the whole budget; their timeouts are judged by the cut-short rule (a failure only once the \
                     provider had the call longer than its normal latency), so its breaker opens later than its \
                     timeout says"
                ));
            }
            if let Some(hold) = e.retry_hold.filter(|hold| *hold > budget) {
                out.push(format!(
                    "dependency `{name}`: a retried call can hold its request thread for {hold:?} (its attempts' \
                     timeouts of {timeout:?} and backoffs, or its overall timeout), outlasting the request \
                     budget {budget:?}: give each retried call the request's deadline, or set \
                     retry.overall_timeout within the budget"
                ));
            }
        }
        let holds: Vec<String> =
            self.entries.iter().filter(|e| e.hold > 0).map(|e| format!("`{}` {}", e.name, e.hold)).collect();
        if holds.len() > 1 && self.total_hold >= available {
            let legs = self.entries.iter().any(|e| e.calls.fan_out_group().is_some());
            out.push(format!(
                "all dependencies together can hold {} {of} if their providers hang at once ({}{})",
                self.total_hold,
                holds.join(", "),
                if legs { "; a fan-out group's legs once, by the largest" } else { "" }
            ));
        }
        out
    }
}

impl fmt::Display for CapacityReport {
    /// A small table, one dependency a line, for start-up logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request threads: {}", self.request_threads)?;
        if self.reserved > 0 {
            write!(f, " ({} reserved, {} for the dependencies)", self.reserved, self.available())?;
        }
        if let Some(budget) = self.request_budget {
            write!(f, ", request budget {budget:?}")?;
        }
        writeln!(f)?;
        for e in &self.entries {
            let calls = match &e.calls {
                CallShape::Blocking => String::new(),
                CallShape::Detached => " (detached)".to_owned(),
                CallShape::FanOut(group) => format!(" (fan-out {group})"),
            };
            let waits = match e.max_wait {
                wait if wait.is_zero() || e.waiters == 0 => String::new(),
                wait => format!("; others wait <= {wait:?}"),
            };
            let throttled = if e.throttled { "; throttled" } else { "" };
            let (name, workers, queue, hold, timeout, room, level) =
                (&e.name, e.workers, e.queue, e.hold, e.timeout, e.room_left, e.level);
            writeln!(
                f,
                "  {name:<20} workers {workers:>3} + queue {queue:>3} = hold {hold:>3} for <= {timeout:?}, room \
                 left {room:>3} ({level:?}){calls}{waits}{throttled}"
            )?;
        }
        write!(f, "  total hold {}", self.total_hold)?;
        for warning in self.warnings() {
            write!(f, "\n  warning: {warning}")?;
        }
        Ok(())
    }
}

/// The capacity rule's refusal of `dependency`, an entry of `report`.
pub(super) fn refusal(report: &CapacityReport, dependency: &str) -> ConfigError {
    let message = match report.entries.iter().find(|e| e.name == dependency) {
        Some(e) => format!(
            "dependency `{dependency}` can hold {} {} (workers {} + queue {}), leaving none for other work",
            e.hold,
            report.of_threads(),
            e.workers,
            e.queue
        ),
        None => format!("dependency `{dependency}` can hold every request thread"),
    };
    ConfigError::capacity(dependency, message)
}
