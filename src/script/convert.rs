//! Lua values into replies, by the rules Redis 7 documents ("Conversion
//! between Lua and Redis data types"). The other way, replies into Lua, is
//! `call.rs`: it reads the RESP bytes a command wrote (the one way in,
//! whatever the command, and the same text a client would get) straight
//! onto the Lua stack.

use std::ffi::c_int;

use mlua::ffi::{self, lua_State};
use mlua::{Lua, RegistryKey};

use crate::protocol::reply::verbatim_format;
use crate::protocol::{Protocol, ReplyBuf};

/// An error's text as a reply line: CR and LF become spaces, as Redis
/// makes them.
pub fn error_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

use crate::util::format_g17 as g17;

/// A Lua string as Redis 7.0 reads `ok`, `err` and a verbatim string's
/// `format`: as a C string, up to its first NUL.
fn c_str(s: &[u8]) -> &[u8] {
    s.iter().position(|&b| b == 0).map_or(s, |end| &s[..end])
}

/// Writes the script's value at the top of the stack (which stays there)
/// as the reply, in the protocol `out` is set to; `script_resp` is what the
/// script chose with `redis.setresp` (booleans follow it, as in Redis).
///
/// Read on the Lua stack, as Redis's `luaReplyToRedisReply` does: through
/// mlua each field and element read was a protected call of its own (a
/// three-integer table cost about 4,500 instructions).
///
/// # Safety
/// `l` is the running state, inside a protected call (`lua_checkstack`
/// may raise when memory runs out); the caller holds no value with a
/// destructor across it.
pub unsafe fn write_top(
    l: *mut lua_State,
    names: &Names,
    script_resp: Protocol,
    out: &mut ReplyBuf,
) {
    write(l, names, script_resp, out, 0);
}

/// The field names a table result is looked up by, interned once per Lua
/// state and kept in its registry; `ids` are their references, which a run
/// reads them by.
pub struct Fields {
    _keys: Vec<RegistryKey>,
    ids: Names,
}

const NAMES: [&str; 9] = [
    "err",
    "ok",
    "double",
    "big_number",
    "map",
    "set",
    "verbatim_string",
    "format",
    "string",
];
const ERR: usize = 0;
const OK: usize = 1;
const DOUBLE: usize = 2;
const BIG_NUMBER: usize = 3;
const MAP: usize = 4;
const SET: usize = 5;
const VERBATIM: usize = 6;
const FORMAT: usize = 7;
const STRING: usize = 8;

impl Fields {
    pub fn new(lua: &Lua) -> mlua::Result<Fields> {
        let keys = NAMES
            .iter()
            .map(|name| lua.create_registry_value(lua.create_string(name)?))
            .collect::<mlua::Result<Vec<_>>>()?;
        let ids = std::array::from_fn(|i| keys[i].id());
        Ok(Fields { _keys: keys, ids })
    }

    pub fn ids(&self) -> &Names {
        &self.ids
    }
}

/// The registry references of [`NAMES`], read once per run.
pub type Names = [c_int; NAMES.len()];

/// The value at the top of the stack, which stays there.
unsafe fn write(
    l: *mut lua_State,
    names: &Names,
    script_resp: Protocol,
    out: &mut ReplyBuf,
    depth: usize,
) {
    if depth > 1000 {
        out.error("ERR reached lua stack limit");
        return;
    }
    match ffi::lua_type(l, -1) {
        ffi::LUA_TNIL => out.null(),
        ffi::LUA_TBOOLEAN => {
            let b = ffi::lua_toboolean(l, -1) != 0;
            match script_resp {
                Protocol::Resp3 => out.bool(b),
                Protocol::Resp2 if b => out.int(1),
                Protocol::Resp2 => out.null(),
            }
        }
        ffi::LUA_TNUMBER => out.int(ffi::lua_tonumber(l, -1) as i64),
        ffi::LUA_TSTRING => out.bulk(bytes_at(l, -1)),
        ffi::LUA_TTABLE => write_table(l, names, script_resp, out, depth),
        _ => out.null(),
    }
}

/// The string at `idx`, which must be one (a number is not converted:
/// that would change it on the stack, under a `lua_next` walk too).
unsafe fn bytes_at<'a>(l: *mut lua_State, idx: c_int) -> &'a [u8] {
    let mut len = 0usize;
    let p = ffi::lua_tolstring(l, idx, &mut len);
    std::slice::from_raw_parts(p as *const u8, len)
}

/// Pushes field `name` of the table at (absolute) index `t`; its type.
unsafe fn push_field(l: *mut lua_State, names: &Names, t: c_int, name: usize) -> c_int {
    ffi::lua_rawgeti(l, ffi::LUA_REGISTRYINDEX, names[name] as _);
    ffi::lua_rawget(l, t);
    ffi::lua_type(l, -1)
}

