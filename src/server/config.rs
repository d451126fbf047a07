//! [`ServerConfig`], the server's settings, and its builder.

use std::fmt;
use std::time::Duration;

use super::reserve::{Reserve, Route};
use crate::ConfigError;
use crate::registry::Registry;
use crate::time::MAX_TIMEOUT;

use super::proxy::TrustedProxies;

/// [`ServerConfigBuilder::first_byte_timeout`]'s default, where `idle_timeout`
/// is not shorter.
const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(5);

/// The server's settings, validated: what [`serve`](super::serve) uses by
/// default and [`serve_with`](super::serve_with) takes: the guard's
/// timeouts, caps and bounds, each request's time budget, the
/// [reserved share](Reserve) of the request pool, and the [`Registry`] that
/// carries the request pool's gauges.
///
/// Built by [`ServerConfig::builder`]; [`ServerConfig::default`] is the builder's
/// defaults. Every timeout is a `Duration` measured from the moment the step
/// it bounds begins (see the [module docs](super) for the protocol).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    head_timeout: Duration,
    body_timeout: Duration,
    idle_timeout: Duration,
    write_timeout: Duration,
    max_head_bytes: usize,
    max_body_bytes: u64,
    max_connections: usize,
    /// `None`: a quarter of `max_connections`, at least 1.
    max_connections_per_peer: Option<usize>,
    /// `None`: 5 s, or `idle_timeout` if that is shorter.
    first_byte_timeout: Option<Duration>,
    request_budget: Duration,
    max_wait: Duration,
    answer_timeout: Duration,
    trusted_proxies: TrustedProxies,
    reserve: Option<CompiledReserve>,
    gauges: Gauges,
}

/// A checked [`Reserve`] with its routes parsed once. Two are equal when
/// their reserves are.
#[derive(Debug, Clone)]
pub(super) struct CompiledReserve {
    pub(super) share: Reserve,
    pub(super) routes: Vec<Route>,
}

impl PartialEq for CompiledReserve {
    fn eq(&self, other: &CompiledReserve) -> bool {
        self.share == other.share
    }
}

impl Eq for CompiledReserve {}

/// The registry a server attaches its request pool's gauges to. Two configs
/// are equal when they name the same registry (or none): a registry is a
/// handle, compared by identity.
#[derive(Clone, Default)]
struct Gauges(Option<Registry>);

impl PartialEq for Gauges {
    fn eq(&self, other: &Gauges) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same_as(b),
            _ => false,
        }
    }
}

impl Eq for Gauges {}

impl fmt::Debug for Gauges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfigBuilder::new().checked()
    }
}

impl ServerConfig {
    /// A builder with the defaults.
    pub fn builder() -> ServerConfigBuilder {
        ServerConfigBuilder::new()
    }

    /// Time to receive a whole request head, from its first byte.
    pub fn head_timeout(&self) -> Duration {
        self.head_timeout
    }

    /// Time to receive a whole request body, from the end of its head.
    pub fn body_timeout(&self) -> Duration {
        self.body_timeout
    }

    /// Time a kept-alive connection may wait for the first byte of its next
    /// request (and a new connection for its first).
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// Time one write of a response to the client may block.
    pub fn write_timeout(&self) -> Duration {
        self.write_timeout
    }

    /// The largest request head (request line and headers), in bytes.
    pub fn max_head_bytes(&self) -> usize {
        self.max_head_bytes
    }

    /// The largest request body, declared or received, in bytes.
    pub fn max_body_bytes(&self) -> u64 {
        self.max_body_bytes
    }

    /// The most client connections open at once (one guard thread each).
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// The most connections open at once from one peer (see
    /// [`ServerConfigBuilder::max_connections_per_peer`]): the value set, or
    /// a quarter of [`max_connections`](Self::max_connections), at least 1.
    pub fn max_connections_per_peer(&self) -> usize {
        self.max_connections_per_peer.unwrap_or((self.max_connections / 4).max(1))
    }

    /// Time a new connection may wait for the first byte of its first
    /// request (see [`ServerConfigBuilder::first_byte_timeout`]).
    pub fn first_byte_timeout(&self) -> Duration {
        self.first_byte_timeout.unwrap_or(DEFAULT_FIRST_BYTE_TIMEOUT.min(self.idle_timeout))
    }

    /// Each request's time budget, from its arrival: its
    /// [`RequestContext::deadline`](super::RequestContext::deadline).
    pub fn request_budget(&self) -> Duration {
        self.request_budget
    }

    /// See [`ServerConfigBuilder::max_wait`].
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// See [`ServerConfigBuilder::answer_timeout`].
    pub fn answer_timeout(&self) -> Duration {
        self.answer_timeout
    }

