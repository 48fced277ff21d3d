//! A key looked at and then written under one lock (a plan's peek and
//! its charge, `plan.rs`): hashed once ([`KeyHash`]), and found and
//! decoded once, the write starting from the place and entry the look
//! left ([`Found`]). Apart from `mod.rs`, whose types these extend.

use super::keys::{live_or_removed, KeyHash, Keys};
use super::shard::Found;
use super::watch::Touch;
use super::{Entry, HeldShards, Keyspace, Locked, MultiLock, Store};
use crate::clock::Nanos;

/// The verbs of a view that holds its shards between calls, so a look
/// can leave what it found for a write to start from: the shards a
/// command or transaction holds (`&mut MultiLock`, `&HeldShards`,
/// `&mut Locked`), never the store, whose calls each lock on their own.
pub trait HeldKeys: Keys {
    /// [`Keys::get`], leaving a compact record's place and decoded entry
    /// in `found`, for a write under these locks to start from
    /// ([`HeldKeys::update_known`]): a look and a write then find and
    /// decode the record once.
    #[inline]
    fn get_known<R>(
        mut self,
        key: &[u8],
        KeyHash(hash): KeyHash,
        now: Nanos,
        found: &mut Option<Found>,
        f: impl FnOnce(&Entry) -> R,
    ) -> Option<R> {
        let live = self.read(hash, |shard| {
            shard.with_known(hash, key, found, |e| (!e.is_expired(now)).then(|| f(e)))
        });
        if let Some(None) = live {
            *found = None;
        }
        live_or_removed(&mut self, hash, key, now, live)
    }

    /// [`Keys::update`] of a key [`HeldKeys::get_known`] left in `found`
    /// (taken here), and that nothing has written since under these
    /// locks: it is not found or decoded again.
    #[inline]
    fn update_known<R>(
        mut self,
        key: &[u8],
        KeyHash(hash): KeyHash,
        now: Nanos,
        found: &mut Option<Found>,
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        self.write(hash, |store, shard| {
            shard.update_known(store, hash, key, now, Touch::IfChanged, found, f)
        })
    }
}

impl HeldKeys for &mut MultiLock<'_> {}
impl HeldKeys for &HeldShards<'_> {}
impl HeldKeys for &mut Locked<'_> {}

impl Store {
    /// [`Store::lock_many`] for keys whose hashes [`Keys::hash`] gave.
    pub fn lock_hashed(&self, hashes: impl IntoIterator<Item = KeyHash>) -> MultiLock<'_> {
        self.lock_indices(hashes.into_iter().map(|h| self.shard_index(h.0)))
    }
}

impl<'a> Keyspace<'a> {
    /// [`Keyspace::lock_many`] for keys whose hashes [`Keys::hash`] gave.
    pub fn lock_hashed(self, hashes: impl IntoIterator<Item = KeyHash>) -> Locked<'a> {
        match self {
            Keyspace::Store(s) => Locked::Own(s.lock_hashed(hashes)),
            Keyspace::Held(l) => Locked::Held(l),
        }
    }
}
