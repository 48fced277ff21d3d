//! A full copy, made once for the replicas that attach together and read
//! by each at its own pace (Redis shares one BGSAVE among the replicas
//! waiting for it): six replicas asking for a copy at once used to make six,
//! each pinning its own encoding of every shard.
//!
//! The copy is made shard by shard on a blocking thread ([`FullCopy::make`]),
//! one chunk a shard, at most [`AHEAD`] chunks ahead of the fastest reader,
//! so readers that do not read hold up nothing but themselves and the copy
//! in memory is a few shards. A chunk is dropped once every reader has
//! written it. A replica may join a copy until a chunk with keys is
//! dropped (empty shards' chunks change nothing); it then takes the copy's
//! offset, and the stream from there comes from the backlog.
//!
//! What a reader alone holds in memory, the chunks it has not written that
//! the fastest reader has, counts against its output limit
//! ([`Reader::pinned`]): a slow replica cannot hold the copy for ever.

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;

use crate::clock::{Clock, Nanos};
use crate::store::effects::{self, SNAP};
use crate::store::Store;

/// Chunks made before the fastest reader needs them.
pub const AHEAD: usize = 2;

/// One copy and its readers.
pub struct FullCopy {
    /// `+FULLRESYNC <replid> <offset>`: the stream goes on from
    /// `offset + 1`.
    pub replid: String,
    pub offset: u64,
    /// The feeds epoch it was made in (a replica of an older history
    /// must not join it).
    pub epoch: u64,
    inner: Mutex<Inner>,
    /// Wakes the maker when a reader moves on or leaves.
    taken: Condvar,
    /// Wakes readers when a chunk is made.
    made: tokio::sync::Notify,
}

struct Chunk {
    /// The stream's offset when the shard was copied: the stream up to it
    /// goes first.
    at: u64,
    bytes: Bytes,
    /// Bytes of every chunk made before this one.
    before: u64,
}

#[derive(Default)]
struct Inner {
    /// Chunks made that some reader has not written, number `base` first.
    chunks: VecDeque<Chunk>,
    base: usize,
    /// Chunks made, and their bytes.
    made: usize,
    made_bytes: u64,
    /// Every shard copied.
    done: bool,
    /// Each reader's id, next chunk, and bytes of it written.
    readers: Vec<(u64, usize, u64)>,
    /// A chunk with keys was dropped: a replica can no longer join.
    dropped_keys: bool,
}

impl Inner {
    fn reader(&mut self, id: u64) -> Option<&mut (u64, usize, u64)> {
        self.readers.iter_mut().find(|r| r.0 == id)
    }

    /// The next chunk of the fastest reader (`made` without readers: the
    /// maker stops).
    fn fastest(&self) -> Option<usize> {
        self.readers.iter().map(|r| r.1).max()
    }

    /// Bytes made before chunk `i`.
    fn before(&self, i: usize) -> u64 {
        self.chunks
            .get(i - self.base)
            .map_or(self.made_bytes, |c| c.before)
    }

    /// Drops the chunks every reader has written.
    fn trim(&mut self) {
        let slowest = self.readers.iter().map(|r| r.1).min().unwrap_or(self.made);
        while self.base < slowest {
            let Some(chunk) = self.chunks.pop_front() else {
                break;
            };
            self.dropped_keys |= !chunk.bytes.is_empty();
            self.base += 1;
        }
    }
}

impl FullCopy {
    /// A new copy, with reader `id` (its maker is still to be started).
    pub fn start(replid: String, offset: u64, epoch: u64, id: u64) -> (Arc<FullCopy>, Reader) {
        let copy = Arc::new(FullCopy {
            replid,
            offset,
            epoch,
            inner: Mutex::new(Inner::default()),
            taken: Condvar::new(),
            made: tokio::sync::Notify::new(),
        });
        copy.inner.lock().readers.push((id, 0, 0));
        let reader = Reader {
            copy: copy.clone(),
            id,
        };
        (copy, reader)
    }

    /// Adds reader `id` if the copy still holds every chunk with keys it
    /// made and still has readers. The joiner starts at the oldest chunk
    /// held: a shard's chunk only adds its keys, so one without any (an
    /// empty shard's, already dropped) changes nothing on a replica, and
    /// the stream from the copy's offset brings what came after.
    pub fn join(self: &Arc<Self>, id: u64) -> Option<Reader> {
        let mut inner = self.inner.lock();
        if inner.dropped_keys || inner.readers.is_empty() {
            return None;
        }
        let base = inner.base;
        inner.readers.push((id, base, 0));
        Some(Reader {
            copy: self.clone(),
            id,
        })
    }

