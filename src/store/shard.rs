//! One shard of the keyspace: a hash index of 4-byte handles over dense
//! per-class arenas of records.
//!
//! Why an index of handles rather than a table of entries: a hash table is
//! 44-88% full between doublings, so every byte of its slot costs up to two
//! bytes per key. Keeping the slot at 4 bytes (plus a tag byte; `index.rs`)
//! and the records in arenas with no slack is what brings a limiter key
//! from 203 bytes to about 40. A handle is a class and an index in that
//! class's arena; the class says how to read the record (its algorithm and
//! key length, for a compact record: `record.rs`).
//!
//! Callers see every key as an [`Entry`]: compact records are decoded into
//! one (on the stack; a few nanoseconds), handed to the caller, and written
//! back, moving between classes when the value no longer fits its own.

use std::collections::HashMap;

mod in_place;

use super::arena::{Arena, Slab};
use super::bytes::SmallBytes;
use super::effects::Effects;
use super::entry::LeaseKey;
use super::entry::{self, Entry, Value};
use super::index::{Index, Pos};
use super::params::ParamTable;
use super::record::{self, Kind, Layout, Packed};
use super::watch::{Touch, Watches};
use crate::clock::Nanos;
use crate::limiter::log;

/// A handle: a general record's index (top bit clear, 31 bits), or a
/// slab's number (10 bits: one of the shard's slabs) and an index in it
/// (21 bits, 2M records of one layout in one shard; a slab that fills up,
/// or a layout past the shard's 1,024th in use at once, sends further keys
/// to the general class).
const COMPACT: u32 = 1 << 31;
const CLASS_SHIFT: u32 = 21;
const INDEX_MASK: u32 = (1 << CLASS_SHIFT) - 1;
const MAX_SLABS: usize = 1 << 10;

/// Which arena a record lives in, from its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    General,
    /// The shard's slab of this number (`Records::slabs`).
    Compact(u16),
}

#[inline]
fn handle(class: Class, i: u32) -> u32 {
    match class {
        Class::General => {
            // 2^31 records in one shard would be over 100 GiB.
            assert!(i < COMPACT, "arena index out of range");
            i
        }
        Class::Compact(n) => COMPACT | (n as u32) << CLASS_SHIFT | i,
    }
}

#[inline]
fn split(h: u32) -> (Class, u32) {
    if h & COMPACT == 0 {
        return (Class::General, h);
    }
    let c = (h & !COMPACT) >> CLASS_SHIFT;
    (Class::Compact(c as u16), h & INDEX_MASK)
}

/// A key [`Shard::with_known`] found: its place in the index, its
/// compact record's handle, and the entry that record decoded to, for
/// [`Shard::update_known`] to write from without finding and decoding it
/// again.
#[derive(Debug)]
pub struct Found {
    pos: Pos,
    h: u32,
    entry: Entry,
}

/// What a shard needs of the store that owns it: the effects log its
/// writes go to, the hasher its index uses, and the store-wide counters and
/// hooks its writes feed. A trait, so this file need not name the store
/// (which names it).
pub(super) trait Owner {
    fn effects(&self) -> &Effects;
    fn hasher(&self) -> &ahash::RandomState;
    /// A key's full hash, as the store computes it: the hasher's, with the
    /// shard bits the key's slot in cluster mode. The index reads only the
    /// hasher's low bits and top byte, so it may rehash with `hasher`;
    /// `WATCH`'s marks are the full hash.
    fn hash(&self, key: &[u8]) -> u64;
    /// A key's state lapsed (a lease key's leases, counted).
    fn lapsed(&self, e: &Entry);
    /// A key was removed for its expiry.
    fn count_expired(&self);
    /// The shard now holds `len` keys.
    fn grew_to(&self, len: usize);
}

/// What the compact classes cannot hold: strings, collections, keys over
/// 1,024 bytes, TTLs set by hand, wide counts. `entry` is `None` only while [`Shard::update`]
/// has it out.
#[derive(Debug, Default)]
struct General {
    key: SmallBytes,
    entry: Option<Entry>,
}

