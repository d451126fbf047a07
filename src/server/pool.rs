//! The request threads: each takes the next request (from the guard, in
//! process, or from tiny_http reading the clients itself), lets it wait for
//! an ordinary thread or refuses it if it must, calls the handler, and sends
//! its answer.
//!
//! The request threads are the seats of a [`Room`] whose line holds waiting
//! requests, not threads. A request a thread takes from tiny_http (or the
//! guard) is classified before its handler runs, and enters the room
//! ([`Room::enter`]): a reserved request always finds a seat (this thread is
//! free, so fewer seats than threads are held), an ordinary one while the
//! ordinary share has one free. An ordinary request that finds none waits in
//! the room's line by its admission by time, else is refused (`503`); its
//! thread goes back for the next request (which may be a reserved one), so a
//! waiting request holds no thread. The thread that finishes a request hands
//! its seat on ([`Room::pass`]) and takes the oldest waiting request with a
//! seat for it, answering first the waiting requests whose wait has ended
//! (`503`). An idle thread does the same ([`Room::sweep`]) each time it has
//! waited a while for a new request, so a waiting request is answered by its
//! deadline even while every ordinary thread is held.
//!
//! A reserve in shadow (`Reserve::shadow`) decides the same, and where it
//! would keep an ordinary request waiting (or refuse it) while a reserved
//! thread is free, the request takes that thread, counted (`Tally::shadowed`):
//! with its line empty, as with no reserve.

use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use tiny_http::{Request, ResponseBox, Server};

use super::config::{CompiledReserve, ServerConfig};
use super::gate::Tally;
use super::proxy::TrustedProxies;
use super::reply::{Reply, internal_error, json_error};
use super::request::{self, Arrival, RequestContext};
use crate::error::panic_message;
use crate::room::{Admission, Handoff, NoSeat, Room, Seat};

pub(super) type Handler = Box<dyn Fn(&mut Request, &RequestContext) -> ResponseBox + Send + Sync>;

/// A request the guard hands the request pool: tiny_http's request (for one
/// that crossed the hop, set once tiny_http has parsed it), what the guard
/// knows of it, and where its answer goes.
pub(super) struct Incoming {
    pub(super) request: Option<Request>,
    pub(super) arrival: Arrival,
    pub(super) reply: Reply,
}

/// What a request thread of a guarded pool takes next.
pub(super) enum Handed {
    Request(Box<Incoming>),
    /// Exit (one per thread, after every request already handed).
    Stop,
}

/// Where a pool's requests come from.
pub(super) enum Source {
    /// From the guard, in process; the sender is kept to wake the threads
    /// at the stop.
    Guard { rx: Receiver<Handed>, tx: Sender<Handed> },
    /// From tiny_http reading the clients itself.
    Clients(Server),
}

impl Source {
    /// A source fed by the guard, and the guard's side of it.
    pub(super) fn guard() -> (Source, Sender<Handed>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (Source::Guard { rx, tx: tx.clone() }, tx)
    }
}

pub(super) struct Shared {
    source: Source,
    /// The request threads as seats (class 0 ordinary, keeping the
    /// reserve's; class 1 reserved), whose line holds waiting requests: a
    /// request holds a seat from when a thread takes it to its answer sent.
    pub(super) room: Room<Taken>,
    /// Every other count, for the gauges.
    pub(super) counts: Tally,
    /// Set before the stop wakes the threads. A thread that sees tiny_http's
    /// `recv` fail checks it: set means exit, clear means an accept error.
    stopping: AtomicBool,
    handler: Handler,
    /// Each request's time budget.
    budget: Duration,
    /// Believed to stand for other clients (read here without the guard).
    proxies: TrustedProxies,
    /// How often an idle thread looks for waiting requests whose wait ended.
    sweep_every: Duration,
    /// The reserved share, if any, with its routes parsed.
    pub(super) reserve: Option<CompiledReserve>,
}

/// A request taken and classified.
pub(super) struct Taken {
    request: Request,
    arrival: Arrival,
    /// `None` without the guard: tiny_http answers its own request.
    reply: Option<Reply>,
    /// Whether it is of the reserved share.
    reserved: bool,
}

type Spawn = fn(usize, Arc<Shared>) -> io::Result<JoinHandle<()>>;

pub(super) fn spawn_named(i: usize, shared: Arc<Shared>) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(format!("watertight-http-{i}")).spawn(move || shared.run())
}

/// How long a waiting request may wait: it holds no thread here, so its
/// budget bounds its wait when `max_wait` is shorter, and 0 still refuses at
/// once.
pub(super) fn max_wait(config: &ServerConfig) -> Duration {
    match config.max_wait() {
        Duration::ZERO => Duration::ZERO,
        wait => wait.max(config.request_budget().min(Duration::from_secs(60))),
    }
}

