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
//! reconnects within them resumes where it stopped. It holds them in
//! blocks of [`BLOCK`] bytes, allocated as the stream grows (the size is
//! a bound, not an allocation) and immutable once full, so the feeders
//! read them without holding up the writers.
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

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use super::entry::Entry;

// Every frame kind of the stream, in one list: the writes the store logs
// (1-5) and the full copy's (16, 17), which replication and the
// append-only file send and read.

/// A key's state after a write: key, then its snapshot record.
pub const SET: u8 = 1;
/// A key removed.
pub const DEL: u8 = 2;
/// Every key removed (`FLUSHALL`).
pub const FLUSH: u8 = 3;
/// The primary's heartbeat (`repl-ping-replica-period`).
pub const PING: u8 = 4;
/// The primary asks for an acknowledgement (`WAIT`).
pub const GETACK: u8 = 5;
/// A record of the full copy: applied, not part of the stream's offsets.
pub const SNAP: u8 = 16;
/// The full copy is complete: the replica is in sync from here.
pub const SYNCED: u8 = 17;
/// Bytes before a frame's body.
pub const HEADER: usize = 5;

/// The backlog grows and shrinks by blocks of this many bytes, as the
/// stream does (Redis grows its backlog in blocks too), so a
/// `--repl-backlog-size` is a bound, never an allocation. It is also the
/// most a reader copies while it holds the writers' lock: a full block is
/// never written again, and is read outside the lock.
pub const BLOCK: usize = 16 * 1024;

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
    frame(buf, SET, |b| super::codec::encode(b, key, entry));
}

/// Splits the first whole frame off `buf`: (kind, body, bytes taken).
pub fn next_frame(buf: &[u8]) -> Option<(u8, &[u8], usize)> {
    let head = buf.get(..HEADER)?;
    let len = u32::from_le_bytes(head[1..].try_into().ok()?) as usize;
    let body = buf.get(HEADER..HEADER + len)?;
    Some((head[0], body, HEADER + len))
}

/// A frame that could not be applied: a replica drops its link and starts
/// over; the append-only file refuses to load.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("unknown frame kind {0}")]
    Kind(u8),
    #[error("bad record: {0}")]
    Record(#[from] super::codec::ErrorKind),
}

/// Whether `kind` is a frame of the stream (not of a replica's full copy).
pub fn is_stream_kind(kind: u8) -> bool {
    matches!(kind, SET | DEL | FLUSH | PING | GETACK)
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
    /// The writers' lock: taken under a shard's lock by every logged
    /// write, so no reader holds it longer than a copy of [`BLOCK`] bytes.
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

/// The backlog: the newest bytes of the stream, in blocks.
#[derive(Debug, Default)]
struct Ring {
    /// Full blocks, oldest first, each [`BLOCK`] bytes. Never written
    /// again: a reader takes one (a reference count) and copies from it
    /// after letting the lock go.
    full: VecDeque<Bytes>,
    /// The block being filled (capacity [`BLOCK`]).
    tail: BytesMut,
    /// An evicted block nobody reads any more, to be the next `tail`.
    spare: Option<BytesMut>,
    /// Number of the first byte of `full[0]` (of `tail` without one).
    start: u64,
    /// Number of the last byte written (0: none yet).
    end: u64,
    /// The backlog's size, `--repl-backlog-size`; 0: no backlog.
    size: usize,
    /// No byte before this one is held: a backlog made larger does not
    /// take back the bytes it had let go, though a block may still hold
    /// them.
    floor: u64,
    /// The append-only file takes the stream: every byte is also kept in
    /// `captured` until its writer takes it (`persist/aof/`), under this
    /// same lock, so the file holds the stream in the order of its offsets.
    capture: bool,
    captured: Vec<u8>,
}

/// What one step of a read took under the lock.
enum Piece {
    /// Part of a full block, shared.
    Block(Bytes),
    /// This many bytes of the block being filled, copied out.
    Copied(usize),
}

/// A replica asked for bytes the backlog no longer (or never) held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

thread_local! {
    /// Where an effect is encoded before the ring's lock is taken; while
    /// this thread holds its effects ([`Effects::hold`]), where they wait.
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch { buf: Vec::new(), held: false })
    };
}

struct Scratch {
    buf: Vec<u8>,
    held: bool,
}

/// A thread's effects, held back from the stream until the run that made
/// them is known to count: a script run that may be stopped, rolled back
/// and run again must reach replicas and the append-only file once, as
/// the run that counts, never as its abandoned tries and their undoing.
/// Dropped, it sends what it holds (a panic mid-run leaves the keys as
/// written, and replicas must follow them); [`Held::discard`] forgets it.
/// Release it before the shard locks its writes were made under, so each
/// key's frames stay in the order of its writes.
#[must_use = "effects are held until the guard is dropped"]
pub struct Held<'a> {
    effects: &'a Effects,
}

