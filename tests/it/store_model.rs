//! Model-based test of the keyspace (`turnstile::store::Store`): random
//! sequences of operations run against the store and against a trivial
//! model (a `HashMap` of every entry the store physically holds, expired
//! ones included), on a clock that only moves forward, and after every
//! operation the two must agree, value for value.
//!
//! The model mirrors the store's documented semantics exactly:
//! - `update`'s closure sees `None` for an absent or expired entry; an
//!   expired entry it finds is dropped and counted in `expired_count`;
//!   whatever the closure leaves is stored, expired or not, and `None`
//!   deletes;
//! - `get`/`exists` of an expired key delete it (and count it);
//! - `for_each_in_shard` lists live entries only and changes nothing;
//! - `sweep_shard` removes (and counts) exactly the expired entries of its
//!   shard; `len()` and `counts()` count expired entries not yet removed;
//! - `clear` drops everything without counting anything as expired;
//! - a key stays in the same shard for the store's life (learned from
//!   `for_each_in_shard`, so single-shard sweeps can be modelled exactly;
//!   forgotten on `clear`).
//!
//! Limiter values are written the way `store/limit.rs` writes them
//! (decide on the stored state, store if admitted with the expiry at which
//! the state stops mattering, delete if that moment is not after now); the
//! mirror here is checked against `apply::allow` itself at every write.

use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::num::NonZeroU64;
use turnstile::clock::Nanos;
use turnstile::limiter::LimitSpec;
use turnstile::limiter::{fixed, gcra, log, sliding, window, Algorithm, Decision, Limiter, Params};
use turnstile::store::entry::Stored;
use turnstile::store::limit::{self as apply, visit, Held, LimitError, Visit};
use turnstile::store::{Entry, SmallBytes, Store, Value};

const MS: u64 = Nanos::PER_MS;
const SEC: u64 = Nanos::PER_SEC;
const DAY: u64 = 86_400 * SEC;
/// A Unix time in 2023; runs start at a random offset under 2 s from it,
/// on a whole millisecond or not (the store keeps expiry in whole ms).
const T0: u64 = 1_700_000_000 * SEC;
/// How often (in operations) the full contents are compared.
const FULL_CHECK_EVERY: usize = 10;

// ---------------------------------------------------------------------
// The command layer's limiter write, mirrored from store/limit.rs.
// ---------------------------------------------------------------------

/// What the glue needs of each algorithm's state: the same functions
/// `limit.rs` uses.
trait Algo: Clone + Default {
    fn run(&mut self, p: &Params, now: u64, cost: u64) -> Decision;
    fn stops_mattering_at(&self, p: &Params) -> u64;
    fn stored_mut(v: &mut Value) -> Option<&mut Stored<Self>>;
    fn wrap(s: Stored<Self>) -> Value;
}

/// Every algorithm the store holds, through the contract and its
/// `Value` variant.
impl<S: Held> Algo for S {
    fn run(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        Limiter::decide(self, p, Nanos(now), cost)
    }
    fn stops_mattering_at(&self, p: &Params) -> u64 {
        Limiter::expires_at(self, p).0
    }
    fn stored_mut(v: &mut Value) -> Option<&mut Stored<Self>> {
        match v {
            // The model blocks nothing.
            Value::Blocked(_) => None,
            v => S::get_mut(v),
        }
    }
    fn wrap(s: Stored<Self>) -> Value {
        S::into_value(s)
    }
}

/// `limit.rs`'s `keep_until`: the TTL is `at`, or the key goes if `at` is
/// not after now.
fn keep_until(slot: &mut Option<Entry>, at: u64, now: Nanos) {
    if at <= now.0 {
        *slot = None;
    } else if let Some(e) = slot.as_mut() {
        e.set_expiry(Some(Nanos(at)));
    }
}

fn allow_with<S: Algo>(
    slot: &mut Option<Entry>,
    p: &Params,
    now: Nanos,
    cost: u64,
) -> Result<Decision, LimitError> {
    match slot.as_mut() {
        Some(entry) => {
            let stored = S::stored_mut(&mut entry.value).ok_or(LimitError::WrongType)?;
            // In place, as limit.rs does: a denied log decision still
            // prunes the log's expired slots, and that is kept.
            let d = stored.state.run(p, now.0, cost);
            if d.allowed {
                stored.params = *p;
                let at = stored.state.stops_mattering_at(p);
                keep_until(slot, at, now);
            }
            Ok(d)
        }
        None => {
            let mut state = S::default();
            let d = state.run(p, now.0, cost);
            if d.allowed {
                let at = state.stops_mattering_at(p);
                *slot = Some(Entry::new(S::wrap(Stored { params: *p, state })));
                keep_until(slot, at, now);
            }
            Ok(d)
        }
    }
}

/// One `RL.ALLOW`'s write to a key's slot.
fn allow(
    slot: &mut Option<Entry>,
    algo: Algorithm,
    p: &Params,
    now: Nanos,
    cost: u64,
) -> Result<Decision, LimitError> {
    let held = slot.as_ref().and_then(|e| e.value.algorithm());
    struct AllowWith<'a> {
        slot: &'a mut Option<Entry>,
        p: &'a Params,
        now: Nanos,
        cost: u64,
    }
    impl Visit for AllowWith<'_> {
        type Output = Result<Decision, LimitError>;
        fn visit<S: Held>(self) -> Self::Output {
            allow_with::<S>(self.slot, self.p, self.now, self.cost)
        }
    }
    let d = visit(algo, AllowWith { slot, p, now, cost });
    // Another algorithm's state is named in the error, as limit.rs names it.
    match (d, held) {
        (Err(LimitError::WrongType), Some(held)) => Err(LimitError::OtherLimiter {
            held: held.name(),
            asked: algo.name(),
        }),
        (d, _) => d,
    }
}

/// The expiry (ns) the command layer derives for a limiter value, `None`
/// for a string.
fn derived_expiry(v: &Value) -> Option<u64> {
    match v {
        // The model makes no collections; they keep a TTL set by hand.
        Value::Str(_) | Value::List(_) | Value::ZSet(_) | Value::Hash(_) => None,
        Value::Lease(l) => Some(l.leases.expires_at()),
        // The model blocks nothing; a block lasts past its state at most.
        Value::Blocked(b) => derived_expiry(&b.value).map(|t| t.max(b.until)),
        v => {
            struct Expiry<'a>(&'a Value);
            impl Visit for Expiry<'_> {
                type Output = Option<u64>;
                fn visit<S: Held>(self) -> Option<u64> {
                    S::get(self.0).map(|s| Limiter::expires_at(&s.state, &s.params).0)
                }
            }
            visit(v.algorithm()?, Expiry(v))
        }
    }
}

/// An entry spelled out field by field through public accessors, so that
/// comparisons do not rest on the crate's own `PartialEq` impls alone.
#[derive(Debug, PartialEq)]
struct Canon {
    expiry_ms: Option<u64>,
    value: CanonValue,
}

