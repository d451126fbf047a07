//! [`PoolBuilder`]: a pool's settings, their validation, and the start of its
//! workers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::queue::Queue;
use super::stats::{PoolCounters, PoolLatency};
use super::{Control, Handle, Pool, Shared};
use crate::error::ConfigError;
use crate::latency::Latency;
use crate::time::saturating_nanos;

/// Most workers one pool may have: far beyond any sane bulkhead, low enough to
/// catch a typo before it spawns a million threads.
pub(super) const MAX_WORKERS: usize = 4096;
/// Largest queue: the queue is allocated up front, and a bulkhead's queue
/// should be a handful of jobs anyway (see the crate's capacity notes).
pub(super) const MAX_QUEUE: usize = 1 << 20;
/// Smallest stack accepted: room for the unwinding machinery of a panic.
pub(super) const MIN_STACK: usize = 64 * 1024;
/// The longest `max_wait`: a wait for room is meant to absorb a burst, not to
/// hold a caller.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(60);
pub(super) const DEFAULT_WORKERS: usize = 10;
pub(super) const DEFAULT_DROP_GRACE: Duration = Duration::from_secs(1);

/// Configures a [`Pool`]; [`Pool::builder`] makes one.
#[derive(Debug, Clone)]
pub struct PoolBuilder {
    name: String,
    // The settings a dependency's builder reads back (`DependencyBuilder::pool`).
    pub(crate) workers: usize,
    pub(crate) queue: usize,
    stack_size: Option<usize>,
    drop_grace: Duration,
    pub(crate) admission: bool,
    pub(crate) max_wait: Duration,
    record_latency: bool,
}

impl PoolBuilder {
    pub(super) fn new(name: String) -> Self {
        PoolBuilder {
            name,
            workers: DEFAULT_WORKERS,
            queue: 0,
            stack_size: None,
            drop_grace: DEFAULT_DROP_GRACE,
            admission: true,
            max_wait: Duration::ZERO,
            record_latency: true,
        }
    }

    /// The pool's name, as given to [`Pool::builder`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same settings under another name (a dependency's pool takes the
    /// dependency's).
    pub(crate) fn rename(mut self, name: String) -> Self {
        self.name = name;
        self
    }

    /// Number of worker threads. Default 10. Must be 1 to 4096.
    /// [`Pool::resize`] changes it while the pool runs.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Jobs that may wait for a worker. Default 0: direct hand-off, a job is
    /// accepted only when a worker is idle to take it (one just back from a
    /// call, or starting, counts: the job is queued for it, nothing spins).
    /// At most 2^20. [`Pool::resize`] changes it while the pool runs.
    pub fn queue(mut self, q: usize) -> Self {
        self.queue = q;
        self
    }

    /// Stack size of each worker thread, in bytes. Default: the standard
    /// library's (2 MiB unless `RUST_MIN_STACK` says otherwise). At least
    /// 64 KiB.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// How long dropping the last [`Pool`] handle waits for running and
    /// queued work, as [`Pool::shutdown`]'s grace. Default 1 s.
    pub fn drop_grace(mut self, grace: Duration) -> Self {
        self.drop_grace = grace;
        self
    }

    /// Whether to refuse at once, with
    /// [`Rejection::DeadlineUnmeetable`](crate::Rejection::DeadlineUnmeetable),
    /// a job whose deadline is nearer than the estimated wait behind the
    /// queued work ([`Pool::estimated_wait`]). Default `true`.
    ///
    /// Such a job could only time out; refusing it frees the caller at once
    /// and adds no load. The estimate is consulted only while the queue is
    /// not empty; with a queue of 0 the check is skipped.
    pub fn deadline_aware_admission(mut self, enabled: bool) -> Self {
        self.admission = enabled;
        self
    }

