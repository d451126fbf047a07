//! The errors of every surface: a call's [`Error`], why a call was turned away
//! ([`Rejection`]), and an invalid configuration ([`ConfigError`]).

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::classify::Verdict;

/// Why a call was turned away before the dependency was asked anything:
/// never recorded as a failure, never retried, and counted under the
/// [`Outcome`] of the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rejection {
    /// The circuit breaker permits no call: it is OPEN (or FORCED_OPEN), or
    /// HALF_OPEN with every probe slot taken. The provider is not called.
    /// Resilience4j's name for it, and its label: `not_permitted`.
    NotPermitted,
    /// Every worker is busy and the bounded queue is full (and, with a
    /// `max_wait`, no room came within it).
    QueueFull,
    /// The work already queued would outlast the call's remaining deadline,
    /// or the deadline had passed at submission.
    DeadlineUnmeetable,
    /// The pool is shutting down (or has shut down) and admits nothing more;
    /// also the answer for queued work that shutdown could not run in time.
    ShuttingDown,
    /// The dependency's adaptive concurrency limit
    /// ([`DependencyBuilder::adaptive_limit`](crate::DependencyBuilder::adaptive_limit))
    /// is reached.
    LimitExceeded,
    /// The dependency's rate limit
    /// ([`DependencyBuilder::rate_limit`](crate::DependencyBuilder::rate_limit))
    /// has no permit free within the caller's deadline and its `max_wait`;
    /// [`Error::Rejected`]'s `retry_after` says when one would be.
    RateLimited,
    /// Turned away for its [`Priority`](crate::dependency::Priority): what
    /// room is left is kept for calls of a higher priority.
    Shed,
    /// Refused by the dependency's adaptive throttler
    /// ([`DependencyBuilder::throttle`](crate::DependencyBuilder::throttle)).
    Throttled,
}

impl Rejection {
    /// Every rejection, in the order of [`Outcome::ALL`].
    pub const ALL: [Rejection; 8] = [
        Rejection::NotPermitted,
        Rejection::QueueFull,
        Rejection::DeadlineUnmeetable,
        Rejection::ShuttingDown,
        Rejection::LimitExceeded,
        Rejection::RateLimited,
        Rejection::Shed,
        Rejection::Throttled,
    ];

    /// Its label: its [`Outcome`]'s (`"not_permitted"`, `"queue_full"`, ...).
    pub fn as_str(&self) -> &'static str {
        self.outcome().as_str()
    }

    /// The outcome a call rejected this way is counted under.
    pub fn outcome(&self) -> Outcome {
        // `Outcome::ALL` lists the five outcomes of a job that ran, then one
        // per rejection in declaration order.
        Outcome::ALL[5 + *self as usize]
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Rejection::NotPermitted => "the circuit breaker permits no call",
            Rejection::QueueFull => "the worker pool and its queue are full",
            Rejection::DeadlineUnmeetable => "the queued work would outlast the deadline",
            Rejection::ShuttingDown => "the worker pool is shutting down",
            Rejection::LimitExceeded => "the adaptive concurrency limit is reached",
            Rejection::RateLimited => "the rate limit has no permit free in time",
            Rejection::Shed => "shed for its priority: the room left is kept for higher ones",
            Rejection::Throttled => "refused by the adaptive throttler: the provider accepts too few calls",
        })
    }
}

/// A detached call's refusal ([`Dependency::spawn`](crate::Dependency::spawn)) is its reason alone.
impl std::error::Error for Rejection {}

/// What one attempt ended in: exactly one per attempt, and the one word that
/// names it everywhere (the `kind` label of `watertight_calls_total`, the
/// fields of `CallCounts`, and the JSON of the checkout example).
///
/// The first five are what the provider did (as the classifier judged it);
/// the others are the rejections, one for each [`Rejection`], of the same
/// name and label, where the provider was never asked. Resilience4j's words
/// where it has them (`successful`, `failed`, `ignored`, `not_permitted`).
/// A call's error gives its own: [`Error::outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The job returned an outcome its classifier called a success.
    Successful,
    /// The job returned an outcome its classifier called a failure.
    Failed,
    /// The job returned an outcome its classifier ignored (a 4xx).
    Ignored,
    /// No answer within the attempt's deadline.
    TimedOut,
    /// The job panicked.
    Panicked,
    /// [`Rejection::NotPermitted`].
    NotPermitted,
    /// [`Rejection::QueueFull`].
    QueueFull,
    /// [`Rejection::DeadlineUnmeetable`].
    DeadlineUnmeetable,
    /// [`Rejection::ShuttingDown`].
    ShuttingDown,
    /// [`Rejection::LimitExceeded`].
    LimitExceeded,
    /// [`Rejection::RateLimited`].
    RateLimited,
    /// [`Rejection::Shed`].
    Shed,
    /// [`Rejection::Throttled`].
    Throttled,
}

