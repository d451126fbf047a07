//! Changing a running pool: [`Pool::resize`], and the thread bookkeeping it
//! shares with the builder (spawning at the lowest free index, reaping
//! workers that have exited).

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::thread;
use std::time::Duration;

use super::builder::{check_settings, threads_refused};
use super::worker::{ExitGuard, join_worker, worker_main};
use super::{Control, Pool, Shared, WorkerThread};
use crate::error::ConfigError;
use crate::time::saturating_nanos;

impl Pool {
    /// Changes the number of workers, the queue capacity and
    /// [`max_wait`](super::PoolBuilder::max_wait) while the pool runs.
    /// Validated like the builder: an error names `workers`, `queue` or
    /// `max_wait`, and changes nothing.
    ///
    /// - Growing starts new workers at once, named like the others with the
    ///   lowest free index.
    /// - Shrinking retires idle workers first (the longest idle first); busy
    ///   ones finish the job they are running, then exit. No job is ever cut
    ///   short.
    /// - A smaller queue drops nothing: jobs queued beyond the new capacity
    ///   stay queued and run; only new submissions see the new bound.
    /// - Every submitted call still gets exactly one answer.
    ///
    /// The getters ([`workers`](Pool::workers), [`queue_capacity`](Pool::queue_capacity),
    /// [`max_wait`](Pool::max_wait)) return the new settings at once;
    /// [`stats`](Pool::stats)`().workers` reaches the new count once retiring
    /// workers have finished their jobs. Resizes run one at a time (and not
    /// during a shutdown). On a pool that is shut down it is an error
    /// (field `workers`).
    ///
    /// ```
    /// use std::time::Duration;
    /// let pool = watertight::pool::Pool::builder("resized").workers(2).queue(4).build()?;
    /// pool.resize(6, 0, Duration::from_millis(5))?;
    /// assert_eq!((pool.workers(), pool.queue_capacity()), (6, 0));
    /// assert_eq!(pool.resize(0, 0, Duration::ZERO).unwrap_err().field(), "workers");
    /// # Ok::<(), watertight::ConfigError>(())
    /// ```
    pub fn resize(&self, workers: usize, queue: usize, max_wait: Duration) -> Result<(), ConfigError> {
        check_settings(workers, queue, max_wait)?;
        let h = &*self.inner;
        let mut control = h.control.lock();
        if h.shared.queue.is_closed() {
            return Err(ConfigError::new(
                "workers",
                "changed only while the pool runs (it is shut down)",
                workers,
            ));
        }
        control.reap();
        h.workers.store(workers, Relaxed);
        h.queue.store(queue, Relaxed);
        h.max_wait_ns.store(saturating_nanos(max_wait), Relaxed);
        let resized = h.shared.queue.resize(workers, queue, &h.shared.stats.workers.busy);
        control.spawn_n(&h.shared, resized.start).map_err(|(missing, e)| {
            h.workers.store(workers - missing, Relaxed);
            threads_refused(workers, &e)
        })
    }
}

/// A worker's thread name, `wt-<name>-<index>`, within the 15 bytes Linux
/// keeps (what `top` and `ps` show): the name is cut (at a character
/// boundary, and without a dangling separator) so that the index always shows.
pub(super) fn thread_name(name: &str, index: usize) -> String {
    let suffix = format!("-{index}");
    let mut end = 15usize.saturating_sub(3 + suffix.len()).min(name.len());
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < name.len() { name[..end].trim_end_matches(['-', '_', '.']) } else { name };
    format!("wt-{cut}{suffix}")
}

impl Control {
    /// Joins the workers that have exited since the last look (retired ones),
    /// freeing their indexes.
    pub(super) fn reap(&mut self) {
        while let Ok(i) = self.exits.try_recv() {
            join_worker(self.threads.get_mut(i));
        }
    }

    /// Starts `n` workers; on the first that fails, tells the queue how many
    /// did not start, and returns that count with the error.
    pub(super) fn spawn_n(&mut self, shared: &Arc<Shared>, n: usize) -> Result<(), (usize, io::Error)> {
        for started in 0..n {
            if let Err(e) = self.spawn(shared) {
                shared.queue.not_started(n - started, &shared.stats.workers.busy);
                return Err((n - started, e));
            }
        }
        Ok(())
    }

    /// Starts one worker at the lowest free index. The queue has already
    /// counted it (as starting); the caller tells the queue if this fails.
    pub(super) fn spawn(&mut self, shared: &Arc<Shared>) -> io::Result<()> {
        let index = self.threads.iter().position(|w| w.join.is_none()).unwrap_or(self.threads.len());
        let mut builder = thread::Builder::new().name(thread_name(&shared.name, index));
        if let Some(s) = self.stack_size {
            builder = builder.stack_size(s);
        }
        // Counted before the thread exists, so `stats().workers` includes it
        // as soon as the builder or the resize returns.
        shared.stats.workers.live.fetch_add(1, Relaxed);
        let exit = ExitGuard { shared: shared.clone(), index, tx: self.exit_tx.clone() };
        // On failure the closure (and its exit guard) is dropped unrun,
        // which uncounts the worker again (and reports an exit nobody joins).
        let join = match builder.spawn(move || worker_main(exit)) {
            Ok(join) => join,
            Err(e) => {
                // Take that exit report now, before the index can be reused.
                self.reap();
                return Err(e);
            }
        };
        let worker = WorkerThread { id: join.thread().id(), join: Some(join) };
        match self.threads.get_mut(index) {
            Some(slot) => *slot = worker,
            None => self.threads.push(worker),
        }
        Ok(())
    }
}
