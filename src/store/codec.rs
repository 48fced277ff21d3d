//! One key's record, as the snapshot file, the replication stream and the
//! append-only file all carry it: its tag, key, expiry and payload (the
//! layout is in `snapshot.rs`'s header, which owns the format's version).
//! Pure: bytes in, bytes out; the file around the records is
//! `snapshot.rs`'s.

use std::io::{self, Read};
use std::num::NonZeroU64;

use super::bytes::SmallBytes;
use super::entry::{Entry, LeaseKey, Stored, Value};
use crate::limiter::for_each_algorithm;
use crate::limiter::{lease, Fields, Params, Storage};

/// The format written; a loader reads every version up to its own.
/// Version 2 added lists, sorted sets and hashes, version 3 lease keys,
/// version 4 blocked keys (`BLOCK`) and calendar-aligned fixed limits;
/// version 5 `sliding` keys; older files load unchanged (they hold none).
pub const VERSION: u16 = 5;

/// The record tags of what is not rate-limit state; an algorithm's is its
/// [`Storage::TAG`] (window 2, fixed 3, gcra 4, log 5, sliding 11).
pub(super) const TAG_STR: u8 = 1;
pub(super) const TAG_LIST: u8 = 6;
pub(super) const TAG_ZSET: u8 = 7;
pub(super) const TAG_HASH: u8 = 8;
pub(super) const TAG_LEASE: u8 = 9;
pub(super) const TAG_BLOCKED: u8 = 10;

#[derive(Debug, thiserror::Error)]
pub enum ErrorKind {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a Turnstile snapshot (wrong magic bytes)")]
    BadMagic,
    #[error("written by a newer Turnstile (format version {0}, this one reads up to {VERSION})")]
    UnsupportedVersion(u16),
    #[error("truncated: the file ends in the middle of a record (at byte {0})")]
    Truncated(u64),
    #[error("checksum mismatch: the file is corrupted")]
    BadChecksum,
    #[error("corrupted record at byte {at}: {what}")]
    Corrupt { at: u64, what: &'static str },
}

/// One key's record: also the body of a replication SET effect.
pub fn encode(buf: &mut Vec<u8>, key: &[u8], entry: &Entry) {
    let start = buf.len();
    buf.push(tag_of(&entry.value));
    buf.extend_from_slice(&len32(key.len()).to_le_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(&entry.expiry_ms().unwrap_or(0).to_le_bytes());
    payload(buf, &entry.value);
    loads_back(&buf[start..]);
}

/// A server must never write a record its own loader refuses (a log's
/// saturated slots once stopped every replica and every restart): debug
/// builds, which the tests and the fuzz targets run, read back every
/// record they write through [`decode_record`], the loaders' one check.
/// Records over 64 KiB (long logs) are left out, to keep a test that
/// fills a ring linear.
fn loads_back(record: &[u8]) {
    if cfg!(debug_assertions) && record.len() <= 64 * 1024 {
        if let Err(e) = decode_record(record) {
            panic!("wrote a record the loader refuses: {e}");
        }
    }
}

macro_rules! codec {
    ($([$variant:ident $module:ident])*) => {
        fn tag_of(value: &Value) -> u8 {
            match value {
                Value::Str(_) => TAG_STR,
                $(Value::$variant(_) => <crate::limiter::$module::State as Storage>::TAG,)*
                Value::List(_) => TAG_LIST,
                Value::ZSet(_) => TAG_ZSET,
                Value::Hash(_) => TAG_HASH,
                Value::Lease(_) => TAG_LEASE,
                Value::Blocked(_) => TAG_BLOCKED,
            }
        }

        /// A value's payload, after its record's header.
        fn payload(buf: &mut Vec<u8>, value: &Value) {
            match value {
                Value::Str(s) => {
                    buf.extend_from_slice(&len32(s.len()).to_le_bytes());
                    buf.extend_from_slice(s);
                }
                $(Value::$variant(s) => limiter(buf, s),)*
                Value::List(l) => {
                    buf.extend_from_slice(&len32(l.len()).to_le_bytes());
                    for item in l.iter() {
                        bytes(buf, item);
                    }
                }
                Value::ZSet(z) => {
                    buf.extend_from_slice(&len32(z.len()).to_le_bytes());
                    for (m, score) in z.iter() {
                        put(buf, score.to_bits());
                        bytes(buf, m);
                    }
                }
                Value::Hash(h) => {
                    buf.extend_from_slice(&len32(h.len()).to_le_bytes());
                    for (f, v) in h.iter() {
                        bytes(buf, f);
                        bytes(buf, v);
                    }
                }
                // Expiries are absolute: a lease that lapses while the
                // server is down is gone when it loads.
                Value::Lease(l) => {
                    put(buf, l.limit);
                    buf.extend_from_slice(&len32(l.leases.len()).to_le_bytes());
                    for lease in l.leases.iter() {
                        buf.extend_from_slice(&lease.id);
                        put(buf, lease.expires());
                        put(buf, lease.units());
                    }
                }
                Value::Blocked(b) => {
                    put(buf, b.until);
                    buf.push(tag_of(&b.value));
                    payload(buf, &b.value);
                }
            }
        }

        /// The rate-limit state a record of `tag` holds, if it is one.
        fn decode_limiter(
            r: &mut Reader<impl Read>,
            tag: u8,
            at: u64,
        ) -> Option<Result<Value, ErrorKind>> {
            Some(match tag {
                $(<crate::limiter::$module::State as Storage>::TAG => {
                    limiter_value(r, at).map(Value::$variant)
                })*
                _ => return None,
            })
        }
    };
}
for_each_algorithm!(codec);

macro_rules! tags_apart {
    ($([$variant:ident $module:ident])*) => {
        // An algorithm's tag is none of the other values'.
        const _: () = {$(
            assert!(!matches!(
                <crate::limiter::$module::State as Storage>::TAG,
                TAG_STR | TAG_LIST | TAG_ZSET | TAG_HASH | TAG_LEASE | TAG_BLOCKED
            ), "an algorithm's record tag is taken");
        )*};
    };
}
for_each_algorithm!(tags_apart);

fn put(buf: &mut Vec<u8>, n: u64) {
    buf.extend_from_slice(&n.to_le_bytes());
}

/// A rate-limit state's payload: its parameters, then its fields.
fn limiter<S: Storage>(buf: &mut Vec<u8>, s: &Stored<S>) {
    let p = &s.params;
    for n in [p.limit(), p.period(), p.burst.get(), p.precision.get()] {
        put(buf, n);
    }
    s.state.encode(buf);
}

/// What [`limiter`] wrote: parameters checked as every algorithm's are,
/// then the state's fields, checked as its own.
fn limiter_value<S: Storage>(r: &mut Reader<impl Read>, at: u64) -> Result<Stored<S>, ErrorKind> {
    let params = r.params(at)?;
    let state = S::decode(&params, &mut RecordFields { r, at })?;
    Ok(Stored { params, state })
}

/// A record's fields as [`Storage::decode`] reads them: errors name the
/// record's offset.
struct RecordFields<'a, R> {
    r: &'a mut Reader<R>,
    at: u64,
}

impl<R: Read> Fields for RecordFields<'_, R> {
    type Error = ErrorKind;
    fn u64(&mut self) -> Result<u64, ErrorKind> {
        self.r.u64()
    }
    fn u32(&mut self) -> Result<u32, ErrorKind> {
        self.r.u32()
    }
    fn corrupt(&self, what: &'static str) -> ErrorKind {
        ErrorKind::Corrupt { at: self.at, what }
    }
}

