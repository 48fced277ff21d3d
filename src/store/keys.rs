//! The per-key verbs every view of the keyspace shares ([`Keys`]),
//! written once over the one thing the views differ in: how they reach
//! the shard that owns a key. The store locks it for each call; a
//! [`MultiLock`], a transaction's [`HeldShards`], a command's [`Locked`]
//! find it among the shards they hold; a [`Keyspace`] is either.

use super::limit::{self, LimitError};
use super::shard::Shard;
use super::watch::Touch;
use super::{held_pos, Entry, HeldShards, Keyspace, Locked, MultiLock, Store};
use crate::clock::Nanos;
use crate::limiter::{Decision, LimitSpec};

/// A key's hash as the store computes it ([`Keys::hash`]): for a
/// command that reaches one key several times under one lock (a plan's
/// look and write, [`super::known`]), computed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(pub(super) u64);

/// How a view reaches the shard that owns a key, the one thing the views
/// differ in; sealed (a private module's trait), so only the store's
/// views implement [`Keys`]. Its methods speak of the store's private
/// `Shard`, which no caller outside the store can name or reach: hence
/// the `private_bounds` allowed here and on the impls.
#[allow(private_bounds)]
mod reach {
    use super::{Shard, Store};

    pub trait Reach {
        /// The store whose keys these are (its hash, its counters).
        fn store(&self) -> &Store;
        /// Runs `f` on the shard `hash` maps to, for reading.
        fn read<R>(&mut self, hash: u64, f: impl FnOnce(&Shard) -> R) -> R;
        /// Runs `f` on the shard `hash` maps to, for writing.
        fn write<R>(&mut self, hash: u64, f: impl FnOnce(&Store, &mut Shard) -> R) -> R;
    }
}
use reach::Reach;

/// The verbs on one key, the same through every view of the keyspace:
/// the store (`&Store`), the shards a command or transaction holds
/// (`&mut MultiLock`, `&HeldShards`, `&mut Locked`) and the view a
/// command is handed (`Keyspace`). A view that holds its shards can do
/// more ([`HeldKeys`](super::known::HeldKeys)). Each verb takes the view
/// by value: a reference, reborrowed at each call, or the `Copy`
/// keyspace.
///
/// # Panics
/// Through a view that holds shards, for a key whose shard it does not
/// hold: a bug in the caller, which must lock every key it touches.
pub trait Keys: Reach + Sized {
    /// `key`'s hash, for [`Keyspace::lock_hashed`] and the calls of
    /// [`HeldKeys`](super::known::HeldKeys) that take one.
    #[inline]
    fn hash(self, key: &[u8]) -> KeyHash {
        KeyHash(self.store().hash(key))
    }

    /// Reads a live entry (the store under a shared lock). An expired
    /// entry reads as absent and, as in Redis, the read deletes it (the
    /// store takes its write lock only on that rare path).
    #[inline]
    fn get<R>(mut self, key: &[u8], now: Nanos, f: impl FnOnce(&Entry) -> R) -> Option<R> {
        let hash = self.store().hash(key);
        // A compact record is decoded for the closure: `f` runs inside.
        let live = self.read(hash, |shard| {
            shard.with(hash, key, |e| (!e.is_expired(now)).then(|| f(e)))
        });
        live_or_removed(&mut self, hash, key, now, live)
    }

    fn exists(self, key: &[u8], now: Nanos) -> bool {
        self.get(key, now, |_| ()).is_some()
    }

    /// Runs `f` on the key's live entry (`None` if absent or expired)
    /// under its shard's write lock: whatever `f` leaves is stored, and
    /// `None` deletes. Read-modify-write is atomic per key.
    #[inline]
    fn update<R>(self, key: &[u8], now: Nanos, f: impl FnOnce(&mut Option<Entry>) -> R) -> R {
        self.update_touching(key, now, Touch::IfChanged, f)
    }

    /// [`Keys::update`], counting for `WATCH` as `touch` says.
    #[inline]
    fn update_touching<R>(
        mut self,
        key: &[u8],
        now: Nanos,
        touch: Touch,
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        let hash = self.store().hash(key);
        self.write(hash, |store, shard| {
            shard.update(store, hash, key, now, touch, f)
        })
    }

    /// Deletes a key; true if a live one was there.
    fn remove(self, key: &[u8], now: Nanos) -> bool {
        self.update(key, now, |e| e.take().is_some())
    }

