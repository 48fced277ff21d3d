//! The seed limiters (`benches/compare.py`): the two-bucket sliding-window
//! counter and the sorted-set log, both on `redis.call('TIME')`.

use super::ops::{
    expire, expire_at, fmt_num, get, lua_int, lua_num, parse_i64, Call, Cmd, Fallback, Fb, Name,
    Native,
};
use crate::store::collections::{ScoreBound, ZSet};
use crate::store::{Entry, Locked, Value};

pub const TWO_BUCKET: Native = Native {
    name: "two-bucket",
    library: "Turnstile seed (benches/compare.py TWO_BUCKET_LUA)",
    version: "-",
    sha: "df6f734e2199233573f2fc332e240dc5797b44c2",
    text: include_str!("lua/seed_two_bucket.lua"),
    commands: &[Cmd::Time, Cmd::Get, Cmd::Incr, Cmd::Expire],
    run: two_bucket,
};

pub const ZSET_LOG: Native = Native {
    name: "zset log",
    library: "Turnstile seed (benches/compare.py ZSET_LOG_LUA)",
    version: "-",
    sha: "aa33e8c9936bd04a76610c4b281f903f73366c91",
    text: include_str!("lua/seed_zset_log.lua"),
    commands: &[
        Cmd::Time,
        Cmd::Zremrangebyscore,
        Cmd::Zcard,
        Cmd::Zadd,
        Cmd::Expire,
    ],
    run: zset_log,
};

/// A counter as the script reads it: `tonumber(redis.call('GET', k) or
/// '0')`, and whether `INCR` would take it (the value as an integer).
fn counter(db: &mut Locked<'_>, key: &[u8], c: &mut Call) -> Fb<(f64, Option<i64>)> {
    match get(db, key, c, |s| (lua_num(s), parse_i64(s)))? {
        None => Ok((0.0, Some(0))),
        Some((n, i)) => Ok((n?, i)),
    }
}

fn two_bucket(c: &mut Call) -> Fb<()> {
    let key = c.key(0)?;
    let (secs, usecs) = c.time();
    let t = secs + usecs / 1000000.0;
    let limit = lua_num(c.arg(0)?)?;
    let period = lua_num(c.arg(1)?)?;
    let cur = (t / period).floor();
    let elapsed = t - cur * period;
    let ckey = Name::joined(key, b':', cur);
    let pkey = Name::joined(key, b':', cur - 1.0);
    let (ckey, pkey) = (ckey.get(), pkey.get());
    let mut db = c.lock(&[ckey, pkey])?;
    let (prev, _) = counter(&mut db, pkey, c)?;
    let (curr, as_int) = counter(&mut db, ckey, c)?;
    let estimate = prev * (period - elapsed) / period + curr;
    let out = &mut *c.ctx.out;
    if estimate + 1.0 <= limit {
        // Every check before the first write.
        as_int.and_then(|i| i.checked_add(1)).ok_or(Fallback)?;
        let mut num = [0u8; 32];
        let at = expire_at(fmt_num(period * 2.0, &mut num), c)?;
        super::ops::incrby(&mut db, ckey, 1, c, Cmd::Incr)?;
        expire(&mut db, ckey, at, c)?;
        let out = &mut *c.ctx.out;
        out.array(2);
        out.int(1);
        out.int(lua_int((limit - estimate - 1.0).floor()));
        return Ok(());
    }
    out.array(2);
    out.int(0);
    out.int(0);
    Ok(())
}

fn zset_log(c: &mut Call) -> Fb<()> {
    let key = c.key(0)?;
    let (secs, usecs) = c.time();
    let now_us = secs * 1000000.0 + usecs;
    let window = lua_num(c.arg(1)?)?;
    let start_us = now_us - window * 1000000.0;
    let limit = lua_num(c.arg(0)?)?;
    // The arguments as `redis.call` gets them, read back as the commands
    // read them; every check before the first write.
    let mut start_text = [0u8; 32];
    let start_text = fmt_num(start_us, &mut start_text);
    let max = std::str::from_utf8(start_text)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|v| !v.is_nan())
        .ok_or(Fallback)?;
    let mut member = [0u8; 32];
    let member = fmt_num(now_us, &mut member);
    let score = std::str::from_utf8(member)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or(Fallback)?;
    let mut ttl = [0u8; 32];
    let at = expire_at(fmt_num(window + 5.0, &mut ttl), c)?;
    let now = c.now();
    c.writing()?;
    let mut db = c.lock(&[key])?;
    // ZREMRANGEBYSCORE key -inf start: a key of another type is refused
    // before anything changes.
    let min = ScoreBound {
        value: f64::NEG_INFINITY,
        exclusive: false,
    };
    let max = ScoreBound {
        value: max,
        exclusive: false,
    };
    db.update(key, now, |slot| {
        let Some(e) = slot.as_mut() else {
            return Ok(());
        };
        let Value::ZSet(z) = &mut e.value else {
            return Err(Fallback);
        };
        let gone: Vec<bytes::Bytes> = z.range_by_score(min, max).map(|(m, _)| m.clone()).collect();
        if !gone.is_empty() {
            z.remove_all(gone);
        }
        if z.is_empty() {
            *slot = None;
        }
        Ok(())
    })?;
    c.ran(Cmd::Zremrangebyscore);
    c.ran(Cmd::Zcard);
    let count = db
        .get(key, now, |e| match &e.value {
            Value::ZSet(z) => z.len() as i64,
            _ => 0,
        })
        .unwrap_or(0);
    let allowed = (count as f64) < limit;
    if allowed {
        c.ran(Cmd::Zadd);
        db.update(key, now, |slot| {
            let e = slot.get_or_insert_with(|| Entry::new(Value::ZSet(Box::<ZSet>::default())));
            if let Value::ZSet(z) = &mut e.value {
                if z.score(member) != Some(score) {
                    z.insert(member, score);
                }
            }
        });
    }
    expire(&mut db, key, at, c)?;
    let out = &mut *c.ctx.out;
    out.array(2);
    out.int(allowed as i64);
    out.int(through_lua_count(count));
    Ok(())
}

/// `ZCARD`'s integer as the script returns it (through a Lua number).
fn through_lua_count(n: i64) -> i64 {
    super::ops::through_lua(n)
}