impl Held<'_> {
    /// Forgets what was held since the guard was made, and goes on holding
    /// (a run stopped and rolled back; the next one starts clean).
    pub fn discard(&self) {
        SCRATCH.with(|s| s.borrow_mut().buf.clear());
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            s.held = false;
            if !s.buf.is_empty() {
                self.effects.append(&s.buf);
            }
            s.buf.clear();
            // A script that wrote 200,000 keys does not keep its frames'
            // room on this thread for good.
            if s.buf.capacity() > BLOCK {
                s.buf = Vec::new();
            }
        });
    }
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

    /// Creates the backlog, at most `size` bytes, if there is none (its
    /// offset goes on from where the stream is). Nothing is allocated
    /// until the stream brings bytes.
    pub fn activate(&self, size: usize) {
        let mut r = self.ring.lock();
        if r.size == 0 {
            r.size = size.max(1);
            r.start = r.end + 1;
        }
    }

    /// Whether the backlog exists.
    pub fn active(&self) -> bool {
        self.ring.lock().size > 0
    }

    /// Resizes the backlog, keeping its newest bytes; a smaller one gives
    /// its oldest blocks back at once, a larger one grows as the stream
    /// does.
    pub fn resize(&self, size: usize) {
        let mut r = self.ring.lock();
        if r.size == 0 {
            return;
        }
        r.floor = r.first();
        r.size = size.max(1);
        r.evict();
    }

    /// Forgets the backlog's bytes and sets the offset (a replica taking
    /// its primary's stream from a full copy).
    pub fn reset(&self, offset: u64) {
        let mut r = self.ring.lock();
        r.end = offset;
        r.clear();
        self.offset.store(offset, Ordering::Release);
    }

    /// `master_repl_offset`: the number of the last byte in the stream.
    pub fn offset(&self) -> u64 {
        self.offset.load(Ordering::Acquire)
    }

    /// (size, first byte held, bytes held) for `INFO`.
    pub fn backlog(&self) -> (usize, u64, usize) {
        let r = self.ring.lock();
        (r.size, r.first(), r.held())
    }

    /// Logs `key`'s new state (`None`: deleted). Called under the key's
    /// shard lock, only while [`Effects::emitting`].
    pub fn put(&self, key: &[u8], entry: Option<&Entry>) {
        SCRATCH.with(|s| {
            let s = &mut *s.borrow_mut();
            if !s.held {
                s.buf.clear();
            }
            match entry {
                Some(e) => set_frame(&mut s.buf, key, e),
                None => frame(&mut s.buf, DEL, |b| b.extend_from_slice(key)),
            }
            if !s.held {
                self.append(&s.buf);
            }
        });
    }

    /// Logs a frame with no body (FLUSH, PING, GETACK).
    pub fn put_bare(&self, kind: u8) {
        let frame = [kind, 0, 0, 0, 0];
        let held = SCRATCH.with(|s| {
            let s = &mut *s.borrow_mut();
            if s.held {
                s.buf.extend_from_slice(&frame);
            }
            s.held
        });
        if !held {
            self.append(&frame);
        }
    }

    /// Holds this thread's effects back until the guard is dropped (see
    /// [`Held`]). Not nested: a run holds once.
    pub fn hold(&self) -> Held<'_> {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            debug_assert!(!s.held, "effects held twice on one thread");
            s.held = true;
            s.buf.clear();
        });
        Held { effects: self }
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
        self.read_with(from, max, |b| out.extend_from_slice(b))
    }

    /// [`Effects::read`], handing the bytes to `sink` piece by piece.
    /// `sink` never runs under the writers' lock: a reader takes a full
    /// block's reference, or copies at most [`BLOCK`] bytes of the block
    /// being filled, then lets the lock go before it copies out, so a
    /// feeder's copy never holds up a write on any shard.
    pub fn read_with(
        &self,
        from: u64,
        max: usize,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<usize, Gone> {
        if max == 0 {
            // Nothing to copy, but a position outside the ring is still
            // gone (the loop below, which checks it, would not run).
            let r = self.ring.lock();
            return if from > r.end + 1 || from < r.first() {
                Err(Gone)
            } else {
                Ok(0)
            };
        }
        let mut done = 0usize;
        let mut at = from;
        let mut tail = [0u8; BLOCK];
        while done < max {
            // A full block's reference, or the length copied out of the
            // block being filled; either way the lock goes before `sink`.
            let piece = {
                let r = self.ring.lock();
                if at > r.end + 1 || at < r.first() {
                    // Evicted while this read went on: what was read stands.
                    return if done == 0 { Err(Gone) } else { Ok(done) };
                }
                let want = usize::try_from(r.end + 1 - at)
                    .unwrap_or(usize::MAX)
                    .min(max - done);
                if want == 0 {
                    break;
                }
                let tail_start = r.end + 1 - r.tail.len() as u64;
                if at >= tail_start {
                    let off = (at - tail_start) as usize;
                    tail[..want].copy_from_slice(&r.tail[off..off + want]);
                    Piece::Copied(want)
                } else {
                    let i = ((at - r.start) / BLOCK as u64) as usize;
                    let off = ((at - r.start) % BLOCK as u64) as usize;
                    let block = &r.full[i];
                    Piece::Block(block.slice(off..block.len().min(off + want)))
                }
            };
            let n = match piece {
                Piece::Block(block) => {
                    sink(&block);
                    block.len()
                }
                Piece::Copied(n) => {
                    sink(&tail[..n]);
                    n
                }
            };
            done += n;
            at += n as u64;
        }
        Ok(done)
    }

    /// Starts or stops keeping the stream for the append-only file; what
    /// was kept and not taken is dropped when it stops.
    pub fn set_capture(&self, on: bool) {
        let mut r = self.ring.lock();
        r.capture = on;
        if !on {
            r.captured = Vec::new();
        }
    }

    /// Moves what was kept for the append-only file since the last take to
    /// the end of `out` (a swap when `out` is empty: the lock is held for
    /// no copy); returns the number of the last byte taken.
    pub fn take_captured(&self, out: &mut Vec<u8>) -> u64 {
        let mut r = self.ring.lock();
        if out.is_empty() {
            std::mem::swap(out, &mut r.captured);
        } else {
            out.extend_from_slice(&r.captured);
            r.captured.clear();
        }
        r.end
    }

    /// Whether byte `from` on is still held (a partial resync can start
    /// there).
    pub fn holds_from(&self, from: u64) -> bool {
        let r = self.ring.lock();
        r.size > 0 && from <= r.end + 1 && from >= r.first()
    }
}

