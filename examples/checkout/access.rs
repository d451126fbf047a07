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
//! Answers are cached, allow for 60 s and deny for 10 s, so a user allowed a
//! moment ago keeps working through a short account outage. Failures are never
//! cached: each miss asks again, and access returns as soon as account does.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

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

/// Asks account about a user, to answer by the request's deadline.
type Lookup = dyn Fn(&str, Instant) -> Result<Decision, LookupError> + Send + Sync;

/// The cached, fail-closed access check.
pub struct AccessGate {
    lookup: Box<Lookup>,
    allow_ttl: Duration,
    deny_ttl: Duration,
    /// user id -> (decision, expiry). Only decisions are ever inserted, never
    /// failures. The lock is held for map operations only, never across the
    /// lookup itself, so a slow account call does not serialize the gate.
    cache: Mutex<HashMap<String, (Decision, Instant)>>,
}

/// Entries beyond which expired ones are swept (and, if that is not enough,
/// the cache is emptied): user ids come from a request header, so the cache
/// must not grow without bound.
const MAX_ENTRIES: usize = 100_000;

impl AccessGate {
    /// A gate asking `lookup` on a cache miss, caching an allow for
    /// `allow_ttl` and a deny for `deny_ttl`.
    pub fn new(
        allow_ttl: Duration,
        deny_ttl: Duration,
        lookup: impl Fn(&str, Instant) -> Result<Decision, LookupError> + Send + Sync + 'static,
    ) -> Self {
        AccessGate { lookup: Box::new(lookup), allow_ttl, deny_ttl, cache: Mutex::new(HashMap::new()) }
    }

    /// May `user` use checkout? A cached decision if one is fresh, else
    /// account's answer by `deadline` (then cached). An error means: refuse
    /// with 503.
    pub fn check(&self, user: &str, deadline: Instant) -> Result<Decision, LookupError> {
        let now = Instant::now();
        if let Some(&(decision, expires)) = self.cache.lock().get(user)
            && now < expires
        {
            return Ok(decision);
        }
        // Concurrent misses for one user each ask account; the answers agree,
        // and the dependency's bounded pool caps how many can be in flight.
        match (self.lookup)(user, deadline) {
            Ok(decision) => {
                let ttl = match decision {
                    Decision::Allowed => self.allow_ttl,
                    Decision::Denied => self.deny_ttl,
                };
                let mut cache = self.cache.lock();
                if cache.len() >= MAX_ENTRIES {
                    cache.retain(|_, &mut (_, expires)| expires > now);
                    if cache.len() >= MAX_ENTRIES {
                        cache.clear();
                    }
                }
                cache.insert(user.to_owned(), (decision, Instant::now() + ttl));
                Ok(decision)
            }
            Err(err) => {
                match &err {
                    LookupError::Rejected { status } => log::error!(
                        "access check rejected by account (status {status}): failing closed, check the \
                         internal credentials and URL"
                    ),
                    LookupError::Unavailable(why) => {
                        log::warn!("access check unavailable: failing closed: {why}")
                    }
                }
                Err(err)
            }
        }
    }

    /// Cached decisions (fresh or not yet swept).
    pub fn cached(&self) -> usize {
        self.cache.lock().len()
    }
}
