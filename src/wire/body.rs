//! Bodies: how a head says one is framed, and a decoder that takes one off
//! the front of a buffer, step by step, within [`Limits`].

use std::ops::Range;

use super::{Limits, Refusal};

/// How a body is framed, as its head says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Neither a length nor chunked, on a request: no body.
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither, on an answer: the body runs until the connection closes.
    UntilClose,
}

/// Takes one body off the front of a buffer. Each [`step`](Self::step)
/// looks at the buffer, says how many bytes of its front it used and which
/// of them are the body's data (a chunk's size line, its CRLF and the
/// trailers are used but are not data), or that it needs more bytes.
#[derive(Debug)]
pub(crate) struct BodyDecoder {
    state: State,
    limits: Limits,
    /// The sizes of the chunks so far, against `max_body_bytes`.
    chunked: u64,
    /// The bytes of trailer lines so far, against `max_head_bytes`.
    trailers: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// This many bytes of a `Content-Length` body are still to come.
    Length(u64),
    /// A chunk-size line is next.
    Size,
    /// This many bytes of a chunk's data are still to come.
    Data(u64),
    /// The CRLF that ends a chunk's data is next.
    DataEnd,
    /// Trailer lines, then the empty line that ends a chunked body;
    /// `true` until the first step over them.
    Trailers(bool),
    /// Everything until the connection closes.
    UntilClose,
    Done,
}

/// What one step used: `used` bytes off the front, of which `data` are the
/// body's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) used: usize,
    pub(crate) data: Range<usize>,
}

impl BodyDecoder {
    /// A decoder for a body framed as `framing`. A `Content-Length` is
    /// checked against the limits with the head (see
    /// [`parse_request`](super::request::parse_request)); chunks here.
    pub(crate) fn new(framing: Framing, limits: Limits) -> Self {
        let state = match framing {
            Framing::None | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Size,
            Framing::UntilClose => State::UntilClose,
        };
        BodyDecoder { state, limits, chunked: 0, trailers: 0 }
    }

