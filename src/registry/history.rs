//! The registry's rolling history: one [`HistoryPoint`] a second for each
//! dependency, the last 300 (five minutes), taken by a sampler thread that
//! [`Registry::start_history`] starts.
//!
//! The thread only reads snapshots and the two clocks; what a point and a
//! summary are is [`History::sample`]'s plain arithmetic over snapshots and
//! the times it is handed, so tests feed it snapshots with explicit times and
//! never sleep.
//!
//! # The sampler thread
//!
//! It holds the registry's shared state only through `Weak` references. Each
//! tick it upgrades them, copies the list of dependencies, samples, and drops
//! every strong reference (the copied handles too, which would keep their
//! workers alive) before it sleeps. So it never keeps a registry or a
//! dependency alive: once the last [`Registry`] handle is dropped, the next
//! upgrade fails and the thread returns, at most one interval later. A panic
//! inside a tick (there is none to expect: snapshots and the history's
//! arithmetic do not panic) is caught and logged, and sampling goes on.

use std::collections::VecDeque;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Mutex, RwLock};

use super::Registry;
use crate::breaker::State;
use crate::dependency::{CallCounts, Dependency, DependencySnapshot, Percentiles, RecordedKind};
use crate::error::{Outcome, Rejection};
use crate::shadow::{Policy, ShadowCounts};

/// Points kept per dependency: five minutes at one a second.
const HISTORY_POINTS: usize = 300;
/// How often the sampler samples.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// One dependency over one interval (about a second) of the history.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HistoryPoint {
    /// The end of the interval, by the wall clock.
    pub at: SystemTime,
    /// The time it covers, from the sample before it: about a second.
    pub interval: Duration,
    /// Attempts by outcome within the interval ([`CallCounts::since`]).
    pub calls: CallCounts,
    /// The breaker's state at its end.
    pub state: State,
    /// The breaker's failure rate at its end, `None` like
    /// [`DependencySnapshot::failure_rate`].
    pub failure_rate: Option<f64>,
    /// The call time's median and 99th percentile at its end, over the
    /// dependency's recent window (see [`DependencySnapshot::latency`]).
    pub latency: Percentiles,
    /// The pool's workers at its end.
    pub workers: usize,
    /// Workers running a job at its end.
    pub busy: usize,
    /// Jobs queued at its end.
    pub queued: usize,
}

impl HistoryPoint {
    /// [`at`](Self::at) in milliseconds since the Unix epoch (0 before it).
    pub fn at_millis(&self) -> u64 {
        crate::dependency::millis_since_epoch(self.at)
    }

    /// Attempts ending in `outcome` per second of the interval.
    pub fn per_second(&self, outcome: Outcome) -> f64 {
        rate(self.calls.get(outcome), self.interval)
    }

    /// Attempts of every outcome per second of the interval.
    pub fn attempts_per_second(&self) -> f64 {
        rate(self.calls.total(), self.interval)
    }
}

fn rate(count: u64, over: Duration) -> f64 {
    if over.is_zero() { 0.0 } else { count as f64 / over.as_secs_f64() }
}

/// One dependency's points, oldest first, from [`Registry::history`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DependencyHistory {
    /// The dependency's name.
    pub name: String,
    /// Its points, oldest first; at most 300, one a second.
    pub points: Vec<HistoryPoint>,
}

/// The points of every dependency sampled so far, and what each last
/// sample's counters were.
#[derive(Debug, Default)]
pub(crate) struct History {
    tracks: Vec<Track>,
}

#[derive(Debug)]
struct Track {
    name: String,
    /// When the last sample was taken and what its counters were: the start
    /// of the next interval.
    last: Option<(Instant, CallCounts, ShadowCounts)>,
    points: VecDeque<HistoryPoint>,
}

