//! The effects log: every change to the keyspace, as the state it left,
//! in the order it happened, for replicas.
//!
//! A limiter's decision depends on the primary's clock, so a replica must
//! not run the command again: it is sent the key's resulting state (a
//! snapshot record, `snapshot.rs`'s encoding) or its deletion. A state is
//! idempotent, so a copy taken while writes go on, followed by the effects
//! from the copy's start, converges to the primary's keyspace whatever
//! interleaving the two had (see `replication/`).
//!
//! Effects are appended under the written key's shard lock, so two writes
//! to one key reach the log in the order they happened. The log keeps the
//! newest `--repl-backlog-size` bytes (Redis's backlog): a replica that
//! reconnects within them resumes where it stopped.
//!
//! ```text
//! frame  kind: u8  len: u32 (LE)  body[len]
//!   1 SET     body = one snapshot record (tag, key, expiry, payload)
//!   2 DEL     body = key
//!   3 FLUSH   (empty: every key goes)
//!   4 PING    (empty: the primary is alive)
//!   5 GETACK  (empty: answer REPLCONF ACK now)
//! ```
//!
//! Offsets count bytes, as Redis's do: `master_repl_offset` is the number
//! of the last byte written, the first byte being number 1.

use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use super::entry::Entry;

pub const SET: u8 = 1;
pub const DEL: u8 = 2;
pub const FLUSH: u8 = 3;
pub const PING: u8 = 4;
pub const GETACK: u8 = 5;
/// Bytes before a frame's body.
pub const HEADER: usize = 5;

/// The bytes a frame holds: kind, length, body.
pub fn frame(buf: &mut Vec<u8>, kind: u8, body: impl FnOnce(&mut Vec<u8>)) {
    let at = buf.len();
    buf.push(kind);
    buf.extend_from_slice(&[0; 4]);
    body(buf);
    let len = u32::try_from(buf.len() - at - HEADER).unwrap_or(u32::MAX);
    buf[at + 1..at + HEADER].copy_from_slice(&len.to_le_bytes());
}

/// A SET frame of `key`'s state.
pub fn set_frame(buf: &mut Vec<u8>, key: &[u8], entry: &Entry) {
    frame(buf, SET, |b| super::snapshot::encode(b, key, entry));
}

/// Splits the first whole frame off `buf`: (kind, body, bytes taken).
pub fn next_frame(buf: &[u8]) -> Option<(u8, &[u8], usize)> {
    let head = buf.get(..HEADER)?;
    let len = u32::from_le_bytes(head[1..].try_into().ok()?) as usize;
    let body = buf.get(HEADER..HEADER + len)?;
    Some((head[0], body, HEADER + len))
}

/// A wake-up for whoever waits for new effects (the replication feeders):
/// a plain function pointer so the store knows no runtime.
pub type Wake = Box<dyn Fn() + Send + Sync>;

#[derive(Default)]
pub struct Effects {
    /// Local writes are logged: this server is a primary whose backlog
    /// exists (created when its first replica attaches, as Redis's is).
    /// A replica logs what its primary sends, verbatim, instead.
    emitting: AtomicBool,
    ring: Mutex<Ring>,
    /// `ring.end`, readable without the lock.
    offset: AtomicU64,
    /// A feeder sleeps until the next append.
    waiting: AtomicBool,
    wake: OnceLock<Wake>,
}

impl std::fmt::Debug for Effects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Effects")
            .field("emitting", &self.emitting)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

/// The backlog: a ring of the newest bytes of the stream.
#[derive(Debug, Default)]
struct Ring {
    buf: Vec<u8>,
    /// Number of the last byte written (0: none yet).
    end: u64,
    /// Bytes of the stream the ring holds (up to its size).
    held: usize,
}

/// A replica asked for bytes the backlog no longer (or never) held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

