//! Feature `tracing`: a call's trace crosses the hop to the worker thread.
//!
//! A tracing-subscriber layer collects every span (with its resolved parent,
//! its fields and the threads it was entered on) and every event. Each test
//! installs it as a *scoped* subscriber on its own thread only, so the tests
//! run in parallel without seeing each other, and the worker threads see it only
//! if watertight carries it across.
#![cfg(feature = "tracing")]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::{LookupSpan, Registry};
use watertight::{
    CallContext, Dependency, Error, Rejection,
    breaker::{BreakerConfig, State},
};

#[derive(Debug, Clone)]
struct SpanRecord {
    id: u64,
    name: &'static str,
    parent: Option<u64>,
    fields: BTreeMap<String, String>,
    /// Names of the threads the span was entered on.
    entered_on: Vec<String>,
}

#[derive(Debug, Clone)]
struct EventRecord {
    target: String,
    level: tracing::Level,
    fields: BTreeMap<String, String>,
    /// The span current when it was emitted.
    span: Option<u64>,
}

#[derive(Default, Clone)]
struct Collected {
    spans: Arc<Mutex<Vec<SpanRecord>>>,
    events: Arc<Mutex<Vec<EventRecord>>>,
}

impl Collected {
    fn spans(&self) -> Vec<SpanRecord> {
        self.spans.lock().unwrap().clone()
    }
    fn events(&self) -> Vec<EventRecord> {
        self.events.lock().unwrap().clone()
    }
    fn span_named(&self, name: &str) -> Vec<SpanRecord> {
        self.spans().into_iter().filter(|s| s.name == name).collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Collected {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let parent = ctx.span(id).and_then(|s| s.parent()).map(|p| p.id().into_u64());
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.spans.lock().unwrap().push(SpanRecord {
            id: id.into_u64(),
            name: attrs.metadata().name(),
            parent,
            fields,
            entered_on: Vec::new(),
        });
    }

    fn on_enter(&self, id: &Id, _ctx: Context<'_, S>) {
        let thread = thread::current().name().unwrap_or("<unnamed>").to_owned();
        if let Some(s) = self.spans.lock().unwrap().iter_mut().find(|s| s.id == id.into_u64()) {
            s.entered_on.push(thread);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        self.events.lock().unwrap().push(EventRecord {
            target: event.metadata().target().to_owned(),
            level: *event.metadata().level(),
            fields,
            span: ctx.lookup_current().map(|s| s.id().into_u64()),
        });
    }
}

/// Runs `f` with a collecting subscriber as this thread's default.
fn collect<R>(f: impl FnOnce() -> R) -> (Collected, R) {
    let collected = Collected::default();
    let subscriber = Registry::default().with(collected.clone());
    let out = tracing::subscriber::with_default(subscriber, f);
    (collected, out)
}

fn dependency(name: &str) -> Dependency {
    Dependency::builder(name)
        .workers(2)
        .timeout(Duration::from_secs(5))
        .breaker(BreakerConfig::count_based(2).minimum_calls(2).open_for(Duration::from_secs(60)))
        .build()
        .expect("a valid dependency")
}

#[test]
fn the_job_span_is_a_child_of_the_callers_span_across_the_hop() {
    let dep = dependency("traced");
    let caller_thread = thread::current().name().unwrap_or("<unnamed>").to_owned();
    let (collected, job_thread) = collect(|| {
        let request = tracing::info_span!("request", route = "/checkout");
        let _in_request = request.enter();
        dep.call(|_ctx: &CallContext| {
            tracing::info!(inside = true, "provider called");
            Ok::<_, std::io::Error>(thread::current().name().unwrap_or("<unnamed>").to_owned())
        })
        .expect("the job succeeds")
    });

    let request = collected.span_named("request");
    let jobs = collected.span_named("job");
    assert_eq!(request.len(), 1, "one caller span: {request:?}");
    assert_eq!(jobs.len(), 1, "one job span: {jobs:?}");
    let (request, job) = (&request[0], &jobs[0]);

    assert_eq!(job.parent, Some(request.id), "the job's parent is the caller's span: {job:?}");
    assert!(job_thread.starts_with("wt-tr"), "ran on a worker, not the caller: {job_thread}");
    assert_ne!(job_thread, caller_thread);
    assert_eq!(job.entered_on, vec![job_thread.clone()], "entered on the worker only: {job:?}");
    assert_eq!(job.fields.get("dependency").map(String::as_str), Some("traced"));
    assert_eq!(job.fields.get("attempt").map(String::as_str), Some("1"));
    let deadline_ms: u64 = job.fields["deadline_ms"].parse().expect("deadline_ms is a number");
    assert!(deadline_ms > 0 && deadline_ms <= 5_000, "remaining ms of a 5 s deadline: {deadline_ms}");

    // What the job logs lands in the job's span, on the caller's subscriber.
    let inside: Vec<_> = collected.events().into_iter().filter(|e| e.fields.contains_key("inside")).collect();
    assert_eq!(inside.len(), 1, "the job's own event reached the caller's subscriber: {inside:?}");
    assert_eq!(inside[0].span, Some(job.id));
}

#[test]
fn without_a_caller_span_the_job_span_is_a_root() {
    let dep = dependency("traced-root");
    let (collected, ()) = collect(|| {
        dep.call(|_ctx: &CallContext| Ok::<_, std::io::Error>(())).expect("the job succeeds");
    });
    let jobs = collected.span_named("job");
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0].parent, None);
    assert_eq!(jobs[0].fields.get("dependency").map(String::as_str), Some("traced-root"));
}