#[derive(Debug, PartialEq)]
enum CanonValue {
    Str(Vec<u8>),
    /// Rate-limit state: its algorithm, parameters and fields as the
    /// files carry them (`Storage::encode`).
    Limit(&'static str, Params, Vec<u8>),
    /// A collection or a lease key (the model makes none), as its debug
    /// form.
    Collection(String),
}

fn canon(e: &Entry) -> Canon {
    let value = match &e.value {
        Value::Str(s) => CanonValue::Str(s.as_slice().to_vec()),
        v @ (Value::List(_)
        | Value::ZSet(_)
        | Value::Hash(_)
        | Value::Lease(_)
        | Value::Blocked(_)) => CanonValue::Collection(format!("{v:?}")),
        v => {
            struct Fields<'a>(&'a Value);
            impl Visit for Fields<'_> {
                type Output = CanonValue;
                fn visit<S: Held>(self) -> CanonValue {
                    let s = S::get(self.0).expect("the value's own algorithm");
                    let mut fields = Vec::new();
                    s.state.encode(&mut fields);
                    CanonValue::Limit(S::ALGORITHM.name(), s.params, fields)
                }
            }
            let algo = v.algorithm().expect("a rate limit");
            visit(algo, Fields(v))
        }
    };
    Canon {
        expiry_ms: e.expiry_ms(),
        value,
    }
}

/// An entry compared field by field (`canon`); the crate's `PartialEq` on
/// `Entry` must agree.
#[derive(Debug, Clone)]
struct Checked(Entry);

impl PartialEq for Checked {
    fn eq(&self, other: &Self) -> bool {
        let eq = canon(&self.0) == canon(&other.0);
        assert_eq!(
            eq,
            self.0 == other.0,
            "Entry's PartialEq disagrees with a field-by-field comparison:\n{:?}\n{:?}",
            self.0,
            other.0
        );
        eq
    }
}

impl std::ops::Deref for Checked {
    type Target = Entry;
    fn deref(&self) -> &Entry {
        &self.0
    }
}

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n.max(1)).unwrap()
}

/// Parameters as `parse.rs` validates them for `algo`: `BURST` only for
/// gcra (else the limit), `PRECISION` only for the log (at most the
/// period, which is at most `log::MAX_PERIOD`), a sliding limit within
/// `sliding::MAX_LIMIT`.
fn normalize(algo: Algorithm, mut p: Params) -> Params {
    if algo == Algorithm::Sliding {
        p.limit = p.limit.min(nz(sliding::MAX_LIMIT));
    }
    if algo != Algorithm::Gcra {
        p.burst = p.limit;
    }
    if algo == Algorithm::Log {
        p.period = p.period.min(nz(log::MAX_PERIOD));
        p.precision = p.precision.min(p.period);
    } else {
        p.precision = NonZeroU64::MIN;
    }
    p
}

/// A cost the command layer accepts (`check_cost`): at most the capacity.
fn valid_cost(algo: Algorithm, p: &Params, cost: u64) -> u64 {
    let cap = match algo {
        Algorithm::Gcra => p.burst.get(),
        _ => p.limit(),
    };
    cost.clamp(1, cap)
}

// ---------------------------------------------------------------------
// Operations.
// ---------------------------------------------------------------------

/// An expiry to set, relative to now where it says so.
#[derive(Debug, Clone)]
enum Ttl {
    /// No expiry (`PERSIST`).
    Persist,
    /// `now + d` ns (saturating), rounded up to the ms by the entry.
    In(u64),
    /// `now - d` ns: already expired, or about to be (kept by the store
    /// until touched or swept).
    Ago(u64),
    /// An absolute expiry in ms (small values: long past; 0 is kept as 1).
    AtMs(u64),
}

impl Ttl {
    fn set(&self, e: &mut Entry, now: Nanos) {
        let want_ms = match *self {
            Ttl::Persist => {
                e.set_expiry(None);
                None
            }
            Ttl::In(d) => set_ns(e, now.0.saturating_add(d)),
            Ttl::Ago(d) => set_ns(e, now.0.saturating_sub(d)),
            Ttl::AtMs(ms) => {
                e.set_expiry_ms(Some(ms));
                Some(ms.max(1))
            }
        };
        assert_eq!(e.expiry_ms(), want_ms, "{self:?} at {now}");
    }
}

/// Sets an expiry in ns; returns the ms the entry should keep: rounded up,
/// and 0 kept as 1 (0 means "none").
fn set_ns(e: &mut Entry, at: u64) -> Option<u64> {
    e.set_expiry(Some(Nanos(at)));
    Some(at.div_ceil(MS).max(1))
}

/// Whether `e` has expired at `now`, worked out here from its expiry in ms
/// (and checked against `Entry::is_expired`): the model's one notion of
/// expiry.
fn expired(e: &Entry, now: Nanos) -> bool {
    let by_hand = e
        .expiry_ms()
        .is_some_and(|ms| ms as u128 * MS as u128 <= now.0 as u128);
    assert_eq!(
        e.is_expired(now),
        by_hand,
        "Entry::is_expired({e:?}, {now})"
    );
    by_hand
}

/// A write to one key, run inside `Store::update` (or `MultiLock::update`)
/// and, identically, on the model's slot.
#[derive(Debug, Clone)]
enum Write {
    /// `SET key val [PX ..]`: overwrites any kind of value.
    SetStr { val: Vec<u8>, ttl: Ttl },
    /// `RL.ALLOW`; `fresh` first drops whatever the key held (a `DEL` and
    /// an `RL.ALLOW` in one step, so a key can change algorithm).
    Allow {
        algo: Algorithm,
        params: Params,
        cost: u64,
        fresh: bool,
    },
    /// `EXPIRE`/`PERSIST` on whatever the key holds.
    Expire(Ttl),
    /// Sets a limiter key's expiry back to exactly the derived one.
    RestoreDerived,
    /// Stores a limiter value built field by field (not by an algorithm):
    /// the store must keep any value, whether or not a command could have
    /// made it. Expiry: the derived one if `derived`, else `ttl`.
    PutRaw {
        value: Value,
        derived: bool,
        ttl: Ttl,
    },
    /// Deletes by writing `None`.
    Delete,
    /// A read-modify-write that changes nothing.
    Touch,
}

/// What a write reports, compared between store and model.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Decision(Result<Decision, LimitError>),
    Existed(bool),
}

