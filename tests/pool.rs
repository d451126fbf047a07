//! The pool with real threads: deadlines, rejection, expiry, panics,
//! isolation between pools, shutdown, and the stats identity.
//!
//! Hung jobs block on a [`Gate`] that the test opens at its end (and that opens
//! itself if the test fails), so no thread outlives its test. Nothing sleeps to
//! let threads start: a `Barrier` proves the workers are inside their jobs.
//! Pools whose threads are counted have two-letter names, so that
//! `wt-<name>-<i>` fits the 15 bytes Linux keeps of a thread's name.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use watertight::{
    CallContext, Error, Rejection,
    pool::{Pool, PoolStats, Submit},
};

type Res<T> = Result<T, std::io::Error>;

/// Tests that assert real-time bounds take this, and so do the tests that
/// keep many threads busy, so the two never share the (small) machine.
static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn timing_sensitive() -> std::sync::MutexGuard<'static, ()> {
    TIMING.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A gate hung jobs wait at; opened by `open` or by dropping it.
struct Gate {
    tx: Option<Sender<()>>,
    rx: Receiver<()>,
}

impl Gate {
    fn new() -> Self {
        let (tx, rx) = crossbeam_channel::bounded(0);
        Gate { tx: Some(tx), rx }
    }

    /// A waiter for a job to block on until the gate opens.
    fn waiter(&self) -> Receiver<()> {
        self.rx.clone()
    }

    fn open(&mut self) {
        self.tx.take();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

/// Occupies every worker of `pool` with a job that blocks at `gate`, and
/// returns once all of them are running (proved by a barrier).
fn hang_all_workers(pool: &Pool, gate: &Gate) -> Vec<watertight::pool::Ticket<(), std::io::Error>> {
    let n = pool.workers();
    let started = Arc::new(Barrier::new(n + 1));
    let tickets = (0..n)
        .map(|_| {
            let started = started.clone();
            let wait = gate.waiter();
            let job = move |_ctx: &CallContext| {
                started.wait();
                let _ = wait.recv();
                Ok(())
            };
            submit_when_taken(pool, Duration::from_secs(60), job)
        })
        .collect();
    started.wait();
    tickets
}

/// Submits `job`, retrying (bounded) while the pool refuses it as full: with
/// queue 0 a worker takes a job only once it is back waiting for one.
fn submit_when_taken<T, F>(
    pool: &Pool,
    timeout: Duration,
    mut job: F,
) -> watertight::pool::Ticket<T, std::io::Error>
where
    F: FnOnce(&CallContext) -> Res<T> + Send + 'static,
    T: Send + 'static,
{
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match pool.submit_timeout(timeout, job) {
            Ok(t) => return t,
            Err(e) => {
                assert_eq!(e.rejection(), Rejection::QueueFull);
                assert!(Instant::now() < until, "no worker took the job");
                job = e.into_job();
                thread::yield_now();
            }
        }
    }
}

/// Threads of this process whose kernel name starts with `prefix`; `None`
/// where `/proc` is not available.
fn threads_named(prefix: &str) -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    Some(
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end().starts_with(prefix))
            .count(),
    )
}

