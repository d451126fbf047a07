//! The capacity rule by call shape: detached dependencies hold nothing, a
//! fan-out group holds once, the reserve is taken off, the request budget
//! is compared with every timeout.

use std::time::Duration;

use watertight::breaker::BreakerConfig;
use watertight::dependency::{CallShape, Mode};
use watertight::registry::{CapacityLevel, RequestThreads};
use watertight::{Dependency, DependencyConfig, Registry};

/// A dependency of `workers + queue` whose breaker one wave of hung calls
/// can open, so that no other warning hides the one under test.
fn dep(name: &str, workers: usize, queue: usize, calls: CallShape) -> Dependency {
    let places = u32::try_from(workers + queue).unwrap();
    Dependency::builder(name)
        .workers(workers)
        .queue(queue)
        .timeout(Duration::from_millis(400))
        .breaker(BreakerConfig::count_based(places).minimum_calls(places.min(places / 2 + 1)))
        .calls(calls)
        .build()
        .unwrap()
}

fn registry(deps: impl IntoIterator<Item = Dependency>) -> Registry {
    let registry = Registry::new();
    for d in deps {
        registry.register(d).unwrap();
    }
    registry
}

#[test]
fn a_detached_dependency_holds_no_request_thread() {
    let flights = || dep("flights", 8, 2, CallShape::Blocking);
    let detached = registry([flights(), dep("audit", 2, 64, CallShape::Detached)]);
    let report = detached.check_capacity(32).expect("audit holds none");
    let audit = &report.entries[1];
    assert_eq!((audit.hold, audit.room_left, audit.level), (0, 32, CapacityLevel::Ok));
    assert_eq!((audit.calls.clone(), audit.waiters), (CallShape::Detached, 0));
    assert_eq!(report.total_hold, 10);
    assert!(report.warnings().is_empty(), "{:?}", report.warnings());
    assert!(report.to_string().contains("(detached)"), "{report}");
    // The same pool, called blocking, can take every request thread.
    let blocking = registry([flights(), dep("audit", 2, 64, CallShape::Blocking)]);
    let err = blocking.check_capacity(32).unwrap_err();
    assert_eq!(err.path(), "audit");
    assert!(err.to_string().contains("can hold 66 of 32 request threads"), "{err}");
}

#[test]
fn the_legs_of_one_fan_out_hold_once() {
    let search = || CallShape::FanOut("search".into());
    let fanned = registry([
        dep("flights", 8, 2, search()),
        dep("hotels", 6, 2, search()),
        dep("pricing", 4, 0, CallShape::Blocking),
    ]);
    let report = fanned.check_capacity(20).unwrap();
    // The group's largest leg (10), once, and pricing's 4: not 10 + 8 + 4.
    assert_eq!(report.total_hold, 14);
    assert_eq!(report.entries[1].hold, 8, "each leg keeps its own hold");
    assert!(report.warnings().iter().all(|w| !w.contains("together")), "{:?}", report.warnings());
    // Two groups are two holds; the same legs called one after the other are the sum.
    let apart = registry([
        dep("flights", 8, 2, CallShape::FanOut("search".into())),
        dep("hotels", 6, 2, CallShape::FanOut("book".into())),
        dep("pricing", 4, 0, CallShape::Blocking),
    ]);
    let report = apart.check_capacity(20).unwrap();
    assert_eq!(report.total_hold, 22);
    assert!(
        report.warnings().iter().any(|w| w.contains("together can hold 22 of 20")),
        "{:?}",
        report.warnings()
    );
}

#[test]
fn holds_are_compared_with_the_threads_left_after_the_reserve() {
    let fourteen = registry([dep("fraud", 12, 2, CallShape::Blocking)]);
    // Of 16 threads, 14 would leave 2: a warning only.
    assert_eq!(fourteen.check_capacity(16).unwrap().entries[0].level, CapacityLevel::Warning);
    // With 2 of them reserved, the dependencies share 14, and 14 takes them all.
    let pool = RequestThreads::new(16).reserved(2);
    assert_eq!(pool.available(), 14);
    let err = fourteen.check_capacity(pool).unwrap_err();
    assert_eq!(err.field(), "capacity");
    let report = fourteen.capacity_report(pool);
    assert_eq!(report.available(), 14);
    assert_eq!(report.entries[0].room_left, 0);
    let shown = err.to_string();
    assert!(
        shown.contains("can hold 14 of the 14 request threads left after a reserve of 2 (of 16)"),
        "{shown}"
    );
    let thirteen = registry([dep("fraud", 11, 2, CallShape::Blocking)]);
    let report = thirteen.check_capacity(pool).unwrap();
    assert_eq!((report.entries[0].level, report.entries[0].room_left), (CapacityLevel::Warning, 1));
    assert!(
        report.to_string().starts_with("request threads: 16 (2 reserved, 14 for the dependencies)"),
        "{report}"
    );
}

