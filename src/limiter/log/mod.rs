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
//! A slot takes one of three forms, the same for a whole ring:
//!
//! - compact, 4 bytes: a 32-bit offset in microseconds from the ring's
//!   base, count 1. A ring is compact while every slot counts 1 and its
//!   live slots span at most [`COMPACT_SPAN`] (about 63.6 minutes), which
//!   is what a log of single requests under a period of up to an hour
//!   holds: 4 bytes per stored timestamp.
//! - narrow, 8 bytes: a 40-bit offset and a 24-bit count.
//! - wide, 16 bytes: the timestamp and the count, each a word.
//!
//! Redis's sorted set takes 42-136 bytes per timestamp. Timestamps are
//! rounded *up* to the microsecond (or to `d`), so a request stays counted
//! at least a full `period`: rounding can only deny early, never admit more
//! than `limit` in any `period`-long interval.

use crate::clock::Nanos;

use super::contract::{
    put_u64, Decision, Fields, Params, SpecError, StateBytes, Storage, MAX_USAGE,
};

mod slots;
use slots::{
    block_words, pack, unpack, Block, Form, BASE, COUNT_BITS, FORM, HEADER, MAX_COUNT, MAX_OFFSET,
    NEWEST, TOTAL,
};

/// Time resolution of a slot, in nanoseconds.
pub const UNIT: u64 = 1_000;
/// Longest period the log supports: live slots must fit in half the offset
/// range so re-basing always succeeds (about 6.4 days).
pub const MAX_PERIOD: u64 = (MAX_OFFSET / 2) * UNIT;

/// Most slots one key's ring may hold: 8 MiB of narrow slots. Bounds what
/// one key can make the server hold, and how long a decision, a peek or a
/// snapshot spends on it.
pub const MAX_SLOTS: u64 = 1 << 20;

/// Widest span, in `UNIT`s, from a compact ring's oldest slot to a new
/// one for which the ring re-bases rather than turning narrow: eight
/// ninths of the 32-bit offset range (3,817,748,706 units, about 63.6
/// minutes; any period up to that qualifies, an hour included).
/// `2^32 / 9 * 8`: 3,817,748,704.
///
/// Re-basing moves the base to the oldest slot and rewrites every slot,
/// so it must stay rare. A re-base at stamp `s` with the oldest slot at
/// least `s - COMPACT_SPAN` leaves the newest offset at most
/// `COMPACT_SPAN`, so the next one comes no sooner than `s + 2^32 / 9`
/// (room of more than an eighth of the span, about 7.95 minutes later),
/// and a slot takes part only in re-bases within `COMPACT_SPAN` of its own
/// time: at most 8 for any slot, whatever the parameters, so re-basing is
/// amortized O(1) per recorded slot. The rule reads only the ring (the
/// parameters may change from one request to the next, and a snapshot
/// loader has none): a wider span turns the ring narrow, once, which is
/// O(1) per slot it recorded too.
pub const COMPACT_SPAN: u64 = (1 << 32) / 9 * 8;

