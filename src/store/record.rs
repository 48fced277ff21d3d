//! Compact records: how a limiter key is stored. The four constant-size
//! algorithms (`window`, `sliding`, `fixed`, `gcra`) pack into a record of
//! 2 bytes, their state (8-20 bytes) and the key's own bytes, with no
//! padding for keys up to [`EXACT_MAX`] bytes, instead of a 96-byte
//! general record and a heap block for the key; a `log` key of up to
//! [`LOG_KEY_MAX`] bytes is its key and id beside the log's 24-byte ring
//! handle ([`LogRec`], 48 bytes).
//!
//! | bytes | field |
//! |---|---|
//! | 2 | parameter id (12 bits, `params.rs`); for keys over [`EXACT_MAX`] bytes, the length's offset in its class (4 bits) |
//! | window: 6 + 4 + 4 | bucket number (`start / period`), previous count, current count |
//! | fixed: 6 + 4 | window number, count |
//! | gcra: 8 | TAT (ns) |
//! | sliding: 5 + 9 + 6 | newest sub-bucket number, six 12-bit counts, six last-admission steps (`limiter/sliding.rs`) |
//! | the key's length | the key (zero-padded to its class's length over [`EXACT_MAX`]) |
//!
//! The record's length is not stored: records live in arenas of one
//! [`Layout`] each (an algorithm and a key class), and the handle names
//! the layout. A key of up to [`EXACT_MAX`] bytes has a class of its own
//! length, so a key costs its length and nothing more (a step at some
//! length, as when every key over 16 bytes went to the general class, was a
//! cliff: 43 bytes a key at 16 bytes, 111 at 19). Longer keys, up to
//! [`KEY_MAX`], share classes [`STEP`] bytes apart: at most 7 bytes of
//! padding on 129 or more.
//!
//! There is no expiry field: a limiter key's TTL is always the moment its
//! state stops mattering, derived from the state itself (`expires_at`), so
//! it is recomputed on read. A key that does not fit (an empty or longer key, counts
//! over `u32` (a `sliding` count over 4,095), a bucket number over 48 bits
//! (a `sliding` sub-bucket number over 40: periods under 19 ms), a TTL set by `EXPIRE` or
//! `PERSIST`, a shard out of parameter ids) is stored whole in the general
//! class instead; a later write moves it back once it fits again.
//!
//! Bucket numbers rather than start times: starts are multiples of the
//! period, and 48 bits of bucket number cover the epoch to now for any
//! period of 10 us or more.

use crate::clock::Nanos;
use crate::limiter::{fixed, gcra, log, sliding, window, Limiter, Params};
use crate::store::entry::{expiry_ms_at, Entry, Stored, Value};

/// Keys up to this long have a record class of their own length.
pub const EXACT_MAX: usize = 128;
/// Longer keys share classes this many bytes apart (at most 16, which the
/// head's 4 bits of length offset can tell apart).
pub const STEP: usize = 8;
/// Longest key a compact record of a constant-size algorithm holds.
pub const KEY_MAX: usize = 1024;
/// Key classes per algorithm: one per length up to [`EXACT_MAX`], then one
/// per [`STEP`] up to [`KEY_MAX`].
pub const KEY_CLASSES: usize = EXACT_MAX + (KEY_MAX - EXACT_MAX) / STEP;
const _: () = assert!(STEP <= 16 && (KEY_MAX - EXACT_MAX).is_multiple_of(STEP));
/// Longest key a log record holds inline.
pub const LOG_KEY_MAX: usize = 16;
/// Bits of the parameter id: a shard holds up to 4,096 distinct parameter
/// sets in compact records. Two bytes for the id (and a long key's length
/// offset) rather than three is what keeps `gcra` at 10 bytes plus its key.
pub const PID_BITS: u32 = 12;
const PID_MASK: u16 = (1 << PID_BITS) - 1;
const HEAD: usize = 2;
const KEY: usize = 2;
const BODY: usize = KEY + LOG_KEY_MAX;
const U48_MAX: u64 = (1 << 48) - 1;

/// The constant-size algorithms, whose records are [`Layout`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Window = 0,
    Fixed = 1,
    Gcra = 2,
    Sliding = 3,
}