/// Waits (bounded, 5 s) for the kernel to stop listing threads named
/// `prefix`: a joined thread can stay listed for a moment after `join`.
fn threads_gone(prefix: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match threads_named(prefix) {
            None | Some(0) => return true,
            Some(_) if Instant::now() >= until => return false,
            Some(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// The identity documented on `PoolStats`.
fn assert_identity(s: &PoolStats) {
    assert_eq!(
        s.submitted,
        s.completed + s.panicked + s.expired + s.queued as u64 + s.busy as u64,
        "accounting identity broken: {s:?}"
    );
}

#[test]
fn hung_job_times_out_at_its_deadline_and_is_abandoned() {
    let _serial = timing_sensitive();
    let pool = Pool::builder("hung").workers(1).queue(0).build().unwrap();
    let mut gate = Gate::new();
    let wait = gate.waiter();
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let started = Arc::new(Barrier::new(2));
    let (s2, c2) = (started.clone(), saw_cancel.clone());

    let ticket = submit_when_taken(&pool, Duration::from_millis(200), move |ctx: &CallContext| {
        s2.wait();
        let _ = wait.recv();
        c2.store(ctx.is_cancelled(), Ordering::SeqCst);
        Res::Ok(())
    });
    // Submitted at most this long ago.
    let t0 = Instant::now();
    started.wait();
    let err = ticket.wait().unwrap_err();
    let elapsed = t0.elapsed();
    match err {
        Error::Timeout { waited } => {
            assert!(waited >= Duration::from_millis(200), "gave up early: {waited:?}");
            assert!(waited < Duration::from_millis(700), "waited {waited:?}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(elapsed < Duration::from_millis(700), "returned {elapsed:?} after submission");

    // The abandoned job still holds the only worker: nothing more gets in.
    let s = pool.stats();
    assert_eq!((s.busy, s.abandoned, s.timed_out), (1, 1, 1), "{s:?}");
    let refused = pool.submit_timeout(Duration::from_secs(1), |_| Res::Ok(())).unwrap_err();
    assert_eq!(refused.rejection(), Rejection::QueueFull);

    gate.open();
    assert!(pool.shutdown(Duration::from_secs(10)));
    assert!(saw_cancel.load(Ordering::SeqCst), "the job did not see its caller leave");
    let s = pool.stats();
    assert_eq!((s.busy, s.abandoned, s.completed, s.workers), (0, 0, 1, 0), "{s:?}");
    assert_identity(&s);
}

#[test]
fn full_pool_rejects_at_once_and_hands_the_job_back() {
    let _serial = timing_sensitive();
    let pool = Pool::builder("full").workers(4).queue(8).build().unwrap();
    let gate = Gate::new();
    let _hung = hang_all_workers(&pool, &gate);
    let queued: Vec<_> = (0..8)
        .map(|_| pool.submit_timeout(Duration::from_secs(60), |_| Res::Ok(())).expect("room in the queue"))
        .collect();
    assert_eq!(pool.stats().queued, 8);

    let mut slowest = Duration::ZERO;
    for i in 0..1000u32 {
        let t = Instant::now();
        let err = pool.submit_timeout(Duration::from_secs(60), move |_| Res::Ok(i)).unwrap_err();
        let took = t.elapsed();
        slowest = slowest.max(took);
        assert_eq!(err.rejection(), Rejection::QueueFull);
        assert!(took < Duration::from_millis(5), "rejection {i} took {took:?}");
        let _job = err.into_job();
    }
    let s = pool.stats();
    assert_eq!((s.rejected, s.submitted, s.busy, s.queued), (1000, 12, 4, 8), "{s:?}");
    eprintln!("slowest of 1000 rejections: {slowest:?}");
    drop(gate);
    for t in queued {
        assert!(t.wait().is_ok());
    }
}

#[test]
fn a_job_that_expired_in_the_queue_never_runs() {
    let _serial = timing_sensitive();
    let pool = Pool::builder("expq").workers(1).queue(2).build().unwrap();
    let mut gate = Gate::new();
    let hung = hang_all_workers(&pool, &gate);
    let ran = Arc::new(AtomicUsize::new(0));

    // Deadline passes while queued: the caller times out, the job never runs.
    let r1 = ran.clone();
    let t0 = Instant::now();
    let short = pool
        .submit_timeout(Duration::from_millis(100), move |_| {
            r1.fetch_add(1, Ordering::SeqCst);
            Res::Ok(())
        })
        .unwrap();
    assert!(short.wait().unwrap_err().is_timeout());
    assert!(t0.elapsed() < Duration::from_millis(600));

    // Caller gone (ticket dropped) with plenty of deadline left: never runs.
    let r2 = ran.clone();
    let dropped = pool
        .submit_timeout(Duration::from_secs(60), move |_| {
            r2.fetch_add(1, Ordering::SeqCst);
            Res::Ok(())
        })
        .unwrap();
    drop(dropped);

    let s = pool.stats();
    assert_eq!((s.queued, s.abandoned), (2, 0), "queued jobs are not abandoned: {s:?}");
    gate.open();
    for t in hung {
        assert!(t.wait().is_ok());
    }
    assert!(pool.shutdown(Duration::from_secs(10)));
    assert_eq!(ran.load(Ordering::SeqCst), 0, "an expired job ran");
    let s = pool.stats();
    assert_eq!((s.expired, s.completed, s.timed_out), (2, 1, 1), "{s:?}");
    assert_identity(&s);
}

#[test]
fn a_panic_keeps_every_worker_and_the_next_call_succeeds() {
    let pool = Pool::builder("pn").workers(2).queue(4).build().unwrap();
    // Both workers inside a job at once: both threads exist and carry their name.
    let gate = Gate::new();
    let warm = hang_all_workers(&pool, &gate);
    drop(gate);
    for t in warm {
        assert!(t.wait().is_ok());
    }
    let err =
        pool.call_timeout(Duration::from_secs(10), |_| -> Res<()> { panic!("boom {}", 42) }).unwrap_err();
    match err {
        Error::Panicked(msg) => assert_eq!(msg, "boom 42"),
        other => panic!("expected a panic, got {other:?}"),
    }
    let err =
        pool.call_timeout(Duration::from_secs(10), |_| -> Res<()> { panic!("static boom") }).unwrap_err();
    assert!(matches!(err, Error::Panicked(ref m) if m == "static boom"), "{err:?}");

    let name =
        pool.call_timeout(Duration::from_secs(10), |_| Res::Ok(thread::current().name().map(String::from)));
    let name = name.unwrap().unwrap();
    assert!(name.starts_with("wt-pn-"), "{name}");
    let s = pool.stats();
    assert_eq!((s.workers, s.panicked, s.completed), (2, 2, 3), "{s:?}");
    if let Some(n) = threads_named("wt-pn-") {
        assert_eq!(n, 2, "live worker threads after panics");
    }
    assert!(pool.shutdown(Duration::from_secs(10)));
    assert!(threads_gone("wt-pn-"));
    assert_identity(&pool.stats());
}

/// Linux keeps 15 bytes of a thread's name: a long pool name is cut so that
/// the name still shows and the worker's index is kept whole.
#[test]
fn worker_names_fit_fifteen_bytes_and_keep_the_index() {
    let pool = Pool::builder("postgres-primary").workers(11).queue(0).build().unwrap();
    let barrier = Arc::new(Barrier::new(12));
    let tickets: Vec<_> = (0..11)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            pool.submit_timeout(Duration::from_secs(10), move |_| {
                barrier.wait();
                Res::Ok(thread::current().name().map(String::from).unwrap_or_default())
            })
            .unwrap()
        })
        .collect();
    barrier.wait();
    let mut names: Vec<String> = tickets.into_iter().map(|t| t.wait().unwrap()).collect();
    names.sort();
    assert!(names.iter().all(|n| n.len() <= 15 && n.starts_with("wt-postgres-")), "{names:?}");
    assert!(names.contains(&"wt-postgres-p-0".to_owned()), "{names:?}");
    assert!(names.contains(&"wt-postgres-10".to_owned()), "{names:?}");
    assert!(pool.shutdown(Duration::from_secs(10)));
}

#[test]
fn a_hung_pool_does_not_slow_its_neighbour() {
    let _serial = timing_sensitive();
    let hung = Pool::builder("ha").workers(2).queue(2).build().unwrap();
    let healthy = Pool::builder("hb").workers(2).queue(4).build().unwrap();
    let gate = Gate::new();
    let _stuck = hang_all_workers(&hung, &gate);
    let _queued: Vec<_> =
        (0..2).map(|_| hung.submit_timeout(Duration::from_secs(60), |_| Res::Ok(())).unwrap()).collect();

    let deadline = Duration::from_secs(1);
    let all = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..1000u64 {
        // The hung pool refuses at once...
        let refused = hung.submit_timeout(deadline, |_| Res::Ok(())).unwrap_err();
        assert_eq!(refused.rejection(), Rejection::QueueFull);
        // ...and the healthy one answers, far inside its deadline.
        let t = Instant::now();
        assert_eq!(healthy.call_timeout(deadline, move |_| Res::Ok(i * 2)).unwrap(), i * 2);
        let took = t.elapsed();
        slowest = slowest.max(took);
        assert!(took < deadline / 4, "call {i} took {took:?}");
        assert!(all.elapsed() < Duration::from_secs(60), "load loop over its time bound");
    }
    eprintln!("1000 calls beside a hung pool: {:?} in all, slowest {slowest:?}", all.elapsed());
    assert_eq!(healthy.stats().completed, 1000);
    assert_eq!(hung.stats().rejected, 1000);
}

#[test]
fn shutdown_answers_every_queued_caller_and_joins_every_worker() {
    let pool = Pool::builder("s1").workers(2).queue(64).build().unwrap();
    let mut gate = Gate::new();
    let hung = hang_all_workers(&pool, &gate);
    assert_eq!(threads_named("wt-s1-").unwrap_or(2), 2);

    // 64 callers, each on its own thread, each waiting on a queued job.
    let (submitted_tx, submitted) = crossbeam_channel::bounded(64);
    let callers: Vec<_> = (0..64)
        .map(|i| {
            let pool = pool.clone();
            let submitted_tx = submitted_tx.clone();
            thread::spawn(move || {
                let ticket = pool.submit_timeout(Duration::from_secs(60), move |_| Res::Ok(i)).unwrap();
                submitted_tx.send(()).unwrap();
                let t = Instant::now();
                (ticket.wait(), t.elapsed())
            })
        })
        .collect();
    for _ in 0..64 {
        submitted.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    assert_eq!(pool.stats().queued, 64);

    // The workers stay stuck past the grace period: the queue cannot run.
    let t = Instant::now();
    let joined = pool.shutdown(Duration::from_millis(200));
    let took = t.elapsed();
    assert!(!joined, "workers stuck in jobs cannot have been joined");
    assert!(took < Duration::from_secs(2), "shutdown took {took:?}");
    for c in callers {
        let (answer, waited) = c.join().unwrap();
        assert_eq!(answer.unwrap_err().rejection(), Some(Rejection::ShuttingDown));
        assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
    }
    let refused = pool.submit_timeout(Duration::from_secs(1), |_| Res::Ok(0)).unwrap_err();
    assert_eq!(refused.rejection(), Rejection::ShuttingDown);

    // Once the hung jobs return, their callers get their answers and a second
    // shutdown joins every worker.
    gate.open();
    for t in hung {
        assert!(t.wait().is_ok());
    }
    assert!(pool.shutdown(Duration::from_secs(10)));
    let s = pool.stats();
    assert_eq!((s.workers, s.completed, s.expired, s.submitted), (0, 2, 64, 66), "{s:?}");
    assert_identity(&s);
    assert!(threads_gone("wt-s1-"), "worker threads still listed");
}

#[test]
fn shutdown_lets_queued_work_finish_within_grace() {
    let pool = Pool::builder("s2").workers(2).queue(64).build().unwrap();
    let mut gate = Gate::new();
    let hung = hang_all_workers(&pool, &gate);
    let queued: Vec<_> = (0..64u32)
        .map(|i| pool.submit_timeout(Duration::from_secs(60), move |_| Res::Ok(i)).unwrap())
        .collect();
    // Release the workers from another thread once shutdown has begun.
    let opener = {
        let pool = pool.clone();
        thread::spawn(move || {
            while !pool.is_shut_down() {
                thread::yield_now();
            }
            gate.open();
        })
    };
    assert!(pool.shutdown(Duration::from_secs(10)), "every worker joined");
    opener.join().unwrap();
    for t in hung {
        assert!(t.wait().is_ok());
    }
    for (i, t) in queued.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap(), i as u32);
    }
    let s = pool.stats();
    assert_eq!((s.completed, s.expired, s.workers), (66, 0, 0), "{s:?}");
    assert!(threads_gone("wt-s2-"));
}

#[test]
fn dropping_the_last_handle_shuts_down() {
    let pool = Pool::builder("d1").workers(3).queue(4).drop_grace(Duration::from_secs(10)).build().unwrap();
    let t = pool.submit_timeout(Duration::from_secs(10), |_| Res::Ok(5)).unwrap();
    assert_eq!(t.wait().unwrap(), 5);
    // A queued call outlives the handle and still gets its answer.
    let gate = Gate::new();
    let hung = hang_all_workers(&pool, &gate);
    let queued = pool.submit_timeout(Duration::from_secs(60), |_| Res::Ok(6)).unwrap();
    let closer = thread::spawn(move || drop(pool));
    drop(gate);
    closer.join().unwrap();
    assert_eq!(queued.wait().unwrap(), 6);
    for t in hung {
        assert!(t.wait().is_ok());
    }
    assert!(threads_gone("wt-d1-"));
}

#[test]
fn stats_add_up_over_every_kind_of_ending() {
    let pool = Pool::builder("acct").workers(2).queue(4).build().unwrap();
    // 10 successes, 5 failures, 3 panics.
    for i in 0..18 {
        let r = pool.call_timeout(Duration::from_secs(10), move |_| match i {
            0..10 => Ok(i),
            10..15 => Err(std::io::Error::other("no")),
            _ => panic!("planned {i}"),
        });
        match i {
            0..10 => assert!(r.is_ok()),
            10..15 => assert!(matches!(r, Err(Error::Failed(_)))),
            _ => assert!(matches!(r, Err(Error::Panicked(_)))),
        }
    }
    // 2 time out while running (abandoned), 2 are withdrawn from the queue
    // (tickets dropped), 2 more fill the queue, and 1 is refused.
    let mut gate = Gate::new();
    let wait = gate.waiter();
    let started = Arc::new(Barrier::new(3));
    let abandoned: Vec<_> = (0..2)
        .map(|_| {
            let (w, s) = (wait.clone(), started.clone());
            pool.submit_timeout(Duration::from_millis(150), move |_| {
                s.wait();
                let _ = w.recv();
                Res::Ok(0)
            })
            .unwrap()
        })
        .collect();
    started.wait();
    let withdrawn: Vec<_> =
        (0..2).map(|_| pool.submit_timeout(Duration::from_secs(60), |_| Res::Ok(1)).unwrap()).collect();
    let kept: Vec<_> =
        (0..2).map(|_| pool.submit_timeout(Duration::from_secs(60), |_| Res::Ok(2)).unwrap()).collect();
    assert!(pool.submit_timeout(Duration::from_secs(60), |_| Res::Ok(3)).is_err());
    drop(withdrawn);
    for t in abandoned {
        assert!(t.wait().unwrap_err().is_timeout());
    }
    let mid = pool.stats();
    assert_eq!((mid.busy, mid.abandoned, mid.queued), (2, 2, 4), "{mid:?}");
    assert_identity(&mid);

    gate.open();
    for t in kept {
        assert_eq!(t.wait().unwrap(), 2);
    }
    assert!(pool.shutdown(Duration::from_secs(10)));
    let s = pool.stats();
    assert_eq!(s.submitted, 18 + 2 + 2 + 2, "{s:?}");
    assert_eq!(s.completed, 10 + 5 + 2 + 2, "{s:?}");
    assert_eq!((s.panicked, s.expired, s.rejected, s.timed_out), (3, 2, 1, 2), "{s:?}");
    assert_eq!((s.busy, s.queued, s.abandoned), (0, 0, 0), "{s:?}");
    assert_identity(&s);
    // The workers' histograms: one sample for each job that ran (panics
    // included, with the time they took); expired jobs never ran.
    for h in [pool.queue_wait_histogram(), pool.run_histogram()] {
        assert_eq!(h.snapshot().count(), s.completed + s.panicked, "{s:?}");
    }
}

#[test]
fn queue_zero_hands_off_only_to_an_idle_worker() {
    let pool = Pool::builder("hand").workers(2).queue(0).build().unwrap();
    assert_eq!(pool.queue_capacity(), 0);

    // `build` returns once the workers wait for work: the first call is taken.
    let first = pool.call_timeout(Duration::from_secs(10), |_| Res::Ok(1));
    assert_eq!(first.unwrap(), 1);

    // A worker that has just answered is back at the queue within moments; a
    // hand-off waits for it (briefly) instead of refusing. Scheduling on a
    // loaded machine can still make a few miss.
    let mut refusals = 0u64;
    for i in 0..200u64 {
        match pool.call_timeout(Duration::from_secs(10), move |_| Res::Ok(i)) {
            Ok(v) => assert_eq!(v, i),
            Err(e) => {
                assert_eq!(e.rejection(), Some(Rejection::QueueFull));
                refusals += 1;
            }
        }
    }
    eprintln!("hand-off refusals in 200 back-to-back calls: {refusals}");
    assert!(refusals <= 20, "{refusals} of 200 back-to-back hand-offs refused");
    assert_eq!(pool.stats().rejected, refusals);

    // Both workers busy: nothing waits, the next job is refused at once.
    let gate = Gate::new();
    let hung = hang_all_workers(&pool, &gate);
    let err = pool.submit_timeout(Duration::from_secs(10), |_| Res::Ok(2)).unwrap_err();
    assert_eq!(err.rejection(), Rejection::QueueFull);
    assert_eq!(pool.stats().queued, 0);
    drop(gate);
    for t in hung {
        assert!(t.wait().is_ok());
    }
}

#[test]
fn never_more_than_n_jobs_at_once() {
    let _serial = timing_sensitive();
    let pool = Pool::builder("cap").workers(3).queue(3).build().unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tickets = Vec::new();
    let all = Instant::now();
    for _ in 0..300 {
        let (running, peak) = (running.clone(), peak.clone());
        let job = move |_: &CallContext| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            // Long enough for callers to give up on some: abandoned work.
            thread::sleep(Duration::from_millis(2));
            running.fetch_sub(1, Ordering::SeqCst);
            Res::Ok(())
        };
        if let Ok(t) = pool.submit_timeout(Duration::from_millis(1), job) {
            tickets.push(t);
        }
        if tickets.len() >= 6 {
            for t in tickets.drain(..) {
                let _ = t.wait();
            }
        }
        assert!(all.elapsed() < Duration::from_secs(30));
    }
    drop(tickets);
    assert!(pool.shutdown(Duration::from_secs(10)));
    assert!(peak.load(Ordering::SeqCst) <= 3, "peak {}", peak.load(Ordering::SeqCst));
    assert_identity(&pool.stats());
}

#[test]
fn context_tells_the_job_about_its_call() {
    let pool = Pool::builder("ctx").workers(1).queue(1).build().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let (d, rem, att, dep, cancelled) = pool
        .submit(Submit::by(deadline), |ctx: &CallContext| {
            Res::Ok((
                ctx.deadline(),
                ctx.remaining(),
                ctx.attempt(),
                ctx.dependency().to_owned(),
                ctx.is_cancelled(),
            ))
        })
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(d, deadline);
    assert!(rem <= Duration::from_secs(5) && rem > Duration::from_secs(3), "{rem:?}");
    assert_eq!((att, dep.as_str(), cancelled), (1, "ctx", false));
    assert!(format!("{pool:?}").contains("ctx"));
}

#[test]
fn invalid_config_names_the_field() {
    let err = Pool::builder("bad").workers(0).build().unwrap_err();
    assert_eq!(err.field(), "workers");
    assert!(err.to_string().starts_with("workers must be"), "{err}");
    assert_eq!(Pool::builder("bad").stack_size(10).build().unwrap_err().field(), "stack_size");
    assert_eq!(Pool::builder("bad").queue(usize::MAX).build().unwrap_err().field(), "queue");
}

#[test]
fn concurrent_callers_each_get_exactly_one_outcome() {
    let _serial = timing_sensitive();
    const CALLERS: usize = 8;
    const CALLS: u64 = 300;
    let pool = Pool::builder("mix").workers(3).queue(4).build().unwrap();
    let start = Arc::new(Barrier::new(CALLERS));
    let all = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|c| {
            let (pool, start) = (pool.clone(), start.clone());
            thread::spawn(move || {
                // [ok, failed, panicked, timed out, rejected]
                let mut seen = [0u64; 5];
                start.wait();
                for i in 0..CALLS {
                    let n = c as u64 * CALLS + i;
                    let r = pool.call_timeout(Duration::from_millis(2 + n % 5), move |ctx: &CallContext| {
                        match n % 50 {
                            // Rare: a panic's report is slow to print.
                            7 => panic!("planned"),
                            1 | 11 | 21 | 31 | 41 => Err(std::io::Error::other("planned")),
                            // Sometimes outlive the deadline: abandoned work.
                            2 | 12 | 22 | 32 | 42 => {
                                thread::sleep(ctx.remaining() + Duration::from_millis(1));
                                Ok(n)
                            }
                            _ => Ok(n),
                        }
                    });
                    let slot = match r {
                        Ok(v) => {
                            assert_eq!(v, n);
                            0
                        }
                        Err(Error::Failed(_)) => 1,
                        Err(Error::Panicked(_)) => 2,
                        Err(Error::Timeout { .. }) => 3,
                        // Deadline-aware admission (on by default) may refuse a 2-6 ms
                        // deadline behind queued work: a rejection like a full queue.
                        Err(Error::Rejected {
                            reason: Rejection::QueueFull | Rejection::DeadlineUnmeetable,
                            ..
                        }) => {
                            // Let the workers catch up rather than spin.
                            thread::yield_now();
                            4
                        }
                        Err(other) => panic!("unexpected outcome {other:?}"),
                    };
                    seen[slot] += 1;
                    assert!(all.elapsed() < Duration::from_secs(60), "load loop over its time bound");
                }
                seen
            })
        })
        .collect();
    let mut seen = [0u64; 5];
    for c in callers {
        for (total, n) in seen.iter_mut().zip(c.join().unwrap()) {
            *total += n;
        }
    }
    assert_eq!(seen.iter().sum::<u64>(), CALLERS as u64 * CALLS, "a call without exactly one outcome");
    assert!(pool.shutdown(Duration::from_secs(10)));
    let s = pool.stats();
    eprintln!("outcomes [ok, failed, panicked, timeout, rejected] = {seen:?}; {s:?}");
    assert_identity(&s);
    assert_eq!((s.busy, s.queued, s.abandoned), (0, 0, 0), "{s:?}");
    assert_eq!(s.rejected, seen[4]);
    assert_eq!(s.timed_out, seen[3]);
    assert_eq!(s.submitted, seen[..4].iter().sum::<u64>());
    // A caller that got an answer was answered by a job that ran; a timed-out
    // caller's job either ran late (abandoned), or never started (expired).
    assert!(s.completed >= seen[0] + seen[1], "{s:?}");
    assert!(s.panicked >= seen[2], "{s:?}");
    assert_eq!(s.completed + s.panicked + s.expired, s.submitted, "{s:?}");
}

#[path = "support/procfs.rs"]
mod procfs;

/// Polls (bounded, 10 s) until both the kernel and the pool count `want`
/// worker threads named `wt-<name>-`; returns what each says last.
fn settle_threads(pool: &Pool, prefix: &str, want: usize) -> (usize, usize) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (os, live) = (procfs::threads_named(prefix), pool.stats().workers);
        if (os == want && live == want) || Instant::now() >= until {
            return (os, live);
        }
        thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn resize_validates_like_the_builder_and_reports_the_live_settings() {
    let pool = Pool::builder("rv").workers(2).queue(4).build().unwrap();
    assert_eq!(pool.resize(0, 4, Duration::ZERO).unwrap_err().field(), "workers");
    assert_eq!(pool.resize(5000, 4, Duration::ZERO).unwrap_err().field(), "workers");
    assert_eq!(pool.resize(2, usize::MAX, Duration::ZERO).unwrap_err().field(), "queue");
    assert_eq!(pool.resize(2, 4, Duration::from_secs(61)).unwrap_err().field(), "max_wait");
    // A refused change changes nothing.
    assert_eq!((pool.workers(), pool.queue_capacity(), pool.max_wait()), (2, 4, Duration::ZERO));

    pool.resize(3, 0, Duration::from_millis(7)).unwrap();
    assert_eq!((pool.workers(), pool.queue_capacity(), pool.max_wait()), (3, 0, Duration::from_millis(7)));
    assert!(!pool.deadline_aware_admission(), "never with a queue of 0");
    pool.resize(3, 2, Duration::from_millis(7)).unwrap();
    assert!(pool.deadline_aware_admission());
    pool.set_deadline_aware_admission(false);
    assert!(!pool.deadline_aware_admission());
    assert_eq!(settle_threads(&pool, "wt-rv-", 3), (3, 3));
    assert_eq!(pool.call_timeout(Duration::from_secs(10), |_| Res::Ok(1)).unwrap(), 1);

    assert!(pool.shutdown(Duration::from_secs(10)));
    let err = pool.resize(4, 2, Duration::ZERO).unwrap_err();
    assert_eq!(err.field(), "workers");
    assert!(err.to_string().contains("shut down"), "{err}");
    assert!(threads_gone("wt-rv-"));
}

#[test]
fn a_smaller_queue_keeps_every_queued_call_and_busy_workers_finish_first() {
    let _serial = timing_sensitive();
    let pool = Pool::builder("rq").workers(3).queue(8).build().unwrap();
    let mut gate = Gate::new();
    let hung = hang_all_workers(&pool, &gate);
    let queued: Vec<_> = (0..8u32)
        .map(|i| pool.submit_timeout(Duration::from_secs(60), move |_| Res::Ok(i)).expect("room"))
        .collect();

    // Down to 1 worker and no queue, with every worker busy and 8 queued.
    pool.resize(1, 0, Duration::ZERO).unwrap();
    assert_eq!(pool.stats().queued, 8, "a smaller queue dropped queued calls");
    let refused = pool.submit_timeout(Duration::from_secs(60), |_| Res::Ok(99)).unwrap_err();
    assert_eq!(refused.rejection(), Rejection::QueueFull);
    // Nobody is cut short: the three busy workers are still there.
    assert_eq!(procfs::threads_named("wt-rq-"), 3);

    gate.open();
    for t in hung {
        assert!(t.wait().is_ok());
    }
    for (i, t) in queued.into_iter().enumerate() {
        assert_eq!(t.wait().unwrap(), i as u32, "queued call {i}");
    }
    assert_eq!(settle_threads(&pool, "wt-rq-", 1), (1, 1));
    assert!(pool.shutdown(Duration::from_secs(10)));
    let s = pool.stats();
    assert_eq!((s.completed, s.expired, s.rejected, s.workers), (11, 0, 1, 0), "{s:?}");
    assert_identity(&s);
    assert!(threads_gone("wt-rq-"));
}

/// 2,000 calls from 16 callers while the workers go 10 -> 2 -> 10 and the
/// queue 8 -> 0 -> 8: every call gets exactly one answer, within its
/// deadline + 200 ms, no job runs twice, and the threads follow the setting.
#[test]
fn resize_while_calls_run_answers_every_call_once() {
    const CALLERS: usize = 16;
    const CALLS: usize = 2_000;
    const TIMEOUT: Duration = Duration::from_millis(500);
    const SLACK: Duration = Duration::from_millis(200);
    let _serial = timing_sensitive();
    let max_wait = Duration::from_millis(50);
    let pool = Pool::builder("rz").workers(10).queue(8).max_wait(max_wait).build().unwrap();
    assert_eq!(settle_threads(&pool, "wt-rz-", 10), (10, 10));

    let ran: Arc<Vec<AtomicUsize>> = Arc::new((0..CALLS).map(|_| AtomicUsize::new(0)).collect());
    let answered = Arc::new(AtomicUsize::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(CALLERS + 1));
    let all = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (pool, ran, answered, next, start) =
                (pool.clone(), ran.clone(), answered.clone(), next.clone(), start.clone());
            thread::spawn(move || {
                // [ok, timed out, refused], and the latest return past the deadline.
                let mut seen = [0usize; 3];
                let mut latest = Duration::ZERO;
                start.wait();
                loop {
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    if id >= CALLS {
                        break;
                    }
                    let ran = ran.clone();
                    let job = move |ctx: &CallContext| {
                        ran[id].fetch_add(1, Ordering::Relaxed);
                        // 1-4 ms; one call in 50 outlives its deadline (abandoned).
                        let nap = if id % 50 == 7 {
                            ctx.remaining() + Duration::from_millis(5)
                        } else {
                            Duration::from_millis(1 + id as u64 % 4)
                        };
                        thread::sleep(nap);
                        Res::Ok(id)
                    };
                    let called = Instant::now();
                    let outcome = pool.call_timeout(TIMEOUT, job);
                    latest = latest.max(called.elapsed().saturating_sub(TIMEOUT));
                    let kind = match outcome {
                        Ok(v) => {
                            assert_eq!(v, id, "another call's answer");
                            0
                        }
                        Err(Error::Timeout { .. }) => 1,
                        // Refused: full, or (deadline-aware admission, right after an abandoned
                        // job has raised the mean service time) a wait longer than the deadline.
                        Err(Error::Rejected {
                            reason: Rejection::QueueFull | Rejection::DeadlineUnmeetable,
                            ..
                        }) => {
                            // Do not hammer a full pool.
                            thread::sleep(Duration::from_millis(1));
                            2
                        }
                        Err(other) => panic!("call {id}: unexpected {other:?}"),
                    };
                    seen[kind] += 1;
                    answered.fetch_add(1, Ordering::Relaxed);
                    assert!(all.elapsed() < Duration::from_secs(120), "load loop over its time bound");
                }
                (seen, latest)
            })
        })
        .collect();
    start.wait();

    // The resizes, at fixed points of progress, each while calls are in flight.
    let wait_for = |n: usize| {
        let until = Instant::now() + Duration::from_secs(60);
        while answered.load(Ordering::Relaxed) < n {
            assert!(Instant::now() < until, "calls stopped progressing");
            thread::sleep(Duration::from_millis(1));
        }
    };
    wait_for(500);
    pool.resize(2, 0, max_wait).unwrap();
    let shrunk = settle_threads(&pool, "wt-rz-", 2);
    let in_flight_after_shrink = CALLS - answered.load(Ordering::Relaxed);
    wait_for(1_100);
    pool.resize(10, 8, max_wait).unwrap();
    let grown = settle_threads(&pool, "wt-rz-", 10);
    let in_flight_after_grow = CALLS - answered.load(Ordering::Relaxed);
    let mut names = procfs::thread_names();
    names.retain(|n| n.starts_with("wt-rz-"));

    let mut seen = [0usize; 3];
    let mut latest = Duration::ZERO;
    for c in callers {
        let (s, l) = c.join().unwrap();
        for (total, n) in seen.iter_mut().zip(s) {
            *total += n;
        }
        latest = latest.max(l);
    }
    eprintln!(
        "resize under load: [ok, timed out, full] = {seen:?}; latest return {latest:?} past the deadline; \
         {in_flight_after_shrink} / {in_flight_after_grow} calls left after the shrink / grow settled; {:?}",
        all.elapsed()
    );
    assert_eq!(shrunk, (2, 2), "threads (os, pool) after 10 -> 2");
    assert_eq!(grown, (10, 10), "threads (os, pool) after 2 -> 10");
    assert!(in_flight_after_grow > 0, "the grow settled only after the last call");
    names.sort();
    let mut want: Vec<_> = (0..10).map(|i| format!("wt-rz-{i}")).collect();
    want.sort();
    assert_eq!(names, want, "regrown workers reuse the free indexes");
    assert_eq!(seen.iter().sum::<usize>(), CALLS, "a call without exactly one answer");
    assert!(latest <= SLACK, "a call returned {latest:?} after its deadline");
    let twice = ran.iter().filter(|r| r.load(Ordering::Relaxed) > 1).count();
    assert_eq!(twice, 0, "jobs ran more than once");

    assert!(pool.shutdown(Duration::from_secs(10)), "shutdown after resizes joins every thread");
    assert!(threads_gone("wt-rz-"));
    let s = pool.stats();
    let ran_total: usize = ran.iter().map(|r| r.load(Ordering::Relaxed)).sum();
    assert_eq!(s.completed as usize, ran_total, "{s:?}");
    assert_eq!(s.rejected as usize, seen[2], "{s:?}");
    assert_eq!(s.timed_out as usize, seen[1], "{s:?}");
    assert_eq!(s.submitted as usize, seen[0] + seen[1], "{s:?}");
    assert_eq!((s.busy, s.queued, s.abandoned, s.workers), (0, 0, 0, 0), "{s:?}");
    assert_identity(&s);
    // Through the shrink and the regrowth, the workers' histograms kept one
    // sample per job that ran: none lost with a retired worker, none twice.
    for h in [pool.queue_wait_histogram(), pool.run_histogram()] {
        assert_eq!(h.snapshot().count(), s.completed + s.panicked, "{s:?}");
    }
}

