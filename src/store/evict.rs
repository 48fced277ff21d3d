//! `--maxmemory`'s eviction: how much a write would grow a shard's table,
//! and making room for it by evicting the keys nearest their expiry.

use std::sync::atomic::Ordering;

use super::entry;
use super::shard::Shard;
use super::Store;
use crate::clock::Nanos;

impl Store {
    /// Bytes a write of `key` could allocate: 0 if the key is there, else
    /// the growth of its shard's index (it grows by half or a third, holding both tables
    /// while it moves) and a new record chunk. `--maxmemory` checks
    /// this before a write, so the table that would cross the cap is never
    /// allocated.
    pub fn growth_for(&self, key: &[u8]) -> usize {
        let hash = self.hash(key);
        let shard = self.read_shard(self.shard_index(hash));
        if shard.contains(hash, key) {
            return 0;
        }
        shard.growth()
    }

    /// For `--maxmemory-policy volatile-ttl`: makes room for a write of
    /// `key` that must not grow memory. If its shard's index is out of
    /// room (the insert would reallocate it), evicts the `1/16` of that
    /// shard's keys nearest their expiry, so the insert fits the table it
    /// has (the index keeps no tombstones); otherwise evicts one
    /// key, as [`Store::evict_for`]. False if no key with a TTL was found.
    pub fn make_room(&self, key: &[u8], now: Nanos) -> bool {
        let hash = self.hash(key);
        {
            let mut shard = self.write_shard(self.shard_index(hash));
            if shard.index_full() && !shard.contains(hash, key) {
                let batch = (shard.index_capacity() / 16).max(1);
                if self.evict_nearest(&mut shard, key, now, batch) > 0 {
                    return true;
                }
            }
        }
        self.evict_for(key, now, 16)
    }

    /// Evicts up to `n` keys of `shard` (never `spare`), those with the
    /// nearest expiry first. Returns how many went.
    fn evict_nearest(&self, shard: &mut Shard, spare: &[u8], now: Nanos, n: usize) -> usize {
        let mut victims = shard.volatile_keys(spare, usize::MAX, 0);
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
        let Some(ttl) = shard.remove(self, self.hash(victim), victim) else {
            return false;
        };
        if ttl.is_some_and(|at| entry::passed(at, now)) {
            self.expired.fetch_add(1, Ordering::Relaxed);
        } else {
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// Keys evicted so far to stay under `--maxmemory`.
    pub fn evicted_count(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// Evicts, for `--maxmemory-policy volatile-ttl`, the key nearest its
    /// expiry (a limiter key about to expire is the one whose state matters
    /// least) among up to `sample` keys with a TTL in the shard `key` maps
    /// to (found from a place `key`'s hash picks, so the samples of many
    /// writes cover the shard), where `key` is about to be written, so that
    /// shard keeps its size;
    /// only if it has no key with a TTL does it look in the next shards.
    /// Never evicts `key` itself; returns false if no other key has a TTL.
    pub fn evict_for(&self, key: &[u8], now: Nanos, sample: usize) -> bool {
        let n = self.shards.len();
        let start = self.shard_index(self.hash(key));
        for probe in 0..n {
            let mut shard = self.write_shard((start + probe) % n);
            if shard.volatile == 0 {
                continue;
            }
            let victim = shard
                .volatile_keys(key, sample, self.hash(key))
                .into_iter()
                .min_by_key(|(at, _)| *at);
            let Some((_, victim)) = victim else {
                continue;
            };
            if self.remove_victim(&mut shard, &victim, now) {
                return true;
            }
        }
        false
    }
}