impl Ring {
    /// Bytes of the stream the backlog holds: the newest `size`.
    fn held(&self) -> usize {
        (self.end + 1 - self.first()) as usize
    }

    /// Number of the first byte held.
    fn first(&self) -> u64 {
        let in_blocks = (self.end + 1 - self.start).min(self.size as u64);
        (self.end + 1 - in_blocks).max(self.floor)
    }

    fn clear(&mut self) {
        self.full.clear();
        self.tail.clear();
        self.start = self.end + 1;
    }

    fn write(&mut self, mut bytes: &[u8]) {
        self.end += bytes.len() as u64;
        if self.capture {
            self.captured.extend_from_slice(bytes);
        }
        if self.size == 0 {
            self.start = self.end + 1;
            return;
        }
        if bytes.len() >= self.size {
            // Only its newest `size` bytes will be held.
            self.clear();
            bytes = &bytes[bytes.len() - self.size..];
            self.start = self.end + 1 - bytes.len() as u64;
        }
        while !bytes.is_empty() {
            if self.tail.capacity() == 0 {
                self.tail = self
                    .spare
                    .take()
                    .unwrap_or_else(|| BytesMut::with_capacity(BLOCK));
            }
            let take = (BLOCK - self.tail.len()).min(bytes.len());
            self.tail.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.tail.len() == BLOCK {
                let block = std::mem::take(&mut self.tail).freeze();
                self.full.push_back(block);
            }
        }
        self.evict();
    }