/// The records of a shard, apart from its index (so the index's probe and
/// rehash closures can read keys while the index is borrowed mutably).
#[derive(Debug, Default)]
struct Records {
    general: Arena<General>,
    /// The compact records, a slab per layout in use (a shard holds a few
    /// key lengths, not all 1,440 layouts), numbered by first use; a slab
    /// emptied by a compaction is reused for the next new layout, as no
    /// handle points into it.
    slabs: Vec<LayoutSlab>,
    /// The states `log` and lease records hold the slots of
    /// ([`Kind::owned`]): typed, so that freeing a slot drops the ring or
    /// the leases' vector it owns.
    logs: Arena<log::State>,
    leases: Arena<LeaseKey>,
    params: ParamTable,
}

#[derive(Debug)]
struct LayoutSlab {
    layout: Layout,
    slab: Slab,
}

impl Records {
    #[inline]
    fn slab(&self, n: u16) -> (Layout, &Slab) {
        let s = &self.slabs[n as usize];
        (s.layout, &s.slab)
    }

    fn slab_mut(&mut self, n: u16) -> &mut Slab {
        &mut self.slabs[n as usize].slab
    }

    /// The number of `l`'s slab, made (or an empty one taken) if none;
    /// `None` if the shard has [`MAX_SLABS`] layouts in use.
    fn slab_for(&mut self, l: Layout) -> Option<u16> {
        if let Some(n) = self.slabs.iter().position(|s| s.layout == l) {
            return Some(n as u16);
        }
        let fresh = LayoutSlab {
            layout: l,
            slab: Slab::new(l.rec_len()),
        };
        match self.slabs.iter().position(|s| s.slab.is_empty()) {
            Some(n) => {
                self.slabs[n] = fresh;
                Some(n as u16)
            }
            None if self.slabs.len() < MAX_SLABS => {
                self.slabs.push(fresh);
                Some((self.slabs.len() - 1) as u16)
            }
            None => None,
        }
    }

    fn slabs(&self) -> impl Iterator<Item = &Slab> {
        self.slabs.iter().map(|s| &s.slab)
    }

    #[inline]
    fn key(&self, h: u32) -> &[u8] {
        let (class, i) = split(h);
        match class {
            Class::General => &self.general.get(i).key,
            Class::Compact(n) => {
                let (l, slab) = self.slab(n);
                l.key(slab.get(i))
            }
        }
    }

    /// Starts loading `h`'s record into the cache.
    fn prefetch(&self, h: u32) {
        use crate::util::prefetch;
        let (class, i) = split(h);
        match class {
            Class::General => prefetch(self.general.get(i)),
            Class::Compact(n) => {
                // Its first and last lines: a record may straddle two.
                let r = self.slab(n).1.get(i);
                prefetch(&r[0]);
                prefetch(&r[r.len() - 1]);
            }
        }
    }

    /// `h`'s layout and bytes if it is a constant-size record (not a
    /// general record, not a log's or a lease key's slot).
    #[inline(always)]
    fn constant(&self, h: u32) -> Option<(Layout, &[u8])> {
        let (Class::Compact(n), i) = split(h) else {
            return None;
        };
        let (l, slab) = self.slab(n);
        (!l.kind.owned()).then(|| (l, slab.get(i)))
    }

    /// The entry a constant-size record `r` of layout `l` stands for.
    #[inline]
    fn decode(&self, l: Layout, r: &[u8]) -> Entry {
        l.entry(r, self.params.get(record::pid(r)))
    }

    /// [`Records::decode`] for a reader, counted in tests.
    #[inline]
    fn read(&self, l: Layout, r: &[u8]) -> Entry {
        #[cfg(test)]
        DECODES.with(|d| d.set(d.get() + 1));
        self.decode(l, r)
    }

