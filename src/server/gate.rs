//! [`RequestPool`]: the request pool's gauges, and the same count, reserve
//! and budget for a server that is not this crate's own (rouille, or tiny_http
//! served by hand).
//!
//! Such a server's threads are its own, so an ordinary request waits on its
//! own thread for a seat of the pool's [`Room`] (the crate's one primitive for
//! waiting for room; the reserve is a share kept from ordinary requests), or
//! is refused [`EnterError::Busy`]: see [admission](crate::server#admission).
//! A reserve in shadow ([`Reserve::shadow`](super::Reserve::shadow)) lets such
//! a request take a free reserved thread instead ([`Counts::shadow_seat`]).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::config::ServerConfig;
use super::proxy::TrustedProxies;
use super::request::{self, Arrival, RequestContext, TIMEOUT_HEADER};
use super::reserve::{self, Route};
use crate::quiet::Quiet;
use crate::registry::{REFUSAL_REASONS, Refused, Registry, RequestPoolGauges};
use crate::room::{NoSeat, Room, Seat};
use crate::shadow::{LiveShadow, Policy, Shadow, ShadowCounters};

/// The request pool's live counts, shared with its gauges in a registry.
#[derive(Default, Clone)]
pub(super) struct Counts {
    pub(super) busy: Arc<AtomicUsize>,
    pub(super) reserved_busy: Arc<AtomicUsize>,
    pub(super) waiting: Arc<AtomicUsize>,
    pub(super) refused: Arc<Refused>,
    /// The refusals' log, one kind per reason.
    quiet: Arc<Quiet<{ REFUSAL_REASONS.len() }>>,
    /// Whether the reserve is in shadow ([`Policy::Reserve`]), switched live.
    pub(super) shadow: Arc<LiveShadow>,
    /// What the reserve in shadow would have refused.
    pub(super) shadowed: Arc<ShadowCounters>,
    /// Its log, at `debug` in aggregate (at most a line a second).
    shadow_quiet: Arc<Quiet<1>>,
}

impl Counts {
    /// The gauges of a pool of `threads` with these counts, and the
    /// reserve's when it has `reserved` threads.
    fn gauges(&self, threads: usize, reserved: Option<usize>) -> RequestPoolGauges {
        let gauges = RequestPoolGauges::new(threads, Arc::clone(&self.busy))
            .with_refused(Arc::clone(&self.refused))
            .with_shadowed(Arc::clone(&self.shadowed));
        match reserved {
            Some(r) => gauges.with_reserve(r, Arc::clone(&self.reserved_busy), Arc::clone(&self.waiting)),
            None => gauges,
        }
    }

    /// The reserve in shadow, for an ordinary request that found no
    /// ordinary seat (and would wait for one, or be refused): a free
    /// reserved seat, counted as the refusal the reserve would have made.
    /// `None` when the reserve enforces, or every thread is busy (then the
    /// request waits or is refused as ever: that is the pool's own bound,
    /// not the reserve's). The seat is of the reserved class, so the
    /// `reserved_busy` gauge counts it, as its release uncounts it.
    pub(super) fn shadow_seat(&self, room: &Room) -> Option<Seat> {
        if !self.shadow.get().contains(Policy::Reserve) {
            return None;
        }
        let seat = room.try_seat(1)?;
        self.reserved_busy.fetch_add(1, Ordering::Relaxed);
        self.shadowed.add(Policy::Reserve);
        let line =
            "request pool: the reserve in shadow would have kept an ordinary request off a free thread";
        self.shadow_quiet.log(module_path!(), log::Level::Debug, 0, format_args!("{line}"));
        Some(seat)
    }

    /// Counts a refusal of `why`, and logs the refusals at most once a
    /// second: the first of a second at once, the rest with the next line.
    pub(super) fn refuse(&self, why: NoSeat) {
        let reason = match why {
            NoSeat::Full => 0,
            NoSeat::Waited => 1,
            NoSeat::Deadline => 2,
            NoSeat::Stuck => 3,
        };
        self.refused.count(reason);
        let why = REFUSAL_REASONS[reason];
        self.quiet.log(
            module_path!(),
            log::Level::Warn,
            reason,
            format_args!("request pool: refused an ordinary request: {why}"),
        );
    }
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
    if config.reserve().is_some_and(|r| r.shadow) {
        counts.shadow.set(Shadow::none().with(Policy::Reserve));
    }
    let Some(registry) = config.registry() else { return Ok((counts, None)) };
    let gauges = counts.gauges(threads, config.reserve().map(|r| r.threads));
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
/// // The ordinary share (3 - 1) is full: this one waits for a thread (within
/// // `max_wait`, 100 ms by default, and its budget), and none comes: 503.
/// assert!(matches!(pool.enter("GET", "/search", None, &[]), Err(EnterError::Busy)));
/// assert_eq!(pool.gauges().refused().iter().map(|(_, n)| n).sum::<u64>(), 1);
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
    /// The request threads as seats: class 0, ordinary requests, keeps the
    /// reserve's; class 1, reserved ones, keeps none.
    room: Room,
    routes: Vec<Route>,
    budget: Duration,
    proxies: TrustedProxies,
    _gauges: Option<AttachedGauges>,
}

