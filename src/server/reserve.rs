//! [`Reserve`]: a few request threads kept for the requests you name, and the
//! route patterns that name them. The file config (`[server.reserve]`)
//! names it too.
//!
//! The share is kept by the pool's room (`crate::room`): ordinary requests
//! are a class that leaves the reserve's seats to reserved ones.

use std::fmt;
#[cfg(feature = "tiny_http")]
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

#[cfg(feature = "tiny_http")]
use tiny_http::Request;

use crate::ConfigError;
#[cfg(feature = "tiny_http")]
use crate::error::panic_message;

/// A reserve's code, which picks requests of the crate's own server
/// (feature `tiny_http`; without it, there is none to pick, nor a way to
/// give one).
#[cfg(feature = "tiny_http")]
type Classifier = Arc<dyn Fn(&Request) -> bool + Send + Sync>;
#[cfg(not(feature = "tiny_http"))]
type Classifier = Arc<dyn Fn(&std::convert::Infallible) -> bool + Send + Sync>;

/// A reserved share of the request pool: `threads` request threads that
/// ordinary requests can never take, kept for the requests that match one of
/// `routes` or that a classifier ([`for_requests`](Self::for_requests),
/// feature `tiny_http`) picks. Given to [`ServerConfigBuilder::reserve`](crate::server::ServerConfigBuilder::reserve).
///
/// While threads are free a reserved request takes any of them; ordinary
/// requests hold at most the pool's threads less `threads`. Name only routes
/// that answer at once: a reserved route that calls a hung dependency holds a
/// reserved thread.
///
/// A route is a method (or `*` for any), a space, and a path: `GET /health`,
/// `GET /orders/{id}` (`{id}` is one non-empty segment), `GET /static/*` (a
/// last `*` is anything under the prefix, or nothing). The query string does
/// not count; anything else must match exactly: `/health/` is not
/// `/health`, and `HEAD` is not `GET`.
///
/// With the `serde` feature it is also the `[server.reserve]` section of a
/// configuration file (`watertight::config`): `threads = 2` and
/// `routes = ["GET /health"]` (a classifier is code, and is not in a file).
///
/// ```
/// use watertight::server::{Reserve, ServerConfig};
///
/// let config = ServerConfig::builder()
///     .reserve(Reserve::new(2).for_routes(["GET /health", "GET /orders/{id}"]))
///     .build()?;
/// assert_eq!(config.reserve().map(|r| r.threads), Some(2));
///
/// // Or decided by code, from the request's method, URL and headers.
/// let probes = Reserve::new(1)
///     .for_requests(|req: &tiny_http::Request| req.headers().iter().any(|h| h.field.equiv("X-Probe")));
/// assert!(ServerConfig::builder().reserve(probes).build().is_ok());
///
/// // A reserve that names no request is refused.
/// let err = ServerConfig::builder().reserve(Reserve::new(2)).build().unwrap_err();
/// assert_eq!(err.field(), "reserve.routes");
/// # Ok::<(), watertight::ConfigError>(())
/// ```
#[derive(Clone, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields, default))]
pub struct Reserve {
    /// The request threads ordinary requests can never take: at least 1,
    /// and fewer than the pool's.
    pub threads: usize,
    /// The routes whose requests are reserved, as `METHOD /path` patterns.
    pub routes: Vec<String>,
    /// In shadow (see [`shadow`](Self::shadow)). In a file: `shadow = true`.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "std::ops::Not::not"))]
    pub shadow: bool,
    #[cfg_attr(feature = "serde", serde(skip))]
    classifier: Option<Classifier>,
}

impl Reserve {
    /// A share of `threads` request threads, for no request yet: add routes
    /// ([`for_routes`](Self::for_routes)) or a classifier
    /// ([`for_requests`](Self::for_requests)).
    pub fn new(threads: usize) -> Reserve {
        Reserve { threads, routes: Vec::new(), shadow: false, classifier: None }
    }

    /// Puts the reserve in shadow (a switch of its own, not a dependency's [`Policy`](crate::shadow::Policy)):
    /// it decides as it would, and an ordinary request that finds every
    /// ordinary thread busy takes a free reserved thread instead of waiting
    /// for an ordinary one (or being refused), as with no reserve. Each such
    /// request is counted
    /// ([`RequestPool::shadow_refused`](crate::server::RequestPool::shadow_refused),
    /// `watertight_shadow_refusals_total{policy="reserve"}`) and logged at
    /// `debug`. Switched live with
    /// [`RequestPool::set_reserve_shadow`](crate::server::RequestPool::set_reserve_shadow).
    /// Defaults to `false`: enforced.
    pub fn shadow(mut self, shadow: bool) -> Reserve {
        self.shadow = shadow;
        self
    }