pub const KINDS: usize = 4;

impl Kind {
    pub const ALL: [Kind; KINDS] = [Kind::Window, Kind::Fixed, Kind::Gcra, Kind::Sliding];

    /// Bytes of the state, between the head and the key.
    #[inline]
    pub const fn state_len(self) -> usize {
        match self {
            Kind::Window => 6 + 4 + 4,
            Kind::Fixed => 6 + 4,
            Kind::Gcra => 8,
            Kind::Sliding => sliding::COMPACT_BYTES,
        }
    }
}

/// The key class of a key of `len` bytes, if a compact record holds it.
#[inline]
pub fn key_class(len: usize) -> Option<usize> {
    match len {
        0 => None,
        1..=EXACT_MAX => Some(len - 1),
        _ if len <= KEY_MAX => Some(EXACT_MAX + (len - EXACT_MAX - 1) / STEP),
        _ => None,
    }
}

/// Shortest key of class `kc`.
fn class_min(kc: usize) -> usize {
    if kc < EXACT_MAX {
        kc + 1
    } else {
        EXACT_MAX + 1 + (kc - EXACT_MAX) * STEP
    }
}

/// Bytes a key of class `kc` takes in its record (its longest key).
fn class_cap(kc: usize) -> usize {
    if kc < EXACT_MAX {
        kc + 1
    } else {
        class_min(kc) + STEP - 1
    }
}

/// How the records of one arena are laid out: the algorithm and the key
/// class, which together give the record's length and where its key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub kind: Kind,
    /// `0..KEY_CLASSES`.
    pub kc: usize,
}

impl Layout {
    /// The layout of `kind`'s record for `key`, if a compact record holds it.
    #[inline]
    pub fn of(kind: Kind, key: &[u8]) -> Option<Layout> {
        Some(Layout {
            kind,
            kc: key_class(key.len())?,
        })
    }

    /// Bytes of each record.
    pub fn rec_len(self) -> usize {
        HEAD + self.kind.state_len() + class_cap(self.kc)
    }

    #[inline]
    fn key_at(self) -> usize {
        HEAD + self.kind.state_len()
    }

    #[inline]
    pub fn key(self, rec: &[u8]) -> &[u8] {
        let len = if self.kc < EXACT_MAX {
            self.kc + 1
        } else {
            class_min(self.kc) + (head(rec) >> PID_BITS) as usize
        };
        &rec[self.key_at()..self.key_at() + len]
    }

    /// Writes a new record for `key` (of this layout's class) and `pid`
    /// over `rec`, state left for [`Layout::set`].
    pub fn init(self, rec: &mut [u8], key: &[u8], pid: u16) {
        debug_assert!(key_class(key.len()) == Some(self.kc) && pid >> PID_BITS == 0);
        let extra = (key.len() - class_min(self.kc)) as u16;
        rec[..HEAD].copy_from_slice(&(extra << PID_BITS | pid).to_le_bytes());
        let at = self.key_at();
        rec[at..at + key.len()].copy_from_slice(key);
        rec[at + key.len()..].fill(0);
    }

    /// Writes the state `packed` holds (of this layout's kind).
    #[inline]
    pub fn set(self, rec: &mut [u8], packed: &Packed) {
        let st = &mut rec[HEAD..self.key_at()];
        match *packed {
            Packed::Window { bucket, prev, curr } => {
                put::<6>(st, 0, bucket);
                put::<4>(st, 6, prev as u64);
                put::<4>(st, 10, curr as u64);
            }
            Packed::Fixed { bucket, count } => {
                put::<6>(st, 0, bucket);
                put::<4>(st, 6, count as u64);
            }
            Packed::Gcra { tat } => put::<8>(st, 0, tat),
            Packed::Sliding { compact } => st.copy_from_slice(&compact),
            Packed::Log => unreachable!("a log is not a constant-size record"),
        }
    }