    /// `RL.ALLOW` on one key ([`limit::allow`]): decided where its compact
    /// record lies when it has one (`shard/in_place.rs`), else through
    /// [`Keys::update`], under the one lock; the same answer and the same
    /// key either way.
    #[inline]
    fn allow(
        mut self,
        key: &[u8],
        spec: &LimitSpec,
        now: Nanos,
        cost: u64,
        room: usize,
    ) -> Result<Decision, LimitError> {
        let hash = self.store().hash(key);
        self.write(hash, |store, shard| {
            match shard.allow_here(store, hash, key, spec, now, cost) {
                Some(d) => Ok(d),
                None => shard.update(store, hash, key, now, Touch::IfChanged, |slot| {
                    limit::allow(slot, spec, now, cost, room)
                }),
            }
        })
    }
}

impl<T: Reach> Keys for T {}

/// What a read found (`None` no key, `Some(None)` an expired one): the
/// answer for a live key; an expired key is removed, as a read in Redis
/// deletes what it finds expired.
#[inline]
pub(super) fn live_or_removed<R>(
    keys: &mut impl Reach,
    hash: u64,
    key: &[u8],
    now: Nanos,
    live: Option<Option<R>>,
) -> Option<R> {
    if let Some(None) = live {
        remove_expired(keys, hash, key, now);
    }
    live.flatten()
}

/// [`live_or_removed`]'s rare path, kept out of the way of its callers
/// (`RL.ALLOWMANY`'s look at each key is one).
#[cold]
fn remove_expired(keys: &mut impl Reach, hash: u64, key: &[u8], now: Nanos) {
    keys.write(hash, |store, shard| {
        shard.update(store, hash, key, now, Touch::IfChanged, |_| ())
    });
}

#[allow(private_bounds)]
impl Reach for &Store {
    fn store(&self) -> &Store {
        self
    }

    #[inline]
    fn read<R>(&mut self, hash: u64, f: impl FnOnce(&Shard) -> R) -> R {
        f(&self.read_shard(self.shard_index(hash)))
    }

    #[inline]
    fn write<R>(&mut self, hash: u64, f: impl FnOnce(&Store, &mut Shard) -> R) -> R {
        f(self, &mut self.write_shard(self.shard_index(hash)))
    }
}

impl Store {
    /// [`Keys::get`], callable without the trait in scope (so are
    /// [`Store::exists`], [`Store::update`] and [`Store::remove`]): the
    /// store's own API, for its embedders, tests and benchmarks.
    pub fn get<R>(&self, key: &[u8], now: Nanos, f: impl FnOnce(&Entry) -> R) -> Option<R> {
        Keys::get(self, key, now, f)
    }

    pub fn exists(&self, key: &[u8], now: Nanos) -> bool {
        Keys::exists(self, key, now)
    }

    pub fn update<R>(&self, key: &[u8], now: Nanos, f: impl FnOnce(&mut Option<Entry>) -> R) -> R {
        Keys::update(self, key, now, f)
    }

    pub fn remove(&self, key: &[u8], now: Nanos) -> bool {
        Keys::remove(self, key, now)
    }
}

impl MultiLock<'_> {
    /// [`Keys::update`], callable without the trait in scope.
    ///
    /// # Panics
    /// If `key` was not among the keys locked: a bug in the caller.
    pub fn update<R>(
        &mut self,
        key: &[u8],
        now: Nanos,
        f: impl FnOnce(&mut Option<Entry>) -> R,
    ) -> R {
        Keys::update(self, key, now, f)
    }

    /// The held shard `hash` maps to, with the store.
    #[inline]
    fn shard(&mut self, hash: u64) -> (&Store, &mut Shard) {
        let pos = held_pos(self.store, &self.guards, hash);
        (self.store, &mut self.guards[pos].1)
    }
}

#[allow(private_bounds)]
impl Reach for &mut MultiLock<'_> {
    fn store(&self) -> &Store {
        self.store
    }

    #[inline]
    fn read<R>(&mut self, hash: u64, f: impl FnOnce(&Shard) -> R) -> R {
        f(self.shard(hash).1)
    }

    #[inline]
    fn write<R>(&mut self, hash: u64, f: impl FnOnce(&Store, &mut Shard) -> R) -> R {
        let (store, shard) = self.shard(hash);
        f(store, shard)
    }
}

#[allow(private_bounds)]
impl Reach for &HeldShards<'_> {
    fn store(&self) -> &Store {
        self.store
    }

    #[inline]
    fn read<R>(&mut self, hash: u64, f: impl FnOnce(&Shard) -> R) -> R {
        f(&self.shards[held_pos(self.store, &self.shards, hash)]
            .1
            .borrow())
    }

    #[inline]
    fn write<R>(&mut self, hash: u64, f: impl FnOnce(&Store, &mut Shard) -> R) -> R {
        let pos = held_pos(self.store, &self.shards, hash);
        f(self.store, &mut self.shards[pos].1.borrow_mut())
    }
}

