//! Compact records: how a limiter key is stored. The constant-size
//! algorithms (`window`, `sliding`, `fixed`, `gcra`: each packs its state
//! itself, [`Storage::pack`] in its own file) pack into a record of
//! 2 bytes, their state (8-20 bytes) and the key's own bytes, with no
//! padding for keys up to [`EXACT_MAX`] bytes, instead of a 96-byte
//! general record and a heap block for the key. A `log` key's and a lease
//! key's record holds, in place of a state, the 4-byte number of the
//! state's slot in its shard's arena of logs or of leases ([`Kind::owned`]):
//! the states own heap blocks, which a byte record cannot (so the arena of
//! typed slots drops them), and their headers are constant-size (24 and 48
//! bytes), so they are records of a size too, whatever the key's length.
//!
//! Slabs are by algorithm and key class rather than by record size: the
//! slab names the algorithm, so a record needs no byte to say it, and
//! the algorithms' states are of different sizes anyway (a second
//! algorithm of one size takes slabs of its own).
//!
//! | bytes | field |
//! |---|---|
//! | 2 | parameter id (12 bits, `params.rs`; 0 for a lease key, which has no parameters); for keys over [`EXACT_MAX`] bytes, the length's offset in its class (4 bits) |
//! | window: 6 + 4 + 4 | bucket number (`start / period`), previous count, current count |
//! | fixed: 6 + 4 | window number, count |
//! | gcra: 8 | TAT (ns) |
//! | sliding: 5 + 9 + 6 | newest sub-bucket number, six 12-bit counts, six last-admission steps (`limiter/sliding.rs`) |
//! | log, lease: 4 | the state's slot in the shard's arena of logs or leases |
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
use crate::limiter::contract::{get_le, put_le};
use crate::limiter::{for_each_algorithm, with_algorithm};
use crate::limiter::{log, Algorithm, Limiter, Params, Storage};
pub use crate::limiter::{StateBytes, STATE_MAX};
use crate::store::entry::{expiry_ms_at, Entry, LeaseKey, Stored, Value};
use crate::store::limit::Held;

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
/// Bits of the parameter id: a shard holds up to 4,096 distinct parameter
/// sets in compact records. Two bytes for the id (and a long key's length
/// offset) rather than three is what keeps `gcra` at 10 bytes plus its key.
pub const PID_BITS: u32 = 12;
const PID_MASK: u16 = (1 << PID_BITS) - 1;
const HEAD: usize = 2;

macro_rules! kinds {
    ($([$variant:ident $module:ident])*) => {
        /// What a compact record holds: an algorithm's state (a kind per
        /// line of the algorithms' list, named and numbered as the
        /// algorithm), or the slot of a log's or a lease key's state.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Kind {
            $($variant = Algorithm::$variant as isize,)*
            Lease = Algorithm::COUNT as isize,
        }

        impl Kind {
            /// The kind of `algo`'s records.
            #[inline]
            pub const fn of(algo: Algorithm) -> Kind {
                match algo {
                    $(Algorithm::$variant => Kind::$variant,)*
                }
            }

            /// The algorithm whose state the record holds; `None` for a
            /// lease key.
            #[inline]
            pub const fn algorithm(self) -> Option<Algorithm> {
                match self {
                    $(Kind::$variant => Some(Algorithm::$variant),)*
                    Kind::Lease => None,
                }
            }
        }
    };
}
for_each_algorithm!(kinds);

pub const KINDS: usize = Algorithm::COUNT + 1;

// A variable-size state needs an arena of its own in the shard: only the
// log has one, so only the log may have no compact form.
const _: () = {
    let mut i = 0;
    while i < Algorithm::COUNT {
        let k = Kind::of(Algorithm::ALL[i]);
        assert!(k as usize == i, "a kind is numbered as its algorithm");
        assert!(
            !k.owned() || matches!(k, Kind::Log),
            "an algorithm with no compact form other than the log"
        );
        i += 1;
    }
};

impl Kind {
    /// Every kind, each at its number: the algorithms' in their places,
    /// then the lease key's.
    pub const ALL: [Kind; KINDS] = {
        let mut all = [Kind::Lease; KINDS];
        let mut i = 0;
        while i < Algorithm::COUNT {
            all[i] = Kind::of(Algorithm::ALL[i]);
            i += 1;
        }
        all
    };