    /// Calls `f` with the entry `h` stands for (decoded, for a compact
    /// record). `None` only for a general record that is out. A lease
    /// key's leases are copied for the call (a vector of a few; reads of
    /// lease keys are rare beside their writes, which move them).
    fn with<R>(&self, h: u32, f: impl FnOnce(Option<&Entry>) -> R) -> R {
        match split(h) {
            (Class::General, i) => f(self.general.get(i).entry.as_ref()),
            (Class::Compact(n), i) => {
                let (l, slab) = self.slab(n);
                let r = slab.get(i);
                match l.kind {
                    Kind::Log => {
                        let p = self.params.get(record::pid(r));
                        record::with_log(self.logs.get(l.slot(r)), p, |e| f(Some(e)))
                    }
                    Kind::Lease => f(Some(&record::lease_value(
                        self.leases.get(l.slot(r)).clone(),
                    ))),
                    _ => f(Some(&self.read(l, r))),
                }
            }
        }
    }

    /// The entry `h` stands for, taken out to be changed: a general
    /// record's entry moves out (its key stays, so the index can still
    /// probe it); a compact record is decoded and stays as it was, but for
    /// an owned state, which moves out of its slot.
    #[inline]
    fn take(&mut self, h: u32) -> Option<Entry> {
        if let Some((l, r)) = self.constant(h) {
            return Some(self.read(l, r));
        }
        match split(h) {
            (Class::General, i) => self.general.get_mut(i).entry.take(),
            (Class::Compact(n), i) => Some(self.take_owned(n, i)),
        }
    }

    /// [`Records::take`] of a log's or a lease key's record: its state
    /// moves out of its slot (out of line: the constant-size records'
    /// path stays short).
    #[inline(never)]
    fn take_owned(&mut self, n: u16, i: u32) -> Entry {
        let (l, slab) = self.slab(n);
        let r = slab.get(i);
        let slot = l.slot(r);
        match l.kind {
            Kind::Log => {
                let p = self.params.get(record::pid(r));
                record::take_log(self.logs.get_mut(slot), p)
            }
            _ => record::lease_value(std::mem::take(self.leases.get_mut(slot))),
        }
    }

    /// TTL in ms of `h`'s entry; `Some(0)` for a general record that is out
    /// (treated as long expired).
    fn expiry_ms(&self, h: u32) -> Option<u64> {
        match split(h) {
            (Class::General, i) => self
                .general
                .get(i)
                .entry
                .as_ref()
                .map_or(Some(0), Entry::expiry_ms),
            (Class::Compact(n), i) => {
                let (l, slab) = self.slab(n);
                let r = slab.get(i);
                Some(match l.kind {
                    Kind::Log => {
                        record::log_ttl(self.logs.get(l.slot(r)), self.params.get(record::pid(r)))
                    }
                    Kind::Lease => record::lease_ttl(self.leases.get(l.slot(r))),
                    _ => l.ttl(r, self.params.get(record::pid(r))),
                })
            }
        }
    }

    #[inline]
    fn pid(&self, h: u32) -> Option<u16> {
        match split(h) {
            (Class::General, _) => None,
            (Class::Compact(n), i) => {
                let (l, slab) = self.slab(n);
                l.kind.has_params().then(|| record::pid(slab.get(i)))
            }
        }
    }

    /// A lease key's entry, moved out of `h` as it goes, so that its
    /// leases count as lapsed; `None` for any other key.
    fn take_leases(&mut self, h: u32) -> Option<Entry> {
        let lease = match split(h) {
            (Class::General, i) => {
                let e = &self.general.get(i).entry;
                e.as_ref()
                    .is_some_and(|e| matches!(e.value, Value::Lease(_)))
            }
            (Class::Compact(n), _) => self.slab(n).0.kind == Kind::Lease,
        };
        if lease {
            self.take(h)
        } else {
            None
        }
    }

    /// Frees `h`'s record, its parameter reference and its owned state.
    fn free(&mut self, h: u32) {
        if let Some(pid) = self.pid(h) {
            self.params.release(pid);
        }
        match split(h) {
            (Class::General, i) => self.general.free(i),
            (Class::Compact(n), i) => {
                let (l, slab) = self.slab(n);
                match l.kind {
                    Kind::Log => self.logs.free(l.slot(slab.get(i))),
                    Kind::Lease => self.leases.free(l.slot(slab.get(i))),
                    _ => {}
                }
                self.slab_mut(n).free(i)
            }
        }
    }

