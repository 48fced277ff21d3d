//! A slot's keys (`CLUSTER GETKEYSINSLOT`, `COUNTKEYSINSLOT`), found in
//! the one shard that holds them when the store is sharded by slot.

use super::slot::key_slot;
use crate::clock::Nanos;

/// Finding keys by slot. Sharded by slot (`Store::sharded_by_slot`), a
/// slot's keys are all in one shard.
impl super::Store {
    /// Up to `count` live keys of hash slot `slot` (`CLUSTER
    /// GETKEYSINSLOT`), in no particular order. Sharded by slot, it reads
    /// one shard (1/256 of the keys by default); otherwise every shard.
    /// Expired keys not yet swept are left out.
    pub fn keys_in_slot(&self, slot: u16, count: usize, now: Nanos) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        for i in self.shards_of_slot(slot) {
            if keys.len() >= count {
                break;
            }
            self.read_shard(i).for_each_live_key(now, |k| {
                if keys.len() < count && key_slot(k) == slot {
                    keys.push(k.to_vec());
                }
            });
        }
        keys
    }

    /// The number of live keys in hash slot `slot` (`CLUSTER
    /// COUNTKEYSINSLOT`): one shard's walk when sharded by slot.
    pub fn count_in_slot(&self, slot: u16, now: Nanos) -> usize {
        let mut n = 0;
        for i in self.shards_of_slot(slot) {
            self.read_shard(i).for_each_live_key(now, |k| {
                n += usize::from(key_slot(k) == slot);
            });
        }
        n
    }

    /// The shards that may hold keys of `slot`.
    fn shards_of_slot(&self, slot: u16) -> std::ops::Range<usize> {
        if self.by_slot {
            let i = usize::from(slot) & self.mask;
            i..i + 1
        } else {
            0..self.shards.len()
        }
    }
}
