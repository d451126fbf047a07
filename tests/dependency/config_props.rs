//! No configuration value makes the crate panic: any `f64` (NaN, infinities,
//! negatives, subnormals), any size, any `Duration` (zero, one nanosecond, one
//! day and a nanosecond, `Duration::MAX`) given to the breaker, the pool, the
//! retry policy and the dependency either builds or comes back as a
//! [`ConfigError`] naming a field that really is out of its documented range.
//! And a value that builds can be used: calls, clock jumps, manual transitions
//! and shutdown on it do not panic either.
//!
//! Each builder is compared with a small reference model of the rules its
//! setters document: `Ok` exactly when the model finds no bad field, and an
//! error only for a field the model also finds bad.
//!
//! Valid worker counts are kept small (1 to 4) because each case starts its
//! threads; invalid ones range over all of `usize`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use watertight::{
    ConfigError, Dependency, ManualClock, Verdict,
    breaker::{Breaker, BreakerConfig, State},
    pool::Pool,
    retry::{Jitter, Retry, RetryBuilder},
};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);
const MAX_WORKERS: usize = 4096;
const MAX_QUEUE: usize = 1 << 20;
const MIN_STACK: usize = 64 * 1024;

// ---------------------------------------------------------------- strategies

fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        prop::sample::select(vec![
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            f64::MIN_POSITIVE / 2.0, // subnormal
            f64::EPSILON,
            0.5,
            1.0,
            1.0 - f64::EPSILON,
            50.0,
            100.0,
            100.0 + 1e-12,
            f64::MAX,
            f64::MIN,
        ]),
        -10.0..110.0f64,
        any::<f64>(),
    ]
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        prop::sample::select(vec![
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_millis(1),
            Duration::from_secs(1),
            DAY,
            DAY + Duration::from_nanos(1),
            Duration::from_secs(u64::MAX / 2),
            Duration::MAX,
        ]),
        (0u64..2_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn any_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        prop::sample::select(vec![0, 1, 2, 100, 1_000_000, 1_000_001, 86_400, 86_401, u32::MAX]),
        0..200u32,
        any::<u32>()
    ]
}

fn any_state() -> impl Strategy<Value = State> {
    prop::sample::select(vec![
        State::Closed,
        State::Open,
        State::HalfOpen,
        State::Disabled,
        State::MetricsOnly,
        State::ForcedOpen,
    ])
}

/// Every breaker setter's input, kept as values so the model can judge them.
#[derive(Debug, Clone)]
struct BreakerInput {
    window: (bool, u32), // (time based?, size)
    minimum_calls: u32,
    failure_rate: f64,
    slow_call_rate: f64,
    slow_call_duration: Duration,
    open_for: Duration,
    open_backoff: Option<(f64, Duration)>,
    half_open_calls: u32,
    max_wait: Duration,
    after_max_wait: State,
    enabled: bool,
}

fn breaker_input() -> impl Strategy<Value = BreakerInput> {
    (
        (any::<bool>(), any_u32()),
        any_u32(),
        any_f64(),
        any_f64(),
        any_duration(),
        any_duration(),
        proptest::option::of((any_f64(), any_duration())),
        any_u32(),
        any_duration(),
        any_state(),
        any::<bool>(),
    )
        .prop_map(|t| BreakerInput {
            window: t.0,
            minimum_calls: t.1,
            failure_rate: t.2,
            slow_call_rate: t.3,
            slow_call_duration: t.4,
            open_for: t.5,
            open_backoff: t.6,
            half_open_calls: t.7,
            max_wait: t.8,
            after_max_wait: t.9,
            enabled: t.10,
        })
}

impl BreakerInput {
    fn config(&self) -> BreakerConfig {
        let base = match self.window {
            (false, n) => BreakerConfig::count_based(n),
            (true, n) => BreakerConfig::time_based(n),
        };
        let mut c = base
            .minimum_calls(self.minimum_calls)
            .failure_rate(self.failure_rate)
            .slow_call_rate(self.slow_call_rate)
            .slow_call_duration(self.slow_call_duration)
            .open_for(self.open_for)
            .half_open_calls(self.half_open_calls)
            .max_wait_in_half_open(self.max_wait)
            .after_max_wait(self.after_max_wait)
            .enabled(self.enabled);
        if let Some((m, max)) = self.open_backoff {
            c = c.open_backoff(m, max);
        }
        c
    }

