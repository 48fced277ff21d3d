//! The keyspace: a sharded map from key bytes to [`Entry`], with lazy
//! expiry on every access and an active sweeper (`sweeper.rs`).
//!
//! - `mod.rs` (here): sharding, locks, expiry counts, eviction.
//! - `shard.rs`: one shard, a hash index of 4-byte handles (`index.rs`)
//!   over per-class record arenas and slabs (`arena.rs`).
//! - `record.rs`: the packed records of `window`, `fixed`, `gcra` and
//!   `sliding` keys (2 bytes, the state, the key's own bytes: one slab per
//!   algorithm and key length) and the 48-byte ones of `log` keys;
//!   `params.rs`: their interned parameters.
//! - `entry.rs`: what a key holds, as every caller sees it; `bytes.rs`:
//!   inline short byte strings.
//! - `keys.rs`: the per-key verbs every view here shares (the store,
//!   [`MultiLock`], [`HeldShards`], [`Locked`], [`Keyspace`]), written
//!   once over how each reaches a key's shard; the views keep only what
//!   is theirs (locking, watch marks, lending).
//! - `known.rs`: a key looked at and then written under one lock (a
//!   plan's peek and charge), hashed, found and decoded once.
//!
//! Why not `DashMap`: a limiter needs three things its API does not give
//! without `unsafe` raw-table access: locking several shards at once in a
//! fixed order (an all-or-nothing decision over keys in different shards,
//! `MSET`), sweeping one shard at a time in small steps, and a storage
//! layout we control for the memory targets. Each shard is a hash index
//! behind a `parking_lot` lock, DashMap's design, with records kept beside
//! the index rather than in it (`shard.rs`), and an index laid out so a
//! lookup touches one cache line of it (`index.rs`).

pub mod arena;
mod by_slot;
pub mod bytes;
pub mod codec;
pub mod collections;
pub mod dump;
pub mod effects;
pub mod entry;
mod evict;
pub mod index;
pub mod keys;
pub mod known;
pub mod limit;
pub mod params;
pub mod plan;
pub mod record;
mod shard;
pub mod slot;
pub mod snapshot;
pub mod sweeper;
mod watch;

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

pub use self::bytes::SmallBytes;
pub use self::entry::{Entry, Value};
pub use self::shard::Found;
use self::shard::Shard;
pub use self::watch::Touch;
use crate::clock::Nanos;
use crate::util::lock_or_wait_off;

/// Shards: few enough that their locks stay in cache (each `RL.ALLOW` takes
/// one; with 1024 shards the lock's cache miss was a fifth of the store's
/// time, and 256 measured 7-9% less server CPU per `RL.ALLOW` at `-P 16`),
/// many enough that a shard stays small at 10M keys (about 40k entries, so
/// a sweep or a rehash holds one lock for well under a millisecond) and two
/// cores almost never contend.
pub const DEFAULT_SHARDS: usize = 256;

/// Most keys one [`Store::prefetch`] looks ahead at.
pub const PREFETCH_MAX: usize = 16;

/// Keys from which [`Store::prefetching`] holds. Below it, index and
/// records (about 45 bytes a limiter key) stay within the caches and a
/// prefetch is pure cost (the look ahead, a second hash and two lock
/// probes per key); 2^18 keys are some 12 MiB, where lookups start to
/// miss the last-level cache.
pub const PREFETCH_FROM_KEYS: usize = 1 << 18;

/// A shard padded to its own cache lines, so two cores locking neighbours
/// do not bounce one line between them.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Padded(RwLock<Shard>);

/// How a thread waits for a shard another holds for long: the server
/// moves such a wait off its async worker (`tokio::task::block_in_place`),
/// so that one long holder (a script) cannot take every worker with it,
/// and `SCRIPT KILL` still finds one free. The store itself does no I/O
/// and knows no runtime: it calls this with the wait to run.
pub type Blocking = fn(&mut dyn FnMut());

/// Runs `f` through `blocking` if the server set one, else on this thread.
fn run_blocking(blocking: Option<&Blocking>, f: &mut dyn FnMut()) {
    match blocking {
        Some(wait) => wait(f),
        None => f(),
    }
}

impl Padded {
    fn write(&self, blocking: Option<&Blocking>) -> RwLockWriteGuard<'_, Shard> {
        lock_or_wait_off(
            |d| self.0.try_write_for(d),
            || self.0.write(),
            |f| run_blocking(blocking, f),
        )
    }

    fn read(&self, blocking: Option<&Blocking>) -> RwLockReadGuard<'_, Shard> {
        lock_or_wait_off(
            |d| self.0.try_read_for(d),
            || self.0.read(),
            |f| run_blocking(blocking, f),
        )
    }
}

#[derive(Debug)]
pub struct Store {
    shards: Box<[Padded]>,
    blocking: OnceLock<Blocking>,
    hasher: ahash::RandomState,
    mask: usize,
    /// Cluster mode: a key's shard is its hash slot's (`slot & mask`), so
    /// [`Store::keys_in_slot`] and [`Store::count_in_slot`] walk one shard.
    by_slot: bool,
    expired: AtomicU64,
    /// Leases of lease keys that expired whole: every one lapsed
    /// unreleased.
    lapsed_leases: AtomicU64,
    evicted: AtomicU64,
    /// Whether a shard's index reached `prefetch_at` keys since the last
    /// `FLUSHALL`: the keyspace has outgrown the caches.
    prefetching: AtomicBool,
    /// [`PREFETCH_FROM_KEYS`] spread over the shards.
    prefetch_at: usize,
    /// Every change, as the state it left, for replicas.
    pub effects: effects::Effects,
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

impl shard::Owner for Store {
    fn effects(&self) -> &effects::Effects {
        &self.effects
    }
    fn hasher(&self) -> &ahash::RandomState {
        &self.hasher
    }
    fn hash(&self, key: &[u8]) -> u64 {
        Store::hash(self, key)
    }
    fn lapsed(&self, e: &Entry) {
        Store::lapsed(self, e)
    }
    fn count_expired(&self) {
        self.expired.fetch_add(1, Ordering::Relaxed);
    }
    fn grew_to(&self, len: usize) {
        Store::grew_to(self, len)
    }
}

impl Store {
    /// Applies one frame of the stream to `store`: a replica following its
    /// primary, or the append-only file replayed at start. A state whose
    /// expiry passed by `now` removes the key.
    pub fn apply_frame(
        &self,
        kind: u8,
        body: &[u8],
        now: Nanos,
    ) -> Result<(), effects::ApplyError> {
        match kind {
            effects::SET => {
                let (key, entry) = codec::decode_record(body)?;
                if entry.is_expired(now) {
                    self.remove(&key, now);
                } else {
                    self.update(&key, now, |slot| *slot = Some(entry));
                }
            }
            effects::DEL => {
                self.remove(body, now);
            }
            effects::FLUSH => {
                self.clear();
            }
            effects::PING | effects::GETACK => {}
            k => return Err(effects::ApplyError::Kind(k)),
        }
        Ok(())
    }

