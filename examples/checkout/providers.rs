//! Scriptable fake HTTP providers on loopback, for the checkout demo and the tests.
//!
//! A [`FakeProvider`] listens on `127.0.0.1:<free port>` and handles every request on
//! its own thread, so a hung request holds only itself. How it answers is its
//! [`Fault`], switchable at any time ([`FakeProvider::set_fault`]) and scriptable one
//! request at a time ([`FakeProvider::script`]):
//!
//! | fault          | what the client sees                                                   |
//! |----------------|------------------------------------------------------------------------|
//! | `healthy`      | the responder's status and body                                        |
//! | `slow:<ms>`    | the same, `<ms>` milliseconds later                                    |
//! | `hang`         | nothing: the request is read and never answered; the connection closes |
//! |                | when the fault changes, the provider is dropped, or after 60 s         |
//! |                | (or when the client leaves: see [`FakeProvider::release_on_client_close`]) |
//! | `error:<code>` | status `<code>` with a small JSON body (the responder is not asked)    |
//! | `refuse`       | "connection refused": nothing listens on the port any more             |
//! | `reset`        | the connection is reset (TCP RST) before any answer                    |
//! | `garbage`      | bytes that are not HTTP, then the connection closes                    |
//! | `trickle:<ms>` | a valid answer, one byte every `<ms>` milliseconds                     |
//! | `close`        | the request is read, then the connection closes with no answer         |
//! | `cut`          | a `200` head announcing a body, half of that body, then a TCP RST      |
//!
//! It speaks just enough HTTP/1.1 over `std::net` (request line, headers, a
//! `Content-Length` or chunked body; every answer says `Connection: close`, so each
//! request gets its own connection and the fault in force when it arrives). tiny_http
//! is not used here because a fault must act on the raw socket and on the very next
//! request: tiny_http 0.12 can neither reset nor close a connection without answering,
//! it drops a `Connection` response header, and a kept-alive connection outlives its
//! server, so a pooled client would hang instead of being refused.
#![allow(dead_code)] // the demo and the tests each use a different part of this module

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// The longest a `hang` holds a request.
const HANG_CAP: Duration = Duration::from_secs(60);
/// A client that stops sending (or reading) cannot hold a handler longer than this.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a request (head and body) may carry.
const MAX_REQUEST: u64 = 1 << 20;
/// How often a held (hung or slow) request looks whether its client has left.
const WATCH_EVERY: Duration = Duration::from_millis(25);

/// How a provider answers a request. See the [module docs](self) for each mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answers with the responder's status and body.
    Healthy,
    /// Answers like `Healthy`, after this long.
    Slow(Duration),
    /// Never answers.
    Hang,
    /// Answers with this status code.
    Error(u16),
    /// Refuses connections.
    Refuse,
    /// Resets the connection.
    Reset,
    /// Answers with bytes that are not HTTP.
    Garbage,
    /// Answers like `Healthy`, one byte per this period.
    Trickle(Duration),
    /// Closes the connection without an answer.
    Close,
    /// Answers a head and part of the body, then resets the connection.
    Cut,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Healthy => f.write_str("healthy"),
            Fault::Slow(d) => write!(f, "slow:{}", d.as_millis()),
            Fault::Hang => f.write_str("hang"),
            Fault::Error(code) => write!(f, "error:{code}"),
            Fault::Refuse => f.write_str("refuse"),
            Fault::Reset => f.write_str("reset"),
            Fault::Garbage => f.write_str("garbage"),
            Fault::Trickle(d) => write!(f, "trickle:{}", d.as_millis()),
            Fault::Close => f.write_str("close"),
            Fault::Cut => f.write_str("cut"),
        }
    }
}

impl FromStr for Fault {
    type Err = ParseFaultError;

    /// Parses the forms `Display` writes; case and surrounding blanks do not matter.
    fn from_str(input: &str) -> Result<Fault, ParseFaultError> {
        let text = input.trim().to_ascii_lowercase();
        let (kind, arg) = match text.split_once(':') {
            Some((kind, arg)) => (kind, Some(arg.trim())),
            None => (text.as_str(), None),
        };
        // Capped at the hang cap: a longer fault means the same, and an absurd one
        // must not overflow an `Instant` later.
        let millis = || arg?.parse().ok().map(|ms| Duration::from_millis(ms).min(HANG_CAP));
        let fault = match (kind, arg) {
            ("healthy", None) => Some(Fault::Healthy),
            ("slow", Some(_)) => millis().map(Fault::Slow),
            ("hang", None) => Some(Fault::Hang),
            ("error", Some(code)) => code.parse().ok().filter(|c| (100..=599).contains(c)).map(Fault::Error),
            ("refuse", None) => Some(Fault::Refuse),
            ("reset", None) => Some(Fault::Reset),
            ("garbage", None) => Some(Fault::Garbage),
            ("trickle", Some(_)) => millis().map(Fault::Trickle),
            ("close", None) => Some(Fault::Close),
            ("cut", None) => Some(Fault::Cut),
            _ => None,
        };
        fault.ok_or_else(|| ParseFaultError(input.to_owned()))
    }
}

