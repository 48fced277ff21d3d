//! `Index`: a shard's hash index of 4-byte record handles, one cache line
//! per group of 12.
//!
//! Hand-written because the layout is the point. hashbrown keeps its
//! control bytes and its slots in two arrays, so a lookup touches two cache
//! lines of index before the record it leads to (three in all, measured as
//! the new store's extra cost per `RL.ALLOW`). Here a 64-byte group holds
//! 12 one-byte tags, an overflow count and 12 handles, so a lookup touches
//! one line of index and then the record. Memory is the same 5.3 bytes a
//! slot.
//!
//! Collisions follow folly's F14 design: a key lives in its home group
//! (picked from the hash's low 32 bits) or, if that was full, in a later one (linear probing);
//! each group counts the keys that probed past it. A lookup stops at the
//! first group whose count is zero, and a removal decrements the counts
//! along its key's path, so there are no tombstones and the table never
//! needs a clean-up rehash.
//!
//! The table grows at 7/8 full by half or by a third, alternately (its
//! sizes are 2^k and 3 * 2^(k-1) groups, from 64), not by doubling: a doubled table
//! is 44% full after it grows and 66% on average, which at 5.3 bytes a
//! slot is 8 bytes a key; this way it is 58-88% full, 6-9 bytes a key, for
//! one more rehash of each key per doubling of the keys. A hash picks its
//! home group among any number of groups by a multiply and a shift.

/// Slots per group.
const SLOTS: usize = 12;
/// Groups of a table that holds anything (4 KiB): a table outgrown is
/// freed, and one smaller than the slabs' chunks is a hole no chunk can
/// reuse. Grown from one group, a shard's small tables left about 7 KiB
/// of such holes each, 2 bytes a key at a million keys over 256 shards;
/// a table this size from the start costs 1 MiB once all 256 shards hold
/// a key.
const MIN_GROUPS: usize = 64;
const EMPTY: u8 = 0;

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Group {
    /// 0 = empty; else the hash's top byte, never 0.
    tags: [u8; SLOTS],
    /// Keys whose path went past this group (saturating: a count that hit
    /// the top stays there, which only makes lookups look further).
    overflow: u16,
    handles: [u32; SLOTS],
}

const _: () = assert!(std::mem::size_of::<Group>() == 64);

const EMPTY_GROUP: Group = Group {
    tags: [EMPTY; SLOTS],
    overflow: 0,
    handles: [0; SLOTS],
};

/// Where a handle sits: group and slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    group: usize,
    slot: usize,
}

#[derive(Default)]
pub struct Index {
    groups: Box<[Group]>,
    len: usize,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("len", &self.len)
            .field("groups", &self.groups.len())
            .finish()
    }
}

fn tag(hash: u64) -> u8 {
    ((hash >> 56) as u8).max(1)
}

impl Index {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The home group of `hash`: its low 32 bits scaled to the table
    /// (the shard took bits 32 and up, the tag the top byte).
    #[inline]
    fn home(&self, hash: u64) -> usize {
        ((hash as u32 as u64 * self.groups.len() as u64) >> 32) as usize
    }

    /// The group after `g` on a probe path.
    #[inline]
    fn next(&self, g: usize) -> usize {
        if g + 1 == self.groups.len() {
            0
        } else {
            g + 1
        }
    }

    /// Most keys the table holds before it grows.
    pub fn capacity(&self) -> usize {
        self.groups.len() * SLOTS * 7 / 8
    }

    pub fn allocation_size(&self) -> usize {
        self.groups.len() * std::mem::size_of::<Group>()
    }

    /// The position of the handle for which `eq` holds, among those whose
    /// hash is `hash`.
    pub fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<Pos> {
        if self.groups.is_empty() {
            return None;
        }
        let t = tag(hash);
        let mut g = self.home(hash);
        for _ in 0..self.groups.len() {
            let group = &self.groups[g];
            for slot in 0..SLOTS {
                if group.tags[slot] == t && eq(group.handles[slot]) {
                    return Some(Pos { group: g, slot });
                }
            }
            if group.overflow == 0 {
                return None;
            }
            g = self.next(g);
        }
        None
    }

    /// Starts loading `hash`'s home group into the cache.
    pub fn prefetch(&self, hash: u64) {
        if let Some(group) = self.groups.get(self.home(hash)) {
            crate::util::prefetch(group);
        }
    }

