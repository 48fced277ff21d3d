//! The libraries Redis loads into its Lua: `bit` (LuaBitOp), `struct`
//! (Roberto Ierusalimschy's binary packing), `cjson` (lua-cjson) and
//! `cmsgpack` (lua-cmsgpack), written here in Rust against the behaviour
//! of Redis 7.0's copies (checked by `tests/compat/diff_cases`), because
//! their C sources are not ours to vendor and no crate provides them for
//! mlua. A function refuses bad input by raising an error with the
//! caller's line, as the C libraries' `luaL_error` does; no input can make
//! one panic.

/// The value of a `Result<_, String>`, or the error raised (see [`fail`]).
macro_rules! tri {
    ($lua:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return fail($lua, e),
        }
    };
}

mod args;
mod bit;
mod cjson;
mod msgpack;
mod pack;

use bit::bit_fns;
use cjson::cjson_fns;
pub use cjson::JsonSettings;
use msgpack::cmsgpack_fns;
use pack::struct_fns;

use args::{LightUserData, Lua, Table, Value};

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
