//! Concurrency limits: leases on units held by requests in flight.
//!
//! A key holds the live leases of one concurrency limit: each an id, the
//! units it holds and when it lapses. A lease admits while the units of
//! the live leases plus its own fit the limit; it ends when released,
//! or by itself at its expiry, so a holder that crashed frees its units
//! without anyone noticing. Pure, as the other algorithms: no I/O, no
//! clock, no randomness (the caller brings the lease id), integer maths.
//!
//! Every operation first drops the leases whose time has passed (a lease
//! at its expiry instant holds nothing) and reports how many lapsed
//! unreleased, which tells operators that holders are dying.
//!
//! A lease is 24 bytes: its 16-byte id, and its expiry (in milliseconds,
//! 42 bits: until the year 2109) packed with its units (22 bits: a lease
//! holds at most [`MAX_UNITS`]). The leases are kept soonest to lapse
//! first, so dropping the lapsed ones, `retry_after` and `reset_after`
//! read the ends of the order rather than every lease.
//!
//! Two forms, because most concurrency limits are small and a few are not:
//! up to [`SMALL`] leases sit in one sorted vector (grown by a quarter, a
//! live lease costs at most 30 bytes, and a scan of 32 ids is cheaper than
//! a tree's nodes); beyond that they move to a B-tree ordered by expiry
//! beside a B-tree index by id, so acquire, release, renew and each lapse
//! cost O(log n) however many leases a key holds (a key with a limit in
//! the millions can hold that many one-unit leases). A key holds at most
//! [`MAX_LEASES`]: past that an acquire is refused ([`Full`]), which
//! bounds what one key costs and the walk a denied acquire of a large
//! `COST` makes to find when enough units free up.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use super::contract::Decision;

/// Bytes of a lease id.
pub const ID_LEN: usize = 16;

/// A lease's id: made by the server (random), or derived from the
/// client's own (`ID`), which makes a retried acquire idempotent.
pub type LeaseId = [u8; ID_LEN];

/// The most units one lease may hold.
pub const MAX_UNITS: u64 = (1 << UNIT_BITS) - 1;
const UNIT_BITS: u32 = 22;
const MS: u64 = 1_000_000;

/// The most live leases one key may hold, as the log's ring holds at most
/// 1,048,576 slots: enough for any real concurrency limit, and a bound on
/// one key's memory (about 100 MB) and on a denied acquire's walk.
pub const MAX_LEASES: usize = 1 << 20;

/// Leases held in the sorted vector; one more moves them to the trees.
pub const SMALL: usize = 32;
/// Trees that shrink to this many leases go back to the vector (a quarter
/// of [`SMALL`], so a key hovering at the threshold does not convert on
/// every acquire and release).
const DEMOTE_AT: usize = SMALL / 4;
/// Heap bytes per lease in the trees, as measured (`benches/leases.py`:
/// 78.9 bytes per further lease on one key of 100,000): a lease in the
/// expiry tree and its id in the index, in nodes of 11 that sequential
/// inserts leave about half full.
const TREE_BYTES_PER_LEASE: usize = 80;

/// One live lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(4))]
pub struct Lease {
    pub id: LeaseId,
    /// Expiry in ms (high 42 bits), units (low 22).
    packed: u64,
}

const _: () = assert!(std::mem::size_of::<Lease>() == 24);

impl Lease {
    /// A lease lapsing at `expires` (ns; rounded up to the millisecond, so
    /// it lives its whole TTL) holding `units` (at most [`MAX_UNITS`]).
    pub fn new(id: LeaseId, expires: u64, units: u64) -> Lease {
        debug_assert!(units <= MAX_UNITS);
        let ms = expires.div_ceil(MS).min(u64::MAX >> UNIT_BITS);
        Lease {
            id,
            packed: ms << UNIT_BITS | units.min(MAX_UNITS),
        }
    }

