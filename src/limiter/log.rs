//! The exact sliding-window log (the sorted-set log of "Distributed Rate
//! Limiting with Redis and Lua: A Sliding Window Log Deep Dive" and
//! "Building a Sliding Window Rate Limiter in Redis"), kept as a ring of
//! (timestamp, count) slots rather than one sorted-set member per request.
//!
//! - Equal timestamps coalesce into one slot, and a weighted request is one
//!   slot, never `cost` entries.
//! - A key with one slot holds no heap block (the slot sits in the
//!   record); the ring grows by an eighth as traffic needs it (never
//!   pre-allocated to `limit`, never doubled); expired slots are dropped on
//!   access and the ring shrinks when mostly empty.
//! - `PRECISION d` rounds timestamps up to a multiple of `d` (the precision
//!   buckets of Josiah Carlson's "Introduction to rate limiting with Redis",
//!   part 2), which bounds the ring at `period / d` slots.
//! - A key holds at most [`MAX_SLOTS`] slots: parameters whose ring could
//!   outgrow it are refused before anything is held ([`max_slots`]), so one
//!   key can never take more than 8 MiB (16 MiB wide), and a read or a
//!   snapshot of it costs a bounded time.
//!
//! A slot is one packed `u64`: a 40-bit offset in microseconds from the
//! ring's base and a 24-bit count. That is 8 bytes per stored timestamp
//! (Redis's sorted set takes 42-136). Timestamps are rounded *up* to the
//! microsecond (or to `d`), so a request stays counted at least a full
//! `period`: rounding can only deny early, never admit more than `limit` in
//! any `period`-long interval.

use crate::clock::Nanos;

use super::{Decision, Params};

/// Time resolution of a slot, in nanoseconds.
pub const UNIT: u64 = 1_000;
const COUNT_BITS: u32 = 24;
const MAX_COUNT: u64 = (1 << COUNT_BITS) - 1;
const MAX_OFFSET: u64 = (1 << (64 - COUNT_BITS)) - 1;
/// Longest period the log supports: live slots must fit in half the offset
/// range so re-basing always succeeds (about 6.4 days).
pub const MAX_PERIOD: u64 = (MAX_OFFSET / 2) * UNIT;

/// Most slots one key's ring may hold: 8 MiB of narrow slots. Bounds what
/// one key can make the server hold, and how long a decision, a peek or a
/// snapshot spends on it.
pub const MAX_SLOTS: u64 = 1 << 20;

/// Words of the block's header: `base`, `total`, `newest`.
const HEADER: usize = 3;
const BASE: usize = 0;
const TOTAL: usize = 1;
const NEWEST: usize = 2;
/// `meta`'s top bit: the slots are wide.
const WIDE: u32 = 1 << 31;

/// The log of one key. Most keys of a lightly used limit hold one slot,
/// so a key with at most one (narrow) slot holds no heap block at all: its
/// newest admission and its slot sit inline in the 24 bytes
/// (`Repr::Inline`), the slot's time as a signed offset from the newest
/// admission. Two slots or more live in one heap block, so a decision
/// follows a single pointer from the table slot (`Repr::Ring`): a header (`base`, the narrow slots'
/// origin in `UNIT`s since the epoch; `total`, the sum of the counts;
/// `newest`, the exact time in ns of the newest admission, from which
/// `reset_after` is measured) and then a ring of slots, oldest first. A
/// narrow slot is one `u64` packing a 40-bit offset (in `UNIT`s from
/// `base`) and a 24-bit count; a key whose single request weighs more
/// than 2^24 - 1 units switches to wide slots of two words (timestamp in
/// `UNIT`s, count) for as long as it keeps a ring, so a weighted request
/// is always one slot. The whole state is 24 bytes, so with its key it
/// sits unboxed in the table slot.
#[derive(Clone)]
pub struct State(Repr);

