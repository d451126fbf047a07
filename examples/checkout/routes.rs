//! The checkout server's routes.
//!
//! | route                   | what it does                                                  |
//! |-------------------------|---------------------------------------------------------------|
//! | `POST /checkout`        | access check, fraud check, order stored: 201 / 402 / 202; an approved order is notified, fire-and-forget |
//! | `GET /orders/{id}`      | the order from memory: never calls a provider                 |
//! | `GET /me`               | the user's profile from account (the `account-read` path)     |
//! | `GET /health`           | liveness: 200 whatever the breakers say                       |
//! | `GET /circuits`         | every dependency's state, counters and pool, and the caches' counts, as JSON |
//! | `GET /metrics`          | Prometheus text                                               |
//! | `GET /circuits/events`  | every dependency's last events (transitions, reconfigurations, summaries) |
//! | `GET /circuits/stream`  | Server-Sent Events: the history, then a snapshot every second |
//! | `GET /dashboard`        | a live page over `/circuits/stream`                           |
//! | `GET /_faults`          | the embedded providers' faults (admin)                        |
//! | `POST /_faults/{name}`  | sets an embedded provider's fault (body: `hang`, `slow:500`...) (admin) |
//! | `GET /_config`          | every dependency's live configuration (admin)                 |
//! | `GET /_config/{name}`   | one dependency's live configuration (admin)                   |
//! | `PUT /_config/{name}`   | changes one dependency live (body: its JSON section) (admin)  |
//! | `PUT /_config/reserve`  | the reserve in shadow or enforced (body: `{"shadow": false}`) (admin) |
//!
//! The admin routes answer loopback clients that came through no proxy, and others only with the admin
//! token (see `admin.rs`); anyone else gets 403.
//!
//! Every error is a JSON `{"code", "message"}`; nothing a client sends can
//! make a handler panic (and the request pool answers 500 if one does).

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tiny_http::{Header, Method, Request, Response, ResponseBox};

use crate::access::{AccessGate, Decision, LookupError};
use crate::admin::{self, TOKEN_HEADER};
use crate::backends::{Backends, FraudVerdict};
use crate::dashboard::{self, StateClock};
use crate::history::History;
use crate::live::{LiveConfig, LiveError};
use crate::stream::{self, Streams};
use watertight::server::RequestContext;
use watertight::testing::{FakeProvider, Fault};
use watertight::{DependencyConfig, Registry};

/// The largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;

/// The most of an over-long body discarded to keep its connection usable.
const MAX_DRAIN: u64 = 1024 * 1024;

/// Orders kept in memory; the oldest are forgotten beyond this, so a long
/// run (or the demo's load) cannot grow the process without bound.
const MAX_ORDERS: usize = 100_000;

/// An order as stored and as answered.
#[derive(Clone, Debug, Serialize)]
pub struct Order {
    order_id: String,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    customer_id: String,
    amount: f64,
    user_id: String,
}

#[derive(Deserialize)]
struct CheckoutRequest {
    customer_id: String,
    amount: f64,
}

/// Everything a request handler needs. Shared by every request thread.
pub struct App {
    /// Outbound calls.
    pub backends: Arc<Backends>,
    /// The cached, fail-closed access gate.
    pub gate: AccessGate,
    /// The dependencies by name (bulkhead mode; empty in direct mode).
    pub registry: Registry,
    /// Prometheus registry holding watertight's collector.
    /// Locked only to register a collector at start and to encode a scrape.
    pub prometheus: Mutex<watertight::metrics::PrometheusRegistry>,
    /// The embedded fake providers, by name (empty for real providers).
    pub providers: Vec<Arc<FakeProvider>>,
    /// The request pool's size, for `/circuits`.
    pub request_threads: usize,
    orders: Mutex<BTreeMap<u64, Order>>,
    next_order: AtomicU64,
    /// Requests inside `handle` right now (the request pool's busy gauge as
    /// this side sees it; relaxed, for display only).
    in_flight: AtomicUsize,
    /// When each breaker entered its state, for `/circuits`' `state_for_ms`.
    state_clock: StateClock,
    /// When the application was assembled, for `/circuits`' `uptime_ms`.
    started: std::time::Instant,
    /// The dependencies' configuration, read back and changed live.
    pub live: LiveConfig,
    /// The token that opens the admin routes to non-loopback clients.
    admin_token: Option<String>,
    /// The open `/circuits/stream`s, and their stop.
    pub streams: Arc<Streams>,
    /// The last five minutes of every dependency, which a stream sends first.
    history: History,
}

