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

// ---------------------------------------------------------------------------
// bit

/// LuaBitOp's argument conversion: the number rounded to an integer,
/// then wrapped to 32 bits.
fn tobit(x: f64) -> i32 {
    if !x.is_finite() {
        return 0;
    }
    let r = x.round_ties_even();
    (r.rem_euclid(4_294_967_296.0) as u64 as u32) as i32
}

fn bit_fns(lua: &Lua) -> mlua::Result<Vec<(&'static str, mlua::Function)>> {
    fn unary(lua: &Lua, name: &'static str, f: fn(i32) -> i32) -> mlua::Result<mlua::Function> {
        lua.create_function(
            move |lua, args: Variadic<Value>| match arg_num(&args, 1, name) {
                Ok(x) => ok(vec![Value::Integer(f(tobit(x)) as i64)]),
                Err(e) => fail(lua, e),
            },
        )
    }
    fn fold(lua: &Lua, name: &'static str, f: fn(i32, i32) -> i32) -> mlua::Result<mlua::Function> {
        lua.create_function(move |lua, args: Variadic<Value>| {
            let mut acc = match arg_num(&args, 1, name) {
                Ok(x) => tobit(x),
                Err(e) => return fail(lua, e),
            };
            for i in 2..=args.len() {
                match arg_num(&args, i, name) {
                    Ok(x) => acc = f(acc, tobit(x)),
                    Err(e) => return fail(lua, e),
                }
            }
            ok(vec![Value::Integer(acc as i64)])
        })
    }
    fn shift(
        lua: &Lua,
        name: &'static str,
        f: fn(i32, u32) -> i32,
    ) -> mlua::Result<mlua::Function> {
        lua.create_function(move |lua, args: Variadic<Value>| {
            let x = match arg_num(&args, 1, name) {
                Ok(x) => tobit(x),
                Err(e) => return fail(lua, e),
            };
            let n = match arg_num(&args, 2, name) {
                Ok(n) => (tobit(n) as u32) & 31,
                Err(e) => return fail(lua, e),
            };
            ok(vec![Value::Integer(f(x, n) as i64)])
        })
    }
    Ok(vec![
        ("tobit", unary(lua, "tobit", |x| x)?),
        ("bnot", unary(lua, "bnot", |x| !x)?),
        ("bswap", unary(lua, "bswap", |x| x.swap_bytes())?),
        ("band", fold(lua, "band", |a, b| a & b)?),
        ("bor", fold(lua, "bor", |a, b| a | b)?),
        ("bxor", fold(lua, "bxor", |a, b| a ^ b)?),
        (
            "lshift",
            shift(lua, "lshift", |x, n| ((x as u32) << n) as i32)?,
        ),
        (
            "rshift",
            shift(lua, "rshift", |x, n| ((x as u32) >> n) as i32)?,
        ),
        ("arshift", shift(lua, "arshift", |x, n| x >> n)?),
        (
            "rol",
            shift(lua, "rol", |x, n| (x as u32).rotate_left(n) as i32)?,
        ),
        (
            "ror",
            shift(lua, "ror", |x, n| (x as u32).rotate_right(n) as i32)?,
        ),
        (
            "tohex",
            lua.create_function(|lua, args: Variadic<Value>| {
                let x = match arg_num(&args, 1, "tohex") {
                    Ok(x) => tobit(x),
                    Err(e) => return fail(lua, e),
                };
                let n = match args.get(1) {
                    None | Some(Value::Nil) => 8,
                    _ => match arg_num(&args, 2, "tohex") {
                        Ok(n) => tobit(n),
                        Err(e) => return fail(lua, e),
                    },
                };
                let upper = n < 0;
                let n = n.unsigned_abs().min(8) as usize;
                let hex = if upper {
                    format!("{:08X}", x as u32)
                } else {
                    format!("{:08x}", x as u32)
                };
                ok(vec![Value::String(lua.create_string(&hex[8 - n..])?)])
            })?,
        ),
    ])
}

// ---------------------------------------------------------------------------
// struct

struct Fmt<'a> {
    f: &'a [u8],
    pos: usize,
    little: bool,
    align: usize,
}

impl Fmt<'_> {
    /// An optional size after an option letter.
    fn size(&mut self, default: usize) -> Result<usize, String> {
        let start = self.pos;
        while self.pos < self.f.len() && self.f[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        if start == self.pos {
            return Ok(default);
        }
        std::str::from_utf8(&self.f[start..self.pos])
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|&n| n < 1 << 20)
            .ok_or_else(|| "integral size out of limits".to_string())
    }
}

/// One item of a format: its option letter and size.
enum Item {
    Int { size: usize, signed: bool },
    Float,
    Double,
    Str,
    Chars(usize),
    Pad,
    None,
}

fn int(size: usize, signed: bool) -> Item {
    Item::Int { size, signed }
}

