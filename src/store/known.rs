//! A key looked at and then written under one lock (a plan's peek and
//! its charge, `plan.rs`): hashed once ([`KeyHash`]), and found and
//! decoded once, the write starting from the place and entry the look
//! left ([`Found`]). Apart from `mod.rs`, whose types these extend.

use super::shard::Found;
use super::watch::Touch;
use super::{held_pos, Entry, HeldShards, Keyspace, Locked, MultiLock, Shard, Shards, Store};
use crate::clock::Nanos;

/// A key's hash as the store computes it ([`Keyspace::hash`]): for a
/// command that reaches one key several times under one lock (a plan's
/// look and write), computed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(u64);

impl Store {
    /// [`Store::get_in`], leaving a compact record's place and entry in
    /// `found` too ([`Shard::with_known`]).
    fn get_known_in<R>(
        &self,
        shard: &mut Shard,
        hash: u64,
        key: &[u8],
        now: Nanos,
        found: &mut Option<Found>,
        f: impl FnOnce(&Entry) -> R,
    ) -> Option<R> {
        let live = shard.with_known(hash, key, found, |e| (!e.is_expired(now)).then(|| f(e)));
        if let Some(None) = live {
            *found = None;
        }
        self.live_or_removed(shard, hash, key, now, live)
    }

    /// [`Store::lock_many`] for keys whose hashes [`Keyspace::hash`] gave.
    pub fn lock_hashed(&self, hashes: impl IntoIterator<Item = KeyHash>) -> MultiLock<'_> {
        let mut wanted: Shards = hashes.into_iter().map(|h| self.shard_index(h.0)).collect();
        wanted.sort_unstable();
        wanted.dedup();
        self.lock_shards(wanted)
    }
}

impl MultiLock<'_> {
    /// [`MultiLock::get`], leaving a compact record's place and entry in
    /// `found` for [`MultiLock::update_known`].
    pub fn get_known<R>(
        &mut self,
        key: &[u8],
        KeyHash(hash): KeyHash,
        now: Nanos,
        found: &mut Option<Found>,
        f: impl FnOnce(&Entry) -> R,
    ) -> Option<R> {
        let pos = held_pos(self.store, &self.guards, hash);
        self.store
            .get_known_in(&mut self.guards[pos].1, hash, key, now, found, f)
    }

    /// [`MultiLock::update`] of a key [`MultiLock::get_known`] left in
    /// `found` (taken here), under this lock, unwritten since: it is not
    /// found or decoded again.
    pub fn update_known<R>(
        &mut self,
        key: &[u8],
        KeyHash(hash): KeyHash,
        now: Nanos,
        found: &mut Option<Found>,
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        let pos = held_pos(self.store, &self.guards, hash);
        let store = self.store;
        self.guards[pos]
            .1
            .update_known(store, hash, key, now, Touch::IfChanged, found, f)
    }
}

impl HeldShards<'_> {
    fn get_known<R>(
        &self,
        key: &[u8],
        KeyHash(hash): KeyHash,
        now: Nanos,
        found: &mut Option<Found>,
        f: impl FnOnce(&Entry) -> R,
    ) -> Option<R> {
        self.with_shard(hash, |shard| {
            self.store.get_known_in(shard, hash, key, now, found, f)
        })
    }

    fn update_known<R>(
        &self,
        key: &[u8],
        KeyHash(hash): KeyHash,
        now: Nanos,
        found: &mut Option<Found>,
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        let store = self.store;
        self.with_shard(hash, |shard| {
            shard.update_known(store, hash, key, now, Touch::IfChanged, found, f)
        })
    }
}

impl Locked<'_> {
    /// [`Locked::get`], leaving a compact record's place and decoded
    /// entry in `found`, for a write under these locks to start from
    /// ([`Locked::update_known`]): a look and a write then find and decode
    /// the record once.
    #[inline]
    pub fn get_known<R>(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        now: Nanos,
        found: &mut Option<Found>,
        f: impl FnOnce(&Entry) -> R,
    ) -> Option<R> {
        match self {
            Locked::Own(l) => l.get_known(key, hash, now, found, f),
            Locked::Held(h) => h.get_known(key, hash, now, found, f),
        }
    }

    /// [`Locked::update`] of a key [`Locked::get_known`] left in `found`
    /// (taken here), and that nothing has written since under these
    /// locks.
    #[inline]
    pub fn update_known<R>(
        &mut self,
        key: &[u8],
        hash: KeyHash,
        now: Nanos,
        found: &mut Option<Found>,
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        match self {
            Locked::Own(l) => l.update_known(key, hash, now, found, f),
            Locked::Held(h) => h.update_known(key, hash, now, found, f),
        }
    }
}

impl<'a> Keyspace<'a> {
    /// `key`'s hash, for [`Keyspace::lock_hashed`] and the calls of
    /// [`Locked`] that take one.
    #[inline]
    pub fn hash(self, key: &[u8]) -> KeyHash {
        KeyHash(match self {
            Keyspace::Store(s) => s.hash(key),
            Keyspace::Held(h) => h.store.hash(key),
        })
    }

    /// [`Keyspace::lock_many`] for keys whose hashes
    /// [`Keyspace::hash`] gave.
    pub fn lock_hashed(self, hashes: impl IntoIterator<Item = KeyHash>) -> Locked<'a> {
        match self {
            Keyspace::Store(s) => Locked::Own(s.lock_hashed(hashes)),
            Keyspace::Held(l) => Locked::Held(l),
        }
    }
}