impl App {
    /// Assembles the application.
    #[allow(clippy::too_many_arguments)] // one per part, each named at the call
    pub fn new(
        backends: Arc<Backends>,
        gate: AccessGate,
        registry: Registry,
        history: History,
        prometheus: watertight::metrics::PrometheusRegistry,
        providers: Vec<Arc<FakeProvider>>,
        request_threads: usize,
        live: LiveConfig,
        admin_token: Option<String>,
    ) -> Self {
        let state_clock = StateClock::watch(&registry);
        App {
            state_clock,
            started: std::time::Instant::now(),
            backends,
            gate,
            registry,
            prometheus: Mutex::new(prometheus),
            providers,
            request_threads,
            orders: Mutex::new(BTreeMap::new()),
            next_order: AtomicU64::new(1),
            in_flight: AtomicUsize::new(0),
            live,
            admin_token,
            streams: Arc::default(),
            history,
        }
    }

    /// Answers one request, every provider call by `ctx`'s deadline (the
    /// server's request budget, or less if the client asked for less).
    pub fn handle(self: &Arc<Self>, req: &mut Request, ctx: &RequestContext) -> ResponseBox {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let response = self.route(req, ctx);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        response
    }

    fn route(self: &Arc<Self>, req: &mut Request, ctx: &RequestContext) -> ResponseBox {
        let deadline = ctx.deadline();
        let url = req.url().to_owned();
        let path = url.split(['?', '#']).next().unwrap_or("");
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let method = req.method().clone();
        let get = method == Method::Get;
        let post = method == Method::Post;
        let put = method == Method::Put;
        if segments.first().is_some_and(|s| *s == "_faults" || *s == "_config")
            && let Err(refused) = self.admin_allowed(req, ctx)
        {
            return refused;
        }
        match segments.as_slice() {
            ["checkout"] if post => self.checkout(req, deadline),
            ["checkout"] => method_not_allowed("POST"),
            ["orders", id] if get => self.order(id),
            ["orders", _] => method_not_allowed("GET"),
            ["me"] if get => self.me(req, deadline),
            ["me"] => method_not_allowed("GET"),
            ["health"] if get => json_response(200, &json!({ "status": "UP" })),
            ["health"] => method_not_allowed("GET"),
            ["circuits"] if get => self.circuits(),
            ["circuits"] => method_not_allowed("GET"),
            ["circuits", "events"] if get => stream::events(&self.registry),
            ["circuits", "events"] => method_not_allowed("GET"),
            ["circuits", "stream"] if get => {
                let app = Arc::clone(self);
                let http10 = *req.http_version() == tiny_http::HTTPVersion(1, 0);
                stream::stream(&self.streams, &self.registry, &self.history, http10, move || {
                    app.circuits_json()
                })
            }
            ["circuits", "stream"] => method_not_allowed("GET"),
            ["metrics"] if get => self.metrics(),
            ["metrics"] => method_not_allowed("GET"),
            ["dashboard"] if get => dashboard::page(),
            ["dashboard"] => method_not_allowed("GET"),
            ["_faults"] if get => self.faults(),
            ["_faults"] => method_not_allowed("GET"),
            ["_faults", name] if post => self.set_fault(req, name),
            ["_faults", _] => method_not_allowed("POST"),
            ["_config"] if get => json_response(200, &to_json(&self.live.snapshot(&self.registry))),
            ["_config"] => method_not_allowed("GET"),
            ["_config", name] if get => self.dependency_config(name),
            ["_config", "reserve"] if put => self.reconfigure_reserve(req),
            ["_config", name] if put => self.reconfigure(req, name),
            ["_config", _] => method_not_allowed("GET, PUT"),
            _ => error(404, "NOT_FOUND", &format!("no route for {path}")),
        }
    }