    /// Adds `routes` (`GET /health`, `GET /orders/{id}`, `* /static/*`) to
    /// the reserved ones. Checked by
    /// [`ServerConfigBuilder::build`](crate::server::ServerConfigBuilder::build).
    pub fn for_routes<I, S>(mut self, routes: I) -> Reserve
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.routes.extend(routes.into_iter().map(Into::into));
        self
    }

    /// Also reserves every request `classifier` says `true` to, from what
    /// the request pool has before the handler runs: the method, the URL
    /// and the headers (the body is not read). It runs on the request thread
    /// that took the request, once per request, and must be quick. A
    /// classifier that panics classifies the request as ordinary (logged at
    /// `error`). Replaces any classifier given before. Only the crate's own
    /// server (feature `tiny_http`) consults it.
    #[cfg(feature = "tiny_http")]
    pub fn for_requests<F>(mut self, classifier: F) -> Reserve
    where
        F: Fn(&Request) -> bool + Send + Sync + 'static,
    {
        self.classifier = Some(Arc::new(classifier));
        self
    }

    /// Whether a classifier was given.
    pub fn has_classifier(&self) -> bool {
        self.classifier.is_some()
    }

    /// Checks what can be checked without the pool's size: at least one
    /// thread, at least one route or a classifier, every route a pattern.
    /// The field is `reserve.threads` or `reserve.routes`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.compile().map(drop)
    }

    /// The routes parsed, or the first error.
    pub(crate) fn compile(&self) -> Result<Vec<Route>, ConfigError> {
        if self.threads == 0 {
            return Err(ConfigError::new("reserve.threads", "at least 1", 0));
        }
        if self.routes.is_empty() && !self.has_classifier() {
            return Err(ConfigError::new(
                "reserve.routes",
                "at least one route, or a classifier (Reserve::for_requests)",
                "none",
            ));
        }
        self.routes
            .iter()
            .map(|text| {
                Route::parse(text).ok_or_else(|| {
                    ConfigError::new(
                        "reserve.routes",
                        "patterns like `GET /health` or `GET /orders/{id}`: a method or *, a space, \
                         and a path of literal segments, {name} segments and a last *",
                        format!("{text:?}"),
                    )
                })
            })
            .collect()
    }

    /// Whether `request` is reserved: it matches one of `routes` (parsed from
    /// `self.routes`), or the classifier says so.
    #[cfg(feature = "tiny_http")]
    pub(crate) fn takes(&self, routes: &[Route], request: &Request) -> bool {
        let method = request.method().as_str();
        let url = request.url();
        if routes_take(routes, method, url) {
            return true;
        }
        let Some(classifier) = &self.classifier else { return false };
        match catch_unwind(AssertUnwindSafe(|| classifier(request))) {
            Ok(reserved) => reserved,
            Err(payload) => {
                let msg = panic_message(&*payload);
                log::error!("request pool: the reserve's classifier panicked on {method} {url}: {msg}");
                false
            }
        }
    }
}

/// Whether one of `routes` takes a request for `method` and `url` (its
/// query string does not count).
pub(crate) fn routes_take(routes: &[Route], method: &str, url: &str) -> bool {
    let path = url.find(['?', '#']).map_or(url, |end| &url[..end]);
    routes.iter().any(|r| r.matches(method, path))
}

/// Checks a reserve of `reserved` threads against a pool of `threads`: at
/// least one thread must be left for ordinary requests.
pub(crate) fn check_threads(reserved: usize, threads: usize) -> Result<(), ConfigError> {
    if reserved >= threads {
        return Err(ConfigError::new(
            "reserve.threads",
            "fewer than the request threads, so that ordinary requests keep at least one",
            format!("{reserved} of {threads} request threads"),
        ));
    }
    Ok(())
}

/// Two reserves are equal when their threads and routes are, and they have
/// the same classifier (the same `Arc`) or none.
impl PartialEq for Reserve {
    fn eq(&self, other: &Reserve) -> bool {
        let same_classifier = match (&self.classifier, &other.classifier) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        self.threads == other.threads
            && self.routes == other.routes
            && self.shadow == other.shadow
            && same_classifier
    }
}

impl Eq for Reserve {}

impl fmt::Debug for Reserve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reserve")
            .field("threads", &self.threads)
            .field("routes", &self.routes)
            .field("shadow", &self.shadow)
            .field("classifier", &self.classifier.as_ref().map(|_| "<fn>"))
            .finish()
    }
}