fn apply_write(w: &Write, slot: &mut Option<Entry>, now: Nanos) -> Outcome {
    match w {
        Write::SetStr { val, ttl } => {
            let existed = slot.is_some();
            let mut e = Entry::new(Value::Str(SmallBytes::new(val)));
            ttl.set(&mut e, now);
            *slot = Some(e);
            Outcome::Existed(existed)
        }
        Write::Allow {
            algo,
            params,
            cost,
            fresh,
        } => {
            if *fresh {
                *slot = None;
            }
            // The mirror must write exactly what the command layer writes.
            let mut official = slot.clone();
            let spec = LimitSpec {
                algo: *algo,
                params: *params,
                block: None,
            };
            let want = apply::allow(&mut official, &spec, now, *cost, usize::MAX);
            let got = allow(slot, *algo, params, now, *cost);
            assert_eq!(got, want, "mirror of apply::allow: decision");
            assert_eq!(
                slot.clone().map(Checked),
                official.map(Checked),
                "mirror of apply::allow: entry"
            );
            Outcome::Decision(got)
        }
        Write::Expire(ttl) => match slot.as_mut() {
            Some(e) => {
                ttl.set(e, now);
                Outcome::Existed(true)
            }
            None => Outcome::Existed(false),
        },
        Write::RestoreDerived => match slot.as_mut() {
            Some(e) => match derived_expiry(&e.value) {
                Some(at) => {
                    let want_ms = set_ns(e, at);
                    assert_eq!(e.expiry_ms(), want_ms, "derived expiry {at}");
                    Outcome::Existed(true)
                }
                None => Outcome::Existed(false),
            },
            None => Outcome::Existed(false),
        },
        Write::PutRaw {
            value,
            derived,
            ttl,
        } => {
            let existed = slot.is_some();
            let mut e = Entry::new(value.clone());
            if *derived {
                let at = derived_expiry(value).expect("a limiter value");
                let want_ms = set_ns(&mut e, at);
                assert_eq!(e.expiry_ms(), want_ms, "derived expiry {at}");
            } else {
                ttl.set(&mut e, now);
            }
            *slot = Some(e);
            Outcome::Existed(existed)
        }
        Write::Delete => Outcome::Existed(slot.take().is_some()),
        Write::Touch => Outcome::Existed(slot.is_some()),
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Moves the clock forward by this many ns.
    Advance(u64),
    /// Moves the clock to exactly the moment a held key expires (the
    /// `pick`-th one, in order of expiry, among those due in the next 60
    /// days: the clock stays in this century), or to 1 ns before it.
    AdvanceToExpiry {
        pick: usize,
        before: bool,
    },
    Write(Vec<u8>, Write),
    Remove(Vec<u8>),
    Get(Vec<u8>),
    Exists(Vec<u8>),
    /// `lock_many` over the written keys plus `extra` (locked, untouched),
    /// then the writes in order through the one guard.
    Multi {
        extra: Vec<Vec<u8>>,
        writes: Vec<(Vec<u8>, Write)>,
    },
    /// The same write `times` times in a row, the clock moving `gap` ns
    /// before each (a client hammering one limiter key: denials).
    Burst {
        key: Vec<u8>,
        write: Write,
        times: usize,
        gap: u64,
    },
    /// The same write to `fill_key(0..count)`: many keys at once, so
    /// shards grow, and shrink again as they expire or go.
    Fill {
        count: usize,
        write: Write,
    },
    /// Removes `fill_key(i)` for every `i < count` not a multiple of
    /// `keep`, then sweeps every shard: sparse, scattered survivors, which
    /// is when a sweep compacts a shard's storage.
    Thin {
        count: usize,
        keep: usize,
    },
    SweepAll,
    /// Sweeps one shard (index taken modulo the shard count).
    SweepOne(usize),
    Clear,
}

/// Keys of `Op::Fill` (one in ten longer than 22 bytes); `key()` draws
/// them too.
fn fill_key(i: usize) -> Vec<u8> {
    if i.is_multiple_of(10) {
        format!("fill-key-number-{i:06}-long").into_bytes()
    } else {
        format!("f{i}").into_bytes()
    }
}

// ---------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------

#[derive(Debug, Default)]
struct Model {
    now: Nanos,
    /// Every entry the store should physically hold, expired ones too.
    present: HashMap<Vec<u8>, Entry>,
    /// What `expired_count` should say.
    expired: u64,
    /// The shard each key was seen in.
    shard_of: HashMap<Vec<u8>, usize>,
}

impl Model {
    /// As `update` finds a slot: an expired entry is dropped and counted.
    fn take_live(&mut self, key: &[u8]) -> Option<Entry> {
        match self.present.remove(key) {
            Some(e) if expired(&e, self.now) => {
                self.expired += 1;
                None
            }
            other => other,
        }
    }

    /// `Store::update`: returns what the closure saw and what it returned.
    fn update<R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> (Option<Entry>, R) {
        let mut slot = self.take_live(key);
        let seen = slot.clone();
        let r = f(&mut slot);
        if let Some(e) = slot {
            self.present.insert(key.to_vec(), e);
        }
        (seen, r)
    }

    /// `Store::get`: an expired entry reads as absent and is deleted.
    fn get(&mut self, key: &[u8]) -> Option<Entry> {
        let e = self.present.get(key)?;
        if !expired(e, self.now) {
            return Some(e.clone());
        }
        self.update(key, |_| ());
        None
    }

    fn live_entries(&self) -> BTreeMap<Vec<u8>, Entry> {
        self.present
            .iter()
            .filter(|(_, e)| !expired(e, self.now))
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
    }

    fn expired_keys(&self) -> Vec<Vec<u8>> {
        self.present
            .iter()
            .filter(|(_, e)| expired(e, self.now))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

struct Harness {
    store: Store,
    model: Model,
    /// Keys written or read since the last per-key check.
    touched: Vec<Vec<u8>>,
}

fn show(key: &[u8]) -> String {
    format!("{:?} (len {})", String::from_utf8_lossy(key), key.len())
}

impl Harness {
    fn new(shards: usize, now: Nanos) -> Self {
        let store = Store::new(shards);
        assert_eq!(store.shard_count(), shards.max(1).next_power_of_two());
        Harness {
            store,
            model: Model {
                now,
                ..Model::default()
            },
            touched: Vec::new(),
        }
    }

    fn now(&self) -> Nanos {
        self.model.now
    }

    fn write(&mut self, key: &[u8], w: &Write) {
        let now = self.now();
        let (want_seen, want) = self.model.update(key, |slot| apply_write(w, slot, now));
        let (seen, got) = self.store.update(key, now, |slot| {
            let seen = slot.clone();
            (seen, apply_write(w, slot, now))
        });
        assert_eq!(
            seen.map(Checked),
            want_seen.map(Checked),
            "update's closure saw the wrong entry for {} ({w:?})",
            show(key)
        );
        assert_eq!(got, want, "{w:?} on {}", show(key));
        self.touched.push(key.to_vec());
    }

    fn multi(&mut self, extra: &[Vec<u8>], writes: &[(Vec<u8>, Write)]) {
        let now = self.now();
        let keys: Vec<&[u8]> = writes
            .iter()
            .map(|(k, _)| k.as_slice())
            .chain(extra.iter().map(|k| k.as_slice()))
            .collect();
        let mut results = Vec::new();
        {
            let mut lock = self.store.lock_many(keys.iter().copied());
            for (key, w) in writes {
                results.push(lock.update(key, now, |slot| {
                    let seen = slot.clone();
                    (seen, apply_write(w, slot, now))
                }));
            }
        }
        for ((key, w), (seen, got)) in writes.iter().zip(results) {
            let (want_seen, want) = self.model.update(key, |slot| apply_write(w, slot, now));
            assert_eq!(
                seen.map(Checked),
                want_seen.map(Checked),
                "MultiLock::update's closure saw the wrong entry for {} ({w:?})",
                show(key)
            );
            assert_eq!(got, want, "MultiLock {w:?} on {}", show(key));
            self.touched.push(key.clone());
        }
        self.touched.extend(extra.iter().cloned());
    }

    fn run(&mut self, op: &Op) {
        match op {
            Op::Advance(d) => {
                self.model.now = Nanos(self.model.now.0.checked_add(*d).unwrap());
            }
            Op::AdvanceToExpiry { pick, before } => {
                let now = self.now().0 as u128;
                let mut ats: Vec<u128> = self
                    .model
                    .present
                    .values()
                    .filter_map(|e| Some(e.expiry_ms()? as u128 * MS as u128))
                    .filter(|&at| at > now && at <= now + 60 * DAY as u128)
                    .collect();
                ats.sort_unstable();
                if !ats.is_empty() {
                    let at = ats[pick % ats.len()] as u64;
                    self.model.now = Nanos(at - *before as u64);
                }
            }
            Op::Write(key, w) => self.write(key, w),
            Op::Remove(key) => {
                let (_, want) = self.model.update(key, |e| e.take().is_some());
                let got = self.store.remove(key, self.now());
                assert_eq!(got, want, "remove({})", show(key));
                self.touched.push(key.clone());
            }
            Op::Get(key) => self.touched.push(key.clone()),
            Op::Exists(key) => {
                let want = self.model.get(key).is_some();
                let got = self.store.exists(key, self.now());
                assert_eq!(got, want, "exists({})", show(key));
                self.touched.push(key.clone());
            }
            Op::Multi { extra, writes } => self.multi(extra, writes),
            Op::Burst {
                key,
                write,
                times,
                gap,
            } => {
                for _ in 0..*times {
                    self.model.now = Nanos(self.model.now.0.checked_add(*gap).unwrap());
                    self.write(key, write);
                }
            }
            Op::Fill { count, write } => {
                for i in 0..*count {
                    self.write(&fill_key(i), write);
                }
            }
            Op::Thin { count, keep } => {
                for i in (0..*count).filter(|i| !i.is_multiple_of(*keep)) {
                    let key = fill_key(i);
                    let (_, want) = self.model.update(&key, |e| e.take().is_some());
                    let got = self.store.remove(&key, self.now());
                    assert_eq!(got, want, "remove({})", show(&key));
                }
                self.sweep_all();
                // Every survivor reads back (the rest are checked every
                // `FULL_CHECK_EVERY` operations).
                self.touched
                    .extend((0..*count).step_by(*keep).map(fill_key));
            }
            Op::SweepAll => self.sweep_all(),
            Op::SweepOne(i) => self.sweep_one(i % self.store.shard_count()),
            Op::Clear => {
                let n = self.store.clear();
                assert_eq!(n, self.model.present.len(), "clear() count");
                self.model.present.clear();
                self.model.shard_of.clear();
                assert!(self.store.is_empty());
            }
        }
        self.check_touched();
        self.learn_shards();
        self.check_counts();
    }

    fn sweep_all(&mut self) {
        let now = self.now();
        let removed: usize = (0..self.store.shard_count())
            .map(|i| self.store.sweep_shard(i, now))
            .sum();
        let expired = self.model.expired_keys();
        assert_eq!(removed, expired.len(), "sweep of every shard: removed");
        for k in &expired {
            self.model.present.remove(k);
        }
        self.model.expired += removed as u64;
        // With every shard swept, nothing expired is left: len() and the
        // volatile count are exactly the live keys.
        let live = self.model.live_entries();
        assert_eq!(self.store.len(), live.len(), "len() after a full sweep");
        assert_eq!(
            self.store.counts().volatile,
            live.values().filter(|e| e.has_expiry()).count(),
            "counts().volatile after a full sweep"
        );
        // A second sweep at the same moment finds nothing.
        let again: usize = (0..self.store.shard_count())
            .map(|i| self.store.sweep_shard(i, now))
            .sum();
        assert_eq!(again, 0, "second sweep at the same now");
    }

    fn sweep_one(&mut self, i: usize) {
        let expired = self.model.expired_keys();
        if expired.iter().any(|k| !self.model.shard_of.contains_key(k)) {
            // An expired key never seen live (written already expired):
            // its shard is unknown, so sweep them all instead.
            return self.sweep_all();
        }
        let removed = self.store.sweep_shard(i, self.now());
        let mine: Vec<_> = expired
            .into_iter()
            .filter(|k| self.model.shard_of[k] == i)
            .collect();
        assert_eq!(removed, mine.len(), "sweep_shard({i}): removed");
        for k in &mine {
            self.model.present.remove(k);
        }
        self.model.expired += removed as u64;
    }

    /// Every touched key reads the same from store and model (`get`,
    /// which, in both, deletes an expired entry).
    fn check_touched(&mut self) {
        let now = self.now();
        for key in std::mem::take(&mut self.touched) {
            let want = self.model.get(&key).map(Checked);
            let got = self.store.get(&key, now, |e| Checked(e.clone()));
            assert_eq!(got, want, "get({}) at {now}", show(&key));
        }
    }

    /// Records the shard of every live key whose shard is not yet known.
    fn learn_shards(&mut self) {
        let unknown: HashSet<&[u8]> = self
            .model
            .present
            .iter()
            .filter(|(k, e)| !expired(e, self.model.now) && !self.model.shard_of.contains_key(*k))
            .map(|(k, _)| k.as_slice())
            .collect();
        if unknown.is_empty() {
            return;
        }
        let mut found = Vec::new();
        for i in 0..self.store.shard_count() {
            self.store.for_each_in_shard(i, self.model.now, |k, _| {
                if unknown.contains(k) {
                    found.push((k.to_vec(), i));
                }
            });
        }
        let n = found.len();
        assert_eq!(n, unknown.len(), "a live key is missing from every shard");
        self.model.shard_of.extend(found);
    }

    /// Physical counts: keys and volatile keys held (expired ones not yet
    /// removed included), keys expired so far.
    fn check_counts(&self) {
        let present = self.model.present.len();
        let volatile = self
            .model
            .present
            .values()
            .filter(|e| e.has_expiry())
            .count();
        assert_eq!(self.store.len(), present, "len()");
        assert_eq!(self.store.is_empty(), present == 0, "is_empty()");
        let c = self.store.counts();
        assert_eq!(c.keys, present, "counts().keys");
        assert_eq!(c.volatile, volatile, "counts().volatile");
        assert_eq!(
            self.store.expired_count(),
            self.model.expired,
            "expired_count()"
        );
    }

    /// The full contents, shard by shard, against the model's live entries;
    /// each key in exactly one shard, and always the same one.
    fn check_full(&mut self) {
        let now = self.now();
        let mut seen: BTreeMap<Vec<u8>, (usize, Entry)> = BTreeMap::new();
        let mut twice = Vec::new();
        for i in 0..self.store.shard_count() {
            self.store.for_each_in_shard(i, now, |k, e| {
                if let Some((j, _)) = seen.insert(k.to_vec(), (i, e.clone())) {
                    twice.push((k.to_vec(), j, i));
                }
            });
        }
        assert!(twice.is_empty(), "keys listed twice: {twice:?}");
        for (k, (i, _)) in &seen {
            let j = *self.model.shard_of.entry(k.clone()).or_insert(*i);
            assert_eq!(*i, j, "{} moved from shard {j} to shard {i}", show(k));
        }
        let got: BTreeMap<Vec<u8>, Checked> = seen
            .into_iter()
            .map(|(k, (_, e))| (k, Checked(e)))
            .collect();
        let want: BTreeMap<Vec<u8>, Checked> = self
            .model
            .live_entries()
            .into_iter()
            .map(|(k, e)| (k, Checked(e)))
            .collect();
        if got != want {
            let keys: HashSet<&Vec<u8>> = got.keys().chain(want.keys()).collect();
            let mut diffs: Vec<String> = keys
                .into_iter()
                .filter(|k| got.get(*k) != want.get(*k))
                .map(|k| {
                    format!(
                        "{}: store {:?}, model {:?}",
                        show(k),
                        got.get(k),
                        want.get(k)
                    )
                })
                .collect();
            diffs.sort();
            panic!("full contents differ at {now}:\n{}", diffs.join("\n"));
        }
    }
}

fn run_ops(shards: usize, start: Nanos, ops: &[Op]) {
    let mut h = Harness::new(shards, start);
    for (n, op) in ops.iter().enumerate() {
        h.run(op);
        if (n + 1) % FULL_CHECK_EVERY == 0 {
            h.check_full();
        }
    }
    h.check_full();
    h.sweep_all();
    h.check_full();
    h.check_counts();
}

// ---------------------------------------------------------------------
// Strategies.
// ---------------------------------------------------------------------

/// Key lengths around every boundary a layout might have (16/17, the
/// 22-byte inline limit, 32/33) plus the empty key.
/// Lengths around every boundary of the compact records' key classes (one
/// per length up to 128 bytes, 8 bytes apart up to 1,024, general past it)
/// and of the inline key (22 bytes).
const KEY_LENS: &[usize] = &[
    0, 1, 2, 7, 8, 15, 16, 17, 22, 23, 24, 31, 32, 33, 40, 64, 127, 128, 129, 130, 136, 137, 300,
    1023, 1024, 1025,
];

/// Keys from a small alphabet, so they collide often: `k` repeated, with
/// maybe one byte at the front or back replaced (a NUL included, so that
/// `"kk"` and `"kk\0"` are both keys), or now and then random `a`/`b`s.
fn key() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        8 => (
            prop::sample::select(KEY_LENS),
            prop::sample::select(vec![None, Some(b'a'), Some(b'b'), Some(0u8)]),
            any::<bool>(),
        )
            .prop_map(|(len, c, front)| {
                let mut k = vec![b'k'; len];
                if let (Some(c), true) = (c, len > 0) {
                    let i = if front { 0 } else { len - 1 };
                    k[i] = c;
                }
                k
            }),
        1 => prop::collection::vec(prop::sample::select(&b"ab"[..]), 1..=40),
        1 => (0usize..300).prop_map(fill_key),
    ]
    .boxed()
}

fn ttl() -> impl Strategy<Value = Ttl> {
    prop_oneof![
        3 => Just(Ttl::Persist),
        2 => (0..=2 * SEC).prop_map(Ttl::In),
        2 => (0..=2 * DAY).prop_map(Ttl::In),
        1 => Just(Ttl::In(u64::MAX)),
        1 => (0..=10 * SEC).prop_map(Ttl::Ago),
        1 => (0u64..=3).prop_map(Ttl::AtMs),
    ]
}

fn params(limit: u64, period: u64, burst: u64, precision: u64) -> Params {
    Params {
        limit: nz(limit),
        period: nz(period),
        burst: nz(burst),
        precision: nz(precision),
    }
}

/// A few parameter sets shared by many keys.
fn shared_params() -> Vec<Params> {
    vec![
        params(1, SEC, 1, 1),
        params(5, SEC, 5, 1),
        params(10, 60 * SEC, 3, 1),
        params(10, 60 * SEC, 10, 10 * SEC),
        params(100, MS, 20, 1),
        params(3, DAY, 3, 1),
        params(1000, 10 * MS, 50, MS),
        params(2, 1, 2, 1),
    ]
}

/// A count up to half of `u64`, often beyond `u32`.
fn wide_count() -> impl Strategy<Value = u64> {
    prop_oneof![
        1u64..=10,
        1u64..=1 << 40,
        1u64..=u64::MAX / 2,
        Just(u32::MAX as u64 + 1),
        Just(u64::MAX / 2),
    ]
}

fn wide_params() -> BoxedStrategy<Params> {
    let period = prop_oneof![1u64..=1_000, 1u64..=SEC, 1u64..=30 * DAY, Just(DAY)];
    (wide_count(), period, wide_count(), 0u64..=1_000)
        .prop_map(|(limit, period, burst, permille)| {
            let precision = (period as u128 * permille as u128 / 1_000) as u64;
            params(limit, period, burst, precision)
        })
        .boxed()
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    prop::sample::select(Algorithm::ALL.to_vec())
}

fn allow_write() -> BoxedStrategy<Write> {
    let p = prop_oneof![3 => prop::sample::select(shared_params()), 1 => wide_params()];
    let cost = prop_oneof![3 => 1u64..=3, 1 => 1u64..=1_000, 1 => wide_count()];
    (algorithm(), p, cost, prop::bool::weighted(0.15))
        .prop_map(|(algo, p, cost, fresh)| {
            let params = normalize(algo, p);
            Write::Allow {
                algo,
                params,
                cost: valid_cost(algo, &params, cost),
                fresh,
            }
        })
        .boxed()
}

/// A count as a state may hold it: small, around `u32::MAX`, or up to
/// half of `u64` (the limit's range, so that later decisions on the state
/// cannot overflow).
fn raw_count() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..=10,
        0..=u32::MAX as u64,
        (u32::MAX as u64 - 1)..=(u32::MAX as u64 + 1),
        0..=u64::MAX / 2,
    ]
}