/// A text that names no [`Fault`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseFaultError(String);

impl fmt::Display for ParseFaultError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown fault {:?}: expected healthy, slow:<ms>, hang, error:<status 100-599>, \
             refuse, reset, garbage, trickle:<ms>, close or cut",
            self.0
        )
    }
}

impl std::error::Error for ParseFaultError {}

/// One request as the responder sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The request target: path and query, e.g. `/verify?fast=1`.
    pub url: String,
    /// The request body (lossy UTF-8).
    pub body: String,
}

type Responder = dyn Fn(&Call) -> (u16, String) + Send + Sync;

/// A fake HTTP provider on `127.0.0.1`. Dropping it stops it and releases every
/// held request.
pub struct FakeProvider {
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

struct Shared {
    name: String,
    addr: SocketAddr,
    responder: Box<Responder>,
    state: Mutex<State>,
    /// Notified on every change of `State`: a fault set, the port closed or
    /// reopened, the provider stopped. Hung and slow handlers, a refusing acceptor
    /// and `set_fault` itself wait on it.
    changed: Condvar,
    hits: AtomicU64,
    in_flight: AtomicUsize,
    /// Held requests whose client closed the connection while they were held.
    clients_gone: AtomicU64,
    /// Whether a held request ends as soon as its client has left.
    release_on_close: AtomicBool,
}

struct State {
    /// The standing fault: applies once `script` is empty.
    fault: Fault,
    /// One-shot faults, one consumed per request.
    script: VecDeque<Fault>,
    /// Bumped by every `set_fault`; a waiting handler compares it with the value it
    /// started with to learn that the fault changed.
    generation: u64,
    /// Whether the acceptor holds a bound listener. Only the acceptor writes it, and
    /// only after the listener is bound or closed, so a `set_fault` that waits for it
    /// returns when the new fault already holds for the next connection.
    listening: bool,
    stopped: bool,
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

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A responder that panics does so outside the lock; never poisoned in practice.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Unblocks an `accept` with a throwaway connection. It sends no byte, so it is
    /// never counted as a request.
    fn wake_acceptor(&self) -> bool {
        TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)).is_ok()
    }

    /// Owns the port: accepts while the fault is not `refuse`, holds nothing bound
    /// while it is, and hands every connection to a thread of its own.
    fn accept_loop(self: Arc<Self>, mut listener: Option<TcpListener>) {
        loop {
            let Some(bound) = listener.as_ref() else {
                let mut st = self.lock();
                while st.fault == Fault::Refuse && !st.stopped {
                    st = self.changed.wait(st).unwrap_or_else(PoisonError::into_inner);
                }
                if st.stopped {
                    return;
                }
                drop(st);
                listener = self.rebind();
                continue;
            };
            let accepted = bound.accept();
            let mut st = self.lock();
            if st.stopped || st.fault == Fault::Refuse {
                // Woken by `set_fault(refuse)` or by `drop`. Close the port before
                // saying so: whoever waits on `listening` relies on that order.
                listener = None;
                st.listening = false;
                self.changed.notify_all();
                if st.stopped {
                    return;
                }
                continue;
            }
            drop(st);
            match accepted {
                Ok((stream, _)) => {
                    let shared = Arc::clone(&self);
                    let spawned = thread::Builder::new()
                        .name(format!("fake-{}", self.name))
                        .spawn(move || shared.handle(stream));
                    if let Err(e) = spawned {
                        eprintln!("fake provider {}: no thread for a request: {e}", self.name);
                    }
                }
                // Out of file descriptors and the like: pause instead of spinning.
                Err(_) => thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    /// Binds the port again after `refuse`. Retries briefly while the port is taken
    /// (it was ours a moment ago); gives up if the fault goes back to `refuse` or the
    /// provider stops.
    fn rebind(&self) -> Option<TcpListener> {
        loop {
            match TcpListener::bind(self.addr) {
                Ok(listener) => {
                    self.lock().listening = true;
                    self.changed.notify_all();
                    return Some(listener);
                }
                Err(e) => {
                    let st = self.lock();
                    if st.stopped || st.fault == Fault::Refuse {
                        return None;
                    }
                    drop(st);
                    eprintln!("fake provider {}: cannot listen on {}: {e}", self.name, self.addr);
                    thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// Handles one connection, which carries one request (`Connection: close`).
    fn handle(&self, mut stream: TcpStream) {
        let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
        let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
        // Wait for the request's first byte without consuming it: a connection that
        // closes without sending anything is no request, and `reset` needs the bytes
        // left unread.
        if !matches!(stream.peek(&mut [0u8; 1]), Ok(n) if n > 0) {
            return;
        }
        let (fault, generation) = {
            let mut st = self.lock();
            let fault = st.script.pop_front().unwrap_or(st.fault);
            (fault, st.generation)
        };
        if fault == Fault::Refuse {
            return;
        }
        self.hits.fetch_add(1, Ordering::SeqCst);
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _in_flight = InFlight(&self.in_flight);

        if fault == Fault::Reset {
            // Closing a socket whose received bytes were never read makes the kernel
            // send RST instead of FIN: the client sees "connection reset".
            return;
        }
        if fault == Fault::Cut {
            // The same RST, after a head that promises more body than is sent: the
            // request stays unread on purpose. The client has sent it whole (the
            // first byte is here, and a request is one small write), so answering
            // before reading it is harmless.
            let body = "{\"partial\":\"the rest of this body never arrives\"}";
            let answer = http_response(200, body);
            let _ = stream.write_all(&answer[..answer.len() - body.len() / 2]);
            let _ = stream.flush();
            return;
        }
        let Ok(call) = read_call(&stream) else { return };
        let answer = match fault {
            Fault::Healthy => self.answer(&call),
            Fault::Slow(d) => {
                if !self.hold(&stream, d, generation) {
                    return;
                }
                self.answer(&call)
            }
            Fault::Hang => {
                if self.hold(&stream, HANG_CAP, generation) {
                    let _ = stream.shutdown(Shutdown::Both);
                }
                return;
            }
            Fault::Error(code) => {
                http_response(code, &format!(r#"{{"error":"injected fault","status":{code}}}"#))
            }
            Fault::Garbage => b"this is not HTTP\x00\xff\r\n\r\n".to_vec(),
            Fault::Trickle(period) => {
                for byte in self.answer(&call) {
                    if stream.write_all(&[byte]).is_err() || !self.pause(period, generation) {
                        return;
                    }
                }
                let _ = stream.shutdown(Shutdown::Write);
                return;
            }
            Fault::Close | Fault::Refuse | Fault::Reset | Fault::Cut => {
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
        };
        if stream.write_all(&answer).is_ok() {
            // FIN after the answer; the request was read whole, so no RST follows.
            let _ = stream.shutdown(Shutdown::Write);
        }
    }

    fn answer(&self, call: &Call) -> Vec<u8> {
        let (status, body) = (self.responder)(call);
        http_response(status, &body)
    }

    /// Waits up to `d`. Returns early, `true`, when the fault changes after
    /// `generation`; `false` when the provider stops (the handler then gives up).
    fn pause(&self, d: Duration, generation: u64) -> bool {
        let until = Instant::now() + d;
        let mut st = self.lock();
        loop {
            if st.stopped {
                return false;
            }
            let now = Instant::now();
            if st.generation != generation || now >= until {
                return true;
            }
            st = self.changed.wait_timeout(st, until - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Holds a request for up to `d`, like [`pause`](Self::pause), and watches its
    /// client meanwhile. `false` when the provider stops, or when the client leaves
    /// and `release_on_close` is on: the handler then closes without answering.
    fn hold(&self, stream: &TcpStream, d: Duration, generation: u64) -> bool {
        let until = Instant::now() + d;
        let mut seen_gone = false;
        loop {
            let now = Instant::now();
            if now >= until {
                return true;
            }
            let step = (until - now).min(WATCH_EVERY);
            if !self.pause(step, generation) {
                return false;
            }
            if self.lock().generation != generation {
                return true;
            }
            if !seen_gone && client_gone(stream) {
                seen_gone = true;
                self.clients_gone.fetch_add(1, Ordering::SeqCst);
            }
            if seen_gone && self.release_on_close.load(Ordering::SeqCst) {
                return false;
            }
        }
    }
}

/// Whether the client has closed (or reset) a connection whose request was read
/// whole: a non-blocking peek sees end-of-file or an error instead of "nothing yet".
fn client_gone(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let gone = match stream.peek(&mut [0u8; 1]) {
        Ok(0) => true,
        // Bytes after the request (a pipelined one): the client is still there.
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted),
    };
    let _ = stream.set_nonblocking(false);
    gone
}

/// Counts a request out of `in_flight` however its handler ends (a panicking
/// responder included).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Reads one request: request line, headers, and a `Content-Length` or chunked body.
fn read_call(stream: &TcpStream) -> io::Result<Call> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let mut reader = BufReader::new(stream.take(MAX_REQUEST));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let (Some(method), Some(url)) = (words.next(), words.next()) else {
        return Err(bad("no request line"));
    };
    let (method, url) = (method.to_owned(), url.to_owned());
    let (mut length, mut chunked) = (0, false);
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("headers cut short"));
        }
        let Some((name, value)) = line.split_once(':') else { break };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().map_err(|_| bad("content-length"))?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size, 16).map_err(|_| bad("chunk size"))?;
            let mut chunk = vec![0; size + 2]; // the data and its CRLF
            reader.read_exact(&mut chunk)?;
            body.extend_from_slice(&chunk[..size]);
            if size == 0 {
                break;
            }
        }
    } else {
        reader.take(length).read_to_end(&mut body)?;
    }
    Ok(Call { method, url, body: String::from_utf8_lossy(&body).into_owned() })
}

fn http_response(status: u16, body: &str) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        409 => "Conflict",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    };
    let kind = if body.starts_with('{') || body.starts_with('[') {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
