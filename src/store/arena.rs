//! `Arena<T>`: a shard's records of one size, addressed by `u32` index.
//!
//! Records live in fixed chunks of [`CHUNK`] slots rather than one `Vec`:
//! a doubling `Vec` leaves up to half its room unused (the memory targets
//! are 40-48 bytes a key, and a `Vec` of 3,906 32-byte records would sit in
//! room for 4,096 or 8,192), and moving a large `Vec` on growth would hold
//! the shard's lock for the copy. A chunk is about 4 KiB of compact records,
//! so the slack is at most one chunk per shard and class. Freed slots are
//! reused first (most recently freed, which is warm in cache).

/// Slots per chunk: a power of two so an index splits with a shift.
pub const CHUNK: usize = 128;
const SHIFT: u32 = CHUNK.trailing_zeros();

#[derive(Debug)]
pub struct Arena<T> {
    chunks: Vec<Box<[T]>>,
    /// Slots handed out so far from the last chunk onwards (the high-water
    /// mark); every index below it is live or on `free`.
    used: u32,
    free: Vec<u32>,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena {
            chunks: Vec::new(),
            used: 0,
            free: Vec::new(),
        }
    }
}

impl<T: Default> Arena<T> {
    /// Stores `v` and returns its index.
    pub fn alloc(&mut self, v: T) -> u32 {
        if let Some(i) = self.free.pop() {
            *self.get_mut(i) = v;
            return i;
        }
        let i = self.used;
        if i as usize == self.chunks.len() * CHUNK {
            self.chunks
                .push((0..CHUNK).map(|_| T::default()).collect::<Box<[T]>>());
        }
        self.used += 1;
        *self.get_mut(i) = v;
        i
    }

    /// Whether [`Arena::alloc`] can give an index no greater than `max`.
    pub fn has_room(&self, max: u32) -> bool {
        !self.free.is_empty() || self.used <= max
    }

    /// Gives slot `i` back, resetting it (which drops whatever it owned).
    pub fn free(&mut self, i: u32) {
        *self.get_mut(i) = T::default();
        self.free.push(i);
    }

    pub fn get(&self, i: u32) -> &T {
        &self.chunks[(i >> SHIFT) as usize][i as usize & (CHUNK - 1)]
    }

    pub fn get_mut(&mut self, i: u32) -> &mut T {
        &mut self.chunks[(i >> SHIFT) as usize][i as usize & (CHUNK - 1)]
    }