    /// The bytes of the algorithm's compact form
    /// ([`Storage::COMPACT_LEN`]); 0 for none (a log's) or a lease key.
    #[inline]
    const fn compact_len(self) -> usize {
        const fn of<S: Storage>() -> usize {
            S::COMPACT_LEN
        }
        match self.algorithm() {
            Some(a) => with_algorithm!(a, of()),
            None => 0,
        }
    }

    /// Bytes of the state, between the head and the key: the compact
    /// form, or a 4-byte slot. Read from a table made at compile time (a
    /// key's record is found by its key, after these bytes, on every
    /// lookup).
    #[inline]
    pub const fn state_len(self) -> usize {
        const LENS: [u8; KINDS] = {
            let mut lens = [0; KINDS];
            let mut i = 0;
            while i < KINDS {
                lens[i] = match Kind::ALL[i].compact_len() {
                    0 => 4,
                    n => n as u8,
                };
                i += 1;
            }
            lens
        };
        LENS[self as usize] as usize
    }

    /// Whether the record holds its state's slot in an arena of the
    /// shard's ([`Layout::slot`]) rather than the state: a lease key's,
    /// and an algorithm's with no compact form (the log's).
    #[inline]
    pub const fn owned(self) -> bool {
        const OWNED: [bool; KINDS] = {
            let mut owned = [false; KINDS];
            let mut i = 0;
            while i < KINDS {
                owned[i] = Kind::ALL[i].compact_len() == 0;
                i += 1;
            }
            owned
        };
        OWNED[self as usize]
    }

    /// Whether the record's parameter id is in use (a lease key has no
    /// parameters: its limit is its state's).
    pub const fn has_params(self) -> bool {
        !matches!(self, Kind::Lease)
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
        match packed {
            Packed::State(_, bytes) => self.set_state(rec, bytes),
            Packed::Log | Packed::Lease => unreachable!("an owned state is set by its slot"),
        }
    }

    /// Writes a constant-size state's bytes ([`Storage::pack`]).
    #[inline]
    pub fn set_state(self, rec: &mut [u8], bytes: &StateBytes) {
        let n = self.kind.state_len();
        rec[HEAD..HEAD + n].copy_from_slice(&bytes[..n]);
    }

    /// A constant-size state's bytes, for [`Storage::unpack`].
    #[inline]
    pub fn state(self, rec: &[u8]) -> &[u8] {
        &rec[HEAD..self.key_at()]
    }

    /// The slot an owned state ([`Kind::owned`]) has in its arena.
    pub fn slot(self, rec: &[u8]) -> u32 {
        debug_assert!(self.kind.owned());
        get_le::<4>(&rec[HEAD..], 0) as u32
    }

    pub fn set_slot(self, rec: &mut [u8], slot: u32) {
        debug_assert!(self.kind.owned());
        put_le::<4>(&mut rec[HEAD..], 0, slot as u64);
    }

    /// The entry a record stands for.
    pub fn entry(self, rec: &[u8], p: &Params) -> Entry {
        fn entry_of<S: Held>(st: &[u8], p: &Params) -> Entry {
            let state = S::unpack(st, p);
            let at = state.expires_at(p).0;
            limiter_entry(S::into_value(Stored { params: *p, state }), at)
        }
        let st = self.state(rec);
        with_compact!(self.kind, entry_of(st, p))
    }

    /// The TTL (ms) of a record, without building an entry: for the sweeper.
    pub fn ttl(self, rec: &[u8], p: &Params) -> u64 {
        fn ttl_from<S: Held>(st: &[u8], p: &Params) -> u64 {
            ttl_of(&S::unpack(st, p), p)
        }
        let st = self.state(rec);
        with_compact!(self.kind, ttl_from(st, p))
    }
}

/// Runs `$f::<S>` for the state type of a constant-size `$kind`.
macro_rules! with_compact {
    ($kind:expr, $f:ident ( $($arg:expr),* )) => {
        match $kind.algorithm() {
            Some(a) => with_algorithm!(a, $f($($arg),*)),
            None => unreachable!("an owned state is read from its arena"),
        }
    };
}
use with_compact;

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

/// An entry checked to fit a compact class: a constant-size state's
/// bytes ([`Storage::pack`]), or a state that moves into its arena from
/// the entry itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packed {
    State(Kind, StateBytes),
    Log,
    Lease,
}