fn next_item(fmt: &mut Fmt<'_>) -> Result<Option<Item>, String> {
    let Some(&c) = fmt.f.get(fmt.pos) else {
        return Ok(None);
    };
    fmt.pos += 1;
    Ok(Some(match c {
        b'b' => int(1, true),
        b'B' => int(1, false),
        b'h' => int(2, true),
        b'H' => int(2, false),
        b'l' => int(8, true),
        b'L' => int(8, false),
        b'T' => int(8, false),
        b'i' | b'I' => {
            let size = fmt.size(4)?;
            if size == 0 || size > 8 {
                return Err(format!("integral size {size} is larger than limit of 8"));
            }
            Item::Int {
                size,
                signed: c == b'i',
            }
        }
        b'f' => Item::Float,
        b'd' => Item::Double,
        b's' => Item::Str,
        b'c' => Item::Chars(fmt.size(1)?),
        b'x' => Item::Pad,
        b'<' => {
            fmt.little = true;
            Item::None
        }
        b'>' => {
            fmt.little = false;
            Item::None
        }
        b'=' => {
            fmt.little = cfg!(target_endian = "little");
            Item::None
        }
        b'!' => {
            fmt.align = fmt.size(8)?;
            Item::None
        }
        b' ' => Item::None,
        other => return Err(format!("invalid format option '{}'", other as char)),
    }))
}

fn item_size(item: &Item) -> usize {
    match item {
        Item::Int { size, .. } => *size,
        Item::Float => 4,
        Item::Double => 8,
        Item::Chars(n) => *n,
        Item::Pad => 1,
        Item::Str | Item::None => 0,
    }
}

/// Padding before an item of `size` at `at`, under `!` alignment.
fn padding(fmt: &Fmt<'_>, size: usize, at: usize) -> usize {
    let align = size.min(fmt.align);
    if align <= 1 || !align.is_power_of_two() {
        return 0;
    }
    (align - (at & (align - 1))) & (align - 1)
}