/// The log of one key. Most keys of a lightly used limit hold one slot,
/// so a key with at most one (narrow) slot holds no heap block at all: its
/// newest admission and its slot sit inline in the 24 bytes
/// (`Repr::Inline`), the slot's time as a signed offset from the newest
/// admission. Two slots or more live in one heap block, so a decision
/// follows a single pointer from the table slot (`Repr::Ring`): a header
/// (`base`, the compact and narrow slots' origin in `UNIT`s since the
/// epoch; `total`, the sum of the counts; `newest`, the exact time in ns
/// of the newest admission, from which `reset_after` is measured) and then
/// a ring of slots, oldest first, all of one [`Form`]. A new ring is
/// compact if its slots count 1; it turns narrow (once, O(n)) when a slot
/// needs a count above 1 (an equal timestamp coalesced, a weighted
/// request, a `PRECISION` bucket's second request) or its span outgrows
/// [`COMPACT_SPAN`], and wide when a single request weighs more than
/// 2^24 - 1 units, so a weighted request is always one slot. The whole
/// state is 24 bytes, so with its key it sits unboxed in the table slot.
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
    /// The heap block: header then `form.words(capacity)` words of ring.
    Ring {
        block: Block,
        /// Ring position of the oldest slot.
        head: u32,
        /// Slots held, and the form's bits (`WIDE`, `COMPACT`).
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

/// Slots a ring's block holds in `form`.
fn ring_capacity(form: Form, block: &[u64]) -> usize {
    form.slots(block.len().saturating_sub(HEADER))
}

/// A ring position past the end (`p` below twice the capacity: the head
/// plus a logical index) brought back to the start: a subtraction, not a
/// division, on every slot read.
fn wrap(p: usize, capacity: usize) -> usize {
    debug_assert!(p < 2 * capacity.max(1));
    if p >= capacity {
        p - capacity
    } else {
        p
    }
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
    /// Calls `read` with `hold(view)`, the view being this log reading its
    /// ring in place rather than a copy: for a reader handed the log by
    /// reference as part of a value it builds (the store's entry, for
    /// `TTL`, `RL.PEEK`, `SCAN`, snapshots), which would otherwise copy a
    /// heap block per read. The view never frees the ring, so dropping
    /// it (also while a panic unwinds) leaves this log whole; a change
    /// made through it, or a clone of it, first copies the ring.
    ///
    /// Safe whatever `hold` and `read` do: the view cannot outlive the
    /// call. One that escapes it (stashed by `hold`, moved out of the
    /// holder through a cell, forgotten) is still counted live when the
    /// call ends, and the process aborts rather than let it read a ring
    /// that may then be changed or freed.
    pub fn with_view<H, R>(&self, hold: impl FnOnce(State) -> H, read: impl FnOnce(&H) -> R) -> R {
        /// Aborts unless every view made since it was made is gone.
        struct NoneEscaped(isize);
        impl Drop for NoneEscaped {
            fn drop(&mut self) {
                if slots::live_views() != self.0 {
                    std::process::abort();
                }
            }
        }
        let check = NoneEscaped(slots::live_views());
        // SAFETY: `self` is borrowed shared for the whole call, so its
        // ring is neither changed nor freed while the view reads it; the
        // view is dropped (in `held`) before `check`, which stops the
        // process if it, or any view made from it, is still live.
        let held = hold(unsafe { self.view() });
        let r = read(&held);
        drop(held);
        drop(check);
        r
    }

    /// This log, reading its ring in place ([`State::with_view`]); counted
    /// live until its block is dropped or copied. Inline forms are copied
    /// outright.
    ///
    /// # Safety
    ///
    /// The view must be dropped before `self` is changed or dropped: it
    /// reads `self`'s ring.
    unsafe fn view(&self) -> State {
        State(match &self.0 {
            Repr::Inline { newest, slot } => Repr::Inline {
                newest: *newest,
                slot: *slot,
            },
            Repr::Ring { block, head, meta } => Repr::Ring {
                // SAFETY: the caller drops the view before `self` changes.
                block: unsafe { block.view() },
                head: *head,
                meta: *meta,
            },
        })
    }

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
            self.rebuild(self.slots() + 1, self.form());
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

    /// The ring's form; an inline slot's is the form a ring made from it
    /// takes (compact for a count of 1).
    fn form(&self) -> Form {
        match &self.0 {
            Repr::Inline { slot, .. } if unpack(*slot).1 > 1 => Form::Narrow,
            Repr::Inline { .. } => Form::Compact,
            Repr::Ring { meta, .. } => Form::of(*meta),
        }
    }

    /// Number of slots held (what memory the key costs).
    pub fn slots(&self) -> usize {
        (self.meta() & !FORM) as usize
    }

    fn set_slots(&mut self, n: usize) {
        if let Repr::Ring { meta, .. } = &mut self.0 {
            *meta = (*meta & FORM) | n as u32;
        }
    }

    /// Slots the ring has room for (an inline form: what it holds).
    fn capacity(&self) -> usize {
        match &self.0 {
            Repr::Ring { block, meta, .. } => ring_capacity(Form::of(*meta), block),
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

    /// Ring position of logical slot `i` (0 = oldest).
    fn pos(&self, i: usize) -> usize {
        wrap(self.head() + i, self.capacity())
    }

    /// Logical slot `i` as (timestamp in `UNIT`s, count).
    fn get(&self, i: usize) -> (u64, u64) {
        match &self.0 {
            Repr::Ring { block, meta, .. } => Form::of(*meta).load(block, block[BASE], self.pos(i)),
            Repr::Inline { newest, slot } => one_get(*newest, *slot),
        }
    }

    /// Writes logical slot `i` of the ring (the caller made the block).
    fn put(&mut self, i: usize, t: u64, c: u64) {
        let (pos, form) = (self.pos(i), self.form());
        let block = self.ring();
        let base = block[BASE];
        form.store(block, base, pos, t, c);
    }

    fn front(&self) -> Option<(u64, u64)> {
        (self.slots() > 0).then(|| self.get(0))
    }

    /// The newest slot: read on every decision and by the store (a
    /// record's TTL), so it takes the ring's fields once.
    fn back(&self) -> Option<(u64, u64)> {
        match &self.0 {
            Repr::Ring { block, head, meta } => {
                let n = (meta & !FORM) as usize;
                let form = Form::of(*meta);
                let pos = wrap(
                    *head as usize + n.checked_sub(1)?,
                    ring_capacity(form, block),
                );
                Some(form.load(block, block[BASE], pos))
            }
            Repr::Inline { slot: 0, .. } => None,
            Repr::Inline { newest, slot } => Some(one_get(*newest, *slot)),
        }
    }

    /// Every slot as (timestamp in `UNIT`s, count), oldest first.
    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.slots()).map(|i| self.get(i))
    }

    /// Every slot as (timestamp in `UNIT`s since the epoch, count), oldest
    /// first: what a snapshot keeps, whatever form the ring holds them in.
    pub fn slots_iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.iter()
    }

    /// Rebuilds a state from `slots_iter` and `newest`, as a snapshot
    /// loader does; `None` unless the slots are in order, non-empty, span
    /// at most the longest period, and their counts add up without
    /// overflow (so a crafted file cannot break the ring's invariants).
    /// The slots are recorded as a decision records them, so the ring
    /// takes the form its slots need (compact for single requests).
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
        // Every slot is checked before any is recorded: a slot out of
        // order after one far ahead (within the span only if the order
        // held) would otherwise be recorded past the ring's offsets.
        let ordered = slots.windows(2).all(|w| w[0].0 <= w[1].0);
        if !ordered || slots.iter().any(|&(_, c)| c == 0) {
            return None;
        }
        let mut s = State::default();
        for &(t, c) in slots {
            s.total().checked_add(c)?;
            s.record(t, c);
        }
        s.set_newest(newest);
        s.settle();
        Some(s)
    }

    /// Moves the slots, oldest first, into a new block of `form` with
    /// room for `capacity` slots (a compact ring's rounded up to whole
    /// words), keeping the header.
    fn rebuild(&mut self, capacity: usize, form: Form) {
        let mut block = vec![0u64; block_words(form, capacity)].into_boxed_slice();
        let base = self.base();
        block[..HEADER].copy_from_slice(&[base, self.total(), self.newest()]);
        let n = self.slots();
        match &self.0 {
            // The same form from the ring's start: the words as they are
            // (a ring that grows, the common case).
            Repr::Ring {
                block: old,
                head: 0,
                meta,
            } if Form::of(*meta) == form => {
                let words = HEADER + form.words(n);
                block[HEADER..words].copy_from_slice(&old[HEADER..words]);
            }
            _ => {
                for (i, (t, c)) in self.iter().enumerate() {
                    form.store(&mut block, base, i, t, c);
                }
            }
        }
        let n = n as u32;
        self.0 = Repr::Ring {
            block: Block::new(block),
            head: 0,
            meta: form.bits() | n,
        };
    }

    /// The capacity the ring grows to when full: an eighth more, at least
    /// four slots (two more for the first ring, made from the inline
    /// slot), within [`MAX_SLOTS`] (but never below what it holds: a ring
    /// restored from an older snapshot may be larger). An eighth rather
    /// than double keeps a long log within 12% of its slots' bytes, for a
    /// copy of the ring every eighth of its growth; four at least, with
    /// [`block_words`]' rounding, copies a ten-request log three times
    /// rather than five, and a compact two-slot log's block stays 40 bytes.
    fn grown_capacity(&self) -> usize {
        let c = self.capacity();
        (c + (c / 8).max(if c < 2 { 2 } else { 4 }))
            .min(MAX_SLOTS as usize)
            .max(self.slots() + 1)
    }

    /// Heap bytes the next new slot would allocate: the new block, while
    /// the old one is still held (0 while the ring has room, or while the
    /// log is empty: its first slot is inline). An inline slot's is a
    /// narrow ring's, at most what the ring it starts takes. A change of
    /// form (a compact ring turning narrow, a narrow one wide) is not
    /// counted: it depends on the request, happens once per ring, and
    /// takes at most twice the ring's bytes (the ring's own bound,
    /// [`MAX_SLOTS`], holds whatever the form).
    pub fn growth(&self) -> usize {
        let form = match &self.0 {
            Repr::Inline { slot: 0, .. } => return 0,
            Repr::Inline { .. } => Form::Narrow,
            Repr::Ring { .. } if self.slots() < self.capacity() => return 0,
            Repr::Ring { meta, .. } => Form::of(*meta),
        };
        block_words(form, self.grown_capacity()) * 8
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
                *head = wrap(*head as usize + 1, capacity) as u32;
                *meta -= 1;
                block[TOTAL] = total;
            }
        }
    }

    /// Sets the newest slot's count (and the total with it); 0 removes it.
    /// A compact ring turns narrow for a count above 1.
    fn set_back_count(&mut self, count: u64) {
        let Some((t, old)) = self.back() else {
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
            if count > 1 && self.form() == Form::Compact {
                self.rebuild(self.capacity(), Form::Narrow);
            }
            self.put(last, t, count);
        }
        self.set_total(total);
    }

    /// Joins the newest slot to the one before it while they share a
    /// timestamp and their sum fits a slot, as [`State::record`] joins a
    /// request to the newest slot. Two slots share a timestamp only when
    /// their sum did not fit; a refund that shrinks the newest can make it
    /// fit, and the ring must then be the one a loader rebuilds from its
    /// slots ([`State::restore`] records them, coalescing): else a
    /// snapshot, the append-only file or a replica reads back a different
    /// ring than the server wrote.
    fn coalesce_back(&mut self) {
        while self.slots() >= 2 {
            let (t, c) = self.get(self.slots() - 1);
            let (prev_t, prev_c) = self.get(self.slots() - 2);
            if t != prev_t || !prev_c.checked_add(c).is_some_and(|n| self.fits(n)) {
                return;
            }
            self.set_back_count(0);
            self.set_back_count(prev_c + c);
        }
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
            self.rebuild(self.slots() * 2, self.form());
        }
    }

    /// Records `count` units at `ts` (in `UNIT`s), coalescing with the
    /// newest slot when the timestamp is the same. Time only moves forward
    /// for a key: a stamp older than the newest slot (a finer `PRECISION`
    /// than before, a clock stepped back) is recorded at the newest slot,
    /// which counts it at least as long as its own time would.
    fn record(&mut self, ts: u64, count: u64) {
        let back = self.back();
        let ts = back.map_or(ts, |(newest, _)| ts.max(newest));
        if let Some((t, c)) = back {
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
        // Room for one more slot, in the form it needs: one new block at
        // most, grown by an eighth if full (never pre-sized to `limit`).
        let form = self.form().max(self.needs(ts, count));
        let full = self.slots() == self.capacity();
        if full || form != self.form() || !matches!(self.0, Repr::Ring { .. }) {
            let capacity = match full {
                true => self.grown_capacity(),
                false => self.capacity(),
            };
            self.rebuild(capacity, form);
        }
        if self.slots() == 0 {
            self.ring()[BASE] = ts;
        } else if form != Form::Wide && ts - self.base() > form.max_offset() {
            self.rebase();
        }
        self.put(self.slots(), ts, count);
        self.ring()[TOTAL] = total;
        self.set_slots(self.slots() + 1);
    }

    /// The least form a new slot of `count` at `ts` needs: wide for a
    /// count above 2^24 - 1, narrow for one above 1 or a stamp further than
    /// [`COMPACT_SPAN`] from a compact ring's oldest slot when its offset
    /// no longer fits (see there), else compact.
    fn needs(&self, ts: u64, count: u64) -> Form {
        if count > MAX_COUNT {
            return Form::Wide;
        }
        if count > 1 {
            return Form::Narrow;
        }
        if self.form() == Form::Compact
            && ts.saturating_sub(self.base()) > Form::Compact.max_offset()
            && self
                .front()
                .is_some_and(|(t, _)| ts.saturating_sub(t) > COMPACT_SPAN)
        {
            return Form::Narrow;
        }
        Form::Compact
    }

    /// Whether a slot of this count fits the current encoding without
    /// widening (a compact ring turns narrow for it).
    fn fits(&self, count: u64) -> bool {
        self.form() == Form::Wide || count <= MAX_COUNT
    }

    /// Moves the base up to the oldest slot so offsets fit again.
    fn rebase(&mut self) {
        let Some((oldest, _)) = self.front() else {
            return;
        };
        let (old, form) = (self.base(), self.form());
        let n = self.slots();
        let (head, capacity) = (self.head(), self.capacity());
        let block = self.ring();
        for k in 0..n {
            let pos = wrap(head + k, capacity);
            let (t, c) = form.load(block, old, pos);
            form.store(block, oldest, pos, t, c);
        }
        block[BASE] = oldest;
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
/// `state` is always pruned of expired slots. `cost` is positive (see
/// [`super::contract::Limiter::decide`]): a compact slot means a count of
/// 1, so one of 0 has no form ([`peek`] looks at 0).
pub fn decide(state: &mut State, p: &Params, now: u64, cost: u64) -> Decision {
    let (limit, period) = (p.limit(), p.period());
    debug_assert!(cost > 0, "a log admits no request of 0 units");
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
    let need = used.saturating_add(cost).saturating_sub(p.limit()).max(1);
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
        if take < c {
            // The last one taken from: it may now join the one before.
            state.coalesce_back();
        }
    }
    // The newest admission left is now at most the newest slot's time.
    let newest = match state.back() {
        Some((t, _)) => state.newest().min(State::ns(t)),
        None => 0,
    };
    state.set_newest(newest);
    state.settle();
}

/// Records `n` units at `now` whatever the count (`RL.CHARGE`), up to a
/// total of [`MAX_USAGE`] (the slots' sum, which a snapshot's loader
/// checks, never overflows). A ring at its slot cap takes them in its
/// newest slot (counted from that slot's time, so they leave the window a
/// little early), up to what one slot can count.
pub fn record(state: &mut State, p: &Params, now: u64, n: u64) {
    let now = now.max(state.newest());
    state.expire(now, p.period());
    let n = n.min(MAX_USAGE.saturating_sub(state.total()));
    let ts = stamp(now, p);
    if n == 0 {
        // Nothing to record: the log is full to the cap.
    } else if state.has_room(ts, n) {
        state.record(ts, n);
        state.set_newest(now);
    } else if let Some((_, c)) = state.back() {
        let most = if state.fits(u64::MAX) {
            u64::MAX
        } else {
            MAX_COUNT
        };
        state.set_back_count(c.saturating_add(n).min(most.max(c)));
    }
    state.settle();
}

impl super::contract::Limiter for State {
    const ALGORITHM: super::contract::Algorithm = super::contract::Algorithm::Log;
    /// A period the ring's offsets can span, and a ring within its cap.
    fn check(p: &Params) -> Result<(), SpecError> {
        if p.period() > MAX_PERIOD {
            return Err(SpecError::LogPeriodTooLong);
        }
        if max_slots(p) > MAX_SLOTS {
            return Err(SpecError::LogTooLarge {
                limit: p.limit(),
                period_ms: p.period() / 1_000_000,
                slots: max_slots(p),
                cap: MAX_SLOTS,
                fit_ms: precision_to_fit(p) / 1_000_000,
            });
        }
        Ok(())
    }
    fn decide(&mut self, p: &Params, now: Nanos, cost: u64) -> Decision {
        decide(self, p, now.0, cost)
    }
    fn peek(&self, p: &Params, now: Nanos, cost: u64) -> Decision {
        peek(self, p, now.0, cost)
    }
    fn refund(&mut self, p: &Params, now: Nanos, n: u64) {
        refund(self, p, now.0, n)
    }
    fn record(&mut self, p: &Params, now: Nanos, n: u64) {
        record(self, p, now.0, n)
    }
    fn expires_at(&self, p: &Params) -> Nanos {
        Nanos(State::expires_at(self, p))
    }
    fn growth(&self) -> usize {
        State::growth(self)
    }
}

/// Stored as its newest admission's time and its slots (timestamp,
/// count), however the ring holds them; no compact form: a ring is
/// variable-size, so the store keeps it in its arena of logs, its record
/// holding the slot's number.
impl Storage for State {
    const TAG: u8 = 5;
    const COMPACT_LEN: usize = 0;
    fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.newest());
        let n = u32::try_from(self.slots()).unwrap_or(u32::MAX);
        out.extend_from_slice(&n.to_le_bytes());
        for (t, c) in self.iter() {
            put_u64(out, t);
            put_u64(out, c);
        }
    }
    fn decode<F: Fields>(p: &Params, f: &mut F) -> Result<Self, F::Error> {
        if p.period() > MAX_PERIOD {
            return Err(f.corrupt("log period too long"));
        }
        let newest = f.u64()?;
        let n = f.u32()?;
        // Grown as read, never pre-sized from the file's claim.
        let mut slots = Vec::new();
        for _ in 0..n {
            slots.push((f.u64()?, f.u64()?));
        }
        State::restore(newest, &slots).ok_or_else(|| f.corrupt("bad log slots"))
    }
    fn pack(&self, _: &Params) -> Option<StateBytes> {
        None
    }
    /// Never called: a log has no compact form (`COMPACT_LEN` 0).
    fn unpack(_: &[u8], _: &Params) -> Self {
        debug_assert!(false, "a log has no compact form");
        State::default()
    }
    fn describe(&self, p: &Params, field: &mut dyn FnMut(&'static str, i64)) {
        field("precision_ms", (p.precision.get() / 1_000_000) as i64);
        field("count", self.total() as i64);
        field("slots", self.slots() as i64);
    }
    fn heap_size(&self) -> usize {
        State::heap_size(self)
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

    /// A charge whose sum with the newest slot does not fit a narrow slot
    /// takes a slot of its own at the same time; a refund that brings the
    /// two back within a slot joins them, as a loader (`restore`, which
    /// records the slots one by one) rebuilds them. Seen by the snapshot
    /// proptest: `RL.CHARGE log 1 1ms 1`, `RL.CHARGE log 1 1ms 16777216`,
    /// `RL.REFUND log 2` kept (t, 1), (t, 0xFFFFFE), read back as (t,
    /// 0xFFFFFF).
    #[test]
    fn a_refund_leaves_the_ring_a_reload_rebuilds() {
        let p = params(1, MS);
        let now = 1_700_000_000 * S;
        let t = now / UNIT;
        let reloaded = |st: &State| {
            let slots: Vec<(u64, u64)> = st.slots_iter().collect();
            State::restore(st.newest(), &slots).expect("a state the server holds loads")
        };
        // (refund, slots left): within a narrow slot, one slot; a wide
        // ring (the charge's) joins whatever the sum.
        let cases: &[(u64, &[(u64, u64)])] = &[
            (0, &[(t, 1), (t, MAX_COUNT + 1)]),
            (1, &[(t, MAX_COUNT + 1)]),
            (2, &[(t, MAX_COUNT)]),
            (MAX_COUNT, &[(t, 2)]),
            (MAX_COUNT + 1, &[(t, 1)]),
            (MAX_COUNT + 2, &[]),
        ];
        for &(n, want) in cases {
            let mut st = State::default();
            record(&mut st, &p, now, 1);
            record(&mut st, &p, now, MAX_COUNT + 1);
            refund(&mut st, &p, now, n);
            assert_eq!(st.slots_iter().collect::<Vec<_>>(), want, "refund {n}");
            assert_eq!(reloaded(&st), st, "refund {n}");
        }
        // Narrow slots that share a time (their sum over 2^24 - 1) join
        // once a refund brings the sum within one.
        let mut st = State::default();
        record(&mut st, &p, now, 5);
        record(&mut st, &p, now, MAX_COUNT - 1);
        assert_eq!(st.slots(), 2);
        refund(&mut st, &p, now, 4);
        assert_eq!(st.slots_iter().collect::<Vec<_>>(), [(t, MAX_COUNT)]);
        assert_eq!(reloaded(&st), st);
        // Three at one time (narrow, narrow, then a wide charge): a refund
        // of the wide one joins them all.
        let mut st = State::default();
        record(&mut st, &p, now, MAX_COUNT);
        record(&mut st, &p, now, MAX_COUNT);
        record(&mut st, &p, now, MAX_COUNT + 1);
        assert_eq!(st.slots(), 3);
        refund(&mut st, &p, now, MAX_COUNT);
        assert_eq!(
            st.slots_iter().collect::<Vec<_>>(),
            [(t, 2 * MAX_COUNT + 1)]
        );
        assert_eq!(reloaded(&st), st);
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
        // Single requests keep a compact ring, requests of 2 a narrow one.
        for (cost, ring, first, last) in [
            (1, 2, [8, 12, 16], [84, 96, 108]),
            (2, 4, [8, 12, 16], [84, 94, 106]),
        ] {
            let p = params(1_000, 60 * S);
            let mut st = State::default();
            // The first slot is inline.
            assert_eq!(st.growth(), 0);
            decide(&mut st, &p, S, cost);
            assert_eq!(st.heap_size(), 0);
            // The second takes a ring of four narrow slots at most (the
            // block rounded to 7 words; two words of four compact ones).
            assert_eq!(st.growth(), (HEADER + 4) * 8);
            decide(&mut st, &p, S + MS, cost);
            assert_eq!(st.heap_size(), (HEADER + ring) * 8);
            let mut grew = Vec::new();
            for i in 2..100 {
                let (before, growth) = (st.heap_size(), st.growth());
                decide(&mut st, &p, S + i * MS, cost);
                // What growth announced is the block the ring moved to.
                assert_eq!(growth == 0, st.heap_size() == before, "at {i}");
                if growth > 0 {
                    assert_eq!(st.heap_size(), growth);
                    grew.push(st.capacity());
                }
            }
            // By an eighth, at least four, the block rounded to an odd
            // number of words: 100 slots sit in 108 compact (432 bytes of
            // ring), 106 narrow (848 bytes).
            assert_eq!(grew[..3], first);
            assert_eq!(grew[grew.len() - 3..], last);
            assert_eq!(st.form(), [Form::Compact, Form::Narrow][cost as usize - 1]);
        }
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
            (2, 2, (HEADER + 4) * 8)
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

    /// The ring's own invariants, whatever its form: the counts add up to
    /// the total, times never go back, a compact ring counts 1 a slot and
    /// its block is whole words of its form.
    fn check_ring(st: &State) {
        let slots: Vec<_> = st.iter().collect();
        assert_eq!(slots.iter().map(|s| s.1).sum::<u64>(), st.total());
        assert!(slots.windows(2).all(|w| w[0].0 <= w[1].0), "{slots:?}");
        assert!(slots.iter().all(|s| s.1 > 0));
        assert!(st.slots() <= st.capacity());
        if let Repr::Ring { block, .. } = &st.0 {
            assert_eq!(block.len(), HEADER + st.form().words(st.capacity()));
            if st.form() != Form::Wide {
                let base = st.base();
                let room = st.form().max_offset();
                assert!(slots.iter().all(|s| s.0 >= base && s.0 - base <= room));
            }
            if st.form() == Form::Compact {
                assert!(slots.iter().all(|s| s.1 == 1), "{slots:?}");
            }
        }
    }

    /// Adjacent slots of one time as one (a narrow slot that overflowed
    /// leaves two of the same time where a wide ring would hold one).
    fn merged(slots: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (t, c) in slots {
            match out.last_mut() {
                Some(last) if last.0 == t => last.1 += c,
                _ => out.push((t, c)),
            }
        }
        out
    }

    /// The log as the articles keep it: every admission's (time, count),
    /// oldest first, in a plain deque, with no packing.
    #[derive(Default)]
    struct Model {
        slots: std::collections::VecDeque<(u64, u64)>,
        newest: u64,
    }

    impl Model {
        fn total(&self) -> u64 {
            self.slots.iter().map(|s| s.1).sum()
        }

        fn expire(&mut self, now: u64, period: u64) {
            while let Some(&(t, _)) = self.slots.front() {
                if State::ns(t).saturating_add(period) > now {
                    break;
                }
                self.slots.pop_front();
            }
        }

        fn decide(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
            let (limit, period) = (p.limit(), p.period());
            let now = now.max(self.newest);
            self.expire(now, period);
            let used = self.total();
            let allowed = used.saturating_add(cost) <= limit;
            if allowed {
                let ts = self.slots.back().map_or(0, |s| s.0).max(stamp(now, p));
                match self.slots.back_mut() {
                    Some(last) if last.0 == ts => last.1 += cost,
                    _ => self.slots.push_back((ts, cost)),
                }
                self.newest = now;
            }
            let retry_after = (!allowed).then(|| {
                let need = (used + cost).saturating_sub(limit).max(1);
                let mut freed = 0;
                let leaves = self.slots.iter().find(|s| {
                    freed += s.1;
                    freed >= need
                });
                leaves.map_or(0, |s| {
                    State::ns(s.0).saturating_add(period).saturating_sub(now)
                })
            });
            let reset_after = match self.slots.back() {
                None => 0,
                Some(&(t, _)) if p.precision.get() > UNIT => {
                    State::ns(t).saturating_add(period).saturating_sub(now)
                }
                Some(_) => self.newest.saturating_add(period).saturating_sub(now),
            };
            Decision {
                allowed,
                limit,
                remaining: limit.saturating_sub(self.total()),
                retry_after,
                reset_after,
            }
        }

        fn refund(&mut self, p: &Params, now: u64, mut n: u64) {
            self.expire(now.max(self.newest), p.period());
            while let Some(last) = self.slots.back_mut().filter(|_| n > 0) {
                let take = n.min(last.1);
                (last.1, n) = (last.1 - take, n - take);
                if last.1 == 0 {
                    self.slots.pop_back();
                }
            }
            self.newest = self
                .slots
                .back()
                .map_or(0, |s| self.newest.min(State::ns(s.0)));
        }

        /// Whether `st` holds this log.
        fn check(&self, st: &State) {
            check_ring(st);
            assert_eq!(merged(st.iter()), merged(self.slots.iter().copied()));
            assert_eq!((st.total(), st.newest()), (self.total(), self.newest));
        }
    }

    #[test]
    fn single_requests_keep_a_compact_ring_of_four_bytes_a_slot() {
        let p = params(1_000, 3_600 * S);
        let mut st = State::default();
        for i in 0..100 {
            assert!(decide(&mut st, &p, 1_000 * S + i * 20 * MS, 1).allowed);
        }
        check_ring(&st);
        assert_eq!(
            (st.form(), st.slots(), st.capacity()),
            (Form::Compact, 100, 108)
        );
        assert_eq!(st.heap_size(), (HEADER + 54) * 8);
        // A second request in the same microsecond coalesces: narrow.
        let before: Vec<_> = st.iter().collect();
        decide(&mut st, &p, 1_000 * S + 99 * 20 * MS, 1);
        check_ring(&st);
        assert_eq!(
            (st.form(), st.slots(), st.total()),
            (Form::Narrow, 100, 101)
        );
        assert_eq!(st.iter().take(99).collect::<Vec<_>>(), before[..99]);
        // It stays narrow while the key keeps a ring...
        decide(&mut st, &p, 1_001 * S + 99 * 20 * MS, 1);
        assert_eq!(st.form(), Form::Narrow);
        // ... and a ring that went back inline starts compact again.
        refund(&mut st, &p, 10_000 * S, 0);
        assert_eq!((st.slots(), st.heap_size()), (0, 0));
        decide(&mut st, &p, 10_000 * S, 1);
        decide(&mut st, &p, 10_001 * S, 1);
        assert_eq!((st.form(), st.slots()), (Form::Compact, 2));
    }

    #[test]
    fn a_compact_ring_turns_narrow_then_wide_keeping_its_slots() {
        let p = params(u64::MAX / 2, 60 * S);
        let mut st = State::default();
        let mut model = Model::default();
        let steps = [(1, Form::Compact), (1, Form::Compact), (3, Form::Narrow)];
        for (i, (cost, form)) in steps.into_iter().enumerate() {
            let now = S + i as u64 * MS;
            assert_eq!(decide(&mut st, &p, now, cost), model.decide(&p, now, cost));
            assert_eq!(st.form(), form);
            model.check(&st);
        }
        let now = 2 * S;
        let big = MAX_COUNT + 1;
        assert_eq!(decide(&mut st, &p, now, big), model.decide(&p, now, big));
        assert_eq!((st.form(), st.slots()), (Form::Wide, 4));
        model.check(&st);
        // Straight from compact to wide too.
        let mut st = State::default();
        let mut model = Model::default();
        for (now, cost) in [(S, 1), (S + 1, 1), (S + 2 * UNIT, 1), (S + 3 * UNIT, big)] {
            assert_eq!(decide(&mut st, &p, now, cost), model.decide(&p, now, cost));
            model.check(&st);
        }
        assert_eq!((st.form(), st.slots()), (Form::Wide, 4));
    }

    #[test]
    fn logs_of_any_form_compare_by_their_slots() {
        let p = params(100, 60 * S);
        let mut compact = State::default();
        let mut narrow = State::default();
        for i in 0..4 {
            decide(&mut compact, &p, S + i * MS, 1);
            decide(&mut narrow, &p, S + i * MS, 1 + (i == 3) as u64);
        }
        refund(&mut narrow, &p, S + 3 * MS, 1);
        assert_eq!(
            (compact.form(), narrow.form()),
            (Form::Compact, Form::Narrow)
        );
        assert_eq!(compact, narrow);
        let slots: Vec<_> = compact.slots_iter().collect();
        let restored = State::restore(compact.newest(), &slots).unwrap();
        assert_eq!(restored.form(), Form::Compact);
        assert_eq!(restored, narrow);
    }

    /// An hour's period, twelve hours of single requests at random gaps:
    /// the offsets outgrow 32 bits again and again, and the ring re-bases
    /// (amortized: a handful of times an hour), staying compact and equal to
    /// the model throughout.
    #[test]
    fn a_compact_ring_rebases_over_long_runs() {
        let p = params(1_000_000, 3_600 * S);
        let (mut st, mut model) = (State::default(), Model::default());
        let (mut now, mut seed) = (1_700_000_000 * S, 0x9e37_79b9_7f4a_7c15u64);
        let mut bases = vec![];
        while now < 1_700_000_000 * S + 12 * 3_600 * S {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            now += 1 + seed % (3 * S);
            assert_eq!(decide(&mut st, &p, now, 1), model.decide(&p, now, 1));
            assert_eq!(st.form(), Form::Compact);
            if bases.last() != Some(&st.base()) {
                bases.push(st.base());
            }
        }
        model.check(&st);
        assert!(st.slots() > 1_000, "{}", st.slots());
        // The first base, then one re-base every 8 to 72 minutes.
        assert!((10..=90).contains(&bases.len()), "{} bases", bases.len());
        let restored = State::restore(st.newest(), &st.slots_iter().collect::<Vec<_>>());
        assert_eq!(restored.as_ref(), Some(&st));
    }

    /// A compact ring under a period longer than [`COMPACT_SPAN`] turns
    /// narrow once its offsets outgrow 32 bits (re-basing would not leave
    /// room enough); a shorter period's ring re-bases.
    #[test]
    fn a_span_beyond_compact_turns_narrow() {
        let t0 = 1_000 * S;
        for (period, far, form, base) in [
            (86_400 * S, 5_000 * S, Form::Narrow, t0),
            (3_600 * S, 4_400 * S, Form::Compact, t0 + 1_000 * S),
        ] {
            // The last offset outgrows 32 bits from the first slot.
            assert!(far / UNIT > u64::from(u32::MAX));
            let mut st = State::default();
            let mut model = Model::default();
            let p = params(100, period);
            for now in [t0, t0 + S, t0 + 1_000 * S, t0 + far] {
                assert_eq!(decide(&mut st, &p, now, 1), model.decide(&p, now, 1));
                model.check(&st);
            }
            assert_eq!((st.form(), st.base()), (form, base / UNIT), "{period}");
        }
    }

    #[test]
    fn restore_refuses_a_slot_out_of_order_after_one_far_ahead() {
        // Found by the `replication_stream` fuzz target: the span was
        // checked from the first slot to the last, and the order as each
        // slot was recorded, so the second slot, 2^59 units ahead, was
        // recorded (past a narrow ring's 40-bit offsets: a debug assertion,
        // a silently wrong stamp in release) before the third, back in
        // order with the first, refused the whole.
        let t = 0x0006_612d_e1d6_1f88;
        let slots = [(t, 1), (t + (1 << 59), 1), (t + 1, 1), (t + 2, 1)];
        assert!(State::restore(t + 2, &slots).is_none());
        assert!(State::restore(t + 2, &[(t, 1), (t + 1, 1), (t + 2, 1)]).is_some());
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

        /// Parameters that reach every form: small and huge limits, periods
        /// from a second to a day (beyond [`COMPACT_SPAN`]), fine and
        /// coarse precision.
        fn arb_model_params() -> impl Strategy<Value = Params> {
            (
                prop::sample::select(vec![3, 50, 1_000, u64::MAX / 4]),
                prop::sample::select(vec![S, 20 * S, 3_600 * S, 7_200 * S, 86_400 * S]),
                prop::sample::select(vec![1, UNIT, MS, S]),
            )
                .prop_map(|(limit, period, q)| Params {
                    precision: NonZeroU64::new(q).unwrap(),
                    ..params(limit, period)
                })
        }

        #[derive(Debug, Clone)]
        enum Op {
            Decide(u64),
            Refund(u64),
        }

        /// A step: which of two parameter sets, a clock move (none, a
        /// microsecond, milliseconds, seconds, up to three hours; now and
        /// then backwards), then a request (mostly single, sometimes
        /// weighted, rarely too heavy for a narrow slot) or a refund.
        fn arb_step() -> impl Strategy<Value = (bool, u64, bool, Op)> {
            let gap = prop_oneof![
                2 => Just(0u64),
                2 => 1u64..=UNIT,
                4 => 1u64..5_000 * MS,
                1 => 1u64..3_600 * S,
                1 => 1u64..3 * 3_600 * S,
            ];
            let op = prop_oneof![
                12 => Just(Op::Decide(1)),
                3 => (2u64..5).prop_map(Op::Decide),
                1 => (MAX_COUNT - 2..MAX_COUNT + 3).prop_map(Op::Decide),
                3 => (0u64..4).prop_map(Op::Refund),
            ];
            (
                prop::bool::weighted(0.2),
                gap,
                prop::bool::weighted(0.05),
                op,
            )
        }

        proptest! {
            /// The ring, in whatever form it takes (compact, narrow, wide,
            /// converted at random points, re-based over long gaps), holds
            /// what the plain model holds and decides as it does, and a
            /// snapshot of it restores the same log. Half the runs make
            /// single requests only, at distinct microseconds, which keep
            /// long compact rings (and re-base them over the long gaps).
            #[test]
            fn every_form_matches_the_model(
                pa in arb_model_params(),
                pb in arb_model_params(),
                steps in prop::collection::vec(arb_step(), 1..300),
                singles in any::<bool>(),
            ) {
                let (mut st, mut model) = (State::default(), Model::default());
                let mut now = 1_700_000_000 * S;
                let fine = |p: Params| Params {
                    precision: NonZeroU64::new(1).unwrap(),
                    ..p
                };
                let (pa, pb) = if singles { (fine(pa), fine(pb)) } else { (pa, pb) };
                for (other, gap, back, op) in steps {
                    let p = if other { &pb } else { &pa };
                    now = match (singles, back) {
                        (true, _) => now + gap.max(UNIT),
                        (false, true) => now - gap,
                        (false, false) => now + gap,
                    };
                    match op {
                        Op::Decide(cost) => {
                            let cost = if singles { 1 } else { cost.min(p.limit()) };
                            let peeked = peek(&st, p, now, cost);
                            let decided = decide(&mut st, p, now, cost);
                            prop_assert_eq!(peeked, decided);
                            prop_assert_eq!(decided, model.decide(p, now, cost));
                        }
                        Op::Refund(n) => {
                            refund(&mut st, p, now, n);
                            model.refund(p, now, n);
                        }
                    }
                    model.check(&st);
                    let slots: Vec<_> = st.slots_iter().collect();
                    let back = State::restore(st.newest(), &slots).unwrap();
                    check_ring(&back);
                    prop_assert_eq!(merged(back.slots_iter()), merged(slots.into_iter()));
                    prop_assert_eq!((back.total(), back.newest()), (st.total(), st.newest()));
                }
            }
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

    /// `with_view` is safe whatever its closures do: a view they keep past
    /// the call (here stashed by `hold`) stops the process before the
    /// ring it reads can change or be freed. Run in a child process (this
    /// test binary again, told so by an environment variable), which must
    /// die of `SIGABRT`; a view dropped in time, also through a panic,
    /// lets the call return.
    #[test]
    fn a_view_that_escapes_with_view_aborts() {
        const CHILD: &str = "TURNSTILE_TEST_ESCAPE_A_VIEW";
        let p = params(1_000, 60 * S);
        let mut st = State::default();
        for t in 0..40u64 {
            assert!(decide(&mut st, &p, 1_700_000_000 * S + t * S, 1).allowed);
        }
        if std::env::var_os(CHILD).is_some() {
            let stash = std::cell::RefCell::new(None);
            st.with_view(|v| *stash.borrow_mut() = Some(v), |_| ());
            // Not reached: the view escaped.
            drop(st);
            std::process::exit(0);
        }
        assert_eq!(st.with_view(|v| v, |v| v.clone()), st);
        let caught = std::panic::catch_unwind(|| st.with_view(|v| v, |_| panic!("a reader fails")));
        assert!(caught.is_err(), "the panic went through");
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "limiter::log::tests::a_view_that_escapes_with_view_aborts"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(6), "{:?}", out);
    }

    /// A view reads the ring in place and never frees it: dropped (as a
    /// panic's unwinding would drop it) it leaves the owner whole; a clone
    /// of it, or a change made through it, is a ring of its own.
    #[test]
    fn a_view_reads_in_place_and_never_frees_the_ring() {
        const T0: u64 = 1_700_000_000 * S;
        let p = params(1_000, 60 * S);
        let mut st = State::default();
        for t in 0..40u64 {
            assert!(decide(&mut st, &p, T0 + t * S, 1).allowed);
        }
        let Repr::Ring { block, .. } = &st.0 else {
            panic!("40 slots make a ring")
        };
        let at = block.as_ptr();
        let before = st.clone();
        // SAFETY: each view is dropped before `st` changes.
        let view = unsafe { st.view() };
        assert_eq!(view, before);
        let Repr::Ring { block: seen, .. } = &view.0 else {
            panic!("a view of a ring")
        };
        assert_eq!(seen.as_ptr(), at, "no copy");
        drop(view);
        let unwound = std::panic::catch_unwind(|| {
            // SAFETY: the view is dropped (unwound) before `st` changes.
            let _view = unsafe { st.view() };
            panic!("a reader fails");
        });
        assert!(unwound.is_err());
        assert_eq!(st, before, "the ring outlived both views");
        // SAFETY: the view is dropped at once; its clone owns its block.
        let mut changed = unsafe { st.view() }.clone();
        assert!(decide(&mut changed, &p, T0 + 41 * S, 1).allowed);
        // SAFETY: dropped below, before `st` changes.
        let mut written = unsafe { st.view() };
        assert!(decide(&mut written, &p, T0 + 42 * S, 1).allowed);
        drop(written);
        assert_eq!(
            st, before,
            "changes through a view or its clone stay theirs"
        );
        assert!(decide(&mut st, &p, T0 + 43 * S, 1).allowed);
        check_ring(&st);
    }
}