    /// The entry a record stands for.
    pub fn entry(self, rec: &[u8], p: &Params) -> Entry {
        let st = &rec[HEAD..self.key_at()];
        let value = match self.kind {
            Kind::Window => Value::Window(Stored {
                params: *p,
                state: decode_window(st, p),
            }),
            Kind::Fixed => Value::Fixed(Stored {
                params: *p,
                state: decode_fixed(st, p),
            }),
            Kind::Gcra => Value::Gcra(Stored {
                params: *p,
                state: decode_gcra(st),
            }),
            Kind::Sliding => Value::Sliding(Stored {
                params: *p,
                state: decode_sliding(st),
            }),
        };
        let at = match &value {
            Value::Window(s) => s.state.expires_at(p),
            Value::Fixed(s) => s.state.expires_at(p),
            Value::Gcra(s) => s.state.expires_at(),
            Value::Sliding(s) => s.state.expires_at(p),
            _ => unreachable!("built above"),
        };
        limiter_entry(value, at)
    }

    /// The TTL (ms) of a record, without building an entry: for the sweeper.
    pub fn ttl(self, rec: &[u8], p: &Params) -> u64 {
        let st = &rec[HEAD..self.key_at()];
        match self.kind {
            Kind::Window => ttl_of(&decode_window(st, p), p),
            Kind::Fixed => ttl_of(&decode_fixed(st, p), p),
            Kind::Gcra => ttl_of(&decode_gcra(st), p),
            Kind::Sliding => ttl_of(&decode_sliding(st), p),
        }
    }
}

#[inline]
fn head(rec: &[u8]) -> u16 {
    u16::from_le_bytes([rec[0], rec[1]])
}

/// A record's parameter id.
#[inline]
pub fn pid(rec: &[u8]) -> u16 {
    head(rec) & PID_MASK
}

#[inline]
pub fn set_pid(rec: &mut [u8], pid: u16) {
    let h = (head(rec) & !PID_MASK) | pid;
    rec[..HEAD].copy_from_slice(&h.to_le_bytes());
}

/// Reads `W` little-endian bytes at `at` as an integer.
#[inline]
fn get<const W: usize>(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v[..W].copy_from_slice(&b[at..at + W]);
    u64::from_le_bytes(v)
}

/// Writes the low `W` bytes of `v` at `at`; the caller checked it fits.
#[inline]
fn put<const W: usize>(b: &mut [u8], at: usize, v: u64) {
    b[at..at + W].copy_from_slice(&v.to_le_bytes()[..W]);
}

/// A log record's key and parameter id, packed as they were before
/// records took keys of any length: 2 bytes of length - 1 (4 bits) and id,
/// then the key zero-padded to 16 bytes.
#[derive(Clone, Copy)]
pub struct Rec<const N: usize>([u8; N]);

/// The key and parameter id alone (the head of a log record).
pub type KeyRec = Rec<BODY>;

impl<const N: usize> Default for Rec<N> {
    fn default() -> Self {
        Rec([0; N])
    }
}

impl<const N: usize> std::fmt::Debug for Rec<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rec({:?})", String::from_utf8_lossy(self.key()))
    }
}

impl<const N: usize> Rec<N> {
    /// `key` is 1-16 bytes and `pid` under `1 << PID_BITS` (`pack` and
    /// `ParamTable` see to both).
    pub fn new(key: &[u8], pid: u16) -> Self {
        debug_assert!((1..=LOG_KEY_MAX).contains(&key.len()) && pid >> PID_BITS == 0);
        let mut r = Rec([0; N]);
        let head = ((key.len() as u16 - 1) << PID_BITS) | pid;
        r.0[..KEY].copy_from_slice(&head.to_le_bytes());
        r.0[KEY..KEY + key.len()].copy_from_slice(key);
        r
    }

    fn head(&self) -> u16 {
        u16::from_le_bytes([self.0[0], self.0[1]])
    }

    pub fn key(&self) -> &[u8] {
        let len = (self.head() >> PID_BITS) as usize + 1;
        &self.0[KEY..KEY + len]
    }

    pub fn pid(&self) -> u16 {
        self.head() & PID_MASK
    }
}

/// A `log` key: the key and parameter id packed as in every record, and
/// the log's 24-byte handle to its ring (48 bytes with alignment, against
/// 96 for a general record).
#[derive(Debug, Default)]
pub struct LogRec {
    state: log::State,
    id: KeyRec,
}