    /// The fields the setters' documentation says are out of range.
    fn bad_fields(&self) -> Vec<&'static str> {
        let rate_ok = |r: f64| r > 0.0 && r <= 100.0;
        let mut bad = Vec::new();
        match self.window {
            (false, n) if !(1..=1_000_000).contains(&n) => bad.push("count_based"),
            (true, n) if !(1..=86_400).contains(&n) => bad.push("time_based"),
            _ => {}
        }
        if self.minimum_calls < 1 {
            bad.push("minimum_calls");
        }
        if !rate_ok(self.failure_rate) {
            bad.push("failure_rate");
        }
        if !rate_ok(self.slow_call_rate) {
            bad.push("slow_call_rate");
        }
        if self.slow_call_duration.is_zero() {
            bad.push("slow_call_duration");
        }
        if self.open_for.is_zero() {
            bad.push("open_for");
        }
        if let Some((m, max)) = self.open_backoff
            && (!(m.is_finite() && m >= 1.0) || max < self.open_for)
        {
            bad.push("open_backoff");
        }
        if self.half_open_calls < 1 {
            bad.push("half_open_calls");
        }
        if !matches!(self.after_max_wait, State::Open | State::Closed) {
            bad.push("after_max_wait");
        }
        bad
    }
}

#[derive(Debug, Clone)]
struct RetryInput {
    max_attempts: u32,
    backoff: (Duration, Duration),
    multiplier: f64,
    budget: (f64, u32),
    overall: Option<Duration>,
    jitter: Jitter,
}

fn any_jitter() -> impl Strategy<Value = Jitter> {
    prop::sample::select(vec![Jitter::Full, Jitter::Equal, Jitter::None])
}

fn retry_input() -> impl Strategy<Value = RetryInput> {
    (
        any_u32(),
        (any_duration(), any_duration()),
        any_f64(),
        (any_f64(), any_u32()),
        proptest::option::of(any_duration()),
        any_jitter(),
    )
        .prop_map(|t| RetryInput {
            max_attempts: t.0,
            backoff: t.1,
            multiplier: t.2,
            budget: t.3,
            overall: t.4,
            jitter: t.5,
        })
}

impl RetryInput {
    fn retry(&self) -> RetryBuilder {
        let mut r = Retry::builder()
            .max_attempts(self.max_attempts)
            .backoff(self.backoff.0, self.backoff.1)
            .backoff_multiplier(self.multiplier)
            .budget(self.budget.0, self.budget.1)
            .jitter(self.jitter);
        if let Some(t) = self.overall {
            r = r.overall_timeout(t);
        }
        r
    }

    fn bad_fields(&self) -> Vec<&'static str> {
        let mut bad = Vec::new();
        if self.max_attempts < 1 {
            bad.push("retry.max_attempts");
        }
        if self.backoff.0 > self.backoff.1 {
            bad.push("retry.backoff");
        }
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            bad.push("retry.backoff_multiplier");
        }
        if !(self.budget.0.is_finite() && (0.0..=100.0).contains(&self.budget.0)) {
            bad.push("retry.budget");
        }
        if self.overall == Some(Duration::ZERO) {
            bad.push("retry.overall_timeout");
        }
        bad
    }
}

fn any_name() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![String::new(), "a\0b".to_owned(), "x".repeat(300), "ünï cödé".to_owned()]),
        "[a-z][a-z0-9-]{0,12}",
        any::<String>(),
    ]
}

/// Worker counts: small valid ones (each case starts them) and any invalid one.
fn any_workers() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..=4, 1 => prop::sample::select(vec![MAX_WORKERS + 1, usize::MAX]), 1 => MAX_WORKERS + 1..]
}

fn any_queue() -> impl Strategy<Value = usize> {
    prop_oneof![8 => 0usize..=16, 1 => prop::sample::select(vec![MAX_QUEUE, MAX_QUEUE + 1, usize::MAX]), 1 => any::<usize>()]
}

