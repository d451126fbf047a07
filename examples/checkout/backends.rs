//! The calls to the fraud, account and notification providers, in both modes.
//!
//! *Bulkhead* (the default): every call goes through its dependency: breaker,
//! dedicated pool, deadline. The request thread waits at most the deadline,
//! and never more than `workers + queue` request threads wait on one provider.
//! The order notification is fire-and-forget (`Dependency::spawn`): admitted
//! or refused at once, it never holds the request thread; its breaker still
//! sees every outcome, and a failure is logged at `warn`.
//!
//! *Direct* (`--no-bulkhead`): the call runs on the request thread itself
//! with one fixed client timeout (none by default of ureq; the incident had
//! none, or a long one). This is the incident, kept for comparison. The
//! notification, fire-and-forget there too, gets a new thread of its own with
//! the same client timeout and no breaker: nothing bounds those threads, so
//! while notification hangs each checkout leaves one more behind, for up to
//! the client timeout.

use std::borrow::Borrow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;

use crate::access::{Decision, LookupError};
use watertight::cache::Cache;
use watertight::http::WithDeadline;
use watertight::{CallContext, Dependency, Error, Outcome};

/// The fraud provider's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum FraudVerdict {
    /// The order may go through.
    Approve,
    /// The order is refused, for this reason.
    Reject(String),
}

/// Why a provider could not give an answer: the checkout falls back to
/// manual review (fraud) or fails closed (account).
#[derive(Debug, Clone)]
pub struct Unavailable {
    /// A short stable code: an outcome's label ([`Outcome::as_str`]:
    /// `not_permitted`, `queue_full`, `deadline_unmeetable`, `shutting_down`,
    /// `timed_out`, `failed`, `ignored`, `panicked`), or `bad_answer`.
    pub reason: &'static str,
    /// Human-readable detail, for logs.
    pub detail: String,
}

/// The four dependencies of the bulkhead mode.
#[derive(Clone)]
pub struct Deps {
    /// The fraud check (the numbers of the fraud-hang incident's fix).
    pub fraud: Dependency,
    /// Account: "may this user use checkout?" (the authorization path).
    pub access: Dependency,
    /// Account: every other lookup (a profile here). Its own breaker, so a
    /// slow read path cannot open the circuit of the authorization path.
    pub read: Dependency,
    /// Order notifications, sent detached: nobody waits for them.
    pub notification: Dependency,
}

impl Deps {
    /// Every dependency, in registration order.
    pub fn all(&self) -> [&Dependency; 4] {
        [&self.fraud, &self.access, &self.read, &self.notification]
    }
}

/// How provider calls are made.
pub enum Mode {
    /// Through dependencies.
    Bulkhead(Deps),
    /// On the request thread, with the agent's own timeout.
    Direct,
}

/// Outbound calls to fraud and account.
pub struct Backends {
    mode: Mode,
    agent: ureq::Agent,
    fraud_url: String,
    account_url: String,
    notification_url: String,
}

#[derive(Deserialize)]
struct FraudAnswer {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
struct AccessAnswer {
    allowed: bool,
}

/// Applies the call's deadline to a request when there is one (bulkhead mode).
fn bounded<B>(req: ureq::RequestBuilder<B>, ctx: Option<&CallContext>) -> ureq::RequestBuilder<B>
where
    ureq::RequestBuilder<B>: WithDeadline,
{
    match ctx {
        Some(ctx) => req.with_deadline(ctx),
        None => req,
    }
}

impl Backends {
    /// Calls through `mode`. `direct_timeout` is the client timeout of the
    /// direct mode (`None`: wait forever, like the incident); in bulkhead
    /// mode each request's timeouts come from its deadline instead.
    pub fn new(
        mode: Mode,
        fraud_url: String,
        account_url: String,
        notification_url: String,
        direct_timeout: Option<Duration>,
    ) -> Self {
        let config = ureq::Agent::config_builder();
        let config = match mode {
            Mode::Direct => config.timeout_global(direct_timeout),
            Mode::Bulkhead(_) => config,
        };
        let agent = config.build().into();
        Backends { mode, agent, fraud_url, account_url, notification_url }
    }

    /// The dependencies, in bulkhead mode.
    pub fn deps(&self) -> Option<&Deps> {
        match &self.mode {
            Mode::Bulkhead(deps) => Some(deps),
            Mode::Direct => None,
        }
    }

    /// Runs `job` through `pick(deps)` under the request's `deadline` in
    /// bulkhead mode, or right here in direct mode (which, like the
    /// incident, knows no request budget).
    fn run<T, F>(
        &self,
        pick: fn(&Deps) -> &Dependency,
        deadline: Instant,
        job: F,
    ) -> Result<T, Error<ureq::Error>>
    where
        T: Send + 'static,
        F: FnOnce(&ureq::Agent, Option<&CallContext>) -> Result<T, ureq::Error> + Send + 'static,
    {
        let agent = self.agent.clone();
        match &self.mode {
            Mode::Bulkhead(deps) => {
                pick(deps).with().deadline(deadline).call(move |ctx: &CallContext| job(&agent, Some(ctx)))
            }
            Mode::Direct => job(&agent, None).map_err(Error::Failed),
        }
    }