    /// When it lapses (ns): it holds nothing from this instant on.
    pub fn expires(&self) -> u64 {
        (self.packed >> UNIT_BITS).saturating_mul(MS)
    }

    pub fn units(&self) -> u64 {
        self.packed & MAX_UNITS
    }

    /// The order leases are kept in: soonest to lapse first (then by
    /// units and id, so that the order is total).
    fn key(&self) -> (u64, LeaseId) {
        (self.packed, self.id)
    }
}

impl Ord for Lease {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Lease {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The leases of a key past [`SMALL`].
#[derive(Debug, Clone, Default)]
struct Trees {
    /// Soonest to lapse first.
    by_expiry: BTreeSet<Lease>,
    /// Each lease's expiry and units (`Lease::packed`), by id.
    by_id: BTreeMap<LeaseId, u64>,
}

/// The live leases of one key.
#[derive(Debug, Clone, Default)]
pub struct Leases {
    /// Up to [`SMALL`] leases, soonest to lapse first; empty while `trees`
    /// holds them.
    small: Vec<Lease>,
    trees: Option<Box<Trees>>,
    /// Units held by all of them.
    held: u64,
}

impl PartialEq for Leases {
    /// The same leases, whichever form holds them.
    fn eq(&self, other: &Self) -> bool {
        self.held == other.held && self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Leases {}

/// An acquire refused because the key holds [`MAX_LEASES`] already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// What lapsed unreleased while an operation dropped expired leases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lapsed {
    pub leases: u64,
    pub units: u64,
}

/// An acquire's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    /// `remaining` is the units still free; `retry_after` (denied) when
    /// enough leases lapse for this cost if none is released;
    /// `reset_after` when the last live lease lapses.
    pub decision: Decision,
    /// The id was already held by a live lease: the earlier acquire's
    /// admission stands (retried acquires are idempotent), nothing new is
    /// held.
    pub existing: bool,
}

impl Leases {
    /// Every lease held, soonest to lapse first (lapsed ones included
    /// until an operation drops them: see [`Leases::live`]).
    pub fn iter(&self) -> impl Iterator<Item = &Lease> {
        let trees = self.trees.iter().flat_map(|t| t.by_expiry.iter());
        self.small.iter().chain(trees)
    }

    /// The leases live at `now`, soonest to lapse first.
    pub fn live(&self, now: u64) -> impl Iterator<Item = &Lease> {
        self.iter().skip_while(move |l| l.expires() <= now)
    }

    /// The leases lapsed by `now` that no operation has dropped yet: the
    /// first of the order, so this reads only them.
    fn lapsed_at(&self, now: u64) -> Lapsed {
        let mut lapsed = Lapsed::default();
        for l in self.iter().take_while(|l| l.expires() <= now) {
            lapsed.leases += 1;
            lapsed.units += l.units();
        }
        lapsed
    }

    /// Units held at `now`.
    pub fn held(&self, now: u64) -> u64 {
        self.held.saturating_sub(self.lapsed_at(now).units)
    }

    /// Leases live at `now`.
    pub fn live_count(&self, now: u64) -> usize {
        self.len() - self.lapsed_at(now).leases as usize
    }