fn any_stack() -> impl Strategy<Value = Option<usize>> {
    proptest::option::of(prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            MIN_STACK - 1,
            MIN_STACK,
            1 << 20,
            1 << 40,
            usize::MAX / 2,
            usize::MAX
        ]),
        MIN_STACK..(4 << 20),
        any::<usize>(),
    ])
}

/// Checks `result` against the model's bad fields: `Ok` exactly when there are
/// none, and an error only for one of them. `also` are fields an error may name
/// although the model does not flag them (a spawn the OS refused).
fn judge<T>(result: &Result<T, ConfigError>, bad: &[&str], also: &[&str]) -> Result<(), TestCaseError> {
    match result {
        Ok(_) => prop_assert!(bad.is_empty(), "built although {bad:?} are out of range"),
        Err(e) => {
            prop_assert!(
                bad.contains(&e.field()) || also.contains(&e.field()),
                "error names {:?} ({e}) but the bad fields are {bad:?}",
                e.field()
            );
            prop_assert!(e.to_string().contains(e.field()), "the message names the field: {e}");
        }
    }
    Ok(())
}

// ------------------------------------------- valid, but as extreme as allowed

fn valid_rate() -> impl Strategy<Value = f64> {
    prop_oneof![
        prop::sample::select(vec![f64::MIN_POSITIVE / 2.0, 1e-300, 0.5, 50.0, 100.0]),
        1e-9..=100.0f64
    ]
}

fn valid_duration() -> impl Strategy<Value = Duration> {
    any_duration().prop_map(|d| d.max(Duration::from_nanos(1)))
}

fn valid_breaker_input() -> impl Strategy<Value = BreakerInput> {
    (
        prop_oneof![
            (Just(false), prop_oneof![prop::sample::select(vec![1u32, 2, 1_000_000]), 1u32..200]),
            (Just(true), prop_oneof![prop::sample::select(vec![1u32, 2, 86_400]), 1u32..120]),
        ],
        prop_oneof![prop::sample::select(vec![1u32, u32::MAX]), 1u32..50],
        valid_rate(),
        valid_rate(),
        valid_duration(),
        valid_duration(),
        proptest::option::of((
            prop_oneof![prop::sample::select(vec![1.0, 2.0, 1e300, f64::MAX]), 1.0..1e6f64],
            any_duration(),
        )),
        prop_oneof![prop::sample::select(vec![1u32, u32::MAX]), 1u32..20],
        any_duration(),
        prop::sample::select(vec![State::Open, State::Closed]),
        any::<bool>(),
    )
        .prop_map(|t| BreakerInput {
            window: t.0,
            minimum_calls: t.1,
            failure_rate: t.2,
            slow_call_rate: t.3,
            slow_call_duration: t.4,
            open_for: t.5,
            // The cap must be at least open_for: add the drawn extra to it.
            open_backoff: t.6.map(|(m, extra)| (m, t.5.saturating_add(extra))),
            half_open_calls: t.7,
            max_wait: t.8,
            after_max_wait: t.9,
            enabled: t.10,
        })
}

fn valid_retry_input() -> impl Strategy<Value = RetryInput> {
    (
        prop_oneof![prop::sample::select(vec![1u32, u32::MAX]), 1u32..6],
        (any_duration(), any_duration()),
        prop_oneof![prop::sample::select(vec![1.0, f64::MAX]), 1.0..10.0f64],
        (prop_oneof![prop::sample::select(vec![0.0, 100.0]), 0.0..=100.0f64], any_u32()),
        proptest::option::of(valid_duration()),
        any_jitter(),
    )
        .prop_map(|t| RetryInput {
            max_attempts: t.0,
            backoff: (t.1.0.min(t.1.1), t.1.0.max(t.1.1)),
            multiplier: t.2,
            budget: t.3,
            overall: t.4,
            jitter: t.5,
        })
}

// ---------------------------------------------------------------- breaker

#[derive(Debug, Clone)]
enum BreakerOp {
    Call(u8, Duration),
    DropPermit,
    Advance(Duration),
    TransitionTo(State),
    Reset,
}