    /// Stores `entry` for `key`, in place of `old` if given (whose entry
    /// was taken), and returns the handle it now has: `old` when the class
    /// is unchanged, a new one when the value moved to another class.
    fn put(&mut self, old: Option<u32>, key: &[u8], entry: Entry) -> u32 {
        let Some((packed, p)) = record::pack(key, &entry) else {
            return self.put_general(old, key, entry);
        };
        let kind = packed.kind();
        // The common case, a limiter key charged again: the same kind (so
        // the same layout: the key is the record's own), rewritten in
        // place, its slab found once, its key and head left as they are
        // and its parameter id changed only with the parameters.
        if let Some((Class::Compact(n), i)) = old.map(split) {
            let Records {
                slabs,
                logs,
                leases,
                params,
                ..
            } = self;
            let s = &mut slabs[n as usize];
            if s.layout.kind == kind {
                let (l, rec) = (s.layout, s.slab.get_mut(i));
                debug_assert_eq!(l.key(rec), key, "a record is rewritten for its own key");
                if let Some(p) = p {
                    let pid = record::pid(rec);
                    match params.replace(pid, &p) {
                        Some(new) if new == pid => {}
                        Some(new) => record::set_pid(rec, new),
                        // Out of parameter ids: stored whole (the record
                        // still holds its old id, which `free` releases).
                        None => {
                            self.free(old.expect("matched above"));
                            return self.put_general(None, key, entry);
                        }
                    }
                }
                store_state(l, rec, packed, entry, logs, leases, false);
                return old.expect("matched above");
            }
        }
        let l = Layout::of(kind, key).expect("pack checked the key");
        let Some(n) = self.slab_for(l) else {
            // A shard with every slab number in use: stored whole.
            return self.put_general(old, key, entry);
        };
        let pid = match p {
            _ if !self.slab(n).1.has_room(INDEX_MASK) => None,
            Some(p) => self.params.acquire(&p),
            None => Some(0),
        };
        // A slab full in this shard, or out of parameter ids: stored whole.
        let Some(pid) = pid else {
            return self.put_general(old, key, entry);
        };
        let Records {
            slabs,
            logs,
            leases,
            ..
        } = self;
        let slab = &mut slabs[n as usize].slab;
        let i = slab.alloc();
        let rec = slab.get_mut(i);
        l.init(rec, key, pid);
        store_state(l, rec, packed, entry, logs, leases, true);
        if let Some(old) = old {
            self.free(old);
        }
        handle(Class::Compact(n), i)
    }

    fn put_general(&mut self, old: Option<u32>, key: &[u8], entry: Entry) -> u32 {
        if let Some(h) = old {
            if split(h).0 == Class::General {
                self.general.get_mut(split(h).1).entry = Some(entry);
                return h;
            }
            self.free(h);
        }
        let i = self.general.alloc(General {
            key: SmallBytes::new(key),
            entry: Some(entry),
        });
        handle(Class::General, i)
    }

    /// Bytes a new record could allocate: the largest chunk of a class
    /// with no free slot.
    fn growth(&self) -> usize {
        self.slabs()
            .map(Slab::growth)
            .chain([
                self.general.growth(),
                self.logs.growth(),
                self.leases.growth(),
            ])
            .max()
            .unwrap_or(0)
            + self.params.growth()
    }

    fn allocation_size(&self) -> usize {
        self.general.allocation_size()
            + self.logs.allocation_size()
            + self.leases.allocation_size()
            + self.slabs.capacity() * std::mem::size_of::<LayoutSlab>()
            + self.slabs().map(Slab::allocation_size).sum::<usize>()
            + self.params.allocation_size()
    }

    /// Compacts the sparse arenas; `moved(from, to)` is told of each
    /// record that moved. An emptied slab goes.
    fn compact(&mut self, mut moved: impl FnMut(u32, u32)) {
        if self.general.sparse() {
            self.general
                .compact(|f, t| moved(handle(Class::General, f), handle(Class::General, t)));
        }
        for (n, s) in self.slabs.iter_mut().enumerate() {
            if s.slab.sparse() {
                let class = Class::Compact(n as u16);
                s.slab
                    .compact(|f, t| moved(handle(class, f), handle(class, t)));
            }
        }
        while self.slabs.last().is_some_and(|s| s.slab.is_empty()) {
            self.slabs.pop();
        }
        if self.slabs.is_empty() {
            self.slabs = Vec::new();
        }
    }

