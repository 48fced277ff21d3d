//! `DUMP`'s payload: one key's value as `RESTORE` and `MIGRATE` carry it
//! between servers. The body is the record codec's (`codec.rs`, the
//! snapshot's, replication's and the append-only file's), with an empty key
//! and no expiry (`RESTORE` takes the TTL as its argument, as in Redis);
//! after it, as Redis lays its own payload out, two bytes of version and
//! eight of checksum:
//!
//! ```text
//! record (codec::encode, key "", expiry 0) | version u16 LE | CRC-64 u64 LE
//! ```
//!
//! The version's high byte is `'T'` and its low byte the codec's version,
//! so Redis, which refuses a payload whose version is above its own RDB
//! version (10 in 7.0), refuses ours, and ours refuses Redis's (whose high
//! byte is 0). The checksum is CRC-64/Jones, the one Redis puts in its
//! own payloads (`crc::CRC_64_REDIS`): a payload travels through clients
//! and proxies that may cut or alter it, and 64 bits make an undetected
//! change a one-in-2^64 event; it is not a signature (anyone may compute
//! it), so what it lets through is still decoded by the codec's checked
//! reader, which refuses any record it cannot load whole.
//!
//! Times inside limiter records stay absolute server time, as the snapshot
//! keeps them: server time is Unix time on every node (it follows the wall
//! clock forward, never back), and windows, fixed and calendar periods and
//! the sliding window's sub-buckets are aligned to that shared grid, so a
//! record means the same on any node whose clock agrees; the nodes' clock
//! difference bounds what a move can change.

use super::codec;
use super::entry::Entry;

/// The version's high byte: `'T'`, for Turnstile.
const MARK: u8 = b'T';
/// Version and checksum after the record.
const TRAILER: usize = 2 + 8;
/// Where the record's expiry sits (its key is empty).
const EXPIRY: std::ops::Range<usize> = 5..13;
const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

/// Why a payload was refused; a client sees Redis's one error for all.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("DUMP payload version or checksum are wrong")]
    VersionOrChecksum,
    #[error("Bad data format")]
    BadData(#[from] codec::ErrorKind),
}

/// The payload of `entry` (its value; the expiry is left out).
pub fn encode(entry: &Entry) -> Vec<u8> {
    let mut buf = Vec::new();
    codec::encode(&mut buf, b"", entry);
    // No expiry: after the tag (1 byte) and the empty key's length (4).
    buf[EXPIRY].fill(0);
    buf.extend_from_slice(&u16::from_le_bytes([codec::VERSION as u8, MARK]).to_le_bytes());
    let crc = CRC64.checksum(&buf);
    buf.extend_from_slice(&crc.to_le_bytes());
    buf
}

/// The value a payload carries, as an entry without expiry.
pub fn decode(payload: &[u8]) -> Result<Entry, PayloadError> {
    let body_len = payload
        .len()
        .checked_sub(TRAILER)
        .ok_or(PayloadError::VersionOrChecksum)?;
    let (signed, crc) = payload.split_at(body_len + 2);
    let [low, high] = [signed[body_len], signed[body_len + 1]];
    let crc = u64::from_le_bytes(
        crc.try_into()
            .map_err(|_| PayloadError::VersionOrChecksum)?,
    );
    if high != MARK || u16::from(low) > codec::VERSION || CRC64.checksum(signed) != crc {
        return Err(PayloadError::VersionOrChecksum);
    }
    let (_, entry) = codec::decode_record(&signed[..body_len])?;
    Ok(entry)
}