    /// Bytes of the copy reader `id` alone keeps in memory: those of the
    /// chunks the fastest reader has written and it has not (less what it
    /// wrote of them). A lone reader, or the fastest, pins nothing: what
    /// the copy holds for it is the copy's own working set. 0 for a
    /// reader that left.
    pub fn pinned(&self, id: u64) -> u64 {
        let mut inner = self.inner.lock();
        let Some(fastest) = inner.fastest() else {
            return 0;
        };
        let Some(&mut (_, next, written)) = inner.reader(id) else {
            return 0;
        };
        if next >= fastest {
            return 0;
        }
        (inner.before(fastest) - inner.before(next)).saturating_sub(written)
    }

    /// Makes the copy: each shard's records as SNAP frames, one chunk a
    /// shard, never more than [`AHEAD`] chunks past the fastest reader.
    /// Returns early once every reader has left.
    pub fn make(&self, store: &Store, clock: &dyn Clock) {
        for shard in 0..store.shard_count() {
            {
                let mut inner = self.inner.lock();
                loop {
                    match inner.fastest() {
                        None => return,
                        Some(next) if inner.made < next + AHEAD => break,
                        Some(_) => self.taken.wait(&mut inner),
                    }
                }
            }
            let mut out = Vec::new();
            let at = copy_shard(store, shard, clock.now(), &mut out);
            let mut inner = self.inner.lock();
            if inner.readers.is_empty() {
                return;
            }
            let before = inner.made_bytes;
            inner.made_bytes += out.len() as u64;
            inner.made += 1;
            inner.chunks.push_back(Chunk {
                at,
                bytes: out.into(),
                before,
            });
            drop(inner);
            self.made.notify_waiters();
        }
        self.inner.lock().done = true;
        self.made.notify_waiters();
    }
}

/// One replica's place in a [`FullCopy`]; leaves it when dropped.
pub struct Reader {
    copy: Arc<FullCopy>,
    id: u64,
}

impl Reader {
    pub fn copy(&self) -> &Arc<FullCopy> {
        &self.copy
    }

    /// The next chunk to write: (stream offset before it, bytes), once
    /// made; `None` when the copy is complete.
    pub async fn next(&self) -> Option<(u64, Bytes)> {
        loop {
            let made = self.copy.made.notified();
            tokio::pin!(made);
            made.as_mut().enable();
            {
                let mut inner = self.copy.inner.lock();
                let base = inner.base;
                let next = inner.reader(self.id).map_or(usize::MAX, |r| r.1);
                if let Some(c) = next.checked_sub(base).and_then(|i| inner.chunks.get(i)) {
                    return Some((c.at, c.bytes.clone()));
                }
                if inner.done {
                    return None;
                }
            }
            made.await;
        }
    }

    /// `n` more bytes of the current chunk were written.
    pub fn wrote(&self, n: usize) {
        if let Some(r) = self.copy.inner.lock().reader(self.id) {
            r.2 += n as u64;
        }
    }

    /// The current chunk is written: on to the next.
    pub fn advance(&self) {
        let mut inner = self.copy.inner.lock();
        if let Some(r) = inner.reader(self.id) {
            r.1 += 1;
            r.2 = 0;
        }
        inner.trim();
        drop(inner);
        self.copy.taken.notify_all();
    }

    /// [`FullCopy::pinned`] for this reader.
    pub fn pinned(&self) -> u64 {
        self.copy.pinned(self.id)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let mut inner = self.copy.inner.lock();
        inner.readers.retain(|r| r.0 != self.id);
        inner.trim();
        drop(inner);
        self.copy.taken.notify_all();
    }
}