#[derive(Clone)]
enum Repr {
    /// At most one narrow slot, no heap block: `slot` is 0 for none (a
    /// slot's count is never 0), else packed as a ring's but with its
    /// offset a signed 40-bit difference from `newest / UNIT`
    /// ([`one_slot`]); `total` is its count. `newest` is 0 for a key never
    /// written.
    Inline { newest: u64, slot: u64 },
    /// The heap block: header then `capacity * width` words of ring.
    Ring {
        block: Box<[u64]>,
        /// Ring position of the oldest slot.
        head: u32,
        /// Slots held, and `WIDE`.
        meta: u32,
    },
}

// The inline forms share the ring handle's 24 bytes (the box's non-null
// pointer is the variants' niche): `LogRec` stays 48 bytes.
const _: () = assert!(std::mem::size_of::<State>() == 24);

impl Default for State {
    fn default() -> Self {
        State(Repr::Inline { newest: 0, slot: 0 })
    }
}

impl PartialEq for State {
    /// The same log: header and slots, however they are held.
    fn eq(&self, other: &Self) -> bool {
        self.total() == other.total()
            && self.newest() == other.newest()
            && self.slots() == other.slots()
            && self.iter().eq(other.iter())
    }
}

impl Eq for State {}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("total", &self.total())
            .field("newest", &self.newest())
            .field("slots", &self.iter().collect::<Vec<_>>())
            .finish()
    }
}

fn pack(offset: u64, count: u64) -> u64 {
    (offset << COUNT_BITS) | count
}

fn unpack(slot: u64) -> (u64, u64) {
    (slot >> COUNT_BITS, slot & MAX_COUNT)
}

/// The inline slot of a request of `count` stamped `ts` (`UNIT`s) under
/// a newest admission at `newest` (ns), if it fits: a narrow count and a
/// time within 2^39 units either side of the newest admission (a slot is
/// never further than the period or the precision from it, so this only
/// fails for crafted snapshots).
fn one_slot(newest: u64, ts: u64, count: u64) -> Option<u64> {
    const HALF: i128 = 1 << 39;
    let delta = ts as i128 - (newest / UNIT) as i128;
    ((1..=MAX_COUNT).contains(&count) && (-HALF..HALF).contains(&delta))
        .then(|| pack(delta as u64 & MAX_OFFSET, count))
}

/// The (timestamp in `UNIT`s, count) of an inline slot.
fn one_get(newest: u64, slot: u64) -> (u64, u64) {
    let (offset, count) = unpack(slot);
    // Sign-extends the 40-bit offset.
    let delta = ((offset << COUNT_BITS) as i64) >> COUNT_BITS;
    ((newest / UNIT).wrapping_add_signed(delta), count)
}

impl State {
    fn header(&self, i: usize) -> u64 {
        match &self.0 {
            Repr::Inline { newest, .. } if i == NEWEST => *newest,
            Repr::Inline { slot: 0, .. } => 0,
            Repr::Inline { slot, .. } if i == TOTAL => unpack(*slot).1,
            Repr::Inline { newest, slot } => one_get(*newest, *slot).0,
            Repr::Ring { block, .. } => block.get(i).copied().unwrap_or(0),
        }
    }

    fn set_header(&mut self, i: usize, v: u64) {
        match &mut self.0 {
            Repr::Inline { newest, slot: 0 } if i == NEWEST => *newest = v,
            Repr::Inline { newest, slot } if i == NEWEST => {
                let (t, c) = one_get(*newest, *slot);
                match one_slot(v, t, c) {
                    Some(s) => (*newest, *slot) = (v, s),
                    None => self.ring()[i] = v,
                }
            }
            // The total an inline log has already.
            Repr::Inline { slot, .. } if i == TOTAL && v == unpack(*slot).1 => {}
            Repr::Ring { block, .. } => block[i] = v,
            _ => self.ring()[i] = v,
        }
    }

    /// The heap block, made from the inline forms if need be (with room
    /// for one more slot).
    fn ring(&mut self) -> &mut [u64] {
        if !matches!(self.0, Repr::Ring { .. }) {
            self.rebuild(self.slots() + 1, false);
        }
        match &mut self.0 {
            Repr::Ring { block, .. } => block,
            _ => unreachable!("rebuilt above"),
        }
    }

