//! One Lua state and what lives in it: the sandbox's setup (the prelude,
//! the libraries, `redis.call` and the rest of the `redis` table), a
//! script's compilation, and one run with its `KEYS`, `ARGV` and result.
//! The engine (`mod.rs`) keeps a pool of these and the script cache.

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use mlua::{ffi, Function, HookTriggers, Lua, Table, Value};

use super::api::*;
use super::call::{self, CallCtx, CtxPtr};
use super::{convert, heap, libs};
use crate::protocol::{Protocol, ReplyBuf, Request};

/// The Lua state and what lives in it.
pub(super) struct Vm {
    pub(super) lua: Lua,
    /// The sandbox's backing table of globals (`T.B`), where each run's
    /// `KEYS` and `ARGV` go.
    pub(super) globals: Table,
    /// The prelude's `T.run`: calls a script under Redis's error handler.
    pub(super) runner: Function,
    /// Keyed by ahash, not SipHash: looked up on every run.
    pub(super) functions: HashMap<[u8; 40], Function, ahash::RandomState>,
    /// The engine's flush generation `functions` belong to.
    pub(super) generation: u64,
    pub(super) ctx: CtxPtr,
    pub(super) fields: convert::Fields,
    /// `cjson`'s settings, back to their defaults at each run.
    pub(super) json: libs::JsonSettings,
    /// Error tables made of commands' errors (weak keys; see
    /// `CallCtx::counted`).
    pub(super) counted: mlua::RegistryKey,
    /// Scripts run in this state (for the collector's steps).
    pub(super) runs: std::cell::Cell<u32>,
    /// The state itself, on its own heap: the last field, so every
    /// handle above is gone when it closes.
    pub(super) state: heap::State,
}

impl Drop for Vm {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `Vm::new`, freed once; the
        // state's functions that hold it are never called again.
        drop(unsafe { Box::from_raw(self.ctx.0.as_ptr()) });
    }
}

/// How a run ended, short of an engine failure.
pub(super) enum Outcome {
    /// The result was written.
    Reply,
    /// The script raised: the error's text and where.
    Raised {
        err: String,
        source: String,
        line: i64,
    },
    OutOfMemory,
}

/// The text of an error raised in Rust (a library function, the hook).
pub(super) fn errtext(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => errtext(cause),
        mlua::Error::MemoryError(_) => "not enough memory".into(),
        e => e.to_string(),
    }
}

