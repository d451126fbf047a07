//! [`RequestPool`]: the count, reserve and budget of the request pool for a
//! server that is not this crate's own (rouille, or tiny_http served by
//! hand), and what both request pools share: their room, their counts and
//! their gauges.
//!
//! Such a server's threads are its own, so an ordinary request waits on its
//! own thread for a seat of the pool's [`Room`] (the crate's one primitive for
//! waiting for room; the reserve is a share kept from ordinary requests), or
//! is refused [`EnterError::Busy`]. An ordinary request may wait while every
//! ordinary thread is busy, within [`max_wait`](super::ServerConfigBuilder::max_wait)
//! and its budget, when the wait it can expect fits (the room's admission by
//! time); a reserved one is never refused. A reserve in shadow
//! ([`Reserve::shadow`](super::Reserve::shadow)) lets such a request take a
//! free reserved thread instead, counted ([`Tally::shadowed`]); the rule: [admission](crate::server#admission).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::config::ServerConfig;
use super::proxy::TrustedProxies;
use super::request::{self, Arrival, RequestContext, TIMEOUT_HEADER};
use super::reserve::{self, Route};
use crate::quiet::Quiet;
use crate::registry::{Registry, RequestPoolGauges};
use crate::room::{HoldTime, NoSeat, Room, Seat};

/// A request pool's tally: its counts, shared with its gauges in a registry, and the
/// logs of its refusals.
#[derive(Clone)]
pub(super) struct Tally {
    pub(super) gauges: RequestPoolGauges,
    /// The refusals' log, one kind per reason.
    quiet: Arc<Quiet<{ NoSeat::ALL.len() }>>,
    /// The reserve in shadow's log, at `debug` in aggregate (at most a line a second).
    shadow_quiet: Arc<Quiet<1>>,
}

impl Tally {
    /// The class an ordinary request may take a free seat of when its own
    /// has none: the reserved one, while the reserve is in shadow.
    pub(super) fn or_class(&self, reserved: bool) -> Option<usize> {
        (!reserved && self.gauges.counts.shadow.load(Ordering::Relaxed)).then_some(1)
    }

    /// After a request of the `reserved` class or not took `seat`: an
    /// ordinary request on a reserved seat is one the reserve in shadow let
    /// through, counted as the refusal the reserve would have made.
    pub(super) fn shadowed<R>(&self, reserved: bool, seat: &Seat<R>) {
        if reserved || seat.class() != 1 {
            return;
        }
        self.gauges.counts.shadowed.fetch_add(1, Ordering::Relaxed);
        let line =
            "request pool: the reserve in shadow would have kept an ordinary request off a free thread";
        self.shadow_quiet.log(module_path!(), log::Level::Debug, 0, format_args!("{line}"));
    }

