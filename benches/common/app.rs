//! The server under test: `GET /orders/{id}` from an in-memory store, and
//! `POST /checkout` through a fraud provider, with the blocking calls run where its
//! [`Mode`] says.

use std::collections::HashMap;
use std::io::{self, Read};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tiny_http::{Header, Method, Request, Response, ResponseBox};

use watertight::http::WithDeadline;
use watertight::{
    Classify, Dependency, Verdict,
    breaker::{Breaker, BreakerConfig, State},
};

use super::{FRAUD_DEADLINE, FRAUD_WORKERS, ORDER_BODY, ORDERS, ORDERS_DEADLINE, SHARED_BLOCKING_THREADS};

/// The fraud breaker of `watertight` and `shared_pool`: opens when half of the last
/// ten calls (at least five) failed, probes twice after 5 s.
pub fn fraud_breaker() -> BreakerConfig {
    BreakerConfig::count_based(10)
        .minimum_calls(5)
        .failure_rate(50.0)
        .open_for(Duration::from_secs(5))
        .half_open_calls(2)
}

/// Where the server runs its blocking calls.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// A `Dependency` per dependency; `fraud_queue` is the fraud pool's queue;
    /// `job_deadline`: whether the fraud job hands its deadline to its request.
    Watertight { fraud_queue: usize, job_deadline: bool },
    /// One tokio blocking pool for every blocking call, a breaker in front of fraud,
    /// and the deadlines applied to the wait; `fraud_timeout` is the fraud client's
    /// own bound, if any.
    SharedPool { fraud_timeout: Option<Duration> },
    /// On the request thread; `fraud_timeout` is the fraud client's only bound.
    Direct { fraud_timeout: Option<Duration> },
}

enum Route {
    Watertight { orders: Dependency, fraud: Dependency, job_deadline: bool },
    SharedPool { runtime: tokio::runtime::Runtime, fraud_breaker: Breaker },
    Direct,
}

impl Route {
    fn new(mode: Mode) -> Route {
        match mode {
            Mode::Watertight { fraud_queue, job_deadline } => Route::Watertight {
                job_deadline,
                orders: Dependency::builder("orders-db")
                    .workers(4)
                    .queue(4)
                    .timeout(ORDERS_DEADLINE)
                    .build()
                    .expect("a valid orders-db configuration"),
                fraud: Dependency::builder("fraud")
                    .workers(FRAUD_WORKERS)
                    .queue(fraud_queue)
                    .timeout(FRAUD_DEADLINE)
                    .breaker(fraud_breaker())
                    .build()
                    .expect("a valid fraud configuration"),
            },
            Mode::SharedPool { .. } => Route::SharedPool {
                runtime: tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .max_blocking_threads(SHARED_BLOCKING_THREADS)
                    .thread_name("shared-blocking")
                    .enable_time()
                    .build()
                    .expect("a tokio runtime"),
                fraud_breaker: Breaker::new("fraud", fraud_breaker()).expect("a valid breaker"),
            },
            Mode::Direct { .. } => Route::Direct,
        }
    }
}

pub struct App {
    store: Arc<HashMap<u64, String>>,
    verify_url: String,
    /// The fraud client. In `Watertight` each request gets the call's remaining
    /// deadline as its timeouts; otherwise the agent's own (none, or `fraud_timeout`).
    agent: ureq::Agent,
    route: Route,
}