    /// Back to an inline form when the ring holds at most one narrow slot
    /// (its block given back): after every change a caller makes.
    fn settle(&mut self) {
        if !matches!(self.0, Repr::Ring { .. }) || self.slots() > 1 {
            return;
        }
        let newest = self.newest();
        match self.front() {
            None => self.0 = Repr::Inline { newest, slot: 0 },
            Some((t, c)) => {
                if let Some(slot) = one_slot(newest, t, c) {
                    self.0 = Repr::Inline { newest, slot };
                }
            }
        }
    }

    fn base(&self) -> u64 {
        self.header(BASE)
    }

    /// Time (ns) of the newest admission.
    pub fn newest(&self) -> u64 {
        self.header(NEWEST)
    }

    fn set_newest(&mut self, t: u64) {
        self.set_header(NEWEST, t);
    }

    /// Units counted in the window, as of the last access.
    pub fn total(&self) -> u64 {
        self.header(TOTAL)
    }

    fn set_total(&mut self, n: u64) {
        self.set_header(TOTAL, n);
    }

    fn meta(&self) -> u32 {
        match &self.0 {
            Repr::Inline { slot, .. } => (*slot != 0) as u32,
            Repr::Ring { meta, .. } => *meta,
        }
    }

    fn wide(&self) -> bool {
        self.meta() & WIDE != 0
    }

    fn width(&self) -> usize {
        1 + self.wide() as usize
    }

    /// Number of slots held (what memory the key costs).
    pub fn slots(&self) -> usize {
        (self.meta() & !WIDE) as usize
    }

    fn set_slots(&mut self, n: usize) {
        if let Repr::Ring { meta, .. } = &mut self.0 {
            *meta = (*meta & WIDE) | n as u32;
        }
    }

    /// Slots the ring has room for (an inline form: what it holds).
    fn capacity(&self) -> usize {
        match &self.0 {
            Repr::Ring { block, .. } => block.len().saturating_sub(HEADER) / self.width(),
            _ => self.slots(),
        }
    }

    /// Heap bytes held by the block.
    pub fn heap_size(&self) -> usize {
        match &self.0 {
            Repr::Ring { block, .. } => block.len() * 8,
            _ => 0,
        }
    }

    fn head(&self) -> usize {
        match &self.0 {
            Repr::Ring { head, .. } => *head as usize,
            _ => 0,
        }
    }

    /// Word index in the ring's block of logical slot `i` (0 = oldest).
    fn word(&self, i: usize) -> usize {
        HEADER + (self.head() + i) % self.capacity() * self.width()
    }

    /// Logical slot `i` as (timestamp in `UNIT`s, count).
    fn get(&self, i: usize) -> (u64, u64) {
        match &self.0 {
            Repr::Ring { block, .. } => {
                let w = self.word(i);
                if self.wide() {
                    (block[w], block[w + 1])
                } else {
                    let (o, c) = unpack(block[w]);
                    (self.base() + o, c)
                }
            }
            Repr::Inline { newest, slot } => one_get(*newest, *slot),
        }
    }

    fn front(&self) -> Option<(u64, u64)> {
        (self.slots() > 0).then(|| self.get(0))
    }

    fn back(&self) -> Option<(u64, u64)> {
        self.slots().checked_sub(1).map(|i| self.get(i))
    }