    /// Live records.
    pub fn len(&self) -> usize {
        self.used as usize - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes this arena holds, chunks and free list.
    pub fn allocation_size(&self) -> usize {
        self.chunk_bytes()
            + self.chunks.capacity() * std::mem::size_of::<Box<[T]>>()
            + self.free.capacity() * 4
    }

    /// Bytes of the chunks alone.
    pub fn chunk_bytes(&self) -> usize {
        self.chunks.len() * CHUNK * std::mem::size_of::<T>()
    }

    /// Bytes a new record would allocate: a chunk, if this arena is in use
    /// and has no free slot. An arena not in use reports 0: its first chunk
    /// (at most 12 KiB) is left out of `--maxmemory`'s look-ahead, which
    /// would otherwise count every class a shard might ever hold.
    pub fn growth(&self) -> usize {
        if !self.chunks.is_empty()
            && self.free.is_empty()
            && self.used as usize == self.chunks.len() * CHUNK
        {
            CHUNK * std::mem::size_of::<T>()
        } else {
            0
        }
    }

    /// Whether a compaction would give memory back: an arena with no live
    /// record, or one with few live records over many chunks (under half
    /// full, so at least a quarter of its chunks would go).
    pub fn sparse(&self) -> bool {
        (self.is_empty() && !self.chunks.is_empty())
            || (self.chunks.len() > 2 && self.len() * 2 < self.chunks.len() * CHUNK)
    }

    /// Moves the records of the trailing chunks into free slots below, so
    /// those chunks can be dropped; `moved(from, to)` is told of each move
    /// so the caller can repoint its index. Order of live records is not
    /// kept (nothing depends on it).
    pub fn compact(&mut self, mut moved: impl FnMut(u32, u32)) {
        let keep = self.len().div_ceil(CHUNK);
        let limit = (keep * CHUNK) as u32;
        let free = std::mem::take(&mut self.free);
        let holes = relocate(&free, limit, self.used, |from, to| {
            let v = std::mem::take(self.get_mut(from));
            *self.get_mut(to) = v;
            moved(from, to);
        });
        self.chunks.truncate(keep);
        self.chunks.shrink_to_fit();
        self.used = limit.min(self.used);
        self.free = holes;
        self.free.shrink_to_fit();
        if self.is_empty() {
            *self = Arena::default();
        }
    }
}

/// The moves of a compaction, shared by [`Arena`] and [`Slab`]: each live
/// slot at or above `limit` (below `used`, not in `free`) goes to a free
/// slot below it, `step(from, to)` doing the move; returns the free slots
/// left below the limit.
fn relocate(free: &[u32], limit: u32, used: u32, mut step: impl FnMut(u32, u32)) -> Vec<u32> {
    let mut holes: Vec<u32> = free.iter().copied().filter(|&i| i < limit).collect();
    let is_free: std::collections::HashSet<u32> = free.iter().copied().collect();
    for from in limit..used {
        if is_free.contains(&from) {
            continue;
        }
        let to = holes.pop().expect("enough holes below the limit");
        step(from, to);
    }
    holes
}

/// Bytes a [`Slab`]'s chunk aims at, with at least 16 records a chunk.
/// Each shard has up to one partly used chunk per record layout it holds
/// (256 shards times half a 4 KiB chunk is 1.7 bytes a key at 300,000
/// keys); smaller chunks would cost as much again in chunk pointers and
/// the allocator's 16 bytes a block.
pub const SLAB_CHUNK_BYTES: usize = 4096;

/// Chunk pointers in each [`Chunks`] page after the first.
const PAGE: usize = 32;

/// A slab's chunks, in pages of [`PAGE`] pointers that are never
/// reallocated (only the first grows, up to a page). One list grown as a
/// `Vec` left every list it outgrew behind as a heap hole smaller than any
/// chunk: 2.7 MB of the allocator's free space at a million 128-byte keys
/// over 256 shards, 2.7 bytes a key.
#[derive(Debug, Default)]
struct Chunks {
    pages: Vec<Vec<Box<[u8]>>>,
    len: usize,
}

impl Chunks {
    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn push(&mut self, chunk: Box<[u8]>) {
        if self.len.is_multiple_of(PAGE) {
            let cap = if self.pages.is_empty() { 0 } else { PAGE };
            self.pages.push(Vec::with_capacity(cap));
        }
        if let Some(page) = self.pages.last_mut() {
            page.push(chunk);
            self.len += 1;
        }
    }

    #[inline(always)]
    fn get(&self, c: usize) -> &[u8] {
        &self.pages[c / PAGE][c % PAGE]
    }

    #[inline(always)]
    fn get_mut(&mut self, c: usize) -> &mut [u8] {
        &mut self.pages[c / PAGE][c % PAGE]
    }

    /// Chunks `lo` and `hi` at once (`lo < hi`).
    fn pair_mut(&mut self, lo: usize, hi: usize) -> (&mut [u8], &mut [u8]) {
        let (lp, hp) = (lo / PAGE, hi / PAGE);
        if lp == hp {
            let (a, b) = self.pages[lp].split_at_mut(hi % PAGE);
            (&mut a[lo % PAGE], &mut b[0])
        } else {
            let (a, b) = self.pages.split_at_mut(hp);
            (&mut a[lp][lo % PAGE], &mut b[0][hi % PAGE])
        }
    }

    /// Keeps the first `n` chunks.
    fn truncate(&mut self, n: usize) {
        if n >= self.len {
            return;
        }
        self.pages.truncate(n.div_ceil(PAGE));
        if let Some(last) = self.pages.last_mut() {
            last.truncate(n - (n - 1) / PAGE * PAGE);
        }
        self.pages.shrink_to_fit();
        self.len = n;
    }

