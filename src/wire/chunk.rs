//! The lines of the chunked coding (RFC 9112 7.1): a chunk's size line and
//! the trailer lines, read to the letter of the grammar.
//!
//! Leniency here is how a request gets smuggled (the wire's module docs,
//! *Strictness*): a line ends with CRLF and nothing else, and every byte the
//! grammar has no place for is refused rather than skipped.
//!
//! Each parser looks at the front of the unused bytes and answers
//! `Ok(Some(n))` for a whole line of `n` bytes (its CRLF included),
//! `Ok(None)` while what is there is a valid start of a line, and `Err`,
//! saying what is wrong, as soon as it cannot be one.

/// The most hex digits of a chunk size: 16 are every `u64`, and a size
/// line cannot overflow.
const MAX_SIZE_DIGITS: usize = 16;

const BARE_LF: &str = "a line of the chunked body ends with a bare LF";
const BARE_CR: &str = "a bare CR in the chunked body";
const CONTROL: &str = "a control byte in the chunked body";

/// A chunk-size line: `1*16HEXDIG *( OWS ";" OWS name [ OWS "=" OWS value ] ) CRLF`,
/// each name a token and each value a token or a quoted string. Whole, it is
/// its length and the size.
pub(super) fn size_line(input: &[u8]) -> Result<Option<(usize, u64)>, &'static str> {
    let digits = input.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits > MAX_SIZE_DIGITS {
        return Err("a chunk size has more than 16 hex digits");
    }
    let mut at = Cursor { input, at: digits };
    if digits == 0 {
        // Not even a digit first: no sign, no `0x`, no whitespace, and not
        // an empty line, which a lenient reader takes as the last chunk.
        return match at.peek() {
            None => Ok(None),
            Some(b'\r' | b'\n') => Err("a chunk size line without a size"),
            Some(_) => at.fail("a chunk size is not hex digits"),
        };
    }
    let size = input[..digits].iter().fold(0u64, |n, &b| (n << 4) | u64::from(hex(b)));
    // Whitespace may stand around a `;` or an `=`, not at the end.
    let mut spaced = at.ows() > 0;
    loop {
        match at.peek() {
            None => return Ok(None),
            Some(b'\r') if spaced => return Err("whitespace at the end of a chunk size line"),
            Some(b'\r') => return at.crlf().map(|line| line.map(|n| (n, size))),
            Some(b';') => at.at += 1,
            Some(_) => return at.fail("invalid byte in a chunk size line"),
        }
        at.ows();
        if at.token() == 0 {
            return at.fail("a chunk extension without a name");
        }
        spaced = at.ows() > 0;
        if at.peek() != Some(b'=') {
            // No value: a `;`, the end, or something the next turn refuses.
            continue;
        }
        at.at += 1;
        at.ows();
        match at.peek() {
            None => return Ok(None),
            Some(b'"') => {
                if at.quoted()?.is_none() {
                    return Ok(None);
                }
            }
            Some(_) if at.token() > 0 => {}
            Some(_) => return at.fail("a chunk extension without a value after `=`"),
        }
        spaced = at.ows() > 0;
    }
}

/// A trailer line: `name ":" value CRLF`, the name a token right against its
/// colon; or the empty line (`CRLF`, 2 bytes) that ends the trailers.
pub(super) fn trailer_line(input: &[u8]) -> Result<Option<usize>, &'static str> {
    let mut at = Cursor { input, at: 0 };
    let name = at.token();
    match at.peek() {
        None => return Ok(None),
        Some(b'\r') if name == 0 => return at.crlf(),
        Some(b':') if name > 0 => at.at += 1,
        // Whitespace before the colon, a folded line (one that starts with
        // whitespace) and a line without a colon are all malformed.
        Some(_) => return at.fail("a trailer line is not `name: value`"),
    }
    loop {
        match at.peek() {
            None => return Ok(None),
            Some(b'\r') => return at.crlf(),
            Some(b) if quotable(b) => at.at += 1,
            Some(_) => return at.fail(CONTROL),
        }
    }
}

