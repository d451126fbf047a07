//! The ureq integration (feature `ureq`): what a ureq outcome means to a breaker,
//! and the call's deadline turned into the request's own timeouts.
//!
//! ```no_run
//! use std::time::Duration;
//! use watertight::http::WithDeadline;
//! use watertight::{CallContext, Dependency};
//!
//! let fraud = Dependency::builder("fraud").workers(4).timeout(Duration::from_secs(2)).build()?;
//! let agent = ureq::Agent::new_with_defaults();
//! let body = fraud.call(move |ctx: &CallContext| {
//!     // The request gives up when the call's deadline passes, and frees this worker.
//!     agent.get("http://127.0.0.1:9000/verify").with_deadline(ctx).call()?.body_mut().read_to_string()
//! });
//! // 5xx, timeouts and transport errors count against the breaker; 4xx do not.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The outcome table
//!
//! The [rule](crate::dependency#what-counts-as-a-failure), for every `ureq::Error`:
//!
//! | `ureq::Error`                                   | Verdict   | Why |
//! |-------------------------------------------------|-----------|-----|
//! | `StatusCode(500..=599)`                         | Failure   | the provider says it is unwell |
//! | `StatusCode(400..=499)` (400, 401, 403, 404, 408, 409, 429, ...) | Ignore | the caller's or one tenant's problem (a 429 is one tenant's quota) |
//! | `Timeout(_)` (every phase, our deadline included) | Failure | no answer in time |
//! | `Io(e)`: refused, reset, unexpected EOF, ...    | Failure   | the connection to the provider broke |
//! | `Io(e)` with kind `InvalidInput`                | Ignore    | the same rule as for [`std::io::Error`] |
//! | `HostNotFound`, `ConnectionFailed`, `ConnectProxyFailed(_)` | Failure | the provider cannot be reached |
//! | `Protocol(_)` (garbage, a broken chunked body, ...) | Failure | the provider sent something that is not HTTP |
//! | `Tls(_)`, `BodyStalled`, `Other(_)`             | Failure   | the transport failed |
//! | `Http(_)`, `BadUri(_)`, `InvalidProxyUrl`, `RequireHttpsOnly(_)`, `TlsRequired` | Ignore | the request or the agent was built wrong |
//! | `BodyExceedsLimit(_)`, `LargeResponseHeader(..)`, `RedirectFailed`, `TooManyRedirects` | Ignore | the provider answered; the caller's limits or redirect policy refused the answer |
//! | any other variant (those behind ureq features this crate does not enable: cookies, charset, json, gzip, multipart, rustls, native-tls) | Failure | unknown is treated as unwell; use `with().classify(..)` to decide otherwise |
//!
//! `Protocol(_)` also covers the few request-building mistakes ureq only finds while
//! sending (a body on a method that allows none, conflicting body headers). They are
//! programming errors that fail every call; ureq does not let them be told apart from a
//! provider's garbage without depending on its protocol crate, so they count as failures.
//!
//! With [`http_status_as_error(false)`](ureq::config::ConfigBuilder::http_status_as_error)
//! a 4xx or 5xx is an `Ok` response, and [`classify_response`] applies the same table
//! to its status.

use crate::{CallContext, Classify, Verdict};

/// The verdict for an HTTP status: 5xx is a failure, 4xx is ignored, anything else
/// (1xx, 2xx, 3xx) is a success.
fn status_verdict(status: u16) -> Verdict {
    match status {
        500..=599 => Verdict::Failure,
        400..=499 => Verdict::Ignore,
        _ => Verdict::Success,
    }
}

impl Classify for ureq::Error {
    /// See the [outcome table](crate::http#the-outcome-table).
    fn classify(&self) -> Verdict {
        use ureq::Error as E;
        match self {
            E::StatusCode(status) => match status_verdict(*status) {
                // ureq raises `StatusCode` for 4xx and 5xx only; anything else there
                // would be a surprise, not an outage.
                Verdict::Success => Verdict::Ignore,
                verdict => verdict,
            },
            E::Io(e) => e.classify(),
            E::Timeout(_)
            | E::HostNotFound
            | E::ConnectionFailed
            | E::ConnectProxyFailed(_)
            | E::Protocol(_)
            | E::Tls(_)
            | E::BodyStalled
            | E::Other(_) => Verdict::Failure,
            E::Http(_)
            | E::BadUri(_)
            | E::InvalidProxyUrl
            | E::RequireHttpsOnly(_)
            | E::TlsRequired
            | E::BodyExceedsLimit(_)
            | E::LargeResponseHeader(..)
            | E::RedirectFailed
            | E::TooManyRedirects => Verdict::Ignore,
            _ => Verdict::Failure,
        }
    }
}

/// The verdict for a ureq call made with
/// [`http_status_as_error(false)`](ureq::config::ConfigBuilder::http_status_as_error),
/// where a 4xx or 5xx arrives as an `Ok` response: the status decides (5xx failure,
/// 4xx ignored, else success), and an error is classified by the
/// [outcome table](crate::http#the-outcome-table).
///
/// Pass it to [`CallBuilder::classify`](crate::CallBuilder::classify):
/// `dep.with().classify(classify_response).call(move |ctx| agent.get(&url).with_deadline(ctx).call())`.
///
/// ```
/// use watertight::Verdict;
/// use watertight::http::classify_response;
///
/// let not_found = ureq::http::Response::builder().status(404).body(()).unwrap();
/// assert_eq!(classify_response(&Ok(not_found)), Verdict::Ignore);
/// let timed_out: Result<ureq::http::Response<()>, _> = Err(ureq::Error::Timeout(ureq::Timeout::Global));
/// assert_eq!(classify_response(&timed_out), Verdict::Failure);
/// ```
pub fn classify_response<B>(result: &Result<ureq::http::Response<B>, ureq::Error>) -> Verdict {
    match result {
        Ok(response) => status_verdict(response.status().as_u16()),
        Err(e) => e.classify(),
    }
}

