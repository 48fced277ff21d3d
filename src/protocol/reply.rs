//! Reply encoding, straight into the connection's write buffer.
//!
//! Replies are written by hand rather than built as `redis-protocol` frames:
//! a frame is an owned tree (a `Vec` per array, a `Bytes` per string) built
//! only to be serialised, which costs allocations on the hot path, while the
//! RESP grammar for the handful of reply types a server sends is a few lines.
//! `benches/protocol.rs` measures both; the tests check our bytes decode with
//! `redis-protocol` to the frames we meant.

use bytes::{BufMut, BytesMut};
use std::mem::MaybeUninit;

/// The protocol a connection speaks: RESP2 until `HELLO 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

impl Protocol {
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// The write buffer of one connection: every reply of a pipelined batch is
/// appended here and written with one syscall.
#[derive(Debug, Default)]
pub struct ReplyBuf {
    buf: BytesMut,
    pub proto: Protocol,
}

/// A header line's room: prefix, sign, 19 digits and CRLF, rounded up.
const LINE: usize = 24;

/// Writes the line `prefix`, `n` in decimal, CRLF at the front of `out`
/// (at least [`LINE`] long) and returns its length. `itoa` formats into a
/// buffer of its own, which would leave a copy of variable length to make.
#[inline(always)]
fn format_line(out: &mut [MaybeUninit<u8>], prefix: u8, n: i64) -> usize {
    let mut u = n.unsigned_abs();
    // Most of a reply's numbers are short: compare before taking a log.
    let digits = match u {
        0..=9 => 1,
        10..=99 => 2,
        100..=999 => 3,
        _ => u.ilog10() as usize + 1,
    };
    let end = 1 + usize::from(n < 0) + digits;
    out[0].write(prefix);
    // The first digit's place, unless `n` is negative.
    out[1].write(b'-');
    let mut i = end;
    while u >= 100 {
        let pair = (u % 100) as usize * 2;
        u /= 100;
        i -= 2;
        out[i].write(PAIRS[pair]);
        out[i + 1].write(PAIRS[pair + 1]);
    }
    if u >= 10 {
        let pair = u as usize * 2;
        out[i - 2].write(PAIRS[pair]);
        out[i - 1].write(PAIRS[pair + 1]);
    } else {
        out[i - 1].write(b'0' + u as u8);
    }
    out[end].write(b'\r');
    out[end + 1].write(b'\n');
    end + 2
}

/// "00" to "99": two digits per division.
const PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

impl ReplyBuf {
    pub fn with_capacity(n: usize) -> Self {
        ReplyBuf {
            buf: BytesMut::with_capacity(n),
            proto: Protocol::Resp2,
        }
    }

    /// Writes on after the bytes in `buf`.
    pub fn from_bytes(buf: BytesMut, proto: Protocol) -> Self {
        ReplyBuf { buf, proto }
    }

    pub fn into_bytes(self) -> BytesMut {
        self.buf
    }

    pub fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Bytes the buffer holds, used or not.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Drops everything written after `mark` (a length from `len()`), so a
    /// handler that fails half-way leaves no partial reply behind.
    pub fn truncate(&mut self, mark: usize) {
        self.buf.truncate(mark);
    }

    /// When the reply written after `mark` (a length from `len()`) is an
    /// error, its text (without `-` and the line end), for the error
    /// counters.
    pub fn error_at(&self, mark: usize) -> Option<&[u8]> {
        match self.buf.get(mark..)? {
            [b'-', text @ .., b'\r', b'\n'] => Some(text),
            _ => None,
        }
    }

    /// The bytes written after `mark` (a length from `len()`): a script
    /// reads the reply a command gave it.
    pub fn written_since(&self, mark: usize) -> &[u8] {
        &self.buf[mark.min(self.buf.len())..]
    }

    /// A line-typed reply (`+`, `-`, `(`, `,`): the line ends at the first
    /// CR or LF a client reads, so a body holding one would let its
    /// writer forge the replies after it (a script's `{ok = ...}`,
    /// `{big_number = ...}`, an error echoing a client's argument). Like
    /// Redis, they become spaces, here, where every line is written; the
    /// scan is a look at a few bytes for a status (`+PONG`: about ten
    /// instructions, callgrind), and the copy is the same when none is
    /// there.
    #[inline]
    fn line(&mut self, prefix: u8, body: &[u8]) {
        self.buf.reserve(body.len() + 3);
        self.buf.put_u8(prefix);
        if body.iter().any(|&b| b == b'\r' || b == b'\n') {
            self.put_spaced(body);
        } else {
            self.buf.put_slice(body);
        }
        self.buf.put_slice(b"\r\n");
    }