struct Cursor<'a> {
    input: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.at).copied()
    }

    /// Skips spaces and tabs; how many.
    fn ows(&mut self) -> usize {
        self.skip(|b| b == b' ' || b == b'\t')
    }

    /// Skips a token (RFC 9110 5.6.2); how long.
    fn token(&mut self) -> usize {
        self.skip(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    }

    fn skip(&mut self, keep: impl Fn(u8) -> bool) -> usize {
        let n = self.input[self.at..].iter().take_while(|&&b| keep(b)).count();
        self.at += n;
        n
    }

    /// At a CR: the line ends here if an LF follows it.
    fn crlf(&self) -> Result<Option<usize>, &'static str> {
        match self.input.get(self.at + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some(self.at + 2)),
            Some(_) => Err(BARE_CR),
        }
    }

    /// At a `"`: skips the quoted string (RFC 9110 5.6.4), `Ok(None)` while
    /// it is not closed yet.
    fn quoted(&mut self) -> Result<Option<()>, &'static str> {
        self.at += 1;
        loop {
            match self.peek() {
                None => return Ok(None),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(Some(()));
                }
                Some(b'\\') => match self.input.get(self.at + 1) {
                    None => return Ok(None),
                    Some(&b) if quotable(b) => self.at += 2,
                    Some(_) => {
                        self.at += 1;
                        return self.fail("an invalid escape in a chunk extension's quoted value");
                    }
                },
                Some(b) if quotable(b) => self.at += 1,
                Some(_) => return self.fail(CONTROL),
            }
        }
    }

    /// The line cannot go on at this byte: the error it is, or `Ok(None)`
    /// at the end of the input (never the case where this is called, but
    /// the answer there would be "need more").
    fn fail<T>(&self, why: &'static str) -> Result<Option<T>, &'static str> {
        match self.peek() {
            None => Ok(None),
            Some(b'\n') => Err(BARE_LF),
            Some(b) if b != b'\r' && b != b'\t' && b.is_ascii_control() => Err(CONTROL),
            Some(_) => Err(why),
        }
    }
}

/// Whatever may stand in a quoted string, escaped or not: tab, space,
/// visible ASCII and obs-text.
fn quotable(b: u8) -> bool {
    b == b'\t' || b == b' ' || b.is_ascii_graphic() || b >= 0x80
}

