//! Bodies: how a head says one is framed, and a decoder that takes one off
//! the front of a buffer, step by step, within [`Limits`].

use std::ops::Range;

use super::{Limits, Refusal, chunk};

/// How a body is framed, as its head says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Neither a length nor chunked, on a request: no body.
    None,
    /// `Content-Length`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
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
    /// Trailer lines, then the empty line that ends a chunked body.
    Trailers,
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
            State::Length(_) | State::Data(_) if input.is_empty() => return Ok(None),
            State::Length(left) => {
                let take = left.min(input.len() as u64);
                self.state = if take == left { State::Done } else { State::Length(left - take) };
                (take as usize, take as usize)
            }
            State::Data(left) => {
                let take = left.min(input.len() as u64);
                self.state = if take == left { State::DataEnd } else { State::Data(left - take) };
                (take as usize, take as usize)
            }
            State::DataEnd => match input {
                [] | [b'\r'] => return Ok(None),
                [b'\r', b'\n', ..] => {
                    self.state = State::Size;
                    (2, 0)
                }
                // Refused at the first wrong byte, not after a second one.
                _ => return Err(Refusal::bad("a chunk does not end with CRLF")),
            },
            // A line longer than the cap is refused whole or in parts alike.
            State::Size => match chunk::size_line(input) {
                Err(why) => return Err(Refusal::bad(why)),
                Ok(Some((used, size))) if used <= line_cap => {
                    if size > self.limits.max_body_bytes.saturating_sub(self.chunked) {
                        return Err(Refusal::BODY_TOO_LARGE);
                    }
                    self.chunked += size;
                    self.state = if size == 0 { State::Trailers } else { State::Data(size) };
                    (used, 0)
                }
                Ok(None) if input.len() <= line_cap => return Ok(None),
                Ok(_) => return Err(Refusal::bad("invalid chunk size line")),
            },
            // The trailers are dropped: nothing here has a use for them. The
            // cap counts their lines, never the bytes after them (the next
            // request's), and a line may end just at it.
            State::Trailers => match chunk::trailer_line(input) {
                Err(why) => return Err(Refusal::bad(why)),
                // A lone CR may be the start of the empty line, which is not counted.
                Ok(None) if input != b"\r" && self.trailers.saturating_add(input.len()) > line_cap => {
                    return Err(Refusal::HEAD_TOO_LARGE);
                }
                Ok(None) => return Ok(None),
                // Only the empty line is this short.
                Ok(Some(2)) => {
                    self.state = State::Done;
                    (2, 0)
                }
                Ok(Some(line)) if self.trailers.saturating_add(line) > line_cap => {
                    return Err(Refusal::HEAD_TOO_LARGE);
                }
                Ok(Some(line)) => {
                    self.trailers += line;
                    (line, 0)
                }
            },
        };
        Ok(Some(Step { used, data: 0..data }))
    }

    /// Takes the whole body off the front of `buf` and returns its data;
    /// whenever more bytes are needed, `fill` appends them to `buf`. `Ok(None)`
    /// when `fill` found the end of the stream first.
    pub(crate) fn drive<E: From<Refusal>>(
        &mut self,
        buf: &mut Vec<u8>,
        mut fill: impl FnMut(&mut Vec<u8>) -> Result<usize, E>,
    ) -> Result<Option<Vec<u8>>, E> {
        // Memory grows with what arrives, not with what was declared.
        let mut body = Vec::new();
        while !self.is_done() {
            match self.step(buf)? {
                Some(Step { used, data }) => {
                    body.extend_from_slice(&buf[data]);
                    buf.drain(..used);
                }
                None if fill(buf)? == 0 => return Ok(None),
                None => {}
            }
        }
        Ok(Some(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_head_bytes: 64, max_body_bytes: 10 };

    /// What decoding made of an input: the data, the raw bytes used, and
    /// whether the body ended, or the refusal.
    struct Decoded {
        data: Vec<u8>,
        raw: Vec<u8>,
        end: Result<bool, Refusal>,
    }

    /// Decodes `input` fed one byte at a time.
    fn trickled(framing: Framing, input: &[u8]) -> Decoded {
        let mut fed = 0;
        decoded(framing, input, Vec::new(), move |buf| {
            let more = &input[fed..(fed + 1).min(input.len())];
            buf.extend_from_slice(more);
            fed += more.len();
            more.len()
        })
    }

    /// Decodes `input` given whole.
    fn whole(framing: Framing, input: &[u8]) -> Decoded {
        decoded(framing, input, input.to_vec(), |_| 0)
    }

    /// The bytes used are those of `input` that were fed and left `buf`.
    fn decoded(
        framing: Framing,
        input: &[u8],
        mut buf: Vec<u8>,
        mut fill: impl FnMut(&mut Vec<u8>) -> usize,
    ) -> Decoded {
        let mut fed = buf.len();
        let body = BodyDecoder::new(framing, LIMITS).drive(&mut buf, |buf| {
            let n = fill(buf);
            fed += n;
            Ok::<_, Refusal>(n)
        });
        let raw = input[..fed - buf.len()].to_vec();
        let end = body.as_ref().map(Option::is_some).map_err(|r| *r);
        Decoded { data: body.ok().flatten().unwrap_or_default(), raw, end }
    }

    /// Both ways, `input` is refused with `status` after using exactly
    /// `used` bytes: what follows the refused line is left alone.
    #[track_caller]
    fn refused(input: &[u8], used: &[u8], status: u16) {
        for (how, d) in
            [("trickled", trickled(Framing::Chunked, input)), ("whole", whole(Framing::Chunked, input))]
        {
            let shown = String::from_utf8_lossy(input);
            assert_eq!(d.end.map_err(|r| r.status), Err(status), "{how} {shown:?}");
            assert_eq!(d.raw, used, "{how} {shown:?}");
        }
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
        let input = b"3;ext=1\r\nabc\r\n2 ; a = \"b;c\"\r\nde\r\n0\r\nX-T: 1\r\n\r\n";
        for d in [trickled(Framing::Chunked, input), whole(Framing::Chunked, input)] {
            assert_eq!((d.data.as_slice(), d.raw.as_slice(), d.end), (&b"abcde"[..], &input[..], Ok(true)));
        }
        let mut buf = [&input[..], b"GET /next"].concat();
        let mut d = BodyDecoder::new(Framing::Chunked, LIMITS);
        assert_eq!(d.drive(&mut buf, |_| Ok::<_, Refusal>(0)).map(|b| b.is_some()), Ok(true));
        assert_eq!(buf, b"GET /next");
    }

    #[test]
    fn an_ended_stream_is_an_unfinished_body() {
        assert_eq!(trickled(Framing::Chunked, b"3\r\nab").end, Ok(false));
        assert_eq!(trickled(Framing::Length(4), b"ab").end, Ok(false));
    }

    #[test]
    fn chunked_errors_are_the_guards_answers() {
        refused(b"zz\r\n", b"", 400);
        refused(b"3\r\nabcXY", b"3\r\nabc", 400);
        refused(b"6\r\nabcdef\r\n5\r\n", b"6\r\nabcdef\r\n", 413);
        let long_trailer = [b"0\r\nX: ".to_vec(), b"y".repeat(70), b"\r\n\r\n".to_vec()].concat();
        refused(&long_trailer, b"0\r\n", 431);
    }

    #[test]
    fn a_size_line_past_the_cap_is_refused_whole_or_in_parts() {
        // 64 bytes, the cap, pass; 65 do not.
        let line = |len: usize| [b"1;".to_vec(), b"a".repeat(len - 4), b"\r\n".to_vec()].concat();
        let at_cap = [line(64), b"x\r\n0\r\n\r\n".to_vec()].concat();
        assert_eq!(whole(Framing::Chunked, &at_cap).end, Ok(true));
        assert_eq!(trickled(Framing::Chunked, &at_cap).end, Ok(true));
        refused(&[line(65), b"x\r\n0\r\n\r\n".to_vec()].concat(), b"", 400);
        let unended = [b"1;".to_vec(), b"a".repeat(63)].concat();
        assert_eq!(trickled(Framing::Chunked, &unended).end.map_err(|r| r.status), Err(400));
        assert_eq!(trickled(Framing::Chunked, &unended[..64]).end, Ok(false));
    }

    #[test]
    fn a_size_line_out_of_grammar_is_refused_where_it_starts() {
        let first = b"1\r\nx\r\n";
        for line in [
            &b"\r\n"[..],
            b"\n",
            b" 1\r\n",
            b"+1\r\n",
            b"-1\r\n",
            b"0x1\r\n",
            b"00000000000000001\r\n",
            b"1 \r\n",
            b"1\n",
            b"1\rx\n",
            b"1\x00\r\n",
            b"1;a\nb\r\n",
            b"1;a=\"x\ny\"\r\n",
            b"1;a=\x01\r\n",
        ] {
            // httparse reads an empty line as the size as the last chunk: here
            // what follows it is not taken as trailers or the end.
            let input = [&first[..], line, b"y\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n"].concat();
            refused(&input, first, 400);
        }
        // 16 digits are a size; too large a one is 413, not a wrap-around.
        refused(b"FFFFFFFFFFFFFFFF\r\n", b"", 413);
        assert_eq!(whole(Framing::Chunked, b"0000000000000001\r\nx\r\n0\r\n\r\n").end, Ok(true));
    }

    #[test]
    fn a_chunks_data_ends_with_crlf_and_nothing_else() {
        refused(b"1\r\nx\nGET / HTTP/1.1\r\n\r\n", b"1\r\nx", 400);
        refused(b"1\r\nx\rGET / HTTP/1.1\r\n\r\n", b"1\r\nx", 400);
        refused(b"1\r\nx0\r\n\r\n", b"1\r\nx", 400);
        // Refused at the first wrong byte, with nothing after it.
        assert_eq!(trickled(Framing::Chunked, b"1\r\nx\n").end.map_err(|r| r.status), Err(400));
        assert_eq!(trickled(Framing::Chunked, b"1\r\nx\r").end, Ok(false));
    }

    #[test]
    fn trailers_end_with_crlf_and_nothing_else() {
        // A bare LF after the last chunk is httparse's cue to read the
        // pipelined request as trailers, up to its CRLF: refused here.
        refused(b"0\r\n\nGET / HTTP/1.1\r\n\r\n", b"0\r\n", 400);
        refused(b"0\r\nX: 1\nGET / HTTP/1.1\r\n\r\n", b"0\r\n", 400);
        refused(b"0\r\nX: 1\r\n\nGET / HTTP/1.1\r\n\r\n", b"0\r\nX: 1\r\n", 400);
        refused(b"0\r\nX: 1\rY: 2\r\n\r\n", b"0\r\n", 400);
        refused(b"0\r\n\rGET / HTTP/1.1\r\n\r\n", b"0\r\n", 400);
        refused(b"0\r\nX : 1\r\n\r\n", b"0\r\n", 400);
        refused(b"0\r\nX: 1\r\n folded\r\n\r\n", b"0\r\nX: 1\r\n", 400);
        refused(b"0\r\nGET / HTTP/1.1\r\n\r\n", b"0\r\n", 400);
    }

    #[test]
    fn the_trailer_cap_counts_trailers_only() {
        // A long pipelined request after the trailers is not theirs.
        let input = [&b"0\r\nX: 1\r\n\r\n"[..], &b"y".repeat(200)].concat();
        let mut buf = input.clone();
        let mut d = BodyDecoder::new(Framing::Chunked, LIMITS);
        assert_eq!(d.drive(&mut buf, |_| Ok::<_, Refusal>(0)).map(|b| b.is_some()), Ok(true));
        assert_eq!(buf, b"y".repeat(200));
        // Lines up to the cap together pass; one more byte does not.
        let trailers =
            |len: usize| [b"0\r\nX: ".to_vec(), b"y".repeat(len - 5), b"\r\n\r\n".to_vec()].concat();
        assert_eq!(trickled(Framing::Chunked, &trailers(64)).end, Ok(true));
        assert_eq!(whole(Framing::Chunked, &trailers(64)).end, Ok(true));
        refused(&trailers(65), b"0\r\n", 431);
    }
}
