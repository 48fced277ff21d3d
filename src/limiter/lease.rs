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
//! holds at most [`MAX_UNITS`]). The leases are kept in a vector
//! (concurrency limits are small; a scan is cheaper than a map's memory)
//! grown by a quarter at a time, so a live lease costs at most 30 bytes,
//! with the sum of their units and the earliest expiry alongside: an
//! operation on a key whose leases have not lapsed costs one comparison
//! before its scan for an id.

use super::Decision;

/// Bytes of a lease id.
pub const ID_LEN: usize = 16;

/// A lease's id: made by the server (random), or derived from the
/// client's own (`ID`), which makes a retried acquire idempotent.
pub type LeaseId = [u8; ID_LEN];

/// The most units one lease may hold.
pub const MAX_UNITS: u64 = (1 << UNIT_BITS) - 1;
const UNIT_BITS: u32 = 22;
const MS: u64 = 1_000_000;

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
}

/// The live leases of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leases {
    items: Vec<Lease>,
    /// Units held by `items`.
    held: u64,
    /// The earliest expiry in `items` (`u64::MAX` when empty).
    next_expiry: u64,
}

impl Default for Leases {
    fn default() -> Self {
        Leases {
            items: Vec::new(),
            held: 0,
            next_expiry: u64::MAX,
        }
    }
}

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
    /// Live leases, soonest to lapse first is not promised (insertion
    /// order); call after an operation at `now` or [`Leases::live`].
    pub fn iter(&self) -> impl Iterator<Item = &Lease> {
        self.items.iter()
    }

    /// The leases live at `now`.
    pub fn live(&self, now: u64) -> impl Iterator<Item = &Lease> {
        self.items.iter().filter(move |l| l.expires() > now)
    }

    /// Units held at `now`.
    pub fn held(&self, now: u64) -> u64 {
        if now < self.next_expiry {
            return self.held;
        }
        self.live(now).map(|l| l.units()).sum()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// When the last lease lapses (the key's TTL); 0 when none is held.
    pub fn expires_at(&self) -> u64 {
        self.items.iter().map(|l| l.expires()).max().unwrap_or(0)
    }

    /// Heap bytes the leases take (their vector's capacity).
    pub fn heap_bytes(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<Lease>()
    }

    /// Drops the leases lapsed at `now`.
    pub fn expire(&mut self, now: u64) -> Lapsed {
        if now < self.next_expiry || self.items.is_empty() {
            return Lapsed::default();
        }
        let mut lapsed = Lapsed::default();
        self.items.retain(|l| {
            let live = l.expires() > now;
            if !live {
                lapsed.leases += 1;
                lapsed.units += l.units();
            }
            live
        });
        self.held -= lapsed.units;
        self.reindex();
        // A burst of leases gone: give the memory back.
        if self.items.capacity() > 2 * self.items.len().max(4) {
            self.items.shrink_to(self.items.len().max(4));
        }
        lapsed
    }

    fn reindex(&mut self) {
        self.next_expiry = self
            .items
            .iter()
            .map(|l| l.expires())
            .min()
            .unwrap_or(u64::MAX);
    }

    fn find(&self, id: &LeaseId) -> Option<usize> {
        self.items.iter().position(|l| { l.id } == *id)
    }

    /// Takes `cost` units under `limit` for `ttl` from `now`, as lease
    /// `id`. Admitted if the units of the live leases plus `cost` fit
    /// `limit`; an `id` already live answers as admitted again and holds
    /// nothing more. `cost` is at most `limit` (the caller checks).
    pub fn acquire(
        &mut self,
        limit: u64,
        ttl: u64,
        now: u64,
        cost: u64,
        id: LeaseId,
    ) -> (Acquired, Lapsed) {
        let lapsed = self.expire(now);
        if self.find(&id).is_some() {
            return (
                Acquired {
                    decision: self.decision(true, limit, now, cost),
                    existing: true,
                },
                lapsed,
            );
        }
        let allowed = self.held.saturating_add(cost) <= limit;
        if allowed {
            let lease = Lease::new(id, now.saturating_add(ttl.max(1)), cost);
            if self.items.len() == self.items.capacity() {
                // A quarter more, not double: memory per lease stays near
                // its 24 bytes.
                self.items.reserve_exact((self.items.len() / 4).max(4));
            }
            self.items.push(lease);
            self.held += cost;
            self.next_expiry = self.next_expiry.min(lease.expires());
        }
        (
            Acquired {
                decision: self.decision(allowed, limit, now, cost),
                existing: false,
            },
            lapsed,
        )
    }

    /// What an acquire of `cost` for `ttl` would answer at `now` (as a
    /// new lease), changing nothing.
    pub fn peek(&self, limit: u64, ttl: u64, now: u64, cost: u64) -> Decision {
        let mut live = self.clone();
        live.expire(now);
        if live.held.saturating_add(cost) <= limit {
            live.held += cost;
            let expires = now.saturating_add(ttl.max(1));
            let mut d = live.decision(true, limit, now, cost);
            d.reset_after = d.reset_after.max(expires - now);
            return d;
        }
        live.decision(false, limit, now, cost)
    }

    /// The decision's numbers for the leases as they now are (expired
    /// ones dropped).
    fn decision(&self, allowed: bool, limit: u64, now: u64, cost: u64) -> Decision {
        Decision {
            allowed,
            limit,
            remaining: limit.saturating_sub(self.held),
            retry_after: (!allowed).then(|| self.wait_for(limit, now, cost)),
            reset_after: self.expires_at().saturating_sub(now),
        }
    }

    /// How long until `cost` fits if no lease is released: the leases
    /// lapse soonest first until enough units are free.
    fn wait_for(&self, limit: u64, now: u64, cost: u64) -> u64 {
        let need = self.held.saturating_add(cost).saturating_sub(limit).max(1);
        let mut by_expiry: Vec<(u64, u64)> = self
            .items
            .iter()
            .map(|l| (l.expires(), l.units()))
            .collect();
        by_expiry.sort_unstable();
        let mut freed = 0;
        for (expires, units) in by_expiry {
            freed += units;
            if freed >= need {
                return expires.saturating_sub(now);
            }
        }
        0
    }

    /// Ends lease `id`: true if it was live (its units are free now),
    /// false if unknown or already lapsed (releasing twice is harmless).
    pub fn release(&mut self, now: u64, id: &LeaseId) -> (bool, Lapsed) {
        let lapsed = self.expire(now);
        let Some(i) = self.find(id) else {
            return (false, lapsed);
        };
        let gone = self.items.swap_remove(i);
        self.held -= gone.units();
        if gone.expires() == self.next_expiry {
            self.reindex();
        }
        (true, lapsed)
    }

    /// Makes live lease `id` lapse `ttl` from `now`: true if it was live,
    /// false (and nothing changes) if unknown or already lapsed.
    pub fn renew(&mut self, now: u64, id: &LeaseId, ttl: u64) -> (bool, Lapsed) {
        let lapsed = self.expire(now);
        let Some(i) = self.find(id) else {
            return (false, lapsed);
        };
        let l = &mut self.items[i];
        *l = Lease::new(l.id, now.saturating_add(ttl.max(1)), l.units());
        self.reindex();
        (true, lapsed)
    }

    /// Every live lease at `now` (`RL.LEASES`), soonest to lapse first.
    pub fn list(&self, now: u64) -> Vec<Lease> {
        let mut v: Vec<Lease> = self.live(now).copied().collect();
        v.sort_unstable_by_key(|l| (l.expires(), l.id));
        v
    }

    /// Rebuilds the leases from a snapshot's records, dropping those
    /// lapsed by `now`.
    pub fn from_leases(items: impl IntoIterator<Item = Lease>, now: u64) -> Leases {
        let items: Vec<Lease> = items.into_iter().filter(|l| l.expires() > now).collect();
        let held = items.iter().map(|l| l.units()).sum();
        let mut leases = Leases {
            items,
            held,
            next_expiry: u64::MAX,
        };
        leases.reindex();
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
            let (a, _) = l.acquire(5, (10 + i) * S, t, 1, id(i as u8));
            assert!(a.decision.allowed);
            assert_eq!(a.decision.remaining, 4 - i);
        }
        let (a, _) = l.acquire(5, 10 * S, t, 2, id(9));
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
        l.acquire(3, S, 0, 1, id(1));
        let before = l.clone();
        assert!(!l.release(0, &id(2)).0);
        assert!(!l.renew(0, &id(2), S).0);
        assert_eq!(l, before);
        assert!(l.release(0, &id(1)).0);
        assert!(!l.release(0, &id(1)).0, "twice is harmless");
        l.acquire(3, S, 0, 1, id(3));
        assert!(!l.renew(S, &id(3), S).0, "lapsed at its expiry instant");
        assert!(l.is_empty());
    }

    #[test]
    fn a_retried_acquire_holds_nothing_more() {
        let mut l = Leases::default();
        let (a, _) = l.acquire(2, S, 0, 2, id(7));
        assert!(a.decision.allowed && !a.existing);
        let (b, _) = l.acquire(2, S, 10, 2, id(7));
        assert!(b.decision.allowed && b.existing);
        assert_eq!(l.held(10), 2);
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn peek_changes_nothing_and_agrees_with_acquire() {
        let mut l = Leases::default();
        l.acquire(2, S, 0, 1, id(1));
        l.acquire(2, 3 * S, 0, 1, id(2));
        let before = l.clone();
        let p = l.peek(2, S, S, 1);
        assert_eq!(l, before);
        let (a, _) = l.clone().acquire(2, S, S, 1, id(3));
        assert_eq!(p, a.decision);
    }
}
