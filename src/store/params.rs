//! A shard's limiter parameters, interned: a compact record holds a 12-bit
//! id instead of 32 bytes of `Params`. Most keys of a fleet share a handful
//! of `(limit, period)` pairs, so the table stays tiny and hot in cache.
//! Ids are reference-counted and reused once no record holds them.

use std::collections::HashMap;

use crate::limiter::Params;

/// A shard with this many distinct parameter sets in use stores further
/// keys in the general class instead.
const MAX_IDS: usize = 1 << super::record::PID_BITS;

#[derive(Debug, Default)]
pub struct ParamTable {
    /// By id: the parameters and how many records hold them (0 = free).
    slots: Vec<(Params, u32)>,
    ids: HashMap<Params, u16, ahash::RandomState>,
    free: Vec<u16>,
}

impl ParamTable {
    #[inline]
    pub fn get(&self, id: u16) -> &Params {
        &self.slots[id as usize].0
    }

    /// A reference to `p`'s id, creating it if needed; `None` if every id
    /// is taken.
    pub fn acquire(&mut self, p: &Params) -> Option<u16> {
        if let Some(&id) = self.ids.get(p) {
            self.slots[id as usize].1 += 1;
            return Some(id);
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = (*p, 1);
                id
            }
            None if self.slots.len() < MAX_IDS => {
                self.slots.push((*p, 1));
                (self.slots.len() - 1) as u16
            }
            None => return None,
        };
        self.ids.insert(*p, id);
        Some(id)
    }

    /// Drops one reference to `id`.
    pub fn release(&mut self, id: u16) {
        let slot = &mut self.slots[id as usize];
        slot.1 -= 1;
        if slot.1 == 0 {
            self.ids.remove(&slot.0);
            self.free.push(id);
            if self.ids.is_empty() {
                *self = ParamTable::default();
            }
        }
    }

    /// `id` if it already stands for `p` (the common case: a key charged
    /// with the parameters it was last charged with), else a reference to
    /// `p`'s id with `id`'s released.
    pub fn replace(&mut self, id: u16, p: &Params) -> Option<u16> {
        if self.get(id) == p {
            return Some(id);
        }
        let new = self.acquire(p)?;
        self.release(id);
        Some(new)
    }

    /// Bytes a new parameter set may allocate: the id vector and the map
    /// double when full. Counted by `--maxmemory`'s check before a write
    /// (which cannot know yet whether its parameters are new), so a
    /// stream of distinct parameters never grows the table past the cap.
    pub fn growth(&self) -> usize {
        let mut bytes = 0;
        if self.free.is_empty()
            && self.slots.len() == self.slots.capacity()
            && self.slots.len() < MAX_IDS
        {
            bytes += self.slots.capacity().max(4) * std::mem::size_of::<(Params, u32)>();
        }
        if self.ids.len() == self.ids.capacity() && self.ids.len() < MAX_IDS {
            bytes += (self.ids.capacity().max(3) * 2) * (std::mem::size_of::<(Params, u16)>() + 1);
        }
        bytes
    }

    pub fn allocation_size(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<(Params, u32)>()
            + self.ids.capacity() * (std::mem::size_of::<(Params, u16)>() + 1)
            + self.free.capacity() * 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::params_secs;

    #[test]
    fn ids_are_shared_counted_and_reused() {
        let mut t = ParamTable::default();
        let (a, b) = (params_secs(10, 1), params_secs(5, 60));
        let ia = t.acquire(&a).unwrap();
        assert_eq!(t.acquire(&a), Some(ia));
        let ib = t.acquire(&b).unwrap();
        assert_ne!(ia, ib);
        assert_eq!(t.get(ib), &b);
        t.release(ib);
        // b's id is free again and goes to the next new parameters.
        let c = params_secs(7, 7);
        assert_eq!(t.acquire(&c), Some(ib));
        assert_eq!(t.replace(ia, &a), Some(ia));
        let moved = t.replace(ia, &c).unwrap();
        assert_eq!(moved, ib);
        assert_eq!(t.get(ia), &a, "a still has one holder");
        t.release(ia);
        t.release(ib);
        t.release(ib);
        assert_eq!(t.allocation_size(), 0, "an empty table is given back");
    }

    /// What `growth` announces covers what the next new parameter set
    /// allocates, all the way to the id cap.
    #[test]
    fn growth_covers_the_next_new_parameters() {
        let mut t = ParamTable::default();
        for i in 1..=MAX_IDS as u64 {
            let (before, announced) = (t.allocation_size(), t.growth());
            t.acquire(&params_secs(i, 1)).unwrap();
            let grew = t.allocation_size().saturating_sub(before);
            assert!(
                grew <= announced,
                "id {i}: grew {grew}, announced {announced}"
            );
        }
        assert_eq!(t.growth(), 0, "full of ids: new ones go elsewhere");
    }

    #[test]
    fn runs_out_of_ids() {
        let mut t = ParamTable::default();
        for i in 1..=MAX_IDS as u64 {
            assert!(t.acquire(&params_secs(i, 1)).is_some());
        }
        assert_eq!(t.acquire(&params_secs(MAX_IDS as u64 + 1, 1)), None);
        assert!(t.acquire(&params_secs(1, 1)).is_some(), "an existing id");
    }
}