/// Appends shard `shard`'s copy, one SNAP frame a key, to `out`; returns
/// the stream's offset when it was taken (see
/// [`Store::for_each_in_shard_at`]).
pub fn copy_shard(store: &Store, shard: usize, now: Nanos, out: &mut Vec<u8>) -> u64 {
    store.for_each_in_shard_at(shard, now, |key, entry| {
        effects::frame(out, SNAP, |b| crate::store::codec::encode(b, key, entry));
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Entry, SmallBytes, Value};
    use crate::{ManualClock, Nanos};

    fn store_with(keys: usize) -> Store {
        let store = Store::default();
        for i in 0..keys {
            store.update(format!("k{i}").as_bytes(), Nanos(0), |e| {
                *e = Some(Entry::with_expiry_ms(
                    Value::Str(SmallBytes::from(&b"v"[..])),
                    None,
                ))
            });
        }
        store
    }

    /// Two readers of one copy: the maker waits for the fastest, chunks
    /// stay until both wrote them, the slow one is charged for what it
    /// alone holds, and each reads every shard once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn readers_share_one_copy_and_the_slow_one_pins_what_it_holds() {
        let store = Arc::new(store_with(2000));
        let (copy, fast) = FullCopy::start("r".repeat(40), 0, 0, 1);
        let slow = copy.join(2).unwrap();
        let maker = {
            let (copy, store) = (copy.clone(), store.clone());
            tokio::task::spawn_blocking(move || copy.make(&store, &ManualClock::new(Nanos(0))))
        };
        let mut total = 0u64;
        let mut chunks = 0;
        while let Some((_, bytes)) = fast.next().await {
            {
                let inner = copy.inner.lock();
                assert!(inner.made <= chunks + AHEAD, "the maker ran ahead");
            }
            total += bytes.len() as u64;
            fast.wrote(bytes.len());
            fast.advance();
            chunks += 1;
        }
        maker.await.unwrap();
        assert_eq!(chunks, store.shard_count());
        assert_eq!(slow.pinned(), total, "the slow reader holds every chunk");
        let third = copy.join(3);
        assert!(third.is_some(), "nothing was dropped yet: joinable");
        let (_, first) = slow.next().await.unwrap();
        slow.wrote(first.len());
        assert_eq!(slow.pinned(), total - first.len() as u64);
        slow.advance();
        assert_eq!(copy.inner.lock().base, 0, "reader 3 still needs chunk 0");
        drop(third);
        assert_eq!(copy.inner.lock().base, 1, "chunk 0 goes once all wrote it");
        drop(fast);
        assert_eq!(slow.pinned(), 0, "the fastest reader pins nothing");
    }

    /// Once a chunk is dropped, the copy can no longer be joined; once
    /// every reader left, the maker stops.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_copy_is_joined_only_whole_and_stops_without_readers() {
        let store = Arc::new(store_with(5000));
        let (copy, only) = FullCopy::start(String::new(), 0, 0, 1);
        let maker = {
            let (copy, store) = (copy.clone(), store.clone());
            tokio::task::spawn_blocking(move || copy.make(&store, &ManualClock::new(Nanos(0))))
        };
        only.next().await.unwrap();
        only.advance();
        assert!(copy.join(2).is_none(), "a chunk with keys was dropped");
        drop(only);
        maker.await.unwrap();
        let inner = copy.inner.lock();
        assert!(!inner.done && inner.made <= 1 + AHEAD, "{}", inner.made);
        assert!(inner.chunks.is_empty());
    }

    /// Six replicas asking at once: the first ones pass the empty shards
    /// before the others ask, and those still share the one shard with a
    /// key (it used to be one copy per replica; with joining only while
    /// the first chunk was held, two here).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replica_joins_past_empty_shards() {
        let store = Arc::new(Store::default());
        let key = (0..)
            .map(|i| format!("k{i}"))
            .find(|k| store.shard_of(k.as_bytes()) == 5)
            .unwrap();
        store.update(key.as_bytes(), Nanos(0), |e| {
            *e = Some(Entry::with_expiry_ms(
                Value::Str(SmallBytes::from(&b"v"[..])),
                None,
            ))
        });
        let (copy, first) = FullCopy::start(String::new(), 0, 0, 1);
        let maker = {
            let (copy, store) = (copy.clone(), store.clone());
            tokio::task::spawn_blocking(move || copy.make(&store, &ManualClock::new(Nanos(0))))
        };
        for _ in 0..5 {
            let (_, chunk) = first.next().await.unwrap();
            assert!(chunk.is_empty());
            first.advance();
        }
        assert_eq!(copy.inner.lock().base, 5);
        let late = copy.join(2).expect("only empty chunks were dropped");
        let (_, chunk) = late.next().await.unwrap();
        assert!(
            !chunk.is_empty(),
            "the late reader starts at the shard with the key"
        );
        late.advance();
        first.next().await.unwrap();
        first.advance();
        assert!(copy.join(3).is_none(), "the chunk with the key is gone");
        drop((first, late));
        maker.await.unwrap();
    }
}