fn breaker_op() -> impl Strategy<Value = BreakerOp> {
    prop_oneof![
        6 => (0u8..3, any_duration()).prop_map(|(v, d)| BreakerOp::Call(v, d)),
        1 => Just(BreakerOp::DropPermit),
        3 => any_duration().prop_map(BreakerOp::Advance),
        1 => any_state().prop_map(BreakerOp::TransitionTo),
        1 => Just(BreakerOp::Reset),
    ]
}

/// Builds a breaker from `input` (judged against the model) and, if it built,
/// runs `ops` on it with a manual clock, checking its metrics after each.
fn drive_breaker(input: &BreakerInput, name: String, ops: Vec<BreakerOp>) -> Result<bool, TestCaseError> {
    let config = input.config();
    let validated = config.validate();
    judge(&validated, &input.bad_fields(), &[])?;
    let clock = ManualClock::new();
    let built = Breaker::with_clock(name, config, Arc::new(clock.clone()));
    judge(&built, &input.bad_fields(), &[])?;
    let Ok(breaker) = built else { return Ok(false) };
    for op in ops {
        match op {
            BreakerOp::Call(v, elapsed) => {
                if let Ok(permit) = breaker.try_acquire() {
                    let verdict = [Verdict::Success, Verdict::Failure, Verdict::Ignore][usize::from(v)];
                    permit.record(verdict, elapsed);
                }
            }
            BreakerOp::DropPermit => drop(breaker.try_acquire()),
            BreakerOp::Advance(d) => clock.advance(d),
            BreakerOp::TransitionTo(s) => breaker.transition_to(s),
            BreakerOp::Reset => breaker.reset(),
        }
        let m = breaker.metrics();
        prop_assert_eq!(m.state, breaker.state());
        for rate in [m.failure_rate, m.slow_call_rate].into_iter().flatten() {
            prop_assert!((0.0..=100.0).contains(&rate), "rate {rate} out of range");
        }
    }
    let _ = format!("{breaker:?}");
    Ok(true)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, rng_seed: RngSeed::Fixed(0x5eed), ..ProptestConfig::default() })]

    #[test]
    fn breaker_config_builds_or_names_a_bad_field(
        input in breaker_input(),
        name in any_name(),
        ops in prop::collection::vec(breaker_op(), 0..10),
    ) {
        drive_breaker(&input, name, ops)?;
    }

    #[test]
    fn extreme_valid_breaker_configs_build_and_run(
        input in valid_breaker_input(),
        name in any_name(),
        ops in prop::collection::vec(breaker_op(), 0..60),
    ) {
        prop_assert!(input.bad_fields().is_empty(), "the strategy makes valid configs only");
        prop_assert!(drive_breaker(&input, name, ops)?, "a valid config builds");
    }
}

// ---------------------------------------------------------------- pool

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, rng_seed: RngSeed::Fixed(0x5eed), ..ProptestConfig::default() })]

    #[test]
    fn pool_config_builds_or_names_a_bad_field_and_then_runs(
        name in any_name(),
        workers in any_workers(),
        queue in any_queue(),
        stack in any_stack(),
        drop_grace in any_duration(),
        timeout in any_duration(),
        grace in any_duration(),
    ) {
        let mut bad = Vec::new();
        if name.is_empty() || name.contains('\0') {
            bad.push("name");
        }
        if !(1..=MAX_WORKERS).contains(&workers) {
            bad.push("workers");
        }
        if queue > MAX_QUEUE {
            bad.push("queue");
        }
        if stack.is_some_and(|s| s < MIN_STACK) {
            bad.push("stack_size");
        }
        let mut builder = Pool::builder(name).workers(workers).queue(queue).drop_grace(drop_grace);
        if let Some(s) = stack {
            builder = builder.stack_size(s);
        }
        let built = builder.build();
        // A stack the OS cannot give is reported as too many workers to start.
        let refused_spawn: &[&str] = if stack.is_some_and(|s| s > 1 << 30) { &["stack_size"] } else { &[] };
        judge(&built, &bad, refused_spawn)?;
        let Ok(pool) = built else { return Ok(()) };
        prop_assert_eq!(pool.stats().workers, workers);

        // Any timeout: an answer, a timeout or a rejection, never a panic, and
        // never later than the timeout allows (capped: the job is instant).
        let started = Instant::now();
        let answer = pool.call_timeout(timeout, |ctx| Ok::<_, ()>(ctx.remaining()));
        prop_assert!(started.elapsed() < timeout.min(Duration::from_secs(5)) + Duration::from_secs(2));
        if let Ok(left) = answer {
            prop_assert!(left <= timeout);
        }
        if let Ok(ticket) = pool.submit_timeout(timeout, |_| Err::<(), _>("no")) {
            let _ = ticket.wait();
        }
        let _ = format!("{pool:?}");
        // Nothing is running, so the workers exit at once; a zero grace may
        // still end before they have, and a second call joins them.
        if !pool.shutdown(grace) {
            prop_assert!(pool.shutdown(Duration::from_secs(5)), "the workers exit");
        }
        prop_assert_eq!(pool.stats().workers, 0);
    }
}