/// A job queued for a worker on its way back to the queue (instead of
/// waking a parked one) must still run promptly: a worker pinned by a hung
/// job is never counted as coming back, and a shrink that retires the
/// worker a job was queued for hands the job to an idle one. With one worker
/// hung, four callers' calls are all answered in time, first with the pool
/// left alone, then while it is shrunk and regrown.
#[test]
fn calls_flow_past_a_hung_worker_and_through_shrinks_and_regrowth() {
    const CALLERS: usize = 4;
    const CALLS: usize = 300;
    let _timing = timing_sensitive();
    let pool = Pool::builder("pin").workers(4).queue(8).build().unwrap();
    let mut gate = Gate::new();
    let started = Arc::new(Barrier::new(2));
    let hung = {
        let (started, wait) = (started.clone(), gate.waiter());
        pool.submit_timeout(Duration::from_secs(60), move |_| {
            started.wait();
            let _ = wait.recv();
            Res::Ok(())
        })
        .unwrap()
    };
    started.wait();
    for resizing in [false, true] {
        let done = AtomicUsize::new(0);
        thread::scope(|s| {
            for c in 0..CALLERS {
                let (pool, done) = (&pool, &done);
                s.spawn(move || {
                    for i in 0..CALLS {
                        let x = c * CALLS + i;
                        let got = pool.call_timeout(Duration::from_secs(10), move |_| Res::Ok(x));
                        assert_eq!(got.expect("answered in time, past the hung worker"), x);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            // Shrink to two (the hung one and one more) and grow back while
            // the calls flow; bounded in rounds and in time.
            let until = Instant::now() + Duration::from_secs(20);
            let mut round = 0;
            while resizing && done.load(Ordering::Relaxed) < CALLERS * CALLS && Instant::now() < until {
                pool.resize(if round % 2 == 0 { 2 } else { 4 }, 8, Duration::ZERO).unwrap();
                round += 1;
                thread::yield_now();
            }
        });
        assert_eq!(done.load(Ordering::Relaxed), CALLERS * CALLS, "resizing: {resizing}");
    }
    gate.open();
    assert!(hung.wait().is_ok());
    assert!(pool.shutdown(Duration::from_secs(10)));
    let s = pool.stats();
    assert_eq!(s.completed as usize, 2 * CALLERS * CALLS + 1, "{s:?}");
    assert_identity(&s);
}
