//! One server with its fraud provider, from start to a teardown that proves itself:
//! the provider released, the clients stopped, the server and the pools shut down,
//! and the process's thread count back where it was.

use std::fs;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use watertight::server::{self, ServerHandle};

use super::REQUEST_THREADS;
use super::app::{App, Mode};
use watertight::testing::{FakeProvider, Fault};

/// How long an id may take to reach the state it measures (the breaker open, the
/// request pool pinned, ...) before it is measured anyway, with a warning.
const SETTLE_CAP: Duration = Duration::from_secs(10);
/// How long a teardown waits for the process's thread count to come back (tiny_http
/// lets its idle connection threads go after 5 s).
const THREADS_BACK_CAP: Duration = Duration::from_secs(12);

/// The number of threads of this process (Linux), to prove teardowns complete.
fn live_threads() -> Option<usize> {
    fs::read_dir("/proc/self/task").ok().map(|tasks| tasks.count())
}

/// Polls `cond` every 5 ms until it holds or `cap` passes; returns how long it took,
/// or `None` if it never held.
fn wait_for(cap: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let began = Instant::now();
    loop {
        if cond() {
            return Some(began.elapsed());
        }
        if began.elapsed() >= cap {
            return None;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// The clients of a scenario, stopped at its teardown in two steps.
pub trait Clients {
    /// Tells them to stop; comes before the provider is released.
    fn signal_stop(&self);
    /// Waits for every one of them, reporting under `label`; comes after the provider
    /// is released, so that none is still held by it.
    fn join(self, label: &str);
}

/// One server with its fraud provider, from start to teardown.
pub struct Scenario {
    label: String,
    threads_before: Option<usize>,
    pub fraud: FakeProvider,
    pub app: Arc<App>,
    pub server: ServerHandle,
    pub base: String,
}

impl Scenario {
    pub fn start(label: &str, mode: Mode, fault: Fault) -> Scenario {
        let threads_before = live_threads();
        let fraud = FakeProvider::start("fraud", fault, |_| (200, r#"{"decision":"approved"}"#.to_owned()))
            .expect("bind the fraud provider on loopback");
        let app = Arc::new(App::new(mode, &fraud.url()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the server on loopback");
        let handler = Arc::clone(&app);
        let server = server::serve(listener, REQUEST_THREADS, move |request, _ctx| handler.handle(request))
            .expect("start the server");
        let base = format!("http://{}", server.addr().to_ip().expect("a TCP address"));
        Scenario { label: label.to_owned(), threads_before, fraud, app, server, base }
    }

    /// Waits (bounded) until `cond` holds and says so.
    pub fn settle(&self, what: &str, cond: impl FnMut() -> bool) {
        match wait_for(SETTLE_CAP, cond) {
            Some(took) => eprintln!("[{}] {what} after {took:.1?}", self.label),
            None => eprintln!("[{}] WARNING: not {what} within {SETTLE_CAP:?}; measuring anyway", self.label),
        }
    }

    /// Stops `clients`, releases the provider, waits for the clients, shuts the server
    /// and the pools down, and waits for the thread count to come back.
    pub fn finish(self, clients: impl Clients) {
        let Scenario { label, threads_before, fraud, app, server, base: _ } = self;
        clients.signal_stop();
        // Hung handlers close their connections now: request threads and pool
        // workers held by fraud get an error and return.
        fraud.set_fault(Fault::Healthy);
        clients.join(&label);
        // Requests still queued in the server are answered first, then the threads exit.
        server.shutdown();
        match Arc::try_unwrap(app) {
            Ok(app) => {
                if !app.shutdown() {
                    eprintln!("[{label}] WARNING: a pool did not stop within its grace");
                }
            }
            Err(_) => eprintln!("[{label}] WARNING: the app is still shared after the server stopped"),
        }
        drop(fraud);
        if let Some(before) = threads_before {
            match wait_for(THREADS_BACK_CAP, || live_threads().is_some_and(|n| n <= before)) {
                Some(took) => eprintln!("[{label}] torn down: {before} threads again after {took:.1?}"),
                None => eprintln!(
                    "[{label}] WARNING: {} threads left, {before} before",
                    live_threads().unwrap_or_default()
                ),
            }
        }
    }
}

/// Tears down scenarios that ran side by side, each with its clients, the last
/// started first. Only the first one's thread count is checked: it was taken before
/// any of them started, and that check comes last, when all of them are gone (the
/// others' counts included threads the first kept starting meanwhile).
pub fn teardown_side_by_side(mut started: Vec<(Scenario, impl Clients)>) {
    for (scenario, _) in started.iter_mut().skip(1) {
        scenario.threads_before = None;
    }
    for (scenario, clients) in started.into_iter().rev() {
        scenario.finish(clients);
    }
}