#[test]
fn a_rejection_and_a_breaker_transition_are_events() {
    let dep = dependency("traced-open");
    let (collected, result) = collect(|| {
        dep.breaker().transition_to(State::ForcedOpen);
        dep.call(|_ctx: &CallContext| Ok::<_, std::io::Error>(()))
    });
    assert!(matches!(result, Err(Error::Rejected { reason: Rejection::NotPermitted, .. })), "{result:?}");
    assert!(collected.span_named("job").is_empty(), "a rejected call runs no job");

    let events = collected.events();
    let rejected: Vec<_> =
        events.iter().filter(|e| e.fields.get("rejection").is_some_and(|r| r == "not_permitted")).collect();
    assert_eq!(rejected.len(), 1, "one rejection event: {events:?}");
    assert_eq!(rejected[0].target, "watertight");
    assert_eq!(rejected[0].level, tracing::Level::DEBUG);
    assert_eq!(rejected[0].fields.get("dependency").map(String::as_str), Some("traced-open"));

    let transition: Vec<_> = events.iter().filter(|e| e.fields.contains_key("to")).collect();
    assert_eq!(transition.len(), 1, "one transition event: {events:?}");
    assert_eq!(transition[0].fields.get("from").map(String::as_str), Some("closed"));
    assert_eq!(transition[0].fields.get("to").map(String::as_str), Some("forced_open"));
    assert_eq!(transition[0].level, tracing::Level::INFO);
}

#[test]
fn a_timeout_is_an_event() {
    let dep = Dependency::builder("traced-late")
        .workers(1)
        .timeout(Duration::from_millis(50))
        .build()
        .expect("a valid dependency");
    let (collected, result) = collect(|| {
        dep.call(|ctx: &CallContext| {
            // Answer only once the caller has given up: an answer that
            // lands between the deadline and the caller's wake-up is taken.
            let began = std::time::Instant::now();
            while !ctx.is_cancelled() && began.elapsed() < Duration::from_secs(5) {
                thread::sleep(Duration::from_millis(5));
            }
            Ok::<_, std::io::Error>(())
        })
    });
    assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
    let events = collected.events();
    let timed_out: Vec<_> = events.iter().filter(|e| e.fields.contains_key("waited_ms")).collect();
    assert_eq!(timed_out.len(), 1, "one timeout event: {events:?}");
    assert_eq!(timed_out[0].fields.get("dependency").map(String::as_str), Some("traced-late"));
    let waited: u64 = timed_out[0].fields["waited_ms"].parse().unwrap();
    assert!((40..5_000).contains(&waited), "waited about the 50 ms deadline: {waited}");
}
