//! Compact records: how a limiter key is stored. The four constant-size
//! algorithms (`window`, `sliding`, `fixed`, `gcra`) pack into 26-42 bytes
//! with no padding, instead of a 96-byte general record; a `log` key is its key
//! and id beside the log's 24-byte ring handle ([`LogRec`], 48 bytes).
//!
//! | bytes | field |
//! |---|---|
//! | 2 | key length - 1 (4 bits, so 1-16) and parameter id (12 bits, `params.rs`) |
//! | 16 | the key, zero-padded |
//! | window: 6 + 4 + 4 | bucket number (`start / period`), previous count, current count |
//! | fixed: 6 + 4 | window number, count |
//! | gcra: 8 | TAT (ns) |
//! | sliding: 24 | newest sub-bucket number, six counts, six last-admission steps (`limiter/sliding.rs`) |
//! | log: 24 | one slot inline, or the handle of its ring (`limiter/log/`) |
//!
//! There is no expiry field: a limiter key's TTL is always the moment its
//! state stops mattering, derived from the state itself (`expires_at`), so
//! it is recomputed on read. A key that does not fit (an empty or longer key, counts
//! over `u32`, a bucket number over 48 bits, a TTL set by `EXPIRE` or
//! `PERSIST`, a shard out of parameter ids) is stored whole in the general
//! class instead; a later write moves it back once it fits again.
//!
//! Bucket numbers rather than start times: starts are multiples of the
//! period, and 48 bits of bucket number cover the epoch to now for any
//! period of 10 us or more.

use crate::clock::Nanos;
use crate::limiter::{fixed, gcra, log, sliding, window, Limiter, Params};
use crate::store::entry::{expiry_ms_at, Entry, Stored, Value};

/// Longest key a compact record holds inline.
pub const KEY_MAX: usize = 16;
/// Bits of the parameter id: a shard holds up to 4,096 distinct parameter
/// sets in compact records. Two bytes for length and id rather than three
/// is what brings `fixed` under 40 bytes a key.
pub const PID_BITS: u32 = 12;
const PID_MASK: u16 = (1 << PID_BITS) - 1;
const KEY: usize = 2;
const BODY: usize = KEY + KEY_MAX;
const U48_MAX: u64 = (1 << 48) - 1;

pub const WINDOW_LEN: usize = BODY + 6 + 4 + 4;
pub const FIXED_LEN: usize = BODY + 6 + 4;
pub const GCRA_LEN: usize = BODY + 8;
pub const SLIDING_LEN: usize = BODY + sliding::BYTES;

/// A packed record of `N` bytes (alignment 1, so no padding).
#[derive(Clone, Copy)]
pub struct Rec<const N: usize>([u8; N]);