#[test]
fn a_timeout_longer_than_the_request_budget_is_warned_about() {
    let slow = Dependency::builder("flights")
        .workers(8)
        .queue(2)
        .timeout(Duration::from_secs(5))
        .breaker(BreakerConfig::count_based(20).minimum_calls(10))
        .build()
        .unwrap();
    let registry = registry([slow, dep("hotels", 6, 2, CallShape::Blocking)]);
    let budget = RequestThreads::new(32).request_budget(Duration::from_millis(800));
    let warnings = registry.check_capacity(budget).unwrap().warnings();
    let about: Vec<&String> =
        warnings.iter().filter(|w| w.contains("is longer than the request budget")).collect();
    assert_eq!(about.len(), 1, "{warnings:?}");
    for words in ["`flights`", "5s", "800ms", "cut short", "cut-short rule", "breaker opens later"] {
        assert!(about[0].contains(words), "{words}: {}", about[0]);
    }
    // Without a budget, or under one as long as the timeout, nothing is said
    // of the timeout (a retried call, three attempts of 5 s, still outlasts it).
    assert!(registry.check_capacity(32).unwrap().warnings().is_empty());
    let long = RequestThreads::new(32).request_budget(Duration::from_secs(5));
    let warnings = registry.check_capacity(long).unwrap().warnings();
    assert!(warnings.iter().all(|w| !w.contains("is longer than")), "{warnings:?}");
}

#[test]
fn a_retry_that_can_outlast_the_request_budget_is_warned_about() {
    use watertight::retry::Retry;
    let retried = |name: &str, retry: Retry| {
        Dependency::builder(name)
            .workers(2)
            .timeout(Duration::from_millis(200))
            .breaker(BreakerConfig::count_based(2).minimum_calls(2))
            .retry(retry)
            .build()
            .unwrap()
    };
    let policy = |attempts: u32, backoff: Duration| {
        Retry::builder()
            .max_attempts(attempts)
            .backoff(backoff, backoff)
            .jitter(watertight::retry::Jitter::None)
    };
    let registry = registry([
        // 3 x 200 ms + 2 x 100 ms = 800 ms: within a budget of 1 s.
        retried("within", policy(3, Duration::from_millis(100)).build().unwrap()),
        // Two attempts and an hour's backoff: the hold is the backoff's.
        retried("sleeper", policy(2, Duration::from_secs(3600)).build().unwrap()),
        // The same, bounded by an overall timeout inside the budget.
        retried(
            "bounded",
            policy(2, Duration::from_secs(3600)).overall_timeout(Duration::from_millis(900)).build().unwrap(),
        ),
        // Never retried.
        retried("once", Retry::disabled()),
        // Attempts without end: the hold saturates, and it is still named.
        retried("endless", policy(u32::MAX, Duration::from_secs(1)).build().unwrap()),
    ]);
    let report =
        registry.check_capacity(RequestThreads::new(32).request_budget(Duration::from_secs(1))).unwrap();
    let hold = |name: &str| report.entries.iter().find(|e| e.name == name).unwrap().retry_hold;
    assert_eq!(hold("within"), Some(Duration::from_millis(800)));
    assert_eq!(hold("sleeper"), Some(Duration::from_millis(400) + Duration::from_secs(3600)));
    assert_eq!(hold("bounded"), Some(Duration::from_millis(900)));
    assert_eq!(hold("once"), None);
    assert!(hold("endless").unwrap() > Duration::from_secs(3600 * 24 * 365));
    let warnings = report.warnings();
    let retried: Vec<&String> = warnings.iter().filter(|w| w.contains("a retried call")).collect();
    assert_eq!(retried.len(), 2, "{warnings:?}");
    assert!(retried[0].contains("`sleeper`") && retried[0].contains("3600.4s"), "{}", retried[0]);
    assert!(retried[0].contains("overall_timeout") && retried[0].contains("1s"), "{}", retried[0]);
    assert!(retried[1].contains("`endless`"), "{}", retried[1]);
    // Without a budget, nothing to compare with.
    let unbudgeted = registry.check_capacity(32).unwrap().warnings();
    assert!(unbudgeted.iter().all(|w| !w.contains("a retried call")), "{unbudgeted:?}");
}