    /// Copies `body` in with its CR and LF made spaces.
    #[cold]
    #[inline(never)]
    fn put_spaced(&mut self, body: &[u8]) {
        let at = self.buf.len();
        self.buf.put_slice(body);
        for b in &mut self.buf[at..] {
            if *b == b'\r' || *b == b'\n' {
                *b = b' ';
            }
        }
    }

    /// `prefix`, `n` and CRLF.
    fn header(&mut self, prefix: u8, n: i64) {
        self.header_lines((prefix, n), &[]);
    }

    /// A line of `prefix`, `n` and CRLF, then one `:` line for each of
    /// `ints`, written straight into the buffer's spare room after one
    /// reservation. Formatting elsewhere and copying each line in cost a
    /// `memcpy` call of variable length per line, about 110 instructions
    /// a line in all against about 35 this way; a reservation per line,
    /// about 10 more a line (callgrind).
    #[inline(always)]
    fn header_lines(&mut self, (prefix, n): (u8, i64), ints: &[i64]) {
        let room = LINE * (1 + ints.len());
        self.buf.reserve(room);
        let at = self.buf.len();
        let spare = &mut self.buf.spare_capacity_mut()[..room];
        let mut end = format_line(&mut spare[..LINE], prefix, n);
        for &i in ints {
            end += format_line(&mut spare[end..end + LINE], b':', i);
        }
        // SAFETY: `format_line` initialised the first `end` bytes of the
        // spare room, which `reserve` made `LINE` bytes for each line.
        unsafe { self.buf.set_len(at + end) };
    }

    pub fn ok(&mut self) {
        self.buf.put_slice(b"+OK\r\n");
    }

    /// A command queued by `MULTI`: one copy of a fixed line, as `ok`.
    pub fn queued(&mut self) {
        self.buf.put_slice(b"+QUEUED\r\n");
    }

    /// A status line; CR and LF become spaces ([`ReplyBuf::line`]).
    pub fn simple(&mut self, s: &str) {
        self.line(b'+', s.as_bytes());
    }

    /// A status line of any bytes (a script's `{ok = ...}`); CR and LF
    /// become spaces.
    pub fn status(&mut self, s: &[u8]) {
        self.line(b'+', s);
    }

    /// An error line; CR and LF become spaces ([`ReplyBuf::line`]), as
    /// Redis's `addReplyErrorLength` makes them.
    pub fn error(&mut self, msg: &str) {
        self.line(b'-', msg.as_bytes());
    }

    /// An error line of any bytes (a script's `{err = ...}`).
    pub fn error_bytes(&mut self, msg: &[u8]) {
        self.line(b'-', msg);
    }

    /// A big number (a script's `{big_number = ...}`): a RESP3 `(` line,
    /// a bulk string in RESP2. Its text is the script's, unchecked, as in
    /// Redis, which maps CR and LF to spaces in both protocols.
    pub fn big_number(&mut self, text: &[u8]) {
        match self.proto {
            Protocol::Resp3 => self.line(b'(', text),
            Protocol::Resp2 => {
                self.header(b'$', text.len() as i64);
                self.buf.reserve(text.len() + 2);
                self.put_spaced(text);
                self.buf.put_slice(b"\r\n");
            }
        }
    }

    pub fn int(&mut self, n: i64) {
        self.header(b':', n);
    }

    pub fn bulk(&mut self, data: &[u8]) {
        self.header(b'$', data.len() as i64);
        self.buf.reserve(data.len() + 2);
        self.buf.put_slice(data);
        self.buf.put_slice(b"\r\n");
    }

    pub fn bulk_str(&mut self, s: &str) {
        self.bulk(s.as_bytes());
    }

    /// An integer as a bulk string, as `INCR`-style counters are stored.
    pub fn bulk_int(&mut self, n: i64) {
        let mut digits = itoa::Buffer::new();
        self.bulk(digits.format(n).as_bytes());
    }

    /// The null bulk string (RESP2 `$-1`, RESP3 `_`).
    pub fn null(&mut self) {
        match self.proto {
            Protocol::Resp2 => self.buf.put_slice(b"$-1\r\n"),
            Protocol::Resp3 => self.buf.put_slice(b"_\r\n"),
        }
    }

    /// The null array (RESP2 `*-1`, RESP3 `_`).
    pub fn null_array(&mut self) {
        match self.proto {
            Protocol::Resp2 => self.buf.put_slice(b"*-1\r\n"),
            Protocol::Resp3 => self.buf.put_slice(b"_\r\n"),
        }
    }

    pub fn array(&mut self, n: usize) {
        self.header(b'*', n as i64);
    }