impl LogRec {
    pub fn key(&self) -> &[u8] {
        self.id.key()
    }

    pub fn pid(&self) -> u16 {
        self.id.pid()
    }

    pub fn heap_size(&self) -> usize {
        self.state.heap_size()
    }
}

/// An entry checked to fit a compact class, with the fields its record
/// holds (bucket numbers already divided out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packed {
    Window {
        bucket: u64,
        prev: u32,
        curr: u32,
    },
    Fixed {
        bucket: u64,
        count: u32,
    },
    Gcra {
        tat: u64,
    },
    /// The state's compact form ([`sliding::State::to_compact`]).
    Sliding {
        compact: [u8; sliding::COMPACT_BYTES],
    },
    /// The ring moves into the record from the entry itself.
    Log,
}

impl Packed {
    /// The constant-size algorithm, or `None` for a log.
    #[inline]
    pub fn kind(&self) -> Option<Kind> {
        match self {
            Packed::Window { .. } => Some(Kind::Window),
            Packed::Fixed { .. } => Some(Kind::Fixed),
            Packed::Gcra { .. } => Some(Kind::Gcra),
            Packed::Sliding { .. } => Some(Kind::Sliding),
            Packed::Log => None,
        }
    }
}

/// The TTL (ms) a limiter state implies: [`Limiter::expires_at`], the one
/// rule, rounded as an `Entry` rounds it.
fn ttl_of<S: Limiter>(state: &S, p: &Params) -> u64 {
    expiry_ms_at(state.expires_at(p))
}

/// A limiter key's entry: its TTL is the moment its state stops mattering.
fn limiter_entry(value: Value, stops_at: u64) -> Entry {
    Entry::with_expiry(value, Some(Nanos(stops_at)))
}

/// What a fixed record's window number counts in: the period, or for a
/// calendar-aligned limit (whose windows are months, weeks, ...: no
/// multiple of one length) whole minutes, which every boundary is.
fn fixed_unit(p: &Params) -> u64 {
    match p.calendar() {
        Some(_) => 60 * Nanos::PER_SEC,
        None => p.period(),
    }
}

/// `start / period` if `start` is a bucket boundary that fits 48 bits.
fn bucket(start: u64, period: u64) -> Option<u64> {
    let (q, r) = (start / period, start % period);
    (r == 0 && q <= U48_MAX).then_some(q)
}

fn u32_of(n: u64) -> Option<u32> {
    u32::try_from(n).ok()
}

/// How `entry` packs into a compact record, with its parameters, or `None`
/// if it must be stored whole. An entry fits only if its TTL is exactly
/// the one its state implies, so that deriving the TTL on read gives it
/// back.
pub fn pack(key: &[u8], entry: &Entry) -> Option<(Packed, Params)> {
    let max = match entry.value {
        Value::Log(_) => LOG_KEY_MAX,
        _ => KEY_MAX,
    };
    if key.is_empty() || key.len() > max {
        return None;
    }
    let ttl = entry.expiry_ms()?;
    let (packed, p, at) = match &entry.value {
        Value::Window(s) => {
            let (st, p) = (&s.state, &s.params);
            let packed = Packed::Window {
                bucket: bucket(st.start, p.period())?,
                prev: u32_of(st.prev)?,
                curr: u32_of(st.curr)?,
            };
            (packed, p, s.expires_at())
        }
        Value::Fixed(s) => {
            let (st, p) = (&s.state, &s.params);
            let packed = Packed::Fixed {
                bucket: bucket(st.start, fixed_unit(p))?,
                count: u32_of(st.count)?,
            };
            (packed, p, s.expires_at())
        }
        Value::Gcra(s) => (Packed::Gcra { tat: s.state.tat }, &s.params, s.expires_at()),
        Value::Log(s) => (Packed::Log, &s.params, s.expires_at()),
        Value::Sliding(s) => (
            Packed::Sliding {
                compact: s.state.to_compact()?,
            },
            &s.params,
            s.expires_at(),
        ),
        // Blocked keys are few and short-lived: stored whole.
        Value::Str(_)
        | Value::List(_)
        | Value::ZSet(_)
        | Value::Hash(_)
        | Value::Lease(_)
        | Value::Blocked(_) => return None,
    };
    (expiry_ms_at(at) == ttl).then_some((packed, *p))
}

