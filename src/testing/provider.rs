//! [`FakeProvider`]: the listening side, its switches and its counters.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::{Call, Fault};

pub(super) type Responder = dyn Fn(&Call) -> (u16, String) + Send + Sync;

/// A fake HTTP provider on `127.0.0.1`. Dropping it stops it and releases every
/// held request.
pub struct FakeProvider {
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

pub(super) struct Shared {
    pub(super) name: String,
    pub(super) addr: SocketAddr,
    pub(super) responder: Box<Responder>,
    pub(super) state: Mutex<State>,
    /// Notified on every change of `State`: a fault set, the port closed or
    /// reopened, the provider stopped. Hung and slow handlers, a refusing acceptor
    /// and `set_fault` itself wait on it.
    pub(super) changed: Condvar,
    pub(super) hits: AtomicU64,
    pub(super) in_flight: AtomicUsize,
    /// Held requests whose client closed the connection while they were held.
    pub(super) clients_gone: AtomicU64,
    /// Whether a held request ends as soon as its client has left.
    pub(super) release_on_close: AtomicBool,
}

pub(super) struct State {
    /// The standing fault: applies once `script` is empty.
    pub(super) fault: Fault,
    /// One-shot faults, one consumed per request.
    pub(super) script: VecDeque<Fault>,
    /// Bumped by every `set_fault`; a waiting handler compares it with the value it
    /// started with to learn that the fault changed.
    pub(super) generation: u64,
    /// Whether the acceptor holds a bound listener. Only the acceptor writes it, and
    /// only after the listener is bound or closed, so a `set_fault` that waits for it
    /// returns when the new fault already holds for the next connection.
    pub(super) listening: bool,
    pub(super) stopped: bool,
    /// Requests being served under `saturated` (not those waiting their turn).
    pub(super) serving: usize,
}

impl FakeProvider {
    /// Starts a provider named `name` (used for thread names) on a free loopback
    /// port. `responder` makes the `healthy`, `slow` and `trickle` answers.
    pub fn start(
        name: &str,
        fault: Fault,
        responder: impl Fn(&Call) -> (u16, String) + Send + Sync + 'static,
    ) -> io::Result<FakeProvider> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            addr: listener.local_addr()?,
            responder: Box::new(responder),
            state: Mutex::new(State {
                fault,
                script: VecDeque::new(),
                generation: 0,
                listening: fault != Fault::Refuse,
                stopped: false,
                serving: 0,
            }),
            changed: Condvar::new(),
            hits: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            clients_gone: AtomicU64::new(0),
            release_on_close: AtomicBool::new(false),
        });
        // Starting as `refuse`: the port is reserved by the bind above, then released.
        let listener = (fault != Fault::Refuse).then_some(listener);
        let acceptor = thread::Builder::new().name(format!("fake-{name}-accept")).spawn({
            let shared = Arc::clone(&shared);
            move || shared.accept_loop(listener)
        })?;
        Ok(FakeProvider { shared, acceptor: Some(acceptor) })
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The base URL, `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The loopback address it listens on (while not refusing).
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Sets the standing fault. Held and slow requests are released at once (a hung
    /// one is closed, a slow one answered). When this returns, the next connection
    /// already meets the new fault: switching to or from `refuse` waits (at most 2 s)
    /// for the port to be closed or reopened.
    pub fn set_fault(&self, fault: Fault) {
        let shared = &self.shared;
        let mut st = shared.lock();
        st.fault = fault;
        st.generation += 1;
        shared.changed.notify_all();
        let listen = fault != Fault::Refuse;
        if st.listening && !listen {
            // The acceptor is blocked in `accept`: a connection wakes it, and it then
            // sees `refuse` and closes the listener.
            drop(st);
            shared.wake_acceptor();
            st = shared.lock();
        }
        let give_up = Instant::now() + Duration::from_secs(2);
        while st.listening != listen && !st.stopped {
            let Some(left) = give_up.checked_duration_since(Instant::now()) else { break };
            st = shared.changed.wait_timeout(st, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// The standing fault.
    pub fn fault(&self) -> Fault {
        self.shared.lock().fault
    }

    /// Queues one-shot faults, consumed one per request before the standing fault
    /// applies again: `script([Fault::Error(503)])` fails the next request only. A
    /// scripted `refuse` drops its connection unread, so the client sees a reset, and
    /// is not counted as a hit (the port is open: this is the nearest a single request
    /// gets to being refused).
    pub fn script(&self, faults: impl IntoIterator<Item = Fault>) {
        self.shared.lock().script.extend(faults);
    }

    /// Requests that reached the provider, whatever it answered. Refused connections,
    /// and connections that closed before sending a byte, do not count.
    pub fn hits(&self) -> u64 {
        self.shared.hits.load(Ordering::SeqCst)
    }

    /// Requests being handled right now, hung ones included.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// Held requests (`hang`, `slow`) whose client closed its connection while they
    /// were held: the client gave up, and its socket really was closed. Seen within
    /// about 25 ms of the close.
    pub fn clients_gone(&self) -> u64 {
        self.shared.clients_gone.load(Ordering::SeqCst)
    }

    /// Whether a held request (`hang`, `slow`) ends, unanswered, as soon as its client
    /// closes the connection. Default `false`: like a truly stuck server, a hung
    /// request holds its thread whatever the client does (it is still counted in
    /// [`clients_gone`](Self::clients_gone)). Turn it on to keep a long run against a
    /// hung provider from piling up the provider's own threads.
    pub fn release_on_client_close(&self, on: bool) {
        self.shared.release_on_close.store(on, Ordering::SeqCst);
    }
}

impl fmt::Debug for FakeProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeProvider")
            .field("name", &self.shared.name)
            .field("addr", &self.shared.addr)
            .field("fault", &self.fault())
            .field("hits", &self.hits())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        let listening = {
            let mut st = self.shared.lock();
            st.stopped = true;
            // Every held handler wakes, sees `stopped` and closes its connection.
            self.shared.changed.notify_all();
            st.listening
        };
        // Join the acceptor only when it is sure to return: it waits on the condvar
        // (not listening) or has just been woken from `accept`.
        if (!listening || self.shared.wake_acceptor())
            && let Some(acceptor) = self.acceptor.take()
        {
            let _ = acceptor.join();
        }
    }
}
