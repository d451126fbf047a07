//! [`Throttler`]: client-side adaptive throttling (the Google SRE book,
//! "Handling Overload"), and its settings, [`Throttle`]. The rule:
//! [`limit`](crate::limit#adaptive-throttling).
//!
//! # State
//!
//! One lock over the settings and the window; each decision and each record
//! takes it for a few additions. Time comes from the injected
//! [`Clock`] and the draws from a small seeded generator (SplitMix64, as for
//! retry jitter), so a test on a [`ManualClock`](crate::ManualClock) with
//! [`with_clock_and_seed`](Throttler::with_clock_and_seed) is exact.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::clock::{Clock, SystemClock};
use crate::error::ConfigError;
use crate::priority::Priority;
use crate::retry::JitterSource;
use crate::window::TimeWindow;

/// The largest `k`: past it the throttler refuses next to nothing.
const MAX_K: f64 = 100.0;
/// The longest window: one hour.
const MAX_WINDOW: Duration = Duration::from_secs(60 * 60);
/// The most buckets a window is cut into.
const MAX_BUCKETS: u32 = 3600;
/// The shortest bucket.
const MIN_BUCKET: Duration = Duration::from_millis(10);
/// The largest floor of requests.
const MAX_MIN_REQUESTS: u32 = 1_000_000;

/// The settings of an adaptive throttler (see [`Throttler`] for the rule);
/// [`validate`](Self::validate) names the field it refuses (`throttle.k`).
///
/// ```
/// use std::time::Duration;
/// use watertight::limit::Throttle;
///
/// let throttle = Throttle::new().k(1.5).window(Duration::from_secs(10)).buckets(10).min_requests(50);
/// assert!(throttle.validate().is_ok());
/// assert_eq!(Throttle::new().k(0.5).validate().unwrap_err().field(), "throttle.k");
/// ```
///
/// Every setting is a public field named like its setter; with the `serde`
/// feature the type is a file section (`[dependencies.account.throttle]`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
pub struct Throttle {
    /// [`k`](Self::k).
    pub k: f64,
    /// [`window`](Self::window).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration"))]
    pub window: Duration,
    /// [`buckets`](Self::buckets).
    pub buckets: u32,
    /// [`min_requests`](Self::min_requests).
    pub min_requests: u32,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle { k: 2.0, window: Duration::from_secs(30), buckets: 30, min_requests: 20 }
    }
}

impl Throttle {
    /// Every default (see each setter).
    pub fn new() -> Self {
        Self::default()
    }

    /// How many requests per accept the provider may get before calls are
    /// refused: the lower, the sooner and the harder it throttles (1.1 is
    /// aggressive, 2 lets twice the accepts through before it starts). In
    /// [1, 100]. Defaults to 2.
    pub fn k(mut self, k: f64) -> Self {
        self.k = k;
        self
    }

    /// How far back requests and accepts are counted: a provider that
    /// recovers is throttled no more after one window. In [1 s, 1 h].
    /// Defaults to 30 s.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How many buckets the window is cut into: it slides by one bucket at
    /// a time. In [1, 3600], each bucket at least 10 ms long. Defaults to 30
    /// (one-second buckets with the default window).
    pub fn buckets(mut self, buckets: u32) -> Self {
        self.buckets = buckets;
        self
    }

    /// The requests the window must hold before any call is refused: fewer,
    /// and every call goes through whatever the provider answered. At most
    /// 1,000,000 (0: no floor). Defaults to 20.
    pub fn min_requests(mut self, requests: u32) -> Self {
        self.min_requests = requests;
        self
    }

    /// Checks every value against its rule; the first one broken is named.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // `range.contains` refuses NaN as well.
        ConfigError::check((1.0..=MAX_K).contains(&self.k), "throttle.k", "in [1, 100]", self.k)?;
        let window = format_args!("{:?}", self.window);
        let ok = (Duration::from_secs(1)..=MAX_WINDOW).contains(&self.window);
        ConfigError::check(ok, "throttle.window", "at least 1s and at most 1h", window)?;
        let ok = (1..=MAX_BUCKETS).contains(&self.buckets) && self.window / self.buckets >= MIN_BUCKET;
        let rule = "in [1, 3600], each bucket (window / buckets) at least 10ms";
        ConfigError::check(ok, "throttle.buckets", rule, self.buckets)?;
        let ok = self.min_requests <= MAX_MIN_REQUESTS;
        ConfigError::check(ok, "throttle.min_requests", "at most 1000000", self.min_requests)
    }

    fn bucket_ns(&self) -> u64 {
        crate::time::saturating_nanos(self.window / self.buckets).max(1)
    }
}