unsafe fn write_table(
    l: *mut lua_State,
    names: &Names,
    script_resp: Protocol,
    out: &mut ReplyBuf,
    depth: usize,
) {
    // Each level holds its table, a field or an element, and a `lua_next`
    // key and its copy; depth is capped at 1000 levels above, well inside
    // Lua's 8,000 slots.
    if ffi::lua_checkstack(l, 4) == 0 {
        out.error("ERR reached lua stack limit");
        return;
    }
    let t = ffi::lua_gettop(l);
    // Only a string: Redis takes `{err = 123}` for an empty array.
    // The encoder makes CR and LF spaces in every line-typed reply
    // (`ok`, `err`, `big_number`, `double`), as Redis does here.
    if push_field(l, names, t, ERR) == ffi::LUA_TSTRING {
        out.error_bytes(c_str(bytes_at(l, -1)));
        ffi::lua_pop(l, 1);
        return;
    }
    ffi::lua_pop(l, 1);
    if push_field(l, names, t, OK) == ffi::LUA_TSTRING {
        out.status(c_str(bytes_at(l, -1)));
        ffi::lua_pop(l, 1);
        return;
    }
    ffi::lua_pop(l, 1);
    if push_field(l, names, t, DOUBLE) == ffi::LUA_TNUMBER {
        let d = ffi::lua_tonumber(l, -1);
        ffi::lua_pop(l, 1);
        return write_double(d, out);
    }
    ffi::lua_pop(l, 1);
    if push_field(l, names, t, BIG_NUMBER) == ffi::LUA_TSTRING {
        out.big_number(bytes_at(l, -1));
        ffi::lua_pop(l, 1);
        return;
    }
    ffi::lua_pop(l, 1);
    for (name, values) in [(MAP, true), (SET, false)] {
        if push_field(l, names, t, name) == ffi::LUA_TTABLE {
            write_pairs(l, names, script_resp, out, depth, values);
            ffi::lua_pop(l, 1);
            return;
        }
        ffi::lua_pop(l, 1);
    }
    if push_field(l, names, t, VERBATIM) == ffi::LUA_TTABLE {
        let v = ffi::lua_gettop(l);
        let format = push_field(l, names, v, FORMAT);
        let string = push_field(l, names, v, STRING);
        if format == ffi::LUA_TSTRING && string == ffi::LUA_TSTRING {
            let (format, text) = (bytes_at(l, -2), bytes_at(l, -1));
            out.verbatim_as(verbatim_format(format), text);
            ffi::lua_pop(l, 3);
            return;
        }
        ffi::lua_pop(l, 2);
    }
    ffi::lua_pop(l, 1);
    let mut n = 0;
    loop {
        ffi::lua_rawgeti(l, t, n + 1);
        let end = ffi::lua_type(l, -1) == ffi::LUA_TNIL;
        ffi::lua_pop(l, 1);
        if end {
            break;
        }
        n += 1;
    }
    out.array(n as usize);
    for i in 1..=n {
        ffi::lua_rawgeti(l, t, i);
        write(l, names, script_resp, out, depth + 1);
        ffi::lua_pop(l, 1);
    }
}

/// The table at the top as a map (`values`) or a set (its keys), in
/// `lua_next`'s order; keys are written from a copy, so `lua_next` sees
/// its key as it left it.
unsafe fn write_pairs(
    l: *mut lua_State,
    names: &Names,
    script_resp: Protocol,
    out: &mut ReplyBuf,
    depth: usize,
    values: bool,
) {
    let t = ffi::lua_gettop(l);
    let mut n = 0;
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, t) != 0 {
        ffi::lua_pop(l, 1);
        n += 1;
    }
    if values {
        out.map(n);
    } else {
        out.set(n);
    }
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, t) != 0 {
        ffi::lua_pushvalue(l, -2);
        write(l, names, script_resp, out, depth + 1);
        ffi::lua_pop(l, 1);
        if values {
            write(l, names, script_resp, out, depth + 1);
        }
        ffi::lua_pop(l, 1);
    }
}

fn write_double(d: f64, out: &mut ReplyBuf) {
    let text = g17(d);
    match out.proto {
        Protocol::Resp3 => out.double_text(text.as_bytes()),
        Protocol::Resp2 => out.bulk(text.as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_as_redis_7_0_writes_them() {
        assert_eq!(g17(0.1), "0.10000000000000001");
        assert_eq!(g17(1.5), "1.5");
        assert_eq!(g17(3.0), "3");
        assert_eq!(g17(1e100), "1e+100");
        assert_eq!(g17(f64::NEG_INFINITY), "-inf");
    }
}
