//! [`RequestPool`]: the request pool's gauges, and the same count, reserve
//! and budget for a server that is not this crate's own (rouille, or tiny_http
//! served by hand).
//!
//! Such a server's threads are its own, so a request that may not run cannot
//! wait for another thread as it does in [`serve`](super::serve): an ordinary
//! request that finds the ordinary share full is refused at once
//! ([`EnterError::Busy`], answer `503`), which keeps the reserved threads free
//! for the reserved routes. The count is the one admission of `admission.rs`.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::admission::Admission;
use super::config::ServerConfig;
use super::proxy::TrustedProxies;
use super::request::{self, Arrival, RequestContext, TIMEOUT_HEADER};
use crate::registry::{Registry, RequestPoolGauges};
use crate::reserve::{self, Route};

/// The request pool's live counts, shared with its gauges in a registry.
#[derive(Default, Clone)]
pub(super) struct Counts {
    pub(super) busy: Arc<AtomicUsize>,
    pub(super) reserved_busy: Arc<AtomicUsize>,
    pub(super) waiting: Arc<AtomicUsize>,
}

/// Refuses a reserve that leaves a pool of `threads` no ordinary thread.
pub(super) fn check_reserve_of(config: &ServerConfig, threads: usize) -> io::Result<()> {
    match config.reserve() {
        Some(reserve) => reserve::check_threads(reserve.threads, threads)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e)),
        None => Ok(()),
    }
}

/// The counts of a new request pool of `threads`, and, when the config
/// names a registry, its gauges attached to it (detached when the returned
/// value is dropped).
pub(super) fn attach_gauges(
    config: &ServerConfig,
    threads: usize,
) -> io::Result<(Counts, Option<AttachedGauges>)> {
    let counts = Counts::default();
    let Some(registry) = config.registry() else { return Ok((counts, None)) };
    let mut gauges = RequestPoolGauges::new(threads, Arc::clone(&counts.busy));
    if let Some(reserve) = config.reserve() {
        gauges = gauges.with_reserve(
            reserve.threads,
            Arc::clone(&counts.reserved_busy),
            Arc::clone(&counts.waiting),
        );
    }
    match registry.attach_request_pool(gauges.clone()) {
        Ok(()) => Ok((counts, Some(AttachedGauges { registry: registry.clone(), gauges }))),
        Err(running) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "ServerConfig::registry: the registry already carries the gauges of a running request pool \
                 ({} threads); give each server its own registry",
                running.threads()
            ),
        )),
    }
}

/// A request pool's gauges attached to a registry; dropping it (when the
/// server stops, or fails to start) detaches them, so that a stopped pool
/// does not linger in `/metrics`.
pub(super) struct AttachedGauges {
    registry: Registry,
    gauges: RequestPoolGauges,
}

impl Drop for AttachedGauges {
    fn drop(&mut self) {
        self.registry.detach_request_pool(&self.gauges);
    }
}

/// A request pool's gauges, and, made by [`RequestPool::new`], the request
/// pool of any synchronous server: count each request in and out
/// ([`enter`](Self::enter)), keep the reserved share, carry the request
/// budget as a deadline, and feed the gauges into a [`Registry`] and so into
/// `/metrics`.
///
/// From [`ServerHandle::request_pool`](super::ServerHandle::request_pool) it
/// reads the crate's own server. Cheap to clone; readable from any thread.
///
/// ```
/// use std::time::Duration;
/// use watertight::Registry;
/// use watertight::server::{EnterError, RequestPool, Reserve, ServerConfig};
///
/// let registry = Registry::new();
/// let config = ServerConfig::builder()
///     .request_budget(Duration::from_millis(800))
///     .reserve(Reserve::new(1).for_routes(["GET /health"]))
///     .registry(&registry)
///     .build()?;
/// // The server's own pool has 3 threads (rouille's `pool_size(3)`, say).
/// let pool = RequestPool::new(3, &config)?;
///
/// // In the handler, first thing: the request counts until `entered` drops.
/// let one = pool.enter("GET", "/search?q=x", None, &[]).expect("room");
/// assert!(one.context().remaining() <= Duration::from_millis(800));
/// let two = pool.enter("GET", "/search?q=y", None, &[]).expect("room");
/// // The ordinary share (3 - 1) is full: refused at once, answer 503.
/// assert!(matches!(pool.enter("GET", "/search", None, &[]), Err(EnterError::Busy)));
/// // The reserved route still gets its thread.
/// let health = pool.enter("GET", "/health", None, &[]).expect("the reserve");
/// assert_eq!((pool.busy(), pool.reserved_busy()), (3, 1));
/// drop((one, two, health));
/// assert_eq!(registry.request_pool().map(|g| g.busy()), Some(0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RequestPool {
    inner: Arc<Inner>,
}

