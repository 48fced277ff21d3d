//! The keyspace: a sharded hash map from key bytes to [`Entry`], with lazy
//! expiry on every access and an active sweeper (`sweeper.rs`).
//!
//! Why not `DashMap`: a limiter needs three things its API does not give
//! without `unsafe` raw-table access: locking several shards at once in a
//! fixed order (an all-or-nothing decision over keys in different shards,
//! `MSET`), sweeping one shard at a time in small steps, and a slot layout
//! we control for the memory targets. The map itself is `hashbrown`'s
//! `HashTable` (the table inside `DashMap` and `std`'s `HashMap`) behind a
//! `parking_lot` lock per shard, exactly DashMap's design, in 150 lines.

pub mod bytes;
pub mod entry;
pub mod snapshot;
pub mod sweeper;

use hashbrown::hash_table::{Entry as TableEntry, HashTable};
use parking_lot::{RwLock, RwLockWriteGuard};
use std::sync::atomic::{AtomicU64, Ordering};

pub use self::bytes::SmallBytes;
pub use self::entry::{Entry, Value};
use crate::clock::Nanos;

/// Shards: few enough that their locks stay in cache (each `RL.ALLOW` takes
/// one; with 1024 shards the lock's cache miss was a fifth of the store's
/// time, and 256 measured 7-9% less server CPU per `RL.ALLOW` at `-P 16`),
/// many enough that a shard stays small at 10M keys (about 40k entries, so
/// a sweep or a rehash holds one lock for well under a millisecond) and two
/// cores almost never contend.
pub const DEFAULT_SHARDS: usize = 256;

/// One key and what it holds. `entry` is `None` only transiently, inside
/// [`Store::update`], to express "delete" or "not there"; the niche in
/// `SmallBytes` makes the `Option` free.
#[derive(Debug)]
struct Slot {
    key: SmallBytes,
    entry: Option<Entry>,
}

#[derive(Debug, Default)]
struct Shard {
    table: HashTable<Slot>,
    /// Entries with an expiry, for `INFO keyspace`.
    volatile: usize,
    /// No key here expires before this (ms since the epoch): a lower bound,
    /// lowered by every write that sets an expiry and made exact by each
    /// sweep, so the sweeper skips a shard with nothing due instead of
    /// walking every key every second (at 10M keys that walk alone cost
    /// 14% of a core).
    next_expiry_ms: u64,
}

/// A shard padded to its own cache lines, so two cores locking neighbours
/// do not bounce one line between them.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Padded(RwLock<Shard>);

#[derive(Debug)]
pub struct Store {
    shards: Box<[Padded]>,
    hasher: ahash::RandomState,
    mask: usize,
    expired: AtomicU64,
    evicted: AtomicU64,
}

impl Default for Store {
    fn default() -> Self {
        Self::new(DEFAULT_SHARDS)
    }
}

/// Keyspace figures for `INFO`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub keys: usize,
    pub volatile: usize,
}