impl RequestPool {
    /// The gauges of the crate's own running server.
    #[cfg(feature = "tiny_http")]
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
        let room = Room::with_shares(threads, config.max_wait(), &[reserved.unwrap_or(0), 0])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let gate = Gate {
            room,
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
    /// [`EnterError::Busy`] for an ordinary request that found the ordinary
    /// share full and could not wait for a thread, or waited and got none
    /// (see [`ServerConfigBuilder::max_wait`](super::ServerConfigBuilder::max_wait);
    /// a reserved one is never refused);
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
        // The context first: a malformed header is answered without a seat,
        // and the wait for one ends by the request's own deadline.
        let counts = &self.inner.counts;
        let context =
            request::context(asked, arrival, gate.budget, self.busy() + 1, self.inner.threads, reserved)
                .map_err(EnterError::InvalidRequestTimeout)?;
        let class = usize::from(reserved);
        let seat = match gate.room.try_seat_at(class, || context.received()) {
            Some(seat) => seat,
            // A reserve in shadow lets an ordinary request onto a free reserved thread.
            None => match (!reserved).then(|| counts.shadow_seat(&gate.room)).flatten() {
                Some(seat) => seat,
                None => {
                    counts.waiting.fetch_add(1, Ordering::Relaxed);
                    let seat = gate.room.acquire_as(class, context.deadline());
                    counts.waiting.fetch_sub(1, Ordering::Relaxed);
                    seat.map_err(|why| {
                        counts.refuse(why);
                        EnterError::Busy
                    })?
                }
            },
        };
        counts.busy.fetch_add(1, Ordering::Relaxed);
        if reserved {
            counts.reserved_busy.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Entered { pool: self.clone(), seat: Some(seat), context })
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
    /// but the reserved ones is busy with one.
    pub fn waiting(&self) -> usize {
        self.inner.counts.waiting.load(Ordering::Relaxed)
    }

    /// Puts the reserve in shadow (`true`) or back to enforcing, from the
    /// next request (see [`Reserve::shadow`](super::Reserve::shadow)); on
    /// the gauges of the crate's own server too, which share its counts.
    /// Without a reserve there is nothing to shadow, and nothing changes.
    pub fn set_reserve_shadow(&self, shadow: bool) {
        let set = if shadow { Shadow::none().with(Policy::Reserve) } else { Shadow::none() };
        self.inner.counts.shadow.set(set);
    }

    /// Whether the reserve is in shadow.
    pub fn reserve_in_shadow(&self) -> bool {
        self.inner.reserved.is_some() && self.inner.counts.shadow.get().contains(Policy::Reserve)
    }

    /// Ordinary requests the reserve in shadow let onto a reserved thread:
    /// each one it would have kept waiting for an ordinary thread, or
    /// refused.
    pub fn shadow_refused(&self) -> u64 {
        self.inner.counts.shadowed.load().get(Policy::Reserve)
    }

    /// Its gauges, as a [`Registry`] carries them: the same counts, for an
    /// exporter (with the `prometheus` feature, a `prometheus-client`
    /// collector of their own).
    pub fn gauges(&self) -> RequestPoolGauges {
        self.inner.counts.gauges(self.inner.threads, self.inner.reserved)
    }
}

/// A request counted in by [`RequestPool::enter`]; dropping it counts it
/// out, on every path the handler takes (a panic too).
#[must_use = "the request counts as in flight only while this is kept: hold it until the answer is made"]
pub struct Entered {
    pool: RequestPool,
    /// The request thread's seat, given back after the counts (`None` only
    /// in `drop`).
    seat: Option<Seat>,
    context: RequestContext,
}

impl Entered {
    /// The request's deadline, client and the pool's state when it entered.
    pub fn context(&self) -> &RequestContext {
        &self.context
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let counts = &self.pool.inner.counts;
        counts.busy.fetch_sub(1, Ordering::Relaxed);
        if self.seat.as_ref().is_some_and(|s| s.class() == 1) {
            counts.reserved_busy.fetch_sub(1, Ordering::Relaxed);
        }
        // The seat last: a waiter it goes to finds the counts lowered.
        drop(self.seat.take());
    }
}

impl fmt::Debug for Entered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entered").field("seat", &self.seat).field("context", &self.context).finish()
    }
}

/// Why [`RequestPool::enter`] refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnterError {
    /// An ordinary request, while the ordinary share of the pool is full,
    /// whose wait for a thread could not fit, or did not end with one:
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A foreign server's request that finds every thread busy waits for
    /// one in the pool's room, and is counted there.
    #[test]
    fn a_request_waits_for_a_thread_in_the_room() {
        let config = ServerConfig::builder().max_wait(Duration::from_secs(5)).build().unwrap();
        let pool = RequestPool::new(1, &config).unwrap();
        let first = pool.enter("GET", "/a", None, &[]).expect("a free thread");
        let second = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.enter("GET", "/b", None, &[]).map(drop).is_ok())
        };
        let start = Instant::now();
        while pool.waiting() == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "the second request never waited");
            std::thread::yield_now();
        }
        drop(first);
        assert!(second.join().unwrap(), "seated once the first was done");
        let counts = pool.inner.gate.as_ref().expect("a gate").room.counts();
        assert_eq!((counts.seated, counts.waited, counts.refused), (2, 1, 0), "{counts:?}");
        assert_eq!(pool.busy(), 0);
    }
}