impl App {
    pub fn new(mode: Mode, fraud_url: &str) -> App {
        let store = (1..=ORDERS)
            .map(|id| (id, format!(r#"{{"id":{id},"status":"shipped","items":2,"total":"42.00"}}"#)))
            .collect();
        let mut agent = ureq::Agent::config_builder();
        if let Mode::Direct { fraud_timeout } | Mode::SharedPool { fraud_timeout } = mode {
            agent = agent.timeout_global(fraud_timeout);
        }
        App {
            store: Arc::new(store),
            verify_url: format!("{fraud_url}/verify"),
            agent: agent.build().into(),
            route: Route::new(mode),
        }
    }

    pub fn handle(&self, request: &mut Request) -> ResponseBox {
        let url = request.url().to_owned();
        match (request.method(), url.as_str()) {
            (Method::Post, "/checkout") => {
                // Drain the (small) body so the connection stays usable for keep-alive.
                let _ = io::copy(&mut request.as_reader().take(64 * 1024), &mut io::sink());
                self.checkout()
            }
            (Method::Get, path) if path.starts_with("/orders/") => self.order(&path["/orders/".len()..]),
            _ => json(404, r#"{"code":"NOT_FOUND"}"#),
        }
    }

    fn order(&self, id: &str) -> ResponseBox {
        let Ok(id) = id.parse::<u64>() else {
            return json(400, r#"{"code":"BAD_ORDER_ID"}"#);
        };
        let store = Arc::clone(&self.store);
        let lookup = move || store.get(&id).cloned();
        let found = match &self.route {
            Route::Watertight { orders, .. } => {
                orders.call(move |_ctx| Ok::<_, io::Error>(lookup())).map_err(|_| ())
            }
            Route::SharedPool { runtime, .. } => {
                shared_call(runtime, ORDERS_DEADLINE, lookup).map_err(|_| ())
            }
            Route::Direct => Ok(lookup()),
        };
        match found {
            Ok(Some(order)) => json(200, &order),
            Ok(None) => json(404, r#"{"code":"NO_SUCH_ORDER"}"#),
            Err(()) => json(503, r#"{"code":"ORDERS_UNAVAILABLE"}"#),
        }
    }

    fn checkout(&self) -> ResponseBox {
        let (agent, url) = (self.agent.clone(), self.verify_url.clone());
        let approved = match &self.route {
            Route::Watertight { fraud, job_deadline, .. } => {
                let job_deadline = *job_deadline;
                fraud
                    .call(move |ctx| {
                        let request = agent.post(&url);
                        let request = if job_deadline { request.with_deadline(ctx) } else { request };
                        request.send(ORDER_BODY)?.body_mut().read_to_string()
                    })
                    .is_ok()
            }
            Route::SharedPool { runtime, fraud_breaker } => {
                checkout_on_shared_pool(runtime, fraud_breaker, agent, url)
            }
            Route::Direct => {
                agent.post(&url).send(ORDER_BODY).and_then(|mut r| r.body_mut().read_to_string()).is_ok()
            }
        };
        if approved {
            json(200, r#"{"decision":"approved"}"#)
        } else {
            // An explicit degradation, never a silent approval.
            json(202, r#"{"decision":"manual_review"}"#)
        }
    }

    pub fn fraud_state(&self) -> Option<State> {
        match &self.route {
            Route::Watertight { fraud, .. } => Some(fraud.breaker().state()),
            Route::SharedPool { fraud_breaker, .. } => Some(fraud_breaker.state()),
            Route::Direct => None,
        }
    }

    /// Stops the pools: the dependencies' workers are joined, the blocking pool's
    /// threads waited for. Returns whether every thread ended within its grace.
    pub fn shutdown(self) -> bool {
        match self.route {
            Route::Watertight { orders, fraud, .. } => {
                let a = orders.shutdown(Duration::from_secs(2));
                let b = fraud.shutdown(Duration::from_secs(2));
                a && b
            }
            Route::SharedPool { runtime, .. } => {
                // Waits for the blocking threads; hung calls were released before.
                runtime.shutdown_timeout(Duration::from_secs(5));
                true
            }
            Route::Direct => true,
        }
    }
}

/// The incident's first fix: the fraud call behind a breaker, on the shared blocking
/// pool, under a time limiter. Returns whether fraud approved in time.
fn checkout_on_shared_pool(
    runtime: &tokio::runtime::Runtime,
    breaker: &Breaker,
    agent: ureq::Agent,
    url: String,
) -> bool {
    let Ok(permit) = breaker.try_acquire() else {
        return false;
    };
    let began = Instant::now();
    let outcome = shared_call(runtime, FRAUD_DEADLINE, move || {
        agent.post(&url).send(ORDER_BODY)?.body_mut().read_to_string()
    });
    let verdict = match &outcome {
        Ok(Ok(_)) => Verdict::Success,
        Ok(Err(e)) => e.classify(),
        Err(_) => Verdict::Failure,
    };
    permit.record(verdict, began.elapsed());
    matches!(outcome, Ok(Ok(_)))
}

/// Runs `job` on the shared blocking pool and waits for it at most `limit`, as a time
/// limiter wraps a future: giving up stops the waiting, not the job, which keeps its
/// thread until it returns by itself.
fn shared_call<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    limit: Duration,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ()> {
    let handle = runtime.spawn_blocking(job);
    // The timer is created inside `block_on`, where the runtime's time driver is.
    match runtime.block_on(async move { tokio::time::timeout(limit, handle).await }) {
        Ok(Ok(value)) => Ok(value),
        // The job panicked, or the limit passed first.
        Ok(Err(_)) | Err(_) => Err(()),
    }
}

fn json(status: u16, body: &str) -> ResponseBox {
    Response::from_string(body)
        .with_status_code(status)
        .with_header(Header::from_bytes("Content-Type", "application/json").expect("a valid header"))
        .boxed()
}