/// What a throttler's window holds now ([`Throttler::stats`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ThrottleStats {
    /// Requests the provider answered (or failed to answer) in the window.
    pub requests: u64,
    /// Those of them it accepted.
    pub accepts: u64,
    /// The probability a normal call is refused now.
    pub refuse_probability: f64,
}

/// The settings in force, and the answers of the last `window` in a
/// [`TimeWindow`] of `buckets` buckets: `[requests, accepts]`.
struct Ledger {
    config: Throttle,
    /// The clock's reading at tick 0.
    base: Instant,
    bucket_ns: u64,
    window: TimeWindow<2>,
}

impl Ledger {
    fn new(config: Throttle, base: Instant) -> Ledger {
        let window = TimeWindow::new(config.buckets as usize);
        Ledger { base, bucket_ns: config.bucket_ns(), window, config }
    }

    /// Slides the window to `now`, and says which tick that is.
    fn slide(&mut self, now: Instant) -> u64 {
        let tick = crate::time::saturating_nanos(now.saturating_duration_since(self.base)) / self.bucket_ns;
        self.window.advance(tick);
        tick
    }

    /// The probability a normal call is refused now.
    fn probability(&self) -> f64 {
        let [requests, accepts] = self.window.total();
        if requests < u64::from(self.config.min_requests) {
            return 0.0;
        }
        let requests = requests as f64;
        ((requests - self.config.k * accepts as f64) / (requests + 1.0)).max(0.0)
    }
}

/// The probability a call of `priority` is refused when a normal one is
/// refused with `p` (see [`Throttler`]).
fn for_priority(p: f64, priority: Priority) -> f64 {
    match priority {
        Priority::Sheddable => p.sqrt(),
        Priority::Normal => p,
        Priority::Critical => p * p,
    }
}

/// An adaptive throttler: client-side throttling as the Google SRE book
/// tells it. Cheap to clone: clones share one window.
///
/// The rule: [`limit`](crate::limit#adaptive-throttling). Its bend by
/// [`Priority`] has no state of its own, where failsafe-go's prioritized
/// throttler calibrates a shared threshold on a timer.
///
/// Wired into a dependency ([`DependencyBuilder::throttle`](crate::DependencyBuilder::throttle))
/// it decides every attempt first and learns from every attempt the provider
/// answered; alone, [`refuses`](Self::refuses) decides a call and
/// [`record`](Self::record) tells it how the provider answered one.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use watertight::ManualClock;
/// use watertight::dependency::Priority;
/// use watertight::limit::{Throttle, Throttler};
///
/// let clock = ManualClock::new();
/// let throttler = Throttler::with_clock_and_seed(Throttle::new(), Arc::new(clock.clone()), 7)?;
/// // 100 answers, 40 of them accepted: a normal call is refused with (100 - 2 x 40) / 101.
/// for i in 0..100 {
///    throttler.record(i % 5 < 2);
/// }
/// assert!((throttler.stats().refuse_probability - 20.0 / 101.0).abs() < 1e-12);
/// // One window later the failures are forgotten.
/// clock.advance(Duration::from_secs(30));
/// assert_eq!(throttler.stats().refuse_probability, 0.0);
/// assert!(!throttler.refuses(Priority::Sheddable));
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Throttler {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    random: JitterSource,
    /// Whether a dependency has it in force (its configuration's `throttle`
    /// is set); one made alone always is. Relaxed: it publishes nothing.
    on: AtomicBool,
    ledger: Mutex<Ledger>,
}

impl Throttler {
    /// A throttler on the system clock, its draws seeded at random.
    pub fn new(config: Throttle) -> Result<Throttler, ConfigError> {
        Self::build(config, Arc::new(SystemClock), JitterSource::new())
    }

    /// A throttler reading time from `clock`, its draws seeded at random.
    pub fn with_clock(config: Throttle, clock: Arc<dyn Clock>) -> Result<Throttler, ConfigError> {
        Self::build(config, clock, JitterSource::new())
    }

    /// A throttler reading time from `clock` and drawing from a generator
    /// seeded with `seed`: the same calls make the same decisions.
    pub fn with_clock_and_seed(
        config: Throttle,
        clock: Arc<dyn Clock>,
        seed: u64,
    ) -> Result<Throttler, ConfigError> {
        Self::build(config, clock, JitterSource::with_seed(seed))
    }