impl History {
    /// Takes in `snapshots`, read at `now` (`at` by the wall clock): for each
    /// dependency sampled before, one point over the time since, and the
    /// summary to record in its ring if calls were rejected or timed out in
    /// it. The result is in `snapshots`' order. A dependency's first sample
    /// only starts its first interval; a sample at or before the last one's
    /// instant changes nothing.
    pub(crate) fn sample(
        &mut self,
        now: Instant,
        at: SystemTime,
        snapshots: &[DependencySnapshot],
    ) -> Vec<Option<RecordedKind>> {
        snapshots.iter().map(|s| self.track(&s.name).sample(now, at, s)).collect()
    }

    fn track(&mut self, name: &str) -> &mut Track {
        match self.tracks.iter().position(|t| t.name == name) {
            Some(i) => &mut self.tracks[i],
            None => {
                self.tracks.push(Track { name: name.to_owned(), last: None, points: VecDeque::new() });
                self.tracks.last_mut().expect("just pushed")
            }
        }
    }

    /// The points of `name`, oldest first (none if never sampled).
    pub(crate) fn points(&self, name: &str) -> Vec<HistoryPoint> {
        self.tracks
            .iter()
            .find(|t| t.name == name)
            .map_or_else(Vec::new, |t| t.points.iter().cloned().collect())
    }
}

impl Track {
    fn sample(&mut self, now: Instant, at: SystemTime, snap: &DependencySnapshot) -> Option<RecordedKind> {
        let Some((then, before, shadow_before)) = self.last else {
            self.last = Some((now, snap.calls, snap.shadow_refused));
            return None;
        };
        let interval = now.saturating_duration_since(then);
        if interval.is_zero() {
            return None;
        }
        self.last = Some((now, snap.calls, snap.shadow_refused));
        let calls = snap.calls.since(&before);
        if self.points.len() == HISTORY_POINTS {
            self.points.pop_front();
        }
        self.points.push_back(HistoryPoint {
            at,
            interval,
            calls,
            state: snap.state,
            failure_rate: snap.failure_rate,
            latency: snap.latency.call,
            workers: snap.pool.workers,
            busy: snap.pool.busy,
            queued: snap.pool.queued,
        });
        let rejected: Vec<(Rejection, u64)> =
            Rejection::ALL.into_iter().map(|r| (r, calls.get(r.outcome()))).filter(|&(_, n)| n > 0).collect();
        let shadow_refused: Vec<(Policy, u64)> = snap
            .shadow_refused
            .iter()
            .map(|(p, n)| (p, n.saturating_sub(shadow_before.get(p))))
            .filter(|&(_, n)| n > 0)
            .collect();
        (calls.timed_out > 0 || !rejected.is_empty() || !shadow_refused.is_empty()).then_some(
            RecordedKind::Summary { over: interval, timed_out: calls.timed_out, rejected, shadow_refused },
        )
    }
}

/// What a registry shares with its sampler.
#[derive(Debug, Default)]
pub(super) struct HistoryState {
    history: Mutex<History>,
    /// Set by the first `start_history`.
    started: AtomicBool,
}

