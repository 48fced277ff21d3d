//! A global allocator wrapper that counts live heap bytes, so `INFO memory`
//! (and later `--maxmemory`) report what the process really holds rather
//! than an estimate. The binary installs it; the counter reads 0 where it
//! is not installed (library users, tests), and callers fall back to RSS.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

pub struct CountingAlloc;

// SAFETY: every method forwards to `System` unchanged; the counter is only
// bookkeeping beside it.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
            ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

/// Live heap bytes, or 0 if the counting allocator is not installed.
pub fn allocated() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
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
