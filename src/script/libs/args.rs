//! What the libraries share: argument reading in Lua's coercion rules,
//! raising an error with the caller's line, and Lua's number formatting.

pub(super) use mlua::{LightUserData, Lua, MultiValue, Table, Value, Variadic};

pub(super) type Answer = mlua::Result<MultiValue>;

pub(super) fn ok(values: Vec<Value>) -> Answer {
    Ok(MultiValue::from_vec(values))
}

/// Raises `msg` as the C libraries' `luaL_error` does: prefixed with the
/// caller's `source:line: ` when the caller is Lua code.
pub(super) fn fail(lua: &Lua, msg: impl AsRef<str>) -> Answer {
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
pub(super) fn called_as(lua: &Lua) -> String {
    lua.inspect_stack(0, |d| d.names().name.map(|n| n.into_owned()))
        .flatten()
        .unwrap_or_else(|| "?".into())
}

pub(super) fn type_name(v: Option<&Value>) -> &'static str {
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

pub(super) fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => std::str::from_utf8(&s.as_bytes()).ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// Argument `i` (1-based) as a number, or Lua's "bad argument" words.
pub(super) fn arg_num(args: &[Value], i: usize, fname: &str) -> Result<f64, String> {
    num_opt(args.get(i - 1)).ok_or_else(|| {
        format!(
            "bad argument #{i} to '{fname}' (number expected, got {})",
            type_name(args.get(i - 1))
        )
    })
}

pub(super) fn num_opt(v: Option<&Value>) -> Option<f64> {
    v.and_then(num)
}

pub(super) fn arg_str(args: &[Value], i: usize, fname: &str) -> Result<Vec<u8>, String> {
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
pub(super) fn number_g(n: f64, precision: u8) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "inf" } else { "-inf" }.into();
    }
    let mut buf = [0u8; 32];
    String::from_utf8_lossy(crate::util::format_g(n, precision, &mut buf)).into_owned()
}
