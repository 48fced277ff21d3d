//! The snapshot file: the whole keyspace with its expiries, so a restart
//! loses nothing.
//!
//! Hand-written rather than serde + bincode: the format is a promise to
//! future releases, so every byte is spelled out here, versioned, and
//! independent of how the store lays entries out in memory.
//!
//! ```text
//! header   "TURNSNAP"  version: u16  reserved: u16  written_at: u64 (ns)
//! record   tag: u8 (1..=5)  key_len: u32  key  expires_at: u64 (ms, 0 = none)
//!          payload (by tag):
//!            1 string  len: u32, bytes
//!            2 window  params, start, prev, curr
//!            3 fixed   params, start, count
//!            4 gcra    params, tat
//!            5 log     params, newest, slots: u32, (timestamp in µs, count) * slots
//!            6 list    items: u32, (len: u32, bytes) * items       (version 2)
//!            7 zset    members: u32, (score: f64 bits, len: u32, bytes) * members,
//!                      lowest score first                          (version 2)
//!            8 hash    fields: u32, (len: u32, field, len: u32, value) * fields,
//!                      in insertion order                          (version 2)
//!            9 lease   limit, leases: u32, (id, expires, units) * leases (version 3)
//!           10 blocked until (ns), tag: u8 (2..=5 or 11), that tag's payload (version 4)
//!           11 sliding params, newest sub-bucket number,
//!                      (count, last-admission step) * 6, newest first (version 5)
//!          params = limit, period, burst, precision (a fixed limit's
//!                   precision is its calendar code, limiter/calendar.rs)
//! trailer  0xFF  records: u64  crc32: u32 (CRC-32/IEEE of every byte before it)
//! ```
//!
//! Integers are little-endian; times are the server clock's nanoseconds
//! since the epoch (expiry in milliseconds, as the store keeps it). Limiter
//! states hold absolute times, so the time a server was down is credited
//! on load with no conversion: a window that ended while it was down is
//! over, a GCRA bucket has refilled, and a key whose expiry passed is not
//! loaded at all.
//!
//! Writing walks one shard at a time under its read lock, so writes to
//! other shards go on (a long log ring is copied under the lock and encoded
//! after it); the file is written beside the target, fsynced, and
//! renamed over it, so a crash mid-write leaves the previous snapshot.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::entry::{Entry, Value};
use super::Store;
use crate::clock::Nanos;

pub const MAGIC: &[u8; 8] = b"TURNSNAP";
const HEADER_LEN: u64 = 8 + 2 + 2 + 8;

use super::codec::{decode_value, encode, Reader};
pub use super::codec::{ErrorKind, VERSION};

const TAG_END: u8 = 0xFF;

// The checksum is crc32fast's CRC-32 (IEEE): hardware-accelerated
// (PCLMULQDQ). The crc crate's table CRC was three quarters of a snapshot's
// CPU (`perf`, 864k keys), and a third even with slice-by-16 tables.

/// A snapshot that could not be written or read, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("snapshot {}: {kind}", path.display())]
pub struct SnapshotError {
    pub path: PathBuf,
    pub kind: ErrorKind,
}

/// What a load found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loaded {
    /// Keys put in the store.
    pub keys: u64,
    /// Keys in the file whose expiry passed while the server was down.
    pub expired: u64,
    /// When the file was written, on the server clock.
    pub written_at: Nanos,
}

/// Writes the store to `path`: a sibling temporary file, fsynced, renamed
/// over `path`, and the directory fsynced so the rename survives a crash.
/// Returns the number of keys written.
pub fn save(store: &Store, path: &Path, now: Nanos) -> Result<u64, SnapshotError> {
    let err = |kind: ErrorKind| SnapshotError {
        path: path.to_owned(),
        kind,
    };
    let (file, tmp) = create_temp(path).map_err(|e| err(ErrorKind::Io(e)))?;
    let written = (|| {
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let n = write(store, now, &mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(n)
    })();
    let n = match written {
        Ok(n) => n,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(err(ErrorKind::Io(e)));
        }
    };
    install(&tmp, path).map_err(err)?;
    Ok(n)
}