impl Outcome {
    /// Every outcome, in a fixed order (the order of the `kind` samples).
    pub const ALL: [Outcome; 13] = [
        Outcome::Successful,
        Outcome::Failed,
        Outcome::Ignored,
        Outcome::TimedOut,
        Outcome::Panicked,
        Outcome::NotPermitted,
        Outcome::QueueFull,
        Outcome::DeadlineUnmeetable,
        Outcome::ShuttingDown,
        Outcome::LimitExceeded,
        Outcome::RateLimited,
        Outcome::Shed,
        Outcome::Throttled,
    ];

    /// Its stable, lower-case label.
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Successful => "successful",
            Outcome::Failed => "failed",
            Outcome::Ignored => "ignored",
            Outcome::TimedOut => "timed_out",
            Outcome::Panicked => "panicked",
            Outcome::NotPermitted => "not_permitted",
            Outcome::QueueFull => "queue_full",
            Outcome::DeadlineUnmeetable => "deadline_unmeetable",
            Outcome::ShuttingDown => "shutting_down",
            Outcome::LimitExceeded => "limit_exceeded",
            Outcome::RateLimited => "rate_limited",
            Outcome::Shed => "shed",
            Outcome::Throttled => "throttled",
        }
    }

    /// The rejection this outcome stands for, if it is one.
    pub fn rejection(&self) -> Option<Rejection> {
        Rejection::ALL.into_iter().find(|r| r.outcome() == *self)
    }

    /// The outcome of a job that ran and was judged `verdict`.
    pub(crate) fn of_verdict(verdict: Verdict) -> Outcome {
        match verdict {
            Verdict::Success => Outcome::Successful,
            Verdict::Failure => Outcome::Failed,
            Verdict::Ignore => Outcome::Ignored,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer to a call that did not produce the job's `Ok` value.
///
/// Every call ends in exactly one of these or in `Ok`. `E` is the job's own
/// error type. It is `Clone` when `E` is (a [`Cache`](crate::cache::Cache)
/// hands one shared call's error to every caller that waited for it).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error<E> {
    /// The call was turned away at once; the job never ran.
    Rejected {
        /// Why.
        reason: Rejection,
        /// When trying again could be let through, where the refusing part
        /// knows: the rate limit's wait for its next permit.
        retry_after: Option<Duration>,
    },
    /// No answer came before the deadline: the job, if it had started, is
    /// abandoned to finish on its worker. Also the answer when the deadline
    /// came while the call waited for room or a permit ([a deadline is a
    /// timeout](crate::pool#waiting-for-room-by-time)).
    Timeout {
        /// How long the caller waited, from the call to giving up.
        waited: Duration,
    },
    /// The job ran and returned this error.
    Failed(E),
    /// The job panicked with this message; its worker survived.
    Panicked(String),
}

impl<E> Error<E> {
    /// `true` for [`Error::Rejected`]: the job never ran.
    pub fn is_rejected(&self) -> bool {
        matches!(self, Error::Rejected { .. })
    }

    /// `true` for [`Error::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// The rejection, if the call was rejected.
    pub fn rejection(&self) -> Option<Rejection> {
        if let Error::Rejected { reason, .. } = self { Some(*reason) } else { None }
    }

    /// `true` when trying again may succeed because the provider itself
    /// misbehaved: a timeout, or a job error its [`Classify`](crate::Classify)
    /// calls a failure. Not rejections or ignored errors (a retry would only
    /// add load), nor panics (a bug that would panic again).
    pub fn is_transient(&self) -> bool
    where
        E: crate::Classify,
    {
        match self {
            Error::Rejected { .. } | Error::Panicked(_) => false,
            Error::Timeout { .. } => true,
            Error::Failed(e) => e.classify() == crate::Verdict::Failure,
        }
    }

    /// What the call ended in, for any `E`: the rejection's outcome,
    /// `timed_out`, `panicked`, or `failed` for the job's own error. Use it to
    /// say why a fallback was taken:
    ///
    /// ```
    /// use watertight::{Error, Outcome, Rejection};
    /// let err: Error<std::io::Error> = Rejection::QueueFull.into();
    /// assert_eq!(err.outcome(), Outcome::QueueFull);
    /// assert_eq!(err.outcome().as_str(), "queue_full");
    ///
    /// // A job's error of a type that is not `Classify`: `failed`.
    /// #[derive(Debug)]
    /// struct Declined;
    /// assert_eq!(Error::Failed(Declined).outcome(), Outcome::Failed);
    /// ```
    ///
    /// A job's error is `failed` here whatever a classifier made of it; see
    /// [`classified_outcome`](Self::classified_outcome).
    pub fn outcome(&self) -> Outcome {
        match self {
            Error::Rejected { reason, .. } => reason.outcome(),
            Error::Timeout { .. } => Outcome::TimedOut,
            Error::Failed(_) => Outcome::Failed,
            Error::Panicked(_) => Outcome::Panicked,
        }
    }

    /// The outcome this error is counted under, with the job's error judged
    /// by its [`Classify`](crate::Classify) implementation (`failed`, or
    /// `ignored` for a 4xx); otherwise the same as [`outcome`](Self::outcome).
    ///
    /// ```
    /// use watertight::{Error, Outcome};
    /// let bad_input = std::io::Error::from(std::io::ErrorKind::InvalidInput);
    /// let err: Error<std::io::Error> = Error::Failed(bad_input);
    /// assert_eq!(err.classified_outcome(), Outcome::Ignored);
    /// assert_eq!(err.outcome(), Outcome::Failed);
    /// ```
    ///
    /// A call made with a classifier of its own ([`classify`](crate::CallBuilder::classify))
    /// is counted by that classifier's verdict instead.
    pub fn classified_outcome(&self) -> Outcome
    where
        E: crate::Classify,
    {
        if let Error::Failed(e) = self { Outcome::of_verdict(e.classify()) } else { self.outcome() }
    }

    /// Maps the job's error, keeping every other variant.
    pub fn map_err<F, O: FnOnce(E) -> F>(self, op: O) -> Error<F> {
        match self {
            Error::Rejected { reason, retry_after } => Error::Rejected { reason, retry_after },
            Error::Timeout { waited } => Error::Timeout { waited },
            Error::Failed(e) => Error::Failed(op(e)),
            Error::Panicked(m) => Error::Panicked(m),
        }
    }

    /// The job's own error, if the job ran and failed.
    pub fn into_failed(self) -> Option<E> {
        if let Error::Failed(e) = self { Some(e) } else { None }
    }
}

impl<E> From<Rejection> for Error<E> {
    fn from(reason: Rejection) -> Self {
        Error::Rejected { reason, retry_after: None }
    }
}

/// The reason, in one line, fit to give a user or a log: a job's error is
/// shown with its own `Display`, so `to_string()` says what went wrong.
impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Rejected { reason, retry_after: None } => write!(f, "call rejected: {reason}"),
            Error::Rejected { reason, retry_after: Some(after) } => {
                write!(f, "call rejected: {reason}; try again in {after:?}")
            }
            Error::Timeout { waited } => write!(f, "no answer within the deadline (waited {waited:?})"),
            // The job's error is shown here, so `source()` skips it and goes on to
            // its own cause: an error chain prints each message once.
            Error::Failed(e) => write!(f, "the dependency call failed: {e}"),
            Error::Panicked(msg) => write!(f, "the job panicked: {msg}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Error<E> {
    /// For `Failed(e)`, `e`'s own source: `Display` already says `e`, so a
    /// chain that printed `e` too would say it twice. Every other variant is
    /// shown in full by `Display` and has no further cause.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        if let Error::Failed(e) = self { e.source() } else { None }
    }
}