    fn checkout(&self, req: &mut Request, deadline: Instant) -> ResponseBox {
        let user = match user_id(req) {
            Ok(user) => user,
            Err(resp) => return resp,
        };
        let body = match read_body(req) {
            Ok(body) => body,
            Err(resp) => return resp,
        };
        let order: CheckoutRequest = match serde_json::from_slice(&body) {
            Ok(order) => order,
            Err(e) if e.is_data() => return error(400, "INVALID_ORDER", &e.to_string()),
            Err(e) => return error(400, "INVALID_JSON", &format!("the body is not valid JSON: {e}")),
        };
        if order.customer_id.is_empty() || order.customer_id.len() > 128 {
            return error(400, "INVALID_ORDER", "customer_id must be 1 to 128 characters");
        }
        if !(order.amount.is_finite() && order.amount > 0.0) {
            return error(400, "INVALID_ORDER", "amount must be a positive number");
        }

        // The gate first: when access cannot be decided, the business code
        // below never runs (fail closed).
        match self.gate.check(&user, deadline) {
            Ok(Decision::Allowed) => {}
            Ok(Decision::Denied) => {
                return error(403, "SERVICE_ACCESS_DENIED", "this user may not use checkout");
            }
            Err(LookupError::Rejected { .. }) | Err(LookupError::Unavailable(_)) => {
                return error(
                    503,
                    "SERVICE_ACCESS_UNAVAILABLE",
                    "access to checkout cannot be checked right now; try again later",
                );
            }
        }

        // Fraud: an explicit verdict, or manual review. Never a silent approval.
        let (status_code, status, reason) =
            match self.backends.check_fraud(&order.customer_id, order.amount, deadline) {
                Ok(FraudVerdict::Approve) => (201, "approved", None),
                Ok(FraudVerdict::Reject(why)) => (402, "rejected", Some(why)),
                Err(unavailable) => {
                    // Debug, not warn: in an outage this is every checkout, and
                    // /circuits and /metrics count them already.
                    log::debug!("fraud check unavailable ({}): {}", unavailable.reason, unavailable.detail);
                    (202, "manual_review", Some(format!("fraud_{}", unavailable.reason)))
                }
            };
        let n = self.next_order.fetch_add(1, Ordering::Relaxed);
        let stored = Order {
            order_id: format!("ord-{n}"),
            status,
            reason,
            customer_id: order.customer_id,
            amount: order.amount,
            user_id: user,
        };
        let answer = serde_json::to_value(&stored).unwrap_or(Value::Null);
        let notify = (status == "approved").then(|| (stored.order_id.clone(), stored.user_id.clone()));
        {
            let mut orders = self.orders.lock();
            if orders.len() >= MAX_ORDERS {
                orders.pop_first();
            }
            orders.insert(n, stored);
        }
        // Fire-and-forget: admitted or refused at once, never waited for, so
        // a hung notification provider costs the checkout nothing. A failure
        // is logged at `warn` once it happens; a refusal is only counted
        // (debug here: in an outage it is every checkout).
        if let Some((order_id, user)) = notify
            && let Err(reason) = self.backends.notify_order(&order_id, &user)
        {
            log::debug!("notification for {order_id} not sent ({reason})");
        }
        json_response(status_code, &answer)
    }

    fn order(&self, id: &str) -> ResponseBox {
        let found = id
            .strip_prefix("ord-")
            .and_then(|n| n.parse::<u64>().ok())
            .and_then(|n| self.orders.lock().get(&n).cloned());
        match found {
            Some(order) => json_response(200, &serde_json::to_value(order).unwrap_or(Value::Null)),
            None => error(404, "ORDER_NOT_FOUND", &format!("no order {id:?}")),
        }
    }

    fn me(&self, req: &Request, deadline: Instant) -> ResponseBox {
        let user = match user_id(req) {
            Ok(user) => user,
            Err(resp) => return resp,
        };
        match self.backends.profile(&user, deadline) {
            Ok(profile) => json_response(200, &profile),
            Err(u) => {
                log::warn!("profile lookup unavailable ({}): {}", u.reason, u.detail);
                error(
                    503,
                    "ACCOUNT_UNAVAILABLE",
                    &format!("the account service is unavailable ({})", u.reason),
                )
            }
        }
    }

    fn circuits(&self) -> ResponseBox {
        json_response(200, &self.circuits_json())
    }