    /// `shards` is rounded up to a power of two.
    pub fn new(shards: usize) -> Self {
        let n = shards.max(1).next_power_of_two();
        Store {
            shards: (0..n).map(|_| Padded::default()).collect(),
            blocking: OnceLock::new(),
            hasher: ahash::RandomState::new(),
            mask: n - 1,
            by_slot: false,
            expired: AtomicU64::new(0),
            lapsed_leases: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            prefetching: AtomicBool::new(false),
            prefetch_at: (PREFETCH_FROM_KEYS / n).max(1),
            effects: effects::Effects::default(),
        }
    }

    /// A store for cluster mode: each key in the shard of its hash slot
    /// (`slot & mask`; with 256 shards, each holds 64 slots), so a slot's
    /// keys are found by walking one shard, never the keyspace. It costs
    /// each access a CRC16 of the key (or its hash tag), the slot
    /// function's; outside cluster mode keys are spread by their hash
    /// alone, and the choice costs one predictable branch.
    pub fn sharded_by_slot(shards: usize) -> Self {
        Store {
            by_slot: true,
            ..Self::new(shards)
        }
    }

    /// Whether keys are sharded by slot ([`Store::sharded_by_slot`]).
    pub fn is_sharded_by_slot(&self) -> bool {
        self.by_slot
    }

    /// Sets how long lock waits are made (see [`Blocking`]); once.
    pub fn set_blocking(&self, wait: Blocking) {
        let _ = self.blocking.set(wait);
    }

    /// Runs `f`, a long wait that is not for a shard (`MIGRATE`'s round
    /// trip to its target, under the keys' locks), as a long lock wait
    /// runs: off the async worker (see [`Blocking`]).
    pub fn blocking_section(&self, f: &mut dyn FnMut()) {
        run_blocking(self.blocking.get(), f)
    }

    fn write_shard(&self, i: usize) -> RwLockWriteGuard<'_, Shard> {
        self.shards[i].write(self.blocking.get())
    }