/// Starts a request thread for each seat of `room`; if one cannot be
/// started, stops those that were and returns the error.
pub(super) fn start(
    source: Source,
    room: Room<Taken>,
    counts: Tally,
    config: &ServerConfig,
    handler: Handler,
    spawn: Spawn,
) -> io::Result<(Arc<Shared>, Vec<JoinHandle<()>>)> {
    let threads = room.limit();
    let shared = Arc::new(Shared {
        source,
        room,
        counts,
        stopping: AtomicBool::new(false),
        handler,
        budget: config.request_budget(),
        proxies: config.trusted_proxies().clone(),
        sweep_every: match config.max_wait() {
            Duration::ZERO => Duration::from_secs(1),
            wait => wait.max(Duration::from_millis(10)),
        },
        reserve: config.compiled_reserve().cloned(),
    });
    let mut joins = Vec::with_capacity(threads);
    for i in 0..threads {
        match spawn(i, Arc::clone(&shared)) {
            Ok(join) => joins.push(join),
            Err(e) => {
                log::error!("request pool: cannot start thread {i} of {threads}: {e}");
                stop(&shared, &mut joins);
                return Err(e);
            }
        }
    }
    Ok((shared, joins))
}

/// Wakes and joins `joins`, the threads serving `shared`.
pub(super) fn stop(shared: &Shared, joins: &mut Vec<JoinHandle<()>>) {
    // Publish `stopping` before any wake-up, so that a thread woken sees it
    // (Release here pairs with the Acquire in `take`).
    shared.stopping.store(true, Ordering::Release);
    // One wake-up per thread, each consumed by exactly one thread, which
    // exits on it. They queue behind requests already received, which are
    // answered first.
    for _ in 0..joins.len() {
        match &shared.source {
            Source::Guard { tx, .. } => {
                let _ = tx.send(Handed::Stop);
            }
            Source::Clients(server) => server.unblock(),
        }
    }
    for join in joins.drain(..) {
        // The loop catches handler panics, so a thread cannot end in one.
        let _ = join.join();
    }
}

impl Shared {
    pub(super) fn server_addr(&self) -> Option<tiny_http::ListenAddr> {
        match &self.source {
            Source::Clients(server) => Some(server.server_addr()),
            Source::Guard { .. } => None,
        }
    }

    fn run(&self) {
        let mut next = None;
        loop {
            let (taken, seat) = match next.take() {
                Some(taken) => taken,
                None => match self.take() {
                    Some(taken) => taken,
                    None => return,
                },
            };
            self.answer(taken);
            next = self.refuse_expired(self.room.pass(seat, self.counts.or_class(false)));
        }
    }

    /// For an idle thread: the waiting requests whose wait ended answered,
    /// and the oldest other one with a seat free for it, if any.
    fn sweep(&self) -> Option<(Taken, Seat<Taken>)> {
        self.refuse_expired(self.room.sweep(self.counts.or_class(false)))
    }

    /// Answers `503` to the waiting requests whose wait ended; the request
    /// to handle next, if any.
    fn refuse_expired(&self, next: Handoff<Taken>) -> Option<(Taken, Seat<Taken>)> {
        for (taken, why) in next.expired {
            self.refuse(taken, why);
        }
        let (taken, seat) = next.run?;
        self.counts.shadowed(taken.reserved, &seat);
        Some((taken, seat))
    }

    /// Answers an ordinary request that could not have a thread `503`,
    /// counted by reason (and logged at most once a second).
    fn refuse(&self, taken: Taken, why: NoSeat) {
        self.counts.refuse(why);
        let busy = json_error(503, "SERVER_BUSY", "every ordinary request thread is busy, try again later");
        self.send(taken.request, taken.reply, busy);
    }

    /// The next request that this (free) thread may handle, with its seat;
    /// ordinary requests it may not handle are left waiting for an ordinary
    /// thread, or refused. `None` once the pool is stopping.
    fn take(&self) -> Option<(Taken, Seat<Taken>)> {
        loop {
            let (request, arrival, reply) = match &self.source {
                Source::Guard { rx, .. } => match rx.recv_timeout(self.sweep_every) {
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => match self.sweep() {
                        Some(next) => return Some(next),
                        None => continue,
                    },
                    Ok(Handed::Request(incoming)) => {
                        let incoming = *incoming;
                        // The hop sets it before it hands the request on.
                        let Some(request) = incoming.request else { continue };
                        (request, incoming.arrival, Some(incoming.reply))
                    }
                    Ok(Handed::Stop) | Err(_) => return self.leave(),
                },
                Source::Clients(server) => match server.recv_timeout(self.sweep_every) {
                    // `unblock` wakes `recv_timeout` as a timeout would: one
                    // wake-up per call, consumed by exactly one thread.
                    Ok(None) if self.stopping.load(Ordering::Acquire) => return self.leave(),
                    Ok(None) => match self.sweep() {
                        Some(next) => return Some(next),
                        None => continue,
                    },
                    Ok(Some(request)) => {
                        let arrival = unguarded_arrival(&request, &self.proxies);
                        (request, arrival, None)
                    }
                    Err(err) => {
                        if self.stopping.load(Ordering::Acquire) {
                            return self.leave();
                        }
                        log::warn!("request pool: receiving a request failed: {err}");
                        continue;
                    }
                },
            };
            let reserved = self.reserve.as_ref().is_some_and(|r| r.share.takes(&r.routes, &request));
            let deadline = crate::time::deadline_after(arrival.received, self.budget);
            // Straight from tiny_http, a body past 1 KiB (and not chunked) is
            // read on the handler's thread, and to its end when the request
            // is answered; the guard hands on bodies it has read.
            let patient =
                matches!(self.source, Source::Clients(_)) && request.body_length().is_some_and(|n| n > 1024);
            let taken = Taken { request, arrival, reply, reserved };
            let or_class = self.counts.or_class(reserved);
            match self.room.enter(usize::from(reserved), taken, deadline, patient, or_class) {
                Admission::Run(taken, seat) => {
                    self.counts.shadowed(reserved, &seat);
                    return Some((taken, seat));
                }
                Admission::Waits => {}
                Admission::Refused(taken, why) => self.refuse(taken, why),
            }
        }
    }

