//! The dashboard's rolling history: one [`HistoryPoint`] a second for each
//! dependency of the registry, the last 300 (five minutes), taken by a
//! sampler thread that [`History::start`] starts; `/circuits/stream` sends it
//! (see `stream.rs`). Each second in which calls were rejected or timed out,
//! or a policy in shadow would have refused some, is also recorded as a
//! summary in the dependency's own ring (`Dependency::recent_events`).
//!
//! The thread only reads snapshots and the two clocks; what a point and a
//! summary are is `Points::sample`'s plain arithmetic over snapshots and the
//! times it is handed, so the tests below feed it snapshots with explicit
//! times and never sleep.
//!
//! The thread holds the history only through a `Weak` reference. Each tick
//! it upgrades it, copies the list of dependencies, samples, and drops every
//! strong reference (the copied handles too, which would keep their workers
//! alive) before it sleeps: once the application drops every clone of its [`History`],
//! the thread returns at most a second later. A panic inside a tick (there is
//! none to expect) is caught and logged, and sampling goes on.

use std::collections::VecDeque;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use watertight::breaker::State;
use watertight::dependency::{Percentiles, RecordedKind};
use watertight::shadow::{Policy, ShadowCounts};
use watertight::{CallCounts, Dependency, DependencySnapshot, Registry, Rejection};

/// Points kept per dependency: five minutes at one a second.
const POINTS: usize = 300;
/// How often the sampler samples.
const EVERY: Duration = Duration::from_secs(1);

/// One dependency over one interval (about a second) of the history.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryPoint {
    /// The end of the interval, by the wall clock.
    pub at: SystemTime,
    /// The time it covers, from the sample before it: about a second.
    pub interval: Duration,
    /// Attempts by outcome within the interval (`CallCounts::since`).
    pub calls: CallCounts,
    /// The breaker's state at its end.
    pub state: State,
    /// The breaker's failure rate at its end, `None` before `minimum_calls`.
    pub failure_rate: Option<f64>,
    /// The call time's median and 99th percentile at its end, over the
    /// dependency's recent window.
    pub latency: Percentiles,
    /// The pool's workers, busy workers and queued jobs at its end.
    pub workers: usize,
    pub busy: usize,
    pub queued: usize,
}