#[allow(private_bounds)]
impl Reach for &mut Locked<'_> {
    fn store(&self) -> &Store {
        match self {
            Locked::Own(l) => l.store,
            Locked::Held(h) => h.store,
        }
    }

    #[inline]
    fn read<R>(&mut self, hash: u64, f: impl FnOnce(&Shard) -> R) -> R {
        match self {
            Locked::Own(l) => f(l.shard(hash).1),
            Locked::Held(h) => h.read(hash, f),
        }
    }

    #[inline]
    fn write<R>(&mut self, hash: u64, f: impl FnOnce(&Store, &mut Shard) -> R) -> R {
        match self {
            Locked::Own(l) => {
                let (store, shard) = l.shard(hash);
                f(store, shard)
            }
            Locked::Held(h) => h.write(hash, f),
        }
    }
}

#[allow(private_bounds)]
impl Reach for Keyspace<'_> {
    fn store(&self) -> &Store {
        match self {
            Keyspace::Store(s) => s,
            Keyspace::Held(h) => h.store,
        }
    }

    #[inline]
    fn read<R>(&mut self, hash: u64, f: impl FnOnce(&Shard) -> R) -> R {
        match self {
            Keyspace::Store(s) => s.read(hash, f),
            Keyspace::Held(h) => h.read(hash, f),
        }
    }

    #[inline]
    fn write<R>(&mut self, hash: u64, f: impl FnOnce(&Store, &mut Shard) -> R) -> R {
        match self {
            Keyspace::Store(s) => s.write(hash, f),
            Keyspace::Held(h) => h.write(hash, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::entry::Stored;
    use crate::store::known::HeldKeys;
    use crate::store::{SmallBytes, Value};

    const KEY: &[u8] = b"k";
    const AT: Nanos = Nanos(10 * Nanos::PER_SEC);

    /// A string, kept whole, and a window record, kept compact (a
    /// `get_known` leaves it in `found`): both expiring at `AT`.
    fn entries() -> [Entry; 2] {
        use crate::limiter::{params_secs, window};
        let state = window::State {
            start: 0,
            prev: 0,
            curr: 1,
        };
        [
            Entry::with_expiry(Value::Str(SmallBytes::new(b"v")), Some(AT)),
            Entry::with_expiry(
                Value::Window(Stored {
                    params: params_secs(5, 10),
                    state,
                }),
                Some(AT),
            ),
        ]
    }

    /// A read past the expiry, through one view: whether it found nothing.
    type Read = fn(&Store, Nanos) -> bool;

    #[test]
    fn every_view_reads_an_expired_key_as_absent_and_removes_it() {
        fn none(r: Option<()>) -> bool {
            r.is_none()
        }
        let views: [(&str, Read); 8] = [
            ("store", |s, now| none(s.get(KEY, now, |_| ()))),
            ("keyspace", |s, now| {
                none(Keyspace::Store(s).get(KEY, now, |_| ()))
            }),
            ("multilock", |s, now| {
                none(Keys::get(&mut s.lock_many([KEY]), KEY, now, |_| ()))
            }),
            ("held", |s, now| {
                none(s.lock_many([KEY]).held().get(KEY, now, |_| ()))
            }),
            ("locked", |s, now| {
                none(Locked::Own(s.lock_many([KEY])).get(KEY, now, |_| ()))
            }),
            ("locked held", |s, now| {
                let mut lock = s.lock_many([KEY]);
                let held = lock.held();
                let r = Locked::Held(&held).get(KEY, now, |_| ());
                none(r)
            }),
            ("keyspace held", |s, now| {
                let mut lock = s.lock_many([KEY]);
                let held = lock.held();
                none(Keyspace::Held(&held).get(KEY, now, |_| ()))
            }),
            ("get_known", |s, now| {
                let mut lock = Locked::Own(s.lock_many([KEY]));
                let mut found = None;
                let hash = Keyspace::Store(s).hash(KEY);
                let r = lock.get_known(KEY, hash, now, &mut found, |_| ());
                none(r) && found.is_none()
            }),
        ];
        for (name, read) in views {
            for entry in entries() {
                let store = Store::new(4);
                store.update(KEY, Nanos(0), |e| *e = Some(entry));
                assert!(store.exists(KEY, Nanos(AT.0 - 1)), "{name}: live before");
                assert!(read(&store, Nanos(AT.0 + 1)), "{name}: read as absent");
                assert_eq!(store.len(), 0, "{name}: the read removed it");
                assert_eq!(store.expired_count(), 1, "{name}: counted once");
            }
        }
    }
}