fn decode_sliding(st: &[u8]) -> sliding::State {
    let mut b = [0u8; sliding::COMPACT_BYTES];
    b.copy_from_slice(st);
    sliding::State::from_compact(&b)
}

fn decode_window(st: &[u8], p: &Params) -> window::State {
    window::State {
        start: get::<6>(st, 0) * p.period(),
        prev: get::<4>(st, 6),
        curr: get::<4>(st, 10),
    }
}

fn decode_fixed(st: &[u8], p: &Params) -> fixed::State {
    fixed::State {
        start: get::<6>(st, 0) * fixed_unit(p),
        count: get::<4>(st, 6),
    }
}

fn decode_gcra(st: &[u8]) -> gcra::State {
    gcra::State {
        tat: get::<8>(st, 0),
    }
}

pub fn encode_log(key: &[u8], pid: u16, state: log::State) -> LogRec {
    LogRec {
        state,
        id: Rec::new(key, pid),
    }
}

fn log_value(p: &Params, state: log::State) -> Entry {
    let at = state.expires_at(p);
    limiter_entry(Value::Log(Stored { params: *p, state }), at)
}

/// The entry a log record stands for, its ring moved out (to be changed
/// and stored again, or dropped); the record is left with an empty log.
pub fn take_log(r: &mut LogRec, p: &Params) -> Entry {
    log_value(p, std::mem::take(&mut r.state))
}

/// Calls `f` with the entry a log record stands for, without copying its
/// ring: reads (`TTL`, `RL.PEEK`, `SCAN`, snapshots) would otherwise clone
/// a heap block per call. The entry holds a view of the ring
/// ([`log::State::view`]), which never frees it: dropping the entry, here
/// or while a panic in `f` unwinds, leaves the record whole; a clone `f`
/// takes copies the ring.
pub fn with_log<R>(r: &LogRec, p: &Params, f: impl FnOnce(&Entry) -> R) -> R {
    // SAFETY: the view is dropped at the end of this call, and `r` is
    // borrowed shared until then: its ring is neither changed nor freed
    // while the view reads it.
    let view = log_value(p, unsafe { r.state.view() });
    f(&view)
}

