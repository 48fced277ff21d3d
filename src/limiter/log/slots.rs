//! How a log's ring is held: the three forms of a slot and the heap
//! block they sit in (the header, then the ring), apart from the
//! algorithm that reads and writes them (`log/mod.rs`).

use std::ptr::NonNull;

/// A narrow slot: a 40-bit offset and a 24-bit count.
pub(super) const COUNT_BITS: u32 = 24;
pub(super) const MAX_COUNT: u64 = (1 << COUNT_BITS) - 1;
pub(super) const MAX_OFFSET: u64 = (1 << (64 - COUNT_BITS)) - 1;

/// Words of the block's header: `base`, `total`, `newest`.
pub(super) const HEADER: usize = 3;
pub(super) const BASE: usize = 0;
pub(super) const TOTAL: usize = 1;
pub(super) const NEWEST: usize = 2;
/// `meta`'s top bit: the slots are wide.
pub(super) const WIDE: u32 = 1 << 31;
/// `meta`'s next bit: the slots are compact.
pub(super) const COMPACT: u32 = 1 << 30;
pub(super) const FORM: u32 = WIDE | COMPACT;

/// How a ring holds its slots (see the module docs). A ring only moves up
/// this order (compact, narrow, wide) while the key keeps it; a ring that
/// settles back inline (at most one slot) starts again from compact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Form {
    /// One `u32` offset from `base`, count 1; two slots to a word, the
    /// even ring position in the low half.
    Compact,
    /// One `u64`: 40-bit offset from `base`, 24-bit count.
    Narrow,
    /// Two `u64`s: timestamp, count.
    Wide,
}

impl Form {
    pub(super) fn bits(self) -> u32 {
        match self {
            Form::Compact => COMPACT,
            Form::Narrow => 0,
            Form::Wide => WIDE,
        }
    }

    pub(super) fn of(meta: u32) -> Form {
        match meta & FORM {
            COMPACT => Form::Compact,
            0 => Form::Narrow,
            _ => Form::Wide,
        }
    }

    /// The largest offset from `base` a slot of this form holds.
    pub(super) fn max_offset(self) -> u64 {
        match self {
            Form::Compact => u64::from(u32::MAX),
            Form::Narrow => MAX_OFFSET,
            Form::Wide => u64::MAX,
        }
    }

    /// Words of ring that hold `slots` slots.
    pub(super) fn words(self, slots: usize) -> usize {
        match self {
            Form::Compact => slots.div_ceil(2),
            Form::Narrow => slots,
            Form::Wide => slots * 2,
        }
    }

    /// Slots that `words` words of ring hold.
    pub(super) fn slots(self, words: usize) -> usize {
        match self {
            Form::Compact => words * 2,
            Form::Narrow => words,
            Form::Wide => words / 2,
        }
    }

    /// The slot at ring position `pos` of `block`, as (timestamp in
    /// `UNIT`s, count), its offset from `base`.
    pub(super) fn load(self, block: &[u64], base: u64, pos: usize) -> (u64, u64) {
        match self {
            Form::Compact => {
                let half = block[HEADER + pos / 2] >> (pos % 2 * 32);
                (base + u64::from(half as u32), 1)
            }
            Form::Narrow => {
                let (o, c) = unpack(block[HEADER + pos]);
                (base + o, c)
            }
            Form::Wide => (block[HEADER + pos * 2], block[HEADER + pos * 2 + 1]),
        }
    }

    /// Writes slot (`t`, `c`) at ring position `pos` of `block`, as an
    /// offset from `base`. The caller keeps the form's bounds: `t` at or
    /// after `base`, the offset within 32 bits and `c` 1 compact, within
    /// 40 and 24 bits narrow.
    pub(super) fn store(self, block: &mut [u64], base: u64, pos: usize, t: u64, c: u64) {
        match self {
            Form::Compact => {
                debug_assert!(c == 1 && t - base <= u64::from(u32::MAX));
                let shift = pos % 2 * 32;
                let w = &mut block[HEADER + pos / 2];
                *w = (*w & !(u64::from(u32::MAX) << shift)) | ((t - base) << shift);
            }
            Form::Narrow => {
                debug_assert!(c <= MAX_COUNT && t - base <= MAX_OFFSET);
                block[HEADER + pos] = pack(t - base, c);
            }
            Form::Wide => {
                block[HEADER + pos * 2] = t;
                block[HEADER + pos * 2 + 1] = c;
            }
        }
    }
}

