//! The Lua states' heap: each state allocates through [`alloc`], which
//! keeps the state's byte count and cap and takes its blocks from
//! mimalloc instead of the process's malloc.
//!
//! Why not the process's malloc (mlua's default allocator goes there): a
//! script makes and drops many small strings and tables per call, on
//! whichever worker runs it, and the process keeps one glibc arena for
//! every thread (`alloc::one_arena`, for the keys' memory) whose
//! per-thread cache holds seven blocks of a size; past that each block
//! went through the arena's lock. Through mimalloc, with everything else
//! unchanged, the general Lua path's CPU per call fell by 13-18%
//! (`docs/performance.md`). mlua takes a state made elsewhere
//! (`Lua::get_or_init_from_ptr`), so the state is made here with this
//! allocator, and closed here once mlua's handles are gone.

use std::ffi::c_void;
use std::ptr;

use mlua::ffi;

/// One state's bytes in use and its cap (`EngineConfig::memory_limit`),
/// as Lua reports sizes to its allocator.
pub(super) struct Heap {
    used: usize,
    limit: usize,
}

/// Lua 5.1's allocator contract: `nsize == 0` frees; otherwise a block of
/// `nsize` bytes (moved from `ptr`, of `osize`), or null, which Lua
/// raises as a memory error. Only growth is refused at the cap: Lua
/// cannot take a failed shrink (its collector shrinks tables and the
/// string table as it runs).
///
/// # Safety
/// `ud` is the state's [`Heap`], used by one thread at a time (the one
/// holding the state); `ptr` is null or a block this function returned
/// for the same state, of `osize` bytes.
unsafe extern "C" fn alloc(
    ud: *mut c_void,
    ptr: *mut c_void,
    osize: usize,
    nsize: usize,
) -> *mut c_void {
    // SAFETY: as the contract above says.
    let heap = unsafe { &mut *(ud as *mut Heap) };
    let old = if ptr.is_null() { 0 } else { osize };
    if nsize == 0 {
        if !ptr.is_null() {
            // SAFETY: a block of ours.
            unsafe { libmimalloc_sys::mi_free(ptr) };
            heap.used -= old;
            crate::alloc::count_elsewhere(-(old as isize));
        }
        return ptr::null_mut();
    }
    if nsize > old && heap.used + (nsize - old) > heap.limit {
        return ptr::null_mut();
    }
    // SAFETY: `ptr` is null (a new block) or a block of ours.
    let p = unsafe { libmimalloc_sys::mi_realloc(ptr, nsize) };
    if !p.is_null() {
        heap.used = heap.used + nsize - old;
        crate::alloc::count_elsewhere(nsize as isize - old as isize);
    }
    p
}

/// A Lua state on its own heap, with the libraries the sandbox starts
/// from loaded. Dropped after every mlua handle of the state (the `Lua`
/// [`State::new`] returns included): it closes the state and frees the
/// heap.
pub(super) struct State {
    raw: *mut ffi::lua_State,
    heap: *mut Heap,
}

// SAFETY: the raw pointers are the state's and its heap's, which mlua's
// `Lua` (itself `Send` with the `send` feature) already moves between
// threads; this thread holds the state whenever it touches them.
unsafe impl Send for State {}
// SAFETY: as above: `Lua` is `Sync` and serialises use of the state,
// and the heap is touched only by the thread holding it.
unsafe impl Sync for State {}

impl State {
    /// A state capped at `limit` bytes, with Lua's base, table, string,
    /// math and debug libraries (the sandbox's prelude keeps only what
    /// Redis keeps of them), and mlua's handle on it, to drop first.
    pub(super) fn new(limit: usize) -> mlua::Result<(State, mlua::Lua)> {
        let heap = Box::into_raw(Box::new(Heap { used: 0, limit }));
        // SAFETY: `alloc` keeps its contract for this heap, which lives
        // until the state is closed (`Drop`).
        let raw = unsafe { ffi::lua_newstate(alloc, heap as *mut c_void) };
        if raw.is_null() {
            // SAFETY: made just above, not handed to any state.
            drop(unsafe { Box::from_raw(heap) });
            return Err(mlua::Error::MemoryError("cannot make a Lua state".into()));
        }
        let libs: [(&std::ffi::CStr, ffi::lua_CFunction); 5] = [
            (c"", ffi::luaopen_base),
            (c"table", ffi::luaopen_table),
            (c"string", ffi::luaopen_string),
            (c"math", ffi::luaopen_math),
            (c"debug", ffi::luaopen_debug),
        ];
        for (name, open) in libs {
            // SAFETY: `raw` is a fresh state of this thread's; each
            // library's opener is called as `luaL_openlibs` calls it, in
            // protected mode, so a memory error comes back as a code.
            let rc = unsafe {
                ffi::lua_pushcfunction(raw, open);
                ffi::lua_pushstring(raw, name.as_ptr());
                ffi::lua_pcall(raw, 1, 0, 0)
            };
            if rc != 0 {
                // SAFETY: no handle of the state exists yet.
                unsafe {
                    ffi::lua_close(raw);
                    drop(Box::from_raw(heap));
                }
                return Err(mlua::Error::MemoryError(
                    "cannot open Lua's libraries".into(),
                ));
            }
        }
        // SAFETY: `raw` is a live state; the `Lua` cached in it lives
        // until the state is closed, and the caller drops the clone taken
        // here before the `State` (as `Drop` requires).
        let lua = unsafe { mlua::Lua::get_or_init_from_ptr(raw) }.clone();
        Ok((State { raw, heap }, lua))
    }

    /// Runs `f` with the cap lifted: the collector, after a script that
    /// reached the cap, must not fail for want of the few bytes mlua's
    /// protected call takes.
    pub(super) fn uncapped<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(*mut Heap, usize);
        impl Drop for Restore {
            fn drop(&mut self) {
                // SAFETY: the heap outlives this guard (it is the state's).
                unsafe { (*self.0).limit = self.1 };
            }
        }
        // SAFETY: read and written by the thread holding the state.
        let _restore = Restore(self.heap, unsafe { (*self.heap).limit });
        // SAFETY: as above.
        unsafe { (*self.heap).limit = usize::MAX };
        f()
    }

    /// Bytes the state holds, as Lua counts them.
    pub(super) fn used(&self) -> usize {
        // SAFETY: read by the thread holding the state.
        unsafe { (*self.heap).used }
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // SAFETY: every handle of the state is gone (its owner drops this
        // last); closing frees every block through `alloc`, whose heap is
        // freed only after.
        unsafe {
            ffi::lua_close(self.raw);
            drop(Box::from_raw(self.heap));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cap refuses growth past it (a memory error in the script, the
    /// state still usable), and a collection with the cap lifted gives
    /// back what the failed script built.
    #[test]
    fn the_cap_refuses_growth_and_the_state_goes_on() {
        let (state, lua) = State::new(1 << 20).unwrap();
        let at_start = state.used();
        assert!(at_start > 0 && at_start < 1 << 20, "{at_start}");
        let hog = lua.load("local t = {} for i = 1, 1e7 do t[i] = tostring(i) end");
        assert!(matches!(hog.exec(), Err(mlua::Error::MemoryError(_))));
        assert!(state.used() <= 1 << 20, "{}", state.used());
        state.uncapped(|| lua.gc_collect()).unwrap();
        assert!(state.used() < at_start + (64 << 10), "{}", state.used());
        assert_eq!(lua.load("return 40 + 2").eval::<i64>().unwrap(), 42);
        // The handle first, as `Drop` requires.
        drop(lua);
    }
}