impl Store {
    /// `shards` is rounded up to a power of two.
    pub fn new(shards: usize) -> Self {
        let n = shards.max(1).next_power_of_two();
        Store {
            shards: (0..n).map(|_| Padded::default()).collect(),
            hasher: ahash::RandomState::new(),
            mask: n - 1,
            expired: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The shard index comes from bits 32.. of the hash: hashbrown uses the
    /// low bits for the bucket and the top 7 for its tag, so these are free.
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & self.mask
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Keys expired so far (lazily or by the sweeper).
    pub fn expired_count(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }

    /// Reads a live entry under a shared lock. An expired entry reads as
    /// absent and, as in Redis, the read deletes it (under a write lock,
    /// taken only on that rare path).
    pub fn get<R>(&self, key: &[u8], now: Nanos, f: impl FnOnce(&Entry) -> R) -> Option<R> {
        let hash = self.hash(key);
        let shard = self.shards[self.shard_index(hash)].0.read();
        let slot = shard.table.find(hash, |s| s.key.as_slice() == key)?;
        let entry = slot.entry.as_ref()?;
        if !entry.is_expired(now) {
            return Some(f(entry));
        }
        drop(shard);
        // `update` removes an expired entry before calling its closure.
        self.update(key, now, |_| ());
        None
    }

    pub fn exists(&self, key: &[u8], now: Nanos) -> bool {
        self.get(key, now, |_| ()).is_some()
    }

    /// Runs `f` on the key's live entry (`None` if absent or expired) under
    /// the shard's write lock: whatever `f` leaves is stored, and `None`
    /// deletes. Read-modify-write is atomic per key.
    pub fn update<R>(&self, key: &[u8], now: Nanos, f: impl FnOnce(&mut Option<Entry>) -> R) -> R {
        let hash = self.hash(key);
        let mut shard = self.shards[self.shard_index(hash)].0.write();
        update_in(&mut shard, &self.hasher, &self.expired, hash, key, now, f)
    }

    /// Deletes a key; true if a live one was there.
    pub fn remove(&self, key: &[u8], now: Nanos) -> bool {
        self.update(key, now, |e| e.take().is_some())
    }

    /// Locks every shard that `keys` map to, in ascending shard order, so
    /// concurrent multi-key operations can never deadlock, and returns a
    /// guard through which each key can be updated atomically with the rest.
    pub fn lock_many<'a>(&'a self, keys: impl IntoIterator<Item = &'a [u8]>) -> MultiLock<'a> {
        let mut wanted: Vec<usize> = keys
            .into_iter()
            .map(|k| self.shard_index(self.hash(k)))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        let guards = wanted
            .into_iter()
            .map(|i| (i, self.shards[i].0.write()))
            .collect();
        MultiLock {
            store: self,
            guards,
        }
    }

    /// Number of keys, counting expired ones not yet removed (as Redis's
    /// `DBSIZE` does).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().table.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn counts(&self) -> Counts {
        self.shards.iter().fold(Counts::default(), |acc, s| {
            let s = s.0.read();
            Counts {
                keys: acc.keys + s.table.len(),
                volatile: acc.volatile + s.volatile,
            }
        })
    }

    /// Removes every key; returns how many there were.
    pub fn clear(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut s = s.0.write();
                let n = s.table.len();
                *s = Shard::default();
                n
            })
            .sum()
    }

    /// Calls `f` for every live key of shard `i` (SCAN walks shard by shard,
    /// so its cursor is a shard index and stays valid across resizes).
    pub fn for_each_in_shard(&self, i: usize, now: Nanos, mut f: impl FnMut(&[u8], &Entry)) {
        let shard = self.shards[i].0.read();
        for slot in shard.table.iter() {
            if let Some(e) = slot.entry.as_ref().filter(|e| !e.is_expired(now)) {
                f(&slot.key, e);
            }
        }
    }

    /// Bytes a write of `key` would allocate by growing its shard's table:
    /// 0 if the key is there or the table has room, else the new table's
    /// size (hashbrown doubles, and holds both tables while it moves the
    /// slots). `--maxmemory` checks this before a write, so the table that
    /// would cross the cap is never allocated.
    pub fn growth_for(&self, key: &[u8]) -> usize {
        let hash = self.hash(key);
        let shard = self.shards[self.shard_index(hash)].0.read();
        let t = &shard.table;
        // `capacity()` is hashbrown's items + growth_left: deleted slots
        // (tombstones) use it up too, and then an insert rehashes.
        if t.len() < t.capacity() || t.find(hash, |s| s.key.as_slice() == key).is_some() {
            return 0;
        }
        let slot = std::mem::size_of::<Slot>() + 1;
        let buckets = (t.allocation_size() / slot).next_power_of_two().max(4);
        if t.allocation_size() > 0 && t.len() < buckets * 7 / 16 {
            return 0; // under half full: hashbrown rehashes in place
        }
        buckets * 2 * slot
    }

    /// For `--maxmemory-policy volatile-ttl`: makes room for a write of
    /// `key` that must not grow memory. If its shard's table is out of
    /// room (the insert would reallocate it), evicts the `1/16` of that
    /// shard's keys nearest their expiry and clears the table's tombstones
    /// in place, so the insert fits the table it has; otherwise evicts one
    /// key, as [`Store::evict_for`]. False if no key with a TTL was found.
    pub fn make_room(&self, key: &[u8], now: Nanos) -> bool {
        let hash = self.hash(key);
        {
            let mut guard = self.shards[self.shard_index(hash)].0.write();
            let shard = &mut *guard;
            let t = &shard.table;
            if t.len() >= t.capacity() && t.find(hash, |s| s.key.as_slice() == key).is_none() {
                let batch = (t.capacity() / 16).max(1);
                let evicted = self.evict_nearest(shard, key, now, batch);
                if evicted > 0 {
                    self.clear_tombstones(shard);
                    return true;
                }
            }
        }
        self.evict_for(key, now, 16)
    }

    /// Evicts up to `n` keys of `shard` (never `spare`), those with the
    /// nearest expiry first. Returns how many went.
    fn evict_nearest(&self, shard: &mut Shard, spare: &[u8], now: Nanos, n: usize) -> usize {
        let mut victims: Vec<(u64, SmallBytes)> = shard
            .table
            .iter()
            .filter(|s| s.key.as_slice() != spare)
            .filter_map(|s| Some((s.entry.as_ref()?.expiry_ms()?, s.key.clone())))
            .collect();
        if victims.len() > n {
            victims.select_nth_unstable_by_key(n - 1, |(at, _)| *at);
            victims.truncate(n);
        }
        victims
            .iter()
            .filter(|(_, k)| self.remove_victim(shard, k, now))
            .count()
    }

    /// Removes `victim` from `shard`, counting it as evicted (or expired,
    /// if it already was).
    fn remove_victim(&self, shard: &mut Shard, victim: &[u8], now: Nanos) -> bool {
        let Ok(entry) = shard
            .table
            .find_entry(self.hash(victim), |s| s.key.as_slice() == victim)
        else {
            return false;
        };
        let (slot, _) = entry.remove();
        shard.volatile -= slot.entry.as_ref().is_some_and(Entry::has_expiry) as usize;
        if slot.entry.is_some_and(|e| e.is_expired(now)) {
            self.expired.fetch_add(1, Ordering::Relaxed);
        } else {
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Re-inserts every slot into the same allocation, which turns
    /// hashbrown's tombstones back into free room without allocating a
    /// second table (`drain` keeps the allocation).
    fn clear_tombstones(&self, shard: &mut Shard) {
        let slots: Vec<Slot> = shard.table.drain().collect();
        let hasher = &self.hasher;
        for s in slots {
            let h = hasher.hash_one(s.key.as_slice());
            shard
                .table
                .insert_unique(h, s, |s| hasher.hash_one(s.key.as_slice()));
        }
    }

    /// Keys evicted so far to stay under `--maxmemory`.
    pub fn evicted_count(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Evicts, for `--maxmemory-policy volatile-ttl`, the key nearest its
    /// expiry (a limiter key about to expire is the one whose state matters
    /// least) among up to `sample` keys with a TTL in the shard `key` maps
    /// to, where `key` is about to be written, so that shard keeps its size;
    /// only if it has no key with a TTL does it look in the next shards.
    /// Never evicts `key` itself; returns false if no other key has a TTL.
    pub fn evict_for(&self, key: &[u8], now: Nanos, sample: usize) -> bool {
        let n = self.shards.len();
        let start = self.shard_index(self.hash(key));
        for probe in 0..n {
            let mut guard = self.shards[(start + probe) % n].0.write();
            let shard = &mut *guard;
            if shard.volatile == 0 {
                continue;
            }
            let victim = shard
                .table
                .iter()
                .filter(|s| s.key.as_slice() != key)
                .filter_map(|s| Some((s.entry.as_ref()?.expiry_ms()?, &s.key)))
                .take(sample)
                .min_by_key(|(at, _)| *at)
                .map(|(_, k)| k.clone());
            let Some(victim) = victim else {
                continue;
            };
            if self.remove_victim(shard, &victim, now) {
                return true;
            }
        }
        false
    }

    /// Removes the expired keys of shard `i` and gives back table memory
    /// once the shard is mostly empty, however its keys went (expiry, `DEL`,
    /// eviction). Returns how many were removed.
    pub fn sweep_shard(&self, i: usize, now: Nanos) -> usize {
        let mut guard = self.shards[i].0.write();
        let shard = &mut *guard;
        let removed =
            if shard.volatile == 0 || shard.next_expiry_ms.saturating_mul(Nanos::PER_MS) > now.0 {
                0
            } else {
                self.remove_expired(shard, now)
            };
        // Buckets from the allocation, not `capacity()`: tombstones left by
        // deletions lower the latter and would hide an empty table.
        let buckets = shard.table.allocation_size() / (std::mem::size_of::<Slot>() + 1);
        if buckets > 64 && shard.table.len() < buckets / 8 {
            let hasher = &self.hasher;
            shard
                .table
                .shrink_to_fit(|s| hasher.hash_one(s.key.as_slice()));
        }
        removed
    }

    fn remove_expired(&self, shard: &mut Shard, now: Nanos) -> usize {
        let before = shard.table.len();
        let mut removed_volatile = 0;
        let mut next = u64::MAX;
        shard.table.retain(|slot| {
            let expired = slot.entry.as_ref().is_none_or(|e| e.is_expired(now));
            removed_volatile += expired as usize;
            if !expired {
                if let Some(at) = slot.entry.as_ref().and_then(Entry::expiry_ms) {
                    next = next.min(at);
                }
            }
            !expired
        });
        shard.volatile -= removed_volatile;
        shard.next_expiry_ms = next;
        let removed = before - shard.table.len();
        self.expired.fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    /// Approximate bytes held by the keyspace: table slots plus heap bytes
    /// of long keys and values.
    pub fn memory_estimate(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.0.read();
                let slots = s.table.capacity() * (std::mem::size_of::<Slot>() + 1);
                let heap: usize = s
                    .table
                    .iter()
                    .map(|slot| {
                        slot.key.heap_size() + slot.entry.as_ref().map_or(0, Entry::heap_size)
                    })
                    .sum();
                slots + heap
            })
            .sum()
    }
}

/// Write locks on several shards, taken in ascending order.
pub struct MultiLock<'a> {
    store: &'a Store,
    guards: Vec<(usize, RwLockWriteGuard<'a, Shard>)>,
}

impl MultiLock<'_> {
    /// As [`Store::update`], for a key whose shard this guard holds.
    ///
    /// # Panics
    /// If `key` was not among the keys locked: a bug in the caller.
    pub fn update<R>(
        &mut self,
        key: &[u8],
        now: Nanos,
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        let hash = self.store.hash(key);
        let index = self.store.shard_index(hash);
        let pos = self
            .guards
            .binary_search_by_key(&index, |(i, _)| *i)
            .expect("MultiLock::update on a key that was not locked");
        let shard = &mut self.guards[pos].1;
        update_in(
            shard,
            &self.store.hasher,
            &self.store.expired,
            hash,
            key,
            now,
            f,
        )
    }
}