    /// The body of `GET /circuits`.
    pub fn circuits_json(&self) -> Value {
        let deps: Vec<Value> = self
            .registry
            .snapshot()
            .into_iter()
            .map(|s| {
                let dep = self.registry.get(&s.name);
                let config = dep.as_ref().map(|d| self.live.current(d));
                let limit = dep.as_ref().and_then(|d| d.limiter()).map(|l| {
                    json!({ "current": l.limit(), "min": l.min_limit(), "max": l.max_limit(), "in_flight": l.in_flight() })
                });
                json!({
                    "name": s.name,
                    "state": s.state.as_str(),
                    "state_for_ms": self.state_clock.state_for(&s.name).map(|d| d.as_millis() as u64),
                    "failure_rate": s.failure_rate,
                    "slow_call_rate": s.slow_call_rate,
                    "calls": call_counts(&s.calls),
                    // What each policy in shadow would have refused (all zero with none in shadow).
                    "shadow_refused": s
                        .shadow_refused
                        .iter()
                        .map(|(p, n)| (p.as_str().to_owned(), json!(n)))
                        .collect::<serde_json::Map<String, Value>>(),
                    "pool": {
                        "workers": s.pool.workers,
                        "busy": s.pool.busy,
                        "queued": s.pool.queued,
                        "queue_capacity": s.queue_capacity,
                        "abandoned": s.pool.abandoned,
                        "submitted": s.pool.submitted,
                        "completed": s.pool.completed,
                    },
                    "timeout_ms": s.timeout.as_millis() as u64,
                    "max_wait_ms": config.as_ref().map(|c| c.max_wait.as_millis() as u64),
                    "adaptive_limit": limit,
                    "config": config.as_ref().map(to_json),
                    "mean_service_time_ms": s.mean_service_time.map(|d| d.as_secs_f64() * 1000.0),
                    "estimated_wait_ms": s.estimated_wait.map(|d| d.as_secs_f64() * 1000.0),
                    "limit": s.limit,
                    // The call time as callers see it, and its two parts, over the recent window.
                    "latency": {
                        "p50_ms": ms(s.latency.call.p50),
                        "p99_ms": ms(s.latency.call.p99),
                        "queue_wait": { "p50_ms": ms(s.latency.queue_wait.p50), "p99_ms": ms(s.latency.queue_wait.p99) },
                        "run": { "p50_ms": ms(s.latency.run.p50), "p99_ms": ms(s.latency.run.p99) },
                    },
                })
            })
            .collect();
        let mode = if self.backends.deps().is_some() { "bulkhead" } else { "direct" };
        // The access gate's decisions (bulkhead mode): hits never reach account.
        let caches: Vec<Value> = self
            .registry
            .cache_snapshots()
            .into_iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "hits": c.hits,
                    "misses": c.misses,
                    "stale": c.stale,
                    "coalesced": c.coalesced,
                    "refused": c.refused,
                    "evictions": c.evictions,
                    "entries": c.entries,
                    "capacity": c.capacity,
                    "in_flight": c.in_flight,
                    "waiting": c.waiting,
                })
            })
            .collect();
        json!({
            "mode": mode,
            "uptime_ms": self.started.elapsed().as_millis() as u64,
            "request_pool": {
                "threads": self.request_threads,
                "busy": self.in_flight.load(Ordering::Relaxed),
                "reserve_shadow": self.live.reserve_now().is_some_and(|r| r.shadow),
                // Ordinary requests the reserve in shadow let onto a reserved thread.
                "reserve_shadow_refused": self.live.reserve_shadow_refused(),
            },
            "dependencies": deps,
            "caches": caches,
        })
    }

    fn metrics(&self) -> ResponseBox {
        let mut text = String::new();
        if let Err(e) =
            watertight::metrics::prometheus_client::encoding::text::encode(&mut text, &self.prometheus.lock())
        {
            return error(500, "METRICS_FAILED", &format!("encoding the metrics failed: {e}"));
        }
        Response::from_string(text)
            .with_header(header("Content-Type", watertight::metrics::CONTENT_TYPE))
            .boxed()
    }

    /// `Ok` when the client may use the admin routes, else the 403 answer.
    fn admin_allowed(&self, req: &Request, ctx: &RequestContext) -> Result<(), ResponseBox> {
        let presented = req.headers().iter().find(|h| h.field.equiv(TOKEN_HEADER)).map(|h| h.value.as_str());
        match admin::admin_access(
            ctx.peer_addr(),
            ctx.through_proxy(),
            presented,
            self.admin_token.as_deref(),
        ) {
            Ok(_) => Ok(()),
            Err(refused) => Err(error(403, "ADMIN_FORBIDDEN", refused.message())),
        }
    }

    fn dependency_config(&self, name: &str) -> ResponseBox {
        match self.registry.get(name) {
            Some(dep) => json_response(200, &to_json(&self.live.current(&dep))),
            None => unknown_dependency(name),
        }
    }

    /// `PUT /_config/{name}`: the body is the dependency's whole section (a
    /// field left out takes its default, as in a file).
    fn reconfigure(&self, req: &mut Request, name: &str) -> ResponseBox {
        if self.registry.get(name).is_none() {
            return unknown_dependency(name);
        }
        let body = match read_body(req) {
            Ok(body) => body,
            Err(resp) => return resp,
        };
        let new = match DependencyConfig::from_deserializer(&mut serde_json::Deserializer::from_slice(&body))
        {
            Ok(new) => new,
            Err(e) => return invalid_config(&e),
        };
        match self.live.reconfigure(&self.registry, name, &new) {
            Ok((current, report)) => {
                log::info!("dependency {name}: reconfigured through PUT /_config");
                json_response(
                    200,
                    &json!({ "dependency": name, "config": to_json(&current), "capacity_warnings": report.warnings() }),
                )
            }
            Err(LiveError::Unknown) => unknown_dependency(name),
            Err(LiveError::Invalid(e)) => invalid_config(&e),
            Err(LiveError::Capacity(why)) => error(409, "CAPACITY_EXCEEDED", &why),
        }
    }

    /// `PUT /_config/reserve`: `{"shadow": true}` puts the request pool's
    /// reserve in shadow, `{"shadow": false}` back to enforcing, from the
    /// next request.
    fn reconfigure_reserve(&self, req: &mut Request) -> ResponseBox {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Switch {
            shadow: bool,
        }
        let body = match read_body(req) {
            Ok(body) => body,
            Err(resp) => return resp,
        };
        let switch: Switch = match serde_json::from_slice(&body) {
            Ok(switch) => switch,
            Err(e) => {
                return error(400, "INVALID_CONFIG", &format!("expected {{\"shadow\": true|false}}: {e}"));
            }
        };
        match self.live.set_reserve_shadow(switch.shadow) {
            Some(reserve) => {
                log::info!(
                    "request pool: reserve {} through PUT /_config/reserve",
                    match reserve.shadow {
                        true => "in shadow",
                        false => "enforced",
                    }
                );
                json_response(200, &json!({ "reserve": reserve }))
            }
            None => error(404, "NO_RESERVE", "the request pool keeps no reserve"),
        }
    }

    fn faults(&self) -> ResponseBox {
        let faults: serde_json::Map<String, Value> =
            self.providers.iter().map(|p| (p.name().to_owned(), json!(p.fault().to_string()))).collect();
        json_response(200, &Value::Object(faults))
    }

    fn set_fault(&self, req: &mut Request, name: &str) -> ResponseBox {
        let Some(provider) = self.providers.iter().find(|p| p.name() == name) else {
            return error(404, "NO_SUCH_PROVIDER", &format!("no embedded provider named {name:?}"));
        };
        let body = match read_body(req) {
            Ok(body) => body,
            Err(resp) => return resp,
        };
        let text = String::from_utf8_lossy(&body);
        match text.parse::<Fault>() {
            Ok(fault) => {
                provider.set_fault(fault);
                log::info!("provider {name}: fault set to {fault}");
                json_response(200, &json!({ "provider": name, "fault": fault.to_string() }))
            }
            Err(e) => error(400, "INVALID_FAULT", &e.to_string()),
        }
    }
}

