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

/// The slots, oldest first. Narrow packs a 40-bit offset (in `UNIT`s from
/// `base`) and a 24-bit count into one `u64`; a key whose single request
/// weighs more than 2^24 - 1 units switches for good to wide slots of two
/// `u64`s, so a weighted request is always one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ring {
    Narrow(VecDeque<u64>),
    /// (timestamp in `UNIT`s since the epoch, count).
    Wide(VecDeque<(u64, u64)>),
}

impl Default for Ring {
    fn default() -> Self {
        Ring::Narrow(VecDeque::new())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct State {
    /// Base of the narrow slot offsets, in `UNIT`s since the epoch.
    base: u64,
    /// Sum of the counts in the ring.
    total: u64,
    /// Exact time (ns) of the newest admitted request: `reset_after` is
    /// measured from it, so a fresh key reports exactly one period rather
    /// than one period plus the rounding of its slot.
    newest: u64,
    ring: Ring,
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
        match &self.ring {
            Ring::Narrow(r) => r.len(),
            Ring::Wide(r) => r.len(),
        }
    }

    /// Units counted in the window, as of the last access.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Heap bytes held by the ring.
    pub fn heap_size(&self) -> usize {
        match &self.ring {
            Ring::Narrow(r) => r.capacity() * 8,
            Ring::Wide(r) => r.capacity() * 16,
        }
    }

    fn front(&self) -> Option<(u64, u64)> {
        match &self.ring {
            Ring::Narrow(r) => r.front().map(|&s| {
                let (o, c) = unpack(s);
                (self.base + o, c)
            }),
            Ring::Wide(r) => r.front().copied(),
        }
    }

    fn back(&self) -> Option<(u64, u64)> {
        match &self.ring {
            Ring::Narrow(r) => r.back().map(|&s| {
                let (o, c) = unpack(s);
                (self.base + o, c)
            }),
            Ring::Wide(r) => r.back().copied(),
        }
    }

    /// Every slot as (timestamp in `UNIT`s, count), oldest first.
    fn iter(&self) -> Box<dyn Iterator<Item = (u64, u64)> + '_> {
        match &self.ring {
            Ring::Narrow(r) => Box::new(r.iter().map(|&s| {
                let (o, c) = unpack(s);
                (self.base + o, c)
            })),
            Ring::Wide(r) => Box::new(r.iter().copied()),
        }
    }