impl Registry {
    /// Starts sampling every registered dependency once a second, on a
    /// thread named `watertight-history`, into a rolling history of the last
    /// five minutes ([`history`](Self::history)). Each second with
    /// rejections or timeouts is also recorded as a summary in the
    /// dependency's own ring
    /// ([`recent_events`](crate::Dependency::recent_events)).
    ///
    /// Nothing is sampled until this is called; a second call starts
    /// nothing. The thread holds the registry weakly (see the module docs).
    /// A dependency registered in two sampling registries gets each second's
    /// summary twice.
    ///
    /// `Err` only when the thread could not be spawned; a later call tries
    /// again.
    ///
    /// ```
    /// use watertight::{Dependency, Registry};
    ///
    /// let registry = Registry::new();
    /// registry.register(Dependency::builder("fraud").workers(2).build()?)?;
    /// registry.start_history()?;
    /// // One point a second from now on, for the last five minutes.
    /// assert_eq!(registry.history()[0].name, "fraud");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start_history(&self) -> io::Result<()> {
        self.start_history_every(SAMPLE_EVERY).map(drop)
    }

    /// [`start_history`](Self::start_history) sampling every `every`; the
    /// thread's handle when this call started it.
    fn start_history_every(&self, every: Duration) -> io::Result<Option<JoinHandle<()>>> {
        if self.history.started.swap(true, Ordering::AcqRel) {
            return Ok(None);
        }
        let deps = Arc::downgrade(&self.deps);
        let state = Arc::downgrade(&self.history);
        let spawned = thread::Builder::new()
            .name("watertight-history".into())
            .spawn(move || run_sampler(&deps, &state, every));
        match spawned {
            Ok(handle) => Ok(Some(handle)),
            Err(e) => {
                self.history.started.store(false, Ordering::Release);
                Err(e)
            }
        }
    }

    /// Every registered dependency's history, in registration order, oldest
    /// point first: empty until [`start_history`](Self::start_history) has
    /// run for a second. A copy, taken under the history's lock (which the
    /// sampler holds only to add a point).
    pub fn history(&self) -> Vec<DependencyHistory> {
        let deps = self.dependencies();
        let history = self.history.history.lock();
        deps.iter()
            .map(|d| DependencyHistory { name: d.name().to_owned(), points: history.points(d.name()) })
            .collect()
    }
}

/// The sampler's loop: one tick every `every`, until the registry is gone.
fn run_sampler(deps: &Weak<RwLock<Vec<Dependency>>>, state: &Weak<HistoryState>, every: Duration) {
    let mut next = Instant::now();
    loop {
        {
            let (Some(deps), Some(state)) = (deps.upgrade(), state.upgrade()) else { return };
            let list: Vec<Dependency> = deps.read().clone();
            drop(deps);
            if catch_unwind(AssertUnwindSafe(|| tick(&list, &state.history))).is_err() {
                log::error!("history sampler: a sample panicked; sampling goes on");
            }
            // `list` and `state` are dropped here: nothing is held while asleep.
        }
        next += every;
        let now = Instant::now();
        if next < now {
            // Behind (a paused process, a slow sample): the next interval starts now.
            next = now;
        }
        thread::sleep(next - now);
    }
}