fn unknown_dependency(name: &str) -> ResponseBox {
    error(404, "UNKNOWN_DEPENDENCY", &format!("no dependency named {name:?}"))
}

/// 400 naming the field: `{"code", "message", "field"}`.
fn invalid_config(e: &watertight::ConfigError) -> ResponseBox {
    json_response(400, &json!({ "code": "INVALID_CONFIG", "message": e.to_string(), "field": e.path() }))
}

fn to_json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The caller's user id from `X-User-Id`: 401 when missing or empty, 400 when
/// it is not a plain id (it goes into account's URL path).
fn user_id(req: &Request) -> Result<String, ResponseBox> {
    let value = req.headers().iter().find(|h| h.field.equiv("X-User-Id")).map(|h| h.value.as_str().trim());
    match value {
        None | Some("") => Err(error(401, "UNAUTHENTICATED", "the X-User-Id header is required")),
        Some(id)
            // Not `.` or `..`: the id becomes a path segment of account's URL.
            if id.len() <= 64
                && id != "."
                && id != ".."
                && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b)) =>
        {
            Ok(id.to_owned())
        }
        Some(_) => Err(error(400, "INVALID_USER_ID", "X-User-Id must be 1-64 of [A-Za-z0-9-_.@]")),
    }
}

/// Reads the body, at most [`MAX_BODY`] bytes. A declared length over the
/// limit is refused without reading; an undeclared (chunked) or understated
/// one is caught by reading one byte past the limit.
fn read_body(req: &mut Request) -> Result<Vec<u8>, ResponseBox> {
    let too_large = || error(413, "PAYLOAD_TOO_LARGE", &format!("the body must not exceed {MAX_BODY} bytes"));
    if req.body_length().is_some_and(|n| n > MAX_BODY) {
        return Err(too_large());
    }
    let mut body = Vec::with_capacity(req.body_length().unwrap_or(0).min(MAX_BODY));
    match req.as_reader().take(MAX_BODY as u64 + 1).read_to_end(&mut body) {
        Ok(_) if body.len() > MAX_BODY => {
            // tiny_http does not skip the unread rest of a chunked body, and
            // the keep-alive connection would read it as the next request.
            // Discard a bounded amount; past that the connection is lost to
            // that client anyway.
            let _ = std::io::copy(&mut req.as_reader().take(MAX_DRAIN), &mut std::io::sink());
            Err(too_large())
        }
        Ok(_) => Ok(body),
        Err(e) => Err(error(400, "BAD_BODY", &format!("reading the body failed: {e}"))),
    }
}

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