    /// Every slot as (timestamp in `UNIT`s, count), oldest first.
    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.slots()).map(|i| self.get(i))
    }

    /// Every slot as (timestamp in `UNIT`s since the epoch, count), oldest
    /// first: what a snapshot keeps.
    pub fn slots_iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.iter()
    }

    /// Rebuilds a state from `slots_iter` and `newest`, as a snapshot
    /// loader does; `None` unless the slots are in order, non-empty, span
    /// at most the longest period, and their counts add up without
    /// overflow (so a crafted file cannot break the ring's invariants).
    pub fn restore(newest: u64, slots: &[(u64, u64)]) -> Option<State> {
        let (first, last) = match (slots.first(), slots.last()) {
            (Some(f), Some(l)) => (f.0, l.0),
            _ => {
                let mut s = State::default();
                s.set_newest(newest);
                return Some(s);
            }
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
            s.total().checked_add(c)?;
            s.record(t, c);
            prev = t;
        }
        s.set_newest(newest);
        s.settle();
        Some(s)
    }

    /// Moves the slots, oldest first, into a new block with room for
    /// `capacity` slots (of the width `wide` says), keeping the header.
    fn rebuild(&mut self, capacity: usize, wide: bool) {
        let width = 1 + wide as usize;
        let mut block = vec![0u64; HEADER + capacity * width].into_boxed_slice();
        block[..HEADER].copy_from_slice(&[self.base(), self.total(), self.newest()]);
        for (i, (t, c)) in self.iter().enumerate() {
            let w = HEADER + i * width;
            if wide {
                block[w] = t;
                block[w + 1] = c;
            } else {
                block[w] = pack(t - self.base(), c);
            }
        }
        let n = self.slots() as u32;
        self.0 = Repr::Ring {
            block,
            head: 0,
            meta: if wide { WIDE | n } else { n },
        };
    }

    /// Room for one more slot: capacity grows by an eighth (at least two
    /// slots) as traffic needs it, never pre-sized to `limit`.
    fn reserve_one(&mut self) {
        if self.slots() == self.capacity() || !matches!(self.0, Repr::Ring { .. }) {
            self.rebuild(self.grown_capacity(), self.wide());
        }
    }

    /// The capacity the ring grows to when full: an eighth more, at least
    /// two slots, within [`MAX_SLOTS`] (but never below what it holds: a
    /// ring restored from an older snapshot may be larger). An eighth
    /// rather than double keeps a long log within 12% of its slots' 8
    /// bytes each, for a copy of the ring every eighth of its growth.
    fn grown_capacity(&self) -> usize {
        let c = self.capacity();
        (c + (c / 8).max(2))
            .min(MAX_SLOTS as usize)
            .max(self.slots() + 1)
    }

    /// Heap bytes the next new slot would allocate: the new block, while
    /// the old one is still held (0 while the ring has room, or while the
    /// log is empty: its first slot is inline).
    pub fn growth(&self) -> usize {
        match &self.0 {
            Repr::Inline { slot: 0, .. } => 0,
            Repr::Inline { .. } => (HEADER + self.grown_capacity()) * 8,
            Repr::Ring { .. } if self.slots() < self.capacity() => 0,
            Repr::Ring { .. } => (HEADER + self.grown_capacity() * self.width()) * 8,
        }
    }
    /// Whether a request stamped `ts` can be recorded: it joins the newest
    /// slot, or the ring is below [`MAX_SLOTS`].
    fn has_room(&self, ts: u64, count: u64) -> bool {
        if (self.slots() as u64) < MAX_SLOTS {
            return true;
        }
        let ts = self.back().map_or(ts, |(newest, _)| ts.max(newest));
        self.back()
            .is_some_and(|(t, c)| t == ts && c.checked_add(count).is_some_and(|n| self.fits(n)))
    }

    /// When the state stops mattering: the newest slot leaves the window.
    pub fn expires_at(&self, p: &Params) -> u64 {
        self.back()
            .map_or(0, |(t, _)| Self::ns(t).saturating_add(p.period()))
    }

    /// Timestamp (ns) of a slot time in `UNIT`s.
    fn ns(units: u64) -> u64 {
        units.saturating_mul(UNIT)
    }

    /// Drops the oldest slot (and its count from the total).
    fn pop_front(&mut self) {
        let Some((_, c)) = self.front() else {
            return;
        };
        let (total, capacity) = (self.total() - c, self.capacity());
        match &mut self.0 {
            Repr::Inline { slot, .. } => *slot = 0,
            Repr::Ring { head, meta, block } => {
                *head = ((*head as usize + 1) % capacity) as u32;
                *meta -= 1;
                block[TOTAL] = total;
            }
        }
    }

    /// Sets the newest slot's count (and the total with it); 0 removes it.
    fn set_back_count(&mut self, count: u64) {
        let Some((_, old)) = self.back() else {
            return;
        };
        let total = self.total() - old + count;
        if let Repr::Inline { slot, .. } = &mut self.0 {
            *slot = match count {
                0 => 0,
                _ => pack(unpack(*slot).0, count),
            };
            return;
        }
        let last = self.slots() - 1;
        if count == 0 {
            self.set_slots(last);
        } else {
            let (w, wide) = (self.word(last), self.wide());
            let block = self.ring();
            if wide {
                block[w + 1] = count;
            } else {
                block[w] = pack(unpack(block[w]).0, count);
            }
        }
        self.set_total(total);
    }

    /// Drops slots that left the window `(now - period, now]`, and gives
    /// back most of a ring that emptied.
    fn expire(&mut self, now: u64, period: u64) {
        while let Some((t, _)) = self.front() {
            if Self::ns(t).saturating_add(period) > now {
                break;
            }
            self.pop_front();
        }
        if self.capacity() > 16 && self.slots() < self.capacity() / 4 {
            self.rebuild(self.slots() * 2, self.wide());
        }
    }

    /// Records `count` units at `ts` (in `UNIT`s), coalescing with the
    /// newest slot when the timestamp is the same. Time only moves forward
    /// for a key: a stamp older than the newest slot (a finer `PRECISION`
    /// than before, a clock stepped back) is recorded at the newest slot,
    /// which counts it at least as long as its own time would.
    fn record(&mut self, ts: u64, count: u64) {
        let ts = self.back().map_or(ts, |(newest, _)| ts.max(newest));
        if let Some((t, c)) = self.back() {
            if t == ts && c.checked_add(count).is_some_and(|n| self.fits(n)) {
                self.set_back_count(c + count);
                return;
            }
        }
        // An empty log's first slot goes inline.
        if let Repr::Inline { newest, slot: 0 } = self.0 {
            if let Some(slot) = one_slot(newest, ts, count) {
                self.0 = Repr::Inline { newest, slot };
                return;
            }
        }
        let total = self.total() + count;
        if !self.fits(count) {
            self.rebuild(self.capacity().max(1), true);
        }
        self.reserve_one();
        if !self.wide() {
            if self.slots() == 0 {
                self.ring()[BASE] = ts;
            } else if ts - self.base() > MAX_OFFSET {
                self.rebase();
            }
        }
        let (w, wide, base) = (self.word(self.slots()), self.wide(), self.base());
        let block = self.ring();
        if wide {
            block[w] = ts;
            block[w + 1] = count;
        } else {
            block[w] = pack(ts - base, count);
        }
        block[TOTAL] = total;
        self.set_slots(self.slots() + 1);
    }

    /// Whether a slot of this count fits the current encoding.
    fn fits(&self, count: u64) -> bool {
        self.wide() || count <= MAX_COUNT
    }

    /// Moves the narrow base up to the oldest slot so offsets fit again.
    fn rebase(&mut self) {
        let Some((oldest, _)) = self.front() else {
            return;
        };
        let shift = oldest - self.base();
        self.ring()[BASE] = oldest;
        for k in 0..self.slots() {
            let w = self.word(k);
            let block = self.ring();
            let (o, c) = unpack(block[w]);
            block[w] = pack(o - shift, c);
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

/// The most slots a ring can need under `p`: one per admission (so at
/// most `limit`), and one per distinct stamp in a window, which are
/// multiples of the precision in `(now - period, now + precision]`.
pub fn max_slots(p: &Params) -> u64 {
    let q = p.precision.get().max(UNIT);
    p.limit().min(p.period().div_ceil(q).saturating_add(1))
}

/// The coarsest `PRECISION` (ns) under which `p`'s ring fits [`MAX_SLOTS`],
/// rounded up to a millisecond: what an error suggests.
pub fn precision_to_fit(p: &Params) -> u64 {
    let q = p.period().div_ceil(MAX_SLOTS - 1);
    q.div_ceil(1_000_000) * 1_000_000
}

/// Decides a request of `cost` at `now`; on admission, `state` records it.
/// `state` is always pruned of expired slots.
pub fn decide(state: &mut State, p: &Params, now: u64, cost: u64) -> Decision {
    let (limit, period) = (p.limit(), p.period());
    // Time only moves forward for a key: if the clock is behind the newest
    // admission, decide as of that admission.
    let now = now.max(state.newest());
    state.expire(now, period);
    let used = state.total();
    let ts = stamp(now, p);
    let allowed = used.saturating_add(cost) <= limit && state.has_room(ts, cost);
    if allowed {
        state.record(ts, cost);
        state.set_newest(now);
    }
    state.settle();
    let retry_after = (!allowed).then(|| retry_after(state.iter(), used, cost, p, now));
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(state.total()),
        retry_after,
        reset_after: if state.slots() == 0 {
            0
        } else if p.precision.get() > UNIT {
            // Coarse slots: full again when the newest slot leaves.
            state.expires_at(p).saturating_sub(now)
        } else {
            state.newest().saturating_add(period).saturating_sub(now)
        },
    }
}

/// How long a denied request of `cost` waits: until enough of the oldest
/// live `slots` leave the window (or, with the ring full, the oldest one).
fn retry_after(
    slots: impl Iterator<Item = (u64, u64)>,
    used: u64,
    cost: u64,
    p: &Params,
    now: u64,
) -> u64 {
    let need = (used + cost).saturating_sub(p.limit()).max(1);
    let mut freed = 0;
    for (t, c) in slots {
        freed += c;
        if freed >= need {
            return State::ns(t).saturating_add(p.period()).saturating_sub(now);
        }
    }
    0
}

/// What `decide` would answer, without recording anything: reads the
/// ring in place, never copies it (a peek at a full ring would otherwise
/// allocate and copy 8 MiB).
pub fn peek(state: &State, p: &Params, now: u64, cost: u64) -> Decision {
    let (limit, period) = (p.limit(), p.period());
    let now = now.max(state.newest());
    // The slots `decide` would expire, left in place.
    let expired = state
        .iter()
        .take_while(|&(t, _)| State::ns(t).saturating_add(period) <= now)
        .count();
    let expired_units: u64 = state.iter().take(expired).map(|(_, c)| c).sum();
    let live = || state.iter().skip(expired);
    let used = state.total() - expired_units;
    let live_slots = state.slots() - expired;
    let ts = stamp(now, p);
    let newest_slot = if live_slots > 0 { state.back() } else { None };
    let joins = newest_slot
        .is_some_and(|(t, c)| t == ts.max(t) && c.checked_add(cost).is_some_and(|n| state.fits(n)));
    let allowed = used.saturating_add(cost) <= limit && ((live_slots as u64) < MAX_SLOTS || joins);
    let total = if allowed { used + cost } else { used };
    let reset_after = if allowed {
        if p.precision.get() > UNIT {
            let newest = newest_slot.map_or(ts, |(t, _)| ts.max(t));
            State::ns(newest).saturating_add(period).saturating_sub(now)
        } else {
            period
        }
    } else if live_slots == 0 {
        0
    } else if p.precision.get() > UNIT {
        newest_slot
            .map_or(0, |(t, _)| State::ns(t).saturating_add(period))
            .saturating_sub(now)
    } else {
        state.newest().saturating_add(period).saturating_sub(now)
    };
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(total),
        retry_after: (!allowed).then(|| retry_after(live(), used, cost, p, now)),
        reset_after,
    }
}