    /// How long a submission may wait for room when every worker is busy and
    /// the queue is full (Resilience4j's bulkhead `maxWaitDuration`). Default
    /// zero: refused at once with `QueueFull`. At most one minute.
    ///
    /// Admission: [waiting for room, by time](crate::pool#waiting-for-room-by-time).
    /// Before the pool has timed any call, `max_wait` alone bounds the wait.
    /// [`Registry::check_capacity`](crate::Registry::check_capacity) counts
    /// waiters as short holds.
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// Whether workers record the queue-wait and run-time histograms. On by
    /// default; off only to measure what recording costs (benches/overhead.rs).
    #[doc(hidden)]
    pub fn latency_histograms(mut self, on: bool) -> Self {
        self.record_latency = on;
        self
    }

    /// Checks the settings and starts the workers.
    ///
    /// Errors name the field: `name` (empty, or containing a NUL byte),
    /// `workers`, `queue`, `max_wait`, `stack_size`; and `workers` again if the operating
    /// system refuses to start that many threads.
    pub fn build(self) -> Result<Pool, ConfigError> {
        if self.name.is_empty() || self.name.contains('\0') {
            return Err(ConfigError::new("name", "non-empty, without NUL bytes", format!("{:?}", self.name)));
        }
        check_settings(self.workers, self.queue, self.max_wait)?;
        if let Some(s) = self.stack_size
            && s < MIN_STACK
        {
            return Err(ConfigError::new("stack_size", "at least 65536 bytes", s));
        }

        let shared = Arc::new(Shared {
            name: Arc::from(self.name.as_str()),
            stats: PoolCounters::default(),
            service: Latency::default(),
            latency: PoolLatency::default(),
            grace_over: AtomicBool::new(false),
            queue: Queue::new(self.queue, self.workers),
            record_latency: self.record_latency,
            running: super::stats::Running::new(),
        });
        let (exit_tx, exits) = crossbeam_channel::unbounded();
        let mut control = Control {
            threads: Vec::with_capacity(self.workers),
            exits,
            exit_tx,
            stack_size: self.stack_size,
        };
        let spawned = control.spawn_n(&shared, self.workers);
        let handle = Handle {
            shared,
            drop_grace: self.drop_grace,
            workers: AtomicUsize::new(self.workers),
            queue: AtomicUsize::new(self.queue),
            admission: AtomicBool::new(self.admission),
            max_wait_ns: AtomicU64::new(saturating_nanos(self.max_wait)),
            control: Mutex::new(control),
        };
        if let Err((_, e)) = spawned {
            let started = handle.control.lock().threads.len();
            handle.shutdown_until(Instant::now() + Duration::from_secs(1));
            // Not even the first thread started with a stack size of the
            // caller's: that size is what the system refused.
            return Err(match self.stack_size {
                Some(bytes) if started == 0 => ConfigError::new(
                    "stack_size",
                    "a stack size the system can give a thread",
                    format!("{bytes} ({e})"),
                ),
                _ => threads_refused(self.workers, &e),
            });
        }
        Ok(Pool { inner: Arc::new(handle) })
    }
}

/// `workers` threads could not all be started.
pub(super) fn threads_refused(workers: usize, e: &std::io::Error) -> ConfigError {
    ConfigError::new("workers", "a number of threads the system can start", format!("{workers} ({e})"))
}

/// `workers` (1 to 4096), `queue` (at most 2^20) and `max_wait` (at most a
/// minute) against their bounds, in that order: what the builder, a resize
/// and a dependency's configuration are checked against before any thread
/// starts.
pub(crate) fn check_settings(workers: usize, queue: usize, max_wait: Duration) -> Result<(), ConfigError> {
    if !(1..=MAX_WORKERS).contains(&workers) {
        return Err(ConfigError::new("workers", "between 1 and 4096", workers));
    }
    if queue > MAX_QUEUE {
        return Err(ConfigError::new("queue", "at most 1048576", queue));
    }
    if max_wait > MAX_WAIT {
        return Err(ConfigError::new("max_wait", "at most one minute", format_args!("{max_wait:?}")));
    }
    Ok(())
}