    /// See [`ServerConfigBuilder::trusted_proxies`].
    pub fn trusted_proxies(&self) -> &TrustedProxies {
        &self.trusted_proxies
    }

    /// The reserved share of the request pool, if any (see
    /// [`ServerConfigBuilder::reserve`]).
    pub fn reserve(&self) -> Option<&Reserve> {
        self.reserve.as_ref().map(|r| &r.share)
    }

    pub(super) fn compiled_reserve(&self) -> Option<&CompiledReserve> {
        self.reserve.as_ref()
    }

    /// The registry the server attaches its request pool's gauges to, if
    /// any (see [`ServerConfigBuilder::registry`]).
    pub fn registry(&self) -> Option<&Registry> {
        self.gauges.0.as_ref()
    }
}

/// Builds a [`ServerConfig`]; every setter's doc gives its default.
#[derive(Debug, Clone)]
pub struct ServerConfigBuilder {
    cfg: ServerConfig,
}

impl Default for ServerConfigBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerConfigBuilder {
    /// The defaults.
    pub fn new() -> Self {
        ServerConfigBuilder {
            cfg: ServerConfig {
                head_timeout: Duration::from_secs(10),
                body_timeout: Duration::from_secs(30),
                idle_timeout: Duration::from_secs(30),
                write_timeout: Duration::from_secs(30),
                max_head_bytes: 8 * 1024,
                max_body_bytes: 1024 * 1024,
                max_connections: 256,
                max_connections_per_peer: None,
                first_byte_timeout: None,
                request_budget: Duration::from_secs(30),
                max_wait: Duration::from_millis(100),
                answer_timeout: Duration::from_secs(60),
                trusted_proxies: TrustedProxies::none(),
                reserve: None,
                gauges: Gauges(None),
            },
        }
    }

    /// Time to receive a whole request head, from its first byte; past it the
    /// connection gets `408` and is closed. Default 10 s.
    pub fn head_timeout(mut self, timeout: Duration) -> Self {
        self.cfg.head_timeout = timeout;
        self
    }