/// A moment: around now (`T0`), anywhere, or at either end of time.
fn raw_time() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => (T0 - DAY)..=(T0 + 30 * DAY),
        1 => any::<u64>(),
        1 => prop::sample::select(vec![0, 1, u64::MAX - 1, u64::MAX]),
    ]
}

/// Window, fixed or gcra state with random fields and parameters; window
/// and fixed starts usually on a bucket boundary of the period (as the
/// algorithms leave them), sometimes not.
fn raw_value() -> BoxedStrategy<Value> {
    let params = || prop_oneof![prop::sample::select(shared_params()), wide_params()];
    let align = |start: u64, p: &Params, aligned: bool| {
        if aligned {
            start - start % p.period()
        } else {
            start
        }
    };
    prop_oneof![
        (
            params(),
            raw_time(),
            prop::bool::weighted(0.8),
            raw_count(),
            raw_count()
        )
            .prop_map(move |(p, start, aligned, prev, curr)| {
                let params = normalize(Algorithm::Window, p);
                let start = align(start, &params, aligned);
                Value::Window(Stored {
                    params,
                    state: window::State { start, prev, curr },
                })
            }),
        (params(), raw_time(), prop::bool::weighted(0.8), raw_count()).prop_map(
            move |(p, start, aligned, count)| {
                let params = normalize(Algorithm::Fixed, p);
                let start = align(start, &params, aligned);
                Value::Fixed(Stored {
                    params,
                    state: fixed::State { start, count },
                })
            }
        ),
        (params(), raw_time()).prop_map(|(p, tat)| Value::Gcra(Stored {
            params: normalize(Algorithm::Gcra, p),
            state: gcra::State { tat },
        })),
    ]
    .boxed()
}