    /// Asks fraud about an order. Never approves on its own: any failure is
    /// an `Unavailable`, which the caller turns into manual review.
    pub fn check_fraud(
        &self,
        customer_id: &str,
        amount: f64,
        deadline: Instant,
    ) -> Result<FraudVerdict, Unavailable> {
        let url = format!("{}/verify", self.fraud_url);
        let body = json!({ "customer_id": customer_id, "amount": amount });
        let answer = self
            .run(
                |d| &d.fraud,
                deadline,
                move |agent, ctx| bounded(agent.post(&url), ctx).send_json(&body)?.body_mut().read_json(),
            )
            .map_err(unavailable)?;
        let FraudAnswer { decision, reason } = answer;
        match decision.as_str() {
            "approve" => Ok(FraudVerdict::Approve),
            "reject" => Ok(FraudVerdict::Reject(reason.unwrap_or_else(|| "rejected by fraud".into()))),
            other => {
                Err(Unavailable { reason: "bad_answer", detail: format!("unknown fraud decision {other:?}") })
            }
        }
    }

    /// Asks account whether `user` may use checkout, through `decisions`
    /// in bulkhead mode (a kept decision, or one call shared by every
    /// concurrent check of the user), on the request thread and every time
    /// in direct mode. `user` is already validated as URL-safe by the route.
    pub fn has_access(
        &self,
        decisions: &Cache<String, Decision>,
        user: &str,
        deadline: Instant,
    ) -> Result<Decision, LookupError> {
        let url = format!("{}/users/{user}/access?service=checkout", self.account_url);
        let agent = self.agent.clone();
        let ask = move |ctx: Option<&CallContext>| -> Result<Decision, ureq::Error> {
            let answer: AccessAnswer = bounded(agent.get(&url), ctx).call()?.body_mut().read_json()?;
            Ok(if answer.allowed { Decision::Allowed } else { Decision::Denied })
        };
        // ureq's error, in an `Arc`: one answer goes to every caller that shared the call.
        let answer = match &self.mode {
            Mode::Bulkhead(deps) => decisions
                .get_or_call(&deps.access, user, deadline, move |ctx: &CallContext| {
                    ask(Some(ctx)).map_err(Arc::new)
                })
                .map(|kept| kept.value),
            Mode::Direct => ask(None).map_err(|e| Error::Failed(Arc::new(e))),
        };
        match answer {
            Ok(decision) => Ok(decision),
            Err(Error::Failed(e)) if matches!(*e, ureq::Error::StatusCode(400..=499)) => {
                let ureq::Error::StatusCode(status) = *e else { unreachable!("matched above") };
                Err(LookupError::Rejected { status })
            }
            Err(err) => {
                let u = unavailable(err);
                Err(LookupError::Unavailable(format!("{}: {}", u.reason, u.detail)))
            }
        }
    }

    /// The user's profile from account (the `account-read` path).
    pub fn profile(&self, user: &str, deadline: Instant) -> Result<serde_json::Value, Unavailable> {
        let url = format!("{}/users/{user}", self.account_url);
        self.run(
            |d| &d.read,
            deadline,
            move |agent, ctx| bounded(agent.get(&url), ctx).call()?.body_mut().read_json(),
        )
        .map_err(unavailable)
    }

    /// Tells notification that `order_id` was placed by `user`, without
    /// waiting: returns at once in both modes. `Err` names why it was not
    /// sent (bulkhead mode: the rejection's label, e.g. `not_permitted` while
    /// the breaker is open, `queue_full` while the provider is slow); once
    /// sent, a failure is logged at `warn` where it happens.
    pub fn notify_order(&self, order_id: &str, user: &str) -> Result<(), &'static str> {
        let url = format!("{}/notify", self.notification_url);
        let body = json!({ "event": "order_placed", "order_id": order_id, "user_id": user });
        let agent = self.agent.clone();
        match &self.mode {
            Mode::Bulkhead(deps) => deps
                .notification
                .spawn(move |ctx: &CallContext| {
                    agent.post(&url).with_deadline(ctx).send_json(&body).map(drop)
                })
                .map_err(|rejection| rejection.as_str()),
            Mode::Direct => {
                let sent = std::thread::Builder::new().name("notify".into()).spawn(move || {
                    if let Err(e) = agent.post(&url).send_json(&body) {
                        log::warn!("notification failed: {e}");
                    }
                });
                sent.map(drop).map_err(|_| "no_thread")
            }
        }
    }
}

/// Names the failure with a stable reason code (for ureq's error, or one
/// shared as an `Arc`).
fn unavailable<E: Borrow<ureq::Error> + watertight::Classify + std::fmt::Display>(
    err: Error<E>,
) -> Unavailable {
    // The crate's outcome labels, so logs, JSON and metrics say one thing one way.
    let reason = match &err {
        Error::Failed(e) if matches!(e.borrow(), ureq::Error::Json(_)) => "bad_answer",
        Error::Failed(e) if matches!(e.borrow(), ureq::Error::Timeout(_)) => Outcome::TimedOut.as_str(),
        other => other.classified_outcome().as_str(),
    };
    let detail = match err {
        Error::Failed(e) => e.borrow().to_string(),
        other => other.to_string(),
    };
    Unavailable { reason, detail }
}