    /// Compacts the arenas of owned states if sparse, and repoints the
    /// records that hold the moved slots, found among `handles` (every
    /// handle of the shard). A slot keeps no pointer back to its record:
    /// that would cost 8 bytes a key, where a compaction is rare.
    fn compact_owned(&mut self, handles: impl Iterator<Item = u32>) {
        let mut logs = HashMap::new();
        if self.logs.sparse() {
            self.logs.compact(|f, t| {
                logs.insert(f, t);
            });
        }
        let mut leases = HashMap::new();
        if self.leases.sparse() {
            self.leases.compact(|f, t| {
                leases.insert(f, t);
            });
        }
        if logs.is_empty() && leases.is_empty() {
            return;
        }
        for h in handles {
            let (Class::Compact(n), i) = split(h) else {
                continue;
            };
            let s = &mut self.slabs[n as usize];
            let moved = match s.layout.kind {
                Kind::Log => &logs,
                Kind::Lease => &leases,
                _ => continue,
            };
            let rec = s.slab.get_mut(i);
            if let Some(&to) = moved.get(&s.layout.slot(rec)) {
                s.layout.set_slot(rec, to);
            }
        }
    }
}

#[cfg(test)]
thread_local! {
    static DECODES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Compact records this thread has decoded (tests count what a request
/// costs by it).
#[cfg(test)]
pub(super) fn decodes() -> u64 {
    DECODES.with(|d| d.get())
}

/// Writes `packed`'s state into `rec`: the constant-size ones into the
/// record, an owned one (`entry`'s, moved) into its slot, a new slot if
/// the record is `new`.
#[inline(always)]
fn store_state(
    l: Layout,
    rec: &mut [u8],
    packed: Packed,
    entry: Entry,
    logs: &mut Arena<log::State>,
    leases: &mut Arena<LeaseKey>,
    new: bool,
) {
    match packed {
        Packed::Log | Packed::Lease => store_owned(l, rec, entry.value, logs, leases, new),
        _ => {
            l.set(rec, &packed);
            // A constant-size state owns nothing: no drop to run.
            debug_assert_eq!(entry.heap_size(), 0);
            std::mem::forget(entry);
        }
    }
}

/// [`store_state`] for a log's or a lease key's state, out of line.
#[inline(never)]
fn store_owned(
    l: Layout,
    rec: &mut [u8],
    value: Value,
    logs: &mut Arena<log::State>,
    leases: &mut Arena<LeaseKey>,
    new: bool,
) {
    match value {
        Value::Log(s) if new => l.set_slot(rec, logs.alloc(s.state)),
        Value::Log(s) => *logs.get_mut(l.slot(rec)) = s.state,
        Value::Lease(s) if new => l.set_slot(rec, leases.alloc(s)),
        Value::Lease(s) => *leases.get_mut(l.slot(rec)) = s,
        _ => unreachable!("pack said an owned state"),
    }
}

#[derive(Debug, Default)]
pub(super) struct Shard {
    index: Index,
    records: Records,
    /// Entries with an expiry, for `INFO keyspace`.
    pub volatile: usize,
    /// No key here expires before this (ms since the epoch): a lower bound,
    /// lowered by every write that sets an expiry and made exact by each
    /// sweep, so the sweeper skips a shard with nothing due instead of
    /// walking every key every second (at 10M keys that walk alone cost
    /// 14% of a core).
    pub next_expiry_ms: u64,
    /// The watched keys' write counters, for `WATCH`.
    pub watches: Watches,
}

fn expired_at(ttl_ms: Option<u64>, now: Nanos) -> bool {
    ttl_ms.is_some_and(|at| entry::passed(at, now))
}

impl Shard {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let records = &self.records;
        let pos = self.index.find(hash, |h| records.key(h) == key)?;
        Some(self.index.get(pos))
    }

    /// The first step of a prefetch ([`super::Store::prefetch`]): the
    /// index group a lookup of `hash` starts at.
    pub fn prefetch_index(&self, hash: u64) {
        self.index.prefetch(hash);
    }

    /// The second step, once the group has had time to arrive: the records
    /// it points at whose tag is `hash`'s.
    pub fn prefetch_records(&self, hash: u64) {
        self.index
            .home_candidates(hash, |h| self.records.prefetch(h));
    }

    pub fn contains(&self, hash: u64, key: &[u8]) -> bool {
        self.find(hash, key).is_some()
    }

    /// Calls `f` with `key`'s entry, expired or not; `None` if absent.
    pub fn with<R>(&self, hash: u64, key: &[u8], f: impl FnOnce(&Entry) -> R) -> Option<R> {
        let h = self.find(hash, key)?;
        self.records.with(h, |e| e.map(f))
    }

    /// [`Shard::with`], leaving a compact record's place and decoded
    /// entry in `found` as well, for a write of the key under the same
    /// lock to start from ([`Shard::update_known`]) instead of finding and
    /// decoding the record again.
    pub fn with_known<R>(
        &self,
        hash: u64,
        key: &[u8],
        found: &mut Option<Found>,
        f: impl FnOnce(&Entry) -> R,
    ) -> Option<R> {
        let records = &self.records;
        let pos = self.index.find(hash, |h| records.key(h) == key)?;
        let h = self.index.get(pos);
        match records.constant(h) {
            // A constant-size record: its decoded entry is kept for the
            // write. A log's or a lease key's state is read in its slot, and
            // moved out by the write itself (no decode to save).
            Some((l, r)) => {
                let entry = records.read(l, r);
                Some(f(&found.insert(Found { pos, h, entry }).entry))
            }
            None => records.with(h, |e| e.map(f)),
        }
    }

    /// See [`super::Store::update`].
    pub fn update<R>(
        &mut self,
        store: &impl Owner,
        hash: u64,
        key: &[u8],
        now: Nanos,
        touch: Touch,
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        self.update_from(store, hash, key, now, touch, None, f)
    }

    /// [`Shard::update`] of a key that [`Shard::with_known`] left in
    /// `found` (taken here), under this same lock, and that nothing has
    /// written since: the write starts from its entry rather than decoding
    /// the record again, and from its place in the index if it is still
    /// there (another key's insert may have moved it).
    #[allow(clippy::too_many_arguments)]
    pub fn update_known<R>(
        &mut self,
        store: &impl Owner,
        hash: u64,
        key: &[u8],
        now: Nanos,
        touch: Touch,
        found: &mut Option<Found>,
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        self.update_from(store, hash, key, now, touch, found.take(), f)
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn update_from<R>(
        &mut self,
        store: &impl Owner,
        hash: u64,
        key: &[u8],
        now: Nanos,
        touch: Touch,
        found: Option<Found>,
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        let Shard {
            index,
            records,
            volatile,
            next_expiry_ms,
            watches,
        } = self;
        // A handle is in one live slot of the index, and stays the key's
        // until the key is written: still at its place, it is found.
        let (at, known) = match found {
            Some(k) if index.get_live(k.pos) == Some(k.h) => (Some(k.pos), Some(k.entry)),
            Some(k) => (index.find(hash, |h| records.key(h) == key), Some(k.entry)),
            None => (index.find(hash, |h| records.key(h) == key), None),
        };
        match at {
            Some(pos) => {
                let h = index.get(pos);
                debug_assert!(records.key(h) == key, "a key moved from its place");
                let mut cur = match known {
                    Some(e) if matches!(split(h).0, Class::Compact(_)) => {
                        debug_assert!(
                            records
                                .constant(h)
                                .is_some_and(|(l, r)| records.decode(l, r) == e),
                            "a stale entry"
                        );
                        Some(e)
                    }
                    _ => records.take(h),
                };
                let had_ttl = cur.as_ref().is_some_and(Entry::has_expiry);
                let mut changed = false;
                if let Some(e) = cur.as_ref().filter(|e| e.is_expired(now)) {
                    store.lapsed(e);
                    cur = None;
                    changed = true;
                    store.count_expired();
                }
                // A watched key: a write that leaves it as it was (a refused
                // SET NX, an INCR of a non-number) does not abort its
                // watchers, as in Redis, so keep the value to compare.
                let before = (!changed && touch == Touch::IfChanged && watches.get(hash).is_some())
                    .then(|| cur.clone());
                let r = f(&mut cur);
                if before.is_none_or(|b| b != cur) {
                    watches.touch(hash);
                }
                let ttl = cur.as_ref().and_then(Entry::expiry_ms);
                *volatile = *volatile + ttl.is_some() as usize - had_ttl as usize;
                if let Some(at) = ttl {
                    *next_expiry_ms = (*next_expiry_ms).min(at);
                }
                if store.effects().emitting() {
                    store.effects().put(key, cur.as_ref());
                }
                match cur {
                    Some(e) => {
                        index.set(pos, records.put(Some(h), key, e));
                    }
                    None => {
                        index.remove(hash, pos);
                        records.free(h);
                    }
                }
                r
            }
            None => {
                let mut cur = None;
                let r = f(&mut cur);
                if cur.is_some() || touch == Touch::Always {
                    watches.touch(hash);
                }
                if let Some(e) = cur {
                    if store.effects().emitting() {
                        store.effects().put(key, Some(&e));
                    }
                    if let Some(at) = e.expiry_ms() {
                        *volatile += 1;
                        *next_expiry_ms = (*next_expiry_ms).min(at);
                    }
                    let h = records.put(None, key, e);
                    let records = &*records;
                    index.insert(hash, h, |h| store.hasher().hash_one(records.key(h)));
                    store.grew_to(index.len());
                }
                r
            }
        }
    }

    /// Forgets every key (`FLUSHALL`). Watched keys that existed count as
    /// written; a watched key that did not exist does not (as Redis 7).
    pub fn clear(&mut self, store: &impl Owner) {
        let mut watches = std::mem::take(&mut self.watches);
        if !watches.is_empty() {
            for h in self.index.iter() {
                watches.touch(store.hash(self.records.key(h)));
            }
        }
        *self = Shard {
            watches,
            ..Shard::default()
        };
    }

    /// Calls `f` for every entry that is live at `now`.
    pub fn for_each_live(&self, now: Nanos, mut f: impl FnMut(&[u8], &Entry)) {
        for h in self.index.iter() {
            self.records.with(h, |e| {
                if let Some(e) = e.filter(|e| !e.is_expired(now)) {
                    f(self.records.key(h), e)
                }
            });
        }
    }

    /// Calls `f` with every key live at `now`, reading only keys and
    /// expiries (no record is decoded): a slot's keys, `CLUSTER
    /// GETKEYSINSLOT`.
    pub fn for_each_live_key(&self, now: Nanos, mut f: impl FnMut(&[u8])) {
        for h in self.index.iter() {
            if !expired_at(self.records.expiry_ms(h), now) {
                f(self.records.key(h))
            }
        }
    }

    /// Up to `limit` keys with a TTL (not `spare`), with that TTL in ms,
    /// looked for from a place in the index that `start` picks, so that
    /// samples taken for different writes cover the whole shard.
    pub fn volatile_keys(&self, spare: &[u8], limit: usize, start: u64) -> Vec<(u64, SmallBytes)> {
        let records = &self.records;
        self.index
            .iter_from(start)
            .filter_map(|h| Some((records.expiry_ms(h)?, h)))
            .filter(|&(_, h)| records.key(h) != spare)
            .take(limit)
            .map(|(at, h)| (at, SmallBytes::new(records.key(h))))
            .collect()
    }

    /// Removes `key`; returns its TTL (`Some(None)` if it had none), or
    /// `None` if it was not there.
    pub fn remove(&mut self, store: &impl Owner, hash: u64, key: &[u8]) -> Option<Option<u64>> {
        let records = &mut self.records;
        let pos = self.index.find(hash, |h| records.key(h) == key)?;
        if store.effects().emitting() {
            store.effects().put(key, None);
        }
        let h = self.index.remove(hash, pos);
        let ttl = records.expiry_ms(h);
        records.free(h);
        self.volatile -= ttl.is_some() as usize;
        self.watches.touch(hash);
        Some(ttl)
    }

    /// Removes every entry expired at `now`; returns how many. Each lease
    /// key's leases count as lapsed; each removal is logged for replicas.
    pub fn remove_expired(&mut self, store: &impl Owner, now: Nanos) -> usize {
        let hasher = store.hasher();
        let mut next = u64::MAX;
        let records = &self.records;
        let gone = self.index.retain(
            |h| {
                let ttl = records.expiry_ms(h);
                if expired_at(ttl, now) {
                    return false;
                }
                if let Some(at) = ttl {
                    next = next.min(at);
                }
                true
            },
            |h| hasher.hash_one(records.key(h)),
        );
        for &h in &gone {
            if let Some(e) = self.records.take_leases(h) {
                store.lapsed(&e);
            }
            if store.effects().emitting() {
                store.effects().put(self.records.key(h), None);
            }
            if !self.watches.is_empty() {
                self.watches.touch(store.hash(self.records.key(h)));
            }
            self.records.free(h);
        }
        self.volatile -= gone.len();
        self.next_expiry_ms = next;
        gone.len()
    }

    /// Gives memory back once keys have gone: the index shrinks when
    /// mostly empty, and sparse arenas are compacted (their records moved
    /// down, their handles repointed).
    pub fn reclaim(&mut self, hasher: &ahash::RandomState) {
        if self.index.len() * 8 < self.index.capacity() {
            let records = &self.records;
            self.index
                .shrink_to_fit(|h| hasher.hash_one(records.key(h)));
        }
        let mut moves: Vec<(u32, u32)> = Vec::new();
        self.records.compact(|from, to| moves.push((from, to)));
        for (from, to) in moves {
            let hash = hasher.hash_one(self.records.key(to));
            let pos = self
                .index
                .find(hash, |h| h == from)
                .expect("a moved record is in the index");
            self.index.set(pos, to);
        }
        self.records.compact_owned(self.index.iter());
    }

    /// Whether an insert of a new key would reallocate the index.
    pub fn index_full(&self) -> bool {
        self.index.len() >= self.index.capacity()
    }

    pub fn index_capacity(&self) -> usize {
        self.index.capacity()
    }

    /// Bytes a write of a new key could allocate: the index's next size if
    /// it is full (it grows by half or a third, and holds both tables while
    /// it moves the handles), and a new arena chunk.
    pub fn growth(&self) -> usize {
        let bytes = self.records.growth();
        if self.index_full() {
            bytes + self.index.grown_size()
        } else {
            bytes
        }
    }

    /// Bytes held: the index, the arenas, and the heap blocks of general
    /// records (long keys, strings, logs).
    pub fn allocation_size(&self) -> usize {
        self.index.allocation_size() + self.records.allocation_size()
    }

    /// Records stored whole.
    #[cfg(test)]
    pub fn general_len(&self) -> usize {
        self.records.general.len()
    }

    /// The index and the record chunks, without free lists: what must not
    /// be reallocated under `--maxmemory`.
    #[cfg(test)]
    pub fn table_bytes(&self) -> usize {
        let r = &self.records;
        self.index.allocation_size()
            + r.general.chunk_bytes()
            + r.logs.chunk_bytes()
            + r.leases.chunk_bytes()
            + r.slabs().map(Slab::chunk_bytes).sum::<usize>()
    }

    pub fn heap_size(&self) -> usize {
        let records = &self.records;
        self.index
            .iter()
            .map(|h| match split(h) {
                (Class::General, i) => {
                    let g = records.general.get(i);
                    g.key.heap_size() + g.entry.as_ref().map_or(0, Entry::heap_size)
                }
                (Class::Compact(n), i) => {
                    let (l, slab) = records.slab(n);
                    match l.kind {
                        Kind::Log => records.logs.get(l.slot(slab.get(i))).heap_size(),
                        Kind::Lease => records.leases.get(l.slot(slab.get(i))).leases.heap_bytes(),
                        _ => 0,
                    }
                }
            })
            .sum()
    }
}
