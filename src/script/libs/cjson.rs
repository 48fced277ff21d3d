//! `cjson`: lua-cjson's encoder, decoder and settings.

use super::args::*;

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

pub(super) fn cjson_fns(
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