/// A length-prefixed byte string.
fn bytes(buf: &mut Vec<u8>, b: &[u8]) {
    buf.extend_from_slice(&len32(b.len()).to_le_bytes());
    buf.extend_from_slice(b);
}

/// Lengths are u32 in the file. Nothing in the store can be longer (a bulk
/// over `u32::MAX` would need `--proto-max-bulk-len` above 4 GiB and the
/// memory to match); saturating keeps `encode` total, and such a record
/// would fail its load loudly rather than silently.
fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Reads one record written by [`encode`] (a replication SET effect):
/// the key and its entry. The whole of `bytes` must be the record.
pub fn decode_record(bytes: &[u8]) -> Result<(Vec<u8>, Entry), ErrorKind> {
    let mut r = Reader {
        inner: bytes,
        digest: None,
        at: 0,
    };
    let tag = r.u8()?;
    let key = r.bytes()?;
    let expires_ms = r.u64()?;
    let value = decode_value(&mut r, tag, 0)?;
    if !r.inner.is_empty() {
        return Err(ErrorKind::Corrupt {
            at: r.at,
            what: "bytes after the record",
        });
    }
    let entry = Entry::with_expiry_ms(value, (expires_ms != 0).then_some(expires_ms));
    Ok((key, entry))
}

pub(super) fn decode_value(
    r: &mut Reader<impl Read>,
    tag: u8,
    at: u64,
) -> Result<Value, ErrorKind> {
    let corrupt = |what| ErrorKind::Corrupt { at, what };
    if let Some(limiter) = decode_limiter(r, tag, at) {
        return limiter;
    }
    Ok(match tag {
        TAG_STR => Value::Str(SmallBytes::from(&r.bytes()?[..])),
        TAG_LIST => {
            let n = r.u32()?;
            let mut l = super::collections::List::new();
            for _ in 0..n {
                l.push_back(r.bytes()?.into());
            }
            Value::List(Box::new(l))
        }
        TAG_ZSET => {
            let n = r.u32()?;
            let mut z = super::collections::ZSet::default();
            for _ in 0..n {
                let score = f64::from_bits(r.u64()?);
                if score.is_nan() {
                    return Err(corrupt("a NaN score"));
                }
                z.insert(&r.bytes()?, score);
            }
            Value::ZSet(Box::new(z))
        }
        TAG_HASH => {
            let n = r.u32()?;
            let mut h = super::collections::Hash::default();
            for _ in 0..n {
                let f = r.bytes()?;
                h.set(&f, &r.bytes()?);
            }
            Value::Hash(Box::new(h))
        }
        TAG_LEASE => {
            let limit = r.u64()?;
            let n = r.u32()?;
            let mut items = Vec::new();
            for _ in 0..n {
                let mut id = [0u8; lease::ID_LEN];
                r.fill(&mut id)?;
                let expires = r.u64()?;
                let units = r.u64()?;
                if units > lease::MAX_UNITS {
                    return Err(corrupt("a lease holds too many units"));
                }
                items.push(lease::Lease::new(id, expires, units));
            }
            // Lapsed ones are dropped by the key's next operation (the
            // key itself expires with its last lease).
            let leases = lease::Leases::from_leases(items, 0);
            Value::Lease(LeaseKey { limit, leases })
        }
        TAG_BLOCKED => {
            let until = r.u64()?;
            let tag = r.u8()?;
            let value = match decode_limiter(r, tag, at) {
                Some(value) => value?,
                None => return Err(corrupt("a block over something other than a limit")),
            };
            Value::Blocked(Box::new(super::entry::Blocked { until, value }))
        }
        _ => return Err(corrupt("unknown record type")),
    })
}