    /// An array header for `len` elements and its first ones, the
    /// integers `ns`, in one reservation: a limiter's reply is such an
    /// array of five.
    pub fn array_of_ints(&mut self, len: usize, ns: &[i64; 5]) {
        self.header_lines((b'*', len as i64), ns);
    }

    /// An out-of-band message of `n` items (Pub/Sub): a RESP3 push, a
    /// RESP2 array.
    pub fn push(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.header(b'*', n as i64),
            Protocol::Resp3 => self.header(b'>', n as i64),
        }
    }

    /// A map of `n` pairs; RESP2 flattens it into an array of `2n`.
    pub fn map(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.header(b'*', 2 * n as i64),
            Protocol::Resp3 => self.header(b'%', n as i64),
        }
    }

    /// A set of `n` members; RESP2 sends an array.
    pub fn set(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.header(b'*', n as i64),
            Protocol::Resp3 => self.header(b'~', n as i64),
        }
    }

    /// A double; RESP2 sends it as a bulk string, as Redis does.
    pub fn double(&mut self, d: f64) {
        let text = format_double(d);
        match self.proto {
            Protocol::Resp2 => self.bulk(text.as_bytes()),
            Protocol::Resp3 => self.line(b',', text.as_bytes()),
        }
    }

    /// A sorted set's score as Redis 7.0 writes it (`%.17g`): a bulk
    /// string in RESP2, a double in RESP3.
    pub fn score(&mut self, d: f64) {
        let mut buf = [0u8; 32];
        let text = crate::util::format_g(d, 17, &mut buf);
        match self.proto {
            Protocol::Resp2 => self.bulk(text),
            Protocol::Resp3 => self.line(b',', text),
        }
    }

    /// A RESP3 double line of text already formatted (a script's
    /// `%.17g`).
    pub fn double_text(&mut self, text: &[u8]) {
        self.line(b',', text);
    }

    /// A boolean; RESP2 sends 1 or 0.
    pub fn bool(&mut self, b: bool) {
        match self.proto {
            Protocol::Resp2 => self.int(b as i64),
            Protocol::Resp3 => self.buf.put_slice(if b { b"#t\r\n" } else { b"#f\r\n" }),
        }
    }

    /// Text for humans (INFO, CLIENT LIST): a RESP3 verbatim string of
    /// format `txt`, a bulk string in RESP2.
    pub fn verbatim(&mut self, text: &[u8]) {
        self.verbatim_as(*b"txt", text);
    }

    /// A verbatim string of `format` (RESP3's three bytes, as Redis's
    /// `addReplyVerbatim` writes them: see [`verbatim_format`]); a bulk
    /// string in RESP2. Both parts are inside its length: nothing in
    /// them can end the reply early.
    pub fn verbatim_as(&mut self, format: [u8; 3], text: &[u8]) {
        match self.proto {
            Protocol::Resp2 => self.bulk(text),
            Protocol::Resp3 => {
                self.header(b'=', text.len() as i64 + 4);
                self.buf.reserve(text.len() + 6);
                self.buf.put_slice(&format);
                self.buf.put_u8(b':');
                self.buf.put_slice(text);
                self.buf.put_slice(b"\r\n");
            }
        }
    }
}

/// A verbatim string's format as Redis 7.0's `addReplyVerbatim` makes it
/// from a C string: its first three bytes, up to a NUL, padded with
/// spaces (`"markdown"` is `mar`, `""` three spaces).
pub fn verbatim_format(name: &[u8]) -> [u8; 3] {
    let mut f = *b"   ";
    for (slot, &b) in f.iter_mut().zip(name.iter().take_while(|&&b| b != 0)) {
        *slot = b;
    }
    f
}

fn format_double(d: f64) -> String {
    if d.is_infinite() {
        if d > 0.0 { "inf" } else { "-inf" }.to_string()
    } else if d.is_nan() {
        "nan".to_string()
    } else {
        format!("{d}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn int_line(n: i64) -> String {
        let mut out = ReplyBuf::with_capacity(0);
        out.int(n);
        out.int(n);
        String::from_utf8(out.buf.to_vec()).expect("ascii")
    }

    #[test]
    fn integer_lines_at_the_edges() {
        for n in [
            0,
            1,
            -1,
            9,
            10,
            -10,
            99,
            100,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ] {
            assert_eq!(int_line(n), format!(":{n}\r\n:{n}\r\n"));
        }
    }

    proptest! {
        #[test]
        fn integer_lines_are_decimal(n in any::<i64>()) {
            prop_assert_eq!(int_line(n), format!(":{n}\r\n:{n}\r\n"));
        }
    }
}
