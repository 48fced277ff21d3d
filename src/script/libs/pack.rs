//! `struct`: Roberto Ierusalimschy's binary packing (`pack`, `unpack`,
//! `size`).

use super::args::*;

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

pub(super) fn struct_fns(lua: &Lua) -> mlua::Result<Vec<(&'static str, mlua::Function)>> {
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