    /// Counts a refusal of `why`, and logs the refusals at most once a
    /// second: the first of a second at once, the rest with the next line.
    pub(super) fn refuse(&self, why: NoSeat) {
        self.gauges.counts.refuse(why);
        self.quiet.log(
            module_path!(),
            log::Level::Warn,
            why as usize,
            format_args!("request pool: refused an ordinary request ({why})"),
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

/// The request threads of a pool of `threads` as the seats of one room
/// (class 0, ordinary requests, keeps the reserve's; class 1, reserved ones,
/// keeps none) whose waiters wait at most `max_wait`; its counts; and, when
/// the config names a registry, its gauges attached to it (detached when the
/// returned guard is dropped).
pub(super) fn open<R>(
    config: &ServerConfig,
    threads: usize,
    max_wait: Duration,
) -> io::Result<(Room<R>, Tally, Option<AttachedGauges>)> {
    check_reserve_of(config, threads)?;
    let reserved = config.reserve().map(|r| r.threads);
    let room = Room::with_rule(threads, max_wait, &[reserved.unwrap_or(0), 0], HoldTime)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let gauges = RequestPoolGauges::new(threads, room.occupancy(), reserved);
    gauges.set_reserve_shadow(config.reserve().is_some_and(|r| r.shadow));
    let counts = Tally { gauges: gauges.clone(), quiet: Arc::default(), shadow_quiet: Arc::default() };
    let Some(registry) = config.registry() else { return Ok((room, counts, None)) };
    match registry.attach_request_pool(gauges.clone()) {
        Ok(()) => Ok((room, counts, Some(AttachedGauges { registry: registry.clone(), gauges }))),
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

/// The request pool of any synchronous server: count each request in and
/// out ([`enter`](Self::enter)), keep the reserved share, carry the request
/// budget as a deadline, and feed the gauges into a [`Registry`] and so into
/// `/metrics`. (The crate's own server counts its requests itself; its
/// gauges are [`ServerHandle::request_pool`](super::ServerHandle::request_pool).)
/// Cheap to clone; readable from any thread.
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
    /// The request threads as seats (see [`open`]).
    room: Room,
    counts: Tally,
    routes: Vec<Route>,
    budget: Duration,
    proxies: TrustedProxies,
    _gauges: Option<AttachedGauges>,
}

impl RequestPool {
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
        let (room, counts, gauges) = open(config, threads.max(1), config.max_wait())?;
        let routes = config.compiled_reserve().map(|r| r.routes.clone()).unwrap_or_default();
        let (budget, proxies) = (config.request_budget(), config.trusted_proxies().clone());
        Ok(RequestPool { inner: Arc::new(Inner { room, counts, routes, budget, proxies, _gauges: gauges }) })
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
    /// `X-Request-Timeout`.
    pub fn enter(
        &self,
        method: &str,
        url: &str,
        peer: Option<SocketAddr>,
        headers: &[(&str, &str)],
    ) -> Result<Entered, EnterError> {
        let inner = &*self.inner;
        let arrival = Arrival {
            received: Instant::now(),
            peer,
            client: inner.proxies.resolve(peer, headers.iter().copied()),
        };
        let reserved = reserve::routes_take(&inner.routes, method, url);
        let asked = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case(TIMEOUT_HEADER)).map(|h| h.1);
        // The context first: a malformed header is answered without a seat,
        // and the wait for one ends by the request's own deadline.
        let context =
            request::context(asked, arrival, inner.budget, self.busy() + 1, self.threads(), reserved)
                .map_err(EnterError::InvalidRequestTimeout)?;
        let class = usize::from(reserved);
        let counts = &inner.counts;
        // A reserve in shadow lets an ordinary request onto a free reserved thread.
        let seat = match inner.room.try_seat(class, counts.or_class(reserved), || context.received()) {
            Some(seat) => {
                counts.shadowed(reserved, &seat);
                seat
            }
            None => inner.room.acquire_as(class, context.deadline()).map_err(|why| {
                counts.refuse(why);
                EnterError::Busy
            })?,
        };
        Ok(Entered { _seat: seat, context })
    }

    /// Requests being handled right now.
    pub fn busy(&self) -> usize {
        self.inner.counts.gauges.busy()
    }

    /// The number of request threads.
    pub fn threads(&self) -> usize {
        self.inner.counts.gauges.threads()
    }

    /// The request threads ordinary requests can never take (the
    /// [reserve](super::ServerConfig::reserve)'s threads; 0 without one).
    pub fn reserved_threads(&self) -> usize {
        self.inner.counts.gauges.reserve().map_or(0, |(threads, ..)| threads)
    }

    /// Reserved requests being handled right now, on any thread (part of
    /// [`busy`](Self::busy)).
    pub fn reserved_busy(&self) -> usize {
        self.inner.counts.gauges.reserved_busy()
    }

    /// Ordinary requests waiting for an ordinary thread, because every thread
    /// but the reserved ones is busy with one.
    pub fn waiting(&self) -> usize {
        self.inner.counts.gauges.waiting()
    }

    /// Puts the reserve in shadow (`true`) or back to enforcing, from the
    /// next request (see [`Reserve::shadow`](super::Reserve::shadow)).
    /// Without a reserve there is nothing to shadow, and nothing changes.
    pub fn set_reserve_shadow(&self, shadow: bool) {
        self.inner.counts.gauges.set_reserve_shadow(shadow);
    }

    /// Whether the reserve is in shadow.
    pub fn reserve_in_shadow(&self) -> bool {
        self.inner.counts.gauges.reserve_in_shadow()
    }

    /// Ordinary requests the reserve in shadow let onto a reserved thread:
    /// each one it would have kept waiting for an ordinary thread, or
    /// refused.
    pub fn shadow_refused(&self) -> u64 {
        self.inner.counts.gauges.shadow_refused()
    }

    /// Its gauges, as a [`Registry`] carries them: the same counts, for an
    /// exporter (with the `prometheus` feature, a `prometheus-client`
    /// collector of their own).
    pub fn gauges(&self) -> RequestPoolGauges {
        self.inner.counts.gauges.clone()
    }
}

/// A request counted in by [`RequestPool::enter`]; dropping it counts it
/// out, on every path the handler takes (a panic too).
#[must_use = "the request counts as in flight only while this is kept: hold it until the answer is made"]
pub struct Entered {
    /// The request thread's seat: the count of the request, given back on drop.
    _seat: Seat,
    context: RequestContext,
}

impl Entered {
    /// The request's deadline, client and the pool's state when it entered.
    pub fn context(&self) -> &RequestContext {
        &self.context
    }
}

impl fmt::Debug for Entered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entered").field("seat", &self._seat).field("context", &self.context).finish()
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
}

impl EnterError {
    /// The HTTP status to answer with.
    pub fn status(&self) -> u16 {
        match self {
            EnterError::Busy => 503,
            EnterError::InvalidRequestTimeout(_) => 400,
        }
    }

    /// A stable code for a JSON error body.
    pub fn code(&self) -> &'static str {
        match self {
            EnterError::Busy => "SERVER_BUSY",
            EnterError::InvalidRequestTimeout(_) => "INVALID_REQUEST_TIMEOUT",
        }
    }
}

impl fmt::Display for EnterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnterError::Busy => f.write_str("every ordinary request thread is busy, try again later"),
            EnterError::InvalidRequestTimeout(message) => f.write_str(message),
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