struct Inner {
    threads: usize,
    /// The reserve's threads, `None` without one.
    reserved: Option<usize>,
    counts: Counts,
    /// Only for a pool made by [`RequestPool::new`].
    gate: Option<Gate>,
}

/// What [`RequestPool::enter`] needs.
struct Gate {
    admission: Admission<()>,
    routes: Vec<Route>,
    budget: Duration,
    proxies: TrustedProxies,
    _gauges: Option<AttachedGauges>,
}

impl RequestPool {
    /// The gauges of the crate's own running server.
    pub(super) fn of_server(threads: usize, reserved: Option<usize>, counts: Counts) -> RequestPool {
        RequestPool { inner: Arc::new(Inner { threads, reserved, counts, gate: None }) }
    }

    /// The request pool of a server of your own with `threads` request
    /// threads (at least one): of `config`, the
    /// [request budget](super::ServerConfigBuilder::request_budget), the
    /// [reserve](super::ServerConfigBuilder::reserve)'s threads and routes
    /// (a classifier is for the crate's own server, and is not consulted
    /// here), the [trusted proxies](super::ServerConfigBuilder::trusted_proxies)
    /// and the [registry](super::ServerConfigBuilder::registry), which
    /// carries the gauges until the last clone of this pool drops.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if the reserve leaves no ordinary thread (the inner
    /// error is the [`ConfigError`](crate::ConfigError), field
    /// `reserve.threads`); `AlreadyExists` if the registry already carries
    /// another running request pool's gauges.
    pub fn new(threads: usize, config: &ServerConfig) -> io::Result<RequestPool> {
        let threads = threads.max(1);
        check_reserve_of(config, threads)?;
        let (counts, gauges) = attach_gauges(config, threads)?;
        let compiled = config.compiled_reserve();
        let reserved = compiled.map(|r| r.share.threads);
        let gate = Gate {
            admission: Admission::with_gauges(
                threads - reserved.unwrap_or(0),
                Arc::clone(&counts.reserved_busy),
                Arc::clone(&counts.waiting),
            ),
            routes: compiled.map(|r| r.routes.clone()).unwrap_or_default(),
            budget: config.request_budget(),
            proxies: config.trusted_proxies().clone(),
            _gauges: gauges,
        };
        Ok(RequestPool { inner: Arc::new(Inner { threads, reserved, counts, gate: Some(gate) }) })
    }

    /// Counts a request in, arrived now for `method` and `url` from the TCP
    /// peer `peer` with `headers` (name, value): the first thing a handler
    /// does. The request counts as busy until the [`Entered`] drops; its
    /// [context](Entered::context) has its deadline (the budget from now,
    /// shortened by an `X-Request-Timeout` header) and its client (through
    /// the trusted proxies).
    ///
    /// # Errors
    ///
    /// [`EnterError::Busy`] for an ordinary request while the ordinary share
    /// is full (a reserved one is never refused);
    /// [`EnterError::InvalidRequestTimeout`] for a malformed
    /// `X-Request-Timeout`; [`EnterError::NotAGate`] on the gauges of the
    /// crate's own server, which counts its requests itself.
    pub fn enter(
        &self,
        method: &str,
        url: &str,
        peer: Option<SocketAddr>,
        headers: &[(&str, &str)],
    ) -> Result<Entered, EnterError> {
        let Some(gate) = &self.inner.gate else { return Err(EnterError::NotAGate) };
        let arrival = Arrival {
            received: Instant::now(),
            peer,
            client: gate.proxies.resolve(peer, headers.iter().copied()),
        };
        let reserved = reserve::routes_take(&gate.routes, method, url);
        let asked = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case(TIMEOUT_HEADER)).map(|h| h.1);
        if !gate.admission.try_admit(reserved) {
            return Err(EnterError::Busy);
        }
        let busy = self.inner.counts.busy.fetch_add(1, Ordering::Relaxed) + 1;
        // Counted in from here: dropped on the error below, it counts out.
        let mut entered = Entered { pool: self.clone(), reserved, context: None };
        let context = request::context(asked, arrival, gate.budget, busy, self.inner.threads, reserved)
            .map_err(EnterError::InvalidRequestTimeout)?;
        entered.context = Some(context);
        Ok(entered)
    }

    /// Requests being handled right now.
    pub fn busy(&self) -> usize {
        self.inner.counts.busy.load(Ordering::Relaxed)
    }

    /// The number of request threads.
    pub fn threads(&self) -> usize {
        self.inner.threads
    }

    /// The request threads ordinary requests can never take (the
    /// [reserve](super::ServerConfig::reserve)'s threads; 0 without one).
    pub fn reserved_threads(&self) -> usize {
        self.inner.reserved.unwrap_or(0)
    }

    /// Reserved requests being handled right now, on any thread (part of
    /// [`busy`](Self::busy)).
    pub fn reserved_busy(&self) -> usize {
        self.inner.counts.reserved_busy.load(Ordering::Relaxed)
    }

    /// Ordinary requests waiting for an ordinary thread, because every thread
    /// but the reserved ones is busy with one (always 0 for a pool made by
    /// [`new`](Self::new), whose requests never wait).
    pub fn waiting(&self) -> usize {
        self.inner.counts.waiting.load(Ordering::Relaxed)
    }
}