/// Puts a finished temporary file (fsynced, from [`create_temp`]) in
/// `path`'s place by rename, then fsyncs the directory so the rename
/// survives a crash; the temporary file is removed if the rename fails.
pub fn install(tmp: &Path, path: &Path) -> Result<(), ErrorKind> {
    fs::rename(tmp, path).map_err(|e| {
        let _ = fs::remove_file(tmp);
        ErrorKind::Io(e)
    })?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir).and_then(|d| d.sync_all())?;
    }
    Ok(())
}

/// Checks that a snapshot can be written beside `path` (the directory
/// exists and is writable), so a bad path fails at start, not a second in.
pub fn check_writable(path: &Path) -> Result<(), SnapshotError> {
    create_temp(path)
        .and_then(|(_, tmp)| fs::remove_file(&tmp))
        .map_err(|e| SnapshotError {
            path: path.to_owned(),
            kind: ErrorKind::Io(e),
        })
}

/// A new temporary file beside `path`, for a snapshot to be renamed over
/// it: a name no one can guess (`.NAME.tmp-PID-RANDOM`), created only if
/// nothing is there (`O_EXCL`, which also refuses a symlink in its place,
/// and `O_NOFOLLOW`), readable by the owner alone. A fixed name would let
/// a symlink planted there make the server truncate and overwrite any
/// file it can write.
pub fn create_temp(path: &Path) -> io::Result<(File, PathBuf)> {
    use std::hash::{BuildHasher, Hasher};
    use std::os::unix::fs::OpenOptionsExt;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut tries = 0;
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(tries);
        let tmp = path.with_file_name(format!(
            ".{name}.tmp-{}-{:016x}",
            std::process::id(),
            h.finish()
        ));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
        {
            Ok(file) => return Ok((file, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Loads `path` into `store`, skipping keys expired by `now`. A missing
/// file is an empty keyspace (`Ok(None)`); any other failure is an error
/// and the file is left as it is.
pub fn load(store: &Store, path: &Path, now: Nanos) -> Result<Option<Loaded>, SnapshotError> {
    let err = |kind: ErrorKind| SnapshotError {
        path: path.to_owned(),
        kind,
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(ErrorKind::Io(e))),
    };
    read(store, BufReader::with_capacity(1 << 20, file), now)
        .map(Some)
        .map_err(err)
}

/// Log rings longer than this are copied under the shard's lock and
/// encoded after it is released.
const ENCODE_UNDER_LOCK: usize = 1024;

/// Serialises every live key, shard by shard.
pub fn write(store: &Store, now: Nanos, w: &mut impl Write) -> io::Result<u64> {
    let mut w = Hashing {
        inner: w,
        digest: crc32fast::Hasher::new(),
    };
    let mut header = Vec::with_capacity(HEADER_LEN as usize);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&0u16.to_le_bytes());
    header.extend_from_slice(&now.0.to_le_bytes());
    w.write_all(&header)?;
    let mut records = 0u64;
    // One shard's records are encoded under its read lock into `buf`, and
    // written out after the lock is released: file I/O never holds a lock.
    // A long log ring is only copied under the lock (a memcpy of at most
    // 8 MiB) and encoded after, so writers wait for the copy, not for the
    // encoding at twice the size.
    let mut buf = Vec::new();
    let mut long_logs: Vec<(Box<[u8]>, Entry)> = Vec::new();
    for i in 0..store.shard_count() {
        buf.clear();
        store.for_each_in_shard(i, now, |key, entry| {
            match &entry.value {
                Value::Log(l) if l.state.slots() > ENCODE_UNDER_LOCK => {
                    long_logs.push((key.into(), entry.clone()));
                }
                _ => encode(&mut buf, key, entry),
            }
            records += 1;
        });
        for (key, entry) in long_logs.drain(..) {
            encode(&mut buf, &key, &entry);
        }
        w.write_all(&buf)?;
    }
    w.write_all(&[TAG_END])?;
    w.write_all(&records.to_le_bytes())?;
    let crc = w.digest.clone().finalize();
    w.inner.write_all(&crc.to_le_bytes())?;
    Ok(records)
}

/// Reads a snapshot into `store`. Records are inserted as they are read;
/// on any error the caller refuses to start, so a half-loaded store is
/// never served.
pub fn read(store: &Store, r: impl Read, now: Nanos) -> Result<Loaded, ErrorKind> {
    let (loaded, mut rest, at) = read_prefix(store, r, now)?;
    let mut byte = [0u8; 1];
    if rest.read(&mut byte)? != 0 {
        return Err(ErrorKind::Corrupt {
            at,
            what: "bytes after the trailer",
        });
    }
    Ok(loaded)
}

/// Reads a snapshot from the start of `r` and stops after its trailer:
/// what it loaded, the reader, and how many bytes the snapshot took (the
/// append-only file's base is a snapshot, its effects follow).
pub fn read_prefix<R: Read>(
    store: &Store,
    r: R,
    now: Nanos,
) -> Result<(Loaded, R, u64), ErrorKind> {
    let mut r = Reader {
        inner: r,
        digest: Some(crc32fast::Hasher::new()),
        at: 0,
    };
    let mut magic = [0u8; 8];
    r.fill(&mut magic)?;
    if &magic != MAGIC {
        return Err(ErrorKind::BadMagic);
    }
    let version = r.u16()?;
    if version > VERSION || version == 0 {
        return Err(ErrorKind::UnsupportedVersion(version));
    }
    let _reserved = r.u16()?;
    let written_at = Nanos(r.u64()?);
    let mut loaded = Loaded {
        written_at,
        ..Loaded::default()
    };
    let mut records = 0u64;
    loop {
        let at = r.at;
        let tag = r.u8()?;
        if tag == TAG_END {
            break;
        }
        let key = r.bytes()?;
        let expires_ms = r.u64()?;
        let value = decode_value(&mut r, tag, at)?;
        records += 1;
        let entry = Entry::with_expiry_ms(value, (expires_ms != 0).then_some(expires_ms));
        if entry.is_expired(now) {
            loaded.expired += 1;
            continue;
        }
        store.update(&key, now, |slot| *slot = Some(entry));
        loaded.keys += 1;
    }
    let count = r.u64()?;
    let expected = r.digest.clone().map_or(0, |d| d.finalize());
    let mut crc = [0u8; 4];
    r.fill(&mut crc)?;
    if u32::from_le_bytes(crc) != expected {
        return Err(ErrorKind::BadChecksum);
    }
    if count != records {
        return Err(ErrorKind::Corrupt {
            at: r.at,
            what: "record count does not match the trailer",
        });
    }
    Ok((loaded, r.inner, r.at))
}

/// Feeds everything written through the checksum.
struct Hashing<W> {
    inner: W,
    digest: crc32fast::Hasher,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.digest.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{fixed, gcra, log, window, Params};
    use crate::store::bytes::SmallBytes;
    use crate::store::codec::decode_record;
    use crate::store::entry::Stored;
    use std::num::NonZeroU64;

    const NOW: Nanos = Nanos(1_700_000_000_000_000_000);

    fn params(limit: u64, period_s: u64) -> Params {
        Params::new(
            NonZeroU64::new(limit).unwrap(),
            NonZeroU64::new(period_s * Nanos::PER_SEC).unwrap(),
        )
    }

    fn sample_store() -> Store {
        let store = Store::new(4);
        let put = |k: &[u8], v: Value, exp_ms: Option<u64>| {
            store.update(k, NOW, |s| *s = Some(Entry::with_expiry_ms(v, exp_ms)))
        };
        let later = NOW.as_millis() + 60_000;
        put(b"s", Value::Str(SmallBytes::from(&b"hello"[..])), None);
        put(b"", Value::Str(SmallBytes::from(&[0u8; 300][..])), None);
        let w = window::State {
            start: NOW.0 - 5,
            prev: 3,
            curr: 7,
        };
        put(
            b"w",
            Value::Window(Stored {
                params: params(10, 60),
                state: w,
            }),
            Some(later),
        );
        put(
            b"f",
            Value::Fixed(Stored {
                params: params(10, 60),
                state: fixed::State {
                    start: NOW.0 - 9,
                    count: 4,
                },
            }),
            Some(later),
        );
        put(
            b"g",
            Value::Gcra(Stored {
                params: params(10, 60),
                state: gcra::State { tat: NOW.0 + 99 },
            }),
            Some(later),
        );
        let mut l = log::State::default();
        for i in 0..5 {
            log::decide(&mut l, &params(10, 60), NOW.0 - 1000 + i * 100, 1 + i);
        }
        put(
            b"l",
            Value::Log(Stored {
                params: params(100, 60),
                state: l,
            }),
            Some(later),
        );
        put(
            b"gone",
            Value::Str(SmallBytes::from(&b"x"[..])),
            Some(NOW.as_millis() + 10),
        );
        store
    }

    fn to_bytes(store: &Store, now: Nanos) -> Vec<u8> {
        let mut out = Vec::new();
        write(store, now, &mut out).unwrap();
        out
    }

    fn dump(store: &Store, now: Nanos) -> Vec<(Vec<u8>, String, Option<u64>)> {
        let mut all = Vec::new();
        for i in 0..store.shard_count() {
            store.for_each_in_shard(i, now, |k, e| {
                // A sorted set's map has no stable order: its members in
                // score order stand for it.
                let text = match &e.value {
                    Value::ZSet(z) => format!("zset {:?}", z.iter().collect::<Vec<_>>()),
                    v => format!("{v:?}"),
                };
                all.push((k.to_vec(), text, e.expiry_ms()))
            });
        }
        all.sort();
        all
    }

    #[test]
    fn round_trip_keeps_every_value_and_expiry() {
        let store = sample_store();
        let bytes = to_bytes(&store, NOW);
        let back = Store::new(8);
        let loaded = read(&back, &bytes[..], NOW).unwrap();
        assert_eq!(loaded.keys, 7);
        assert_eq!(loaded.written_at, NOW);
        assert_eq!(dump(&back, NOW), dump(&store, NOW));
    }

    /// Every algorithm, through the contract: a charged key of each goes
    /// through the store (its record class) and a snapshot and comes back
    /// equal, with the TTL its state implies. An `Algorithm` added without
    /// its record class or snapshot encoding fails here (or does not
    /// compile: the matches on `Value` are exhaustive).
    #[test]
    fn every_algorithm_round_trips_through_records_and_snapshots() {
        use crate::limiter::{Algorithm, LimitSpec};
        let store = Store::new(4);
        for algo in Algorithm::ALL {
            let key = algo.name().as_bytes();
            let spec = LimitSpec {
                algo,
                params: params(10, 60),
                block: None,
            };
            let d = store.update(key, NOW, |slot| {
                crate::store::limit::allow(slot, &spec, NOW, 3, usize::MAX)
            });
            assert!(d.unwrap().allowed, "{algo:?}");
            let stored = store.get(key, NOW, |e| (e.value.algorithm(), e.expiry_ms()));
            let (found, ttl) = stored.expect("stored");
            assert_eq!(found, Some(algo));
            assert!(ttl.is_some(), "{algo:?}: a limiter key always has its TTL");
        }
        let back = Store::new(4);
        read(&back, &to_bytes(&store, NOW)[..], NOW).unwrap();
        assert_eq!(dump(&back, NOW), dump(&store, NOW));
        assert_eq!(dump(&back, NOW).len(), Algorithm::COUNT);
    }

    /// A log goes into a snapshot as its logical (timestamp, count)
    /// slots, whatever form its ring holds them in: a compact ring and a
    /// narrow one with the same slots write the same bytes, and a ring of
    /// each form comes back equal.
    #[test]
    fn log_rings_of_every_form_round_trip() {
        let p = params(u64::MAX / 4, 3_600);
        let ring = |costs: &[u64]| {
            let mut l = log::State::default();
            for (i, &c) in costs.iter().enumerate() {
                let now = NOW.0 - 1_000_000 + i as u64 * 1_000;
                assert!(log::decide(&mut l, &p, now, c).allowed);
            }
            l
        };
        let compact = ring(&[1; 40]);
        let mut costs = [1; 40];
        costs[39] = 2;
        let mut narrow = ring(&costs);
        log::refund(&mut narrow, &p, NOW.0, 1);
        assert_eq!(compact, narrow);
        assert!(narrow.heap_size() > compact.heap_size(), "two forms");
        let wide = ring(&[1, 1, 1 << 30]);
        let store_of = |state: log::State| {
            let store = Store::new(4);
            let v = Value::Log(Stored { params: p, state });
            let expiry = Some(NOW.as_millis() + 3_600_000);
            store.update(b"l", NOW, |s| *s = Some(Entry::with_expiry_ms(v, expiry)));
            store
        };
        let (a, b) = (store_of(compact.clone()), store_of(narrow));
        assert_eq!(to_bytes(&a, NOW), to_bytes(&b, NOW));
        for state in [compact, wide] {
            let store = store_of(state);
            let back = Store::new(4);
            read(&back, &to_bytes(&store, NOW)[..], NOW).unwrap();
            assert_eq!(dump(&back, NOW), dump(&store, NOW));
        }
    }

    #[test]
    fn keys_that_expired_while_down_are_not_loaded() {
        let bytes = to_bytes(&sample_store(), NOW);
        let back = Store::new(8);
        let later = Nanos(NOW.0 + 20 * Nanos::PER_MS);
        let loaded = read(&back, &bytes[..], later).unwrap();
        assert_eq!((loaded.keys, loaded.expired), (6, 1));
        assert!(!back.exists(b"gone", later));
    }

    #[test]
    fn every_cut_is_detected() {
        let bytes = to_bytes(&sample_store(), NOW);
        for cut in 0..bytes.len() {
            let e = read(&Store::new(1), &bytes[..cut], NOW).unwrap_err();
            assert!(
                matches!(e, ErrorKind::Truncated(_) | ErrorKind::BadMagic),
                "cut at {cut}: {e}"
            );
        }
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let bytes = to_bytes(&sample_store(), NOW);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(read(&Store::new(1), &bad[..], NOW).is_err(), "byte {i}");
        }
    }

    /// Rewrites the version field and the checksum after it.
    fn with_version(mut bytes: Vec<u8>, version: u16) -> Vec<u8> {
        bytes[8..10].copy_from_slice(&version.to_le_bytes());
        let n = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[test]
    fn version_1_files_still_load() {
        let store = sample_store();
        let old = with_version(to_bytes(&store, NOW), 1);
        let loaded = Store::new(4);
        read(&loaded, &old[..], NOW).expect("a version 1 file loads");
        assert_eq!(dump(&loaded, NOW), dump(&store, NOW));
    }

    /// A blocked key and a calendar-aligned fixed limit round-trip as the
    /// replication stream and snapshots carry them; a calendar code no
    /// calendar has is refused as corrupt.
    #[test]
    fn blocks_and_calendars_round_trip() {
        use crate::limiter::calendar::{Calendar, Unit};
        let cal = Calendar {
            unit: Unit::Month,
            offset_min: -330,
        };
        let mut p = params(10, 30 * 86_400);
        p.precision = NonZeroU64::new(cal.code()).unwrap();
        let fixed = Value::Fixed(Stored {
            params: p,
            state: fixed::State {
                start: NOW.0 - 5,
                count: 12,
            },
        });
        let blocked = Value::Blocked(Box::new(super::super::entry::Blocked {
            until: NOW.0 + 4 * Nanos::PER_SEC,
            value: fixed.clone(),
        }));
        for v in [fixed, blocked] {
            let e = Entry::with_expiry_ms(v, Some(NOW.as_millis() + 60_000));
            let mut buf = Vec::new();
            encode(&mut buf, b"k", &e);
            assert_eq!(decode_record(&buf).unwrap(), (b"k".to_vec(), e));
        }
        // A calendar code no calendar has, written over a valid record's
        // precision (the writer itself reads back what it writes).
        let e = Entry::new(Value::Fixed(Stored {
            params: params(10, 60),
            state: fixed::State::default(),
        }));
        let mut buf = Vec::new();
        encode(&mut buf, b"k", &e);
        let precision = 1 + 4 + 1 + 8 + 3 * 8;
        buf[precision..precision + 8].copy_from_slice(&5u64.to_le_bytes());
        assert!(matches!(
            decode_record(&buf),
            Err(ErrorKind::Corrupt { what, .. }) if what.contains("calendar")
        ));
    }

    #[test]
    fn collections_round_trip() {
        use super::super::collections::{Hash, List, ZSet};
        let store = Store::new(4);
        let put = |k: &[u8], v: Value| store.update(k, NOW, |s| *s = Some(Entry::new(v)));
        let mut l = List::new();
        l.push_back(bytes::Bytes::from_static(b"a"));
        l.push_back(bytes::Bytes::new());
        put(b"l", Value::List(Box::new(l)));
        let mut z = ZSet::default();
        z.insert(b"m", 0.1);
        z.insert(b"n", f64::NEG_INFINITY);
        put(b"z", Value::ZSet(Box::new(z)));
        let mut h = Hash::default();
        h.set(b"f", b"1");
        h.set(b"", b"");
        put(b"h", Value::Hash(Box::new(h)));
        let loaded = Store::new(4);
        read(&loaded, &to_bytes(&store, NOW)[..], NOW).unwrap();
        assert_eq!(dump(&loaded, NOW), dump(&store, NOW));
    }

    #[test]
    fn newer_versions_and_other_files_are_refused() {
        let bytes = with_version(to_bytes(&sample_store(), NOW), VERSION + 1);
        assert!(matches!(
            read(&Store::new(1), &bytes[..], NOW),
            Err(ErrorKind::UnsupportedVersion(v)) if v == VERSION + 1
        ));
        assert!(matches!(
            read(&Store::new(1), &b"REDIS0011xxxxxxxxxxxxxxx"[..], NOW),
            Err(ErrorKind::BadMagic)
        ));
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut bytes = to_bytes(&sample_store(), NOW);
        bytes.push(0);
        assert!(read(&Store::new(1), &bytes[..], NOW).is_err());
    }

    #[test]
    fn save_replaces_the_file_and_load_reads_it() {
        let dir = std::env::temp_dir().join(format!("turnstile-snap-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dump.tsnap");
        assert!(load(&Store::new(1), &path, NOW).unwrap().is_none());
        check_writable(&path).unwrap();
        assert_eq!(save(&sample_store(), &path, NOW).unwrap(), 7);
        assert_eq!(save(&sample_store(), &path, NOW).unwrap(), 7);
        // Only the snapshot is left: no temporary file.
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        let back = Store::new(8);
        let loaded = load(&back, &path, NOW).unwrap().unwrap();
        assert_eq!(loaded.keys, 7);
        let err = check_writable(&dir.join("missing/dump.tsnap")).unwrap_err();
        assert!(err.to_string().contains("missing/dump.tsnap"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
