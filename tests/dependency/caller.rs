//! Caller-thread mode (`Mode::CallerThread`): calls on the caller's own thread
//! under a bounded number of permits, with the same breaker, counts and labels,
//! against real providers on loopback.
#![cfg(all(feature = "ureq", feature = "testing"))]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use support::{Fault, provider};
use watertight::dependency::Mode;
use watertight::http::WithDeadline;
use watertight::{
    CallContext, Dependency, Error, Outcome, Rejection,
    breaker::{BreakerConfig, State},
};

fn get(agent: &ureq::Agent, url: &str, ctx: &CallContext) -> Result<String, ureq::Error> {
    agent.get(url).with_deadline(ctx).call()?.body_mut().read_to_string()
}

fn client() -> ureq::Agent {
    ureq::Agent::config_builder().build().into()
}

/// Counts callers inside the job, and the most seen at once.
#[derive(Default)]
struct Inside {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Inside {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn a_hung_provider_answers_every_caller_within_its_deadline_and_never_more_than_the_limit_inside() {
    let hung = provider(Fault::Hang);
    hung.release_on_client_close(true);
    let timeout = Duration::from_millis(200);
    let dep = Dependency::builder("caller-hung")
        .mode(Mode::CallerThread)
        .workers(4)
        .max_wait(Duration::from_millis(50))
        .timeout(timeout)
        // A breaker that stays CLOSED for this test: every caller reaches the limit.
        .breaker(BreakerConfig::count_based(100).minimum_calls(100))
        .build()
        .unwrap();
    assert_eq!(dep.mode(), Mode::CallerThread);
    assert!(dep.pool().is_none());
    let inside = Arc::new(Inside::default());
    let worst = thread::scope(|s| {
        let callers: Vec<_> = (0..16)
            .map(|_| {
                let (dep, inside, url) = (dep.clone(), Arc::clone(&inside), hung.url());
                s.spawn(move || {
                    let agent = client();
                    let mut worst = Duration::ZERO;
                    for _ in 0..3 {
                        let (agent, url, inside) = (agent.clone(), url.clone(), Arc::clone(&inside));
                        let started = Instant::now();
                        let answer = dep.call(move |ctx: &CallContext| {
                            inside.enter();
                            let body = get(&agent, &url, ctx);
                            inside.leave();
                            body
                        });
                        worst = worst.max(started.elapsed());
                        let outcome = answer.unwrap_err().outcome();
                        assert!(
                            matches!(outcome, Outcome::TimedOut | Outcome::Failed | Outcome::QueueFull),
                            "{outcome}"
                        );
                    }
                    worst
                })
            })
            .collect();
        callers.into_iter().map(|c| c.join().unwrap()).max().unwrap()
    });
    // The deadline is cooperative: ureq's with_deadline ends each hung request at it.
    assert!(
        worst <= timeout + Duration::from_millis(50) + Duration::from_millis(400),
        "slowest caller {worst:?}"
    );
    assert!(
        inside.most.load(Ordering::SeqCst) <= 4,
        "at most the limit inside: {}",
        inside.most.load(Ordering::SeqCst)
    );
    assert!(inside.most.load(Ordering::SeqCst) >= 2, "the callers overlapped");
    let snap = dep.snapshot();
    assert_eq!(snap.calls.total(), 48, "{:?}", snap.calls);
    assert!(snap.calls.queue_full > 0, "callers beyond the limit were refused after max_wait");
    assert_eq!(snap.pool.busy, 0);
}

/// A caller-thread dependency of one permit, callers waiting at most `max_wait` for it.
fn one_permit(name: &str, max_wait: Duration) -> Dependency {
    Dependency::builder(name)
        .mode(Mode::CallerThread)
        .workers(1)
        .max_wait(max_wait)
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap()
}

/// A thread whose call to `url` holds `dep`'s one permit; returns once it is inside.
fn hold_the_permit(dep: &Dependency, url: String) -> thread::JoinHandle<Result<String, Error<ureq::Error>>> {
    let dep2 = dep.clone();
    let holder = thread::spawn(move || {
        let agent = client();
        dep2.call(move |ctx: &CallContext| get(&agent, &url, ctx))
    });
    assert!(support::wait_until(Duration::from_secs(5), || dep.snapshot().pool.busy == 1));
    holder
}

#[test]
fn a_waiter_that_gives_up_frees_its_place_and_a_panic_releases_the_permit() {
    let slow = provider(Fault::Slow(Duration::from_millis(300)));
    let dep = one_permit("caller-one", Duration::from_millis(40));
    let holder = hold_the_permit(&dep, slow.url());
    // Waits its 40 ms, gives up, and leaves the queue.
    let started = Instant::now();
    let refused = dep.call(|_: &CallContext| Ok::<_, std::io::Error>(1));
    assert!(matches!(refused, Err(Error::Rejected { reason: Rejection::QueueFull, .. })), "{refused:?}");
    assert!(started.elapsed() < Duration::from_millis(250), "it waited max_wait, not the holder's call");
    assert_eq!(dep.snapshot().pool.waiting, 0, "the waiter that gave up holds no place");
    assert_eq!(holder.join().unwrap().unwrap(), "ok");
    // The place is free at once.
    assert_eq!(dep.call(|_: &CallContext| Ok::<_, std::io::Error>(2)).unwrap(), 2);

    // A panic is a failure, and its guard gives the permit back.
    let panicked = dep.call(|_: &CallContext| -> Result<u32, std::io::Error> { panic!("boom") });
    assert!(matches!(panicked, Err(Error::Panicked(ref m)) if m.contains("boom")), "{panicked:?}");
    assert_eq!(dep.call(|_: &CallContext| Ok::<_, std::io::Error>(3)).unwrap(), 3);
    assert_eq!(dep.snapshot().calls.panicked, 1);
}

#[test]
fn the_same_breaker_and_labels_and_live_reconfiguration() {
    let failing = provider(Fault::Error(503));
    let dep = Dependency::builder("caller-breaker")
        .mode(Mode::CallerThread)
        .workers(2)
        .timeout(Duration::from_secs(2))
        .breaker(BreakerConfig::count_based(10).minimum_calls(5).open_for(Duration::from_secs(60)))
        .build()
        .unwrap();
    let agent = client();
    for _ in 0..5 {
        let (agent, url) = (agent.clone(), failing.url());
        assert!(dep.call(move |ctx: &CallContext| get(&agent, &url, ctx)).is_err());
    }
    assert_eq!(dep.breaker().state(), State::Open);
    let refused = dep.call(|_: &CallContext| Ok::<_, std::io::Error>(0));
    assert_eq!(refused.unwrap_err().outcome(), Outcome::NotPermitted);
    let calls = dep.snapshot().calls;
    assert_eq!((calls.failed, calls.not_permitted), (5, 1));

    // A detached call needs a worker: refused at once, saying so in its count.
    assert_eq!(dep.spawn(|_: &CallContext| Ok::<_, std::io::Error>(())), Err(Rejection::QueueFull));

    // Live: more permits, a longer wait; the mode itself and a queue are refused by name.
    let mut config = dep.config();
    assert_eq!((config.mode, config.workers, config.queue), (Mode::CallerThread, 2, 0));
    config.workers = 6;
    config.max_wait = Duration::from_millis(20);
    dep.reconfigure(config.clone()).unwrap();
    assert_eq!((dep.config().workers, dep.config().max_wait), (6, Duration::from_millis(20)));
    assert_eq!(dep.snapshot().pool.workers, 6);
    let mut pool_mode = config.clone();
    pool_mode.mode = Mode::Pool;
    assert_eq!(dep.reconfigure(pool_mode).unwrap_err().field(), "mode");
    let mut queued = config;
    queued.queue = 3;
    assert_eq!(dep.reconfigure(queued).unwrap_err().field(), "queue");
    assert_eq!(dep.config().workers, 6, "a refused change changes nothing");
}

#[test]
fn a_caller_waiting_through_a_shutdown_is_refused_not_run() {
    let slow = provider(Fault::Slow(Duration::from_millis(300)));
    let dep = one_permit("caller-stop", Duration::from_secs(2));
    let holder = hold_the_permit(&dep, slow.url());
    let ran = Arc::new(AtomicUsize::new(0));
    let waiter = {
        let (dep, ran) = (dep.clone(), Arc::clone(&ran));
        thread::spawn(move || {
            dep.call(move |_: &CallContext| {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(())
            })
        })
    };
    assert!(support::wait_until(Duration::from_secs(5), || dep.snapshot().pool.waiting == 1));
    assert!(dep.shutdown(Duration::from_secs(1)));
    assert_eq!(holder.join().unwrap().unwrap(), "ok", "a call inside finishes");
    let refused = waiter.join().unwrap();
    assert!(matches!(refused, Err(Error::Rejected { reason: Rejection::ShuttingDown, .. })), "{refused:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

#[cfg(feature = "serde")]
#[test]
fn the_mode_in_a_file() {
    let section: watertight::DependencyConfig =
        toml::from_str("mode = \"caller_thread\"\nworkers = 3\nmax_wait = \"5ms\"").unwrap();
    assert_eq!(section.mode, Mode::CallerThread);
    let dep = Dependency::builder("from-file").config(section).build().unwrap();
    assert_eq!((dep.mode(), dep.config().workers), (Mode::CallerThread, 3));
    let err = toml::from_str::<watertight::DependencyConfig>("mode = \"threads\"").unwrap_err();
    assert!(err.to_string().contains("mode"), "{err}");
}