fn update_in<R>(
    shard: &mut Shard,
    hasher: &ahash::RandomState,
    expired: &AtomicU64,
    hash: u64,
    key: &[u8],
    now: Nanos,
    f: impl FnOnce(&mut Option<Entry>) -> R,
) -> R {
    let Shard {
        table,
        volatile,
        next_expiry_ms,
    } = shard;
    let entry = table.entry(
        hash,
        |s| s.key.as_slice() == key,
        |s| hasher.hash_one(s.key.as_slice()),
    );
    match entry {
        TableEntry::Occupied(mut o) => {
            let slot = o.get_mut();
            let had_ttl = slot.entry.as_ref().is_some_and(|e| e.has_expiry());
            if slot.entry.as_ref().is_some_and(|e| e.is_expired(now)) {
                slot.entry = None;
                expired.fetch_add(1, Ordering::Relaxed);
            }
            let r = f(&mut slot.entry);
            if let Some(at) = slot.entry.as_ref().and_then(Entry::expiry_ms) {
                *next_expiry_ms = (*next_expiry_ms).min(at);
            }
            let has_ttl = slot.entry.as_ref().map(|e| e.has_expiry());
            *volatile = *volatile + has_ttl.unwrap_or(false) as usize - had_ttl as usize;
            if has_ttl.is_none() {
                o.remove();
            }
            r
        }
        TableEntry::Vacant(v) => {
            let mut e = None;
            let r = f(&mut e);
            if let Some(e) = e {
                *volatile += e.has_expiry() as usize;
                if let Some(at) = e.expiry_ms() {
                    *next_expiry_ms = (*next_expiry_ms).min(at);
                }
                v.insert(Slot {
                    key: SmallBytes::new(key),
                    entry: Some(e),
                });
            }
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Entry {
        Entry::new(Value::Str(SmallBytes::new(v.as_bytes())))
    }

    fn table_bytes(store: &Store) -> usize {
        store
            .shards
            .iter()
            .map(|s| s.0.read().table.allocation_size())
            .sum()
    }

    #[test]
    fn make_room_never_grows_a_full_table() {
        let store = Store::new(1);
        let now = Nanos(1_000_000_000);
        let put = |i: u64| {
            let k = format!("k{i}");
            let at = Nanos::from_millis(now.as_millis() + 1_000 + i);
            store.update(k.as_bytes(), now, |e| {
                *e = Some(Entry::with_expiry(s("v").value, at))
            });
        };
        put(0);
        let mut i = 1;
        while store.len() < 200 || store.growth_for(format!("k{i}").as_bytes()) == 0 {
            put(i);
            i += 1;
        }
        let full = table_bytes(&store);
        let keys = store.len();
        assert!(keys > 100, "{keys}");
        // A long run of new keys, each after make_room when its table is
        // out of room, as volatile-ttl does at the cap: the table is never
        // reallocated, and the keys evicted are the ones expiring first.
        for _ in 0..20 * keys {
            if store.growth_for(format!("k{i}").as_bytes()) > 0 {
                assert!(store.make_room(format!("k{i}").as_bytes(), now));
            }
            put(i);
            i += 1;
            assert_eq!(table_bytes(&store), full, "table reallocated at key {i}");
        }
        assert!(
            store.len() <= keys && store.len() > keys * 3 / 4,
            "{}",
            store.len()
        );
        assert!(store.exists(format!("k{}", i - 1).as_bytes(), now));
        assert!(!store.exists(b"k0", now));
        assert_eq!(store.counts().volatile, store.len());
    }

    #[test]
    fn sweep_skips_shards_with_nothing_due_and_sees_shortened_ttls() {
        let store = Store::new(1);
        let sec = |s: u64| Nanos(s * Nanos::PER_SEC);
        let put = |k: &[u8], at: u64| {
            store.update(k, sec(1), |e| {
                *e = Some(Entry::with_expiry(s("v").value, Some(sec(at))))
            })
        };
        put(b"a", 100);
        put(b"b", 200);
        assert_eq!(store.sweep_shard(0, sec(2)), 0);
        assert_eq!(store.shards[0].0.read().next_expiry_ms, 100_000);
        // Shortening a TTL after a sweep lowers the bound again.
        put(b"b", 5);
        assert_eq!(store.sweep_shard(0, sec(4)), 0);
        assert_eq!(store.sweep_shard(0, sec(5)), 1);
        assert!(!store.exists(b"b", sec(5)));
        assert_eq!(store.sweep_shard(0, sec(99)), 0);
        assert_eq!(store.sweep_shard(0, sec(100)), 1);
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn deleted_keys_give_their_table_back() {
        let store = Store::new(1);
        let now = Nanos(1);
        for i in 0..10_000 {
            store.update(format!("k{i}").as_bytes(), now, |e| *e = Some(s("v")));
        }
        let full = table_bytes(&store);
        for i in 0..10_000 {
            assert!(store.remove(format!("k{i}").as_bytes(), now));
        }
        assert_eq!(table_bytes(&store), full, "nothing is given back on DEL");
        store.sweep_shard(0, now);
        assert_eq!(table_bytes(&store), 0, "an empty table is given back");
    }

    #[test]
    fn growth_for_sees_a_table_about_to_double() {
        let store = Store::new(1);
        let now = Nanos(1);
        assert!(store.growth_for(b"first") > 0, "an empty table allocates");
        store.update(b"first", now, |e| *e = Some(s("v")));
        assert_eq!(store.growth_for(b"second"), 0);
        assert_eq!(store.growth_for(b"first"), 0);
    }

    #[test]
    fn lazy_expiry_and_sweep() {
        let store = Store::new(4);
        let t = Nanos(1_000_000);
        store.update(b"a", t, |e| {
            *e = Some(Entry::with_expiry(s("1").value, Some(Nanos(2_000_000))))
        });
        store.update(b"b", t, |e| *e = Some(s("2")));
        assert!(store.exists(b"a", t));
        assert_eq!(store.counts().volatile, 1);
        let later = Nanos(2_000_000);
        store.update(b"c", t, |e| {
            *e = Some(Entry::with_expiry(s("3").value, Some(Nanos(2_000_000))))
        });
        // Unread, an expired key lingers until the sweeper comes...
        assert_eq!(store.len(), 3);
        let swept: usize = (0..store.shard_count())
            .map(|i| store.sweep_shard(i, later))
            .sum();
        assert_eq!(swept, 2);
        assert_eq!(store.len(), 1);
        assert_eq!(store.counts().volatile, 0);
        assert_eq!(store.expired_count(), 2);
    }

    #[test]
    fn eviction_takes_the_nearest_expiry_and_spares_persistent_keys() {
        // One shard: every key is in the shard the new key maps to.
        let store = Store::new(1);
        let t = Nanos(1_000_000);
        for (k, ms) in [("a", 50u64), ("b", 20), ("c", 90)] {
            store.update(k.as_bytes(), t, |e| {
                *e = Some(Entry::with_expiry_ms(s("v").value, Some(ms)))
            });
        }
        store.update(b"p", t, |e| *e = Some(s("v")));
        assert!(store.evict_for(b"new", t, 16));
        assert!(!store.exists(b"b", t));
        assert!(store.evict_for(b"new", t, 16));
        assert!(!store.exists(b"a", t));
        // The key being written is never its own victim.
        assert!(!store.evict_for(b"c", t, 16));
        assert!(store.evict_for(b"new", t, 16));
        assert!(
            !store.evict_for(b"new", t, 16),
            "only a persistent key is left"
        );
        assert!(store.exists(b"p", t));
        assert_eq!(store.evicted_count(), 3);
    }

    #[test]
    fn reading_an_expired_key_deletes_it() {
        let store = Store::new(4);
        let t = Nanos(1_000_000);
        store.update(b"a", t, |e| {
            *e = Some(Entry::with_expiry(s("1").value, Some(Nanos(2_000_000))))
        });
        assert!(!store.exists(b"a", Nanos(2_000_000)));
        assert_eq!(store.len(), 0);
        assert_eq!(store.counts().volatile, 0);
        assert_eq!(store.expired_count(), 1);
    }

    #[test]
    fn update_deletes_and_tracks_volatile() {
        let store = Store::new(1);
        let t = Nanos(10);
        store.update(b"k", t, |e| {
            *e = Some(Entry::with_expiry(s("v").value, Some(Nanos(100))))
        });
        assert_eq!(store.counts().volatile, 1);
        store.update(b"k", t, |e| e.as_mut().unwrap().set_expiry(None));
        assert_eq!(store.counts().volatile, 0);
        store.update(b"k", t, |e| e.as_mut().unwrap().set_expiry(Some(Nanos(50))));
        assert!(store.remove(b"k", t));
        assert_eq!(store.counts().volatile, 0);
        assert!(!store.remove(b"k", t));
        assert!(store.is_empty());
    }

    #[test]
    fn lock_many_updates_keys_in_several_shards() {
        let store = Store::new(16);
        let keys: Vec<Vec<u8>> = (0..50).map(|i| format!("key{i}").into_bytes()).collect();
        {
            let mut lock = store.lock_many(keys.iter().map(|k| k.as_slice()));
            for k in &keys {
                lock.update(k, Nanos(0), |e| *e = Some(s("x")));
            }
        }
        assert_eq!(store.len(), 50);
    }
}