    /// Bytes of the pointers' pages and their list.
    fn list_bytes(&self) -> usize {
        self.pages.capacity() * std::mem::size_of::<Vec<Box<[u8]>>>()
            + self
                .pages
                .iter()
                .map(|p| p.capacity() * std::mem::size_of::<Box<[u8]>>())
                .sum::<usize>()
    }
}

/// `Slab`: a shard's compact records of one layout, byte strings of a
/// length set at creation, addressed by `u32` index as in [`Arena`] (the
/// same chunks, free list and compaction), for records whose length is a
/// key's: an arena per length with no padding, which a type per length
/// could not give.
///
/// The first chunks double from one record up to the full chunk (1, 1, 2,
/// 4, ... records), then every chunk is full: a shard can hold 960
/// layouts, and a first chunk of 4 KiB for each would let a client that
/// writes one key of each length in each shard (some 245,000 keys) pin
/// about a gigabyte; this way a slab's first key costs its record.
#[derive(Debug)]
pub struct Slab {
    /// Bytes per record.
    size: usize,
    /// Records per full chunk: as many as fill [`SLAB_CHUNK_BYTES`], not a
    /// power of two (rounded down to one, 27 records of 150 bytes made 16,
    /// and each chunk's pointer and allocator header cost a byte a key).
    per: u32,
    /// `u64::MAX / per + 1`, which divides by `per` with a multiply.
    div: u64,
    /// The ramp's chunks: the largest power of two up to `per`, as a shift.
    shift: u32,
    chunks: Chunks,
    used: u32,
    free: Vec<u32>,
}

impl Slab {
    pub fn new(size: usize) -> Self {
        let per = (SLAB_CHUNK_BYTES / size.max(1)).clamp(16, CHUNK);
        Slab {
            size,
            per: per as u32,
            div: u64::MAX / per as u64 + 1,
            shift: per.ilog2(),
            chunks: Chunks::default(),
            used: 0,
            free: Vec::new(),
        }
    }

    /// Records in the first chunks, which double up to a full chunk.
    #[inline]
    fn ramp(&self) -> usize {
        1 << self.shift
    }

    /// Records in chunk `c`: 1, 1, 2, 4, ... (`shift` chunks holding
    /// [`Slab::ramp`] in all), then full chunks of `per`.
    fn chunk_len(&self, c: usize) -> usize {
        match c {
            0 => 1,
            _ if c <= self.shift as usize => 1 << (c - 1),
            _ => self.per as usize,
        }
    }

    /// Records the first `n` chunks hold.
    fn capacity_of(&self, n: usize) -> usize {
        let small = self.shift as usize + 1;
        if n <= small {
            (1usize << n) >> 1
        } else {
            self.ramp() + self.per as usize * (n - small)
        }
    }

    /// The chunk and byte offset of record `i`.
    #[inline(always)]
    fn at(&self, i: u32) -> (usize, usize) {
        let (c, slot) = if i as usize >= self.ramp() {
            let n = i - self.ramp() as u32;
            // n / per by a multiply (exact for any u32: Lemire, Kaser and
            // Kurz, "Faster remainder by direct computation", 2019).
            let q = ((self.div as u128 * n as u128) >> 64) as u32;
            (
                self.shift as usize + 1 + q as usize,
                (n - q * self.per) as usize,
            )
        } else if i == 0 {
            (0, 0)
        } else {
            let top = i.ilog2() as usize;
            (top + 1, i as usize - (1 << top))
        };
        (c, slot * self.size)
    }

    /// Whether [`Slab::alloc`] can give an index no greater than `max`.
    pub fn has_room(&self, max: u32) -> bool {
        !self.free.is_empty() || self.used <= max
    }

    /// A slot for a new record (its bytes are whatever they were: the
    /// caller writes all of them).
    pub fn alloc(&mut self) -> u32 {
        if let Some(i) = self.free.pop() {
            return i;
        }
        let i = self.used;
        if i as usize == self.capacity_of(self.chunks.len()) {
            let n = self.chunk_len(self.chunks.len());
            self.chunks
                .push(vec![0u8; n * self.size].into_boxed_slice());
        }
        self.used += 1;
        i
    }