/// Reads fixed-size fields, checksumming them (a file; not a replication
/// effect, which TCP already checks) and tracking the offset.
pub(super) struct Reader<R> {
    pub(super) inner: R,
    pub(super) digest: Option<crc32fast::Hasher>,
    pub(super) at: u64,
}

impl<R: Read> Reader<R> {
    pub(super) fn fill(&mut self, buf: &mut [u8]) -> Result<(), ErrorKind> {
        match self.inner.read_exact(buf) {
            Ok(()) => {
                if let Some(d) = &mut self.digest {
                    d.update(buf);
                }
                self.at += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err(ErrorKind::Truncated(self.at))
            }
            Err(e) => Err(ErrorKind::Io(e)),
        }
    }

    pub(super) fn u8(&mut self) -> Result<u8, ErrorKind> {
        let mut b = [0u8; 1];
        self.fill(&mut b)?;
        Ok(b[0])
    }

    pub(super) fn u16(&mut self) -> Result<u16, ErrorKind> {
        let mut b = [0u8; 2];
        self.fill(&mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    pub(super) fn u32(&mut self) -> Result<u32, ErrorKind> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    pub(super) fn u64(&mut self) -> Result<u64, ErrorKind> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// A u32-length-prefixed byte string, read in bounded chunks so a
    /// corrupted length cannot make us allocate gigabytes up front.
    pub(super) fn bytes(&mut self) -> Result<Vec<u8>, ErrorKind> {
        const CHUNK: usize = 64 * 1024;
        let len = self.u32()? as usize;
        // Grown a chunk at a time, each read straight into it (a zeroed
        // 8 KiB buffer per key was a seventh of a replica's CPU).
        let mut out = Vec::with_capacity(len.min(CHUNK));
        while out.len() < len {
            let at = out.len();
            let n = (len - at).min(CHUNK);
            out.resize(at + n, 0);
            self.fill(&mut out[at..])?;
        }
        Ok(out)
    }

    pub(super) fn params(&mut self, at: u64) -> Result<Params, ErrorKind> {
        let mut nz = || -> Result<NonZeroU64, ErrorKind> {
            NonZeroU64::new(self.u64()?).ok_or(ErrorKind::Corrupt {
                at,
                what: "a limiter parameter is zero",
            })
        };
        let p = Params {
            limit: nz()?,
            period: nz()?,
            burst: nz()?,
            precision: nz()?,
        };
        // What the parser accepts (positive i64s): the algorithms' 128-bit
        // products are sized for it.
        if [p.limit, p.period, p.burst]
            .iter()
            .any(|n| n.get() > i64::MAX as u64)
        {
            return Err(ErrorKind::Corrupt {
                at,
                what: "a limiter parameter over 2^63 - 1",
            });
        }
        if p.precision > p.period && p.precision.get() > 1 {
            return Err(ErrorKind::Corrupt {
                at,
                what: "precision longer than the period",
            });
        }
        Ok(p)
    }
}
