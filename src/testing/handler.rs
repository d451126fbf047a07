//! The provider's threads: the acceptor that owns the port, and one handler per
//! connection that applies the fault in force when the request arrived.

use std::io::{self, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::provider::{Shared, State};
use super::{Call, Fault, HANG_CAP, IO_TIMEOUT, MAX_REQUEST, WATCH_EVERY};
use crate::wire::{self, BodyDecoder, Limits};

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A responder that panics does so outside the lock; never poisoned in practice.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Unblocks an `accept` with a throwaway connection. It sends no byte, so it is
    /// never counted as a request.
    pub(super) fn wake_acceptor(&self) -> bool {
        TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)).is_ok()
    }

    /// Owns the port: accepts while the fault is not `refuse`, holds nothing bound
    /// while it is, and hands every connection to a thread of its own.
    pub(super) fn accept_loop(self: Arc<Self>, mut listener: Option<TcpListener>) {
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
            Fault::Slow(d) | Fault::Saturated { service: d, .. } => {
                let slot = match fault {
                    Fault::Saturated { capacity, .. } => self.take_slot(&stream, capacity, generation),
                    _ => Some(Slot(None)),
                };
                let Some(_slot) = slot else { return };
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

    /// Waits for one of `capacity` serving slots (`saturated`), watching the client
    /// meanwhile as [`hold`](Self::hold) does. `Some` with the slot, which is given
    /// back when dropped; also `Some`, with no slot, when the fault changes while
    /// waiting (the request is then answered at once, like a slow one). `None` when
    /// the provider stops, the wait reaches the hang cap, or the client leaves with
    /// `release_on_close` on: the handler then closes without answering.
    fn take_slot(&self, stream: &TcpStream, capacity: usize, generation: u64) -> Option<Slot<'_>> {
        let give_up = Instant::now() + HANG_CAP;
        let mut seen_gone = false;
        let mut st = self.lock();
        loop {
            if st.stopped {
                return None;
            }
            if st.generation != generation {
                return Some(Slot(None));
            }
            if st.serving < capacity {
                st.serving += 1;
                return Some(Slot(Some(self)));
            }
            let now = Instant::now();
            if now >= give_up {
                return None;
            }
            let step = (give_up - now).min(WATCH_EVERY);
            st = self.changed.wait_timeout(st, step).unwrap_or_else(PoisonError::into_inner).0;
            if !seen_gone && st.serving >= capacity {
                drop(st);
                if self.let_go(stream, &mut seen_gone) {
                    return None;
                }
                st = self.lock();
            }
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
            if self.let_go(stream, &mut seen_gone) {
                return false;
            }
        }
    }

    /// Whether a held request lets go of its client, who has left (counted
    /// once in `clients_gone`, `seen_gone` then set) with `release_on_close` on.
    fn let_go(&self, stream: &TcpStream, seen_gone: &mut bool) -> bool {
        if !*seen_gone && client_gone(stream) {
            *seen_gone = true;
            self.clients_gone.fetch_add(1, Ordering::SeqCst);
        }
        *seen_gone && self.release_on_close.load(Ordering::SeqCst)
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

/// A serving slot of a `saturated` provider (or none, when the fault changed
/// while waiting for one): given back, and the next waiter woken, however the
/// handler ends.
struct Slot<'a>(Option<&'a Shared>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.0 {
            shared.lock().serving -= 1;
            shared.changed.notify_all();
        }
    }
}

/// Counts a request out of `in_flight` however its handler ends (a panicking
/// responder included).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a request may carry: a head and a body of 1 MiB each.
const LIMITS: Limits = Limits { max_head_bytes: MAX_REQUEST as usize, max_body_bytes: MAX_REQUEST };

/// Reads one request: its head, and a `Content-Length` or chunked body.
fn read_call(stream: &TcpStream) -> io::Result<Call> {
    let cut_short = || io::Error::new(io::ErrorKind::UnexpectedEof, "the request was cut short");
    let mut buf = Vec::new();
    let fill = |buf: &mut Vec<u8>| wire::read_some(stream, buf);
    let head = wire::read_head(&mut buf, LIMITS, fill)?.ok_or_else(cut_short)?;
    let body = BodyDecoder::new(head.framing, LIMITS).drive(&mut buf, fill)?.ok_or_else(cut_short)?;
    Ok(Call { method: head.method, url: head.target, body: String::from_utf8_lossy(&body).into_owned() })
}

/// A whole answer, JSON when the body looks like it, then the close.
fn http_response(status: u16, body: &str) -> Vec<u8> {
    let kind = if body.starts_with('{') || body.starts_with('[') {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    wire::closing_answer(status, kind, body.as_bytes())
}