/// One sample of `deps` into `history`, and the summaries into their rings.
fn tick(deps: &[Dependency], history: &Mutex<History>) {
    let snapshots: Vec<DependencySnapshot> = deps.iter().map(Dependency::snapshot).collect();
    let (now, at) = (Instant::now(), SystemTime::now());
    let summaries = history.lock().sample(now, at, &snapshots);
    for (dep, summary) in deps.iter().zip(summaries) {
        if let Some(kind) = summary {
            dep.record_event(at, kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn snapshot(name: &str) -> DependencySnapshot {
        let dep = Dependency::builder(name).workers(1).build().expect("a dependency");
        let snap = dep.snapshot();
        dep.shutdown(Duration::from_secs(1));
        snap
    }

    /// Explicit times on both clocks, in milliseconds from a fixed start.
    struct Times {
        base: Instant,
    }

    impl Times {
        fn at(&self, ms: u64) -> (Instant, SystemTime) {
            (self.base + Duration::from_millis(ms), UNIX_EPOCH + Duration::from_millis(1_000_000 + ms))
        }
    }

    fn times() -> Times {
        Times { base: Instant::now() }
    }

    #[test]
    fn a_point_is_the_counters_delta_over_the_interval() {
        let t = times();
        let mut history = History::default();
        let mut snap = snapshot("fraud");
        let (now, at) = t.at(0);
        assert_eq!(history.sample(now, at, std::slice::from_ref(&snap)), vec![None], "the first only starts");
        assert!(history.points("fraud").is_empty());

        snap.calls.successful = 10;
        snap.calls.failed = 2;
        snap.calls.not_permitted = 3;
        snap.calls.queue_full = 1;
        snap.calls.timed_out = 4;
        snap.state = State::Open;
        snap.failure_rate = Some(60.0);
        snap.pool.busy = 1;
        let (now, at) = t.at(1_000);
        let summaries = history.sample(now, at, std::slice::from_ref(&snap));
        assert_eq!(
            summaries,
            vec![Some(RecordedKind::Summary {
                over: Duration::from_secs(1),
                timed_out: 4,
                rejected: vec![(Rejection::NotPermitted, 3), (Rejection::QueueFull, 1)],
                shadow_refused: Vec::new(),
            })]
        );
        let points = history.points("fraud");
        assert_eq!(points.len(), 1);
        let p = &points[0];
        assert_eq!((p.at_millis(), p.interval), (1_001_000, Duration::from_secs(1)));
        assert_eq!((p.calls.successful, p.calls.failed, p.calls.total()), (10, 2, 20));
        assert_eq!((p.state, p.failure_rate, p.busy, p.workers), (State::Open, Some(60.0), 1, 1));
        assert_eq!(p.per_second(Outcome::Successful), 10.0);
        assert_eq!(p.attempts_per_second(), 20.0);

        // Two seconds later with only successes: half the rate, no summary.
        snap.calls.successful = 30;
        let (now, at) = t.at(3_000);
        assert_eq!(history.sample(now, at, std::slice::from_ref(&snap)), vec![None]);
        let p = history.points("fraud")[1].clone();
        assert_eq!(p.interval, Duration::from_secs(2));
        assert_eq!(p.calls.total(), 20);
        assert_eq!(p.per_second(Outcome::Successful), 10.0);
        assert_eq!(p.per_second(Outcome::NotPermitted), 0.0);

        // Nothing new: a point of zeros, still no summary.
        let (now, at) = t.at(4_000);
        assert_eq!(history.sample(now, at, std::slice::from_ref(&snap)), vec![None]);
        assert_eq!(history.points("fraud")[2].calls, CallCounts::default());
    }

    #[test]
    fn a_second_with_shadow_refusals_is_summarized() {
        let t = times();
        let mut history = History::default();
        let counters = crate::shadow::ShadowCounters::default();
        let mut snap = snapshot("fraud");
        let (now, at) = t.at(0);
        assert_eq!(history.sample(now, at, std::slice::from_ref(&snap)), vec![None]);
        for _ in 0..3 {
            counters.add(Policy::Breaker);
        }
        counters.add(Policy::Throttle);
        snap.shadow_refused = counters.load();
        let (now, at) = t.at(1_000);
        let summaries = history.sample(now, at, std::slice::from_ref(&snap));
        assert_eq!(
            summaries,
            vec![Some(RecordedKind::Summary {
                over: Duration::from_secs(1),
                timed_out: 0,
                rejected: Vec::new(),
                shadow_refused: vec![(Policy::Throttle, 1), (Policy::Breaker, 3)],
            })],
            "only what the second added, in Policy::ALL's order"
        );
        let (now, at) = t.at(2_000);
        assert_eq!(history.sample(now, at, std::slice::from_ref(&snap)), vec![None], "nothing new");
    }

    #[test]
    fn a_sample_at_the_same_instant_changes_nothing() {
        let t = times();
        let mut history = History::default();
        let mut snap = snapshot("fraud");
        let (now, at) = t.at(0);
        history.sample(now, at, std::slice::from_ref(&snap));
        snap.calls.timed_out = 5;
        assert_eq!(history.sample(now, at, std::slice::from_ref(&snap)), vec![None]);
        assert!(history.points("fraud").is_empty());
        // The five are in the next interval, measured from the first sample.
        let (now, at) = t.at(500);
        let summary = history.sample(now, at, std::slice::from_ref(&snap));
        assert!(
            matches!(&summary[0], Some(RecordedKind::Summary { timed_out: 5, over, .. }) if over.as_millis() == 500)
        );
        assert_eq!(history.points("fraud")[0].per_second(Outcome::TimedOut), 10.0);
    }

    #[test]
    fn the_history_keeps_the_last_five_minutes_per_dependency() {
        let t = times();
        let mut history = History::default();
        let mut fraud = snapshot("fraud");
        let account = snapshot("account");
        for s in 0..=400u64 {
            fraud.calls.successful = s * s;
            let (now, at) = t.at(s * 1_000);
            let both = [fraud.clone(), account.clone()];
            assert_eq!(history.sample(now, at, &both).len(), 2);
        }
        for name in ["fraud", "account"] {
            let points = history.points(name);
            assert_eq!(points.len(), HISTORY_POINTS, "{name}");
            let ats: Vec<u64> = points.iter().map(HistoryPoint::at_millis).collect();
            let expected: Vec<u64> = (101..=400).map(|s| 1_000_000 + s * 1_000).collect();
            assert_eq!(ats, expected, "{name}: the newest 300, oldest first");
        }
        // Second s counted s*s - (s-1)*(s-1) = 2s - 1 successes.
        let fraud = history.points("fraud");
        assert!(fraud.iter().zip(101u64..).all(|(p, s)| p.calls.successful == 2 * s - 1));
        assert!(history.points("account").iter().all(|p| p.calls.total() == 0));
        assert!(history.points("unknown").is_empty());
    }

    #[test]
    fn the_sampler_records_points_and_summaries_and_stops_with_its_registry() {
        let registry = Registry::new();
        let dep = Dependency::builder("fraud").workers(1).build().expect("a dependency");
        registry.register(dep.clone()).expect("registered");
        let handle = registry
            .start_history_every(Duration::from_millis(10))
            .expect("spawned")
            .expect("the first start starts the thread");
        registry.start_history().expect("a second start starts nothing, and cannot fail");
        assert!(registry.start_history_every(Duration::from_millis(10)).expect("no error").is_none());

        // Once the sampler has taken its first interval (so the rejection
        // below falls in a later one), a rejection: summarised in the ring.
        let give_up = Instant::now() + Duration::from_secs(10);
        while registry.history()[0].points.is_empty() {
            assert!(Instant::now() < give_up, "no point in 10 s");
            thread::sleep(Duration::from_millis(5));
        }
        dep.breaker().transition_to(State::ForcedOpen);
        assert!(dep.call(|_| Ok::<_, std::io::Error>(())).unwrap_err().is_rejected());
        let give_up = Instant::now() + Duration::from_secs(10);
        let summarised = loop {
            let summary =
                dep.recent_events().into_iter().find(|e| matches!(e.kind, RecordedKind::Summary { .. }));
            if let Some(summary) = summary {
                break summary;
            }
            assert!(Instant::now() < give_up, "no summary in 10 s: {:?}", dep.recent_events());
            thread::sleep(Duration::from_millis(5));
        };
        assert!(matches!(
            summarised.kind,
            RecordedKind::Summary { timed_out: 0, ref rejected, .. } if rejected == &[(Rejection::NotPermitted, 1)]
        ));
        assert!(registry.history()[0].points.iter().any(|p| p.calls.not_permitted == 1));
        assert_eq!(
            dep.recent_events()[0].kind.as_str(),
            "transition",
            "the transition came first: {:?}",
            dep.recent_events()
        );

        drop(registry);
        let give_up = Instant::now() + Duration::from_secs(10);
        while !handle.is_finished() {
            assert!(Instant::now() < give_up, "the sampler still runs 10 s after its registry was dropped");
            thread::sleep(Duration::from_millis(5));
        }
        handle.join().expect("the sampler never panics");
        dep.shutdown(Duration::from_secs(1));
    }
}