fn struct_fns(lua: &Lua) -> mlua::Result<Vec<(&'static str, mlua::Function)>> {
    let pack = lua.create_function(|lua, args: Variadic<Value>| {
        let f = tri!(lua, arg_str(&args, 1, "pack"));
        let mut fmt = Fmt {
            f: &f,
            pos: 0,
            little: cfg!(target_endian = "little"),
            align: 1,
        };
        let mut out: Vec<u8> = Vec::new();
        let mut arg = 2;
        loop {
            let item = match next_item(&mut fmt) {
                Ok(Some(i)) => i,
                Ok(None) => break,
                Err(e) => return fail(lua, format!("bad argument #1 to 'pack' ({e})")),
            };
            let pad = padding(&fmt, item_size(&item), out.len());
            out.extend(std::iter::repeat_n(0, pad));
            match item {
                Item::Int { size, .. } => {
                    let x = tri!(lua, arg_num(&args, arg, "pack"));
                    arg += 1;
                    let v = if x < 0.0 { x as i64 as u64 } else { x as u64 };
                    let bytes = v.to_le_bytes();
                    if fmt.little {
                        out.extend_from_slice(&bytes[..size]);
                    } else {
                        out.extend(bytes[..size].iter().rev());
                    }
                }
                Item::Float | Item::Double => {
                    let x = tri!(lua, arg_num(&args, arg, "pack"));
                    arg += 1;
                    let bytes: Vec<u8> = match (&item, fmt.little) {
                        (Item::Float, true) => (x as f32).to_le_bytes().to_vec(),
                        (Item::Float, false) => (x as f32).to_be_bytes().to_vec(),
                        (_, true) => x.to_le_bytes().to_vec(),
                        (_, false) => x.to_be_bytes().to_vec(),
                    };
                    out.extend_from_slice(&bytes);
                }
                Item::Str | Item::Chars(_) => {
                    let s = tri!(lua, arg_str(&args, arg, "pack"));
                    arg += 1;
                    match item {
                        Item::Str => {
                            if s.contains(&0) {
                                return fail(lua, "bad argument to 'pack' (string contains zeros)");
                            }
                            out.extend_from_slice(&s);
                            out.push(0);
                        }
                        Item::Chars(n) => {
                            let n = if n == 0 { s.len() } else { n };
                            if s.len() < n {
                                return fail(
                                    lua,
                                    format!(
                                        "bad argument #{} to 'pack' (string too short)",
                                        arg - 1
                                    ),
                                );
                            }
                            out.extend_from_slice(&s[..n]);
                        }
                        _ => {}
                    }
                }
                Item::Pad => out.push(0),
                Item::None => {}
            }
        }
        ok(vec![Value::String(lua.create_string(&out)?)])
    })?;
    let unpack = lua.create_function(|lua, args: Variadic<Value>| {
        let f = tri!(lua, arg_str(&args, 1, "unpack"));
        let data = tri!(lua, arg_str(&args, 2, "unpack"));
        let mut pos = match args.get(2) {
            None | Some(Value::Nil) => 0,
            Some(v) => match num(v) {
                Some(i) if i >= 1.0 => i as usize - 1,
                _ => return fail(lua, "offset must be 1 or greater"),
            },
        };
        let mut fmt = Fmt {
            f: &f,
            pos: 0,
            little: cfg!(target_endian = "little"),
            align: 1,
        };
        let mut values = Vec::new();
        let mut last_int: Option<f64> = None;
        loop {
            let item = match next_item(&mut fmt) {
                Ok(Some(i)) => i,
                Ok(None) => break,
                Err(e) => return fail(lua, format!("bad argument #1 to 'unpack' ({e})")),
            };
            pos += padding(&fmt, item_size(&item), pos);
            let size = item_size(&item);
            let need = |n: usize| pos.checked_add(n).is_some_and(|end| end <= data.len());
            match item {
                Item::Int { size, signed } => {
                    if !need(size) {
                        return fail(lua, "bad argument #2 to 'unpack' (data string too short)");
                    }
                    let mut bytes = [0u8; 8];
                    let src = &data[pos..pos + size];
                    if fmt.little {
                        bytes[..size].copy_from_slice(src);
                    } else {
                        for (i, b) in src.iter().rev().enumerate() {
                            bytes[i] = *b;
                        }
                    }
                    let mut v = u64::from_le_bytes(bytes);
                    let x = if signed && size < 8 && v >> (size * 8 - 1) & 1 == 1 {
                        v |= u64::MAX << (size * 8);
                        v as i64 as f64
                    } else if signed {
                        v as i64 as f64
                    } else {
                        v as f64
                    };
                    last_int = Some(x);
                    values.push(Value::Number(x));
                    pos += size;
                }
                Item::Float | Item::Double => {
                    if !need(size) {
                        return fail(lua, "bad argument #2 to 'unpack' (data string too short)");
                    }
                    let src = &data[pos..pos + size];
                    let x = match (size, fmt.little) {
                        (4, true) => f32::from_le_bytes(src.try_into().unwrap_or_default()) as f64,
                        (4, false) => f32::from_be_bytes(src.try_into().unwrap_or_default()) as f64,
                        (_, true) => f64::from_le_bytes(src.try_into().unwrap_or_default()),
                        (_, false) => f64::from_be_bytes(src.try_into().unwrap_or_default()),
                    };
                    values.push(Value::Number(x));
                    pos += size;
                }
                Item::Str => {
                    let Some(end) = data.get(pos..).and_then(|d| d.iter().position(|&b| b == 0))
                    else {
                        return fail(lua, "unfinished string in data");
                    };
                    values.push(Value::String(lua.create_string(&data[pos..pos + end])?));
                    pos += end + 1;
                }
                Item::Chars(n) => {
                    let n = if n == 0 {
                        match last_int.take() {
                            Some(x) if x >= 0.0 => x as usize,
                            _ => return fail(lua, "format 'c0' needs a previous size"),
                        }
                    } else {
                        n
                    };
                    if !need(n) {
                        return fail(lua, "bad argument #2 to 'unpack' (data string too short)");
                    }
                    values.push(Value::String(lua.create_string(&data[pos..pos + n])?));
                    pos += n;
                }
                Item::Pad => pos += 1,
                Item::None => {}
            }
        }
        values.push(Value::Integer(pos as i64 + 1));
        ok(values)
    })?;
    let size = lua.create_function(|lua, args: Variadic<Value>| {
        let f = tri!(lua, arg_str(&args, 1, "size"));
        let mut fmt = Fmt {
            f: &f,
            pos: 0,
            little: true,
            align: 1,
        };
        let mut total = 0usize;
        loop {
            match next_item(&mut fmt) {
                Ok(Some(Item::Str)) => return fail(lua, "options 's' has no fixed size"),
                Ok(Some(Item::Chars(0))) => return fail(lua, "options 'c0' has no fixed size"),
                Ok(Some(item)) => {
                    let size = item_size(&item);
                    total += padding(&fmt, size, total) + size;
                }
                Ok(None) => break,
                Err(e) => return fail(lua, format!("bad argument #1 to 'size' ({e})")),
            }
        }
        ok(vec![Value::Integer(total as i64)])
    })?;
    Ok(vec![("pack", pack), ("unpack", unpack), ("size", size)])
}

// ---------------------------------------------------------------------------
// cjson

/// lua-cjson's settings, as its configuration functions
/// (`cjson.encode_max_depth(n)` and the rest) set and answer them. Redis
/// keeps them in its one Lua state until `SCRIPT FLUSH`; Turnstile's
/// states are a pool, so a setting carried over would depend on which
/// state runs the next script: here each run starts from the defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct JsonConfig {
    encode_max_depth: u32,
    decode_max_depth: u32,
    /// Significant digits of encoded numbers, 1 to 14.
    precision: u8,
    keep_buffer: bool,
    /// NaN and infinities: 0 refused, 1 written as `nan`/`inf`, 2 as `null`.
    encode_invalid: u8,
    decode_invalid: bool,
}

impl Default for JsonConfig {
    fn default() -> Self {
        JsonConfig {
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            precision: 14,
            keep_buffer: true,
            encode_invalid: 0,
            decode_invalid: true,
        }
    }
}

/// One Lua state's `cjson` settings (see [`JsonConfig`]).
#[derive(Clone, Default)]
pub struct JsonSettings(std::sync::Arc<parking_lot::Mutex<JsonConfig>>);

impl JsonSettings {
    /// Back to lua-cjson's defaults, for the next run.
    pub fn reset(&self) {
        *self.0.lock() = JsonConfig::default();
    }

    fn get(&self) -> JsonConfig {
        *self.0.lock()
    }
}