/// A JSON answer.
pub fn json_response(status: u16, body: &Value) -> ResponseBox {
    Response::from_string(body.to_string())
        .with_status_code(status)
        .with_header(header("Content-Type", "application/json"))
        .boxed()
}

/// A JSON error `{"code", "message"}`.
pub fn error(status: u16, code: &str, message: &str) -> ResponseBox {
    json_response(status, &json!({ "code": code, "message": message }))
}

fn method_not_allowed(allow: &str) -> ResponseBox {
    let mut resp = error(405, "METHOD_NOT_ALLOWED", &format!("this route answers {allow} only"));
    resp.add_header(header("Allow", allow));
    resp
}

/// A dependency's counts as JSON: one key per outcome, spelled as its label
/// (the `kind` label of `watertight_calls_total`), and the overlapping counts.
fn call_counts(calls: &watertight::CallCounts) -> Value {
    let mut out = serde_json::Map::new();
    for (outcome, n) in calls.by_outcome() {
        out.insert(outcome.as_str().to_owned(), json!(n));
    }
    out.insert("slow".into(), json!(calls.slow));
    out.insert("retried".into(), json!(calls.retried));
    out.insert("hedged".into(), json!(calls.hedged));
    out.insert("hedges_won".into(), json!(calls.hedges_won));
    out.insert("expired".into(), json!(calls.expired));
    Value::Object(out)
}

/// Milliseconds, with fractions, for JSON.
fn ms(d: Option<std::time::Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1000.0)
}

/// `250ms`, `2s`, or a bare number of milliseconds; above zero and at most
/// one hour.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit_ms) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000)
    } else {
        (text, 1)
    };
    let n: u64 = number.trim().parse().map_err(|_| format!("{text:?} is not a duration like 250ms or 2s"))?;
    let ms = n
        .checked_mul(unit_ms)
        .filter(|ms| *ms <= 3_600_000)
        .ok_or_else(|| format!("{text:?} is over one hour"))?;
    if ms == 0 {
        return Err(format!("{text:?} leaves no time at all"));
    }
    Ok(Duration::from_millis(ms))
}