    pub fn free(&mut self, i: u32) {
        self.free.push(i);
    }

    #[inline(always)]
    pub fn get(&self, i: u32) -> &[u8] {
        let (c, o) = self.at(i);
        &self.chunks.get(c)[o..o + self.size]
    }

    #[inline(always)]
    pub fn get_mut(&mut self, i: u32) -> &mut [u8] {
        let (c, o) = self.at(i);
        &mut self.chunks.get_mut(c)[o..o + self.size]
    }

    pub fn len(&self) -> usize {
        self.used as usize - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes this slab holds, chunks, their list and the free list.
    pub fn allocation_size(&self) -> usize {
        std::mem::size_of::<Slab>()
            + self.chunk_bytes()
            + self.chunks.list_bytes()
            + self.free.capacity() * 4
    }

    pub fn chunk_bytes(&self) -> usize {
        self.capacity_of(self.chunks.len()) * self.size
    }

    /// Bytes a new record would allocate (see [`Arena::growth`]).
    pub fn growth(&self) -> usize {
        if !self.chunks.is_empty()
            && self.free.is_empty()
            && self.used as usize == self.capacity_of(self.chunks.len())
        {
            self.chunk_len(self.chunks.len()) * self.size
        } else {
            0
        }
    }

    /// As [`Arena::sparse`].
    pub fn sparse(&self) -> bool {
        (self.is_empty() && !self.chunks.is_empty())
            || (self.chunks.len() > self.shift as usize + 2
                && self.len() * 2 < self.capacity_of(self.chunks.len()))
    }

    /// As [`Arena::compact`]; an emptied slab keeps no chunk.
    pub fn compact(&mut self, mut moved: impl FnMut(u32, u32)) {
        let mut keep = 0;
        while self.capacity_of(keep) < self.len() {
            keep += 1;
        }
        let limit = self.capacity_of(keep) as u32;
        let free = std::mem::take(&mut self.free);
        let holes = relocate(&free, limit, self.used, |from, to| {
            let (fc, fo) = self.at(from);
            let (tc, t) = self.at(to);
            let n = self.size;
            if fc == tc {
                self.chunks.get_mut(fc).copy_within(fo..fo + n, t);
            } else {
                // `to` is below `from`, so its chunk comes first.
                let (low, high) = self.chunks.pair_mut(tc, fc);
                low[t..t + n].copy_from_slice(&high[fo..fo + n]);
            }
            moved(from, to);
        });
        self.chunks.truncate(keep);
        self.used = limit.min(self.used);
        self.free = holes;
        self.free.shrink_to_fit();
        if self.is_empty() {
            self.chunks = Chunks::default();
            self.used = 0;
            self.free = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_freed_slots_and_empties() {
        let mut a: Arena<u64> = Arena::default();
        let ix: Vec<u32> = (0..300).map(|v| a.alloc(v)).collect();
        assert_eq!(a.len(), 300);
        assert_eq!(*a.get(ix[299]), 299);
        a.free(ix[5]);
        assert_eq!(a.alloc(7), ix[5]);
        for &i in &ix {
            a.free(i);
        }
        assert!(a.sparse());
        a.compact(|_, _| panic!("nothing to move"));
        assert_eq!(a.allocation_size(), 0);
    }

    #[test]
    fn compact_keeps_every_live_record() {
        let mut a: Arena<u64> = Arena::default();
        let ix: Vec<u32> = (0..1000).map(|v| a.alloc(v + 1)).collect();
        // Keep every seventh record.
        for (n, &i) in ix.iter().enumerate() {
            if n % 7 != 0 {
                a.free(i);
            }
        }
        assert!(a.sparse());
        let mut where_: std::collections::HashMap<u32, u64> =
            ix.iter().step_by(7).map(|&i| (i, *a.get(i))).collect();
        let before = a.allocation_size();
        a.compact(|from, to| {
            let v = where_.remove(&from).unwrap();
            assert!(where_.insert(to, v).is_none());
        });
        assert!(a.allocation_size() < before / 3);
        assert_eq!(a.len(), where_.len());
        for (&i, &v) in &where_ {
            assert_eq!(*a.get(i), v);
        }
        // Still usable afterwards.
        let i = a.alloc(99);
        assert_eq!(*a.get(i), 99);
        assert_eq!(a.len(), where_.len() + 1);
    }

    /// Past the ramp, record `i` is in chunk `shift + 1 + (i - ramp) / per`:
    /// the multiply that divides agrees with a division up to the largest
    /// index a handle holds, for every record length.
    #[test]
    fn slab_positions_divide_exactly() {
        for size in 1..=1_200 {
            let s = Slab::new(size);
            let (per, ramp) = (s.per as usize, s.ramp());
            assert!(per * size <= SLAB_CHUNK_BYTES || per == 16, "{size}");
            for i in (ramp as u32..1 << 22).step_by(4_099).chain([(1 << 22) - 1]) {
                let n = i as usize - ramp;
                let want = (s.shift as usize + 1 + n / per, n % per * size);
                assert_eq!(s.at(i), want, "{size} {i}");
            }
        }
    }

    /// A slab of records of an odd length (a 37-byte key's window record)
    /// keeps each record's bytes apart from its neighbours', through frees,
    /// reuse and a compaction.
    #[test]
    fn slab_keeps_records_apart_and_compacts() {
        // Chunks double from one record: each record has a place of its
        // own, and the chunks hold exactly the records allocated so far
        // (up to the last, partly used, chunk).
        for size in [11, 53, 150, 300, 1050] {
            let mut s = Slab::new(size);
            let mut seen = std::collections::HashSet::new();
            for n in 1..=700u32 {
                let i = s.alloc();
                assert_eq!(i, n - 1);
                let (c, o) = s.at(i);
                assert!(
                    o + size <= s.chunks.get(c).len(),
                    "{size}: {i} in chunk {c}"
                );
                assert!(seen.insert((c, o)), "{size}: {i} shares a place");
                let fits = s.chunk_bytes() / size;
                assert!(
                    fits >= n as usize && fits < 2 * n as usize + s.per as usize,
                    "{size}: {n} in {fits}"
                );
            }
            if size >= 300 {
                // Past the first page of chunk pointers.
                assert!(s.chunks.len() > PAGE, "{size}: {} chunks", s.chunks.len());
            }
            let one = Slab::new(size);
            let mut one = one;
            one.alloc();
            assert_eq!(
                one.chunk_bytes(),
                size,
                "a slab's first key costs its record"
            );
        }
        for size in [11, 53, 300] {
            let mut s = Slab::new(size);
            let fill =
                |v: u32| -> Vec<u8> { (0..size).map(|b| (v as usize * 7 + b) as u8).collect() };
            let ix: Vec<u32> = (0..1000u32)
                .map(|v| {
                    let i = s.alloc();
                    s.get_mut(i).copy_from_slice(&fill(v));
                    i
                })
                .collect();
            for (v, &i) in ix.iter().enumerate() {
                assert_eq!(s.get(i), &fill(v as u32)[..]);
            }
            let mut where_: std::collections::HashMap<u32, u32> = Default::default();
            for (v, &i) in ix.iter().enumerate() {
                if v % 5 == 0 {
                    where_.insert(i, v as u32);
                } else {
                    s.free(i);
                }
            }
            assert!(s.sparse());
            let before = s.allocation_size();
            s.compact(|from, to| {
                let v = where_.remove(&from).unwrap();
                assert!(where_.insert(to, v).is_none());
            });
            assert!(s.allocation_size() < before / 2, "{size}");
            assert_eq!(s.len(), 200);
            for (&i, &v) in &where_ {
                assert_eq!(s.get(i), &fill(v)[..]);
            }
            for &i in where_.keys() {
                s.free(i);
            }
            s.compact(|_, _| panic!("nothing to move"));
            assert_eq!(s.chunk_bytes(), 0);
        }
    }
}