    /// Drops the oldest blocks no byte held is in.
    fn evict(&mut self) {
        while let Some(front) = self.full.front() {
            if self.start + front.len() as u64 > self.first() {
                break;
            }
            self.start += front.len() as u64;
            if let Some(block) = self.full.pop_front() {
                // A block no reader holds is the next tail's memory.
                if let Ok(mut m) = block.try_into_mut() {
                    if m.capacity() >= BLOCK {
                        m.clear();
                        self.spare = Some(m);
                    }
                }
            }
        }
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

    /// `--repl-backlog-size 100gb` used to allocate 100 GiB, zero-filled,
    /// at the first PSYNC (the process aborted); the backlog now takes
    /// blocks as the stream brings bytes.
    #[test]
    fn a_huge_backlog_takes_only_what_the_stream_brings() {
        let e = Effects::default();
        e.activate(100 << 30);
        assert_eq!(e.ring.lock().full.len(), 0);
        let bytes: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        e.append(&bytes);
        assert_eq!(stream(&e, 1).unwrap(), bytes);
        {
            let r = e.ring.lock();
            assert_eq!(r.full.len(), 100_000 / BLOCK);
            assert!(r.tail.capacity() <= 2 * BLOCK, "{}", r.tail.capacity());
        }
        assert_eq!(e.backlog(), (100 << 30, 1, 100_000));
    }

    /// Blocks go back as the stream moves past the size, and come back
    /// to be filled again rather than allocated.
    #[test]
    fn evicted_blocks_are_reused() {
        let e = Effects::default();
        e.activate(2 * BLOCK);
        for _ in 0..20 {
            e.append(&[7; BLOCK]);
        }
        let r = e.ring.lock();
        assert!(r.full.len() <= 3, "{}", r.full.len());
        assert!(r.spare.is_some() || r.tail.capacity() >= BLOCK);
    }

    /// A reader copying out a full block (here: a sink that waits) does
    /// not hold up a writer: the writer appends while the reader is in
    /// the middle of its copy. With the copy made under the writers' lock
    /// (as it was, up to 256 KiB a time) the writer waited for it, and
    /// this test deadlocked (the reader waits for the writer's append).
    #[test]
    fn a_reader_copying_out_does_not_hold_up_writers() {
        use std::sync::mpsc;
        use std::time::Duration;
        let e = std::sync::Arc::new(Effects::default());
        e.activate(1 << 20);
        e.append(&vec![1; 8 * BLOCK]);
        let (appended_tx, appended_rx) = mpsc::channel::<()>();
        let (start_tx, start_rx) = mpsc::channel::<()>();
        let writer = {
            let e = e.clone();
            std::thread::spawn(move || {
                start_rx.recv().unwrap();
                e.append(b"written while a reader copies");
                appended_tx.send(()).unwrap();
            })
        };
        let mut pieces = 0;
        let mut got = Vec::new();
        let n = e
            .read_with(1, usize::MAX, |b| {
                if pieces == 0 {
                    start_tx.send(()).unwrap();
                    appended_rx
                        .recv_timeout(Duration::from_secs(10))
                        .expect("the writer appended while the reader copied");
                }
                pieces += 1;
                got.extend_from_slice(b);
            })
            .unwrap();
        writer.join().unwrap();
        assert_eq!(n, got.len());
        assert_eq!(&got[..8 * BLOCK], &vec![1; 8 * BLOCK][..]);
        assert_eq!(&got[8 * BLOCK..], b"written while a reader copies");
        assert!(pieces >= 9, "{pieces}");
    }

    /// Random appends, resizes and reads against a plain vector of the
    /// whole stream.
    #[test]
    fn the_ring_reads_as_the_stream_it_was_written() {
        use proptest::prelude::*;
        #[derive(Debug, Clone)]
        enum Op {
            Append(usize),
            Resize(usize),
            Read(u64, usize),
        }
        let op = prop_oneof![
            6 => (0usize..3 * BLOCK).prop_map(Op::Append),
            1 => (1usize..6 * BLOCK).prop_map(Op::Resize),
            3 => (0u64..40 * BLOCK as u64, 0usize..4 * BLOCK).prop_map(|(f, m)| Op::Read(f, m)),
        ];
        proptest!(|(size in 1usize..5 * BLOCK, ops in proptest::collection::vec(op, 1..60))| {
            let e = Effects::default();
            e.activate(size);
            let mut size = size;
            let mut all: Vec<u8> = Vec::new();
            // What the backlog holds: the newest bytes, up to its size
            // when they were written (a larger size takes none back).
            let mut held = 0usize;
            for op in ops {
                match op {
                    Op::Append(n) => {
                        let bytes: Vec<u8> =
                            (0..n).map(|i| (all.len() + i) as u8 ^ (n as u8)).collect();
                        e.append(&bytes);
                        all.extend_from_slice(&bytes);
                        held = (held + n).min(size);
                    }
                    Op::Resize(n) => {
                        e.resize(n);
                        size = n;
                        held = held.min(size);
                    }
                    Op::Read(from, max) => {
                        let end = all.len() as u64;
                        let from = 1 + from % (end + 2);
                        let held = held as u64;
                        let mut out = Vec::new();
                        let got = e.read(from, max, &mut out);
                        if from > end + 1 || from + held < end + 1 {
                            prop_assert_eq!(got, Err(Gone));
                        } else {
                            let n = ((end + 1 - from) as usize).min(max);
                            prop_assert_eq!(got, Ok(n));
                            let at = (from - 1) as usize;
                            prop_assert_eq!(&out[..], &all[at..at + n]);
                        }
                        prop_assert_eq!(e.holds_from(from), from <= end + 1 && from + held > end);
                    }
                }
                prop_assert_eq!(e.offset(), all.len() as u64);
                let (s, first, h) = e.backlog();
                prop_assert_eq!(s, size);
                prop_assert_eq!(h, held);
                prop_assert_eq!(first, all.len() as u64 + 1 - held as u64);
                // Memory: what `size` needs, plus at most two blocks.
                let r = e.ring.lock();
                prop_assert!(r.full.len() * BLOCK <= size + BLOCK, "{} blocks", r.full.len());
            }
        });
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
