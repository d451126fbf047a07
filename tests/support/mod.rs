//! Helpers shared by the integration tests: a fake provider from `watertight::testing`
//! (for the test files built with the `testing` feature), ureq agents, and a bounded
//! poller.
#![allow(dead_code)] // each test file uses a different part of this module

use std::thread;
use std::time::{Duration, Instant};

#[cfg(feature = "testing")]
#[allow(unused_imports)] // not every test file uses every name
pub use watertight::testing::{Call, FakeProvider, Fault};

/// A provider that answers `200 ok` while healthy.
#[cfg(feature = "testing")]
pub fn provider(fault: Fault) -> FakeProvider {
    FakeProvider::start("test", fault, |_| (200, "ok".to_owned())).expect("bind a loopback port")
}

/// An agent whose every request gives up after `timeout`; 4xx and 5xx are
/// `ureq::Error::StatusCode` (ureq's default).
pub fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().timeout_global(Some(timeout)).build().into()
}

/// Like [`agent`], but 4xx and 5xx come back as responses, not errors.
pub fn agent_status_ok(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder().timeout_global(Some(timeout)).http_status_as_error(false).build().into()
}

/// Polls `cond` every 2 ms until it holds (`true`) or `timeout` passes (`false`).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= give_up {
            return false;
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// The median of some durations (sorts them).
pub fn median(samples: &mut [Duration]) -> Duration {
    assert!(!samples.is_empty(), "no samples");
    samples.sort();
    samples[samples.len() / 2]
}

/// Warnings logged by this test binary (the first call installs the logger;
/// a binary has one, so every test that reads warnings goes through this).
pub fn warnings() -> &'static std::sync::Mutex<Vec<String>> {
    install_logger();
    &logged().0
}

/// The lines about rejected calls that dependencies logged at `debug` in
/// this test binary (through the same logger as [`warnings`]).
pub fn rejection_lines() -> &'static std::sync::Mutex<Vec<String>> {
    install_logger();
    &logged().1
}

/// Lines kept by the logger.
type Lines = std::sync::Mutex<Vec<String>>;

/// What the logger keeps: warnings, and the dependencies' debug lines
/// about rejected calls.
fn logged() -> &'static (Lines, Lines) {
    static LOGGED: std::sync::OnceLock<(Lines, Lines)> = std::sync::OnceLock::new();
    LOGGED.get_or_init(Default::default)
}

fn install_logger() {
    struct Capture;
    static LOGGER: Capture = Capture;
    impl log::Log for Capture {
        fn enabled(&self, m: &log::Metadata) -> bool {
            m.level() <= log::Level::Warn
                || (m.level() <= log::Level::Debug && m.target().starts_with("watertight::dependency"))
        }
        fn log(&self, record: &log::Record) {
            if !self.enabled(record.metadata()) {
                return;
            }
            let line = record.args().to_string();
            if record.level() <= log::Level::Warn {
                logged().0.lock().unwrap().push(line);
            } else if line.contains("rejected") {
                logged().1.lock().unwrap().push(line);
            }
        }
        fn flush(&self) {}
    }
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
}