fn json_escape(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 || b == 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
}

/// lua-cjson's `json_append_number`: NaN and infinities as
/// `encode_invalid_numbers` says.
fn json_number(n: f64, cfg: &JsonConfig, out: &mut Vec<u8>) -> Result<(), String> {
    if !n.is_finite() {
        match cfg.encode_invalid {
            0 => return Err("Cannot serialise number: must not be NaN or Inf".into()),
            1 if n.is_nan() => {
                out.extend_from_slice(b"nan");
                return Ok(());
            }
            1 => {}
            _ => {
                out.extend_from_slice(b"null");
                return Ok(());
            }
        }
    }
    out.extend_from_slice(number_g(n, cfg.precision).as_bytes());
    Ok(())
}

fn json_encode(v: &Value, cfg: &JsonConfig, out: &mut Vec<u8>, depth: usize) -> Result<(), String> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(u) if u.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => json_number(*i as f64, cfg, out)?,
        Value::Number(n) => json_number(*n, cfg, out)?,
        Value::String(s) => json_escape(&s.as_bytes(), out),
        Value::Table(t) => {
            if depth >= cfg.encode_max_depth as usize {
                return Err(format!(
                    "Cannot serialise, excessive nesting ({})",
                    depth + 1
                ));
            }
            // An array if every key is a positive integer (lua-cjson's
            // rule), holes filled with null unless excessively sparse.
            let mut max = 0usize;
            let mut count = 0usize;
            let mut is_array = true;
            let pairs: Vec<(Value, Value)> = t.pairs::<Value, Value>().flatten().collect();
            for (k, _) in &pairs {
                match k {
                    Value::Integer(i) if *i >= 1 => {
                        max = max.max(*i as usize);
                        count += 1;
                    }
                    Value::Number(n) if *n >= 1.0 && n.fract() == 0.0 => {
                        max = max.max(*n as usize);
                        count += 1;
                    }
                    _ => {
                        is_array = false;
                        break;
                    }
                }
            }
            if is_array && max > 0 {
                if max > count * 2 && max > 10 {
                    return Err("Cannot serialise table: excessively sparse array".into());
                }
                out.push(b'[');
                for i in 1..=max {
                    if i > 1 {
                        out.push(b',');
                    }
                    let item: Value = t.raw_get(i).unwrap_or(Value::Nil);
                    json_encode(&item, cfg, out, depth + 1)?;
                }
                out.push(b']');
                return Ok(());
            }
            out.push(b'{');
            for (i, (k, val)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                match k {
                    Value::String(s) => json_escape(&s.as_bytes(), out),
                    Value::Integer(n) => json_escape(lua_number(*n as f64).as_bytes(), out),
                    Value::Number(n) => json_escape(lua_number(*n).as_bytes(), out),
                    _ => {
                        return Err(
                            "Cannot serialise table: table key must be a number or string".into(),
                        )
                    }
                }
                out.push(b':');
                json_encode(val, cfg, out, depth + 1)?;
            }
            out.push(b'}');
        }
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                type_name(Some(other))
            ))
        }
    }
    Ok(())
}

/// lua-cjson's token names, for its error messages.
fn token_name(data: &[u8], pos: usize) -> &'static str {
    match data.get(pos) {
        None => "T_END",
        Some(b'{') => "T_OBJ_BEGIN",
        Some(b'}') => "T_OBJ_END",
        Some(b'[') => "T_ARR_BEGIN",
        Some(b']') => "T_ARR_END",
        Some(b',') => "T_COMMA",
        Some(b':') => "T_COLON",
        Some(b'"') => "T_STRING",
        Some(b'-' | b'0'..=b'9') => "T_NUMBER",
        Some(b't' | b'f')
            if data[pos..].starts_with(b"true") || data[pos..].starts_with(b"false") =>
        {
            "T_BOOLEAN"
        }
        Some(b'n') if data[pos..].starts_with(b"null") => "T_NULL",
        _ => "invalid token",
    }
}

struct Json<'a, 'l> {
    lua: &'l Lua,
    data: &'a [u8],
    pos: usize,
    max_depth: usize,
}

impl Json<'_, '_> {
    fn skip_ws(&mut self) {
        while self.pos < self.data.len()
            && matches!(self.data[self.pos], b' ' | b'\t' | b'\n' | b'\r')
        {
            self.pos += 1;
        }
    }

    /// Enters an object or array at `self.pos` (its opening bracket),
    /// `depth` levels down: its table, and whether it closed at once with
    /// `close` (then consumed).
    fn open(&mut self, depth: usize, close: u8) -> Result<(Table, bool), String> {
        if depth >= self.max_depth {
            return Err(format!(
                "Found too many nested data structures ({}) at character {}",
                depth + 1,
                self.pos + 1
            ));
        }
        self.pos += 1;
        let t = self.lua.create_table().map_err(|e| e.to_string())?;
        self.skip_ws();
        let empty = self.data.get(self.pos) == Some(&close);
        if empty {
            self.pos += 1;
        }
        Ok((t, empty))
    }