    fn read_shard(&self, i: usize) -> RwLockReadGuard<'_, Shard> {
        self.shards[i].read(self.blocking.get())
    }

    /// The key's hash. Sharded by slot, the bits [`Store::shard_index`]
    /// reads are the slot's instead: the index reads only the low bits
    /// and the top byte, so it is unchanged.
    fn hash(&self, key: &[u8]) -> u64 {
        let hash = self.hasher.hash_one(key);
        if self.by_slot {
            let bits = (self.mask as u64) << 32;
            (hash & !bits) | ((u64::from(slot::key_slot(key)) << 32) & bits)
        } else {
            hash
        }
    }

    /// The shard index comes from bits 32.. of the hash: a shard's index
    /// uses the low bits for the group and the top 8 for its tag, so these
    /// are free.
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & self.mask
    }

    /// Hints the CPU to load what looking `keys` up will read, each key's
    /// index group and then the records it points at, so that the cache
    /// misses of a pipelined batch's lookups overlap instead of queueing:
    /// past the last-level cache (10M keys), each lookup otherwise waits
    /// on memory twice in a row. Changes nothing. A shard another thread
    /// holds is passed over, never waited for. At most [`PREFETCH_MAX`]
    /// keys are used.
    pub fn prefetch(&self, keys: &[&[u8]]) {
        let mut hashes = [0u64; PREFETCH_MAX];
        let n = keys.len().min(PREFETCH_MAX);
        for (hash, key) in hashes.iter_mut().zip(&keys[..n]) {
            *hash = self.hash(key);
            if let Some(shard) = self.shards[self.shard_index(*hash)].0.try_read() {
                shard.prefetch_index(*hash);
            }
        }
        // Every group was asked for before the first is read: their
        // misses overlap, and so do the records'.
        for &hash in &hashes[..n] {
            if let Some(shard) = self.shards[self.shard_index(hash)].0.try_read() {
                shard.prefetch_records(hash);
            }
        }
    }

    /// Whether the keyspace is large enough for [`Store::prefetch`] to
    /// pay ([`PREFETCH_FROM_KEYS`]). Set when a shard's index reaches its
    /// share; cleared by `FLUSHALL`.
    pub fn prefetching(&self) -> bool {
        self.prefetching.load(Ordering::Relaxed)
    }

    /// Called by a shard that now holds `len` keys.
    fn grew_to(&self, len: usize) {
        if len == self.prefetch_at {
            self.prefetching.store(true, Ordering::Relaxed);
        }
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Keys expired so far (lazily or by the sweeper).
    pub fn expired_count(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }

    /// Leases that lapsed unreleased with their key (the key expired with
    /// its last lease); those a lease command finds lapsed are the command
    /// layer's count.
    pub fn lapsed_leases(&self) -> u64 {
        self.lapsed_leases.load(Ordering::Relaxed)
    }

    /// Counts an expired entry's leases as lapsed.
    fn lapsed(&self, e: &Entry) {
        if let Value::Lease(l) = &e.value {
            self.lapsed_leases
                .fetch_add(l.leases.len() as u64, Ordering::Relaxed);
        }
    }

    /// The shard `key` lives in (a lock's, or a test's that needs keys
    /// in distinct shards).
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.shard_index(self.hash(key))
    }

    /// Locks every shard that `keys` map to, in ascending shard order, so
    /// concurrent multi-key operations can never deadlock, and returns a
    /// guard through which each key can be updated atomically with the rest.
    pub fn lock_many<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> MultiLock<'_> {
        self.lock_indices(keys.into_iter().map(|k| self.shard_of(k)))
    }

    /// [`Store::lock_many`], with the shards `more` (indices, as
    /// [`MultiLock::shards`] gives them) too.
    pub fn lock_many_and<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
        more: &[usize],
    ) -> MultiLock<'_> {
        self.lock_indices(
            keys.into_iter()
                .map(|k| self.shard_of(k))
                .chain(more.iter().copied().filter(|&i| i < self.shards.len())),
        )
    }

    /// Locks every shard, in order: for a transaction with a command that
    /// reaches keys beyond its arguments (`DBSIZE`, `KEYS`, `FLUSHALL`).
    pub fn lock_all(&self) -> MultiLock<'_> {
        self.lock_shards((0..self.shards.len()).collect())
    }

    /// Locks the shards `indices` (in any order, repeats allowed).
    fn lock_indices(&self, indices: impl Iterator<Item = usize>) -> MultiLock<'_> {
        let mut wanted: Shards = indices.collect();
        wanted.sort_unstable();
        wanted.dedup();
        self.lock_shards(wanted)
    }

    /// Locks the shards of `sorted` (ascending, no repeats).
    fn lock_shards(&self, sorted: Shards) -> MultiLock<'_> {
        // Filled in place: the guards are not moved (and copied) after.
        let mut lock = MultiLock {
            store: self,
            guards: SmallVec::new(),
        };
        lock.guards
            .extend(sorted.into_iter().map(|i| (i, self.write_shard(i))));
        lock
    }

    /// Starts watching `key` (`WATCH`): registers it in its shard, so its
    /// writes are counted from now, and notes the count and whether the
    /// key is live. Every mark must be given back with
    /// [`Store::unwatch`] or [`MultiLock::unwatch`].
    pub fn watch(&self, key: &[u8], now: Nanos) -> WatchMark {
        let hash = self.hash(key);
        let mut shard = self.write_shard(self.shard_index(hash));
        WatchMark {
            hash,
            version: shard.watches.add(hash),
            live: shard.with(hash, key, |e| !e.is_expired(now)) == Some(true),
        }
    }

    /// Stops watching: gives back marks taken by [`Store::watch`].
    pub fn unwatch<'m>(&self, marks: impl IntoIterator<Item = &'m WatchMark>) {
        for m in marks {
            self.write_shard(self.shard_index(m.hash))
                .watches
                .remove(m.hash);
        }
    }

    /// Number of keys, counting expired ones not yet removed (as Redis's
    /// `DBSIZE` does).
    pub fn len(&self) -> usize {
        Keyspace::Store(self).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn counts(&self) -> Counts {
        Keyspace::Store(self).counts()
    }

    /// Removes every key; returns how many there were.
    pub fn clear(&self) -> usize {
        self.prefetching.store(false, Ordering::Relaxed);
        if self.effects.emitting() {
            // Every shard at once, so no write lands between the FLUSH in
            // the log and the clearing of its shard.
            return Keyspace::Held(&self.lock_all().held()).clear();
        }
        (0..self.shards.len())
            .map(|i| {
                let mut s = self.write_shard(i);
                let n = s.len();
                s.clear(self);
                n
            })
            .sum()
    }

    /// [`Store::for_each_in_shard`] for a replica's full copy: returns the
    /// effects offset at the moment of the copy. Every effect on these
    /// keys after it is logged after that offset (effects are logged under
    /// the shard's write lock; the copy holds its read lock), so the copy
    /// followed by the stream from there converges.
    pub fn for_each_in_shard_at(&self, i: usize, now: Nanos, f: impl FnMut(&[u8], &Entry)) -> u64 {
        let shard = self.read_shard(i);
        let at = self.effects.offset();
        shard.for_each_live(now, f);
        at
    }

    /// Calls `f` for every live key of shard `i` (SCAN walks shard by shard,
    /// so its cursor is a shard index and stays valid across resizes).
    pub fn for_each_in_shard(&self, i: usize, now: Nanos, f: impl FnMut(&[u8], &Entry)) {
        self.read_shard(i).for_each_live(now, f);
    }

    /// Removes the expired keys of shard `i` and gives back memory once
    /// keys have gone, however they went (expiry, `DEL`, eviction).
    /// Returns how many were removed.
    pub fn sweep_shard(&self, i: usize, now: Nanos) -> usize {
        let mut shard = self.write_shard(i);
        let removed = if shard.volatile == 0 || !entry::passed(shard.next_expiry_ms, now) {
            0
        } else {
            shard.remove_expired(self, now)
        };
        self.expired.fetch_add(removed as u64, Ordering::Relaxed);
        shard.reclaim(&self.hasher);
        removed
    }

    /// Approximate bytes held by the keyspace: indexes, records, and heap
    /// bytes of long keys and values.
    pub fn memory_estimate(&self) -> usize {
        (0..self.shards.len())
            .map(|i| {
                let s = self.read_shard(i);
                s.allocation_size() + s.heap_size()
            })
            .sum()
    }
}

/// What `WATCH` took note of for one key (see [`Store::watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchMark {
    hash: u64,
    version: u64,
    live: bool,
}

/// Shard indices of a multi-key lock. Inline up to [`INLINE_SHARDS`]:
/// a script or transaction on a handful of keys takes its locks, and
/// reaches further shards, without touching the allocator. (Its `realloc` takes glibc's arena lock every time, and
/// with one arena for every worker, `alloc::one_arena`, two workers
/// running scripts waited on it: 63% of the server's futex calls.)
type Shards = SmallVec<[usize; INLINE_SHARDS]>;

/// How many shards a multi-key lock holds without allocating: the keys of
/// a typical script (a limiter's key or two, and the window keys it
/// builds) or transaction.
const INLINE_SHARDS: usize = 8;

