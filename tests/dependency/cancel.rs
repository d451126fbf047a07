//! A job blocked in one system call with no timeout of its own, cancelled
//! from outside at its deadline by the hook it registered
//! ([`CallContext::on_cancel`]): its worker is free again moments after the
//! deadline, for a blocking call (its caller's wait ends) and for a
//! detached one (nobody waits). And [`CallContext::io_timeout`].

use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use watertight::{CallContext, Dependency, Error};

const TIMEOUT: Duration = Duration::from_millis(100);
/// How soon after the deadline the worker must be free again (generous).
const FREED_WITHIN: Duration = Duration::from_millis(200);

/// A loopback server that accepts connections and never answers; it keeps
/// them open until the test's process ends.
fn silent_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    addr
}

/// Connects and reads with no read timeout: blocks until the hook shuts the
/// socket down.
fn blocked_read(addr: SocketAddr) -> impl FnOnce(&CallContext) -> io::Result<usize> + Send + 'static {
    move |ctx: &CallContext| {
        let mut stream = TcpStream::connect(addr)?;
        let clone = stream.try_clone()?;
        ctx.on_cancel(move || {
            let _ = clone.shutdown(Shutdown::Both);
        });
        stream.read(&mut [0u8; 16])
    }
}

fn one_worker(name: &str) -> Dependency {
    // The next call queues for the one worker rather than being refused.
    Dependency::builder(name).workers(1).queue(1).timeout(TIMEOUT).build().unwrap()
}

/// When the next call, submitted at once, ran: how long after `deadline`.
fn next_call_runs_after(dep: &Dependency, deadline: Instant) -> Duration {
    let ran = dep.with().timeout(Duration::from_secs(2)).call(|_| Ok::<_, io::Error>(Instant::now()));
    ran.expect("the next call runs").saturating_duration_since(deadline)
}

#[test]
fn a_blocked_read_is_cancelled_when_its_caller_times_out() {
    let addr = silent_server();
    let dep = one_worker("cancel-read");
    for _ in 0..3 {
        let called = Instant::now();
        let err = dep.call(blocked_read(addr)).unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        let after = next_call_runs_after(&dep, called + TIMEOUT);
        assert!(after < FREED_WITHIN, "the worker was free {after:?} after the deadline");
    }
}

#[test]
fn a_detached_blocked_read_is_cancelled_at_its_deadline() {
    let addr = silent_server();
    let dep = one_worker("cancel-spawned");
    for _ in 0..3 {
        let called = Instant::now();
        dep.spawn(blocked_read(addr)).expect("admitted");
        // Nobody waits for it; the next call (which has a timeout as short)
        // comes once its deadline has passed.
        thread::sleep((called + TIMEOUT).saturating_duration_since(Instant::now()));
        let after = next_call_runs_after(&dep, called + TIMEOUT);
        assert!(after < FREED_WITHIN, "the worker was free {after:?} after the deadline");
    }
}

#[test]
fn io_timeout_is_never_zero_and_an_error_once_late() {
    let dep = Dependency::builder("io-timeout").timeout(Duration::from_millis(50)).build().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    // Its answer (a timeout, but for a caller waking late) is not the point.
    let _ = dep.call(move |ctx: &CallContext| {
        let early = ctx.io_timeout();
        thread::sleep(ctx.remaining() + Duration::from_millis(1));
        let _ = tx.send((early, ctx.io_timeout()));
        Ok::<_, io::Error>(())
    });
    let (early, late) = rx.recv_timeout(Duration::from_secs(10)).expect("the job ran");
    let early = early.unwrap();
    assert!(early >= Duration::from_millis(1) && early <= Duration::from_millis(50), "{early:?}");
    assert_eq!(late.unwrap_err().kind(), io::ErrorKind::TimedOut);
}

/// A hedge that wins leaves its losing attempt cancelled: the loser's hook
/// fires as soon as the call has its answer, long before the deadline.
#[test]
fn a_losing_hedge_blocked_in_a_read_is_cancelled_when_another_wins() {
    let addr = silent_server();
    let dep = Dependency::builder("cancel-hedge")
        .workers(2)
        .timeout(Duration::from_secs(5))
        .retry(watertight::retry::Retry::builder().budget(100.0, 1000).build().unwrap())
        .hedge(watertight::dependency::Hedge::after(Duration::from_millis(20)))
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let answered = Instant::now();
    let answer = dep.with().hedge().call(move |ctx: &CallContext| match ctx.attempt() {
        1 => {
            let read = blocked_read(addr)(ctx);
            let _ = tx.send(Instant::now());
            read
        }
        n => Ok(n as usize),
    });
    assert_eq!(answer.unwrap(), 2);
    let loser_returned = rx.recv_timeout(Duration::from_secs(4)).expect("the losing attempt was cancelled");
    let after = loser_returned.saturating_duration_since(answered);
    assert!(after < Duration::from_secs(1), "the loser returned {after:?} after the call began");
}