    /// Calls `f` with each handle in `hash`'s home group whose tag is
    /// `hash`'s: the records a lookup of it will most likely read.
    pub fn home_candidates(&self, hash: u64, mut f: impl FnMut(u32)) {
        let Some(group) = self.groups.get(self.home(hash)) else {
            return;
        };
        let t = tag(hash);
        for slot in 0..SLOTS {
            if group.tags[slot] == t {
                f(group.handles[slot]);
            }
        }
    }

    pub fn get(&self, pos: Pos) -> u32 {
        self.groups[pos.group].handles[pos.slot]
    }

    /// The handle at `pos`, if `pos` is in the table and holds one: for
    /// a caller that found a key and checks, before it writes, that the
    /// key is where it was (an insert that grows the table moves them).
    #[inline]
    pub fn get_live(&self, pos: Pos) -> Option<u32> {
        let g = self.groups.get(pos.group)?;
        (g.tags[pos.slot] != EMPTY).then(|| g.handles[pos.slot])
    }

    pub fn set(&mut self, pos: Pos, handle: u32) {
        self.groups[pos.group].handles[pos.slot] = handle;
    }

    /// Removes the handle at `pos`, whose hash is `hash`.
    pub fn remove(&mut self, hash: u64, pos: Pos) -> u32 {
        self.vacate(hash, pos);
        self.len -= 1;
        self.groups[pos.group].handles[pos.slot]
    }

    /// Empties `pos` and takes its key off the overflow counts of the
    /// groups its path went past (from its home group, `hash`'s, to `pos`).
    fn vacate(&mut self, hash: u64, pos: Pos) {
        let mut g = self.home(hash);
        while g != pos.group {
            let o = &mut self.groups[g].overflow;
            if *o != u16::MAX {
                *o -= 1;
            }
            g = self.next(g);
        }
        self.groups[pos.group].tags[pos.slot] = EMPTY;
    }

    /// Bytes of the table it grows into when full.
    pub fn grown_size(&self) -> usize {
        self.grown_groups() * std::mem::size_of::<Group>()
    }

    /// Groups the table has once it grows: the next size of the ladder
    /// 64, 96, 128, 192, ...
    fn grown_groups(&self) -> usize {
        let n = self.groups.len();
        if n < MIN_GROUPS {
            MIN_GROUPS
        } else if n.is_power_of_two() {
            n + n / 2
        } else {
            n / 3 * 4
        }
    }

    /// The size below `n` on the ladder (`n` > [`MIN_GROUPS`]).
    fn shrunk_groups(n: usize) -> usize {
        if n.is_power_of_two() {
            n / 4 * 3
        } else {
            n / 3 * 2
        }
    }

    /// Inserts a handle known not to be there yet, growing the table
    /// first if it is full (`rehash` gives the hash of a stored handle).
    pub fn insert(&mut self, hash: u64, handle: u32, rehash: impl Fn(u32) -> u64) {
        if self.len + 1 > self.capacity() {
            self.resize(self.grown_groups(), &rehash);
        }
        self.place(hash, handle);
        self.len += 1;
    }

    /// Puts `handle` in the first group of its path with room.
    fn place(&mut self, hash: u64, handle: u32) {
        let mut g = self.home(hash);
        loop {
            let group = &mut self.groups[g];
            if let Some(slot) = group.tags.iter().position(|&t| t == EMPTY) {
                group.tags[slot] = tag(hash);
                group.handles[slot] = handle;
                return;
            }
            group.overflow = group.overflow.saturating_add(1);
            g = self.next(g);
        }
    }

    /// Rebuilds the table with `groups` groups (a size of the ladder,
    /// enough for every handle).
    fn resize(&mut self, groups: usize, rehash: &impl Fn(u32) -> u64) {
        let old = std::mem::replace(
            &mut self.groups,
            vec![EMPTY_GROUP; groups].into_boxed_slice(),
        );
        for group in old.iter() {
            for slot in 0..SLOTS {
                if group.tags[slot] != EMPTY {
                    let h = group.handles[slot];
                    self.place(rehash(h), h);
                }
            }
        }
    }

    /// Steps the table down the ladder while it stays under half full
    /// (or empties it).
    pub fn shrink_to_fit(&mut self, rehash: impl Fn(u32) -> u64) {
        if self.len == 0 {
            *self = Index::default();
            return;
        }
        let mut groups = self.groups.len();
        while groups > MIN_GROUPS && self.len * 2 <= Self::shrunk_groups(groups) * SLOTS * 7 / 8 {
            groups = Self::shrunk_groups(groups);
        }
        if groups < self.groups.len() {
            self.resize(groups, &rehash);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.iter_from(0)
    }

    /// Every handle, starting at the group `start` picks (for sampling).
    pub fn iter_from(&self, start: u64) -> impl Iterator<Item = u32> + '_ {
        let n = self.groups.len();
        let first = self.home(start);
        (0..n)
            .map(move |i| &self.groups[(first + i) % n])
            .flat_map(|g| {
                (0..SLOTS)
                    .filter(move |&s| g.tags[s] != EMPTY)
                    .map(move |s| g.handles[s])
            })
    }