    /// A thread leaving a stopping pool answers the requests still waiting
    /// for an ordinary thread (`503`, not counted as refused): none is left
    /// without an answer. `None`, for [`take`](Self::take) to return.
    fn leave(&self) -> Option<(Taken, Seat<Taken>)> {
        for taken in self.room.drain() {
            let stopping = json_error(503, "SERVER_STOPPING", "the server is shutting down");
            self.send(taken.request, taken.reply, stopping);
        }
        None
    }

    /// Calls the handler on `taken` and sends its answer. Never panics: the
    /// room must see the request finish.
    fn answer(&self, taken: Taken) {
        let Taken { mut request, arrival, reply, reserved } = taken;
        let asked = request
            .headers()
            .iter()
            .find(|h| h.field.equiv(request::TIMEOUT_HEADER))
            .map(|h| h.value.as_str());
        let busy = self.counts.gauges.busy();
        let context = request::context(asked, arrival, self.budget, busy, self.room.limit(), reserved);
        let response = match context {
            Ok(ctx) => match catch_unwind(AssertUnwindSafe(|| (self.handler)(&mut request, &ctx))) {
                Ok(response) => response,
                Err(payload) => {
                    let msg = panic_message(&*payload);
                    log::error!("request handler panicked on {} {}: {msg}", request.method(), request.url());
                    internal_error()
                }
            },
            Err(message) => json_error(400, "INVALID_REQUEST_TIMEOUT", &message),
        };
        self.send(request, reply, response);
    }

    /// Sends `response` to `request`, through the guard's `reply` if any.
    fn send(&self, request: Request, reply: Option<Reply>, response: ResponseBox) {
        match reply {
            // Catches a panic of the response's body itself (see `Reply::send`).
            Some(reply) => reply.send(request, response),
            None => {
                // The response's body is the handler's code too, read while
                // it is sent: a panic there is caught as the handler's is.
                match catch_unwind(AssertUnwindSafe(move || request.respond(response))) {
                    // A client that went away is not the server's error.
                    Ok(Err(err)) => log::debug!("request pool: sending a response failed: {err}"),
                    Ok(Ok(())) => {}
                    Err(payload) => {
                        let msg = panic_message(&*payload);
                        log::error!("request pool: a response body panicked while it was sent: {msg}");
                    }
                }
            }
        }
    }
}

/// The arrival of a request straight from a client: now, from its TCP peer,
/// through `proxies`.
pub(super) fn unguarded_arrival(request: &Request, proxies: &TrustedProxies) -> Arrival {
    let peer = request.remote_addr().copied();
    let headers = request.headers().iter().map(|h| (h.field.as_str().as_str(), h.value.as_str()));
    Arrival { received: Instant::now(), peer, client: proxies.resolve(peer, headers) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiny_http::Response;

    use std::sync::atomic::AtomicUsize;

    static EXITED: AtomicUsize = AtomicUsize::new(0);

    /// Starts two threads, then fails as an OS out of threads would.
    fn two_then_refuse(i: usize, shared: Arc<Shared>) -> io::Result<JoinHandle<()>> {
        if i >= 2 {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "Resource temporarily unavailable"));
        }
        std::thread::Builder::new().spawn(move || {
            shared.run();
            EXITED.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[test]
    fn a_failed_spawn_stops_the_threads_already_started_and_returns_the_error() {
        let server = Server::http("127.0.0.1:0").expect("bind a loopback port");
        let handler: Handler =
            Box::new(|_req: &mut Request, _: &RequestContext| Response::from_string("x").boxed());
        let config = ServerConfig::default();
        let source = Source::Clients(server);
        let (room, counts, _) = super::super::gate::open(&config, 4, max_wait(&config)).unwrap();
        let err =
            start(source, room, counts, &config, handler, two_then_refuse).err().expect("the spawn error");
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        // Both started threads were joined before the error came back.
        assert_eq!(EXITED.load(Ordering::SeqCst), 2);
    }
}
