//! `redis.call` and `redis.pcall` as raw Lua C functions, and `KEYS` and
//! `ARGV` set with the raw API.
//!
//! Hand-written over `mlua::ffi` rather than with `Lua::create_function`:
//! on Lua 5.1 every protected mlua operation (a callback's arguments, each
//! table write, each string made) pushes fresh C closures, which the Lua
//! collector must then sweep; measured on the `limits` fixed-window script
//! those cost about a quarter of the server's CPU per call. Here the
//! arguments are read from the stack and the reply is pushed onto it, as
//! Redis's own `luaRedisGenericCommand` does, and nothing is allocated but
//! the Lua values the script gets.
//!
//! Lua reports errors with `longjmp`, which may not cross a Rust frame
//! that owns something to drop. So each function below that calls into Lua
//! holds only references, integers and raw pointers while it does: the
//! buffers live in the [`CallCtx`] on the heap, and the one step that owns
//! values (running the command) makes no Lua call.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use mlua::ffi;

use std::ops::Range;
use std::sync::Arc;

use bytes::BytesMut;

use super::api::{Host, Running, KILLED};
use crate::protocol::Request;
use crate::protocol::{Protocol, ReplyBuf};

/// What `redis.call`, `redis.pcall`, `redis.setresp` and
/// `redis.acl_check_cmd` reach during one run: one per Lua state, on the
/// heap, its address an upvalue of the raw functions (`call.rs`) and held
/// by the others. The functions are created once with the state, not per
/// run, and the host is lent for the run's length only.
pub(super) struct CallCtx {
    /// The command layer's host, lent by [`Vm::run`] and taken back before
    /// it returns; `None` between runs.
    pub(super) host: Option<NonNull<dyn Host + 'static>>,
    pub(super) script_resp: Protocol,
    pub(super) run: Arc<Running>,
    pub(super) reply: ReplyBuf,
    /// The request `redis.call` builds, its arguments copied once out of
    /// Lua; both buffers reused from call to call.
    pub(super) frame: BytesMut,
    pub(super) spans: Vec<Range<usize>>,
    /// An error reply's or a refusal's text, for `redis.call` to raise.
    pub(super) error: Vec<u8>,
    /// `error` is a command's error reply or refusal, which the command
    /// layer has counted already (`INFO errorstats`): the table made of it
    /// is marked so, and a script failing with it is not counted again.
    pub(super) counted: bool,
    /// This run marked a table in `Vm::counted`.
    pub(super) marked: bool,
}

/// A state's [`CallCtx`], owned by its [`Vm`] (freed when it drops).
#[derive(Clone, Copy)]
pub(super) struct CtxPtr(pub(super) NonNull<CallCtx>);

// SAFETY: a state (its `Vm`, which owns this pointer) moves between
// threads only inside the engine's lock on its slot, and the context is
// reached only through [`CtxPtr::get`], by the thread that holds that lock,
// while a script or the state's setup runs. Not Sync: nothing shares it.
unsafe impl Send for CtxPtr {}

impl CtxPtr {
    /// # Safety
    /// Only while this thread holds the state, and not while another
    /// reference from `get` lives.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn get(&self) -> &mut CallCtx {
        // SAFETY: the pointer is the live box `Vm::new` leaked (freed only
        // when the `Vm` drops); the caller holds the state and no other
        // reference from `get` lives (this function's contract).
        unsafe { &mut *self.0.as_ptr() }
    }
}

/// The C function behind `redis.call`: its one upvalue is the state's
/// [`CallCtx`].
pub unsafe extern "C-unwind" fn redis_call(l: *mut ffi::lua_State) -> c_int {
    call(l, false)
}

/// `redis.pcall`: an error reply is returned as `{err = ...}`.
pub unsafe extern "C-unwind" fn redis_pcall(l: *mut ffi::lua_State) -> c_int {
    call(l, true)
}

// The frames that call into Lua (`call`, `push_reply` and the helpers
// under them) hold only these, references and integers while they do: a
// change that gives any of them a destructor fails to compile here instead
// of being skipped by `longjmp` (tested under a heap that fails mid-reply:
// `a_reply_past_the_heap_cap_fails_the_script_and_calls_go_on`).
const _: () = {
    assert!(!std::mem::needs_drop::<Step>());
    assert!(!std::mem::needs_drop::<*const [u8]>());
    assert!(!std::mem::needs_drop::<&mut CallCtx>());
};

