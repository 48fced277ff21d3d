//! The append-only file's bytes after its base: the marker, the
//! checksummed blocks the writer appends ([`encode_blocks`]), and their
//! replay at start ([`replay`]), which tells a torn last block from
//! corruption. The layout is in `persist/aof/mod.rs`'s header; files of the
//! format before the blocks (frames straight after the base) replay too.

use crate::clock::Nanos;
use crate::store::effects::{self, ApplyError};
use crate::store::snapshot::{self, ErrorKind, Loaded};
use crate::store::Store;

/// After the base: the effects follow in checksummed blocks.
pub const TAIL_MAGIC: &[u8; 8] = b"TSAOF2\r\n";
/// A block's length and the length's CRC-32, before its payload.
const BLOCK_HEAD: usize = 8;
/// The payload's CRC-32, after it.
const BLOCK_TRAILER: usize = 4;
/// A write's payload is cut into blocks of about this many bytes at most
/// (at frame boundaries: a rewrite's tail can be large).
const MAX_BLOCK: usize = 8 << 20;

/// Appends `payload` (whole frames) to `out` as checksummed blocks of at
/// most about [`MAX_BLOCK`] bytes, cut at frame boundaries.
pub fn encode_blocks(out: &mut Vec<u8>, payload: &[u8]) {
    let mut rest = payload;
    while !rest.is_empty() {
        let mut n = 0;
        while n < rest.len() && n < MAX_BLOCK {
            match effects::next_frame(&rest[n..]) {
                Some((_, _, taken)) => n += taken,
                // Not a whole frame (never, from the stream): the rest
                // as one block, as it is.
                None => n = rest.len(),
            }
        }
        let n = n.min(rest.len());
        let (body, after) = rest.split_at(n);
        let len = (body.len() as u32).to_le_bytes();
        out.extend_from_slice(&len);
        out.extend_from_slice(&crc32fast::hash(&len).to_le_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
        rest = after;
    }
}

/// What loading the file found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// The base's load (its keys, and when it was written).
    pub base: Loaded,
    /// Effects applied after the base.
    pub effects: u64,
    /// Bytes cut off a torn tail (0: none).
    pub truncated: u64,
    /// The file's length after loading, and its base's.
    pub size: u64,
    pub base_size: u64,
    /// The tail is in checksummed blocks (false: a file of the format
    /// before them, rewritten before anything is appended).
    pub checksummed: bool,
}

/// Why a replay stopped short: an error at a byte, before the file's path
/// is known.
#[derive(Debug)]
pub enum ReplayError {
    Base(ErrorKind),
    Corrupt { at: u64, why: String },
}

/// A replay: what loaded, whole (`Ok(Ok)`) or up to a torn last record
/// at a byte (`Ok(Err)`), or an error at a byte.
pub type Replay = Result<Result<Replayed, (Replayed, u64)>, ReplayError>;

/// Loaded up to byte `at`, where the last record is torn.
fn torn(mut r: Replayed, at: usize) -> Replay {
    r.size = at as u64;
    Ok(Err((r, at as u64)))
}

/// Loaded whole, `at` bytes.
fn whole(mut r: Replayed, at: usize) -> Replay {
    r.size = at as u64;
    Ok(Ok(r))
}

/// Loads a file's bytes into `store`. `Ok(Err((what loaded, at)))` when
/// the last block is torn at byte `at` (its bytes run past the end of the
/// file; or it ends the file and its payload does not check, or only
/// zeros follow, as a file extended but not written before a crash
/// reads). Nothing of a torn block is applied. The fuzz target `aof` runs
/// this on arbitrary bytes.
pub fn replay(store: &Store, bytes: &[u8], now: Nanos) -> Replay {
    let mut r = Replayed::default();
    if bytes.is_empty() {
        return whole(r, 0);
    }
    let (base, _, base_len) =
        snapshot::read_prefix(store, bytes, now).map_err(ReplayError::Base)?;
    r.base = base;
    r.base_size = base_len;
    let at = base_len as usize;
    let rest = &bytes[at..];
    if rest.starts_with(TAIL_MAGIC) {
        r.checksummed = true;
        r.base_size = (at + TAIL_MAGIC.len()) as u64;
        return replay_blocks(store, bytes, at + TAIL_MAGIC.len(), now, r);
    }
    if !rest.is_empty() && TAIL_MAGIC.starts_with(rest) {
        // The marker cut short (a rewrite never leaves this: it renames
        // a whole file in place).
        return torn(r, at);
    }
    replay_frames(store, bytes, at, now, r)
}

/// The checksummed tail: blocks from byte `at`.
fn replay_blocks(
    store: &Store,
    bytes: &[u8],
    mut at: usize,
    now: Nanos,
    mut r: Replayed,
) -> Replay {
    let corrupt = |at: usize, why: &str| ReplayError::Corrupt {
        at: at as u64,
        why: why.to_string(),
    };
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < BLOCK_HEAD || rest.iter().all(|&b| b == 0) {
            return torn(r, at);
        }
        let (len, check) = (&rest[..4], &rest[4..8]);
        if crc32fast::hash(len).to_le_bytes() != check {
            return Err(corrupt(at, "a block's length does not match its checksum"));
        }
        let n = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let end = BLOCK_HEAD + n + BLOCK_TRAILER;
        if rest.len() < end {
            // Runs past the end of the file: the write a crash cut short.
            return torn(r, at);
        }
        let payload = &rest[BLOCK_HEAD..BLOCK_HEAD + n];
        if crc32fast::hash(payload).to_le_bytes() != rest[BLOCK_HEAD + n..end] {
            if rest.len() == end {
                // The last block, its pages not all written.
                return torn(r, at);
            }
            return Err(corrupt(
                at,
                "a block's bytes do not match its checksum (changed after they were written)",
            ));
        }
        let mut p = 0;
        while p < payload.len() {
            let frame_at = at + BLOCK_HEAD + p;
            let Some((kind, body, taken)) = effects::next_frame(&payload[p..]) else {
                return Err(corrupt(frame_at, "a record runs past the end of its block"));
            };
            store
                .apply_frame(kind, body, now)
                .map_err(|e| corrupt(frame_at, &e.to_string()))?;
            r.effects += 1;
            p += taken;
        }
        at += end;
    }
    whole(r, at)
}

/// The tail of a file written before checksummed blocks: frames straight
/// after the base. A frame cut short at the end is torn; nothing else
/// can tell a flipped byte here.
fn replay_frames(
    store: &Store,
    bytes: &[u8],
    mut at: usize,
    now: Nanos,
    mut r: Replayed,
) -> Replay {
    while at < bytes.len() {
        let rest = &bytes[at..];
        let Some((kind, body, n)) = effects::next_frame(rest) else {
            if effects::is_stream_kind(rest[0]) || rest.iter().all(|&b| b == 0) {
                return torn(r, at);
            }
            return Err(ReplayError::Corrupt {
                at: at as u64,
                why: ApplyError::Kind(rest[0]).to_string(),
            });
        };
        if kind == 0 && rest.iter().all(|&b| b == 0) {
            return torn(r, at);
        }
        store
            .apply_frame(kind, body, now)
            .map_err(|e| ReplayError::Corrupt {
                at: at as u64,
                why: e.to_string(),
            })?;
        r.effects += 1;
        at += n;
    }
    whole(r, at)
}