#[test]
fn a_detached_dependency_is_reconfigured_without_a_hold() {
    let registry = registry([dep("audit", 2, 8, CallShape::Detached)]);
    let mut bigger = registry.get("audit").unwrap().config();
    bigger.queue = 64;
    registry.reconfigure("audit", bigger.clone(), 16).expect("a detached pool holds no request thread");
    assert_eq!(registry.get("audit").unwrap().config().queue, 64);
    // Declared blocking in the same change, it would hold 66 of 16.
    bigger.calls = CallShape::Blocking;
    match registry.reconfigure("audit", bigger, 16) {
        Err(e) if e.field() == "capacity" => assert_eq!(e.path(), "audit"),
        other => panic!("expected a capacity refusal, got {other:?}"),
    }
    assert_eq!(registry.get("audit").unwrap().config().calls, CallShape::Detached, "nothing changed");
}

#[test]
fn call_shapes_are_checked() {
    // `DependencyConfig` is `#[non_exhaustive]`: the default, its fields set.
    let mut caller = DependencyConfig::default();
    (caller.mode, caller.calls) = (Mode::CallerThread, CallShape::Detached);
    assert_eq!(caller.validate().unwrap_err().field(), "calls");
    let mut unnamed = DependencyConfig::default();
    unnamed.calls = CallShape::FanOut(" ".into());
    assert_eq!(unnamed.validate().unwrap_err().field(), "calls.fan_out");
    let leg = CallShape::FanOut("search".into());
    assert_eq!((leg.fan_out_group(), CallShape::default()), (Some("search"), CallShape::Blocking));
}

#[test]
fn a_blocking_call_on_a_dependency_declared_detached_is_served() {
    let audit = dep("audit-blocking", 1, 2, CallShape::Detached);
    let answer = audit.call(|_: &watertight::CallContext| Ok::<_, std::io::Error>(7));
    assert_eq!(answer.unwrap(), 7);
    assert_eq!(audit.snapshot().calls.successful, 1);
}

#[test]
fn a_throttled_dependency_says_so() {
    let account = dep("account", 4, 0, CallShape::Blocking);
    let mut config = account.config();
    config.throttle = Some(watertight::limit::Throttle::new());
    account.reconfigure(config.clone()).unwrap();
    let registry = registry([account.clone(), dep("fraud", 4, 0, CallShape::Blocking)]);
    let report = registry.check_capacity(32).unwrap();
    assert_eq!((report.entries[0].throttled, report.entries[1].throttled), (true, false));
    let shown = report.to_string();
    assert_eq!(shown.matches("; throttled").count(), 1, "{shown}");
    // Turned off live through the registry: no longer said.
    config.throttle = None;
    let report = registry.reconfigure("account", config, 32).unwrap();
    assert!(!report.entries[0].throttled && account.throttler().is_none());
}

#[test]
fn a_finding_states_the_numbers_it_used() {
    // A breaker that needs 100 failures, more than the 3 calls each can hold.
    let stalled = |name: &str, timeout: Duration| {
        let breaker = BreakerConfig::count_based(100).minimum_calls(100);
        Dependency::builder(name).workers(2).queue(1).timeout(timeout).breaker(breaker).build().unwrap()
    };
    let waiting = Dependency::builder("account")
        .workers(4)
        .max_wait(Duration::from_millis(50))
        .breaker(BreakerConfig::count_based(4).minimum_calls(4))
        .build()
        .unwrap();
    let registry = registry([
        stalled("fast", Duration::from_millis(100)),
        stalled("slow", Duration::from_secs(1)),
        waiting,
    ]);
    let warnings = registry.check_capacity(RequestThreads::new(10).reserved(2)).unwrap().warnings();
    let about = |words: &str| -> &String {
        warnings.iter().find(|w| w.contains(words)).unwrap_or_else(|| panic!("{words}: {warnings:?}"))
    };
    // A quarter of 100 ms is 25 ms: the floor, twice the least hang threshold, applies.
    let fast = about("`fast`: its breaker");
    for words in
        ["100 failures", "the 3 calls", "workers 2 + queue 1", "for 100ms", "floor", "50ms", "timeout 100ms"]
    {
        assert!(fast.contains(words), "{words}: {fast}");
    }
    assert!(fast.contains("(25ms)"), "{fast}");
    // A quarter of 1 s is over the floor: the quarter is the threshold.
    let slow = about("`slow`: its breaker");
    assert!(slow.contains("for 250ms (the stuck threshold: a quarter of the timeout 1s;"), "{slow}");
    assert!(!slow.contains("floor"), "{slow}");
    // The waiters, and everything together, of the 8 threads left after a reserve of 2.
    let of = "of the 8 request threads left after a reserve of 2 (of 10)";
    let account = about("`account` can hold 8");
    assert!(account.contains(of) && account.contains("(workers 4 + queue 0 + 4 waiters)"), "{account}");
    assert!(account.contains("4 waiters, for up to 50ms each"), "{account}");
    let together = about("together");
    assert!(together.contains(&format!("can hold 10 {of}")), "{together}");
    assert!(together.contains("(`fast` 3, `slow` 3, `account` 4)"), "{together}");
}