/// Bounds a request by a call's deadline.
///
/// Implemented for [`ureq::RequestBuilder`]: `with_deadline(ctx)` sets the request's
/// global timeout (the whole exchange: connect, send, receive the head and read the
/// body) and its connect timeout to [`ctx.remaining()`](CallContext::remaining). A
/// hung or trickling provider then ends in `ureq::Error::Timeout` at the deadline, so
/// the worker is free again when the caller gives up instead of staying held by the
/// socket. A context whose deadline has already passed gives a zero budget, which
/// ureq answers with an immediate `Timeout(Global)`, before connecting.
///
/// The timeouts replace those of the agent for this request; to keep a shorter one for
/// some phase, set it after this call (`.with_deadline(ctx).config().timeout_connect(..)`).
pub trait WithDeadline {
    /// This request, bounded by `ctx`'s deadline.
    #[must_use = "the bounded request is returned, not changed in place"]
    fn with_deadline(self, ctx: &CallContext) -> Self;
}

impl<B> WithDeadline for ureq::RequestBuilder<B> {
    fn with_deadline(self, ctx: &CallContext) -> Self {
        let budget = ctx.remaining();
        self.config().timeout_global(Some(budget)).timeout_connect(Some(budget)).build()
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn verdict(e: ureq::Error) -> Verdict {
        e.classify()
    }

    #[test]
    fn server_errors_fail_and_client_errors_are_ignored() {
        for status in [500, 502, 503, 504, 599] {
            assert_eq!(verdict(ureq::Error::StatusCode(status)), Verdict::Failure, "{status}");
        }
        for status in [400, 401, 403, 404, 408, 409, 422, 429, 499] {
            assert_eq!(verdict(ureq::Error::StatusCode(status)), Verdict::Ignore, "{status}");
        }
        // Never raised by ureq; must not count against the provider if it ever is.
        assert_eq!(verdict(ureq::Error::StatusCode(302)), Verdict::Ignore);
    }

    #[test]
    fn transport_failures_fail() {
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::UnexpectedEof,
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::TimedOut,
            io::ErrorKind::Other,
        ] {
            assert_eq!(verdict(ureq::Error::Io(kind.into())), Verdict::Failure, "{kind:?}");
        }
        for timeout in [
            ureq::Timeout::Global,
            ureq::Timeout::Connect,
            ureq::Timeout::RecvResponse,
            ureq::Timeout::RecvBody,
            ureq::Timeout::PerRead,
        ] {
            assert_eq!(verdict(ureq::Error::Timeout(timeout)), Verdict::Failure, "{timeout:?}");
        }
        for e in [
            ureq::Error::HostNotFound,
            ureq::Error::ConnectionFailed,
            ureq::Error::ConnectProxyFailed("proxy said 502".into()),
            ureq::Error::Tls("handshake failed"),
            ureq::Error::BodyStalled,
            ureq::Error::Other("connector gave up".into()),
        ] {
            assert_eq!(verdict(e), Verdict::Failure);
        }
    }

    #[test]
    fn the_callers_mistakes_and_limits_are_ignored() {
        let http_error = ureq::http::Request::builder().header("bad\nname", "x").body(()).unwrap_err();
        for e in [
            ureq::Error::Http(http_error),
            ureq::Error::BadUri("no scheme".into()),
            ureq::Error::InvalidProxyUrl,
            ureq::Error::RequireHttpsOnly("http://x".into()),
            ureq::Error::TlsRequired,
            ureq::Error::BodyExceedsLimit(10),
            ureq::Error::LargeResponseHeader(70_000, 65_536),
            ureq::Error::RedirectFailed,
            ureq::Error::TooManyRedirects,
            ureq::Error::Io(io::ErrorKind::InvalidInput.into()),
        ] {
            let shown = format!("{e:?}");
            assert_eq!(verdict(e), Verdict::Ignore, "{shown}");
        }
    }

    #[test]
    fn a_bad_uri_from_ureq_itself_is_ignored() {
        let agent = ureq::Agent::new_with_defaults();
        let e = agent.get("not a uri").call().unwrap_err();
        assert_eq!(e.classify(), Verdict::Ignore, "{e:?}");
        let e = agent.get("/no/host").call().unwrap_err();
        assert_eq!(e.classify(), Verdict::Ignore, "{e:?}");
    }

    #[test]
    fn responses_are_judged_by_status() {
        let response = |status: u16| ureq::http::Response::builder().status(status).body(()).unwrap();
        let cases = [
            (200, Verdict::Success),
            (204, Verdict::Success),
            (301, Verdict::Success),
            (400, Verdict::Ignore),
            (404, Verdict::Ignore),
            (429, Verdict::Ignore),
            (500, Verdict::Failure),
            (503, Verdict::Failure),
        ];
        for (status, expected) in cases {
            assert_eq!(classify_response(&Ok(response(status))), expected, "{status}");
        }
        let err: Result<ureq::http::Response<()>, _> = Err(ureq::Error::Timeout(ureq::Timeout::Global));
        assert_eq!(classify_response(&err), Verdict::Failure);
        let err: Result<ureq::http::Response<()>, _> = Err(ureq::Error::BadUri("x".into()));
        assert_eq!(classify_response(&err), Verdict::Ignore);
    }
}