    /// Removes the handles for which `keep` is false and returns them (for
    /// the caller to free their records); `hash_of` gives a stored handle's
    /// hash, read before the record goes, to fix the overflow counts along
    /// its path.
    pub fn retain(
        &mut self,
        mut keep: impl FnMut(u32) -> bool,
        hash_of: impl Fn(u32) -> u64,
    ) -> Vec<u32> {
        let mut removed = Vec::new();
        for group in 0..self.groups.len() {
            for slot in 0..SLOTS {
                let h = self.groups[group].handles[slot];
                if self.groups[group].tags[slot] == EMPTY || keep(h) {
                    continue;
                }
                self.vacate(hash_of(h), Pos { group, slot });
                removed.push(h);
            }
        }
        self.len -= removed.len();
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Handles are their own keys; hashes are drawn from a tiny space so
    /// groups overflow and tags collide.
    fn h(handle: u32, spread: u64) -> u64 {
        let x = (handle as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (x % spread) | (x & 0xff00_0000_0000_0000)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32),
        Remove(u32),
        Retain(u32),
        Shrink,
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn behaves_like_a_set(
            spread in prop_oneof![Just(1u64), Just(3), Just(64), Just(u64::MAX)],
            ops in proptest::collection::vec(prop_oneof![
                (0u32..300).prop_map(Op::Insert),
                (0u32..300).prop_map(Op::Remove),
                (2u32..5).prop_map(Op::Retain),
                Just(Op::Shrink),
            ], 1..400),
        ) {
            let mut idx = Index::default();
            let mut model: HashMap<u32, ()> = HashMap::new();
            let hash = |x: u32| h(x, spread);
            for op in ops {
                match op {
                    Op::Insert(k) => {
                        if idx.find(hash(k), |x| x == k).is_none() {
                            idx.insert(hash(k), k, hash);
                            model.insert(k, ());
                        }
                    }
                    Op::Remove(k) => {
                        if let Some(pos) = idx.find(hash(k), |x| x == k) {
                            prop_assert_eq!(idx.remove(hash(k), pos), k);
                            prop_assert!(model.remove(&k).is_some());
                        }
                    }
                    Op::Retain(m) => {
                        let mut gone = idx.retain(|x| x % m != 0, hash);
                        gone.sort_unstable();
                        let mut want: Vec<u32> =
                            model.keys().copied().filter(|k| k % m == 0).collect();
                        want.sort_unstable();
                        prop_assert_eq!(gone, want);
                        model.retain(|k, _| k % m != 0);
                    }
                    Op::Shrink => idx.shrink_to_fit(hash),
                }
                prop_assert_eq!(idx.len(), model.len());
                for k in 0..300u32 {
                    let found = idx.find(hash(k), |x| x == k).map(|p| idx.get(p));
                    prop_assert_eq!(found, model.contains_key(&k).then_some(k), "key {}", k);
                }
                let mut all: Vec<u32> = idx.iter().collect();
                all.sort_unstable();
                let mut want: Vec<u32> = model.keys().copied().collect();
                want.sort_unstable();
                prop_assert_eq!(all, want);
            }
        }
    }

    #[test]
    fn grows_at_seven_eighths_and_shrinks() {
        let mut idx = Index::default();
        let hash = |x: u32| h(x, u64::MAX);
        for k in 0..10_000 {
            idx.insert(hash(k), k, hash);
            let slots = idx.allocation_size() / 64 * SLOTS;
            assert!(idx.len() <= idx.capacity());
            // Grown by half or a third at 7/8: never under 7/12 full.
            if k >= 1_000 {
                assert!(
                    idx.len() * 12 >= slots * 7,
                    "{} keys in {slots} slots",
                    idx.len()
                );
            }
        }
        assert_eq!(idx.allocation_size(), 1_024 * 64, "768 groups hold 8,064");
        for k in 100..10_000 {
            let pos = idx.find(hash(k), |x| x == k).unwrap();
            idx.remove(hash(k), pos);
        }
        idx.shrink_to_fit(hash);
        // 100 keys: down the ladder while under half full, to the least.
        assert_eq!(idx.allocation_size(), MIN_GROUPS * 64);
        for k in 0..100 {
            assert!(idx.find(hash(k), |x| x == k).is_some());
        }
    }
}