    pub fn len(&self) -> usize {
        match &self.trees {
            Some(t) => t.by_expiry.len(),
            None => self.small.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn first(&self) -> Option<Lease> {
        match &self.trees {
            Some(t) => t.by_expiry.first().copied(),
            None => self.small.first().copied(),
        }
    }

    /// When the last lease lapses (the key's TTL); 0 when none is held.
    pub fn expires_at(&self) -> u64 {
        let last = match &self.trees {
            Some(t) => t.by_expiry.last(),
            None => self.small.last(),
        };
        last.map_or(0, Lease::expires)
    }

    /// Heap bytes the leases take: the vector's capacity, or an estimate
    /// per lease for the trees.
    pub fn heap_bytes(&self) -> usize {
        match &self.trees {
            Some(t) => std::mem::size_of::<Trees>() + t.by_expiry.len() * TREE_BYTES_PER_LEASE,
            None => self.small.capacity() * std::mem::size_of::<Lease>(),
        }
    }

    /// The live lease `id`, if any (after [`Leases::expire`]).
    fn get(&self, id: &LeaseId) -> Option<Lease> {
        match &self.trees {
            Some(t) => t.by_id.get(id).map(|&packed| Lease { id: *id, packed }),
            None => self.small.iter().find(|l| { l.id } == *id).copied(),
        }
    }

    /// Holds `lease`, whose id is not held.
    fn insert(&mut self, lease: Lease) {
        if self.trees.is_none() && self.small.len() == SMALL {
            let mut t = Box::<Trees>::default();
            for l in self.small.drain(..) {
                t.by_id.insert(l.id, l.packed);
                t.by_expiry.insert(l);
            }
            self.small = Vec::new();
            self.trees = Some(t);
        }
        match &mut self.trees {
            Some(t) => {
                t.by_id.insert(lease.id, lease.packed);
                t.by_expiry.insert(lease);
            }
            None => {
                if self.small.len() == self.small.capacity() {
                    // A quarter more, not double: memory per lease stays
                    // near its 24 bytes. The first lease gets room for
                    // itself alone: a key holding one lease is common (a
                    // user's one export at a time), and room for four
                    // was 72 bytes a key of nothing.
                    let more = match self.small.len() {
                        0 => 1,
                        n => (n / 4).max(4),
                    };
                    self.small.reserve_exact(more);
                }
                let at = self.small.partition_point(|l| l < &lease);
                self.small.insert(at, lease);
            }
        }
        self.held = self.held.saturating_add(lease.units());
    }

    /// Drops `lease`, which is held.
    fn remove(&mut self, lease: &Lease) {
        match &mut self.trees {
            Some(t) => {
                t.by_expiry.remove(lease);
                t.by_id.remove(&{ lease.id });
                if t.by_expiry.len() <= DEMOTE_AT {
                    self.small = t.by_expiry.iter().copied().collect();
                    self.trees = None;
                }
            }
            None => {
                if let Some(at) = self.small.iter().position(|l| l == lease) {
                    self.small.remove(at);
                }
            }
        }
        self.held = self.held.saturating_sub(lease.units());
    }

    /// Drops the leases lapsed at `now`: the first of the order.
    pub fn expire(&mut self, now: u64) -> Lapsed {
        let mut lapsed = Lapsed::default();
        while let Some(l) = self.first().filter(|l| l.expires() <= now) {
            self.remove(&l);
            lapsed.leases += 1;
            lapsed.units += l.units();
        }
        // A burst of leases gone: give the memory back.
        if lapsed.leases > 0 && self.small.capacity() > 2 * self.small.len().max(4) {
            self.small.shrink_to(self.small.len().max(4));
        }
        lapsed
    }

    /// Takes `cost` units under `limit` for `ttl` from `now`, as lease
    /// `id`. Admitted if the units of the live leases plus `cost` fit
    /// `limit`; an `id` already live answers as admitted again and holds
    /// nothing more. `cost` is at most `limit` (the caller checks).
    /// [`Full`] (and nothing held) when an admission would be the key's
    /// lease past [`MAX_LEASES`].
    pub fn acquire(
        &mut self,
        limit: u64,
        ttl: u64,
        now: u64,
        cost: u64,
        id: LeaseId,
    ) -> Result<(Acquired, Lapsed), Full> {
        let lapsed = self.expire(now);
        if self.get(&id).is_some() {
            let decision = self.decision(true, limit, now, cost, self.held);
            return Ok((
                Acquired {
                    decision,
                    existing: true,
                },
                lapsed,
            ));
        }
        let allowed = self.held.saturating_add(cost) <= limit;
        if allowed {
            if self.len() >= MAX_LEASES {
                return Err(Full);
            }
            self.insert(Lease::new(id, now.saturating_add(ttl.max(1)), cost));
        }
        let decision = self.decision(allowed, limit, now, cost, self.held);
        Ok((
            Acquired {
                decision,
                existing: false,
            },
            lapsed,
        ))
    }

    /// What an acquire of `cost` for `ttl` would answer at `now` (as a
    /// new lease), changing nothing.
    pub fn peek(&self, limit: u64, ttl: u64, now: u64, cost: u64) -> Decision {
        let held = self.held(now);
        if held.saturating_add(cost) <= limit {
            let mut d = self.decision(true, limit, now, cost, held + cost);
            d.reset_after = d.reset_after.max(ttl.max(1));
            return d;
        }
        self.decision(false, limit, now, cost, held)
    }

    /// The decision's numbers when the leases live at `now` hold `held`
    /// units.
    fn decision(&self, allowed: bool, limit: u64, now: u64, cost: u64, held: u64) -> Decision {
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(held),
            retry_after: (!allowed).then(|| self.wait_for(limit, now, cost, held)),
            reset_after: self.expires_at().saturating_sub(now),
        }
    }

    /// How long until `cost` fits if no lease is released: the live
    /// leases lapse soonest first until enough units are free (a walk of
    /// as many leases as must lapse, at most [`MAX_LEASES`]).
    fn wait_for(&self, limit: u64, now: u64, cost: u64, held: u64) -> u64 {
        let need = held.saturating_add(cost).saturating_sub(limit).max(1);
        let mut freed = 0u64;
        for l in self.live(now) {
            freed = freed.saturating_add(l.units());
            if freed >= need {
                return l.expires().saturating_sub(now);
            }
        }
        0
    }

    /// Ends lease `id`: true if it was live (its units are free now),
    /// false if unknown or already lapsed (releasing twice is harmless).
    pub fn release(&mut self, now: u64, id: &LeaseId) -> (bool, Lapsed) {
        let lapsed = self.expire(now);
        let Some(l) = self.get(id) else {
            return (false, lapsed);
        };
        self.remove(&l);
        (true, lapsed)
    }

    /// Makes live lease `id` lapse `ttl` from `now`: true if it was live,
    /// false (and nothing changes) if unknown or already lapsed.
    pub fn renew(&mut self, now: u64, id: &LeaseId, ttl: u64) -> (bool, Lapsed) {
        let lapsed = self.expire(now);
        let Some(l) = self.get(id) else {
            return (false, lapsed);
        };
        self.remove(&l);
        self.insert(Lease::new(l.id, now.saturating_add(ttl.max(1)), l.units()));
        (true, lapsed)
    }

    /// Every live lease at `now`, soonest to lapse first.
    pub fn list(&self, now: u64) -> Vec<Lease> {
        self.live(now).copied().collect()
    }

    /// Up to `count` leases live at `now` whose ids come after `after`
    /// (from the first when `None`), in id order, and the id to continue
    /// after if more may follow (`RL.LEASES ... CURSOR`). Walking by id, a
    /// lease held for the whole walk is listed exactly once, renewed or
    /// not. Costs O(log n + count) in the trees (plus the lapsed leases
    /// skipped).
    pub fn page(
        &self,
        now: u64,
        after: Option<&LeaseId>,
        count: usize,
    ) -> (Vec<Lease>, Option<LeaseId>) {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut page: Vec<Lease> = match &self.trees {
            Some(t) => t
                .by_id
                .range::<LeaseId, _>((from, Bound::Unbounded))
                .map(|(id, &packed)| Lease { id: *id, packed })
                .filter(|l| l.expires() > now)
                .take(count.saturating_add(1))
                .collect(),
            None => {
                let mut v: Vec<Lease> = self
                    .small
                    .iter()
                    .filter(|l| l.expires() > now && after.is_none_or(|a| { l.id } > *a))
                    .copied()
                    .collect();
                v.sort_unstable_by_key(|l| l.id);
                v.truncate(count.saturating_add(1));
                v
            }
        };
        if page.len() > count {
            page.truncate(count);
            let next = page.last().map(|l| l.id);
            return (page, next);
        }
        (page, None)
    }

    /// Rebuilds the leases from a snapshot's records, dropping those
    /// lapsed by `now` (a repeated id keeps its last record).
    pub fn from_leases(items: impl IntoIterator<Item = Lease>, now: u64) -> Leases {
        let mut leases = Leases::default();
        for l in items.into_iter().filter(|l| l.expires() > now) {
            if let Some(old) = leases.get(&{ l.id }) {
                leases.remove(&old);
            }
            leases.insert(l);
        }
        leases
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn id(n: u8) -> LeaseId {
        [n; ID_LEN]
    }

    #[test]
    fn admits_up_to_the_limit_then_waits_for_the_soonest_lapse() {
        let mut l = Leases::default();
        let t = 100 * S;
        for i in 0..5 {
            let (a, _) = l.acquire(5, (10 + i) * S, t, 1, id(i as u8)).unwrap();
            assert!(a.decision.allowed);
            assert_eq!(a.decision.remaining, 4 - i);
        }
        let (a, _) = l.acquire(5, 10 * S, t, 2, id(9)).unwrap();
        assert!(!a.decision.allowed);
        assert_eq!(a.decision.remaining, 0);
        // Two units free when the second-soonest lease lapses, at 11 s.
        assert_eq!(a.decision.retry_after, Some(11 * S));
        assert_eq!(a.decision.reset_after, 14 * S);
        assert_eq!(l.held(t), 5);
        // At 10 s the first holds nothing: one unit free.
        assert_eq!(l.held(t + 10 * S), 4);
        let (r, lapsed) = l.release(t + 10 * S, &id(1));
        assert!(r);
        assert_eq!(
            lapsed,
            Lapsed {
                leases: 1,
                units: 1
            }
        );
        assert_eq!(l.held(t + 10 * S), 3);
    }

    #[test]
    fn releases_and_renewals_of_unknown_or_lapsed_leases_change_nothing() {
        let mut l = Leases::default();
        l.acquire(3, S, 0, 1, id(1)).unwrap();
        let before = l.clone();
        assert!(!l.release(0, &id(2)).0);
        assert!(!l.renew(0, &id(2), S).0);
        assert_eq!(l, before);
        assert!(l.release(0, &id(1)).0);
        assert!(!l.release(0, &id(1)).0, "twice is harmless");
        l.acquire(3, S, 0, 1, id(3)).unwrap();
        assert!(!l.renew(S, &id(3), S).0, "lapsed at its expiry instant");
        assert!(l.is_empty());
    }

    /// A key's first lease takes room for itself alone; more grow the
    /// vector by a quarter, never doubling it.
    #[test]
    fn the_vector_holds_what_the_leases_need() {
        let mut l = Leases::default();
        l.acquire(100, S, 0, 1, id(0)).unwrap();
        assert_eq!(l.heap_bytes(), std::mem::size_of::<Lease>());
        for i in 1..SMALL as u8 {
            l.acquire(100, S, 0, 1, id(i)).unwrap();
            let room = l.heap_bytes() / std::mem::size_of::<Lease>();
            assert!(
                room <= l.len() + (l.len() / 4).max(4),
                "{room} for {}",
                l.len()
            );
        }
    }

    #[test]
    fn a_retried_acquire_holds_nothing_more() {
        let mut l = Leases::default();
        let (a, _) = l.acquire(2, S, 0, 2, id(7)).unwrap();
        assert!(a.decision.allowed && !a.existing);
        let (b, _) = l.acquire(2, S, 10, 2, id(7)).unwrap();
        assert!(b.decision.allowed && b.existing);
        assert_eq!(l.held(10), 2);
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn peek_changes_nothing_and_agrees_with_acquire() {
        let mut l = Leases::default();
        l.acquire(2, S, 0, 1, id(1)).unwrap();
        l.acquire(2, 3 * S, 0, 1, id(2)).unwrap();
        let before = l.clone();
        let p = l.peek(2, S, S, 1);
        assert_eq!(l, before);
        let (a, _) = l.clone().acquire(2, S, S, 1, id(3)).unwrap();
        assert_eq!(p, a.decision);
    }

    #[test]
    fn past_small_the_leases_move_to_trees_and_back() {
        let mut l = Leases::default();
        let n = SMALL as u64 + 1;
        for i in 0..n {
            // Later ids lapse sooner: the order is by expiry, not id.
            let (a, _) = l
                .acquire(1_000_000, (100 - i) * S, 0, 2, id(i as u8))
                .unwrap();
            assert!(a.decision.allowed);
        }
        let t = l.trees.as_ref().expect("past SMALL: the trees");
        assert!(l.small.is_empty());
        assert_eq!((t.by_expiry.len(), t.by_id.len()), (n as usize, n as usize));
        assert_eq!(l.held(0), 2 * n);
        assert_eq!(l.first().map(|x| x.id), Some(id(n as u8 - 1)));
        assert_eq!(l.expires_at(), 100 * S);
        // A retry finds its id through the index; a renewal moves it.
        let (a, _) = l.acquire(1_000_000, S, 0, 2, id(3)).unwrap();
        assert!(a.existing);
        assert!(l.renew(0, &id(3), 200 * S).0);
        assert_eq!(l.expires_at(), 200 * S);
        assert_eq!(l.live(0).last().map(|x| x.id), Some(id(3)));
        // Lapsing drops the soonest: ids n-1, n-2, ... (ttl 100-i s).
        let lapsed = l.expire(100 * S - (n - 5) * S);
        assert_eq!(lapsed.leases, 5);
        assert_eq!(l.len(), n as usize - 5);
        for i in 0..(n - 5 - DEMOTE_AT as u64) {
            assert!(l.release(0, &id(i as u8)).0, "{i}");
        }
        assert!(l.trees.is_none(), "back to the vector");
        assert_eq!(l.small.len(), DEMOTE_AT);
        assert!(l.small.windows(2).all(|w| w[0] < w[1]), "sorted");
        assert_eq!(l.held(0), 2 * DEMOTE_AT as u64);
    }

    #[test]
    fn a_key_holds_at_most_max_leases() {
        let big = |i: u32| {
            let mut b = [0u8; ID_LEN];
            b[..4].copy_from_slice(&i.to_le_bytes());
            b
        };
        let mut l = Leases::from_leases(
            (0..MAX_LEASES as u32).map(|i| Lease::new(big(i), 10 * S + i as u64 * MS, 1)),
            0,
        );
        assert_eq!(l.len(), MAX_LEASES);
        let limit = u64::MAX;
        assert_eq!(l.acquire(limit, S, 0, 1, id(0xff)), Err(Full));
        assert_eq!(l.len(), MAX_LEASES, "nothing held");
        // A retry of a held id still answers; a release makes room.
        assert!(l.acquire(limit, S, 0, 1, big(7)).unwrap().0.existing);
        assert!(l.release(0, &big(7)).0);
        let (a, _) = l.acquire(limit, S, 0, 1, id(0xff)).unwrap();
        assert!(a.decision.allowed && !a.existing);
        // Denied for units, the walk to the lapse that frees enough.
        let (d, _) = l.acquire(MAX_LEASES as u64, S, 0, 3, id(0xfe)).unwrap();
        // Three units: the 1 s lease, then the two soonest of the rest.
        assert!(!d.decision.allowed);
        assert_eq!(d.decision.retry_after, Some(10 * S + MS));
    }
}
