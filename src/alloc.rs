//! A global allocator wrapper that counts live heap bytes, so `INFO memory`
//! and `--maxmemory` see what the process really holds rather than an
//! estimate. The binary installs it; the counter reads 0 where it is not
//! installed (library users, tests), and callers fall back to RSS.
//!
//! Each thread counts into its own cell and adds to the shared counter
//! once its tally passes [`BATCH`] either way: one shared atomic touched
//! by every allocation of both worker threads was contended (8.6% of the
//! server's CPU in a transaction benchmark). The shared figure is then off
//! by less than `BATCH` per thread, a few hundred KiB in all.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

/// Set by the binary that installs [`CountingAlloc`] ([`installed`]):
/// until then [`count_elsewhere`] counts nothing, so the figure stays 0
/// and [`used_memory`] falls back to RSS.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Bytes a thread may count before adding them to [`ALLOCATED`].
const BATCH: isize = 64 * 1024;

thread_local! {
    /// This thread's count not yet added to `ALLOCATED`. A const `Cell`:
    /// no allocation and no destructor, so it is safe in an allocator.
    static PENDING: Cell<isize> = const { Cell::new(0) };
}

/// Counts `n` bytes (negative: freed).
fn count(n: isize) {
    let batched = PENDING.try_with(|p| {
        let v = p.get() + n;
        if v.abs() >= BATCH {
            ALLOCATED.fetch_add(v, Ordering::Relaxed);
            p.set(0);
        } else {
            p.set(v);
        }
    });
    // A thread past its thread-locals' teardown counts directly.
    if batched.is_err() {
        ALLOCATED.fetch_add(n, Ordering::Relaxed);
    }
}

/// Bytes allocated outside the global allocator (`n` negative: freed),
/// counted as if through it: the Lua states' heaps (`script::heap`).
pub fn count_elsewhere(n: isize) {
    if INSTALLED.load(Ordering::Relaxed) {
        count(n);
    }
}

/// Says that [`CountingAlloc`] is the global allocator (the binary calls
/// it first thing).
pub fn installed() {
    INSTALLED.store(true, Ordering::Relaxed);
}

pub struct CountingAlloc;

// SAFETY: every method forwards to `System` unchanged; the counter is only
// bookkeeping beside it.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        count(-(layout.size() as isize));
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Live heap bytes (within [`BATCH`] per thread), or 0 if the counting
/// allocator is not installed.
pub fn allocated() -> usize {
    ALLOCATED.load(Ordering::Relaxed).max(0) as usize
}

/// Resident set size from `/proc/self/statm`, or 0 where unavailable.
pub fn rss() -> usize {
    let Ok(text) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: usize = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(4096) as usize
}

/// Bytes in use as `INFO memory` and `/metrics` report them: the counting
/// allocator's figure, or RSS where it is not installed.
pub fn used_memory() -> usize {
    match allocated() {
        0 => rss(),
        n => n,
    }
}

/// Puts every thread's allocations in one glibc malloc arena (call before
/// any thread starts). glibc gives each thread that allocates under
/// contention an arena of its own, and memory freed in one arena serves
/// only that arena's later allocations; keys are allocated by whichever
/// worker serves them, so each worker's arena kept its own garbage from
/// growing logs. Measured with `benches/memory.py` (100,000 `log` keys
/// of 100 timestamps): 1,230-1,630 B/key of RSS with an arena per worker
/// against 939 with one, for 916 B/key of live heap. Hot paths allocate
/// little, and glibc's per-thread caches serve most of what they do
/// without the arena's lock.
pub fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets a tunable; called before other threads
    // exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}