    fn build(config: Throttle, clock: Arc<dyn Clock>, random: JitterSource) -> Result<Self, ConfigError> {
        config.validate()?;
        let ledger = Mutex::new(Ledger::new(config, clock.now()));
        Ok(Throttler { inner: Arc::new(Inner { clock, random, on: AtomicBool::new(true), ledger }) })
    }

    /// A dependency's throttler: always built, in force while `config` is set.
    pub(crate) fn for_dependency(
        config: Option<Throttle>,
        clock: Arc<dyn Clock>,
        seed: Option<u64>,
    ) -> Result<Throttler, ConfigError> {
        let random = seed.map_or_else(JitterSource::new, JitterSource::with_seed);
        let throttler = Self::build(config.clone().unwrap_or_default(), clock, random)?;
        throttler.inner.on.store(config.is_some(), Ordering::Relaxed);
        Ok(throttler)
    }

    /// Whether a call of `priority` is refused now: drawn with the window's
    /// probability, bent by the priority (see the type's docs). A refusal
    /// is not a request; nothing is recorded either way.
    pub fn refuses(&self, priority: Priority) -> bool {
        self.refuses_at(self.inner.clock.now(), priority)
    }

    /// [`refuses`](Self::refuses) at `now`, a time of the throttler's clock
    /// the caller has already read.
    pub(crate) fn refuses_at(&self, now: Instant, priority: Priority) -> bool {
        let p = {
            let mut ledger = self.inner.ledger.lock();
            ledger.slide(now);
            ledger.probability()
        };
        p > 0.0 && self.inner.random.fraction() < for_priority(p, priority)
    }

    /// Records one request the provider answered: `accepted` unless it was
    /// a failure or a timeout.
    pub fn record(&self, accepted: bool) {
        self.record_at(self.inner.clock.now(), accepted);
    }

    /// [`record`](Self::record) at `now`, a time of the throttler's clock.
    pub(crate) fn record_at(&self, now: Instant, accepted: bool) {
        let mut ledger = self.inner.ledger.lock();
        let tick = ledger.slide(now);
        ledger.window.add(tick, [1, u64::from(accepted)]);
    }

    /// The window's counts and the probability a normal call is refused now.
    pub fn stats(&self) -> ThrottleStats {
        let mut ledger = self.inner.ledger.lock();
        ledger.slide(self.inner.clock.now());
        let [requests, accepts] = ledger.window.total();
        ThrottleStats { requests, accepts, refuse_probability: ledger.probability() }
    }

    /// The settings in force.
    pub fn config(&self) -> Throttle {
        self.inner.ledger.lock().config.clone()
    }

    /// Changes the settings while calls run. A new `k` or `min_requests`
    /// applies to the next decision, on the counts the window holds; a new
    /// `window` or `buckets` starts an empty window (its buckets would mean
    /// other times).
    pub fn reconfigure(&self, config: Throttle) -> Result<(), ConfigError> {
        config.validate()?;
        let mut ledger = self.inner.ledger.lock();
        if (config.window, config.buckets) == (ledger.config.window, ledger.config.buckets) {
            ledger.config = config;
        } else {
            *ledger = Ledger::new(config, ledger.base);
        }
        Ok(())
    }

    /// Whether it is in force (a dependency's may be off).
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.inner.on.load(Ordering::Relaxed)
    }

    /// A dependency's live change: `Some` reconfigures and turns it on
    /// (keeping what the window holds, see [`reconfigure`](Self::reconfigure)),
    /// `None` turns it off.
    pub(crate) fn set(&self, config: Option<Throttle>) -> Result<(), ConfigError> {
        if let Some(config) = &config {
            self.reconfigure(config.clone())?;
        }
        self.inner.on.store(config.is_some(), Ordering::Relaxed);
        Ok(())
    }

    /// The settings, when in force.
    pub(crate) fn in_force(&self) -> Option<Throttle> {
        self.is_on().then(|| self.config())
    }
}

impl fmt::Debug for Throttler {
    /// Never blocks: prints `<locked>` while the window is locked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.inner.ledger.try_lock() {
            Some(l) => f
                .debug_struct("Throttler")
                .field("config", &l.config)
                .field("requests", &l.window.total()[0])
                .field("accepts", &l.window.total()[1])
                .finish(),
            None => f.write_str("Throttler(<locked>)"),
        }
    }
}

#[cfg(test)]
#[path = "throttle_tests.rs"]
mod tests;
