//! What the operating system says about this test process (Linux `/proc/self`):
//! its threads and their names, and its resident memory. The soak and chaos tests
//! read these instead of the crate's own counters, so a counter that lies cannot
//! hide a leaked thread.
//!
//! Included by path (`#[path = "support/procfs.rs"] mod procfs;`) from the tests
//! that need it.
#![allow(dead_code)] // each test file uses a different part of this module

use std::fs;
use std::time::{Duration, Instant};

/// Threads of this process, counted from `/proc/self/task`.
pub fn threads() -> usize {
    fs::read_dir("/proc/self/task").expect("read /proc/self/task (Linux only)").count()
}

/// The names of this process's threads (`/proc/self/task/<tid>/comm`; the kernel
/// keeps the first 15 bytes). A thread that exits while being listed is skipped.
pub fn thread_names() -> Vec<String> {
    let tasks = fs::read_dir("/proc/self/task").expect("read /proc/self/task (Linux only)");
    tasks
        .filter_map(|task| fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

/// Threads whose name starts with `prefix` (cut to the kernel's 15 bytes).
pub fn threads_named(prefix: &str) -> usize {
    let prefix = &prefix[..prefix.len().min(15)];
    thread_names().iter().filter(|n| n.starts_with(prefix)).count()
}

/// A field of `/proc/self/status` given in kB (`VmRSS`, `VmHWM`, ...), in bytes.
pub fn status_bytes(field: &str) -> u64 {
    let status = fs::read_to_string("/proc/self/status").expect("read /proc/self/status (Linux only)");
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kb: u64 = line.trim().trim_end_matches("kB").trim().parse().expect("a number of kB");
    kb * 1024
}

/// Resident memory of this process, in bytes.
pub fn rss() -> u64 {
    status_bytes("VmRSS")
}

/// Bytes as MiB with one decimal, for printing.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Polls `read` every 5 ms until it returns `want` or `timeout` passes; returns the
/// last value read. For counts that settle a moment after the work is done (a
/// thread leaves `/proc` only once it has fully exited).
pub fn settle(timeout: Duration, want: usize, mut read: impl FnMut() -> usize) -> usize {
    let give_up = Instant::now() + timeout;
    loop {
        let now = read();
        if now == want || Instant::now() >= give_up {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