    /// The body has ended.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// One step over `input`, the front of the unused bytes: `Ok(None)`
    /// when it needs more of them.
    pub(crate) fn step(&mut self, input: &[u8]) -> Result<Option<Step>, Refusal> {
        let line_cap = self.limits.max_head_bytes;
        let (used, data) = match self.state {
            State::Done => (0, 0),
            State::Length(_) | State::Data(_) | State::UntilClose if input.is_empty() => return Ok(None),
            State::Length(left) => {
                let take = left.min(input.len() as u64);
                self.state = if take == left { State::Done } else { State::Length(left - take) };
                (take as usize, take as usize)
            }
            State::UntilClose => (input.len(), input.len()),
            State::Data(left) => {
                let take = left.min(input.len() as u64);
                self.state = if take == left { State::DataEnd } else { State::Data(left - take) };
                (take as usize, take as usize)
            }
            State::DataEnd => {
                if input.len() < 2 {
                    return Ok(None);
                }
                if &input[..2] != b"\r\n" {
                    return Err(Refusal::bad("a chunk does not end with CRLF"));
                }
                self.state = State::Size;
                (2, 0)
            }
            State::Size => match httparse::parse_chunk_size(input) {
                Ok(httparse::Status::Complete((used, size))) => {
                    if size > self.limits.max_body_bytes.saturating_sub(self.chunked) {
                        return Err(Refusal::BODY_TOO_LARGE);
                    }
                    self.chunked += size;
                    self.state = if size == 0 { State::Trailers(true) } else { State::Data(size) };
                    (used, 0)
                }
                Ok(httparse::Status::Partial) if input.len() <= line_cap => return Ok(None),
                _ => return Err(Refusal::bad("invalid chunk size line")),
            },
            State::Trailers(first) => {
                // The trailers are dropped: nothing here has a use for them.
                // Checked before each step but the first, so a line may end
                // just at the cap.
                if !first && self.trailers.saturating_add(input.len()) > line_cap {
                    return Err(Refusal::HEAD_TOO_LARGE);
                }
                self.state = State::Trailers(false);
                match input.windows(2).position(|w| w == b"\r\n") {
                    Some(0) => {
                        self.state = State::Done;
                        (2, 0)
                    }
                    Some(end) => {
                        self.trailers += end + 2;
                        (end + 2, 0)
                    }
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(Step { used, data: 0..data }))
    }

    /// Takes the whole body off the front of `buf`: each step's bytes go to
    /// `sink` (all it used, and the data among them), then leave `buf`;
    /// whenever more are needed, `fill` appends them to `buf`. `Ok(false)`
    /// when `fill` found the end of the stream first.
    pub(crate) fn drive<E: From<Refusal>>(
        &mut self,
        buf: &mut Vec<u8>,
        mut fill: impl FnMut(&mut Vec<u8>) -> Result<usize, E>,
        mut sink: impl FnMut(&[u8], &[u8]),
    ) -> Result<bool, E> {
        while !self.is_done() {
            match self.step(buf)? {
                Some(Step { used, data }) => {
                    sink(&buf[..used], &buf[data]);
                    buf.drain(..used);
                }
                None => {
                    if fill(buf)? == 0 {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_head_bytes: 64, max_body_bytes: 10 };

    /// Decodes `input` fed one byte at a time: the data, the raw bytes
    /// used, and whether the body ended.
    fn trickled(framing: Framing, input: &[u8]) -> Result<(Vec<u8>, Vec<u8>, bool), Refusal> {
        let (mut data, mut raw) = (Vec::new(), Vec::new());
        let mut rest = input.iter();
        let mut buf = Vec::new();
        let done = BodyDecoder::new(framing, LIMITS).drive(
            &mut buf,
            |buf| {
                Ok::<_, Refusal>(match rest.next() {
                    Some(b) => {
                        buf.push(*b);
                        1
                    }
                    None => 0,
                })
            },
            |used, d| {
                raw.extend_from_slice(used);
                data.extend_from_slice(d);
            },
        )?;
        Ok((data, raw, done))
    }

    #[test]
    fn a_length_body_takes_exactly_its_length() {
        let mut d = BodyDecoder::new(Framing::Length(3), LIMITS);
        assert_eq!(d.step(b"abcdef").unwrap(), Some(Step { used: 3, data: 0..3 }));
        assert!(d.is_done());
        assert!(BodyDecoder::new(Framing::None, LIMITS).is_done());
        assert!(BodyDecoder::new(Framing::Length(0), LIMITS).is_done());
    }

    #[test]
    fn chunks_arrive_whole_or_a_byte_at_a_time() {
        let input = b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n";
        let (data, raw, done) = trickled(Framing::Chunked, input).unwrap();
        assert_eq!((data.as_slice(), raw.as_slice(), done), (&b"abcde"[..], &input[..], true));
        let mut buf = input.to_vec();
        let mut out = Vec::new();
        let whole = BodyDecoder::new(Framing::Chunked, LIMITS).drive(
            &mut buf,
            |_| Ok::<_, Refusal>(0),
            |_, d| out.extend_from_slice(d),
        );
        assert_eq!((whole, out.as_slice()), (Ok(true), &b"abcde"[..]));
        assert!(buf.is_empty());
    }

    #[test]
    fn an_ended_stream_is_an_unfinished_body() {
        assert!(!trickled(Framing::Chunked, b"3\r\nab").unwrap().2);
        assert!(!trickled(Framing::Length(4), b"ab").unwrap().2);
        let (data, _, done) = trickled(Framing::UntilClose, b"all of it").unwrap();
        assert_eq!((data.as_slice(), done), (&b"all of it"[..], false));
    }

    #[test]
    fn chunked_errors_are_the_guards_answers() {
        let status = |input: &[u8]| trickled(Framing::Chunked, input).unwrap_err().status;
        assert_eq!(status(b"zz\r\n"), 400);
        assert_eq!(status(b"3\r\nabcXY"), 400);
        assert_eq!(status(b"6\r\nabcdef\r\n5\r\n"), 413);
        assert_eq!(status(&[b"1".repeat(65), b"\r\n".to_vec()].concat()), 400);
        let long_trailer = [b"0\r\nX: ".to_vec(), b"y".repeat(70), b"\r\n\r\n".to_vec()].concat();
        assert_eq!(status(&long_trailer), 431);
    }
}