impl Vm {
    pub(super) fn new(cfg: &EngineConfig, run: Arc<Running>) -> mlua::Result<Vm> {
        // With `debug`, which the prelude keeps only `debug.getinfo` of,
        // for its error handler, and removes from the globals before any
        // script runs, as Redis does.
        let (state, lua) = heap::State::new(cfg.memory_limit)?;
        let t = lua.create_table()?;
        let json = libs::install(&lua)?;
        {
            let run = run.clone();
            t.set(
                "stopping",
                lua.create_function(move |_, ()| Ok(run.stopping()))?,
            )?;
        }
        t.set(
            "errtext",
            lua.create_function(|lua, v: Value| {
                let text = match v {
                    Value::Error(e) => errtext(&e),
                    Value::String(s) => s.to_string_lossy(),
                    other => format!("{other:?}"),
                };
                Ok(Value::String(lua.create_string(text)?))
            })?,
        )?;
        {
            let tt = t.clone();
            t.set(
                "rawset",
                lua.create_function(move |_, (target, k, v): (Table, Value, Value)| {
                    let protected: Table = tt.raw_get("protected")?;
                    if !protected.raw_get::<Value>(&target)?.is_nil() {
                        return Err(mlua::Error::RuntimeError(
                            "Attempt to modify a readonly table".into(),
                        ));
                    }
                    target.raw_set(k, v)?;
                    Ok(target)
                })?,
            )?;
        }
        t.set("version", crate::protocol::REDIS_VERSION)?;
        t.set("version_num", version_num(crate::protocol::REDIS_VERSION))?;
        lua.load(include_str!("prelude.lua"))
            .set_name("=turnstile")
            .call::<()>(t.clone())?;
        let redis: Table = t.raw_get("redis")?;
        redis.raw_set(
            "sha1hex",
            lua.create_function(|lua, args: mlua::Variadic<Value>| {
                if args.len() != 1 {
                    return Err(plain("wrong number of arguments"));
                }
                let bytes = match &args[0] {
                    Value::String(s) => s.as_bytes().to_vec(),
                    v => lua
                        .coerce_string(v.clone())?
                        .map(|s| s.as_bytes().to_vec())
                        .unwrap_or_default(),
                };
                lua.create_string(sha1hex(&bytes))
            })?,
        )?;
        redis.raw_set(
            "log",
            lua.create_function(|lua, args: mlua::Variadic<Value>| {
                if args.len() < 2 {
                    return Err(plain("redis.log() requires two arguments or more."));
                }
                let level = match &args[0] {
                    Value::Integer(i) => *i as f64,
                    Value::Number(n) => *n,
                    _ => return Err(plain("First argument must be a number (log level).")),
                };
                if !(0.0..=3.0).contains(&level) {
                    return Err(plain("Invalid debug level."));
                }
                let mut text = Vec::new();
                for v in args.iter().skip(1) {
                    if let Some(s) = lua.coerce_string(v.clone())? {
                        if !text.is_empty() {
                            text.push(b' ');
                        }
                        text.extend_from_slice(&s.as_bytes());
                    }
                }
                let text = String::from_utf8_lossy(&text);
                match level as i64 {
                    0 => tracing::debug!(target: "turnstile::script", "{text}"),
                    1 | 2 => tracing::info!(target: "turnstile::script", "{text}"),
                    _ => tracing::warn!(target: "turnstile::script", "{text}"),
                }
                Ok(())
            })?,
        )?;
        redis.raw_set(
            "set_repl",
            lua.create_function(|_, args: mlua::Variadic<Value>| {
                if args.len() != 1 {
                    return Err(plain("redis.set_repl() requires one argument."));
                }
                match &args[0] {
                    Value::Integer(0..=3) => Ok(()),
                    _ => Err(plain(
                        "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.",
                    )),
                }
            })?,
        )?;
        let ctx = CtxPtr(NonNull::from(Box::leak(Box::new(CallCtx {
            host: None,
            script_resp: Protocol::Resp2,
            run: run.clone(),
            reply: ReplyBuf::default(),
            frame: BytesMut::new(),
            spans: Vec::new(),
            error: Vec::new(),
            counted: false,
            marked: false,
        }))));
        // Owned by the Vm from here; freed by hand if setup fails first.
        struct Guard(Option<CtxPtr>);
        impl Drop for Guard {
            fn drop(&mut self) {
                if let Some(c) = self.0 {
                    // SAFETY: leaked just above, not yet owned by a Vm.
                    drop(unsafe { Box::from_raw(c.0.as_ptr()) });
                }
            }
        }
        let mut guard = Guard(Some(ctx));
        let counted = lua.create_table()?;
        let weak = lua.create_table()?;
        weak.raw_set("__mode", "k")?;
        counted.set_metatable(Some(weak))?;
        install_calls(&lua, &redis, ctx, &counted)?;
        let counted = lua.create_registry_value(counted)?;
        let globals: Table = t.raw_get("B")?;
        let runner: Function = t.get("run")?;
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| run.check(),
        )?;
        let fields = convert::Fields::new(&lua)?;
        // Setting up left a third of the heap as garbage (the prelude's
        // main chunk, its temporaries): a state starts at what it keeps.
        lua.gc_collect()?;
        guard.0 = None;
        Ok(Vm {
            lua,
            globals,
            runner,
            functions: HashMap::default(),
            generation: 0,
            ctx,
            fields,
            json,
            counted,
            runs: std::cell::Cell::new(0),
            state,
        })
    }

    /// [`GC_STEP_KB`] of collector work, as Redis's `lua_gc(LUA_GCSTEP)`
    /// call does it (mlua's `gc_step` asks for one basic step only).
    pub(super) fn gc_step(&self) -> mlua::Result<()> {
        // SAFETY: `lua_gc` on the state mlua hands over, with no value
        // pushed or popped; mlua runs it protected.
        unsafe {
            self.lua.exec_raw::<()>((), |l| {
                mlua::ffi::lua_gc(l, mlua::ffi::LUA_GCSTEP, GC_STEP_KB);
            })
        }
    }

    /// Compiles a script's body as Redis does: one function, chunk name
    /// `@user_script`, the shebang line kept as a comment so line numbers
    /// stay the script's.
    pub(super) fn compile(&self, body: &[u8], shebang: bool) -> Result<Function, ScriptError> {
        let mut text = body.to_vec();
        if shebang {
            text[0] = b'-';
            text[1] = b'-';
        }
        self.lua
            .load(text)
            .set_name("@user_script")
            .into_function()
            .map_err(|e| match e {
                mlua::Error::SyntaxError { message, .. } => ScriptError::Compile(message),
                mlua::Error::MemoryError(_) => ScriptError::OutOfMemory,
                e => ScriptError::Compile(errtext(&e)),
            })
    }

    pub(super) fn run<'k>(
        &self,
        f: &Function,
        keys: impl ExactSizeIterator<Item = &'k [u8]>,
        args: impl ExactSizeIterator<Item = &'k [u8]>,
        resp: Protocol,
        host: &mut dyn Host,
        out: &mut ReplyBuf,
    ) -> mlua::Result<Outcome> {
        let lua = &self.lua;
        {
            // SAFETY: this thread holds the state; no other reference to
            // the context lives now.
            let ctx = unsafe { self.ctx.get() };
            // SAFETY: the lifetime is erased only for the span of this
            // call: `Lend` below takes the pointer back before `host`'s
            // borrow ends, on every path out.
            let host: NonNull<dyn Host + '_> = NonNull::from(host);
            // SAFETY: see above: `Lend` clears it before the borrow ends.
            ctx.host = Some(unsafe {
                std::mem::transmute::<NonNull<dyn Host + '_>, NonNull<dyn Host + 'static>>(host)
            });
            ctx.script_resp = Protocol::Resp2;
            ctx.marked = false;
        }
        struct Lend(CtxPtr);
        impl Drop for Lend {
            fn drop(&mut self) {
                // SAFETY: as above; the run has returned.
                unsafe { self.0.get() }.host = None;
            }
        }
        let _lend = Lend(self.ctx);
        self.json.reset();
        let names = self.fields.ids();
        let counted = self.counted.id();
        let ctx_ptr = self.ctx;
        let saved = out.proto;
        let mark = out.len();
        out.proto = resp;
        // One protected call for the whole run, as Redis makes one
        // `lua_pcall`: `KEYS` and `ARGV` set, the script run under the
        // prelude's error handler, and its result read on the stack into
        // the reply. Each step through mlua was a protected call of its own
        // (about 2,400 instructions apiece), and the result came back
        // through a `MultiValue`.
        // SAFETY: the closure holds only borrows and plain values, so
        // nothing is left undropped if Lua raises out of it (memory, or a
        // failure outside the handler); it runs on the thread that holds
        // the state, and leaves on the stack only what it returns.
        let ran = unsafe {
            lua.exec_raw::<(bool, Value)>((&self.globals, &self.runner, f), |l| {
                call::set_keys_and_args(l, 1, keys, args);
                // globals, runner, script -> globals, ok, value
                ffi::lua_call(l, 1, 2);
                ffi::lua_remove(l, 1);
                let ctx = ctx_ptr.get();
                // Looked up only if this run marked a table: a limiter's
                // script returns a table on every run, and none of them is
                // an error.
                if ctx.marked && ffi::lua_type(l, 2) == ffi::LUA_TTABLE {
                    ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, counted as _);
                    ffi::lua_pushvalue(l, 2);
                    ffi::lua_rawget(l, -2);
                    if ffi::lua_toboolean(l, -1) != 0 {
                        ctx.run.counted.store(true, Ordering::Relaxed);
                    }
                    ffi::lua_pop(l, 2);
                }
                if ffi::lua_toboolean(l, 1) != 0 {
                    convert::write_top(l, names, ctx.script_resp, out);
                    ffi::lua_settop(l, 1);
                }
            })
        };
        out.proto = saved;
        let (ok, value) = match ran {
            Ok(r) => r,
            Err(e) => {
                out.truncate(mark);
                return Err(e);
            }
        };
        if ok {
            return Ok(Outcome::Reply);
        }
        Ok(match value {
            Value::Table(t) => {
                let err: Value = t.raw_get("err")?;
                let err = match err {
                    Value::String(s) => s.to_string_lossy(),
                    other => lua
                        .coerce_string(other)?
                        .map(|s| s.to_string_lossy())
                        .unwrap_or_else(|| "ERR unknown error".into()),
                };
                let source: Option<String> = t.raw_get("source")?;
                let line: Option<i64> = t.raw_get("line")?;
                Outcome::Raised {
                    err: convert::error_line(&err),
                    source: source.unwrap_or_else(|| "?".into()),
                    line: line.unwrap_or(0),
                }
            }
            // A memory error skips the handler: its value is Lua's
            // own message.
            _ => Outcome::OutOfMemory,
        })
    }
}

