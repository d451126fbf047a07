//! What an outcome means to a breaker: [`Verdict`], the [`Classify`] trait
//! that maps a job's error to one, and the [`Classifier`] of a whole outcome
//! (by default [`ByError`]).
//!
//! The rule: [`dependency`](crate::dependency#what-counts-as-a-failure).

/// How one completed call counts in a breaker's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The provider answered as it should.
    Success,
    /// The provider is unwell: transport error, timeout, 5xx, panic.
    Failure,
    /// Says nothing about the provider's health (a 4xx, a bad request built by
    /// the caller): neither a success nor a failure.
    Ignore,
}

/// Maps an error to a [`Verdict`].
///
/// [`Dependency::call`](crate::Dependency::call) uses it on the job's error
/// when no classifier is given (`Ok` is always a success there). Implemented
/// for:
///
/// | type | verdict |
/// |---|---|
/// | `std::io::Error` | failure, except `ErrorKind::InvalidInput` (built by the caller): ignored |
/// | `ureq::Error` (feature `ureq`) | see [`http`](crate::http)'s outcome table: 5xx, timeouts, I/O and protocol errors are failures; 4xx and request-building errors are ignored |
/// | `String`, `&'static str` | failure |
/// | `Box<dyn std::error::Error + Send + Sync>` | failure |
/// | `std::convert::Infallible` | never happens |
pub trait Classify {
    /// The verdict for this error.
    fn classify(&self) -> Verdict;
}

impl Classify for std::io::Error {
    /// An `InvalidInput` error was built by the caller and says nothing about
    /// the provider: ignored. Every other I/O error is a failure.
    fn classify(&self) -> Verdict {
        if self.kind() == std::io::ErrorKind::InvalidInput { Verdict::Ignore } else { Verdict::Failure }
    }
}

/// Errors that say only that the call failed.
macro_rules! always_a_failure {
    ($($error:ty),*) => {$(
        impl Classify for $error {
            fn classify(&self) -> Verdict {
                Verdict::Failure
            }
        }
    )*};
}
always_a_failure!(String, &'static str, Box<dyn std::error::Error + Send + Sync>);

/// A shared error is judged as the error itself: wrap a job's error that is
/// not `Clone` (`ureq::Error`, `std::io::Error`) in an `Arc` to share one
/// answer among the callers of a [`Cache`](crate::cache::Cache).
impl<E: Classify + ?Sized> Classify for std::sync::Arc<E> {
    fn classify(&self) -> Verdict {
        (**self).classify()
    }
}

impl Classify for std::convert::Infallible {
    fn classify(&self) -> Verdict {
        match *self {}
    }
}

/// What an outcome means to the breaker: a [`Verdict`] for a job's
/// `Result<T, E>`.
///
/// Implemented for [`ByError`] (the default) and for every
/// `Fn(&Result<T, E>) -> Verdict`, so a closure is a classifier:
///
/// ```
/// use watertight::{CallContext, Dependency, Verdict};
///
/// let dep = Dependency::builder("status").workers(1).build()?;
/// // A status code that is not an `Err`: 5xx is the provider failing.
/// let by_status = |r: &Result<u16, std::io::Error>| match r {
///     Ok(s) if *s >= 500 => Verdict::Failure,
///     Ok(s) if *s >= 400 => Verdict::Ignore,
///     Ok(_) => Verdict::Success,
///     Err(_) => Verdict::Failure,
/// };
/// let status = dep.with().classify(by_status).call(|_ctx: &CallContext| Ok(503));
/// assert_eq!(status.unwrap(), 503);
/// assert_eq!(dep.breaker().metrics().failed, 1);
/// # Ok::<(), watertight::ConfigError>(())
/// ```
pub trait Classifier<T, E> {
    /// The verdict on one outcome of the job.
    fn verdict(&self, outcome: &Result<T, E>) -> Verdict;
}

/// The default classifier: `Ok` is a success, an `Err` is judged by its
/// [`Classify`] implementation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByError;

impl<T, E: Classify> Classifier<T, E> for ByError {
    fn verdict(&self, outcome: &Result<T, E>) -> Verdict {
        outcome.as_ref().err().map_or(Verdict::Success, |e| e.classify())
    }
}

impl<T, E, F> Classifier<T, E> for F
where
    F: Fn(&Result<T, E>) -> Verdict,
{
    fn verdict(&self, outcome: &Result<T, E>) -> Verdict {
        self(outcome)
    }
}
