//! One client connection, on its own guard thread: read a request whole,
//! pass it over the hop, relay the answer, and again while kept alive.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::client::Client;
use super::guard::{Conn, GuardShared};
use super::hop;
use crate::wire::Refusal;

/// Serves `conn` until the client closes, a timeout or a refusal ends it, or
/// the guard stops.
pub(super) fn serve_conn(shared: &GuardShared, conn: &Conn) {
    let cfg = &shared.cfg;
    let stream = &conn.stream;
    if stream.set_write_timeout(Some(cfg.write_timeout())).is_err() {
        return;
    }
    let mut client = Client::new(stream);
    loop {
        // Between requests: the stop may close an idle connection; a
        // pipelined request already read in part is finished first.
        if !client.has_buffered() && shared.go_idle(conn) {
            return;
        }
        // No byte by the idle timeout, or the client left: close, no answer.
        if client.await_request(Instant::now() + cfg.idle_timeout()).is_err() {
            return;
        }
        conn.idle.store(false, Ordering::SeqCst);
        let head = match client.read_head(cfg) {
            Ok(head) => head,
            Err(refusal) => return refuse(&mut client, refusal),
        };
        let body = match client.read_body(&head, cfg) {
            Ok(body) => body,
            Err(refusal) => return refuse(&mut client, refusal),
        };
        let received = Instant::now();
        let close_after = !head.keep_alive || shared.stopping.load(Ordering::SeqCst);
        let request = hop::forwarded(&head, &body, stream.peer_addr().ok(), received);
        drop(body);
        let (mut hop_stream, fresh) = match shared.hop.take() {
            Ok(taken) => taken,
            Err(e) => {
                log::error!("guard: cannot reach the request pool: {e}");
                return refuse(&mut client, Refusal::UPSTREAM);
            }
        };
        match hop::exchange(
            &shared.hop,
            &mut hop_stream,
            fresh,
            &request,
            &head,
            client.stream(),
            close_after,
        ) {
            Ok(relayed) => {
                if relayed.hop_reusable {
                    shared.hop.give(hop_stream);
                }
                if !relayed.client_ok {
                    return;
                }
            }
            Err(e) => {
                log::warn!("guard: {} {}: no valid answer from the handler: {e}", head.method, head.target);
                return refuse(&mut client, Refusal::UPSTREAM);
            }
        }
    }
}

/// Answers `refusal` (unless the client is gone) and closes the connection
/// after a short linger.
fn refuse(client: &mut Client<'_>, refusal: Refusal) {
    if refusal.status == 0 {
        return;
    }
    log::debug!("guard: answering {} ({})", refusal.status, refusal.message);
    let mut stream = client.stream();
    if stream.write_all(&refusal.bytes()).is_ok() {
        client.linger();
    }
}
