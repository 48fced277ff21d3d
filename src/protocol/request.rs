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

    /// The arguments `which`: their spans in the frame, and the bytes
    /// from the first's start to the last's end.
    fn run_of(&self, which: Range<usize>) -> Option<(&'a [Range<usize>], &[u8])> {
        let spans = self.spans.get(which)?;
        let bytes = self.frame.get(spans.first()?.start..spans.last()?.end)?;
        Some((spans, bytes))
    }

    /// The request embedded from argument `from` on (`ACL DRYRUN user
    /// GET key`'s `GET key`), sharing the frame.
    pub fn tail(&self, from: usize) -> Request<'a> {
        Request {
            frame: self.frame.clone(),
            spans: &self.spans[from.min(self.spans.len())..],
        }
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

/// A value derived from a run of a request's arguments, kept with their
/// bytes, to be had again without deriving it when a later request
/// repeats them: the command a name stands for (`cmd/registry/spec.rs`),
/// a limiter command's limit (`cmd/limit/parse.rs`). Only for a value
/// that is a function of those bytes alone.
#[derive(Debug)]
pub struct ArgsMemo<T> {
    /// The bytes from the first argument kept to the end of the last (the
    /// framing between them included).
    bytes: Vec<u8>,
    /// Where each of those arguments is in `bytes`: start and length.
    spans: Vec<(u8, u8)>,
    value: Option<T>,
}

impl<T> Default for ArgsMemo<T> {
    fn default() -> Self {
        ArgsMemo {
            bytes: Vec::new(),
            spans: Vec::new(),
            value: None,
        }
    }
}

impl<T: Copy> ArgsMemo<T> {
    /// Most bytes kept: the offsets fit a byte, and a command's name or a
    /// limit's arguments fit in far fewer.
    const MAX: usize = 255;

    /// The value, if `req`'s arguments `which` are the ones it was kept
    /// for: the same bytes, each argument at the same place in them.
    /// (Equal bytes alone are not enough: a copied inline request keeps
    /// its arguments side by side, and `12 34` is `123 4` cut elsewhere.)
    pub fn get(&self, req: &Request<'_>, which: Range<usize>) -> Option<T> {
        let value = self.value?;
        let (spans, bytes) = req.run_of(which)?;
        if spans.len() != self.spans.len() || bytes != &self.bytes[..] {
            return None;
        }
        let base = spans[0].start;
        spans
            .iter()
            .zip(&self.spans)
            .all(|(s, &(at, len))| s.start - base == usize::from(at) && s.len() == usize::from(len))
            .then_some(value)
    }

    /// Keeps `value` for `req`'s arguments `which`, unless they are too
    /// long to be worth it (then nothing is kept).
    pub fn put(&mut self, req: &Request<'_>, which: Range<usize>, value: T) {
        self.value = None;
        self.bytes.clear();
        self.spans.clear();
        let Some((spans, bytes)) = req.run_of(which).filter(|(_, b)| b.len() <= Self::MAX) else {
            return;
        };
        let base = spans[0].start;
        self.spans.extend(
            spans
                .iter()
                .map(|s| ((s.start - base) as u8, s.len() as u8)),
        );
        self.bytes.extend_from_slice(bytes);
        self.value = Some(value);
    }
}
