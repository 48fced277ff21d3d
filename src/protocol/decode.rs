//! The request decoder.
//!
//! Hand-written rather than taken from `redis-protocol` because requests come
//! from untrusted clients and that crate re-parses a partial frame from its
//! first byte after every read (quadratic on a dribbled pipeline), accepts any
//! declared length (`*20000000`, `$2000000000` just wait for bytes), recurses
//! on nested arrays and rejects inline commands. Requests are only ever flat
//! arrays of bulk strings, or inline lines, so the decoder is a small
//! resumable state machine: it remembers how far a partial frame got and
//! never scans a byte twice.
//!
//! Errors use Redis's wording (`networking.c`), so clients and tests that
//! match on them keep working; every protocol error closes the connection.

use bytes::{Bytes, BytesMut};
use std::ops::Range;

use super::inline::split_inline;
use super::request::Request;

/// Longest inline command or `*`/`$` header line Redis accepts
/// (`PROTO_INLINE_MAX_SIZE`).
pub const MAX_INLINE: usize = 64 * 1024;
/// Most arguments one request may declare. Redis allows up to `INT_MAX` and
/// relies on the query-buffer limit; a limiter never needs a million
/// arguments, so an absurd count is refused before any byte of it arrives.
pub const MAX_MULTIBULK: i64 = 1024 * 1024;
/// Before AUTH, Redis refuses requests with more than 10 arguments or a bulk
/// over 16 KiB, so an unauthenticated client cannot make the server buffer
/// much on its behalf.
pub const UNAUTH_MAX_ARGS: i64 = 10;
pub const UNAUTH_MAX_BULK: i64 = 16 * 1024;
/// A bulk at least this long gets buffer room reserved ahead of its bytes,
/// as Redis does (`PROTO_MBULK_BIG_ARG`), instead of growing read by read...
const BIG_ARG: usize = 32 * 1024;
/// ...but never more than this at once: a client that only *declares* a
/// huge bulk must not make the server allocate it before the bytes arrive.
const MAX_RESERVE: usize = 1024 * 1024;

/// A malformed request. Each closes the connection after its `-ERR` reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    #[error("Protocol error: expected '$', got '{}'", show_byte(*.0))]
    ExpectedBulk(u8),
    #[error("Protocol error: expected CRLF after bulk string")]
    MissingCrlf,
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulk,
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulk,
}

fn show_byte(b: u8) -> String {
    if b.is_ascii_graphic() || b == b' ' {
        (b as char).to_string()
    } else {
        format!("\\x{b:02x}")
    }
}

/// Limits the decoder enforces; the connection sets them from the config.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `--proto-max-bulk-len`.
    pub max_bulk_len: i64,
    /// Apply the pre-AUTH caps (a password is set and not yet given).
    pub unauthenticated: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            unauthenticated: false,
        }
    }
}

/// Where a partial multibulk request stands.
#[derive(Debug, Default)]
struct Partial {
    /// Declared argument count; 0 while no `*` header has been read.
    expected: usize,
    /// Offset (from the frame's first byte) of the next unread byte.
    pos: usize,
    /// Declared length of the bulk whose header has been read.
    bulk_len: Option<usize>,
}

/// Incremental request decoder; one per connection.
#[derive(Debug, Default)]
pub struct Decoder {
    partial: Partial,
    /// Argument spans of the current frame, relative to its first byte.
    /// Reused across requests so decoding allocates nothing per request.
    spans: Vec<Range<usize>>,
    /// How far a line search (inline command or header) already looked, so a
    /// line dribbled byte by byte is scanned once, not once per read.
    scanned: usize,
    /// Unescaped arguments of an inline command with quotes.
    scratch: Vec<u8>,
    /// Bytes consumed in total: lets a test prove parsing is linear.
    bytes_scanned: u64,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Total bytes the decoder has examined: equal to the input size however
    /// it was split into reads, since no byte is scanned twice.
    pub fn bytes_scanned(&self) -> u64 {
        self.bytes_scanned
    }

    /// True while a request has begun but not finished arriving.
    pub fn in_progress(&self) -> bool {
        self.partial.expected != 0
    }