fn hex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer for `line`, and that every proper prefix of a line that
    /// is whole or wrong at its end waits for more or is refused too.
    fn size(line: &[u8]) -> Result<Option<(usize, u64)>, &'static str> {
        for cut in 0..line.len() {
            if let Ok(Some(_)) = size_line(&line[..cut]) {
                panic!("{:?} is whole after {cut} bytes", String::from_utf8_lossy(line));
            }
        }
        size_line(line)
    }

    #[test]
    fn a_size_line_is_hex_digits_then_crlf() {
        assert_eq!(size_line(b"3\r\nabc"), Ok(Some((3, 3))));
        assert_eq!(size(b"3\r\n"), Ok(Some((3, 3))));
        assert_eq!(size(b"aF\r\n"), Ok(Some((4, 0xaf))));
        assert_eq!(size(b"0000000000000003\r\n"), Ok(Some((18, 3))));
        assert_eq!(size(b"FFFFFFFFFFFFFFFF\r\n"), Ok(Some((18, u64::MAX))));
        assert_eq!(size(b"12"), Ok(None));
        assert_eq!(size(b"12\r"), Ok(None));
    }

    #[test]
    fn extensions_are_tokens_and_quoted_strings() {
        for line in [
            &b"3;a\r\n"[..],
            b"3;a=b\r\n",
            b"3 ; a = b\r\n",
            b"3\t;\ta\t=\t\"b c\"\r\n",
            b"3;a=\"x\\\"y;z\";b;c=d\r\n",
            b"3;a=\"\xe9\"\r\n",
            b"3 ;a ;b= c\r\n",
        ] {
            assert_eq!(size(line), Ok(Some((line.len(), 3))), "{:?}", String::from_utf8_lossy(line));
        }
        assert_eq!(size_line(b"3;a=\"unclosed"), Ok(None));
        assert_eq!(size_line(b"3;a=\"x\\"), Ok(None));
    }

    #[test]
    fn a_size_line_out_of_grammar_is_refused() {
        for line in [
            &b"\r\n"[..],
            b"\n",
            b" 3\r\n",
            b"\t3\r\n",
            b"+3\r\n",
            b"-3\r\n",
            b"0x3\r\n",
            b"00000000000000003\r\n",
            b"3 \r\n",
            b"3\n",
            b"3\rx",
            b"3\x00\r\n",
            b"3;\r\n",
            b"3;=b\r\n",
            b"3;a=\r\n",
            b"3;a= \r\n",
            b"3;a=b \r\n",
            b"3;a \r\n",
            b"3;a=\"b\" \r\n",
            b"3 ;a=b\t\r\n",
            b"3;a\nb\r\n",
            b"3;a=b\rc\r\n",
            b"3;a=\"x\ny\"\r\n",
            b"3;a=\"x\ry\"\r\n",
            b"3;a=\"x\x01\"\r\n",
            b"3;a=\"x\\\x01\"\r\n",
            b"3;a=\"x\x7f\"\r\n",
            b"3;a=b\"c\"\r\n",
            b"3;\x01\r\n",
            b"3,4\r\n",
        ] {
            assert!(size(line).is_err(), "{:?} is not refused", String::from_utf8_lossy(line));
        }
        assert_eq!(size_line(b"3;a\nb\r\n"), Err(BARE_LF));
        assert_eq!(size_line(b"3\rx"), Err(BARE_CR));
        assert_eq!(size_line(b"3;\x01"), Err(CONTROL));
        assert_eq!(size_line(&b"1".repeat(17)), Err("a chunk size has more than 16 hex digits"));
    }

    #[test]
    fn a_trailer_line_is_a_field_or_the_end() {
        assert_eq!(trailer_line(b"\r\nGET"), Ok(Some(2)));
        assert_eq!(trailer_line(b"X-T: 1\r\n\r\n"), Ok(Some(8)));
        assert_eq!(trailer_line(b"X-T:\r\n"), Ok(Some(6)));
        assert_eq!(trailer_line(b"X-T:\t1 \xe9 \r\n"), Ok(Some(11)));
        for partial in [&b""[..], b"\r", b"X-T", b"X-T: 1", b"X-T: 1\r"] {
            assert_eq!(trailer_line(partial), Ok(None));
        }
    }

    #[test]
    fn a_trailer_line_out_of_grammar_is_refused() {
        assert_eq!(trailer_line(b"\nGET / HTTP/1.1\r\n\r\n"), Err(BARE_LF));
        assert_eq!(trailer_line(b"X: 1\nY: 2\r\n"), Err(BARE_LF));
        assert_eq!(trailer_line(b"X: 1\rY: 2\r\n"), Err(BARE_CR));
        assert_eq!(trailer_line(b"\rX"), Err(BARE_CR));
        assert_eq!(trailer_line(b"X: a\x00b\r\n"), Err(CONTROL));
        let malformed = "a trailer line is not `name: value`";
        assert_eq!(trailer_line(b"X : 1\r\n"), Err(malformed));
        assert_eq!(trailer_line(b" folded\r\n"), Err(malformed));
        assert_eq!(trailer_line(b"\tfolded\r\n"), Err(malformed));
        assert_eq!(trailer_line(b"no colon\r\n"), Err(malformed));
        assert_eq!(trailer_line(b"X\r\n"), Err(malformed));
        assert_eq!(trailer_line(b": 1\r\n"), Err(malformed));
        assert_eq!(trailer_line(b"X(y): 1\r\n"), Err(malformed));
    }
}
