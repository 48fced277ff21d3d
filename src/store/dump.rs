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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::entry::Value;
    use crate::store::SmallBytes;
    use proptest::prelude::*;

    fn string(v: &[u8]) -> Entry {
        Entry::new(Value::Str(SmallBytes::new(v)))
    }

    #[test]
    fn a_payload_round_trips_without_its_expiry() {
        let e = Entry::with_expiry_ms(string(b"v").value, Some(123_456));
        let back = decode(&encode(&e)).unwrap();
        assert_eq!(back, string(b"v"));
    }

    /// A payload whose checksum is right but whose record is not (anyone
    /// can compute a CRC) is still refused, by the codec's reader.
    #[test]
    fn a_well_checksummed_bad_record_is_bad_data() {
        let mut body = encode(&string(b"v"));
        body.truncate(body.len() - TRAILER);
        body[0] = 0xEE;
        body.extend_from_slice(&[codec::VERSION as u8, MARK]);
        let crc = CRC64.checksum(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert!(matches!(decode(&body), Err(PayloadError::BadData(_))));
    }

    proptest! {
        /// Arbitrary bytes never panic, and are refused.
        #[test]
        fn random_bytes_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            prop_assert!(decode(&bytes).is_err());
        }

        /// Random bytes with a valid trailer reach the codec: it refuses
        /// or decodes them, never panics (a huge declared length included).
        #[test]
        fn checksummed_random_records_never_panic(
            tag in 0u8..14,
            body in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut p = vec![tag, 0, 0, 0, 0];
            p.extend_from_slice(&body);
            p.extend_from_slice(&[codec::VERSION as u8, MARK]);
            let crc = CRC64.checksum(&p);
            p.extend_from_slice(&crc.to_le_bytes());
            let _ = decode(&p);
        }
    }
}