/// Write locks on several shards, taken in ascending order.
pub struct MultiLock<'a> {
    store: &'a Store,
    guards: SmallVec<[(usize, RwLockWriteGuard<'a, Shard>); INLINE_SHARDS]>,
}

/// Where the shard `hash` maps to sits among `held` (sorted by shard).
///
/// # Panics
/// If that shard is not held: a bug in the caller, which must lock every
/// key it touches.
fn held_pos<T>(store: &Store, held: &[(usize, T)], hash: u64) -> usize {
    find_held(held, store.shard_index(hash)).expect("a key whose shard is not locked")
}

/// Where shard `index` sits among `held` (sorted by shard), or where it
/// would go.
fn find_held<T>(held: &[(usize, T)], index: usize) -> Result<usize, usize> {
    held.binary_search_by_key(&index, |(i, _)| *i)
}

impl MultiLock<'_> {
    /// Whether `key` was written, deleted or expired since `mark` was
    /// taken.
    pub fn touched_since(&self, key: &[u8], mark: &WatchMark, now: Nanos) -> bool {
        let shard = &self.guards[held_pos(self.store, &self.guards, mark.hash)].1;
        shard.watches.get(mark.hash).map(|w| w.version) != Some(mark.version)
            || (mark.live && shard.with(mark.hash, key, |e| e.is_expired(now)) != Some(false))
    }

    /// [`Store::unwatch`], for marks whose shards this guard holds.
    pub fn unwatch<'m>(&mut self, marks: impl IntoIterator<Item = &'m WatchMark>) {
        for m in marks {
            let pos = held_pos(self.store, &self.guards, m.hash);
            self.guards[pos].1.watches.remove(m.hash);
        }
    }

    /// Whether the shard `key` maps to is held.
    pub fn holds(&self, key: &[u8]) -> bool {
        find_held(&self.guards, self.store.shard_of(key)).is_ok()
    }

    /// Whether every shard is held.
    pub fn holds_all(&self) -> bool {
        self.guards.len() == self.store.shards.len()
    }

    /// The shards held, ascending.
    pub fn shards(&self) -> impl Iterator<Item = usize> + '_ {
        self.guards.iter().map(|(i, _)| *i)
    }

    /// The store the shards are of.
    pub fn store(&self) -> &Store {
        self.store
    }

    /// Takes the lock of `key`'s shard too, if that cannot deadlock: it
    /// waits for a shard above every shard held (all multi-shard locking
    /// goes in ascending order, so a wait for a higher shard closes no
    /// cycle), and only tries, without waiting, for one below. `false`:
    /// the shard below is busy; the caller starts again holding it in
    /// order, or waits with [`MultiLock::try_lock_more`].
    pub fn lock_more(&mut self, key: &[u8]) -> bool {
        let index = self.store.shard_of(key);
        let Err(pos) = find_held(&self.guards, index) else {
            return true;
        };
        let guard = if pos == self.guards.len() {
            Some(self.store.write_shard(index))
        } else {
            self.store.shards[index].0.try_write()
        };
        match guard {
            Some(guard) => {
                self.guards.insert(pos, (index, guard));
                true
            }
            None => false,
        }
    }

    /// Takes the lock of `key`'s shard too, if it can within `patience`:
    /// for a script that reaches a key it did not declare after it has
    /// written. Waiting without a bound could deadlock (another holder may
    /// be waiting, in ascending order, for a shard this guard holds), so
    /// the wait is bounded and a `false` is the caller's to handle.
    pub fn try_lock_more(&mut self, key: &[u8], patience: std::time::Duration) -> bool {
        let index = self.store.shard_of(key);
        let Err(pos) = find_held(&self.guards, index) else {
            return true;
        };
        match self.store.shards[index].0.try_write_for(patience) {
            Some(guard) => {
                self.guards.insert(pos, (index, guard));
                true
            }
            None => false,
        }
    }

    /// Lends the locked shards to the commands of a transaction, one
    /// after another, through [`Keyspace::Held`].
    pub fn held(&mut self) -> HeldShards<'_> {
        HeldShards {
            store: self.store,
            shards: self
                .guards
                .iter_mut()
                .map(|(i, g)| (*i, RefCell::new(&mut **g)))
                .collect(),
        }
    }
}

/// Shards a transaction holds, lent to its commands by shared reference
/// (each shard behind a `RefCell`), so every command of the queue can be
/// handed the same view in turn.
pub struct HeldShards<'a> {
    store: &'a Store,
    shards: Vec<(usize, RefCell<&'a mut Shard>)>,
}

impl HeldShards<'_> {
    /// Lends the same shards again, for the length of `f`: a script that
    /// runs inside a transaction hands them on to its commands. The second
    /// argument only bounds the loan by `'env` (what `f` borrows outlives
    /// it), as `std::thread::scope` does.
    pub fn relend<'env, R>(
        &self,
        f: impl for<'x> FnOnce(&'x HeldShards<'x>, std::marker::PhantomData<&'x &'env ()>) -> R,
    ) -> R {
        let mut guards: Vec<_> = self.shards.iter().map(|(_, s)| s.borrow_mut()).collect();
        let inner = HeldShards {
            store: self.store,
            shards: self
                .shards
                .iter()
                .zip(guards.iter_mut())
                .map(|((i, _), g)| (*i, RefCell::new(&mut ***g)))
                .collect(),
        };
        f(&inner, std::marker::PhantomData)
    }

    /// Whether the shard `key` maps to is held.
    pub fn holds(&self, key: &[u8]) -> bool {
        find_held(&self.shards, self.store.shard_of(key)).is_ok()
    }

    /// Whether every shard is held, so whole-keyspace reads are exact.
    pub fn holds_all(&self) -> bool {
        self.shards.len() == self.store.shards.len()
    }
}

/// How a command reaches the keyspace: through the store, each call
/// locking its shard, or through shards a transaction already holds. EXEC
/// locks every shard its commands touch before the first one runs, so no
/// other client's command interleaves with them; they must then not lock
/// again (the locks are not re-entrant), so every command reaches the
/// keyspace through this view, never through the store directly.
#[derive(Clone, Copy)]
pub enum Keyspace<'a> {
    Store(&'a Store),
    Held(&'a HeldShards<'a>),
}

/// The shards a multi-key command or a script works under: its own, or
/// a transaction's.
pub enum Locked<'a> {
    Own(MultiLock<'a>),
    Held(&'a HeldShards<'a>),
}

impl Locked<'_> {
    /// Whether the shard `key` maps to is held.
    pub fn holds(&self, key: &[u8]) -> bool {
        match self {
            Locked::Own(l) => l.holds(key),
            Locked::Held(h) => h.holds(key),
        }
    }

    /// Whether every shard is held.
    pub fn holds_all(&self) -> bool {
        match self {
            Locked::Own(l) => l.holds_all(),
            Locked::Held(h) => h.holds_all(),
        }
    }
}

