//! Priority admission (`with().priority(..)`, `reserved_for_critical`): under
//! pressure sheddable calls go first, then normal ones, and the reserved share
//! is never taken by a lower priority, with 16 threads racing for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use watertight::dependency::Priority;
use watertight::{CallContext, Dependency, Error, Outcome, Rejection};

/// A job that holds its worker for `hold`, counting the callers of its class inside.
fn holding(
    inside: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    hold: Duration,
) -> impl FnOnce(&CallContext) -> Result<(), std::io::Error> {
    move |_ctx| {
        let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
        most.fetch_max(n, Ordering::SeqCst);
        thread::sleep(hold);
        inside.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn the_reserved_share_is_never_taken_by_lower_priorities_with_16_threads_racing() {
    let dep = Dependency::builder("reserved")
        .workers(4)
        .queue(0)
        .reserved_for_critical(1)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let shed = [AtomicU64::new(0), AtomicU64::new(0)]; // sheddable, normal
    let critical_refused = AtomicU64::new(0);
    let critical_served = AtomicU64::new(0);
    let until = Instant::now() + Duration::from_secs(2);
    thread::scope(|s| {
        for t in 0..15 {
            let (dep, inside, most, shed) = (dep.clone(), Arc::clone(&inside), Arc::clone(&most), &shed);
            let priority = if t % 2 == 0 { Priority::Sheddable } else { Priority::Normal };
            s.spawn(move || {
                for _ in 0..2000 {
                    if Instant::now() >= until {
                        break;
                    }
                    let job = holding(Arc::clone(&inside), Arc::clone(&most), Duration::from_millis(2));
                    match dep.with().priority(priority).call(job) {
                        Ok(()) => {}
                        Err(Error::Rejected { reason: Rejection::Shed, .. }) => {
                            shed[usize::from(priority == Priority::Normal)].fetch_add(1, Ordering::Relaxed);
                        }
                        Err(other) => panic!("a {priority:?} call: {other}"),
                    }
                }
            });
        }
        // The sixteenth thread: critical calls, one after another.
        let (dep, refused, served) = (dep.clone(), &critical_refused, &critical_served);
        s.spawn(move || {
            let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            while Instant::now() < until {
                let job = holding(Arc::clone(&inside), Arc::clone(&most), Duration::from_millis(2));
                match dep.with().priority(Priority::Critical).call(job) {
                    Ok(()) => served.fetch_add(1, Ordering::Relaxed),
                    Err(_) => refused.fetch_add(1, Ordering::Relaxed),
                };
            }
        });
    });
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "lower priorities held {most} of 4 workers: the reserved one was taken");
    assert_eq!(critical_refused.load(Ordering::Relaxed), 0, "a critical call was refused");
    assert!(critical_served.load(Ordering::Relaxed) > 50, "{critical_served:?}");
    let (sheddable_shed, normal_shed) = (shed[0].load(Ordering::Relaxed), shed[1].load(Ordering::Relaxed));
    assert!(
        sheddable_shed > 0 && normal_shed > 0,
        "the pool was under pressure: {sheddable_shed} {normal_shed}"
    );
    let calls = dep.snapshot().calls;
    assert_eq!(calls.shed, sheddable_shed + normal_shed);
    assert_eq!(dep.breaker().metrics().not_permitted + dep.breaker().metrics().failed, 0, "never recorded");
}

#[test]
fn with_room_every_priority_is_admitted_and_the_setting_is_checked() {
    let dep = Dependency::builder("roomy").workers(4).reserved_for_critical(2).build().unwrap();
    for p in [Priority::Sheddable, Priority::Normal, Priority::Critical] {
        assert_eq!(
            dep.with().priority(p).call(move |_: &CallContext| Ok::<_, std::io::Error>(p.as_str())).unwrap(),
            p.as_str()
        );
    }
    assert_eq!(dep.snapshot().calls.shed, 0);
    let err = Dependency::builder("greedy").workers(4).reserved_for_critical(4).build().unwrap_err();
    assert_eq!(err.field(), "reserved_for_critical");
    assert_eq!(Outcome::Shed.as_str(), "shed");
    // Live: the share can change while calls run.
    let mut config = dep.config();
    config.reserved_for_critical = 1;
    dep.reconfigure(config).unwrap();
    assert_eq!(dep.config().reserved_for_critical, 1);
}
