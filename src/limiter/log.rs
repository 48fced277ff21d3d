//! The exact sliding-window log (seeds 001 and 003), kept as a ring of
//! (timestamp, count) slots rather than one sorted-set member per request.
//!
//! - Equal timestamps coalesce into one slot, and a weighted request is one
//!   slot, never `cost` entries.
//! - The ring grows only as traffic needs it (never pre-allocated to
//!   `limit`); expired slots are dropped on access and the ring shrinks when
//!   mostly empty.
//! - `PRECISION d` rounds timestamps up to a multiple of `d` (seed 004's
//!   precision buckets), which bounds the ring at `period / d` slots.
//!
//! A slot is one packed `u64`: a 40-bit offset in microseconds from the
//! ring's base and a 24-bit count. That is 8 bytes per stored timestamp
//! (Redis's sorted set takes 42-136). Timestamps are rounded *up* to the
//! microsecond (or to `d`), so a request stays counted at least a full
//! `period`: rounding can only deny early, never admit more than `limit` in
//! any `period`-long interval.

use std::collections::VecDeque;

use super::{Decision, Params};

/// Time resolution of a slot, in nanoseconds.
pub const UNIT: u64 = 1_000;
const COUNT_BITS: u32 = 24;
const MAX_COUNT: u64 = (1 << COUNT_BITS) - 1;
const MAX_OFFSET: u64 = (1 << (64 - COUNT_BITS)) - 1;
/// Longest period the log supports: live slots must fit in half the offset
/// range so re-basing always succeeds (about 6.4 days).
pub const MAX_PERIOD: u64 = (MAX_OFFSET / 2) * UNIT;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct State {
    /// Base of the slot offsets, in `UNIT`s since the epoch.
    base: u64,
    /// Sum of the counts in `slots`.
    total: u64,
    /// Exact time (ns) of the newest admitted request: `reset_after` is
    /// measured from it, so a fresh key reports exactly one period rather
    /// than one period plus the rounding of its slot.
    newest: u64,
    /// Packed slots, oldest first.
    slots: VecDeque<u64>,
}

fn pack(offset: u64, count: u64) -> u64 {
    (offset << COUNT_BITS) | count
}

fn unpack(slot: u64) -> (u64, u64) {
    (slot >> COUNT_BITS, slot & MAX_COUNT)
}

impl State {
    /// Number of slots held (what memory the key costs).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Units counted in the window, as of the last access.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Heap bytes held by the ring.
    pub fn heap_size(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<u64>()
    }

    /// Timestamp (ns) of a slot.
    fn time_of(&self, slot: u64) -> u64 {
        (self.base + unpack(slot).0).saturating_mul(UNIT)
    }

    /// When the state stops mattering: the newest slot leaves the window.
    pub fn expires_at(&self, p: &Params) -> u64 {
        self.slots
            .back()
            .map_or(0, |&s| self.time_of(s).saturating_add(p.period()))
    }

    /// Drops slots that left the window `(now - period, now]`.
    fn expire(&mut self, now: u64, period: u64) {
        while let Some(&front) = self.slots.front() {
            if self.time_of(front).saturating_add(period) > now {
                break;
            }
            self.total -= unpack(front).1;
            self.slots.pop_front();
        }
        if self.slots.capacity() > 16 && self.slots.len() < self.slots.capacity() / 4 {
            self.slots.shrink_to(self.slots.len() * 2);
        }
    }

    /// Records `count` units at `ts` (in `UNIT`s), coalescing with the
    /// newest slot when the timestamp is the same.
    fn record(&mut self, ts: u64, mut count: u64) {
        if self.slots.is_empty() {
            self.base = ts;
        }
        if ts - self.base > MAX_OFFSET {
            self.rebase();
        }
        let offset = ts - self.base;
        self.total += count;
        if let Some(back) = self.slots.back_mut() {
            let (o, c) = unpack(*back);
            if o == offset {
                let add = count.min(MAX_COUNT - c);
                *back = pack(o, c + add);
                count -= add;
            }
        }
        while count > 0 {
            let add = count.min(MAX_COUNT);
            self.slots.push_back(pack(offset, add));
            count -= add;
        }
    }

    /// Moves the base up to the oldest slot so offsets fit again.
    fn rebase(&mut self) {
        let Some(&front) = self.slots.front() else {
            return;
        };
        let shift = unpack(front).0;
        self.base += shift;
        for s in self.slots.iter_mut() {
            let (o, c) = unpack(*s);
            *s = pack(o - shift, c);
        }
    }
}

/// The slot timestamp of a request at `now`, in `UNIT`s: rounded up to the
/// precision, so it is counted for at least a whole period.
fn stamp(now: u64, p: &Params) -> u64 {
    let q = p.precision.get().max(UNIT);
    let rounded = now.div_ceil(q).saturating_mul(q);
    rounded.div_ceil(UNIT)
}