thread_local! {
    /// Where an effect is encoded before the ring's lock is taken.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Effects {
    /// Whether local writes are logged (checked on every write: one load).
    #[inline]
    pub fn emitting(&self) -> bool {
        self.emitting.load(Ordering::Relaxed)
    }

    pub fn set_emitting(&self, on: bool) {
        self.emitting.store(on, Ordering::Release);
    }

    /// Sets the function that wakes sleeping feeders (once, at start).
    pub fn on_append(&self, wake: Wake) {
        let _ = self.wake.set(wake);
    }

    /// Creates the backlog, `size` bytes, if there is none (its offset
    /// goes on from where the stream is).
    pub fn activate(&self, size: usize) {
        let mut r = self.ring.lock();
        if r.buf.is_empty() {
            r.buf = vec![0; size.max(1)];
            r.held = 0;
        }
    }

    /// Whether the backlog exists.
    pub fn active(&self) -> bool {
        !self.ring.lock().buf.is_empty()
    }

    /// Resizes the backlog, keeping its newest bytes.
    pub fn resize(&self, size: usize) {
        let mut r = self.ring.lock();
        if r.buf.is_empty() || r.buf.len() == size.max(1) {
            return;
        }
        let keep = r.held.min(size.max(1));
        let mut newer = Vec::with_capacity(keep);
        let first = r.end + 1 - keep as u64;
        r.copy_into(first, keep, &mut newer);
        let mut buf = vec![0; size.max(1)];
        let end = r.end;
        for (i, b) in newer.into_iter().enumerate() {
            let n = first + i as u64;
            let at = ((n - 1) % buf.len() as u64) as usize;
            buf[at] = b;
        }
        *r = Ring {
            buf,
            end,
            held: keep,
        };
    }

    /// Forgets the backlog's bytes and sets the offset (a replica taking
    /// its primary's stream from a full copy).
    pub fn reset(&self, offset: u64) {
        let mut r = self.ring.lock();
        r.end = offset;
        r.held = 0;
        self.offset.store(offset, Ordering::Release);
    }

    /// `master_repl_offset`: the number of the last byte in the stream.
    pub fn offset(&self) -> u64 {
        self.offset.load(Ordering::Acquire)
    }

    /// (size, first byte held, bytes held) for `INFO`.
    pub fn backlog(&self) -> (usize, u64, usize) {
        let r = self.ring.lock();
        (r.buf.len(), r.end + 1 - r.held as u64, r.held)
    }

    /// Logs `key`'s new state (`None`: deleted). Called under the key's
    /// shard lock, only while [`Effects::emitting`].
    pub fn put(&self, key: &[u8], entry: Option<&Entry>) {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            s.clear();
            match entry {
                Some(e) => set_frame(&mut s, key, e),
                None => frame(&mut s, DEL, |b| b.extend_from_slice(key)),
            }
            self.append(&s);
        });
    }

    /// Logs a frame with no body (FLUSH, PING, GETACK).
    pub fn put_bare(&self, kind: u8) {
        self.append(&[kind, 0, 0, 0, 0]);
    }

    /// Appends bytes to the stream: an encoded frame, or what a replica
    /// received from its primary. Without a backlog only the offset moves.
    pub fn append(&self, bytes: &[u8]) {
        {
            let mut r = self.ring.lock();
            r.write(bytes);
            self.offset.store(r.end, Ordering::Release);
        }
        if self.waiting.load(Ordering::Acquire) && self.waiting.swap(false, Ordering::AcqRel) {
            if let Some(wake) = self.wake.get() {
                wake();
            }
        }
    }

    /// Asks for a wake-up at the next append (a feeder about to sleep);
    /// check the offset again after this, then sleep.
    pub fn want_wake(&self) {
        self.waiting.store(true, Ordering::Release);
    }

    /// Copies up to `max` bytes of the stream from byte number `from` into
    /// `out`; how many. `Err(Gone)` if the backlog no longer holds `from`.
    pub fn read(&self, from: u64, max: usize, out: &mut Vec<u8>) -> Result<usize, Gone> {
        let r = self.ring.lock();
        if from > r.end + 1 || from + (r.held as u64) < r.end + 1 {
            return Err(Gone);
        }
        let n = ((r.end + 1 - from) as usize).min(max);
        r.copy_into(from, n, out);
        Ok(n)
    }

    /// Whether byte `from` on is still held (a partial resync can start
    /// there).
    pub fn holds_from(&self, from: u64) -> bool {
        let r = self.ring.lock();
        !r.buf.is_empty() && from <= r.end + 1 && from + r.held as u64 > r.end
    }
}