/// Gives back up to `n` units, newest first.
pub fn refund(state: &mut State, p: &Params, now: u64, mut n: u64) {
    state.expire(now.max(state.newest()), p.period());
    while n > 0 {
        let Some((_, c)) = state.back() else {
            break;
        };
        let take = n.min(c);
        n -= take;
        state.set_back_count(c - take);
    }
    // The newest admission left is now at most the newest slot's time.
    let newest = match state.back() {
        Some((t, _)) => state.newest().min(State::ns(t)),
        None => 0,
    };
    state.set_newest(newest);
    state.settle();
}

impl super::Limiter for State {
    const ALGORITHM: super::Algorithm = super::Algorithm::Log;
    fn decide(&mut self, p: &Params, now: Nanos, cost: u64) -> Decision {
        decide(self, p, now.0, cost)
    }
    fn peek(&self, p: &Params, now: Nanos, cost: u64) -> Decision {
        peek(self, p, now.0, cost)
    }
    fn refund(&mut self, p: &Params, now: Nanos, n: u64) {
        refund(self, p, now.0, n)
    }
    fn expires_at(&self, p: &Params) -> Nanos {
        Nanos(State::expires_at(self, p))
    }
    fn growth(&self) -> usize {
        State::growth(self)
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

    #[test]
    fn a_full_ring_denies_until_its_oldest_slot_leaves() {
        // Mixed parameters can fill a ring that no single call's bound
        // would: the cap still holds, as a denial.
        let p = params(u64::MAX / 4, 6 * 86_400 * S);
        let t0 = 1_000 * S;
        let slots: Vec<(u64, u64)> = (0..MAX_SLOTS).map(|i| (t0 / UNIT + i, 1)).collect();
        let mut st = State::restore(t0 + (MAX_SLOTS - 1) * UNIT, &slots).unwrap();
        let now = t0 + MAX_SLOTS * UNIT + S;
        let d = decide(&mut st, &p, now, 1);
        assert!(!d.allowed);
        assert_eq!(st.slots() as u64, MAX_SLOTS);
        assert_eq!(d.retry_after, Some(t0 + p.period() - now));
        assert_eq!(peek(&st, &p, now, 1), d);
        // Joining the newest slot needs no room.
        let last = st.newest();
        let same = decide(&mut st, &p, last, 1);
        assert!(same.allowed);
        assert_eq!(st.slots() as u64, MAX_SLOTS);
    }

    #[test]
    fn growth_is_what_the_next_slot_allocates() {
        let p = params(100, 60 * S);
        let mut st = State::default();
        // The first slot is inline.
        assert_eq!(st.growth(), 0);
        decide(&mut st, &p, S, 1);
        assert_eq!(st.heap_size(), 0);
        // The second takes a ring of three.
        assert_eq!(st.growth(), (HEADER + 3) * 8);
        decide(&mut st, &p, S + MS, 1);
        assert_eq!(st.heap_size(), (HEADER + 3) * 8);
        let mut grew = Vec::new();
        for i in 2..100 {
            let (before, growth) = (st.heap_size(), st.growth());
            decide(&mut st, &p, S + i * MS, 1);
            // What growth announced is the block the ring moved to.
            assert_eq!(growth == 0, st.heap_size() == before, "at {i}");
            if growth > 0 {
                assert_eq!(st.heap_size(), growth);
                grew.push(st.capacity());
            }
        }
        // By an eighth, at least two: 100 slots sit in 103.
        assert_eq!(grew[..3], [5, 7, 9]);
        assert_eq!(grew[grew.len() - 3..], [82, 92, 103]);
    }

    #[test]
    fn one_slot_is_inline_and_back_after_expiry() {
        let p = params(10, 10 * S);
        let t0 = 1_700_000_000 * S;
        let mut st = State::default();
        decide(&mut st, &p, t0, 3);
        assert_eq!((st.slots(), st.total(), st.heap_size()), (1, 3, 0));
        // Coalescing keeps it inline.
        decide(&mut st, &p, t0, 1);
        assert_eq!((st.slots(), st.total(), st.heap_size()), (1, 4, 0));
        decide(&mut st, &p, t0 + 2 * S, 1);
        assert_eq!((st.slots(), st.total()), (2, 5));
        assert!(st.heap_size() > 0);
        // The first slot leaves: one left, the block given back.
        let d = decide(&mut st, &p, t0 + 10 * S + UNIT, 1);
        assert!(d.allowed);
        assert_eq!(
            (st.slots(), st.total(), st.heap_size()),
            (2, 2, (HEADER + 3) * 8)
        );
        // Expiry alone (a refund of nothing) settles it.
        refund(&mut st, &p, t0 + 12 * S + UNIT, 0);
        assert_eq!((st.slots(), st.total(), st.heap_size()), (1, 1, 0));
        assert_eq!(st.expires_at(&p), t0 + 20 * S + UNIT);
        // A refund empties it, inline.
        refund(&mut st, &p, t0 + 12 * S + UNIT, 5);
        assert_eq!((st.slots(), st.total(), st.heap_size()), (0, 0, 0));
        // A weighted request too heavy for a narrow slot takes a wide ring.
        let big = params(u64::MAX / 2, 10 * S);
        decide(&mut st, &big, t0 + 20 * S, MAX_COUNT + 1);
        assert_eq!((st.slots(), st.total()), (1, MAX_COUNT + 1));
        assert!(st.heap_size() > 0);
    }

    #[test]
    fn restore_round_trips_every_form() {
        let t0 = 1_700_000_000 * S;
        for slots in [
            vec![],
            vec![(t0 / UNIT, 4)],
            vec![(t0 / UNIT, 4), (t0 / UNIT + 9, 1)],
        ] {
            let st = State::restore(t0 + 9 * UNIT, &slots).unwrap();
            assert_eq!(st.slots_iter().collect::<Vec<_>>(), slots);
            assert_eq!(st.newest(), t0 + 9 * UNIT);
            assert_eq!(st.heap_size() == 0, slots.len() <= 1);
        }
        // A slot far from its newest admission (a crafted file) is kept
        // in a ring rather than lost.
        let far = State::restore(t0, &[(t0 / UNIT + (1 << 39), 1)]).unwrap();
        assert_eq!(far.slots_iter().next(), Some((t0 / UNIT + (1 << 39), 1)));
        assert!(far.heap_size() > 0);
    }

    #[test]
    fn max_slots_and_the_precision_that_fits() {
        assert_eq!(max_slots(&params(10, 60 * S)), 10);
        let day = 86_400 * S;
        let p = params(1_000_000_000, day);
        assert_eq!(max_slots(&p), 1_000_000_000);
        let q = precision_to_fit(&p);
        assert_eq!(q, 83 * MS);
        let fits = Params {
            precision: NonZeroU64::new(q).unwrap(),
            ..p
        };
        assert!(max_slots(&fits) <= MAX_SLOTS);
        let coarser = Params {
            precision: NonZeroU64::new(q - MS).unwrap(),
            ..p
        };
        assert!(max_slots(&coarser) > MAX_SLOTS);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn arb_params() -> impl Strategy<Value = Params> {
            (
                1u64..50,
                1u64..20,
                prop::sample::select(vec![1, MS, 250 * MS, S]),
            )
                .prop_map(|(limit, secs, q)| Params {
                    precision: NonZeroU64::new(q.min(secs * S)).unwrap(),
                    ..params(limit, secs * S)
                })
        }

        proptest! {
            /// `peek` answers what `decide` would, without the copy, and
            /// no ring outgrows `max_slots` of the parameters it runs under.
            #[test]
            fn peek_matches_decide_and_rings_stay_bounded(
                p in arb_params(),
                steps in prop::collection::vec((0u64..3_000, 1u64..5, any::<bool>()), 1..200),
            ) {
                let mut st = State::default();
                let mut now = 1_000 * S;
                for (gap_ms, cost, refund_one) in steps {
                    now += gap_ms * MS;
                    let cost = cost.min(p.limit());
                    let peeked = peek(&st, &p, now, cost);
                    let decided = decide(&mut st, &p, now, cost);
                    prop_assert_eq!(peeked, decided);
                    prop_assert!(st.slots() as u64 <= max_slots(&p));
                    if refund_one {
                        refund(&mut st, &p, now, 1);
                    }
                }
            }
        }
    }
}