    fn expected(&self, what: &str) -> String {
        format!(
            "Expected {what} but found {} at character {}",
            token_name(self.data, self.pos),
            self.pos + 1
        )
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        self.skip_ws();
        let lua_err = |e: mlua::Error| e.to_string();
        match self.data.get(self.pos) {
            Some(b'{') => {
                let (t, empty) = self.open(depth, b'}')?;
                if empty {
                    return Ok(Value::Table(t));
                }
                loop {
                    self.skip_ws();
                    if self.data.get(self.pos) != Some(&b'"') {
                        return Err(self.expected("object key string"));
                    }
                    let k = self.string()?;
                    self.skip_ws();
                    if self.data.get(self.pos) != Some(&b':') {
                        return Err(self.expected("colon"));
                    }
                    self.pos += 1;
                    let v = self.value(depth + 1)?;
                    t.raw_set(
                        Value::String(self.lua.create_string(&k).map_err(lua_err)?),
                        v,
                    )
                    .map_err(lua_err)?;
                    self.skip_ws();
                    match self.data.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(Value::Table(t));
                        }
                        _ => return Err(self.expected("comma or object end")),
                    }
                }
            }
            Some(b'[') => {
                let (t, empty) = self.open(depth, b']')?;
                if empty {
                    return Ok(Value::Table(t));
                }
                let mut i = 1;
                loop {
                    let v = self.value(depth + 1)?;
                    t.raw_set(i, v).map_err(lua_err)?;
                    i += 1;
                    self.skip_ws();
                    match self.data.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(Value::Table(t));
                        }
                        _ => return Err(self.expected("comma or array end")),
                    }
                }
            }
            Some(b'"') => {
                let s = self.string()?;
                Ok(Value::String(self.lua.create_string(&s).map_err(lua_err)?))
            }
            Some(b't') if self.data[self.pos..].starts_with(b"true") => {
                self.pos += 4;
                Ok(Value::Boolean(true))
            }
            Some(b'f') if self.data[self.pos..].starts_with(b"false") => {
                self.pos += 5;
                Ok(Value::Boolean(false))
            }
            Some(b'n') if self.data[self.pos..].starts_with(b"null") => {
                self.pos += 4;
                Ok(Value::LightUserData(LightUserData(std::ptr::null_mut())))
            }
            Some(b'-' | b'0'..=b'9') => {
                let start = self.pos;
                while self.pos < self.data.len()
                    && matches!(
                        self.data[self.pos],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.pos += 1;
                }
                std::str::from_utf8(&self.data[start..self.pos])
                    .ok()
                    .and_then(|s| s.parse::<f64>().ok())
                    .map(Value::Number)
                    .ok_or_else(|| {
                        format!(
                            "Expected value but found invalid number at character {}",
                            start + 1
                        )
                    })
            }
            _ => Err(self.expected("value")),
        }
    }

    fn string(&mut self) -> Result<Vec<u8>, String> {
        let start = self.pos;
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.data.get(self.pos) else {
                return Err(format!(
                    "Expected value but found invalid token at character {}",
                    start + 1
                ));
            };
            self.pos += 1;
            match b {
                b'"' => return Ok(out),
                b'\\' => {
                    let Some(&e) = self.data.get(self.pos) else {
                        return Err(format!(
                            "Expected value but found invalid token at character {}",
                            start + 1
                        ));
                    };
                    self.pos += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let hex = |p: usize| {
                                self.data
                                    .get(p..p + 4)
                                    .and_then(|h| std::str::from_utf8(h).ok())
                                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                            };
                            let Some(mut cp) = hex(self.pos) else {
                                return Err(format!("Expected value but found invalid unicode escape code at character {}", start + 1));
                            };
                            self.pos += 4;
                            if (0xD800..0xDC00).contains(&cp)
                                && self.data.get(self.pos..self.pos + 2) == Some(b"\\u")
                            {
                                if let Some(lo) =
                                    hex(self.pos + 2).filter(|l| (0xDC00..0xE000).contains(l))
                                {
                                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                    self.pos += 6;
                                }
                            }
                            let c = char::from_u32(cp).unwrap_or('\u{FFFD}');
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => {
                            return Err(format!(
                                "Expected value but found invalid escape code at character {}",
                                start + 1
                            ));
                        }
                    }
                }
                b => out.push(b),
            }
        }
    }
}