fn write() -> BoxedStrategy<Write> {
    prop_oneof![
        3 => (prop::collection::vec(any::<u8>(), 0..=40), ttl())
            .prop_map(|(val, ttl)| Write::SetStr { val, ttl }),
        7 => allow_write(),
        2 => ttl().prop_map(Write::Expire),
        2 => Just(Write::RestoreDerived),
        2 => (raw_value(), prop::bool::weighted(0.7), ttl())
            .prop_map(|(value, derived, ttl)| Write::PutRaw { value, derived, ttl }),
        1 => Just(Write::Delete),
        1 => Just(Write::Touch),
    ]
    .boxed()
}

/// Clock steps: none, sub-ms, seconds, days, and exact multiples of the
/// shared periods.
fn advance() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(MS),
        1..MS,
        1..=SEC,
        (1u64..=120).prop_map(|n| n * SEC),
        1..=DAY,
        (1u64..=7).prop_map(|n| n * DAY),
        (
            prop::sample::select(vec![MS, 10 * MS, SEC, 60 * SEC, DAY]),
            1u64..=5
        )
            .prop_map(|(p, n)| p * n),
    ]
}

fn burst() -> BoxedStrategy<Op> {
    let gap = prop_oneof![Just(0u64), 0..=MS, 0..=SEC];
    (key(), allow_write(), 2usize..=20, gap)
        .prop_map(|(key, mut write, times, gap)| {
            if let Write::Allow { fresh, .. } = &mut write {
                *fresh = false;
            }
            Op::Burst {
                key,
                write,
                times,
                gap,
            }
        })
        .boxed()
}

