//! Lua values into replies, by the rules Redis 7 documents ("Conversion
//! between Lua and Redis data types"). The other way, replies into Lua, is
//! `call.rs`: it reads the RESP bytes a command wrote (the one way in,
//! whatever the command, and the same text a client would get) straight
//! onto the Lua stack.

use bytes::BufMut;
use mlua::{Lua, Table, Value};

use crate::protocol::{Protocol, ReplyBuf};

/// An error's text as a reply line: CR and LF become spaces, as Redis
/// makes them.
pub fn error_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

use crate::util::format_g17 as g17;

fn raw_line(out: &mut ReplyBuf, prefix: u8, body: &[u8]) {
    let b = out.buffer();
    b.reserve(body.len() + 3);
    b.put_u8(prefix);
    b.put_slice(body);
    b.put_slice(b"\r\n");
}

/// Writes a script's value as the reply for a client speaking `resp`;
/// `script_resp` is what the script chose with `redis.setresp` (booleans
/// follow it, as in Redis).
pub fn write_value(
    v: &Value,
    fields: &Fields,
    resp: Protocol,
    script_resp: Protocol,
    out: &mut ReplyBuf,
) {
    let saved = out.proto;
    out.proto = resp;
    write(v, fields, script_resp, out, 0);
    out.proto = saved;
}

/// The field names a table result is looked up by, made once per Lua
/// state: a lookup by `&str` makes (hashes and interns) the Lua string
/// each time, through one of mlua's protected calls.
pub struct Fields {
    err: mlua::LuaString,
    ok: mlua::LuaString,
    double: mlua::LuaString,
    big_number: mlua::LuaString,
    map: mlua::LuaString,
    set: mlua::LuaString,
    verbatim_string: mlua::LuaString,
    format: mlua::LuaString,
    string: mlua::LuaString,
}

impl Fields {
    pub fn new(lua: &Lua) -> mlua::Result<Fields> {
        Ok(Fields {
            err: lua.create_string("err")?,
            ok: lua.create_string("ok")?,
            double: lua.create_string("double")?,
            big_number: lua.create_string("big_number")?,
            map: lua.create_string("map")?,
            set: lua.create_string("set")?,
            verbatim_string: lua.create_string("verbatim_string")?,
            format: lua.create_string("format")?,
            string: lua.create_string("string")?,
        })
    }
}

fn field(t: &Table, name: &mlua::LuaString) -> Value {
    t.raw_get(name).unwrap_or(Value::Nil)
}

fn write(v: &Value, fields: &Fields, script_resp: Protocol, out: &mut ReplyBuf, depth: usize) {
    if depth > 1000 {
        out.error("ERR reached lua stack limit");
        return;
    }
    match v {
        Value::Nil => out.null(),
        Value::Boolean(b) => match script_resp {
            Protocol::Resp3 => out.bool(*b),
            Protocol::Resp2 if *b => out.int(1),
            Protocol::Resp2 => out.null(),
        },
        Value::Integer(i) => out.int(*i),
        Value::Number(n) => out.int(*n as i64),
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Table(t) => write_table(t, fields, script_resp, out, depth),
        _ => out.null(),
    }
}

fn text_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(i) => Some(i.to_string().into_bytes()),
        Value::Number(n) => Some(g17(*n).into_bytes()),
        _ => None,
    }
}

fn write_table(t: &Table, f: &Fields, script_resp: Protocol, out: &mut ReplyBuf, depth: usize) {
    if let Some(err) = text_of(&field(t, &f.err)) {
        out.error(&String::from_utf8_lossy(&err));
        return;
    }
    if let Value::String(ok) = field(t, &f.ok) {
        let text: Vec<u8> = ok
            .as_bytes()
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect();
        raw_line(out, b'+', &text);
        return;
    }
    match field(t, &f.double) {
        Value::Integer(i) => return write_double(i as f64, out),
        Value::Number(d) => return write_double(d, out),
        _ => {}
    }
    if let Value::String(big) = field(t, &f.big_number) {
        match out.proto {
            Protocol::Resp3 => raw_line(out, b'(', &big.as_bytes()),
            Protocol::Resp2 => out.bulk(&big.as_bytes()),
        }
        return;
    }
    if let Value::Table(map) = field(t, &f.map) {
        let pairs: Vec<(Value, Value)> = map.pairs::<Value, Value>().flatten().collect();
        out.map(pairs.len());
        for (k, v) in &pairs {
            write(k, f, script_resp, out, depth + 1);
            write(v, f, script_resp, out, depth + 1);
        }
        return;
    }
    if let Value::Table(set) = field(t, &f.set) {
        let keys: Vec<Value> = set
            .pairs::<Value, Value>()
            .flatten()
            .map(|(k, _)| k)
            .collect();
        out.set(keys.len());
        for k in &keys {
            write(k, f, script_resp, out, depth + 1);
        }
        return;
    }
    if let Value::Table(v) = field(t, &f.verbatim_string) {
        if let (Value::String(format), Value::String(text)) =
            (field(&v, &f.format), field(&v, &f.string))
        {
            match out.proto {
                Protocol::Resp3 => {
                    let mut body = format.as_bytes().to_vec();
                    body.push(b':');
                    body.extend_from_slice(&text.as_bytes());
                    let b = out.buffer();
                    b.put_slice(format!("={}\r\n", body.len()).as_bytes());
                    b.put_slice(&body);
                    b.put_slice(b"\r\n");
                }
                Protocol::Resp2 => out.bulk(&text.as_bytes()),
            }
            return;
        }
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(v),
        }
    }
    out.array(items.len());
    for v in &items {
        write(v, f, script_resp, out, depth + 1);
    }
}

fn write_double(d: f64, out: &mut ReplyBuf) {
    let text = g17(d);
    match out.proto {
        Protocol::Resp3 => raw_line(out, b',', text.as_bytes()),
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