    /// Decodes the next complete request at the front of `buf`, removing its
    /// bytes. `Ok(None)` means more bytes are needed; what was scanned so far
    /// is remembered. Empty lines and `*0`/`*-1` headers are skipped, as
    /// Redis skips them.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        limits: Limits,
    ) -> Result<Option<Request<'_>>, ProtocolError> {
        loop {
            if self.partial.expected == 0 {
                let Some(&first) = buf.first() else {
                    return Ok(None);
                };
                if first != b'*' {
                    match self.decode_inline(buf)? {
                        InlineStep::NeedMore => return Ok(None),
                        InlineStep::Skipped => continue,
                        InlineStep::Done(frame) => {
                            return Ok(Some(Request::new(frame, &self.spans)))
                        }
                    }
                }
                let Some(next) = self.header_line(buf, 0)? else {
                    return Ok(None);
                };
                let count = parse_header(buf, 0, next)
                    .filter(|&n| n <= MAX_MULTIBULK)
                    .ok_or(ProtocolError::InvalidMultibulkLength)?;
                if count <= 0 {
                    self.consume(buf, next);
                    continue;
                }
                if limits.unauthenticated && count > UNAUTH_MAX_ARGS {
                    return Err(ProtocolError::UnauthenticatedMultibulk);
                }
                self.spans.clear();
                self.spans.reserve((count as usize).min(64));
                self.partial = Partial {
                    expected: count as usize,
                    pos: next,
                    bulk_len: None,
                };
            }
            return self.decode_multibulk(buf, limits);
        }
    }

    fn decode_multibulk(
        &mut self,
        buf: &mut BytesMut,
        limits: Limits,
    ) -> Result<Option<Request<'_>>, ProtocolError> {
        if self.partial.bulk_len.is_none() {
            self.whole_args(buf, limits);
        }
        while self.spans.len() < self.partial.expected {
            let pos = self.partial.pos;
            let len = match self.partial.bulk_len {
                Some(len) => len,
                None => {
                    let Some(&first) = buf.get(pos) else {
                        return Ok(None);
                    };
                    if first != b'$' {
                        return Err(ProtocolError::ExpectedBulk(first));
                    }
                    let Some(next) = self.header_line(buf, pos)? else {
                        return Ok(None);
                    };
                    let len = parse_header(buf, pos, next)
                        .filter(|&n| (0..=limits.max_bulk_len).contains(&n))
                        .ok_or(ProtocolError::InvalidBulkLength)?;
                    if limits.unauthenticated && len > UNAUTH_MAX_BULK {
                        return Err(ProtocolError::UnauthenticatedBulk);
                    }
                    let len = len as usize;
                    self.partial.pos = next;
                    self.partial.bulk_len = Some(len);
                    if len >= BIG_ARG {
                        let missing = next
                            .saturating_add(len)
                            .saturating_add(2)
                            .saturating_sub(buf.len());
                        buf.reserve(missing.min(MAX_RESERVE));
                    }
                    len
                }
            };
            let start = self.partial.pos;
            let end = start + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtocolError::MissingCrlf);
            }
            self.spans.push(start..end);
            self.partial.pos = end + 2;
            self.partial.bulk_len = None;
        }
        let frame_len = self.partial.pos;
        self.partial = Partial::default();
        self.bytes_scanned += frame_len as u64;
        self.scanned = 0;
        let frame = buf.split_to(frame_len).freeze();
        Ok(Some(Request::new(frame, &self.spans)))
    }

    /// Takes the arguments that have wholly arrived and are framed as
    /// nearly every client frames them (`$`, a length of up to ten digits
    /// without a leading zero, CRLF, the bytes, CRLF, within the length
    /// limits and under `BIG_ARG`), reading each header once, where the
    /// general loop finds the line's end, then parses it, and keeps its
    /// place in the decoder after every step (callgrind: 957 to 698
    /// instructions a decode of `RL.ALLOW`'s six arguments). At anything
    /// else it stops and leaves the rest to that loop, which answers it as
    /// Redis does.
    #[inline]
    fn whole_args(&mut self, buf: &[u8], limits: Limits) {
        let max = match limits.unauthenticated {
            true => limits.max_bulk_len.min(UNAUTH_MAX_BULK),
            false => limits.max_bulk_len,
        };
        let max = max.clamp(0, BIG_ARG as i64 - 1) as u64;
        let mut pos = self.partial.pos;
        while self.spans.len() < self.partial.expected {
            let Some([b'$', rest @ ..]) = buf.get(pos..) else {
                break;
            };
            // The length and the digits' count in one pass; an eleventh
            // digit stops it (the limits are far below ten digits).
            let (mut len, mut digits) = (0u64, 0);
            while let Some(&d @ b'0'..=b'9') = rest.get(digits) {
                if digits == 10 {
                    break;
                }
                len = len * 10 + u64::from(d - b'0');
                digits += 1;
            }
            if rest.get(digits..digits + 2) != Some(b"\r\n")
                || digits == 0
                || (rest[0] == b'0' && digits > 1)
                || len > max
            {
                break;
            }
            let start = pos + 1 + digits + 2;
            let end = start + len as usize;
            if buf.get(end..end + 2) != Some(b"\r\n") {
                break;
            }
            self.spans.push(start..end);
            pos = end + 2;
        }
        if pos != self.partial.pos {
            self.partial.pos = pos;
            self.scanned = 0;
        }
    }

    /// Finds the `\r` ending the header line that starts at `start`,
    /// resuming where the previous search stopped. Returns the offset two
    /// bytes past it, once both bytes have arrived.
    fn header_line(
        &mut self,
        buf: &BytesMut,
        start: usize,
    ) -> Result<Option<usize>, ProtocolError> {
        let from = self.scanned.max(start + 1);
        let rest = &buf[from..];
        // A header line is a few bytes (`$8\r\n`): a byte loop finds its
        // end before `memchr`'s set-up is paid for; past `SHORT`, it is on.
        const SHORT: usize = 8;
        let found = match rest.iter().take(SHORT).position(|&b| b == b'\r') {
            Some(i) => Some(i),
            None if rest.len() > SHORT => memchr::memchr(b'\r', &rest[SHORT..]).map(|i| i + SHORT),
            None => None,
        };
        match found {
            Some(i) => {
                let cr = from + i;
                if cr + 1 >= buf.len() {
                    // The `\n` has not arrived yet; look at the `\r` again.
                    self.scanned = cr;
                    return Ok(None);
                }
                self.scanned = 0;
                Ok(Some(cr + 2))
            }
            None => {
                self.scanned = buf.len();
                if buf.len() - start > MAX_INLINE {
                    Err(if start == 0 {
                        ProtocolError::TooBigMultibulkCount
                    } else {
                        ProtocolError::TooBigBulkCount
                    })
                } else {
                    Ok(None)
                }
            }
        }
    }

    fn decode_inline(&mut self, buf: &mut BytesMut) -> Result<InlineStep, ProtocolError> {
        let from = self.scanned;
        // Redis finds the end of an inline line with strchr, which stops at a
        // NUL byte: a line holding one never ends and runs into the size cap.
        // Doing the same closes a desynchronised binary stream quickly.
        let nl = match memchr::memchr2(b'\n', 0, &buf[from..]) {
            Some(i) if buf[from + i] == b'\n' => Some(from + i),
            Some(_) => None,
            None => {
                self.scanned = buf.len();
                None
            }
        };
        let Some(nl) = nl else {
            if buf.len() > MAX_INLINE {
                return Err(ProtocolError::TooBigInline);
            }
            return Ok(InlineStep::NeedMore);
        };
        self.scanned = 0;
        self.bytes_scanned += nl as u64 + 1;
        let line_end = if nl > 0 && buf[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        self.spans.clear();
        self.scratch.clear();
        let needs_copy = split_inline(&buf[..line_end], &mut self.spans, &mut self.scratch)
            .map_err(|_| ProtocolError::UnbalancedQuotes)?;
        let line = buf.split_to(nl + 1).freeze();
        if self.spans.is_empty() {
            return Ok(InlineStep::Skipped);
        }
        let frame = if needs_copy {
            Bytes::copy_from_slice(&self.scratch)
        } else {
            line
        };
        Ok(InlineStep::Done(frame))
    }

    fn consume(&mut self, buf: &mut BytesMut, n: usize) {
        let _ = buf.split_to(n);
        self.bytes_scanned += n as u64;
        self.scanned = 0;
    }
}

enum InlineStep {
    NeedMore,
    Skipped,
    Done(Bytes),
}

/// Parses the length in the header line `buf[start..next]` (`*n\r\n` or
/// `$n\r\n`) the way Redis's `string2ll` does: optional `-`, digits, no `+`,
/// no leading zeros, no spaces, within `i64`; the line must end in CRLF.
fn parse_header(buf: &[u8], start: usize, next: usize) -> Option<i64> {
    if buf[next - 1] != b'\n' {
        return None;
    }
    // Nearly every header is one or two digits: read those directly.
    match buf[start + 1..next - 2] {
        [d @ b'0'..=b'9'] => Some(i64::from(d - b'0')),
        [t @ b'1'..=b'9', u @ b'0'..=b'9'] => Some(i64::from(t - b'0') * 10 + i64::from(u - b'0')),
        ref digits => crate::util::parse_i64(digits),
    }
}