fn op() -> BoxedStrategy<Op> {
    prop_oneof![
        24 => advance().prop_map(Op::Advance),
        8 => (any::<usize>(), any::<bool>())
            .prop_map(|(pick, before)| Op::AdvanceToExpiry { pick, before }),
        80 => (key(), write()).prop_map(|(k, w)| Op::Write(k, w)),
        8 => key().prop_map(Op::Remove),
        12 => key().prop_map(Op::Get),
        4 => key().prop_map(Op::Exists),
        8 => (
            prop::collection::vec(key(), 0..3),
            prop::collection::vec((key(), write()), 1..6),
        )
            .prop_map(|(extra, writes)| Op::Multi { extra, writes }),
        8 => burst(),
        2 => (prop_oneof![1usize..=40, 250usize..=600], write())
            .prop_map(|(count, write)| Op::Fill { count, write }),
        2 => (250usize..=600, 2usize..=10).prop_map(|(count, keep)| Op::Thin { count, keep }),
        8 => Just(Op::SweepAll),
        12 => (0usize..16).prop_map(Op::SweepOne),
        1 => Just(Op::Clear),
    ]
    .boxed()
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        // The default ChaCha generator is most of the time in a debug build.
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        ..ProptestConfig::default()
    })]

    /// Random operations on `Store::new(1|4|16)` agree with the model
    /// after every one of them.
    #[test]
    fn store_matches_model(
        shards in prop::sample::select(vec![1usize, 4, 16]),
        start in prop_oneof![Just(0), (0..2_000u64).prop_map(|ms| ms * MS), 0..2 * SEC],
        ops in prop::collection::vec(op(), 1..=200),
    ) {
        run_ops(shards, Nanos(T0 + start), &ops);
    }
}

// ---------------------------------------------------------------------
// Edge cases, deterministic.
// ---------------------------------------------------------------------

fn get(store: &Store, key: &[u8], now: Nanos) -> Option<Checked> {
    store.get(key, now, |e| Checked(e.clone()))
}

/// One `RL.ALLOW` through the store; returns the decision.
fn store_allow(
    store: &Store,
    key: &[u8],
    algo: Algorithm,
    p: &Params,
    now: Nanos,
    cost: u64,
) -> Decision {
    store
        .update(key, now, |slot| allow(slot, algo, p, now, cost))
        .expect("not WRONGTYPE")
}

fn sweep_all(store: &Store, now: Nanos) -> usize {
    (0..store.shard_count())
        .map(|i| store.sweep_shard(i, now))
        .sum()
}

fn contents(store: &Store, now: Nanos) -> HashMap<Vec<u8>, Checked> {
    let mut all = HashMap::new();
    for i in 0..store.shard_count() {
        store.for_each_in_shard(i, now, |k, e| {
            assert!(
                all.insert(k.to_vec(), Checked(e.clone())).is_none(),
                "listed twice"
            );
        });
    }
    all
}

#[test]
fn window_counts_beyond_u32_round_trip() {
    let store = Store::new(4);
    let p = params(u64::MAX / 2, 10 * SEC, u64::MAX / 2, 1);
    let now = Nanos(T0 + 1_234_567);
    let cost = 5_000_000_000; // > u32::MAX
    for _ in 0..3 {
        assert!(store_allow(&store, b"w", Algorithm::Window, &p, now, cost).allowed);
    }
    let e = get(&store, b"w", now).unwrap();
    let Value::Window(s) = &e.value else {
        panic!("{e:?}")
    };
    assert_eq!(s.state.curr, 3 * cost);
    assert!(s.state.curr > u32::MAX as u64);
    assert_eq!(s.params, p);
    let at = s.state.expires_at(&p);
    assert_eq!(e.expiry_ms(), Some(at.div_ceil(MS)));

    // Next bucket: the big count moves to `prev`, a bigger one lands in
    // `curr`; both survive the store exactly.
    let later = Nanos(T0 + 10 * SEC + 1);
    assert!(store_allow(&store, b"w", Algorithm::Window, &p, later, u64::MAX / 8).allowed);
    let e2 = get(&store, b"w", later).unwrap();
    assert_eq!(
        e2.value,
        Value::Window(Stored {
            params: p,
            state: window::State {
                start: later.0 - later.0 % (10 * SEC),
                prev: 3 * cost,
                curr: u64::MAX / 8,
            },
        })
    );
    let start = later.0 - later.0 % (10 * SEC);
    assert_eq!(e2.expiry_ms(), Some((start + 20 * SEC).div_ceil(MS)));
    assert_eq!(
        contents(&store, later),
        HashMap::from([(b"w".to_vec(), e2.clone())])
    );
    // Two buckets on, both counts have rolled out: small counts again.
    let quiet = Nanos(T0 + 40 * SEC + 5);
    assert!(store_allow(&store, b"w2", Algorithm::Window, &p, later, u64::MAX / 8).allowed);
    assert!(store_allow(&store, b"w2", Algorithm::Window, &p, quiet, 1).allowed);
    let small = Entry::with_expiry(
        Value::Window(Stored {
            params: p,
            state: window::State {
                start: T0 + 40 * SEC,
                prev: 0,
                curr: 1,
            },
        }),
        Some(Nanos(T0 + 60 * SEC)),
    );
    assert_eq!(get(&store, b"w2", quiet), Some(Checked(small)));
    assert!(store.remove(b"w2", quiet));
    assert_eq!(store.expired_count(), 1, "w2 expired before `quiet`");

    // A raw state with every count near the top of u64.
    let raw = Entry::with_expiry(
        Value::Window(Stored {
            params: p,
            state: window::State {
                start: u64::MAX - 3,
                prev: u64::MAX - 1,
                curr: u64::MAX,
            },
        }),
        Some(Nanos(u64::MAX - 2)),
    );
    store.update(b"raw", later, |e| *e = Some(raw.clone()));
    assert_eq!(get(&store, b"raw", later), Some(Checked(raw)));

    // The same for fixed and log (which switches to wide slots past 2^24).
    for algo in [Algorithm::Fixed, Algorithm::Log] {
        let p = normalize(algo, p);
        let key = algo.name().as_bytes();
        let mut want = None;
        for cost in [cost, 1, u64::MAX / 4] {
            assert!(store_allow(&store, key, algo, &p, later, cost).allowed);
            assert!(allow(&mut want, algo, &p, later, cost).unwrap().allowed);
        }
        let got = get(&store, key, later).unwrap();
        assert_eq!(Some(got.clone()), want.map(Checked));
        match &got.value {
            Value::Fixed(s) => assert_eq!(s.state.count, cost + 1 + u64::MAX / 4),
            Value::Log(s) => assert_eq!(s.state.total(), cost + 1 + u64::MAX / 4),
            v => panic!("{v:?}"),
        }
    }
    assert_eq!(store.len(), 4);
    assert_eq!(store.counts().volatile, 4);

    // Past every derived expiry (the raw key's is near the end of time).
    let end = Nanos(later.0 + 30 * SEC);
    assert_eq!(get(&store, b"w", end), None);
    assert_eq!(sweep_all(&store, end), 2);
    assert_eq!(store.len(), 1);
    assert_eq!(store.expired_count(), 1 + 3);
}