/// What the command step decided, before anything goes back to Lua.
enum Step {
    /// The reply is in `ctx.reply`.
    Reply,
    /// An error reply or a refusal, its text in `ctx.error`.
    Error,
    /// Stop the script (killed, or to run again).
    Stop,
}

unsafe fn call(l: *mut ffi::lua_State, protected: bool) -> c_int {
    let ctx = ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *mut CallCtx;
    // SAFETY: the upvalue is the state's own context, which outlives every
    // function of the state; only this thread runs the state now.
    let ctx = &mut *ctx;
    let step = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| command(l, ctx))) {
        Ok(step) => step,
        Err(_) => {
            ctx.error.clear();
            ctx.error
                .extend_from_slice(b"ERR internal error running the command");
            Step::Error
        }
    };
    // The arguments were copied out: free their stack slots, so the reply
    // has room however many there were (a call with 7,999 arguments
    // leaves none of Lua 5.1's 8,000 C stack slots for it otherwise), as
    // Redis's `luaRedisGenericCommand` pops them.
    ffi::lua_settop(l, 0);
    match step {
        Step::Reply => {
            let bytes: *const [u8] = ctx.reply.written_since(0);
            let mut pos = 0;
            if !push_reply(l, &*bytes, &mut pos, 0) {
                raise_str(l, b"a command's reply could not be read");
            }
            1
        }
        Step::Error => {
            push_err_table(l, &ctx.error);
            if ctx.counted {
                // Marked in the state's weak table (upvalue 2): a script
                // that fails with it, or returns it, is not counted again.
                ffi::lua_pushvalue(l, -1);
                ffi::lua_pushboolean(l, 1);
                ffi::lua_rawset(l, ffi::lua_upvalueindex(2));
                ctx.marked = true;
            }
            if protected {
                1
            } else {
                ffi::lua_error(l)
            }
        }
        Step::Stop => raise_str(l, KILLED.as_bytes()),
    }
}

/// Reads the arguments and runs the command through the host. Makes no
/// call into Lua that can raise an error.
fn command(l: *mut ffi::lua_State, ctx: &mut CallCtx) -> Step {
    if ctx.run.stopping() {
        return Step::Stop;
    }
    ctx.error.clear();
    ctx.counted = false;
    let Some(mut host) = ctx.host else {
        ctx.error
            .extend_from_slice(b"ERR redis.call is only available while a script runs");
        return Step::Error;
    };
    // SAFETY: reading the stack of the running function.
    let n = unsafe { ffi::lua_gettop(l) };
    if n == 0 {
        ctx.error
            .extend_from_slice(b"ERR Please specify at least one argument for this redis lib call");
        return Step::Error;
    }
    ctx.spans.clear();
    ctx.frame.clear();
    for i in 1..=n {
        let start = ctx.frame.len();
        // SAFETY: `i` is within the stack; a string's bytes stay valid
        // while it is on the stack, and are copied at once.
        match unsafe { ffi::lua_type(l, i) } {
            // SAFETY: as above.
            ffi::LUA_TSTRING => unsafe {
                let mut len = 0usize;
                let p = ffi::lua_tolstring(l, i, &mut len);
                ctx.frame
                    .extend_from_slice(std::slice::from_raw_parts(p as *const u8, len));
            },
            // As Redis writes it (`%.17g`; Lua's own `%.14g` would lose
            // digits of a microsecond timestamp), with no Lua string.
            ffi::LUA_TNUMBER => {
                // SAFETY: `i` is within the stack and holds a number.
                let x = unsafe { ffi::lua_tonumber(l, i) };
                number_text(x, &mut ctx.frame);
            }
            _ => {
                ctx.error.extend_from_slice(
                    b"ERR Lua redis lib command arguments must be strings or integers",
                );
                return Step::Error;
            }
        }
        ctx.spans.push(start..ctx.frame.len());
    }
    let req = Request::new(ctx.frame.split().freeze(), &ctx.spans);
    ctx.reply.buffer().clear();
    // SAFETY: set by `Vm::run` for this run, on this thread, and the host
    // never calls back into Lua.
    let done = unsafe { host.as_mut() }.call(&req, ctx.script_resp, &mut ctx.reply);
    drop(req);
    if done.wrote {
        ctx.run.wrote.store(true, Ordering::Relaxed);
    }
    if done.abort {
        ctx.run.abort.store(true, Ordering::Relaxed);
        return Step::Stop;
    }
    let bytes = ctx.reply.written_since(0);
    if let Some(rest) = bytes.strip_prefix(b"-") {
        let line = rest.strip_suffix(b"\r\n").unwrap_or(rest);
        ctx.error.extend_from_slice(line);
        // The command layer counted it (a failed command, or a refusal).
        ctx.counted = true;
        return Step::Error;
    }
    Step::Reply
}