// ---------------------------------------------------------------- dependency

#[derive(Debug, Clone)]
struct DependencyInput {
    name: String,
    workers: usize,
    queue: usize,
    deadline: Duration,
    stack: Option<usize>,
    admission: bool,
    breaker: BreakerInput,
    retry: RetryInput,
}

impl From<(String, usize, usize, Duration, Option<usize>, bool, BreakerInput, RetryInput)>
    for DependencyInput
{
    fn from(t: (String, usize, usize, Duration, Option<usize>, bool, BreakerInput, RetryInput)) -> Self {
        let (name, workers, queue, deadline, stack, admission, breaker, retry) = t;
        DependencyInput { name, workers, queue, deadline, stack, admission, breaker, retry }
    }
}

fn dependency_input() -> impl Strategy<Value = DependencyInput> {
    (
        any_name(),
        any_workers(),
        any_queue(),
        any_duration(),
        any_stack(),
        any::<bool>(),
        breaker_input(),
        retry_input(),
    )
        .prop_map(DependencyInput::from)
}

fn valid_dependency_input() -> impl Strategy<Value = DependencyInput> {
    (
        "[a-z][a-z0-9-]{0,12}",
        1usize..=4,
        prop_oneof![8 => 0usize..=16, 1 => Just(MAX_QUEUE)],
        prop_oneof![
            prop::sample::select(vec![Duration::from_nanos(1), DAY]),
            (1u64..300).prop_map(Duration::from_millis)
        ],
        proptest::option::of(prop_oneof![Just(MIN_STACK), MIN_STACK..(4 << 20)]),
        any::<bool>(),
        valid_breaker_input(),
        valid_retry_input(),
    )
        .prop_map(DependencyInput::from)
}