#[test]
fn gcra_tat_near_u64_max() {
    let store = Store::new(16);
    let now = Nanos(T0 + 17);
    // One unit per 30 days and a huge burst: a cost of the burst pushes
    // the TAT to the end of time (saturating).
    let p = params(1, 30 * DAY, u64::MAX / 2, 1);
    assert!(store_allow(&store, b"g", Algorithm::Gcra, &p, now, u64::MAX / 2).allowed);
    let e = get(&store, b"g", now).unwrap();
    let Value::Gcra(s) = &e.value else {
        panic!("{e:?}")
    };
    assert_eq!(s.state.tat, u64::MAX);
    assert_eq!(e.expiry_ms(), Some(u64::MAX.div_ceil(MS)));

    // Raw TATs just below the top, with their derived expiry.
    for (i, tat) in [u64::MAX - 1, u64::MAX - MS, u64::MAX - MS - 1, u64::MAX / 2]
        .into_iter()
        .enumerate()
    {
        let key = format!("tat{i}");
        let v = Value::Gcra(Stored {
            params: p,
            state: gcra::State { tat },
        });
        let want = Entry::with_expiry(v, Some(Nanos(tat)));
        assert_eq!(want.expiry_ms(), Some(tat.div_ceil(MS)));
        store.update(key.as_bytes(), now, |e| *e = Some(want.clone()));
        assert_eq!(get(&store, key.as_bytes(), now), Some(Checked(want)));
    }
    assert_eq!(store.counts().volatile, 5);

    // A nanosecond before the end of time: an expiry whose ms overflow u64
    // in ns (tat >= u64::MAX - 551_615) never passes before u64::MAX; one
    // a millisecond earlier (tat1, tat2) has, as has tat3.
    let late = Nanos(u64::MAX - 1);
    assert_eq!(sweep_all(&store, late), 3, "tat1, tat2 and tat3 expired");
    assert_eq!(store.len(), 2);
    assert!(store.exists(b"g", late));
    assert!(store.exists(b"tat0", late));
    let end = Nanos(u64::MAX);
    assert!(!store.exists(b"g", end));
    assert_eq!(sweep_all(&store, end), 1);
    assert!(store.is_empty());
    assert_eq!(store.counts().volatile, 0);
    assert_eq!(store.expired_count(), 5);
}

#[test]
fn keys_of_16_and_17_bytes_and_neighbours() {
    let k16 = b"0123456789abcdef".to_vec();
    let keys: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![0],
        b"a".to_vec(),
        b"a\0".to_vec(),
        k16[..15].to_vec(),
        k16.clone(),
        [&k16[..], &b"\0"[..]].concat(),
        [&k16[..], &b"g"[..]].concat(),
        [&k16[..], &b"h"[..]].concat(),
        [&b"g"[..], &k16[..]].concat(),
        [&k16[..], &b"ghijkl"[..]].concat(),      // 22
        [&k16[..], &b"ghijklm"[..]].concat(),     // 23
        [&k16[..], &b"ghijkl\0"[..]].concat(),    // 23, NUL last
        [&k16[..], &k16[..]].concat(),            // 32
        [&k16[..], &k16[..], &b"!"[..]].concat(), // 33
    ];
    let p = params(10, SEC, 10, 1);
    for shards in [1, 16] {
        let store = Store::new(shards);
        let now = Nanos(T0 + 999_999);
        let mut want: HashMap<Vec<u8>, Checked> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            let e = if i % 2 == 0 {
                Entry::new(Value::Str(SmallBytes::new(
                    format!("value of {i}").as_bytes(),
                )))
            } else {
                let algo = Algorithm::ALL[i / 2 % 4];
                let p = normalize(algo, p);
                let mut slot = None;
                allow(
                    &mut slot,
                    algo,
                    &p,
                    now,
                    valid_cost(algo, &p, 1 + i as u64 % 3),
                )
                .unwrap();
                slot.unwrap()
            };
            store.update(k, now, |s| {
                assert_eq!(*s, None, "{} already there", show(k));
                *s = Some(e.clone())
            });
            want.insert(k.clone(), Checked(e));
        }
        assert_eq!(store.len(), keys.len());
        assert_eq!(contents(&store, now), want);
        for k in &keys {
            assert_eq!(get(&store, k, now).as_ref(), want.get(k), "{}", show(k));
        }
        // Deleting the 16-byte key leaves its 17-byte extensions, and the
        // other way round.
        assert!(store.remove(&k16, now));
        want.remove(&k16);
        let k17 = [&k16[..], &b"g"[..]].concat();
        assert!(store.remove(&k17, now));
        want.remove(&k17);
        assert!(!store.remove(&k16, now));
        assert_eq!(contents(&store, now), want);
        // Rewriting one with a 17-byte value (long string) and back.
        let k17z = [&k16[..], &b"\0"[..]].concat();
        let long = Entry::new(Value::Str(SmallBytes::new(&k17z)));
        store.update(&k17z, now, |s| *s = Some(long.clone()));
        want.insert(k17z.clone(), Checked(long));
        assert_eq!(contents(&store, now), want);
        assert_eq!(store.len(), want.len());
        assert_eq!(get(&store, &k16, now), None);
        assert_eq!(get(&store, &k16[..15], now).as_ref(), want.get(&k16[..15]));
    }
}

#[test]
fn seventy_thousand_keys_with_distinct_params_in_one_shard() {
    // More distinct parameter sets in one shard than 16 bits can number:
    // keys short and of the constant-size kinds (window, fixed, gcra), each
    // with its own parameters; a long key and a log now and then.
    const N: u64 = 70_000;
    let store = Store::new(1);
    let now = Nanos(T0 + 424_242);
    let key = |i: u64| {
        if i % 1000 == 999 {
            format!("tenant-{i:08}-bucket-long").into_bytes()
        } else {
            format!("rl:{i}").into_bytes()
        }
    };
    let algo = |i: u64| match i % 1000 {
        500 => Algorithm::Log,
        _ => [Algorithm::Window, Algorithm::Fixed, Algorithm::Gcra][(i % 3) as usize],
    };
    // Parameters unique to (i, set).
    let p = |i: u64, set: u64| {
        normalize(
            algo(i),
            params(
                i + 1 + set * 4 * N,
                (i + 1) * MS + set,
                1 + i % 5 + set,
                1 + i % 7,
            ),
        )
    };
    let mut want: HashMap<u64, Checked> = HashMap::new();
    // RL.ALLOW on key i with parameter set `set`, in the store and on `want`.
    let charge = |want: &mut HashMap<u64, Checked>, i: u64, set: u64| {
        let (a, p) = (algo(i), p(i, set));
        let mut slot = want.get(&i).map(|c| c.0.clone());
        let d = allow(&mut slot, a, &p, now, 1).unwrap();
        let got = store
            .update(&key(i), now, |s| allow(s, a, &p, now, 1))
            .unwrap();
        assert_eq!(got, d, "key {i}");
        match slot {
            Some(e) => want.insert(i, Checked(e)),
            None => want.remove(&i),
        };
    };
    let check = |want: &HashMap<u64, Checked>, what: &str| {
        assert_eq!(store.len(), want.len(), "{what}");
        assert_eq!(store.counts().volatile, want.len(), "{what}");
        for (i, e) in want.iter().filter(|(i, _)| *i % 7 == 0) {
            assert_eq!(
                get(&store, &key(*i), now).as_ref(),
                Some(e),
                "{what}: key {i}"
            );
        }
        let all = contents(&store, now);
        assert_eq!(all.len(), want.len(), "{what}");
        for (i, e) in want {
            assert_eq!(all.get(&key(*i)), Some(e), "{what}: key {i}");
        }
    };
    for round in 0..2 {
        let set = round * 3;
        for i in 0..N {
            charge(&mut want, i, set);
        }
        check(&want, "all written");
        // Every id is taken now: the first keys charged again with new
        // parameters (whose ids would have to be new).
        for i in 0..2_000 {
            charge(&mut want, i, set + 1);
        }
        check(&want, "charged with new parameters");
        // Ids freed by deletions are taken by new keys.
        for i in 2_000..12_000 {
            assert!(store.remove(&key(i), now), "key {i}");
            want.remove(&i);
        }
        for i in N..N + 10_000 {
            charge(&mut want, i, set + 2);
        }
        check(&want, "after deletions and new keys");
        // Delete all: half by remove, half by writing None.
        for (i, e) in std::mem::take(&mut want) {
            if i % 2 == 0 {
                assert!(store.remove(&key(i), now), "key {i}");
            } else {
                let seen = store.update(&key(i), now, |e| e.take());
                assert_eq!(seen.map(Checked), Some(e), "key {i}");
            }
        }
        assert_eq!(store.len(), 0);
        assert!(store.is_empty());
        assert_eq!(store.counts().volatile, 0);
        assert!(contents(&store, now).is_empty());
        assert_eq!(store.sweep_shard(0, now), 0);
        assert_eq!(store.len(), 0);
        assert_eq!(store.expired_count(), 0);
        assert_eq!(get(&store, &key(0), now), None);
    }
}