/// The key and parameter id alone (the head of every record).
pub type KeyRec = Rec<BODY>;
pub type WindowRec = Rec<WINDOW_LEN>;
pub type FixedRec = Rec<FIXED_LEN>;
pub type GcraRec = Rec<GCRA_LEN>;
pub type SlidingRec = Rec<SLIDING_LEN>;

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
        debug_assert!((1..=KEY_MAX).contains(&key.len()) && pid >> PID_BITS == 0);
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

    pub fn set_pid(&mut self, pid: u16) {
        let head = (self.head() & !PID_MASK) | pid;
        self.0[..KEY].copy_from_slice(&head.to_le_bytes());
    }

    /// Reads `W` little-endian bytes at `at` as an integer.
    fn get<const W: usize>(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        b[..W].copy_from_slice(&self.0[at..at + W]);
        u64::from_le_bytes(b)
    }

    /// Writes the low `W` bytes of `v` at `at`; the caller checked it fits.
    fn put<const W: usize>(&mut self, at: usize, v: u64) {
        self.0[at..at + W].copy_from_slice(&v.to_le_bytes()[..W]);
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
    /// Every state fits: its 24 bytes are the record's.
    Sliding {
        state: sliding::State,
    },
    /// The ring moves into the record from the entry itself.
    Log,
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
    if key.is_empty() || key.len() > KEY_MAX {
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
            Packed::Sliding { state: s.state },
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

impl WindowRec {
    pub fn set_window(&mut self, bucket: u64, prev: u32, curr: u32) {
        self.put::<6>(BODY, bucket);
        self.put::<4>(BODY + 6, prev as u64);
        self.put::<4>(BODY + 10, curr as u64);
    }
}

impl FixedRec {
    pub fn set_fixed(&mut self, bucket: u64, count: u32) {
        self.put::<6>(BODY, bucket);
        self.put::<4>(BODY + 6, count as u64);
    }
}

impl GcraRec {
    pub fn set_gcra(&mut self, tat: u64) {
        self.put::<8>(BODY, tat);
    }
}

impl SlidingRec {
    pub fn set_sliding(&mut self, state: &sliding::State) {
        self.0[BODY..].copy_from_slice(&state.to_bytes());
    }
}

fn decode_sliding(r: &SlidingRec) -> sliding::State {
    let mut b = [0u8; sliding::BYTES];
    b.copy_from_slice(&r.0[BODY..]);
    sliding::State::from_bytes(&b)
}

fn decode_window(r: &WindowRec, p: &Params) -> window::State {
    window::State {
        start: r.get::<6>(BODY) * p.period(),
        prev: r.get::<4>(BODY + 6),
        curr: r.get::<4>(BODY + 10),
    }
}

fn decode_fixed(r: &FixedRec, p: &Params) -> fixed::State {
    fixed::State {
        start: r.get::<6>(BODY) * fixed_unit(p),
        count: r.get::<4>(BODY + 6),
    }
}

fn decode_gcra(r: &GcraRec) -> gcra::State {
    gcra::State {
        tat: r.get::<8>(BODY),
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

/// The entry a window record stands for.
pub fn window_entry(r: &WindowRec, p: &Params) -> Entry {
    let state = decode_window(r, p);
    limiter_entry(
        Value::Window(Stored { params: *p, state }),
        state.expires_at(p),
    )
}

pub fn fixed_entry(r: &FixedRec, p: &Params) -> Entry {
    let state = decode_fixed(r, p);
    limiter_entry(
        Value::Fixed(Stored { params: *p, state }),
        state.expires_at(p),
    )
}

pub fn gcra_entry(r: &GcraRec, p: &Params) -> Entry {
    let state = decode_gcra(r);
    limiter_entry(
        Value::Gcra(Stored { params: *p, state }),
        state.expires_at(),
    )
}

pub fn sliding_entry(r: &SlidingRec, p: &Params) -> Entry {
    let state = decode_sliding(r);
    limiter_entry(
        Value::Sliding(Stored { params: *p, state }),
        state.expires_at(p),
    )
}

/// TTLs (ms) of the records, without building an entry: for the sweeper.
pub fn window_ttl(r: &WindowRec, p: &Params) -> u64 {
    ttl_of(&decode_window(r, p), p)
}

pub fn fixed_ttl(r: &FixedRec, p: &Params) -> u64 {
    ttl_of(&decode_fixed(r, p), p)
}

pub fn gcra_ttl(r: &GcraRec, p: &Params) -> u64 {
    ttl_of(&decode_gcra(r), p)
}

pub fn sliding_ttl(r: &SlidingRec, p: &Params) -> u64 {
    ttl_of(&decode_sliding(r), p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::params_secs;

    const S: u64 = 1_000_000_000;

    #[test]
    fn sizes() {
        assert_eq!(std::mem::size_of::<WindowRec>(), 32);
        assert_eq!(std::mem::size_of::<FixedRec>(), 28);
        assert_eq!(std::mem::size_of::<GcraRec>(), 26);
        assert_eq!(std::mem::size_of::<SlidingRec>(), 42);
    }

    fn with_ttl(value: Value, at_ns: u64) -> Entry {
        Entry::with_expiry(value, Some(Nanos(at_ns)))
    }

    fn packed(key: &[u8], e: &Entry) -> Option<Packed> {
        pack(key, e).map(|(packed, _)| packed)
    }

    /// The record `Shard` would write for `e`.
    fn window_rec(key: &[u8], pid: u16, e: &Entry) -> WindowRec {
        let Some(Packed::Window { bucket, prev, curr }) = packed(key, e) else {
            panic!("not a window: {e:?}")
        };
        let mut r = WindowRec::new(key, pid);
        r.set_window(bucket, prev, curr);
        r
    }

    #[test]
    fn window_round_trip_and_limits() {
        let p = params_secs(100, 60);
        let st = window::State {
            start: 1_700_000_040 * S,
            prev: u32::MAX as u64,
            curr: 3,
        };
        let e = with_ttl(
            Value::Window(Stored {
                params: p,
                state: st,
            }),
            st.expires_at(&p),
        );
        let r = window_rec(b"k:00000000000001", 7, &e);
        assert_eq!(r.key(), b"k:00000000000001");
        assert_eq!(r.pid(), 7);
        let mut r2 = r;
        r2.set_pid(4095);
        assert_eq!((r2.key(), r2.pid()), (&b"k:00000000000001"[..], 4095));
        assert_eq!(window_entry(&r, &p), e);
        assert_eq!(Some(window_ttl(&r, &p)), e.expiry_ms());
        // What does not fit goes whole.
        assert!(pack(b"k:000000000000001", &e).is_none(), "17-byte key");
        let wide = window::State {
            prev: u32::MAX as u64 + 1,
            ..st
        };
        let e2 = with_ttl(
            Value::Window(Stored {
                params: p,
                state: wide,
            }),
            wide.expires_at(&p),
        );
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
        let e = with_ttl(
            Value::Fixed(Stored {
                params: p,
                state: f,
            }),
            f.expires_at(&p),
        );
        let Some(Packed::Fixed { bucket, count }) = packed(b"m", &e) else {
            panic!("a calendar window is stored whole")
        };
        let mut r = FixedRec::new(b"m", 1);
        r.set_fixed(bucket, count);
        assert_eq!(fixed_entry(&r, &p), e);
        assert_eq!(Some(fixed_ttl(&r, &p)), e.expiry_ms());
    }

    #[test]
    fn sliding_round_trip() {
        let p = params_secs(50, 10);
        let mut st = sliding::State::default();
        for i in 0..30 {
            sliding::decide(&mut st, &p, 1_700_000_000 * S + i * 700_000_000, 1 + i % 4);
        }
        let e = with_ttl(
            Value::Sliding(Stored {
                params: p,
                state: st,
            }),
            st.expires_at(&p),
        );
        let Some(Packed::Sliding { state }) = packed(b"sk", &e) else {
            panic!("not sliding")
        };
        let mut r = SlidingRec::new(b"sk", 9);
        r.set_sliding(&state);
        assert_eq!((r.key(), r.pid()), (&b"sk"[..], 9));
        assert_eq!(sliding_entry(&r, &p), e);
        assert_eq!(Some(sliding_ttl(&r, &p)), e.expiry_ms());
    }

    #[test]
    fn fixed_and_gcra_round_trip() {
        let p = params_secs(10, 1);
        let f = fixed::State {
            start: 1_700_000_000 * S,
            count: 9,
        };
        let e = with_ttl(
            Value::Fixed(Stored {
                params: p,
                state: f,
            }),
            f.expires_at(&p),
        );
        assert!(pack(b"", &e).is_none(), "the empty key is stored whole");
        let Some(Packed::Fixed { bucket, count }) = packed(b"f", &e) else {
            panic!("not fixed")
        };
        let mut r = FixedRec::new(b"f", 4095);
        r.set_fixed(bucket, count);
        assert_eq!((r.key(), r.pid()), (&b"f"[..], 4095));
        assert_eq!(fixed_entry(&r, &p), e);
        let g = gcra::State { tat: u64::MAX - 5 };
        let e = with_ttl(
            Value::Gcra(Stored {
                params: p,
                state: g,
            }),
            g.expires_at(),
        );
        assert_eq!(packed(b"gk", &e), Some(Packed::Gcra { tat: g.tat }));
        let mut r = GcraRec::new(b"gk", 2);
        r.set_gcra(g.tat);
        assert_eq!(gcra_entry(&r, &p), e);
        assert_eq!(Some(gcra_ttl(&r, &p)), e.expiry_ms());
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