pub fn log_ttl(r: &LogRec, p: &Params) -> u64 {
    ttl_of(&r.state, p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::params_secs;

    const S: u64 = 1_000_000_000;

    /// A key of up to 128 bytes costs its length and nothing more; longer
    /// ones at most 7 bytes of padding; past 1,024 bytes, none packs.
    #[test]
    fn record_lengths_follow_the_key() {
        for kind in Kind::ALL {
            for len in 1..=KEY_MAX {
                let l = Layout::of(kind, &vec![b'k'; len]).unwrap();
                let fixed = 2 + kind.state_len();
                assert_eq!(
                    l.rec_len() - fixed - len,
                    if len <= EXACT_MAX {
                        0
                    } else {
                        (STEP - len % STEP) % STEP
                    },
                    "{kind:?} {len}"
                );
            }
            assert!(Layout::of(kind, b"").is_none());
            assert!(Layout::of(kind, &[0; KEY_MAX + 1]).is_none());
        }
        assert_eq!(key_class(KEY_MAX), Some(KEY_CLASSES - 1));
        assert_eq!(
            Layout::of(Kind::Window, b"k:00000000000001")
                .unwrap()
                .rec_len(),
            32
        );
        assert_eq!(Layout::of(Kind::Gcra, &[7; 36]).unwrap().rec_len(), 46);
        assert_eq!(Layout::of(Kind::Sliding, &[7; 128]).unwrap().rec_len(), 150);
    }

    fn with_ttl(value: Value, at_ns: u64) -> Entry {
        Entry::with_expiry(value, Some(Nanos(at_ns)))
    }

    /// A limiter key's entry as the command layer leaves it: `state` under
    /// `p`, its TTL the one the state implies.
    fn stored<S: Limiter>(wrap: fn(Stored<S>) -> Value, p: Params, state: S) -> Entry {
        let s = Stored { params: p, state };
        let at = s.expires_at().0;
        with_ttl(wrap(s), at)
    }

    fn packed(key: &[u8], e: &Entry) -> Option<Packed> {
        pack(key, e).map(|(packed, _)| packed)
    }

    /// The record `Shard` would write for `e`.
    fn rec(key: &[u8], pid: u16, e: &Entry) -> (Layout, Vec<u8>) {
        let packed = packed(key, e).expect("packs");
        let l = Layout::of(packed.kind().expect("constant-size"), key).unwrap();
        // Over a slot that held something else.
        let mut r = vec![0xa5; l.rec_len()];
        l.init(&mut r, key, pid);
        l.set(&mut r, &packed);
        (l, r)
    }

    #[test]
    fn window_round_trip_and_limits() {
        let p = params_secs(100, 60);
        let st = window::State {
            start: 1_700_000_040 * S,
            prev: u32::MAX as u64,
            curr: 3,
        };
        let e = stored(Value::Window, p, st);
        // Keys of every length a class boundary falls near, with zero
        // bytes at their ends (which padding must not be mistaken for).
        for len in [
            1, 2, 15, 16, 17, 19, 36, 64, 127, 128, 129, 130, 136, 137, 200, 1023, 1024,
        ] {
            for last in [0u8, b'z'] {
                let mut key = vec![b'k'; len];
                key[len - 1] = last;
                let (l, r) = rec(&key, 7, &e);
                assert_eq!(l.key(&r), &key[..], "{len}");
                assert_eq!(pid(&r), 7);
                let mut r2 = r.clone();
                set_pid(&mut r2, 4095);
                assert_eq!((l.key(&r2), pid(&r2)), (&key[..], 4095));
                assert_eq!(l.entry(&r, &p), e);
                assert_eq!(Some(l.ttl(&r, &p)), e.expiry_ms());
            }
        }
        // What does not fit goes whole.
        assert!(pack(&[b'k'; KEY_MAX + 1], &e).is_none(), "1,025-byte key");
        let wide = window::State {
            prev: u32::MAX as u64 + 1,
            ..st
        };
        let e2 = stored(Value::Window, p, wide);
        assert!(pack(b"k", &e2).is_none(), "count over u32");
        let mut e3 = e.clone();
        e3.set_expiry_ms(Some(e.expiry_ms().unwrap() + 1));
        assert!(pack(b"k", &e3).is_none(), "a TTL set by EXPIRE");
        e3.set_expiry(None);
        assert!(pack(b"k", &e3).is_none(), "PERSIST");
    }

    #[test]
    fn log_round_trip_and_view() {
        let p = params_secs(10, 60);
        let mut st = log::State::default();
        for t in [1, 2, 2, 5] {
            assert!(log::decide(&mut st, &p, 1_700_000_000 * S + t * S, 1).allowed);
        }
        let e = with_ttl(
            Value::Log(Stored {
                params: p,
                state: st.clone(),
            }),
            st.expires_at(&p),
        );
        assert_eq!(pack(b"lk", &e), Some((Packed::Log, p)));
        assert!(
            pack(&[b'l'; LOG_KEY_MAX + 1], &e).is_none(),
            "a long log key"
        );
        let mut r = encode_log(b"lk", 3, st);
        assert_eq!((r.key(), r.pid()), (&b"lk"[..], 3));
        assert_eq!(Some(log_ttl(&r, &p)), e.expiry_ms());
        // A view, twice (the ring is still there after the first), and a
        // clone taken through it that outlives it.
        let kept = with_log(&r, &p, |v| v.clone());
        assert_eq!(kept, e);
        assert_eq!(with_log(&r, &p, |v| v.clone()), e);
        // A reader that panics: the view is dropped while unwinding and
        // the record's ring is still whole (read, then moved out).
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_log(&r, &p, |v| -> () { panic!("reader failed on {v:?}") })
        }));
        assert!(failed.is_err());
        assert_eq!(with_log(&r, &p, |v| v.clone()), e);
        assert_eq!(take_log(&mut r, &p), e);
        assert_eq!(r.heap_size(), 0, "the ring moved out");
    }

    /// A calendar month's window (no multiple of its nominal 30 days)
    /// still packs: its number counts minutes.
    #[test]
    fn calendar_windows_pack() {
        use crate::limiter::calendar::{Calendar, Unit};
        let c = Calendar {
            unit: Unit::Month,
            offset_min: 330,
        };
        let mut p = params_secs(10_000, 30 * 86_400);
        p.precision = std::num::NonZeroU64::new(c.code()).unwrap();
        let (start, _) = c.window(1_772_000_000 * S);
        assert_ne!(start % p.period(), 0);
        let f = fixed::State { start, count: 7 };
        let e = stored(Value::Fixed, p, f);
        let Some(Packed::Fixed { .. }) = packed(b"m", &e) else {
            panic!("a calendar window is stored whole")
        };
        let (l, r) = rec(b"m", 1, &e);
        assert_eq!(l.entry(&r, &p), e);
        assert_eq!(Some(l.ttl(&r, &p)), e.expiry_ms());
    }

    #[test]
    fn sliding_round_trip() {
        let p = params_secs(50, 10);
        let mut st = sliding::State::default();
        for i in 0..30 {
            sliding::decide(&mut st, &p, 1_700_000_000 * S + i * 700_000_000, 1 + i % 4);
        }
        let e = stored(Value::Sliding, p, st);
        let Some(Packed::Sliding { .. }) = packed(b"sk", &e) else {
            panic!("not sliding")
        };
        for key in [&b"sk"[..], &[b's'; 77], &[b's'; 300]] {
            let (l, r) = rec(key, 9, &e);
            assert_eq!((l.key(&r), pid(&r)), (key, 9));
            assert_eq!(l.entry(&r, &p), e);
            assert_eq!(Some(l.ttl(&r, &p)), e.expiry_ms());
        }
        // A sub-bucket over 4,095 units, or a sub-bucket number over 40
        // bits (a period under 19 ms), is stored whole.
        for (newest, count) in [(st.newest(), 4_096), (1 << 40, 1)] {
            let mut slots = [(0, 0); sliding::SLOTS];
            slots[2] = (count, 200);
            let big = sliding::State::from_parts(newest, slots).unwrap();
            let e = stored(Value::Sliding, p, big);
            assert!(pack(b"sk", &e).is_none(), "{newest} {count}");
        }
    }

    #[test]
    fn fixed_and_gcra_round_trip() {
        let p = params_secs(10, 1);
        let f = fixed::State {
            start: 1_700_000_000 * S,
            count: 9,
        };
        let e = stored(Value::Fixed, p, f);
        assert!(pack(b"", &e).is_none(), "the empty key is stored whole");
        let Some(Packed::Fixed { .. }) = packed(b"f", &e) else {
            panic!("not fixed")
        };
        let (l, r) = rec(b"f", 4095, &e);
        assert_eq!((l.key(&r), pid(&r)), (&b"f"[..], 4095));
        assert_eq!(l.entry(&r, &p), e);
        let g = gcra::State { tat: u64::MAX - 5 };
        let e = with_ttl(
            Value::Gcra(Stored {
                params: p,
                state: g,
            }),
            g.expires_at(),
        );
        assert_eq!(packed(b"gk", &e), Some(Packed::Gcra { tat: g.tat }));
        let (l, r) = rec(&[b'g'; 40], 2, &e);
        assert_eq!(l.entry(&r, &p), e);
        assert_eq!(Some(l.ttl(&r, &p)), e.expiry_ms());
        // A bucket number past 48 bits (a 1 ns period) is stored whole.
        let tiny = crate::limiter::Params::new(
            std::num::NonZeroU64::new(5).unwrap(),
            std::num::NonZeroU64::new(1).unwrap(),
        );
        let f = fixed::State {
            start: 1_700_000_000 * S,
            count: 1,
        };
        let e = with_ttl(
            Value::Fixed(Stored {
                params: tiny,
                state: f,
            }),
            f.expires_at(&tiny),
        );
        assert!(pack(b"k", &e).is_none());
    }
}