impl Packed {
    #[inline]
    pub fn kind(&self) -> Kind {
        match self {
            Packed::State(k, _) => *k,
            Packed::Log => Kind::Log,
            Packed::Lease => Kind::Lease,
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
    let mut e = Entry::new(value);
    e.set_state_expiry(Nanos(stops_at));
    e
}

/// How `entry` packs into a compact record, with its parameters (none for
/// a lease key), or `None` if it must be stored whole. An entry fits only
/// if its TTL is exactly the one its state implies, so that deriving the
/// TTL on read gives it back: for a constant-size state, an entry whose
/// expiry was set from its state ([`Entry::expiry_is_derived`]) does
/// without deriving it again (a decision's third derivation, after the
/// read's and the charge's). A log or lease key's is always derived here.
pub fn pack(key: &[u8], entry: &Entry) -> Option<(Packed, Option<Params>)> {
    if key.is_empty() || key.len() > KEY_MAX {
        return None;
    }
    let ttl = entry.expiry_ms()?;
    if let Value::Lease(l) = &entry.value {
        let at = Nanos(l.leases.expires_at());
        return (expiry_ms_at(at) == ttl).then_some((Packed::Lease, None));
    }
    // Blocked keys are few and short-lived: stored whole.
    if matches!(entry.value, Value::Blocked(_)) {
        return None;
    }
    let derived = entry.expiry_is_derived();
    fn of<S: Held>(v: &Value, derived: bool) -> Option<(Packed, Params, Option<Nanos>)> {
        let s = S::get(v)?;
        let kind = Kind::of(S::ALGORITHM);
        if kind.owned() {
            // The log's ring, to its arena: its TTL is always derived here.
            return Some((Packed::Log, s.params, Some(s.expires_at())));
        }
        let bytes = s.state.pack(&s.params)?;
        Some((
            Packed::State(kind, bytes),
            s.params,
            (!derived).then(|| s.expires_at()),
        ))
    }
    let (packed, p, at) = with_algorithm!(entry.value.algorithm()?, of(&entry.value, derived))?;
    at.is_none_or(|at| expiry_ms_at(at) == ttl)
        .then_some((packed, Some(p)))
}

fn log_value(p: &Params, state: log::State) -> Entry {
    let at = state.expires_at(p);
    limiter_entry(Value::Log(Stored { params: *p, state }), at)
}

/// The entry a log's slot stands for, its ring moved out (to be changed
/// and stored again, or dropped); the slot is left with an empty log.
pub fn take_log(slot: &mut log::State, p: &Params) -> Entry {
    log_value(p, std::mem::take(slot))
}

/// Calls `f` with the entry a log's slot stands for, without copying its
/// ring: reads (`TTL`, `RL.PEEK`, `SCAN`, snapshots) would otherwise clone
/// a heap block per call. The entry holds a view of the ring
/// ([`log::State::with_view`]), which never frees it: dropping the entry,
/// here or while a panic in `f` unwinds, leaves the slot whole; a clone
/// `f` takes copies the ring.
pub fn with_log<R>(slot: &log::State, p: &Params, f: impl FnOnce(&Entry) -> R) -> R {
    slot.with_view(|view| log_value(p, view), f)
}

pub fn log_ttl(slot: &log::State, p: &Params) -> u64 {
    ttl_of(slot, p)
}

/// A lease key's entry: its TTL is its last lease's end.
pub fn lease_value(l: LeaseKey) -> Entry {
    let at = l.leases.expires_at();
    Entry::with_expiry(Value::Lease(l), Some(Nanos(at)))
}

pub fn lease_ttl(l: &LeaseKey) -> u64 {
    expiry_ms_at(Nanos(l.leases.expires_at()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{fixed, gcra, params_secs, sliding, window};

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
        let l = Layout::of(packed.kind(), key).unwrap();
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

    /// An expiry marked as its state's is stored without deriving it
    /// again; any other is checked, and setting one clears the mark.
    #[test]
    fn a_state_expiry_is_trusted_and_any_other_checked() {
        let p = params_secs(100, 60);
        let st = window::State {
            start: 1_700_000_040 * S,
            prev: 1,
            curr: 3,
        };
        let e = stored(Value::Window, p, st);
        assert!(!e.expiry_is_derived());
        let (l, r) = rec(b"k", 7, &e);
        let read = l.entry(&r, &p);
        assert!(read.expiry_is_derived(), "a record's expiry is its state's");
        assert_eq!(read, e, "how an expiry was set is not part of the entry");
        // EXPIRE to the same moment: checked, and it fits; to another: whole.
        let mut x = read.clone();
        x.set_expiry_ms(read.expiry_ms());
        assert!(!x.expiry_is_derived());
        assert!(pack(b"k", &x).is_some());
        x.set_expiry_ms(Some(read.expiry_ms().unwrap() + 1));
        assert!(pack(b"k", &x).is_none(), "a TTL set by EXPIRE");
        // The mark is trusted: pack does not derive a marked expiry again
        // (which is why only a state's own expiry may carry it).
        let mut m = e.clone();
        m.set_state_expiry(Nanos((e.expiry_ms().unwrap() + 5) * 1_000_000));
        assert!(pack(b"k", &m).is_some());
    }

    /// A log of four admissions (a ring on the heap), its parameters and
    /// its entry.
    fn a_log() -> (Params, log::State, Entry) {
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
        (p, st, e)
    }

    #[test]
    fn log_and_lease_records_hold_their_slots() {
        let (p, _, e) = a_log();
        // Any key length up to KEY_MAX: a log key over 16 bytes was stored
        // whole.
        for key in [&b"lk"[..], &[b'l'; 17], &[b'l'; 300], &[b'l'; KEY_MAX]] {
            assert_eq!(pack(key, &e), Some((Packed::Log, Some(p))));
            let l = Layout::of(Kind::Log, key).unwrap();
            let mut r = vec![0xa5; l.rec_len()];
            l.init(&mut r, key, 3);
            l.set_slot(&mut r, u32::MAX - 1);
            assert_eq!((l.key(&r), pid(&r), l.slot(&r)), (key, 3, u32::MAX - 1));
        }
        assert!(pack(&[b'l'; KEY_MAX + 1], &e).is_none());
        let lease = crate::limiter::lease::Lease::new([1; 16], 1_700_000_100 * S, 2);
        let leases = crate::limiter::lease::Leases::from_leases([lease], 1_700_000_000 * S);
        let l = lease_value(LeaseKey { limit: 4, leases });
        assert_eq!(pack(&[b'q'; 40], &l), Some((Packed::Lease, None)));
        let Value::Lease(k) = &l.value else {
            panic!("not a lease key")
        };
        assert_eq!(Some(lease_ttl(k)), l.expiry_ms());
        // A lease key whose TTL is not its last lease's end is stored whole.
        let mut l2 = l.clone();
        l2.set_expiry_ms(Some(l.expiry_ms().unwrap() + 1));
        assert!(pack(b"q", &l2).is_none());
    }

    #[test]
    fn a_log_slot_is_read_through_a_view_and_moved_out() {
        let (p, st, e) = a_log();
        let mut slot = st;
        assert_eq!(Some(log_ttl(&slot, &p)), e.expiry_ms());
        // A view, twice (the ring is still there after the first), and a
        // clone taken through it that outlives it.
        let kept = with_log(&slot, &p, |v| v.clone());
        assert_eq!(kept, e);
        assert_eq!(with_log(&slot, &p, |v| v.clone()), e);
        // A reader that panics: the view is dropped while unwinding and
        // the slot's ring is still whole (read, then moved out).
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_log(&slot, &p, |v| -> () { panic!("reader failed on {v:?}") })
        }));
        assert!(failed.is_err());
        assert_eq!(with_log(&slot, &p, |v| v.clone()), e);
        assert_eq!(take_log(&mut slot, &p), e);
        assert_eq!(slot.heap_size(), 0, "the ring moved out");
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
        let Some(Packed::State(Kind::Fixed, _)) = packed(b"m", &e) else {
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
        let Some(Packed::State(Kind::Sliding, _)) = packed(b"sk", &e) else {
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
        let Some(Packed::State(Kind::Fixed, _)) = packed(b"f", &e) else {
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
        let mut tat = [0; STATE_MAX];
        tat[..8].copy_from_slice(&g.tat.to_le_bytes());
        assert_eq!(packed(b"gk", &e), Some(Packed::State(Kind::Gcra, tat)));
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