    /// Time to receive a whole body, from the end of its head; past it the
    /// connection gets `408` and is closed. Default 30 s.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.cfg.body_timeout = timeout;
        self
    }

    /// Time an open connection may wait for the first byte of a request;
    /// past it the connection is closed without an answer. Default 30 s.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.cfg.idle_timeout = timeout;
        self
    }

    /// Time one write to the client may block; past it the connection is
    /// closed. Default 30 s.
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.cfg.write_timeout = timeout;
        self
    }

    /// The largest request head in bytes; a longer one gets `431`. At least
    /// 256, at most 1 MiB. Default 8 KiB.
    pub fn max_head_bytes(mut self, bytes: usize) -> Self {
        self.cfg.max_head_bytes = bytes;
        self
    }

    /// The largest request body in bytes, declared or received; a larger one
    /// gets `413`. At most 1 GiB. Default 1 MiB.
    pub fn max_body_bytes(mut self, bytes: u64) -> Self {
        self.cfg.max_body_bytes = bytes;
        self
    }

    /// The most client connections open at once; past it a new connection
    /// gets `503` and is closed. At least 1, at most 65,536. Default 256.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.cfg.max_connections = connections;
        self
    }

    /// The most connections open at once from one peer (an IPv4 address, or
    /// an IPv6 /64; a mapped IPv4 address is that address), so that no
    /// client can hold the edge: past it a new connection from that peer gets
    /// `503 SERVER_BUSY` at once. A [trusted proxy](Self::trusted_proxies) is
    /// exempt (cap its clients at the proxy). At least 1, at most
    /// `max_connections`. Defaults to a quarter of `max_connections`, at
    /// least 1 (64 of the default 256).
    pub fn max_connections_per_peer(mut self, connections: usize) -> Self {
        self.cfg.max_connections_per_peer = Some(connections);
        self
    }

    /// Time a new connection may wait for the first byte of its first
    /// request, then closed without an answer (nginx's
    /// `client_header_timeout`): a connection that has asked for nothing yet
    /// is cheap to hold for a client that never will. Greater than zero, at
    /// most [`idle_timeout`](Self::idle_timeout). Defaults to 5 s, or
    /// `idle_timeout` where that is shorter.
    pub fn first_byte_timeout(mut self, timeout: Duration) -> Self {
        self.cfg.first_byte_timeout = Some(timeout);
        self
    }

    /// Each request's time budget, from the moment the request was read whole
    /// (without the guard, taken by a request thread): the handler's
    /// [`RequestContext::deadline`](super::RequestContext::deadline), to pass
    /// to [`CallBuilder::deadline`](crate::CallBuilder::deadline). A client's
    /// `X-Request-Timeout` (`250ms`, `2s`, or milliseconds) may shorten it,
    /// never lengthen it. Default 30 s; at most one day.
    pub fn request_budget(mut self, budget: Duration) -> Self {
        self.cfg.request_budget = budget;
        self
    }

    /// The longest an ordinary request waits for an ordinary request thread
    /// in [`RequestPool::enter`](super::RequestPool::enter), never past its
    /// budget (the rule: the [module docs](super)). Zero
    /// refuses at once while the ordinary share is full. Default 100 ms; at
    /// most one minute.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.cfg.max_wait = max_wait;
        self
    }

    /// The longest the guard waits for the handler's answer, and then for
    /// each next piece of it; past it the client gets `504` (or, once part
    /// of the answer is out, the close), so a handler that never returns pins
    /// a request thread but not the client's connection. Without the guard it
    /// does not apply. Default 60 s; at most one day.
    pub fn answer_timeout(mut self, timeout: Duration) -> Self {
        self.cfg.answer_timeout = timeout;
        self
    }

    /// The peers believed to stand for other clients (nginx on this host,
    /// say; [`TrustedProxies::parse`]). Only from them is the client read
    /// from `X-Forwarded-For` (or `Forwarded`)
    /// ([`RequestContext::client_ip`](super::RequestContext::client_ip));
    /// from any peer those headers mark the request
    /// [`through_proxy`](super::RequestContext::through_proxy). A trusted
    /// proxy must set `X-Forwarded-For` itself (it is read before
    /// `Forwarded`); one that writes only `Forwarded` must drop the client's
    /// `X-Forwarded-For`. Defaults to none.
    pub fn trusted_proxies(mut self, proxies: TrustedProxies) -> Self {
        self.cfg.trusted_proxies = proxies;
        self
    }

    /// Keeps a reserved share of the request pool (see [`Reserve`]), for
    /// liveness and routes that call no provider that could hang. Checked by
    /// [`build`](Self::build) (`reserve.threads`, `reserve.routes`), and
    /// when the server starts: at least one thread must be left for ordinary
    /// requests. Defaults to none.
    pub fn reserve(mut self, reserve: Reserve) -> Self {
        // Parsed by `build`; kept as given until then.
        self.cfg.reserve = Some(CompiledReserve { share: reserve, routes: Vec::new() });
        self
    }

    /// The registry of the service's dependencies, to carry the request
    /// pool's gauges too ([`Registry::request_pool`](crate::Registry::request_pool);
    /// with `prometheus`, `watertight_request_pool_threads` and
    /// `watertight_request_pool_busy`). One running server per registry: a
    /// second with the same registry is refused. Defaults to none.
    pub fn registry(mut self, registry: &Registry) -> Self {
        self.cfg.gauges = Gauges(Some(registry.clone()));
        self
    }

    /// The settings, or the first one out of range.
    pub fn build(self) -> Result<ServerConfig, ConfigError> {
        let c = &self.cfg;
        for (field, value) in [
            ("head_timeout", c.head_timeout),
            ("body_timeout", c.body_timeout),
            ("idle_timeout", c.idle_timeout),
            ("first_byte_timeout", c.first_byte_timeout.unwrap_or(DEFAULT_FIRST_BYTE_TIMEOUT)),
            ("write_timeout", c.write_timeout),
            ("request_budget", c.request_budget),
            ("answer_timeout", c.answer_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::new(field, "greater than zero", format!("{value:?}")));
            }
            if value > MAX_TIMEOUT {
                return Err(ConfigError::new(field, "at most one day", format!("{value:?}")));
            }
        }
        if c.max_wait > Duration::from_secs(60) {
            return Err(ConfigError::new("max_wait", "at most one minute", format!("{:?}", c.max_wait)));
        }
        if !(256..=1024 * 1024).contains(&c.max_head_bytes) {
            return Err(ConfigError::new("max_head_bytes", "in [256, 1048576]", c.max_head_bytes));
        }
        if c.max_body_bytes > 1 << 30 {
            return Err(ConfigError::new("max_body_bytes", "at most 1073741824", c.max_body_bytes));
        }
        if !(1..=65_536).contains(&c.max_connections) {
            return Err(ConfigError::new("max_connections", "in [1, 65536]", c.max_connections));
        }
        if let Some(per_peer) = c.max_connections_per_peer
            && !(1..=c.max_connections).contains(&per_peer)
        {
            let value = format!("{per_peer} (max_connections is {})", c.max_connections);
            return Err(ConfigError::new("max_connections_per_peer", "in [1, max_connections]", value));
        }
        if let Some(first) = c.first_byte_timeout
            && first > c.idle_timeout
        {
            let value = format!("{first:?} (idle_timeout is {:?})", c.idle_timeout);
            return Err(ConfigError::new("first_byte_timeout", "at most idle_timeout", value));
        }
        let mut cfg = self.cfg;
        if let Some(reserve) = &mut cfg.reserve {
            reserve.routes = reserve.share.compile()?;
        }
        Ok(cfg)
    }

    fn checked(self) -> ServerConfig {
        self.build().expect("the defaults are valid")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_build_and_read_back() {
        let cfg = ServerConfig::default();
        assert_eq!(cfg.head_timeout(), Duration::from_secs(10));
        assert_eq!(cfg.max_head_bytes(), 8192);
        assert_eq!(cfg.max_body_bytes(), 1 << 20);
        assert_eq!(cfg.max_connections(), 256);
        assert_eq!(cfg.request_budget(), Duration::from_secs(30));
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases = [
            (ServerConfig::builder().head_timeout(Duration::ZERO), "head_timeout"),
            (ServerConfig::builder().body_timeout(Duration::MAX), "body_timeout"),
            (ServerConfig::builder().idle_timeout(Duration::ZERO), "idle_timeout"),
            (ServerConfig::builder().write_timeout(Duration::ZERO), "write_timeout"),
            (ServerConfig::builder().max_head_bytes(10), "max_head_bytes"),
            (ServerConfig::builder().max_body_bytes(u64::MAX), "max_body_bytes"),
            (ServerConfig::builder().max_connections(0), "max_connections"),
            (ServerConfig::builder().request_budget(Duration::ZERO), "request_budget"),
        ];
        for (builder, field) in cases {
            let err = builder.build().unwrap_err();
            assert_eq!(err.field(), field, "{err}");
            assert!(err.to_string().starts_with(field), "{err}");
        }
        let ok = ServerConfig::builder().max_body_bytes(0).max_connections(1).build().unwrap();
        assert_eq!(ok.max_body_bytes(), 0);
        assert_eq!(ok.reserve(), None);
    }

    #[test]
    fn per_peer_cap_and_first_byte_timeout_default_validate_and_read_back() {
        let cfg = ServerConfig::default();
        assert_eq!(cfg.max_connections_per_peer(), 64);
        assert_eq!(cfg.first_byte_timeout(), Duration::from_secs(5));
        let small =
            ServerConfig::builder().max_connections(3).idle_timeout(Duration::from_secs(2)).build().unwrap();
        assert_eq!(small.max_connections_per_peer(), 1);
        assert_eq!(small.first_byte_timeout(), Duration::from_secs(2));
        let set = ServerConfig::builder()
            .max_connections(64)
            .max_connections_per_peer(8)
            .first_byte_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        assert_eq!(
            (set.max_connections_per_peer(), set.first_byte_timeout()),
            (8, Duration::from_millis(300))
        );
        let cases = [
            (ServerConfig::builder().max_connections_per_peer(0), "max_connections_per_peer"),
            (
                ServerConfig::builder().max_connections(8).max_connections_per_peer(9),
                "max_connections_per_peer",
            ),
            (ServerConfig::builder().first_byte_timeout(Duration::ZERO), "first_byte_timeout"),
            (
                ServerConfig::builder()
                    .idle_timeout(Duration::from_secs(2))
                    .first_byte_timeout(Duration::from_secs(3)),
                "first_byte_timeout",
            ),
        ];
        for (builder, field) in cases {
            let err = builder.build().unwrap_err();
            assert_eq!(err.field(), field, "{err}");
            assert!(err.to_string().starts_with(field), "{err}");
        }
    }

    #[test]
    fn a_reserve_is_checked_and_read_back() {
        let reserve = Reserve::new(2).for_routes(["GET /health", "GET /orders/{id}"]);
        let cfg = ServerConfig::builder().reserve(reserve.clone()).build().unwrap();
        assert_eq!(cfg.reserve(), Some(&reserve));
        assert_eq!(cfg.compiled_reserve().map(|r| r.routes.len()), Some(2));
        for (bad, field) in [
            (Reserve::new(0).for_routes(["GET /health"]), "reserve.threads"),
            (Reserve::new(2), "reserve.routes"),
            (Reserve::new(2).for_routes(["/health"]), "reserve.routes"),
        ] {
            let err = ServerConfig::builder().reserve(bad).build().unwrap_err();
            assert_eq!(err.field(), field, "{err}");
        }
    }
}