/// The message of a caught panic: its `&str` or `String` payload, or a fixed
/// text for any other payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// An invalid configuration: a value a builder refused, a configuration
/// that could not be read, a change the registry refused, a fault that does
/// not parse. The crate's one configuration error.
///
/// It names the field, the value it was given, and the rule it broke:
/// `failure_rate must be in (0, 100], got 101`. Read from a file (feature
/// `serde`), it names the path of the field within it instead:
/// `dependencies.fraud.breaker.failure_rate: must be in (0, 100], got 101`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    field: &'static str,
    /// Where: the field as its setter spells it, until a file's path or a
    /// dependency's name takes its place; empty when about no one field.
    path: String,
    rule: Cow<'static, str>,
    /// `None` when the error is a message alone (a file the format could
    /// not read, the capacity rule).
    value: Option<String>,
}

impl ConfigError {
    /// A new error for `field`, which must satisfy `rule` but was `value`.
    pub fn new(field: &'static str, rule: &'static str, value: impl fmt::Display) -> Self {
        let value = Some(value.to_string());
        ConfigError { field, path: field.to_owned(), rule: Cow::Borrowed(rule), value }
    }

    /// `Ok` when `ok`, else [`new`](Self::new)'s error.
    pub(crate) fn check(
        ok: bool,
        field: &'static str,
        rule: &'static str,
        value: impl fmt::Display,
    ) -> Result<(), Self> {
        if ok { Ok(()) } else { Err(Self::new(field, rule, value)) }
    }