fn cjson_fns(
    lua: &Lua,
    settings: &JsonSettings,
) -> mlua::Result<Vec<(&'static str, mlua::Function)>> {
    let cfg = settings.clone();
    let encode = lua.create_function(move |lua, args: Variadic<Value>| {
        if args.len() != 1 {
            return fail(lua, "bad argument #1 to 'encode' (expected 1 argument)");
        }
        let mut out = Vec::new();
        match json_encode(&args[0], &cfg.get(), &mut out, 0) {
            Ok(()) => ok(vec![Value::String(lua.create_string(&out)?)]),
            Err(e) => fail(lua, e),
        }
    })?;
    let cfg = settings.clone();
    let decode = lua.create_function(move |lua, args: Variadic<Value>| {
        if args.len() != 1 {
            return fail(lua, "bad argument #1 to 'decode' (expected 1 argument)");
        }
        let data = tri!(lua, arg_str(&args, 1, "decode"));
        let mut p = Json {
            lua,
            data: &data,
            pos: 0,
            max_depth: cfg.get().decode_max_depth as usize,
        };
        let v = tri!(lua, p.value(0));
        p.skip_ws();
        if p.pos < data.len() {
            return fail(lua, p.expected("the end"));
        }
        ok(vec![v])
    })?;
    // `decode_array_with_array_mt` is newer than Redis 7.0's lua-cjson:
    // accepted, answering its default.
    let array_mt = lua.create_function(|_, _: Variadic<Value>| ok(vec![Value::Boolean(false)]))?;
    Ok(vec![
        ("encode", encode),
        ("decode", decode),
        (
            "encode_keep_buffer",
            json_setting(lua, settings, |_, a, n, c| {
                json_flag(a, n, &mut c.keep_buffer)
            })?,
        ),
        (
            "encode_max_depth",
            json_setting(lua, settings, |_, a, n, c| {
                json_depth(a, n, &mut c.encode_max_depth)
            })?,
        ),
        (
            "decode_max_depth",
            json_setting(lua, settings, |_, a, n, c| {
                json_depth(a, n, &mut c.decode_max_depth)
            })?,
        ),
        (
            "encode_number_precision",
            json_setting(lua, settings, |_, a, n, c| {
                let mut v = i64::from(c.precision);
                json_integer(a, n, 1, 14, &mut v)?;
                c.precision = v as u8;
                Ok(Value::Integer(v))
            })?,
        ),
        (
            "encode_invalid_numbers",
            // off, on (`nan`, `inf`) or "null"
            json_setting(lua, settings, |lua, a, n, c| {
                const OPTIONS: [&str; 3] = ["off", "on", "null"];
                match json_enum(a, n, &OPTIONS, &mut c.encode_invalid)? {
                    Value::Nil => lua
                        .create_string(OPTIONS[usize::from(c.encode_invalid)])
                        .map(Value::String)
                        .map_err(|e| e.to_string()),
                    b => Ok(b),
                }
            })?,
        ),
        (
            "decode_invalid_numbers",
            json_setting(lua, settings, |_, a, n, c| {
                json_flag(a, n, &mut c.decode_invalid)
            })?,
        ),
        ("decode_array_with_array_mt", array_mt),
    ])
}

/// lua-cjson's `json_arg_init`: a configuration function takes at most
/// one argument; `None` when it is absent or nil (a read).
fn json_arg<'v>(args: &'v [Value], name: &str) -> Result<Option<&'v Value>, String> {
    if args.len() > 1 {
        return Err(format!(
            "bad argument #2 to '{name}' (found too many arguments)"
        ));
    }
    Ok(args.first().filter(|v| !v.is_nil()))
}

/// lua-cjson's `json_integer_option`: sets the value when given (an
/// integer in `min..=max`), answers the value in force.
fn json_integer(
    args: &[Value],
    name: &str,
    min: i64,
    max: i64,
    slot: &mut i64,
) -> Result<i64, String> {
    if let Some(v) = json_arg(args, name)? {
        // luaL_checkinteger: a number (or numeric string), truncated.
        let n = num(v).ok_or_else(|| {
            format!(
                "bad argument #1 to '{name}' (number expected, got {})",
                type_name(Some(v))
            )
        })? as i64;
        if !(min..=max).contains(&n) {
            return Err(format!(
                "bad argument #1 to '{name}' (expected integer between {min} and {max})"
            ));
        }
        *slot = n;
    }
    Ok(*slot)
}

/// lua-cjson's `json_enum_option`: a boolean, or one of `options` by
/// name (`off`, `on`, ...); answers the setting in force, a boolean while
/// it is `off` or `on`.
fn json_enum(args: &[Value], name: &str, options: &[&str], slot: &mut u8) -> Result<Value, String> {
    match json_arg(args, name)? {
        None => {}
        Some(Value::Boolean(b)) => *slot = u8::from(*b),
        Some(v) => {
            let text = match v {
                Value::String(s) => s.to_string_lossy(),
                Value::Integer(_) | Value::Number(_) => lua_number(num(v).unwrap_or(0.0)),
                other => {
                    return Err(format!(
                        "bad argument #1 to '{name}' (string expected, got {})",
                        type_name(Some(other))
                    ))
                }
            };
            let i = options
                .iter()
                .position(|o| *o == text)
                .ok_or_else(|| format!("bad argument #1 to '{name}' (invalid option '{text}')"))?;
            *slot = i as u8;
        }
    }
    Ok(match *slot {
        0 | 1 => Value::Boolean(*slot == 1),
        _ => Value::Nil,
    })
}

/// A configuration function: `apply` reads the call's arguments (an
/// error names the function as its caller did) into the settings and
/// answers the value in force.
fn json_setting(
    lua: &Lua,
    settings: &JsonSettings,
    apply: fn(&Lua, &[Value], &str, &mut JsonConfig) -> Result<Value, String>,
) -> mlua::Result<mlua::Function> {
    let settings = settings.clone();
    lua.create_function(move |lua, args: Variadic<Value>| {
        let name = called_as(lua);
        let answer = apply(lua, &args, &name, &mut settings.0.lock());
        ok(vec![tri!(lua, answer)])
    })
}