/// A request counted in by [`RequestPool::enter`]; dropping it counts it
/// out, on every path the handler takes (a panic too).
#[must_use = "the request counts as in flight only while this is kept: hold it until the answer is made"]
pub struct Entered {
    pool: RequestPool,
    reserved: bool,
    /// `None` only while `enter` builds it; always `Some` when handed out.
    context: Option<RequestContext>,
}

impl Entered {
    /// The request's deadline, client and the pool's state when it entered.
    pub fn context(&self) -> &RequestContext {
        self.context.as_ref().expect("an entered request has its context")
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let Some(gate) = &self.pool.inner.gate else { return };
        self.pool.inner.counts.busy.fetch_sub(1, Ordering::Relaxed);
        // Never anything waiting to hand over: nothing waits at a gate.
        let _ = gate.admission.done(self.reserved);
    }
}

impl fmt::Debug for Entered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entered").field("reserved", &self.reserved).field("context", &self.context).finish()
    }
}

/// Why [`RequestPool::enter`] refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnterError {
    /// An ordinary request, while the ordinary share of the pool is full:
    /// answer `503` (`SERVER_BUSY`).
    Busy,
    /// The client's `X-Request-Timeout` is not a duration: answer `400`
    /// (`INVALID_REQUEST_TIMEOUT`) with this message.
    InvalidRequestTimeout(String),
    /// The pool is the gauges of the crate's own server, which counts its
    /// requests itself.
    NotAGate,
}

impl EnterError {
    /// The HTTP status to answer with.
    pub fn status(&self) -> u16 {
        match self {
            EnterError::Busy => 503,
            EnterError::InvalidRequestTimeout(_) => 400,
            EnterError::NotAGate => 500,
        }
    }

    /// A stable code for a JSON error body.
    pub fn code(&self) -> &'static str {
        match self {
            EnterError::Busy => "SERVER_BUSY",
            EnterError::InvalidRequestTimeout(_) => "INVALID_REQUEST_TIMEOUT",
            EnterError::NotAGate => "INTERNAL_ERROR",
        }
    }
}

impl fmt::Display for EnterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnterError::Busy => f.write_str("every ordinary request thread is busy, try again later"),
            EnterError::InvalidRequestTimeout(message) => f.write_str(message),
            EnterError::NotAGate => f.write_str(
                "the gauges of a running server count its requests themselves; use RequestPool::new",
            ),
        }
    }
}

impl std::error::Error for EnterError {}

/// With the `prometheus` feature, a [`RequestPool`] is a `prometheus-client`
/// collector of two gauges, `watertight_request_pool_threads` and
/// `watertight_request_pool_busy` (and the reserve's three when there is
/// one), for a `prometheus-client` registry built by hand:
/// `prometheus.register_collector(Box::new(pool))`. A pool whose config
/// names a [`Registry`] needs none of that:
/// [`metrics::register`](crate::metrics::register) over that registry
/// exports the same gauges (register one or the other, not both, or each
/// gauge is exported twice).
#[cfg(feature = "prometheus")]
impl prometheus_client::collector::Collector for RequestPool {
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>) -> fmt::Result {
        use prometheus_client::metrics::MetricType;
        // The names and help of the metrics exporter's (`metrics::Collector`);
        // the edges do not import each other, so they are spelled twice.
        let mut gauges = vec![
            ("watertight_request_pool_threads", "Threads of the shared request pool.", self.threads()),
            ("watertight_request_pool_busy", "Request threads handling a request now.", self.busy()),
        ];
        if self.inner.reserved.is_some() {
            gauges.extend([
                (
                    "watertight_request_pool_reserved_threads",
                    "Request threads kept for the reserved routes.",
                    self.reserved_threads(),
                ),
                (
                    "watertight_request_pool_reserved_busy",
                    "Reserved requests being handled now.",
                    self.reserved_busy(),
                ),
                (
                    "watertight_request_pool_waiting",
                    "Ordinary requests waiting for an ordinary thread.",
                    self.waiting(),
                ),
            ]);
        }
        for (name, help, value) in gauges {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            metric.encode_gauge(&value)?;
        }
        Ok(())
    }
}

impl fmt::Debug for RequestPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestPool")
            .field("threads", &self.threads())
            .field("busy", &self.busy())
            .field("reserved_threads", &self.reserved_threads())
            .field("reserved_busy", &self.reserved_busy())
            .field("waiting", &self.waiting())
            .finish()
    }
}
