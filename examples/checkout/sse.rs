//! Server-Sent Events frames sized so that tiny_http sends each one the
//! moment it is written.
//!
//! tiny_http 0.12 sends a body of unknown length chunked, through
//! chunked_transfer's `Encoder`, which buffers 8 KiB ([`CHUNK`]) and sends a
//! chunk only when a write overflows that buffer (or at the end of the body).
//! A small event would wait there for the next ones. So every frame is padded
//! with an SSE comment line (`:` and spaces, ignored by every client) to a
//! whole number of chunks, and the stream's first frame has one byte more:
//! after each frame the bytes written are one past a chunk boundary, so
//! everything but that last byte (the padding's closing newline, never the
//! event's) has gone out. The event's blank line has arrived, so the client
//! dispatches the event at once.
//!
//! std only: `tests/checkout/stream.rs` includes this file by path.

/// chunked_transfer's chunk size, as tiny_http uses it (`Encoder::new`).
pub const CHUNK: usize = 8192;

/// One event as a frame: `retry` (first frame only: how long a client waits
/// before it reconnects), `id`, `event`, the data (one `data:` line per
/// line), the blank line that ends the event, then the padding comment. Its
/// length is a multiple of [`CHUNK`], plus one for the `first` frame.
pub fn frame(event: &str, id: u64, data: &str, first: bool, retry_ms: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 64);
    if first {
        out.extend_from_slice(format!("retry: {retry_ms}\n").as_bytes());
    }
    out.extend_from_slice(format!("id: {id}\nevent: {event}\n").as_bytes());
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.strip_suffix('\r').unwrap_or(line).as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    // At least ":\n" of padding.
    let body = out.len() + 2;
    let extra = usize::from(first);
    let len = body.saturating_sub(extra).div_ceil(CHUNK) * CHUNK + extra;
    out.push(b':');
    out.resize(len - 1, b' ');
    out.push(b'\n');
    out
}