/// `encode_max_depth` and `decode_max_depth`: 1 to `INT_MAX`.
fn json_depth(args: &[Value], name: &str, slot: &mut u32) -> Result<Value, String> {
    let mut v = i64::from(*slot);
    json_integer(args, name, 1, i32::MAX.into(), &mut v)?;
    *slot = v as u32;
    Ok(Value::Integer(v))
}

/// `encode_keep_buffer` and `decode_invalid_numbers`: on or off.
fn json_flag(args: &[Value], name: &str, slot: &mut bool) -> Result<Value, String> {
    let mut v = u8::from(*slot);
    let answer = json_enum(args, name, &["off", "on"], &mut v)?;
    *slot = v == 1;
    Ok(answer)
}

// ---------------------------------------------------------------------------
// cmsgpack

const MSGPACK_MAX_NESTING: usize = 16;

fn mp_encode(v: &Value, out: &mut Vec<u8>, depth: usize) {
    match v {
        Value::Nil => out.push(0xc0),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => mp_number(*i as f64, out),
        Value::Number(n) => mp_number(*n, out),
        Value::String(s) => {
            let s = s.as_bytes();
            let n = s.len();
            if n < 32 {
                out.push(0xa0 | n as u8);
            } else if n < 256 {
                out.extend_from_slice(&[0xd9, n as u8]);
            } else if n < 65536 {
                out.push(0xda);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            } else {
                out.push(0xdb);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
            out.extend_from_slice(&s);
        }
        Value::Table(t) if depth < MSGPACK_MAX_NESTING => {
            let pairs: Vec<(Value, Value)> = t.pairs::<Value, Value>().flatten().collect();
            // An array if its keys are exactly 1..n.
            let n = pairs.len();
            let is_array = pairs.iter().all(|(k, _)| match k {
                Value::Integer(i) => *i >= 1 && (*i as usize) <= n,
                Value::Number(f) => *f >= 1.0 && f.fract() == 0.0 && (*f as usize) <= n,
                _ => false,
            });
            if is_array {
                if n < 16 {
                    out.push(0x90 | n as u8);
                } else if n < 65536 {
                    out.push(0xdc);
                    out.extend_from_slice(&(n as u16).to_be_bytes());
                } else {
                    out.push(0xdd);
                    out.extend_from_slice(&(n as u32).to_be_bytes());
                }
                for i in 1..=n {
                    let item: Value = t.raw_get(i).unwrap_or(Value::Nil);
                    mp_encode(&item, out, depth + 1);
                }
            } else {
                if n < 16 {
                    out.push(0x80 | n as u8);
                } else if n < 65536 {
                    out.push(0xde);
                    out.extend_from_slice(&(n as u16).to_be_bytes());
                } else {
                    out.push(0xdf);
                    out.extend_from_slice(&(n as u32).to_be_bytes());
                }
                for (k, v) in &pairs {
                    mp_encode(k, out, depth + 1);
                    mp_encode(v, out, depth + 1);
                }
            }
        }
        _ => out.push(0xc0),
    }
}

fn mp_number(n: f64, out: &mut Vec<u8>) {
    let is_int = n.is_finite()
        && n.fract() == 0.0
        && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&n);
    if !is_int {
        if (n as f32) as f64 == n || n.is_nan() {
            out.push(0xca);
            out.extend_from_slice(&(n as f32).to_be_bytes());
        } else {
            out.push(0xcb);
            out.extend_from_slice(&n.to_be_bytes());
        }
        return;
    }
    let i = n as i64;
    if i >= 0 {
        let u = i as u64;
        if u < 128 {
            out.push(u as u8);
        } else if u < 256 {
            out.extend_from_slice(&[0xcc, u as u8]);
        } else if u < 65536 {
            out.push(0xcd);
            out.extend_from_slice(&(u as u16).to_be_bytes());
        } else if u < 1 << 32 {
            out.push(0xce);
            out.extend_from_slice(&(u as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&u.to_be_bytes());
        }
    } else if i >= -32 {
        out.push(i as i8 as u8);
    } else if i >= -128 {
        out.extend_from_slice(&[0xd0, i as i8 as u8]);
    } else if i >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(i as i16).to_be_bytes());
    } else if i >= -(1 << 31) {
        out.push(0xd2);
        out.extend_from_slice(&(i as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&i.to_be_bytes());
    }
}

struct Mp<'a, 'l> {
    lua: &'l Lua,
    data: &'a [u8],
    pos: usize,
}