impl Ring {
    fn write(&mut self, mut bytes: &[u8]) {
        let cap = self.buf.len();
        self.end += bytes.len() as u64;
        if cap == 0 {
            return;
        }
        self.held = (self.held + bytes.len()).min(cap);
        if bytes.len() > cap {
            bytes = &bytes[bytes.len() - cap..];
        }
        // The first byte of `bytes` is number end - len + 1.
        let first = self.end - bytes.len() as u64 + 1;
        let at = ((first - 1) % cap as u64) as usize;
        let head = (cap - at).min(bytes.len());
        self.buf[at..at + head].copy_from_slice(&bytes[..head]);
        self.buf[..bytes.len() - head].copy_from_slice(&bytes[head..]);
    }

    /// Appends `n` bytes from byte number `from` (held) to `out`.
    fn copy_into(&self, from: u64, n: usize, out: &mut Vec<u8>) {
        if n == 0 {
            return;
        }
        let cap = self.buf.len();
        let at = ((from - 1) % cap as u64) as usize;
        let head = (cap - at).min(n);
        out.extend_from_slice(&self.buf[at..at + head]);
        out.extend_from_slice(&self.buf[..n - head]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(e: &Effects, from: u64) -> Result<Vec<u8>, Gone> {
        let mut out = Vec::new();
        e.read(from, usize::MAX, &mut out)?;
        Ok(out)
    }

    #[test]
    fn the_ring_keeps_the_newest_bytes_with_their_offsets() {
        let e = Effects::default();
        e.activate(8);
        e.append(b"abc");
        assert_eq!(e.offset(), 3);
        assert_eq!(stream(&e, 1).unwrap(), b"abc");
        assert_eq!(stream(&e, 4).unwrap(), b"");
        assert_eq!(stream(&e, 5), Err(Gone));
        e.append(b"defghij");
        assert_eq!(e.offset(), 10);
        assert_eq!(stream(&e, 1), Err(Gone));
        assert_eq!(stream(&e, 2), Err(Gone));
        assert_eq!(stream(&e, 3).unwrap(), b"cdefghij");
        assert_eq!(stream(&e, 9).unwrap(), b"ij");
        assert_eq!(e.backlog(), (8, 3, 8));
        e.append(b"0123456789xy");
        assert_eq!(stream(&e, 16).unwrap(), b"56789xy");
        assert_eq!(stream(&e, 15).unwrap(), b"456789xy");
        assert_eq!(stream(&e, 14), Err(Gone));
        e.resize(4);
        assert_eq!(stream(&e, 19).unwrap(), b"89xy");
        assert_eq!(stream(&e, 18), Err(Gone));
        e.resize(16);
        e.append(b"z");
        assert_eq!(stream(&e, 19).unwrap(), b"89xyz");
    }

    #[test]
    fn frames_split_back_as_written() {
        let mut buf = Vec::new();
        frame(&mut buf, DEL, |b| b.extend_from_slice(b"key"));
        frame(&mut buf, PING, |_| {});
        let (k, body, n) = next_frame(&buf).unwrap();
        assert_eq!((k, body), (DEL, &b"key"[..]));
        let (k, body, m) = next_frame(&buf[n..]).unwrap();
        assert_eq!((k, body), (PING, &b""[..]));
        assert_eq!(n + m, buf.len());
        assert_eq!(next_frame(&buf[..n - 1]), None);
    }
}