/// A number as Redis writes a script's numeric `redis.call` argument:
/// `%.17g` (Redis 7.0's `luaRedisGenericCommand`), not Lua 5.1's
/// `lua_Number2str` (`%.14g`): `redis.call('set', k, 1700000000123456)`
/// stores every digit.
pub(super) fn number_text(x: f64, out: &mut bytes::BytesMut) {
    let mut buf = [0u8; 32];
    out.extend_from_slice(crate::util::format_g(x, 17, &mut buf));
}

/// Raises `msg` as a Lua error (a string, which the error handler prefixes
/// with `ERR`, as for a Rust callback's runtime error).
unsafe fn raise_str(l: *mut ffi::lua_State, msg: &[u8]) -> ! {
    ffi::lua_pushlstring_(l, msg.as_ptr() as *const c_char, msg.len());
    ffi::lua_error(l)
}

/// Pushes `{err = text}`.
unsafe fn push_err_table(l: *mut ffi::lua_State, text: &[u8]) {
    ffi::lua_createtable(l, 0, 1);
    push_bytes(l, text);
    ffi::lua_setfield(l, -2, c"err".as_ptr());
}

unsafe fn push_bytes(l: *mut ffi::lua_State, b: &[u8]) {
    ffi::lua_pushlstring_(l, b.as_ptr() as *const c_char, b.len());
}

/// One line from `*pos`, without its CRLF.
fn line<'b>(bytes: &'b [u8], pos: &mut usize) -> Option<&'b [u8]> {
    let rest = bytes.get(*pos..)?;
    // `memchr` for each CR, not `memmem`, whose searcher is built on every
    // call: header lines are a few bytes, and a CR not followed by LF
    // (none is, in replies this server writes) is only stepped over.
    let mut from = 0;
    let end = loop {
        let cr = from + memchr::memchr(b'\r', &rest[from..])?;
        if rest.get(cr + 1) == Some(&b'\n') {
            break cr;
        }
        from = cr + 1;
    };
    *pos += end + 2;
    Some(&rest[..end])
}

/// Wraps the value on top of the stack in a table as its field `key`.
unsafe fn wrap(l: *mut ffi::lua_State, key: &std::ffi::CStr) {
    ffi::lua_createtable(l, 0, 1);
    ffi::lua_insert(l, -2);
    ffi::lua_setfield(l, -2, key.as_ptr());
}

