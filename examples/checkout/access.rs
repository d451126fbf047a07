//! The access gate: may this user use checkout? (it fails closed)
//!
//! Every checkout asks the account service whether the user may use the
//! checkout service, through the `account-access` dependency. The gate fails
//! *closed*: when the question cannot be answered (account unreachable, timed
//! out, 5xx, its breaker open, or even a 4xx that says our own request was
//! wrong), the request is refused with 503 `SERVICE_ACCESS_UNAVAILABLE` and the
//! business code never runs. Only a real "no" is a 403
//! `SERVICE_ACCESS_DENIED`: users and operators must be able to tell "you may
//! not" from "we cannot check right now".
//!
//! Decisions are kept in a [`Cache`]: allow for 60 s, deny for 10 s, so a
//! user allowed a moment ago keeps working through a short account outage.
//! Concurrent checks of one user share one call to account. Failures are
//! never kept: each miss asks again, and access returns as soon as account
//! does. And the last good decision is never served once it has expired: on
//! failure, "unknown" here would mean "permissions wide open".

use std::time::{Duration, Instant};

use watertight::ConfigError;
use watertight::cache::Cache;

/// What account said about a user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The user may use checkout.
    Allowed,
    /// The user may not (a real denial, cached for a short while).
    Denied,
}

/// Why the question could not be answered. Every variant is a 503 to the
/// client; they differ in how loudly they are logged.
#[derive(Debug)]
pub enum LookupError {
    /// Account is down, slow, answering 5xx, or its breaker is open or its
    /// pool full: an outage, logged as a warning.
    Unavailable(String),
    /// Account refused *our* request (a 4xx: an expired internal secret, a
    /// wrong URL). Not an outage but a configuration error that would lock
    /// every user out, so it is logged as an error.
    Rejected {
        /// The 4xx status account answered.
        status: u16,
    },
}

impl std::fmt::Display for LookupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LookupError::Unavailable(why) => write!(f, "account unavailable: {why}"),
            LookupError::Rejected { status } => write!(f, "account rejected the access check with {status}"),
        }
    }
}

/// The decisions kept: user ids come from a request header, so the cache is
/// bounded (the least useful entries are evicted beyond this).
const MAX_ENTRIES: usize = 100_000;

/// Checks waiting on account at once, all users together: account-access's
/// hold in the capacity rule (4 workers, no queue), so that checks of one
/// user while account hangs hold no more request threads than its pool
/// would. The others wait for a seat as long as a call waits for room in
/// account-access's pool (its `max_wait`, 100 ms), then are refused (503).
const MAX_WAITING: usize = 4;

/// The gate's cache: allow 60 s, deny 10 s, failures never, stale never.
pub fn decisions() -> Result<Cache<String, Decision>, ConfigError> {
    Cache::builder("access")
        .capacity(MAX_ENTRIES)
        .max_waiting(MAX_WAITING)
        .ttl(|decision: &Decision| match decision {
            Decision::Allowed => Duration::from_secs(60),
            Decision::Denied => Duration::from_secs(10),
        })
        .build()
}

/// Asks account about a user through the cache, to answer by the request's deadline.
type Lookup = dyn Fn(&Cache<String, Decision>, &str, Instant) -> Result<Decision, LookupError> + Send + Sync;

/// The cached, fail-closed access check.
pub struct AccessGate {
    decisions: Cache<String, Decision>,
    lookup: Box<Lookup>,
}

impl AccessGate {
    /// A gate keeping `decisions`, asking `lookup` through them.
    pub fn new(
        decisions: Cache<String, Decision>,
        lookup: impl Fn(&Cache<String, Decision>, &str, Instant) -> Result<Decision, LookupError>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        AccessGate { decisions, lookup: Box::new(lookup) }
    }

    /// May `user` use checkout? A kept decision, else account's answer by
    /// `deadline`. An error means: refuse with 503.
    pub fn check(&self, user: &str, deadline: Instant) -> Result<Decision, LookupError> {
        let answer = (self.lookup)(&self.decisions, user, deadline);
        match &answer {
            Err(LookupError::Rejected { status }) => log::error!(
                "access check rejected by account (status {status}): failing closed, check the internal \
                 credentials and URL"
            ),
            Err(LookupError::Unavailable(why)) => {
                log::warn!("access check unavailable: failing closed: {why}")
            }
            Ok(_) => {}
        }
        answer
    }

    /// The decisions kept, for the registry (metrics, `/circuits`).
    pub fn decisions(&self) -> &Cache<String, Decision> {
        &self.decisions
    }
}