/// Builds a dependency from `input` (judged against the model) and, if it
/// built, makes a few calls on it and shuts it down.
fn drive_dependency(input: &DependencyInput) -> Result<bool, TestCaseError> {
    let mut bad = Vec::new();
    if input.name.is_empty() || input.name.contains('\0') {
        bad.push("name");
    }
    if !(1..=MAX_WORKERS).contains(&input.workers) {
        bad.push("workers");
    }
    if input.deadline.is_zero() || input.deadline > DAY {
        bad.push("timeout");
    }
    bad.extend(input.breaker.bad_fields());
    // A `Retry` is built (and validated) on its own, before the dependency.
    let retry = input.retry.retry().build();
    judge(&retry, &input.retry.bad_fields(), &[])?;
    let Ok(retry) = retry else { return Ok(false) };
    if input.queue > MAX_QUEUE {
        bad.push("queue");
    }
    if input.stack.is_some_and(|s| s < MIN_STACK) {
        bad.push("stack_size");
    }
    let mut builder = Dependency::builder(input.name.clone())
        .workers(input.workers)
        .queue(input.queue)
        .timeout(input.deadline)
        .breaker(input.breaker.config())
        .retry(retry)
        .deadline_aware_admission(input.admission);
    if let Some(s) = input.stack {
        builder = builder.stack_size(s);
    }
    let _ = format!("{builder:?}");
    let built = builder.build();
    let refused_spawn: &[&str] = if input.stack.is_some_and(|s| s > 1 << 30) { &["stack_size"] } else { &[] };
    judge(&built, &bad, refused_spawn)?;
    let Ok(dep) = built else { return Ok(false) };

    // Calls on whatever was built: each returns, none panics, none waits
    // past its deadline by much (the jobs are instant).
    let bound = input.deadline.min(Duration::from_secs(5)) + Duration::from_secs(2);
    let started = Instant::now();
    let _ = dep.call(|ctx| Ok::<_, std::io::Error>(ctx.attempt()));
    let _ = dep.call(|_| Err::<(), _>(std::io::Error::other("failing")));
    // A retried call sleeps between attempts, for as long as the drawn backoff
    // says (hours, for some draws), when an attempt fails, and even an instant
    // job's attempt fails on a loaded machine when its timeout is a few
    // milliseconds. The caller's own deadline bounds every sleep: a retry
    // never sleeps past it.
    let caller = Duration::from_millis(250);
    let _ = dep.with().timeout(caller).retry().call(|_| Ok::<_, std::io::Error>(()));
    let _ = dep.with().timeout(caller).retry().call(|_| Err::<(), _>(std::io::Error::other("failing")));
    let per_call = bound * 2 + caller * 2 + Duration::from_millis(20);
    prop_assert!(started.elapsed() < per_call * 4, "calls took {:?}", started.elapsed());
    let snap = dep.snapshot();
    prop_assert_eq!(snap.pool.workers, input.workers);
    let _ = format!("{dep:?}");
    prop_assert!(dep.shutdown(Duration::from_secs(1)));
    Ok(true)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, rng_seed: RngSeed::Fixed(0x5eed), ..ProptestConfig::default() })]

    #[test]
    fn dependency_config_builds_or_names_a_bad_field(input in dependency_input()) {
        drive_dependency(&input)?;
    }

    #[test]
    fn extreme_valid_dependency_configs_build_and_run(input in valid_dependency_input()) {
        prop_assert!(input.retry.bad_fields().is_empty() && input.breaker.bad_fields().is_empty());
        prop_assert!(drive_dependency(&input)?, "a valid config builds");
    }
}

// ------------------------------------------------------- files (feature serde)

/// The configuration `input` describes, as a file section holds it.
#[cfg(feature = "serde")]
fn section(input: &DependencyInput) -> watertight::DependencyConfig {
    let mut c = watertight::DependencyConfig::default();
    c.workers = input.workers;
    c.queue = input.queue;
    c.timeout = input.deadline;
    c.deadline_aware_admission = input.admission;
    c.breaker = input.breaker.config();
    c.retry = input.retry.retry().build().expect("a valid retry");
    c
}

#[cfg(feature = "serde")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_seed: RngSeed::Fixed(0x5eed), ..ProptestConfig::default() })]

    /// Any breaker configuration, valid or not, written to TOML reads back
    /// as the same value, and validation then names the same field.
    #[test]
    fn any_breaker_config_round_trips_through_toml(input in breaker_input()) {
        let config = input.config();
        let text = toml::to_string(&config).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back: BreakerConfig = toml::from_str(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        // Debug, so that a NaN rate compares equal to itself.
        prop_assert_eq!(format!("{back:?}"), format!("{config:?}"), "{}", text);
        prop_assert_eq!(back.validate().map_err(|e| e.field()), config.validate().map_err(|e| e.field()));
    }

    /// A valid dependency configuration, written to TOML and JSON, reads back
    /// as the same value through the path-naming reader, and builds the
    /// dependency whose `config()` it is.
    #[test]
    fn valid_dependency_configs_round_trip_through_files(input in valid_dependency_input()) {
        let config = section(&input);
        let text = toml::to_string(&config).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let de = toml::Deserializer::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = watertight::DependencyConfig::from_deserializer(de)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &config, "{}", text);
        let json = serde_json::to_value(&config).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let from_json: watertight::DependencyConfig =
            serde_json::from_value(json).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // JSON's float parsing may differ in the last bit; the rest is exact.
        prop_assert_eq!(from_json.workers, config.workers);
        prop_assert_eq!(from_json.timeout, config.timeout);
        prop_assert_eq!(from_json.breaker.window, config.breaker.window);
        prop_assert_eq!(from_json.retry.jitter(), config.retry.jitter());
    }
}