/// Decides a request of `cost` at `now`; on admission, `state` records it.
/// `state` is always pruned of expired slots.
pub fn decide(state: &mut State, p: &Params, now: u64, cost: u64) -> Decision {
    let (limit, period) = (p.limit(), p.period());
    state.expire(now, period);
    let used = state.total;
    let allowed = used.saturating_add(cost) <= limit;
    if allowed {
        state.record(stamp(now, p), cost);
        state.newest = now;
    }
    let retry_after = (!allowed).then(|| {
        // Wait until enough of the oldest slots leave the window.
        let need = used + cost - limit;
        let mut freed = 0;
        for &slot in &state.slots {
            freed += unpack(slot).1;
            if freed >= need {
                return state.time_of(slot).saturating_add(period) - now;
            }
        }
        0
    });
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(state.total),
        retry_after,
        reset_after: if state.slots.is_empty() {
            0
        } else if p.precision.get() > UNIT {
            // Coarse slots: full again when the newest slot leaves.
            state.expires_at(p).saturating_sub(now)
        } else {
            state.newest.saturating_add(period).saturating_sub(now)
        },
    }
}

/// What `decide` would answer, without recording anything.
pub fn peek(state: &State, p: &Params, now: u64, cost: u64) -> Decision {
    let mut copy = state.clone();
    decide(&mut copy, p, now, cost)
}

/// Gives back up to `n` units, newest first.
pub fn refund(state: &mut State, p: &Params, now: u64, mut n: u64) {
    state.expire(now, p.period());
    while n > 0 {
        let Some(back) = state.slots.back_mut() else {
            break;
        };
        let (o, c) = unpack(*back);
        let take = n.min(c);
        n -= take;
        state.total -= take;
        if take == c {
            state.slots.pop_back();
        } else {
            *back = pack(o, c - take);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{check_moments, Moment};
    use std::num::NonZeroU64;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn params(limit: u64, period: u64) -> Params {
        Params::new(
            NonZeroU64::new(limit).unwrap(),
            NonZeroU64::new(period).unwrap(),
        )
    }

    /// (offset, cost, allowed, remaining, retry_after, reset_after)
    #[test]
    fn table_of_moments() {
        let p = params(3, 10 * S);
        let t0 = 1_700_000_000 * S;
        let mut st = State::default();
        let rows: &[Moment] = &[
            (0, 1, true, 2, None, 10 * S),
            (2 * S, 2, true, 0, None, 10 * S),
            (3 * S, 1, false, 0, Some(7 * S), 9 * S),
            (3 * S, 3, false, 0, Some(9 * S), 9 * S),
            // The first request leaves the window at +10 s exactly.
            (10 * S, 1, true, 0, None, 10 * S),
            (12 * S, 2, true, 0, None, 10 * S),
        ];
        check_moments(t0, rows, |now, cost| decide(&mut st, &p, now, cost));
    }

    #[test]
    fn equal_timestamps_coalesce_and_weights_are_one_slot() {
        let p = params(1_000, 60 * S);
        let mut st = State::default();
        for _ in 0..10 {
            decide(&mut st, &p, 5 * S, 1);
        }
        decide(&mut st, &p, 6 * S, 500);
        assert_eq!(st.slots(), 2);
        assert_eq!(st.total(), 510);
    }

    #[test]
    fn precision_bounds_the_ring() {
        let p = Params {
            precision: NonZeroU64::new(S).unwrap(),
            ..params(1_000_000, 60 * S)
        };
        let mut st = State::default();
        for i in 0..6_000 {
            decide(&mut st, &p, 1_000 * S + i * 10 * MS, 1);
        }
        assert!(st.slots() <= 61, "{} slots", st.slots());
    }

    #[test]
    fn ring_grows_with_traffic_not_limit() {
        let p = params(1_000_000, 60 * S);
        let mut st = State::default();
        decide(&mut st, &p, S, 1);
        assert!(st.slots.capacity() < 16);
    }

    #[test]
    fn huge_counts_split_across_slots() {
        let p = params(u64::MAX / 2, 60 * S);
        let mut st = State::default();
        let d = decide(&mut st, &p, S, MAX_COUNT * 2 + 5);
        assert!(d.allowed);
        assert_eq!(st.total(), MAX_COUNT * 2 + 5);
        assert_eq!(st.slots(), 3);
    }

    #[test]
    fn rebase_keeps_times() {
        let p = params(10, MAX_PERIOD);
        let mut st = State::default();
        decide(&mut st, &p, S, 1);
        let later = S + MAX_PERIOD - S;
        decide(&mut st, &p, later, 1);
        let far = later + MAX_PERIOD / 2;
        // The first slot expired, the second is still counted.
        let d = decide(&mut st, &p, far, 1);
        assert!(d.allowed);
        assert_eq!(st.total(), 2);
    }

    #[test]
    fn refund_newest_first_never_below_empty() {
        let p = params(10, 10 * S);
        let mut st = State::default();
        decide(&mut st, &p, S, 2);
        decide(&mut st, &p, 2 * S, 3);
        refund(&mut st, &p, 2 * S, 4);
        assert_eq!(st.total(), 1);
        assert_eq!(st.slots(), 1);
        refund(&mut st, &p, 2 * S, 100);
        assert_eq!(st.total(), 0);
    }
}