impl Mp<'_, '_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err("Missing bytes in input.".into());
        };
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn be(&mut self, n: usize) -> Result<u64, String> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| acc << 8 | b as u64))
    }

    fn value(&mut self, depth: usize) -> Result<Value, String> {
        if depth > 1000 {
            return Err("Bad data format in input.".into());
        }
        let lua_err = |e: mlua::Error| e.to_string();
        let b = self.take(1)?[0];
        Ok(match b {
            0x00..=0x7f => Value::Integer(b as i64),
            0xe0..=0xff => Value::Integer(b as i8 as i64),
            0xc0 => Value::Nil,
            0xc2 => Value::Boolean(false),
            0xc3 => Value::Boolean(true),
            0xcc => Value::Integer(self.be(1)? as i64),
            0xcd => Value::Integer(self.be(2)? as i64),
            0xce => Value::Integer(self.be(4)? as i64),
            0xcf => Value::Number(self.be(8)? as f64),
            0xd0 => Value::Integer(self.be(1)? as u8 as i8 as i64),
            0xd1 => Value::Integer(self.be(2)? as u16 as i16 as i64),
            0xd2 => Value::Integer(self.be(4)? as u32 as i32 as i64),
            0xd3 => Value::Number(self.be(8)? as i64 as f64),
            0xca => Value::Number(f32::from_bits(self.be(4)? as u32) as f64),
            0xcb => Value::Number(f64::from_bits(self.be(8)?)),
            0xa0..=0xbf | 0xd9 | 0xda | 0xdb | 0xc4 | 0xc5 | 0xc6 => {
                let n = match b {
                    0xa0..=0xbf => (b & 0x1f) as usize,
                    0xd9 | 0xc4 => self.be(1)? as usize,
                    0xda | 0xc5 => self.be(2)? as usize,
                    _ => self.be(4)? as usize,
                };
                let s = self.take(n)?.to_vec();
                Value::String(self.lua.create_string(&s).map_err(lua_err)?)
            }
            0x90..=0x9f | 0xdc | 0xdd => {
                let n = match b {
                    0x90..=0x9f => (b & 0x0f) as usize,
                    0xdc => self.be(2)? as usize,
                    _ => self.be(4)? as usize,
                };
                if n > self.data.len() {
                    return Err("Missing bytes in input.".into());
                }
                let t = self.lua.create_table().map_err(lua_err)?;
                for i in 1..=n {
                    let v = self.value(depth + 1)?;
                    t.raw_set(i, v).map_err(lua_err)?;
                }
                Value::Table(t)
            }
            0x80..=0x8f | 0xde | 0xdf => {
                let n = match b {
                    0x80..=0x8f => (b & 0x0f) as usize,
                    0xde => self.be(2)? as usize,
                    _ => self.be(4)? as usize,
                };
                if n > self.data.len() {
                    return Err("Missing bytes in input.".into());
                }
                let t = self.lua.create_table().map_err(lua_err)?;
                for _ in 0..n {
                    let k = self.value(depth + 1)?;
                    let v = self.value(depth + 1)?;
                    if !matches!(k, Value::Nil) {
                        t.raw_set(k, v).map_err(lua_err)?;
                    }
                }
                Value::Table(t)
            }
            _ => return Err("Bad data format in input.".into()),
        })
    }
}

fn cmsgpack_fns(lua: &Lua) -> mlua::Result<Vec<(&'static str, mlua::Function)>> {
    let pack = lua.create_function(|lua, args: Variadic<Value>| {
        if args.is_empty() {
            return fail(lua, "MessagePack pack needs input.");
        }
        let mut out = Vec::new();
        for v in args.iter() {
            mp_encode(v, &mut out, 0);
        }
        ok(vec![Value::String(lua.create_string(&out)?)])
    })?;
    /// Decodes up to `limit` values (0: all) from `offset`; answers the
    /// offset after them (-1 at the end) and the values.
    fn unpack_from(lua: &Lua, data: &[u8], limit: usize, offset: usize) -> Answer {
        let mut mp = Mp {
            lua,
            data,
            pos: offset,
        };
        let mut values = Vec::new();
        while mp.pos < data.len() && (limit == 0 || values.len() < limit) {
            match mp.value(0) {
                Ok(v) => values.push(v),
                Err(e) => return fail(lua, e),
            }
        }
        let next = if mp.pos >= data.len() {
            -1
        } else {
            mp.pos as i64
        };
        let mut out = vec![Value::Integer(next)];
        out.extend(values);
        ok(out)
    }
    let unpack = lua.create_function(|lua, args: Variadic<Value>| {
        let data = tri!(lua, arg_str(&args, 1, "unpack"));
        let mut r: Vec<Value> = unpack_from(lua, &data, 0, 0)?.into_iter().collect();
        r.remove(0); // the offset
        Ok(MultiValue::from_vec(r))
    })?;
    let unpack_one = lua.create_function(|lua, args: Variadic<Value>| {
        let data = tri!(lua, arg_str(&args, 1, "unpack_one"));
        let offset = num_opt(args.get(1)).unwrap_or(0.0).max(0.0) as usize;
        unpack_from(lua, &data, 1, offset)
    })?;
    let unpack_limit = lua.create_function(|lua, args: Variadic<Value>| {
        let data = tri!(lua, arg_str(&args, 1, "unpack_limit"));
        let limit = num_opt(args.get(1)).unwrap_or(0.0).max(0.0) as usize;
        let offset = num_opt(args.get(2)).unwrap_or(0.0).max(0.0) as usize;
        unpack_from(lua, &data, limit, offset)
    })?;
    Ok(vec![
        ("pack", pack),
        ("unpack", unpack),
        ("unpack_one", unpack_one),
        ("unpack_limit", unpack_limit),
    ])
}
