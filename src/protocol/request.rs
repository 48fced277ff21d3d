//! A decoded request: one frame of the read buffer and its argument spans.

use bytes::Bytes;
use std::ops::Range;

/// A request's arguments as views into the bytes it arrived in: nothing is
/// copied, and the spans live in the decoder's reused vector.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    frame: Bytes,
    spans: &'a [Range<usize>],
}

impl<'a> Request<'a> {
    pub(crate) fn new(frame: Bytes, spans: &'a [Range<usize>]) -> Self {
        Request { frame, spans }
    }

    /// Number of arguments, the command name included. Never zero.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Argument `i` (0 is the command name). Panics past the end, so callers
    /// index only within `len()`; the command table's arity check makes sure.
    pub fn arg(&self, i: usize) -> &[u8] {
        &self.frame[self.spans[i].clone()]
    }

    /// Argument `i` as a shared view of the frame, for a value that outlives
    /// the request without a copy.
    pub fn arg_bytes(&self, i: usize) -> Bytes {
        self.frame.slice(self.spans[i].clone())
    }

    pub fn args(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.spans.iter().map(|r| &self.frame[r.clone()])
    }

    /// The frame and the argument spans in it, to keep the request past
    /// the read buffer's next use (a transaction's queue).
    pub(crate) fn parts(&self) -> (&Bytes, &'a [Range<usize>]) {
        (&self.frame, self.spans)
    }

    /// The arguments as owned vectors, for tests and diagnostics.
    pub fn to_vecs(&self) -> Vec<Vec<u8>> {
        self.args().map(<[u8]>::to_vec).collect()
    }
}

/// A request as a client sends it (an array of bulk strings): what this
/// server sends when it is the client, a replica to its primary or a
/// cluster node to a Sentinel.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}