    /// Every slot as (timestamp in `UNIT`s since the epoch, count), oldest
    /// first: what a snapshot keeps.
    pub fn slots_iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.iter()
    }

    /// Time (ns) of the newest admission.
    pub fn newest(&self) -> u64 {
        self.newest
    }

    /// Rebuilds a state from `slots_iter` and `newest`, as a snapshot
    /// loader does; `None` unless the slots are in order, non-empty, span
    /// at most the longest period, and their counts add up without
    /// overflow (so a crafted file cannot break the ring's invariants).
    pub fn restore(newest: u64, slots: &[(u64, u64)]) -> Option<State> {
        let (first, last) = match (slots.first(), slots.last()) {
            (Some(f), Some(l)) => (f.0, l.0),
            _ => return Some(State::default()),
        };
        if last.checked_sub(first)? > MAX_OFFSET / 2 {
            return None;
        }
        let mut s = State::default();
        let mut prev = first;
        for &(t, c) in slots {
            if c == 0 || t < prev {
                return None;
            }
            s.total.checked_add(c)?;
            s.record(t, c);
            prev = t;
        }
        s.newest = newest;
        Some(s)
    }

    fn pop_front(&mut self) {
        match &mut self.ring {
            Ring::Narrow(r) => {
                r.pop_front();
            }
            Ring::Wide(r) => {
                r.pop_front();
            }
        }
    }

    /// Sets the newest slot's count; 0 removes it.
    fn set_back_count(&mut self, count: u64) {
        match &mut self.ring {
            Ring::Narrow(r) => match (count, r.back_mut()) {
                (0, _) => {
                    r.pop_back();
                }
                (c, Some(back)) => *back = pack(unpack(*back).0, c),
                (_, None) => {}
            },
            Ring::Wide(r) => match (count, r.back_mut()) {
                (0, _) => {
                    r.pop_back();
                }
                (c, Some(back)) => back.1 = c,
                (_, None) => {}
            },
        }
    }

    /// Timestamp (ns) of a slot time in `UNIT`s.
    fn ns(units: u64) -> u64 {
        units.saturating_mul(UNIT)
    }

    /// When the state stops mattering: the newest slot leaves the window.
    pub fn expires_at(&self, p: &Params) -> u64 {
        self.back()
            .map_or(0, |(t, _)| Self::ns(t).saturating_add(p.period()))
    }

    /// Drops slots that left the window `(now - period, now]`.
    fn expire(&mut self, now: u64, period: u64) {
        while let Some((t, c)) = self.front() {
            if Self::ns(t).saturating_add(period) > now {
                break;
            }
            self.total -= c;
            self.pop_front();
        }
        match &mut self.ring {
            Ring::Narrow(r) if r.capacity() > 16 && r.len() < r.capacity() / 4 => {
                r.shrink_to(r.len() * 2)
            }
            Ring::Wide(r) if r.capacity() > 16 && r.len() < r.capacity() / 4 => {
                r.shrink_to(r.len() * 2)
            }
            _ => {}
        }
    }

    /// Records `count` units at `ts` (in `UNIT`s), coalescing with the
    /// newest slot when the timestamp is the same. Time only moves forward
    /// for a key: a stamp older than the newest slot (a finer `PRECISION`
    /// than before, a clock stepped back) is recorded at the newest slot,
    /// which counts it at least as long as its own time would.
    fn record(&mut self, ts: u64, count: u64) {
        let ts = self.back().map_or(ts, |(newest, _)| ts.max(newest));
        self.total += count;
        if let Some((t, c)) = self.back() {
            if t == ts && c.checked_add(count).is_some_and(|n| self.fits(n)) {
                self.set_back_count(c + count);
                return;
            }
        }
        if !self.fits(count) {
            self.widen();
        }
        if let Ring::Narrow(r) = &self.ring {
            if r.is_empty() {
                self.base = ts;
            } else if ts - self.base > MAX_OFFSET {
                self.rebase();
            }
        }
        let base = self.base;
        match &mut self.ring {
            Ring::Narrow(r) => r.push_back(pack(ts - base, count)),
            Ring::Wide(r) => r.push_back((ts, count)),
        }
    }

    /// Whether a slot of this count fits the current encoding.
    fn fits(&self, count: u64) -> bool {
        matches!(self.ring, Ring::Wide(_)) || count <= MAX_COUNT
    }

    /// Switches to wide slots.
    fn widen(&mut self) {
        if let Ring::Narrow(_) = self.ring {
            let wide: VecDeque<(u64, u64)> = self.iter().collect();
            self.ring = Ring::Wide(wide);
        }
    }

    /// Moves the narrow base up to the oldest slot so offsets fit again.
    fn rebase(&mut self) {
        let Ring::Narrow(r) = &mut self.ring else {
            return;
        };
        let Some(&front) = r.front() else {
            return;
        };
        let shift = unpack(front).0;
        self.base += shift;
        for s in r.iter_mut() {
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
    // Time only moves forward for a key: if the clock is behind the newest
    // admission, decide as of that admission.
    let now = now.max(state.newest);
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
        for (t, c) in state.iter() {
            freed += c;
            if freed >= need {
                return State::ns(t).saturating_add(period).saturating_sub(now);
            }
        }
        0
    });
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(state.total),
        retry_after,
        reset_after: if state.slots() == 0 {
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
    state.expire(now.max(state.newest), p.period());
    while n > 0 {
        let Some((_, c)) = state.back() else {
            break;
        };
        let take = n.min(c);
        n -= take;
        state.total -= take;
        state.set_back_count(c - take);
    }
    // The newest admission left is now at most the newest slot's time.
    state.newest = match state.back() {
        Some((t, _)) => state.newest.min(State::ns(t)),
        None => 0,
    };
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
        assert!(st.heap_size() < 16 * 8);
    }

    #[test]
    fn huge_counts_take_one_wide_slot() {
        let p = params(u64::MAX / 2, 60 * S);
        let mut st = State::default();
        decide(&mut st, &p, S, 3);
        let d = decide(&mut st, &p, 2 * S, MAX_COUNT * 2 + 5);
        assert!(d.allowed);
        assert_eq!(st.total(), MAX_COUNT * 2 + 8);
        assert_eq!(st.slots(), 2, "a weighted request is one slot");
        // Earlier narrow slots keep their times after widening.
        let later = decide(&mut st, &p, 61 * S, 1);
        assert!(later.allowed);
        assert_eq!(st.total(), MAX_COUNT * 2 + 6);
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
    fn time_only_moves_forward_for_a_key() {
        // A finer precision (or a clock stepped back) stamps an earlier
        // time than the newest slot: recorded at the newest slot instead.
        let coarse = Params {
            precision: NonZeroU64::new(10 * S).unwrap(),
            ..params(5, 60 * S)
        };
        let fine = params(5, 60 * S);
        let t0 = 10_000 * S;
        let mut st = State::default();
        decide(&mut st, &coarse, t0 + S, 1);
        let d = decide(&mut st, &fine, t0 + 2 * S, 1);
        assert!(d.allowed);
        assert_eq!(st.slots(), 1);
        assert_eq!(st.expires_at(&fine), t0 + 70 * S);
        // The clock an hour behind: no panic, nothing re-opened.
        let d = decide(&mut st, &fine, t0 - 3_600 * S, 3);
        assert!(d.allowed);
        assert!(!decide(&mut st, &fine, t0 - 3_600 * S, 1).allowed);
        assert!(d.reset_after <= 60 * S);
    }

    #[test]
    fn refund_moves_reset_back() {
        let p = params(3, 10 * S);
        let mut st = State::default();
        decide(&mut st, &p, 100 * S, 2);
        decide(&mut st, &p, 101 * S, 1);
        refund(&mut st, &p, 101 * S, 1);
        let d = decide(&mut st, &p, 101 * S, 2);
        assert!(!d.allowed);
        assert_eq!(d.reset_after, 9 * S);
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