/// A ring's heap block: owned (freed when dropped), or in a view
/// (`State::with_view`) borrowed from the log that owns it for one read,
/// never freed by the view. A view is written only after it copied the
/// block into one of its own, so nothing reached through a view changes
/// the owner's ring.
pub(super) struct Block {
    pub(super) ptr: NonNull<u64>,
    /// Words, with [`BORROWED`] set in a view.
    pub(super) words: usize,
}

pub(super) const BORROWED: usize = 1 << (usize::BITS - 1);

// SAFETY: an owned block is a `Box<[u64]>`, which is Send and Sync; a
// borrowed one is a shared `&[u64]` of its owner's block, also both.
unsafe impl Send for Block {}
// SAFETY: as for Send: nothing in a block is changed through `&Block`.
unsafe impl Sync for Block {}

impl Block {
    pub(super) fn new(words: Box<[u64]>) -> Block {
        let len = words.len();
        let ptr = NonNull::new(Box::into_raw(words).cast::<u64>()).expect("a box is never null");
        Block { ptr, words: len }
    }

    pub(super) fn borrowed(&self) -> bool {
        self.words & BORROWED != 0
    }

    /// This block, borrowed: never freed, counted live until dropped.
    ///
    /// # Safety
    ///
    /// The view must be dropped before `self` is changed or dropped.
    pub(super) unsafe fn view(&self) -> Block {
        count_views(1);
        Block {
            ptr: self.ptr,
            words: self.words | BORROWED,
        }
    }
}

impl std::ops::Deref for Block {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        // SAFETY: `ptr` and the length are a live `Box<[u64]>`'s: this
        // block's own, or its owner's, which outlives a view.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.words & !BORROWED) }
    }
}

impl std::ops::DerefMut for Block {
    fn deref_mut(&mut self) -> &mut [u64] {
        if self.borrowed() {
            *self = Block::new(Box::from(&**self));
        }
        // SAFETY: an owned block (made so above), which nothing else
        // reaches while `self` is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.words) }
    }
}

impl Clone for Block {
    /// A block of its own, also of a view.
    fn clone(&self) -> Block {
        Block::new(Box::from(&**self))
    }
}

thread_local! {
    /// Views made on this thread and not yet dropped or copied (wrapping:
    /// one dropped on another thread counts there, and the checks compare,
    /// never test for zero).
    static LIVE_VIEWS: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
}

/// [`LIVE_VIEWS`] now.
pub(super) fn live_views() -> isize {
    LIVE_VIEWS.with(|n| n.get())
}

fn count_views(by: isize) {
    LIVE_VIEWS.with(|n| n.set(n.get().wrapping_add(by)));
}

impl Drop for Block {
    fn drop(&mut self) {
        if self.borrowed() {
            count_views(-1);
        } else {
            let words = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.words);
            // SAFETY: an owned block is the box `new` took apart, freed
            // once: here.
            drop(unsafe { Box::from_raw(words) });
        }
    }
}

pub(super) fn pack(offset: u64, count: u64) -> u64 {
    (offset << COUNT_BITS) | count
}

pub(super) fn unpack(slot: u64) -> (u64, u64) {
    (slot >> COUNT_BITS, slot & MAX_COUNT)
}

/// Words of a block holding `capacity` slots of `form`, rounded up to an
/// odd number: with the 3-word header, a whole malloc chunk (glibc hands
/// out 16-byte steps with an 8-byte header, so 7 words cost what 6 do),
/// and the slack becomes slots.
pub(super) fn block_words(form: Form, capacity: usize) -> usize {
    (HEADER + form.words(capacity)) | 1
}