/// An error raised as a plain message, with no `source:line:` (as Redis's
/// C functions raise theirs with `lua_error`).
fn plain(msg: &str) -> mlua::Error {
    mlua::Error::RuntimeError(msg.into())
}

/// Creates `redis.call`, `redis.pcall`, `redis.setresp` and
/// `redis.acl_check_cmd`, once per Lua state; each reaches the run's
/// [`CallCtx`].
fn install_calls(lua: &Lua, redis: &Table, ctx: CtxPtr, counted: &Table) -> mlua::Result<()> {
    redis.raw_set("call", call::create(lua, ctx.0, counted, false)?)?;
    redis.raw_set("pcall", call::create(lua, ctx.0, counted, true)?)?;
    let setresp = lua.create_function(move |_, args: mlua::Variadic<Value>| {
        if args.len() != 1 {
            return Err(plain("redis.setresp() requires one argument."));
        }
        let resp = match &args[0] {
            Value::Integer(2) => Protocol::Resp2,
            Value::Integer(3) => Protocol::Resp3,
            _ => return Err(plain("RESP version must be 2 or 3.")),
        };
        // SAFETY: called by a script, on the thread that holds the state.
        unsafe { ctx.get() }.script_resp = resp;
        Ok(())
    })?;
    redis.raw_set("setresp", setresp)?;
    let acl_check = lua.create_function(move |_, args: mlua::Variadic<Value>| {
        // The arguments as `redis.call` reads them.
        let mut frame = BytesMut::new();
        let mut spans = Vec::with_capacity(args.len());
        for a in args.iter() {
            let start = frame.len();
            match a {
                Value::String(s) => frame.extend_from_slice(&s.as_bytes()),
                Value::Integer(i) => frame.extend_from_slice(i.to_string().as_bytes()),
                Value::Number(x) => call::number_text(*x, &mut frame),
                _ => {
                    return Err(plain(
                        "Lua redis lib command arguments must be strings or integers",
                    ))
                }
            }
            spans.push(start..frame.len());
        }
        if spans.is_empty() {
            return Err(plain(
                "Please specify at least one argument for this redis lib call",
            ));
        }
        let req = Request::new(frame.freeze(), &spans);
        // SAFETY: called by a script, on the thread that holds the state;
        // the host is set by `Vm::run` for this run.
        let allowed = unsafe { ctx.get() }
            .host
            .and_then(|mut h| unsafe { h.as_mut() }.acl_check(&req));
        allowed.ok_or_else(|| plain("Invalid command passed to redis.acl_check_cmd()"))
    })?;
    redis.raw_set("acl_check_cmd", acl_check)
}

/// `7.2.0` as Redis's `REDIS_VERSION_NUM`: `0x00MMmmpp`.
pub(super) fn version_num(v: &str) -> i64 {
    let mut parts = v.split('.').map(|p| p.parse::<i64>().unwrap_or(0));
    let (a, b, c) = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    (a << 16) | (b << 8) | c
}