/// A parsed `METHOD /path` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    /// `None` for `*`, any method.
    method: Option<String>,
    segments: Vec<Segment>,
    /// A last `*`: anything under the prefix, or nothing.
    rest: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// `{name}`: one non-empty segment.
    Any,
}

impl Route {
    fn parse(text: &str) -> Option<Route> {
        let mut words = text.split_whitespace();
        let (method, path) = (words.next()?, words.next()?);
        if words.next().is_some() {
            return None;
        }
        let method = match method {
            "*" => None,
            m if m.bytes().all(|b| b.is_ascii_uppercase()) => Some(m.to_owned()),
            _ => return None,
        };
        let path = path.strip_prefix('/')?;
        let mut segments = Vec::new();
        let mut rest = false;
        if !path.is_empty() {
            let parts: Vec<&str> = path.split('/').collect();
            for (i, part) in parts.iter().enumerate() {
                let last = i + 1 == parts.len();
                let segment = match *part {
                    "*" if last => {
                        rest = true;
                        continue;
                    }
                    p if p.starts_with('{') && p.ends_with('}') && p.len() > 2 => {
                        let name = &p[1..p.len() - 1];
                        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                            return None;
                        }
                        Segment::Any
                    }
                    p if !p.is_empty() && !p.contains(['{', '}', '*', '?', '#']) => {
                        Segment::Literal(p.to_owned())
                    }
                    _ => return None,
                };
                segments.push(segment);
            }
        }
        Some(Route { method, segments, rest })
    }

    /// Whether a request for `method` and `path` (without its query) matches.
    fn matches(&self, method: &str, path: &str) -> bool {
        if self.method.as_deref().is_some_and(|m| m != method) {
            return false;
        }
        let Some(path) = path.strip_prefix('/') else { return false };
        // `/` has no segment; `/a//b` has three, one of them empty.
        let mut parts = (!path.is_empty()).then(|| path.split('/'));
        let mut next = || parts.as_mut().and_then(Iterator::next);
        for segment in &self.segments {
            match (segment, next()) {
                (Segment::Literal(want), Some(got)) if want == got => {}
                (Segment::Any, Some(got)) if !got.is_empty() => {}
                _ => return false,
            }
        }
        self.rest || next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(text: &str) -> Route {
        Route::parse(text).unwrap_or_else(|| panic!("{text:?} does not parse"))
    }

    #[test]
    fn routes_match_their_method_and_path_exactly() {
        let health = route("GET /health");
        assert!(health.matches("GET", "/health"));
        for (method, path) in [("HEAD", "/health"), ("GET", "/health/"), ("GET", "/healthz"), ("GET", "/")] {
            assert!(!health.matches(method, path), "{method} {path}");
        }
        let order = route("GET /orders/{id}");
        assert!(order.matches("GET", "/orders/ord-1"));
        for path in ["/orders", "/orders/", "/orders/1/items", "/order/1", "orders/1"] {
            assert!(!order.matches("GET", path), "{path}");
        }
        let root = route("* /");
        assert!(root.matches("POST", "/") && !root.matches("GET", "/x"));
        let under = route("* /static/*");
        for path in ["/static", "/static/", "/static/a/b.css"] {
            assert!(under.matches("PUT", path), "{path}");
        }
        assert!(!under.matches("GET", "/staticx"));
        assert!(route("GET /*").matches("GET", "/anything/at/all"));
    }

    #[test]
    fn malformed_routes_are_refused() {
        for text in [
            "",
            "/health",
            "get /health",
            "GET health",
            "GET /health extra",
            "GET //health",
            "GET /health/",
            "GET /{}",
            "GET /{a-b}",
            "GET /a*",
            "GET /*/x",
            "GET /x?y",
        ] {
            assert_eq!(Route::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn reserves_are_checked_before_the_pool_size_is_known() {
        assert_eq!(
            Reserve::new(0).for_routes(["GET /health"]).validate().unwrap_err().field(),
            "reserve.threads"
        );
        assert_eq!(Reserve::new(1).validate().unwrap_err().field(), "reserve.routes");
        let bad = Reserve::new(1).for_routes(["GET /health", "health"]).validate().unwrap_err();
        assert_eq!(bad.field(), "reserve.routes");
        assert!(bad.to_string().ends_with("got \"health\""), "{bad}");
        #[cfg(feature = "tiny_http")]
        assert!(Reserve::new(1).for_requests(|_| true).validate().is_ok());
        assert_eq!(check_threads(2, 2).unwrap_err().value(), "2 of 2 request threads");
        assert!(check_threads(2, 3).is_ok());
    }
}