/// The store against `want`: every key and value, and nothing else.
fn check_all(store: &Store, now: Nanos, want: &HashMap<Vec<u8>, Checked>, what: &str) {
    assert_eq!(store.len(), want.len(), "{what}: len()");
    assert_eq!(&contents(store, now), want, "{what}: contents");
    for (k, e) in want {
        assert_eq!(get(store, k, now).as_ref(), Some(e), "{what}: {}", show(k));
    }
}

#[test]
fn storage_compaction_after_deletions_keeps_every_value() {
    // Thousands of keys of every kind in one shard, then most of them
    // deleted, leaving scattered survivors: the sweep that follows gives
    // storage back (moving survivors) and every value must read the same.
    let store = Store::new(1);
    let now = Nanos(T0 + 5);
    let shared = shared_params();
    let mut want: HashMap<Vec<u8>, Checked> = HashMap::new();
    let put = |want: &mut HashMap<Vec<u8>, Checked>, i: usize, tag: &str| {
        for (j, algo) in Algorithm::ALL.into_iter().enumerate() {
            let key = if i % 10 == 9 {
                format!("{}:{tag}:{i:06}:long-key", algo.name())
            } else {
                format!("{}{tag}{i}", j)
            }
            .into_bytes();
            let p = normalize(algo, shared[(i + j) % shared.len()]);
            let mut slot = want.remove(&key).map(|c| c.0);
            let d = allow(&mut slot, algo, &p, now, 1).unwrap();
            let got = store
                .update(&key, now, |s| allow(s, algo, &p, now, 1))
                .unwrap();
            assert_eq!(got, d);
            if let Some(e) = slot {
                want.insert(key, Checked(e));
            }
        }
        let key = format!("s{tag}{i}").into_bytes();
        let e = Entry::new(Value::Str(SmallBytes::new(&key.repeat(i % 3 + 1))));
        store.update(&key, now, |s| *s = Some(e.clone()));
        want.insert(key, Checked(e));
    };
    for i in 0..1_500 {
        put(&mut want, i, "a");
    }
    check_all(&store, now, &want, "written");
    let mut n = 0;
    want.retain(|k, _| {
        n += 1;
        if n % 7 == 0 {
            return true;
        }
        assert!(store.remove(k, now));
        false
    });
    assert_eq!(store.sweep_shard(0, now), 0);
    check_all(&store, now, &want, "most deleted, swept");
    // New keys fill the room left, then all but a few go again.
    for i in 0..700 {
        put(&mut want, i, "b");
    }
    check_all(&store, now, &want, "refilled");
    let mut n = 0;
    want.retain(|k, _| {
        n += 1;
        if n % 101 == 0 {
            return true;
        }
        assert!(store.remove(k, now));
        false
    });
    store.sweep_shard(0, now);
    check_all(&store, now, &want, "all but a few deleted, swept");
    // Everything expires: the last sweep takes the rest but the strings.
    let later = Nanos(now.0 + 2 * DAY);
    want.retain(|_, e| !e.has_expiry());
    let limiters = store.len() - want.len();
    assert_eq!(store.sweep_shard(0, later), limiters);
    check_all(&store, later, &want, "after expiry");
}

#[test]
fn limiter_expiry_changed_then_restored() {
    for algo in Algorithm::ALL {
        let store = Store::new(4);
        let p = normalize(algo, params(5, 10 * SEC, 2, 1));
        let now = Nanos(T0 + 123_456);
        assert!(store_allow(&store, b"rl", algo, &p, now, 1).allowed);
        let original = get(&store, b"rl", now).unwrap();
        let derived = derived_expiry(&original.value).unwrap();
        assert!(derived > now.0);
        assert_eq!(original.expiry_ms(), Some(derived.div_ceil(MS)), "{algo:?}");
        assert_eq!(store.counts().volatile, 1);

        // An explicit, longer TTL.
        let hour = Nanos(now.0 + 3_600 * SEC);
        store.update(b"rl", now, |e| e.as_mut().unwrap().set_expiry(Some(hour)));
        let changed = get(&store, b"rl", now).unwrap();
        assert_eq!(changed.value, original.value);
        assert_eq!(changed.expiry_ms(), Some(hour.0.div_ceil(MS)));
        assert_ne!(changed, original);
        // Still there after the derived moment has passed.
        let past_derived = Nanos(derived + 1);
        assert_eq!(get(&store, b"rl", past_derived), Some(changed));

        // Persisted.
        store.update(b"rl", now, |e| e.as_mut().unwrap().set_expiry(None));
        let persisted = get(&store, b"rl", now).unwrap();
        assert_eq!(persisted.value, original.value);
        assert!(!persisted.has_expiry());
        assert_eq!(store.counts().volatile, 0);
        assert_eq!(sweep_all(&store, Nanos(now.0 + 100 * DAY)), 0);

        // Restored to exactly the derived value: equal to what RL.ALLOW
        // wrote, and gone once the derived moment passes.
        store.update(b"rl", now, |e| {
            let e = e.as_mut().unwrap();
            e.set_expiry(Some(Nanos(derived_expiry(&e.value).unwrap())))
        });
        assert_eq!(get(&store, b"rl", now), Some(original.clone()));
        assert_eq!(store.counts().volatile, 1);
        // A shorter explicit TTL, then restored again: same entry.
        store.update(b"rl", now, |e| {
            e.as_mut().unwrap().set_expiry(Some(Nanos(now.0 + MS)))
        });
        assert_ne!(get(&store, b"rl", now), Some(original.clone()));
        store.update(b"rl", now, |e| {
            let e = e.as_mut().unwrap();
            e.set_expiry(Some(Nanos(derived_expiry(&e.value).unwrap())))
        });
        assert_eq!(get(&store, b"rl", now), Some(original.clone()));
        let end = Nanos(derived.div_ceil(MS) * MS);
        assert_eq!(get(&store, b"rl", Nanos(end.0 - 1)), Some(original));
        assert_eq!(sweep_all(&store, end), 1, "{algo:?}");
        assert_eq!(get(&store, b"rl", end), None);
        assert!(store.is_empty());
        assert_eq!(store.expired_count(), 1);
    }
}
