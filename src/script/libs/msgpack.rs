//! `cmsgpack`: lua-cmsgpack's `pack` and `unpack`.

use super::args::*;

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

pub(super) fn cmsgpack_fns(lua: &Lua) -> mlua::Result<Vec<(&'static str, mlua::Function)>> {
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