impl<'a> Keyspace<'a> {
    /// The shards of `keys`, locked together (see [`Store::lock_many`]).
    pub fn lock_many<'k>(self, keys: impl IntoIterator<Item = &'k [u8]>) -> Locked<'a> {
        match self {
            Keyspace::Store(s) => Locked::Own(s.lock_many(keys)),
            Keyspace::Held(l) => Locked::Held(l),
        }
    }

    /// Runs `f` on every shard, each read-locked in turn or held.
    fn fold_shards<T>(self, init: T, mut f: impl FnMut(T, &Shard) -> T) -> T {
        match self {
            Keyspace::Store(s) => (0..s.shards.len()).fold(init, |acc, i| f(acc, &s.read_shard(i))),
            Keyspace::Held(h) => {
                debug_assert!(h.holds_all(), "a whole-keyspace read in a partial lock");
                h.shards
                    .iter()
                    .fold(init, |acc, (_, s)| f(acc, &s.borrow()))
            }
        }
    }

    /// See [`Store::len`].
    pub fn len(self) -> usize {
        self.fold_shards(0, |n, s| n + s.len())
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// See [`Store::counts`].
    pub fn counts(self) -> Counts {
        self.fold_shards(Counts::default(), |acc, s| Counts {
            keys: acc.keys + s.len(),
            volatile: acc.volatile + s.volatile,
        })
    }

    /// See [`Store::clear`].
    pub fn clear(self) -> usize {
        match self {
            Keyspace::Store(s) => s.clear(),
            Keyspace::Held(h) => {
                // FLUSHALL in a transaction holds every shard.
                if h.store.effects.emitting() {
                    h.store.effects.put_bare(effects::FLUSH);
                }
                h.shards.iter().fold(0, |n, (_, s)| {
                    let mut s = s.borrow_mut();
                    let len = s.len();
                    s.clear(h.store);
                    n + len
                })
            }
        }
    }

    pub fn shard_count(self) -> usize {
        match self {
            Keyspace::Store(s) => s.shard_count(),
            Keyspace::Held(h) => h.store.shard_count(),
        }
    }

    /// See [`Store::for_each_in_shard`].
    pub fn for_each_in_shard(self, i: usize, now: Nanos, f: impl FnMut(&[u8], &Entry)) {
        match self {
            Keyspace::Store(s) => s.for_each_in_shard(i, now, f),
            Keyspace::Held(h) => {
                let pos = find_held(&h.shards, i).expect("a whole-keyspace read in a partial lock");
                h.shards[pos].1.borrow().for_each_live(now, f);
            }
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
        store.shards.iter().map(|s| s.0.read().table_bytes()).sum()
    }

    #[test]
    fn sharded_by_slot_finds_a_slots_keys_in_its_one_shard() {
        let store = Store::sharded_by_slot(DEFAULT_SHARDS);
        let plain = Store::new(DEFAULT_SHARDS);
        let now = Nanos(1_000 * Nanos::PER_SEC);
        let mut by_slot: std::collections::HashMap<u16, Vec<Vec<u8>>> = Default::default();
        for i in 0..20_000 {
            // Hash tags put several keys in one slot.
            let k = format!("{{user{}}}:k{i}", i % 3_000).into_bytes();
            let slot = slot::key_slot(&k);
            assert_eq!(store.shard_of(&k), usize::from(slot) & (DEFAULT_SHARDS - 1));
            store.update(&k, now, |e| *e = Some(s("v")));
            plain.update(&k, now, |e| *e = Some(s("v")));
            by_slot.entry(slot).or_default().push(k);
        }
        assert_eq!(store.len(), 20_000, "DBSIZE counts every shard alike");
        for (&slot, keys) in by_slot.iter().take(200) {
            let mut got = store.keys_in_slot(slot, usize::MAX, now);
            got.sort();
            let mut want = keys.clone();
            want.sort();
            assert_eq!(got, want, "slot {slot}");
            assert_eq!(store.count_in_slot(slot, now), keys.len());
            // Unsharded by slot the answers are the same, from every shard.
            assert_eq!(plain.count_in_slot(slot, now), keys.len());
            assert_eq!(store.keys_in_slot(slot, 2, now).len(), keys.len().min(2));
        }
        let empty = (0..slot::SLOTS).find(|s| !by_slot.contains_key(s)).unwrap();
        assert!(store.keys_in_slot(empty, 10, now).is_empty());
        assert_eq!(store.count_in_slot(empty, now), 0);
    }

    #[test]
    fn a_slots_expired_keys_are_neither_listed_nor_counted() {
        let store = Store::sharded_by_slot(DEFAULT_SHARDS);
        let t = Nanos(1_000 * Nanos::PER_SEC);
        let at = Nanos(2_000 * Nanos::PER_SEC);
        store.update(b"{a}1", t, |e| *e = Some(s("v")));
        store.update(b"{a}2", t, |e| {
            *e = Some(Entry::with_expiry(s("v").value, Some(at)))
        });
        let slot = slot::key_slot(b"a");
        assert_eq!(store.count_in_slot(slot, t), 2);
        assert_eq!(store.count_in_slot(slot, at), 1);
        assert_eq!(store.keys_in_slot(slot, 10, at), vec![b"{a}1".to_vec()]);
    }

    /// WATCH's marks are the store's hash, slot bits and all: expiry and
    /// FLUSHALL, which hash keys again inside the shard, still touch them.
    #[test]
    fn watch_sees_expiry_and_flushall_when_sharded_by_slot() {
        let store = Store::sharded_by_slot(DEFAULT_SHARDS);
        let t = Nanos(1_000_000);
        let touched = |change: &dyn Fn()| {
            store.update(b"w", t, |e| {
                *e = Some(Entry::with_expiry(s("v").value, Some(Nanos(5_000_000))))
            });
            let mark = store.watch(b"w", t);
            change();
            // Back as it was: only the mark's version tells.
            store.update(b"w", t, |e| {
                *e = Some(Entry::with_expiry(s("v").value, Some(Nanos(5_000_000))))
            });
            let mut lock = store.lock_many([&b"w"[..]]);
            let hit = lock.touched_since(b"w", &mark, t);
            lock.unwatch([&mark]);
            hit
        };
        assert!(touched(&|| {
            store.clear();
        }));
        assert!(touched(&|| {
            store.sweep_shard(store.shard_of(b"w"), Nanos(5_000_000));
        }));
        assert!(!touched(
            &|| store.update(b"other", t, |e| *e = Some(s("x")))
        ));
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

    /// A window limiter entry as the command layer writes it.
    fn window_entry(limit: u64, start_s: u64, curr: u64) -> Entry {
        use crate::limiter::{params_secs, window};
        let p = params_secs(limit, 10);
        let state = window::State {
            start: start_s * Nanos::PER_SEC,
            prev: 0,
            curr,
        };
        let at = state.expires_at(&p);
        Entry::with_expiry(
            Value::Window(entry::Stored { params: p, state }),
            Some(Nanos(at)),
        )
    }

    /// A `log` key's entry holding `n` admissions up to `now_s` (a ring on
    /// the heap from two on), each key's own.
    fn log_entry(n: u64, now_s: u64) -> Entry {
        use crate::limiter::{log, params_secs};
        let p = params_secs(1_000, 60);
        let mut state = log::State::default();
        for t in 0..n {
            log::decide(&mut state, &p, (now_s - 30) * Nanos::PER_SEC + t * 1_000, 1);
        }
        let at = state.expires_at(&p);
        Entry::with_expiry(
            Value::Log(entry::Stored { params: p, state }),
            Some(Nanos(at)),
        )
    }

    /// A lease key's entry: `n` leases lapsing after `now_s`.
    fn lease_entry(n: u64, now_s: u64) -> Entry {
        use crate::limiter::lease::{Lease, Leases};
        let leases = Leases::from_leases(
            (0..n).map(|i| Lease::new([i as u8; 16], (now_s + 60 + i) * Nanos::PER_SEC, 1)),
            now_s * Nanos::PER_SEC,
        );
        let at = leases.expires_at();
        Entry::with_expiry(
            Value::Lease(entry::LeaseKey { limit: 100, leases }),
            Some(Nanos(at)),
        )
    }

    /// A key of `kind` at `now`, its state `i`'s own.
    fn limiter_entry(kind: record::Kind, i: u64, now: Nanos) -> Entry {
        use crate::limiter::lease::{Lease, Leases};
        use crate::limiter::params_secs;
        let p = params_secs(100, 60);
        if let Some(algo) = kind.algorithm() {
            // Charged at a moment of its own, so each key's state is.
            let spec = crate::limiter::LimitSpec {
                algo,
                params: p,
                block: None,
            };
            let mut slot = None;
            let at = Nanos(now.0 - i * 1_000);
            limit::allow(&mut slot, &spec, at, 1 + i % 3, usize::MAX).unwrap();
            return slot.expect("admitted");
        }
        let lease = Lease::new([7; 16], now.0 + (60 + i) * Nanos::PER_SEC, 1);
        let leases = Leases::from_leases([lease], now.0);
        let at = leases.expires_at();
        let value = Value::Lease(entry::LeaseKey { limit: 5, leases });
        Entry::with_expiry(value, Some(Nanos(at)))
    }

    /// Every layout in one shard at once, 1,440 (six kinds, 240 key
    /// classes), past the 1,024 slab numbers a handle holds: the keys past
    /// them are stored whole, every key reads back, and a deleted one's
    /// slab number is taken by the next new layout.
    #[test]
    fn more_layouts_than_slab_numbers_go_whole() {
        let store = Store::new(1);
        let now = Nanos(1_000 * Nanos::PER_SEC);
        let lengths: Vec<usize> = (1..=record::KEY_MAX)
            .filter(|&n| n <= record::EXACT_MAX || (n - record::EXACT_MAX) % record::STEP == 1)
            .collect();
        assert_eq!(lengths.len(), record::KEY_CLASSES);
        let keys: Vec<(Vec<u8>, Entry)> = record::Kind::ALL
            .iter()
            .enumerate()
            .flat_map(|(k, &kind)| {
                lengths.iter().map(move |&n| {
                    let mut key = vec![b'a' + k as u8; n];
                    key[0] = b'0' + k as u8;
                    (key, limiter_entry(kind, n as u64, now))
                })
            })
            .collect();
        for (k, e) in &keys {
            store.update(k, now, |slot| *slot = Some(e.clone()));
        }
        let whole = store.read_shard(0).general_len();
        assert_eq!(whole, keys.len() - 1_024, "{} keys", keys.len());
        for (k, e) in &keys {
            assert_eq!(store.get(k, now, |v| v.clone()).as_ref(), Some(e));
        }
        // Empty one slab (the first layout's only key) and sweep: a new
        // layout's key is compact again.
        assert!(store.remove(&keys[0].0, now));
        store.sweep_shard(0, now);
        let (k, e) = (b"a-new-key".to_vec(), window_entry(9, 1_000, 2));
        let (kl, le) = (&keys[keys.len() - 1].0, &keys[keys.len() - 1].1);
        store.update(kl, now, |slot| *slot = None);
        store.update(kl, now, |slot| *slot = Some(le.clone()));
        store.update(&k, now, |slot| *slot = Some(e.clone()));
        assert_eq!(store.get(&k, now, |v| v.clone()), Some(e));
        assert_eq!(store.get(kl, now, |v| v.clone()).as_ref(), Some(le));
        assert_eq!(store.read_shard(0).general_len(), whole - 1);
    }

    /// A slab holds 2^21 records in a shard (the handle's index bits): the
    /// next key of its layout is stored whole and reads back the same, and
    /// once a slot is freed a new key takes it compactly again.
    #[test]
    fn a_full_slab_sends_keys_whole_and_takes_them_back_when_freed() {
        let store = Store::new(1);
        let now = Nanos(1_000 * Nanos::PER_SEC);
        let full = 1usize << 21;
        let key = |i: usize| format!("{i:08}").into_bytes();
        let value = |i: usize| window_entry(1_000, 1_000, 1 + i as u64 % 7);
        for i in 0..full + 3 {
            store.update(&key(i), now, |e| *e = Some(value(i)));
        }
        let general = || store.read_shard(0).general_len();
        assert_eq!(general(), 3, "the three keys past 2^21");
        for i in [0, full / 2, full - 1, full, full + 2] {
            assert_eq!(
                store.get(&key(i), now, |e| e.clone()),
                Some(value(i)),
                "{i}"
            );
        }
        for i in 0..2 {
            assert!(store.remove(&key(i), now));
        }
        for i in full + 3..full + 5 {
            store.update(&key(i), now, |e| *e = Some(value(i)));
            assert_eq!(store.get(&key(i), now, |e| e.clone()), Some(value(i)));
        }
        assert_eq!(general(), 3, "the freed slots were taken");
        assert_eq!(store.len(), full + 3);
    }

    #[test]
    fn sweeping_compacts_records_and_keeps_every_live_key() {
        let store = Store::new(1);
        let now = Nanos(1_000 * Nanos::PER_SEC);
        let key = |i: u32| format!("k{i}").into_bytes();
        // Compact (window) and general (string, long-key window) records,
        // several parameter ids, and logs and leases, whose states live in
        // arenas of their own that compact too (each state its key's own,
        // so a record repointed to another key's slot would show).
        let value = |i: u32| match (i + i / 10) % 5 {
            0 => s(&format!("v{i}")),
            1 => log_entry(1 + i as u64 % 40, 1_000),
            2 => lease_entry(1 + i as u64 % 9, 1_000),
            _ => window_entry(1_000 + (i % 5) as u64, 1_000, i as u64),
        };
        // Keys of every length from 17 to 1,116 bytes: exact classes,
        // classes 8 bytes apart (some keys ending in zero bytes, which
        // the padding is), and keys too long for any (general records).
        let long = |i: u32| {
            let mut k = format!("a-key-longer-than-sixteen-bytes-{i}").into_bytes();
            let fill = if i.is_multiple_of(2) { 0 } else { b'-' };
            k.resize(k.len().max(17 + i as usize % 1_100), fill);
            k
        };
        for i in 0..6_000 {
            store.update(&key(i), now, |e| *e = Some(value(i)));
            store.update(&long(i), now, |e| *e = Some(window_entry(9, 1_000, 1)));
        }
        let full = table_bytes(&store);
        for i in 0..6_000 {
            if i % 10 != 0 {
                assert!(store.remove(&key(i), now));
                assert!(store.remove(&long(i), now));
            }
        }
        store.sweep_shard(0, now);
        assert!(
            table_bytes(&store) < full / 4,
            "{} of {full}",
            table_bytes(&store)
        );
        assert_eq!(store.len(), 1_200);
        for i in (0..6_000).step_by(10) {
            assert_eq!(store.get(&key(i), now, |e| e.clone()), Some(value(i)));
            assert_eq!(
                store.get(&long(i), now, |e| e.clone()),
                Some(window_entry(9, 1_000, 1))
            );
        }
        // The compacted shard takes writes as before, new key lengths
        // among them (in the slabs emptied ones left), and every key kept
        // reads back.
        store.update(b"new", now, |e| *e = Some(window_entry(3, 1_000, 2)));
        assert_eq!(
            store.get(b"new", now, |e| e.clone()),
            Some(window_entry(3, 1_000, 2))
        );
        let newer = |i: u32| vec![b'n' + (i % 7) as u8; 20 + i as usize % 600];
        for i in 0..700 {
            store.update(&newer(i), now, |e| {
                *e = Some(window_entry(4, 1_000, i as u64))
            });
        }
        for i in 0..700 {
            let want = window_entry(4, 1_000, i as u64);
            assert_eq!(store.get(&newer(i), now, |e| e.clone()), Some(want));
        }
        for i in (0..6_000).step_by(10) {
            assert_eq!(store.get(&key(i), now, |e| e.clone()), Some(value(i)));
            assert_eq!(
                store.get(&long(i), now, |e| e.clone()),
                Some(window_entry(9, 1_000, 1))
            );
        }
    }

    /// A limiter key of any length up to 1,024 bytes costs its own length,
    /// its record's fixed bytes (2 and the state, or 2 and the slot of an
    /// owned state, with the state's slot and heap) and the index's share,
    /// with no step: keys over 16 bytes were general records with a heap
    /// block for the key (145 bytes a 36-byte window key, against 62 now;
    /// a log or lease key over 16 bytes, or any lease key, was one too).
    #[test]
    fn a_limiter_key_costs_its_length_and_no_more() {
        use crate::limiter::log;
        let now = Nanos(1_000 * Nanos::PER_SEC);
        let limiter = |kind, i| limiter_entry(kind, i, now);
        // An owned state's slot, and its heap block (a lease's vector).
        let owned = |kind: record::Kind| {
            let slot = match kind {
                record::Kind::Log => std::mem::size_of::<log::State>(),
                record::Kind::Lease => std::mem::size_of::<entry::LeaseKey>(),
                _ => 0,
            };
            slot + limiter(kind, 0).value.heap_size()
        };
        const KEYS: u64 = 4_000;
        for kind in record::Kind::ALL {
            for len in [16, 17, 19, 36, 64, 128, 129, 300, 1024] {
                let store = Store::new(1);
                let key = |i: u64| {
                    let mut k = format!("{i:0len$}").into_bytes();
                    k[0] = b'k';
                    k
                };
                for i in 0..KEYS {
                    store.update(&key(i), now, |e| *e = Some(limiter(kind, i)));
                }
                for i in 0..KEYS {
                    assert_eq!(
                        store.get(&key(i), now, |e| e.clone()),
                        Some(limiter(kind, i))
                    );
                }
                let per_key = store.memory_estimate() as f64 / KEYS as f64;
                // The index (8.2 bytes a key at 4,000 keys in 512 groups),
                // a chunk's slack, a long key's padding.
                let most = 2 + kind.state_len() + len + 12 + 7 * (len > 128) as usize + owned(kind);
                assert!(
                    per_key <= most as f64,
                    "{kind:?}, {len}-byte keys: {per_key:.1} bytes a key, over {most}"
                );
            }
        }
    }

    /// One key of each length and algorithm (a slab each, up to 128
    /// bytes): a slab's first key costs its record and the slab's own
    /// bookkeeping, not a chunk of 4 KiB (which, over 960 layouts and 256
    /// shards, a client could have pinned a gigabyte with).
    #[test]
    fn a_key_of_every_length_costs_no_chunk_of_its_own() {
        let store = Store::new(1);
        let now = Nanos(1_000 * Nanos::PER_SEC);
        let mut records = 0;
        for len in 1..=record::KEY_MAX {
            let key = vec![b'w'; len];
            store.update(&key, now, |e| *e = Some(window_entry(100, 1_000, 3)));
            records += 2 + record::Kind::Window.state_len() + len;
        }
        let over = store.memory_estimate() - records;
        assert!(
            over <= record::KEY_MAX * 120,
            "{over} bytes over the records' {records}, for {} keys",
            record::KEY_MAX
        );
    }

    #[test]
    fn a_limiter_key_moves_between_classes_and_back() {
        let store = Store::new(1);
        let now = Nanos(1_000 * Nanos::PER_SEC);
        let e = window_entry(10, 1_000, 4);
        store.update(b"k", now, |slot| *slot = Some(e.clone()));
        // EXPIRE: a TTL its state does not imply is kept exactly.
        let later = e.expiry_ms().unwrap() + 60_000;
        store.update(b"k", now, |slot| {
            slot.as_mut().unwrap().set_expiry_ms(Some(later))
        });
        assert_eq!(store.get(b"k", now, |e| e.expiry_ms()), Some(Some(later)));
        // PERSIST, then back to the derived TTL.
        store.update(b"k", now, |slot| slot.as_mut().unwrap().set_expiry(None));
        assert_eq!(store.get(b"k", now, |e| e.expiry_ms()), Some(None));
        assert_eq!(store.counts().volatile, 0);
        store.update(b"k", now, |slot| *slot = Some(e.clone()));
        assert_eq!(store.get(b"k", now, |e| e.clone()), Some(e));
        assert_eq!(store.counts().volatile, 1);
        // Overwritten by a string, then deleted.
        store.update(b"k", now, |slot| *slot = Some(s("x")));
        assert_eq!(store.get(b"k", now, |e| e.clone()), Some(s("x")));
        assert!(store.remove(b"k", now));
        assert!(store.is_empty());
        assert_eq!(store.counts().volatile, 0);
    }

    /// A limiter key charged again is rewritten in place, under new
    /// parameters too; with every parameter id of its shard taken, new
    /// ones send it whole, and known ones bring it back.
    #[test]
    fn a_rewritten_record_follows_its_parameters() {
        let store = Store::new(1);
        let now = Nanos(1_000 * Nanos::PER_SEC);
        let ids = 1u64 << record::PID_BITS;
        for limit in 1..=ids {
            let key = format!("p{limit}").into_bytes();
            store.update(&key, now, |e| *e = Some(window_entry(limit, 1_000, 1)));
        }
        let general = || store.read_shard(0).general_len();
        assert_eq!(general(), 0, "every id taken, none over");
        for e in [window_entry(1, 1_000, 1), window_entry(2, 1_000, 2)] {
            store.update(b"k", now, |slot| *slot = Some(e.clone()));
            assert_eq!(store.get(b"k", now, Entry::clone), Some(e));
            assert_eq!(general(), 0);
        }
        let new = window_entry(ids + 1, 1_000, 3);
        store.update(b"k", now, |slot| *slot = Some(new.clone()));
        assert_eq!(store.get(b"k", now, Entry::clone), Some(new));
        assert_eq!(general(), 1, "no id for its parameters");
        let back = window_entry(3, 1_000, 4);
        store.update(b"k", now, |slot| *slot = Some(back.clone()));
        assert_eq!(store.get(b"k", now, Entry::clone), Some(back));
        assert_eq!(general(), 0);
    }

    #[test]
    fn growth_for_sees_a_table_about_to_double() {
        let store = Store::new(1);
        let now = Nanos(1);
        assert!(store.growth_for(b"first") > 0, "an empty table allocates");
        store.update(b"first", now, |e| *e = Some(s("v")));
        // Room in the index: only what new parameters would take.
        let params = super::params::ParamTable::default().growth();
        assert!(params > 0);
        assert_eq!(store.growth_for(b"second"), params);
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
    fn prefetching_starts_at_a_shards_share_of_the_threshold_and_ends_with_flushall() {
        // Two shards: each reaches its share at half the threshold's keys.
        let store = Store::new(2);
        let now = Nanos(0);
        let mut i = 0;
        while !store.prefetching() {
            store.update(format!("k{i}").as_bytes(), now, |e| *e = Some(s("v")));
            i += 1;
            assert!(i <= PREFETCH_FROM_KEYS, "not set after {i} keys");
        }
        assert!((PREFETCH_FROM_KEYS / 2..PREFETCH_FROM_KEYS).contains(&i));
        // A hint changes nothing, for keys present, absent or repeated.
        let keys: Vec<Vec<u8>> = (0..PREFETCH_MAX + 4)
            .map(|j| format!("k{}", j * 7 % (i + 20)).into_bytes())
            .collect();
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let len = store.len();
        store.prefetch(&keys);
        assert_eq!(store.len(), len);
        assert_eq!(store.get(b"k0", now, |e| e.clone()), Some(s("v")));
        store.clear();
        assert!(!store.prefetching());
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

    /// A watched key aborts on a write that changes it, on its expiry and
    /// on FLUSHALL if it existed; not on a write to another key, a write
    /// that leaves it as it was, or a read.
    #[test]
    fn watch_sees_changes_to_its_key_only() {
        let store = Store::new(1);
        let t = Nanos(1_000_000);
        let put = |k: &[u8], v: &str| store.update(k, t, |e| *e = Some(s(v)));
        let touched = |key: &[u8], change: &dyn Fn()| {
            let mark = store.watch(key, t);
            change();
            let mut lock = store.lock_many([key]);
            let hit = lock.touched_since(key, &mark, t);
            lock.unwatch([&mark]);
            hit
        };
        put(b"w", "1");
        assert!(touched(b"w", &|| put(b"w", "2")));
        assert!(!touched(b"w", &|| put(b"other", "x")));
        assert!(!touched(b"w", &|| put(b"w", "2")), "same value");
        assert!(!touched(b"w", &|| {
            store.get(b"w", t, |_| ());
        }));
        assert!(touched(b"w", &|| {
            store.remove(b"w", t);
        }));
        assert!(
            !touched(b"w", &|| {
                store.clear();
            }),
            "absent, and still absent"
        );
        put(b"w", "1");
        assert!(touched(b"w", &|| {
            store.clear();
        }));
        // Every mark was given back: nothing is tracked any more.
        assert!(store.shards[0].0.read().watches.is_empty());
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

    /// Keys of three distinct shards, by ascending shard.
    fn three_shards(store: &Store) -> [Vec<u8>; 3] {
        let mut by_shard = std::collections::BTreeMap::new();
        for i in 0.. {
            let k = format!("k{i}").into_bytes();
            by_shard.entry(store.shard_of(&k)).or_insert(k);
            if by_shard.len() == 3 {
                break;
            }
        }
        let mut keys = by_shard.into_values();
        std::array::from_fn(|_| keys.next().expect("three"))
    }

    #[test]
    fn lock_more_waits_only_upwards_and_tries_below() {
        let store = Store::new(16);
        let [low, mid, high] = three_shards(&store);
        let mut a = store.lock_many([&mid[..]]);
        // Above every shard held: taken (with nobody holding it, at once).
        assert!(a.lock_more(&high));
        assert!(a.holds(&high));
        // Below, while another lock holds it: refused, not waited for.
        let other = store.lock_many([&low[..]]);
        assert!(!a.lock_more(&low));
        assert!(!a.holds(&low));
        drop(other);
        // Below and free: taken.
        assert!(a.lock_more(&low));
        assert_eq!(a.shards().collect::<Vec<_>>(), {
            let mut v: Vec<usize> = [&low, &mid, &high]
                .iter()
                .map(|k| store.shard_of(k))
                .collect();
            v.sort_unstable();
            v
        });
        drop(a);
        // What a stopped script's rerun locks: its keys and the shards it
        // reached, in one ascending pass.
        let again = store.lock_many_and([&mid[..]], &[store.shard_of(&low), 10_000]);
        assert!(again.holds(&low) && again.holds(&mid) && !again.holds(&high));
    }
}