    /// An error at `path` (dot-separated; empty when the error is about no
    /// one field) saying `message`: what a file's format could not read.
    pub fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { field: "", path: path.into(), rule: Cow::Owned(message.into()), value: None }
    }

    /// The capacity rule's refusal of `dependency`, which could hold every
    /// request thread left for it: the field `capacity`.
    pub(crate) fn capacity(dependency: &str, message: String) -> Self {
        ConfigError { field: "capacity", ..ConfigError::at(dependency, message) }
    }

    /// The same error, one level down: its path prefixed with `prefix` and a
    /// dot (`breaker.failure_rate` within `dependencies.fraud`).
    pub fn within(mut self, prefix: &str) -> Self {
        self.path = match (prefix.is_empty(), self.path.is_empty()) {
            (true, _) => self.path,
            (false, true) => prefix.to_owned(),
            (false, false) => format!("{prefix}.{}", self.path),
        };
        self
    }

    /// The same error at `path` instead.
    #[cfg(feature = "serde")]
    pub(crate) fn placed(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// The name of the offending field, as its setter spells it; `capacity`
    /// for the capacity rule's refusal
    /// ([`Registry::check_capacity`](crate::Registry::check_capacity)); empty
    /// when about no one field.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// Where the error lies: the field as its setter spells it, the
    /// dot-separated path of a field in a file, or the dependency the
    /// capacity rule refused; empty when the error is about no one field.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The rule the value broke, e.g. `"in (0, 100]"`; or the whole message
    /// when there is no value.
    pub fn rule(&self) -> &str {
        &self.rule
    }

    /// The value that was given, as text; empty when there is none.
    pub fn value(&self) -> &str {
        self.value.as_deref().unwrap_or_default()
    }

    /// What was wrong, without the path: `must be in (0, 100], got 101`.
    pub fn message(&self) -> String {
        match &self.value {
            Some(value) => format!("must be {}, got {value}", self.rule),
            None => self.rule.clone().into_owned(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) if self.path == self.field => {
                write!(f, "{} must be {}, got {value}", self.field, self.rule)
            }
            _ if self.path.is_empty() => f.write_str(&self.message()),
            _ => write!(f, "{}: {}", self.path, self.message()),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_stay_small() {
        // A call's error travels through every caller; keep it to a few words.
        assert!(std::mem::size_of::<Error<()>>() <= 32);
        assert!(std::mem::size_of::<Rejection>() == 1);
    }

    /// A job's error with a cause of its own.
    #[derive(Debug)]
    struct Refused(std::io::Error);

    impl fmt::Display for Refused {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("fraud provider refused the order")
        }
    }

    impl std::error::Error for Refused {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn display_says_the_cause_and_the_chain_says_each_message_once() {
        let err: Error<Refused> = Error::Failed(Refused(std::io::Error::other("connection reset by peer")));
        assert_eq!(err.to_string(), "the dependency call failed: fraud provider refused the order");
        let mut chain = vec![err.to_string()];
        let mut next = std::error::Error::source(&err);
        while let Some(e) = next {
            chain.push(e.to_string());
            next = e.source();
        }
        assert_eq!(chain.len(), 2, "{chain:?}");
        assert_eq!(chain[1], "connection reset by peer");
        assert!(!chain[0].contains(&chain[1]), "{chain:?}");
        // Without a cause of its own, the job's error is the end of the chain.
        let plain: Error<std::io::Error> = Error::Failed(std::io::Error::other("reset"));
        assert_eq!(plain.to_string(), "the dependency call failed: reset");
        assert!(std::error::Error::source(&plain).is_none());
    }

    #[test]
    fn every_rejection_has_its_outcome_and_back() {
        for r in Rejection::ALL {
            assert_eq!(r.outcome().rejection(), Some(r));
            assert_eq!(r.as_str(), r.outcome().as_str());
            assert_eq!(format!("{r:?}"), format!("{:?}", r.outcome()), "the outcome of the same name");
        }
        let rejections = Outcome::ALL.iter().filter(|o| o.rejection().is_some()).count();
        assert_eq!(rejections, Rejection::ALL.len());
        let labels: std::collections::HashSet<_> = Outcome::ALL.iter().map(Outcome::as_str).collect();
        assert_eq!(labels.len(), Outcome::ALL.len(), "labels are unique");
    }

    #[test]
    fn panic_messages_from_str_and_string() {
        let p: Box<dyn Any + Send> = Box::new("boom");
        assert_eq!(panic_message(p.as_ref()), "boom");
        let p: Box<dyn Any + Send> = Box::new(format!("kaboom {}", 7));
        assert_eq!(panic_message(p.as_ref()), "kaboom 7");
        let p: Box<dyn Any + Send> = Box::new(7u8);
        assert_eq!(panic_message(p.as_ref()), "non-string panic payload");
    }
}
