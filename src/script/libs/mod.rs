//! The libraries Redis loads into its Lua: `bit` (LuaBitOp), `struct`
//! (Roberto Ierusalimschy's binary packing), `cjson` (lua-cjson) and
//! `cmsgpack` (lua-cmsgpack), written here in Rust against the behaviour
//! of Redis 7.0's copies (checked by `tests/compat/diff_cases`), because
//! their C sources are not ours to vendor and no crate provides them for
//! mlua. A function refuses bad input by raising an error with the
//! caller's line, as the C libraries' `luaL_error` does; no input can make
//! one panic.

use mlua::{LightUserData, Lua, MultiValue, Table, Value, Variadic};

type Answer = mlua::Result<MultiValue>;

/// The value of a `Result<_, String>`, or the error raised (see [`fail`]).
macro_rules! tri {
    ($lua:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return fail($lua, e),
        }
    };
}

mod bit;
mod cjson;
mod msgpack;
mod pack;

use bit::bit_fns;
use cjson::cjson_fns;
pub use cjson::JsonSettings;
use msgpack::cmsgpack_fns;
use pack::struct_fns;

fn ok(values: Vec<Value>) -> Answer {
    Ok(MultiValue::from_vec(values))
}

/// Raises `msg` as the C libraries' `luaL_error` does: prefixed with the
/// caller's `source:line: ` when the caller is Lua code.
fn fail(lua: &Lua, msg: impl AsRef<str>) -> Answer {
    Err(mlua::Error::RuntimeError(format!(
        "{}{}",
        where_(lua),
        msg.as_ref()
    )))
}

/// Lua's `luaL_where(L, 1)`: where the running C function was called from.
pub fn where_(lua: &Lua) -> String {
    lua.inspect_stack(1, |d| {
        let line = d.current_line()?;
        let src = d.source().short_src.map(|s| s.into_owned())?;
        Some(format!("{src}:{line}: "))
    })
    .flatten()
    .unwrap_or_default()
}

/// The name Lua's `luaL_argerror` gives the running C function: as its
/// caller named it (`encode_max_depth` in `cjson.encode_max_depth(0)`), `?`
/// when called through `pcall`.
fn called_as(lua: &Lua) -> String {
    lua.inspect_stack(0, |d| d.names().name.map(|n| n.into_owned()))
        .flatten()
        .unwrap_or_else(|| "?".into())
}

fn type_name(v: Option<&Value>) -> &'static str {
    match v {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::Integer(_) | Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(Value::LightUserData(_)) => "userdata",
        Some(_) => "userdata",
    }
}

fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => std::str::from_utf8(&s.as_bytes()).ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// Argument `i` (1-based) as a number, or Lua's "bad argument" words.
fn arg_num(args: &[Value], i: usize, fname: &str) -> Result<f64, String> {
    num_opt(args.get(i - 1)).ok_or_else(|| {
        format!(
            "bad argument #{i} to '{fname}' (number expected, got {})",
            type_name(args.get(i - 1))
        )
    })
}

fn num_opt(v: Option<&Value>) -> Option<f64> {
    v.and_then(num)
}

fn arg_str(args: &[Value], i: usize, fname: &str) -> Result<Vec<u8>, String> {
    match args.get(i - 1) {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Integer(n)) => Ok(n.to_string().into_bytes()),
        Some(Value::Number(n)) => Ok(lua_number(*n).into_bytes()),
        other => Err(format!(
            "bad argument #{i} to '{fname}' (string expected, got {})",
            type_name(other)
        )),
    }
}

/// A number as Lua 5.1 prints it (`%.14g`).
pub fn lua_number(n: f64) -> String {
    number_g(n, 14)
}

/// `n` in C's `%.{precision}g` (precision 1 to 17), `nan`/`inf` as Lua
/// prints them.
fn number_g(n: f64, precision: u8) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "inf" } else { "-inf" }.into();
    }
    let mut buf = [0u8; 64];
    // SAFETY: a 64-byte buffer, its size given; `%.*g` with at most 17
    // digits writes under 32.
    let len = unsafe {
        libc::snprintf(
            buf.as_mut_ptr().cast(),
            buf.len(),
            c"%.*g".as_ptr(),
            libc::c_int::from(precision.min(17)),
            n,
        )
    };
    String::from_utf8_lossy(&buf[..(len.max(0) as usize).min(63)]).into_owned()
}

/// Installs `bit`, `struct`, `cjson` and `cmsgpack` as globals. The
/// answer is `cjson`'s settings, which the engine puts back to their
/// defaults before each run.
pub fn install(lua: &Lua) -> mlua::Result<JsonSettings> {
    let settings = JsonSettings::default();
    let globals = lua.globals();
    for (name, fns) in [
        ("bit", bit_fns(lua)?),
        ("struct", struct_fns(lua)?),
        ("cjson", cjson_fns(lua, &settings)?),
        ("cmsgpack", cmsgpack_fns(lua)?),
    ] {
        let lib = lua.create_table()?;
        for (n, f) in fns {
            lib.raw_set(n, f)?;
        }
        globals.raw_set(name, lib)?;
    }
    let cjson: Table = globals.raw_get("cjson")?;
    cjson.raw_set(
        "null",
        Value::LightUserData(LightUserData(std::ptr::null_mut())),
    )?;
    Ok(settings)
}