impl HistoryPoint {
    /// [`at`](Self::at) in milliseconds since the Unix epoch (0 before it).
    pub fn at_millis(&self) -> u64 {
        self.at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// The history of a registry's dependencies, sampled once a second while
/// this handle or a clone of it lives.
#[derive(Clone)]
pub struct History {
    shared: Arc<Shared>,
}

/// What the application shares with the sampler.
struct Shared {
    registry: Registry,
    points: Mutex<Points>,
}

impl History {
    /// Starts sampling every dependency of `registry` (those registered
    /// later too) once a second, on a thread named `watertight-history`.
    /// `Err` only when the thread could not be spawned.
    pub fn start(registry: &Registry) -> io::Result<History> {
        let shared = Arc::new(Shared { registry: registry.clone(), points: Mutex::default() });
        let weak = Arc::downgrade(&shared);
        thread::Builder::new().name("watertight-history".into()).spawn(move || run_sampler(&weak, EVERY))?;
        Ok(History { shared })
    }

    /// Every dependency sampled so far with its points, oldest first (none
    /// until the sampler has run for a second): one copy of them all, taken
    /// under the lock that the sampler holds only to add a point.
    pub fn tracks(&self) -> Vec<(String, Vec<HistoryPoint>)> {
        let points = self.shared.points.lock();
        points.tracks.iter().map(|t| (t.name.clone(), t.points.iter().cloned().collect())).collect()
    }
}

/// The sampler's loop: one tick every `every`, until the history is dropped.
fn run_sampler(shared: &Weak<Shared>, every: Duration) {
    let mut next = Instant::now();
    loop {
        {
            let Some(shared) = shared.upgrade() else { return };
            let deps = shared.registry.dependencies();
            if catch_unwind(AssertUnwindSafe(|| tick(&deps, &shared.points))).is_err() {
                log::error!("history sampler: a sample panicked; sampling goes on");
            }
            // `deps` and `shared` are dropped here: nothing is held while asleep.
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

/// One sample of `deps` into `points`, and the summaries into their rings.
fn tick(deps: &[Dependency], points: &Mutex<Points>) {
    let snapshots: Vec<DependencySnapshot> = deps.iter().map(Dependency::snapshot).collect();
    let (now, at) = (Instant::now(), SystemTime::now());
    let summaries = points.lock().sample(now, at, &snapshots);
    for (dep, summary) in deps.iter().zip(summaries) {
        if let Some(kind) = summary {
            dep.record_event(at, kind);
        }
    }
}

/// The points of every dependency sampled so far, and what each last
/// sample's counters were.
#[derive(Debug, Default)]
struct Points {
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

impl Points {
    /// Takes in `snapshots`, read at `now` (`at` by the wall clock): for each
    /// dependency sampled before, one point over the time since, and the
    /// summary to record in its ring if calls were rejected or timed out in
    /// it. The result is in `snapshots`' order. A dependency's first sample
    /// only starts its first interval; a sample at or before the last one's
    /// instant changes nothing.
    fn sample(
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
        if self.points.len() == POINTS {
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

#[cfg(test)]
mod tests {
    use super::*;
    use watertight::Outcome;

    fn dependency(name: &str) -> Dependency {
        Dependency::builder(name).workers(1).build().expect("a dependency")
    }

    fn snapshot(name: &str) -> DependencySnapshot {
        let dep = dependency(name);
        let snap = dep.snapshot();
        dep.shutdown(Duration::from_secs(1));
        snap
    }

    /// Explicit times on both clocks, `ms` milliseconds after `base`.
    fn at(base: Instant, ms: u64) -> (Instant, SystemTime) {
        (base + Duration::from_millis(ms), UNIX_EPOCH + Duration::from_millis(1_000_000 + ms))
    }

    impl Points {
        /// The points of `name`, oldest first (none if never sampled).
        fn points(&self, name: &str) -> Vec<HistoryPoint> {
            let track = self.tracks.iter().find(|t| t.name == name);
            track.map_or_else(Vec::new, |t| t.points.iter().cloned().collect())
        }
    }

    fn per_second(p: &HistoryPoint, outcome: Outcome) -> f64 {
        p.calls.get(outcome) as f64 / p.interval.as_secs_f64()
    }

    #[test]
    fn a_point_is_the_counters_delta_over_the_interval() {
        let base = Instant::now();
        let mut history = Points::default();
        let mut snap = snapshot("fraud");
        let (now, t) = at(base, 0);
        assert_eq!(history.sample(now, t, std::slice::from_ref(&snap)), vec![None], "the first only starts");
        assert!(history.points("fraud").is_empty());

        snap.calls.successful = 10;
        snap.calls.failed = 2;
        snap.calls.not_permitted = 3;
        snap.calls.queue_full = 1;
        snap.calls.timed_out = 4;
        snap.state = State::Open;
        snap.failure_rate = Some(60.0);
        snap.pool.busy = 1;
        let (now, t) = at(base, 1_000);
        assert_eq!(
            history.sample(now, t, std::slice::from_ref(&snap)),
            vec![Some(RecordedKind::Summary {
                over: Duration::from_secs(1),
                timed_out: 4,
                rejected: vec![(Rejection::NotPermitted, 3), (Rejection::QueueFull, 1)],
                shadow_refused: Vec::new(),
            })]
        );
        let p = &history.points("fraud")[0];
        assert_eq!((p.at_millis(), p.interval), (1_001_000, Duration::from_secs(1)));
        assert_eq!((p.calls.successful, p.calls.failed, p.calls.total()), (10, 2, 20));
        assert_eq!((p.state, p.failure_rate, p.busy, p.workers), (State::Open, Some(60.0), 1, 1));

        // Two seconds later with only successes: half the rate, no summary.
        snap.calls.successful = 30;
        let (now, t) = at(base, 3_000);
        assert_eq!(history.sample(now, t, std::slice::from_ref(&snap)), vec![None]);
        let p = &history.points("fraud")[1];
        assert_eq!((p.interval, p.calls.total()), (Duration::from_secs(2), 20));
        assert_eq!(per_second(p, Outcome::Successful), 10.0);

        // At the same instant: nothing; then nothing new, a point of zeros.
        assert_eq!(history.sample(now, t, std::slice::from_ref(&snap)), vec![None]);
        assert_eq!(history.points("fraud").len(), 2);
        let (now, t) = at(base, 4_000);
        assert_eq!(history.sample(now, t, std::slice::from_ref(&snap)), vec![None]);
        assert_eq!(history.points("fraud")[2].calls, CallCounts::default());
    }

    #[test]
    fn a_second_with_shadow_refusals_is_summarized() {
        let base = Instant::now();
        let mut history = Points::default();
        let dep =
            Dependency::builder("fraud").workers(1).shadow(Policy::Breaker).build().expect("a dependency");
        let (now, t) = at(base, 0);
        assert_eq!(history.sample(now, t, &[dep.snapshot()]), vec![None]);
        dep.breaker().transition_to(State::ForcedOpen);
        for _ in 0..3 {
            dep.call(|_| Ok::<_, io::Error>(())).expect("let through by the breaker in shadow");
        }
        let (now, t) = at(base, 1_000);
        assert_eq!(
            history.sample(now, t, &[dep.snapshot()]),
            vec![Some(RecordedKind::Summary {
                over: Duration::from_secs(1),
                timed_out: 0,
                rejected: Vec::new(),
                shadow_refused: vec![(Policy::Breaker, 3)],
            })],
            "only what the second added"
        );
        let (now, t) = at(base, 2_000);
        assert_eq!(history.sample(now, t, &[dep.snapshot()]), vec![None], "nothing new");
        dep.shutdown(Duration::from_secs(1));
    }

    #[test]
    fn the_history_keeps_the_last_five_minutes_per_dependency() {
        let base = Instant::now();
        let mut history = Points::default();
        let mut fraud = snapshot("fraud");
        let account = snapshot("account");
        for s in 0..=400u64 {
            fraud.calls.successful = s * s;
            let (now, t) = at(base, s * 1_000);
            assert_eq!(history.sample(now, t, &[fraud.clone(), account.clone()]).len(), 2);
        }
        for name in ["fraud", "account"] {
            let ats: Vec<u64> = history.points(name).iter().map(HistoryPoint::at_millis).collect();
            let expected: Vec<u64> = (101..=400).map(|s| 1_000_000 + s * 1_000).collect();
            assert_eq!(ats, expected, "{name}: the newest 300, oldest first");
        }
        // Second s counted s*s - (s-1)*(s-1) = 2s - 1 successes.
        assert!(history.points("fraud").iter().zip(101u64..).all(|(p, s)| p.calls.successful == 2 * s - 1));
        assert!(history.points("account").iter().all(|p| p.calls.total() == 0));
        assert!(history.points("unknown").is_empty());
    }

    #[test]
    fn the_sampler_records_points_and_summaries_and_stops_with_its_history() {
        let registry = Registry::new();
        let dep = dependency("fraud");
        registry.register(dep.clone()).expect("registered");
        let shared = Arc::new(Shared { registry: registry.clone(), points: Mutex::default() });
        let sampler = {
            let weak = Arc::downgrade(&shared);
            thread::spawn(move || run_sampler(&weak, Duration::from_millis(10)))
        };
        let history = History { shared };
        let within = |what: &str, done: &dyn Fn() -> bool| {
            let give_up = Instant::now() + Duration::from_secs(10);
            while !done() {
                assert!(Instant::now() < give_up, "{what}: not within 10 s");
                thread::sleep(Duration::from_millis(5));
            }
        };
        // Once the sampler has taken its first interval (so the rejection
        // below falls in a later one), a rejection: summarised in the ring.
        let points = || history.tracks().pop().map(|(_, points)| points).unwrap_or_default();
        within("a point", &|| !points().is_empty());
        dep.breaker().transition_to(State::ForcedOpen);
        assert!(dep.call(|_| Ok::<_, io::Error>(())).unwrap_err().is_rejected());
        let summary = || dep.recent_events().into_iter().find(|e| e.kind.as_str() == "summary");
        within("a summary", &|| summary().is_some());
        assert!(matches!(
            summary().unwrap().kind,
            RecordedKind::Summary { timed_out: 0, ref rejected, .. } if rejected == &[(Rejection::NotPermitted, 1)]
        ));
        assert!(points().iter().any(|p| p.calls.not_permitted == 1));
        assert_eq!(dep.recent_events()[0].kind.as_str(), "transition", "the transition came first");

        drop(history);
        within("the sampler's end once its history is dropped", &|| sampler.is_finished());
        sampler.join().expect("the sampler never panics");
        dep.shutdown(Duration::from_secs(1));
    }
}