/// Pushes the reply at `*pos` as Redis's conversion rules make it (RESP2
/// and RESP3; `tests/it/script_conversions.rs` and the differential corpus
/// hold it to Redis's replies).
/// `false`: the bytes are not one whole reply, and nothing was pushed.
unsafe fn push_reply(l: *mut ffi::lua_State, bytes: &[u8], pos: &mut usize, depth: usize) -> bool {
    if depth > 64 || ffi::lua_checkstack(l, 4) == 0 {
        return false;
    }
    let Some(&kind) = bytes.get(*pos) else {
        return false;
    };
    *pos += 1;
    let Some(head) = line(bytes, pos) else {
        return false;
    };
    let number = || crate::util::parse_i64(head);
    match kind {
        b'+' => {
            push_bytes(l, head);
            wrap(l, c"ok");
        }
        b'-' => {
            push_bytes(l, head);
            wrap(l, c"err");
        }
        b':' => match number() {
            Some(n) => ffi::lua_pushnumber(l, n as f64),
            None => return false,
        },
        b'$' | b'=' => {
            let Some(n) = number() else { return false };
            if n < 0 {
                ffi::lua_pushboolean(l, 0);
                return true;
            }
            let n = n as usize;
            let Some(body) = bytes.get(*pos..*pos + n) else {
                return false;
            };
            *pos += n + 2;
            if kind == b'$' {
                push_bytes(l, body);
            } else {
                let (format, text) = body.split_at(body.len().min(3));
                let text = text.strip_prefix(b":").unwrap_or(text);
                ffi::lua_createtable(l, 0, 2);
                push_bytes(l, format);
                ffi::lua_setfield(l, -2, c"format".as_ptr());
                push_bytes(l, text);
                ffi::lua_setfield(l, -2, c"string".as_ptr());
                wrap(l, c"verbatim_string");
            }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let Some(n) = number() else { return false };
            if n < 0 {
                ffi::lua_pushboolean(l, 0);
                return true;
            }
            let top = ffi::lua_gettop(l);
            let array = matches!(kind, b'*' | b'>');
            let size = c_int::try_from(n).unwrap_or(0);
            if array {
                ffi::lua_createtable(l, size, 0);
            } else {
                ffi::lua_createtable(l, 0, size);
            }
            for i in 1..=n {
                if !push_reply(l, bytes, pos, depth + 1) {
                    ffi::lua_settop(l, top);
                    return false;
                }
                if array {
                    ffi::lua_rawseti_(l, -2, i as c_int);
                    continue;
                }
                if kind == b'~' {
                    ffi::lua_pushboolean(l, 1);
                } else if !push_reply(l, bytes, pos, depth + 1) {
                    ffi::lua_settop(l, top);
                    return false;
                }
                if ffi::lua_type(l, -2) == ffi::LUA_TNIL {
                    // Lua cannot key a table by nil: mlua's raw_set refuses
                    // it as an error, and so does this.
                    ffi::lua_settop(l, top);
                    return false;
                }
                ffi::lua_rawset(l, -3);
            }
            match kind {
                b'%' => wrap(l, c"map"),
                b'~' => wrap(l, c"set"),
                b'|' => {
                    // An attribute describes the reply after it, which is
                    // what the script gets.
                    ffi::lua_settop(l, top);
                    return push_reply(l, bytes, pos, depth + 1);
                }
                _ => {}
            }
        }
        b'_' => ffi::lua_pushnil(l),
        b'#' => ffi::lua_pushboolean(l, (head == b"t") as c_int),
        b',' => {
            let Some(d) = std::str::from_utf8(head).ok().and_then(|t| match t {
                "inf" => Some(f64::INFINITY),
                "-inf" => Some(f64::NEG_INFINITY),
                t => t.parse().ok(),
            }) else {
                return false;
            };
            ffi::lua_pushnumber(l, d);
            wrap(l, c"double");
        }
        b'(' => {
            push_bytes(l, head);
            wrap(l, c"big_number");
        }
        _ => return false,
    }
    true
}

/// Creates `redis.call` or `redis.pcall` in `lua`, reaching `ctx` and
/// marking commands' error tables in `counted`.
pub fn create(
    lua: &mlua::Lua,
    ctx: NonNull<CallCtx>,
    counted: &mlua::Table,
    protected: bool,
) -> mlua::Result<mlua::Function> {
    let f: ffi::lua_CFunction = if protected { redis_pcall } else { redis_call };
    // SAFETY: `counted` is at index 1; the closure takes the light
    // userdata and it as upvalues, and is left alone on the stack, which
    // is what exec_raw hands back.
    unsafe {
        lua.exec_raw(counted, |l| {
            ffi::lua_pushlightuserdata(l, ctx.as_ptr() as *mut c_void);
            ffi::lua_pushvalue(l, 1);
            ffi::lua_pushcclosure(l, f, 2);
            ffi::lua_remove(l, 1);
        })
    }
}

/// Sets `KEYS` and `ARGV` in the globals table at `globals`.
///
/// # Safety
/// `l` is the state, inside a protected call (making the tables and
/// strings may raise when memory runs out).
pub unsafe fn set_keys_and_args<'k>(
    l: *mut ffi::lua_State,
    globals: c_int,
    keys: impl ExactSizeIterator<Item = &'k [u8]>,
    args: impl ExactSizeIterator<Item = &'k [u8]>,
) {
    push_bytes(l, b"KEYS");
    push_array(l, keys);
    ffi::lua_rawset(l, globals);
    push_bytes(l, b"ARGV");
    push_array(l, args);
    ffi::lua_rawset(l, globals);
}

/// Pushes an array of byte strings.
unsafe fn push_array<'k>(l: *mut ffi::lua_State, items: impl ExactSizeIterator<Item = &'k [u8]>) {
    ffi::lua_createtable(l, c_int::try_from(items.len()).unwrap_or(0), 0);
    for (i, b) in items.enumerate() {
        push_bytes(l, b);
        ffi::lua_rawseti_(l, -2, i as c_int + 1);
    }
}
