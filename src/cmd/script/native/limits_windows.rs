//! The Python `limits` library's moving-window (a list of timestamps,
//! newest first) and sliding-window (two counters, the current window's
//! and the previous one's) scripts, as `limits/storage/redis.py` calls
//! them:
//!
//! - `lua_moving_window([key], [time.time() - expiry, limit])`
//! - `lua_acquire_moving_window([key], [time.time(), limit, expiry, amount])`
//! - `lua_sliding_window([previous_key, current_key], [expiry])`
//! - `lua_acquire_sliding_window([previous_key, current_key], [limit, expiry, amount])`

use super::ops::{
    exists, expire, expire_at, fmt_num, get, incrby, is_list_or_none, lindex, lpush, ltrim,
    lua_int, lua_num, lua_str, lua_tonumber, parse_i64, pttl, rename, set, set_deadline,
    through_lua, Call, Cmd, Fallback, Fb, Native,
};
use crate::cmd::data::keys::Unit;
use crate::store::keys::Keys;
use crate::store::Locked;

pub const MOVING_WINDOW: Native = Native {
    name: "limits moving window get",
    library: "limits (Python), moving_window.lua",
    version: "5.8.0",
    sha: "ad795214f59fe26d6fdec07973836dd16586f5ec",
    text: include_str!("lua/limits_moving_window.lua"),
    commands: &[Cmd::Lindex],
    run: moving_window,
};

pub const ACQUIRE_MOVING_WINDOW: Native = Native {
    name: "limits moving window acquire",
    library: "limits (Python), acquire_moving_window.lua",
    version: "5.8.0",
    sha: "741eab638ba93ed71020bb821c45c022d0fa02c4",
    text: include_str!("lua/limits_acquire_moving_window.lua"),
    commands: &[Cmd::Lindex, Cmd::Lpush, Cmd::Ltrim, Cmd::Expire],
    run: acquire_moving_window,
};

pub const SLIDING_WINDOW: Native = Native {
    name: "limits sliding window get",
    library: "limits (Python), sliding_window.lua",
    version: "5.8.0",
    sha: "e7a0a27d4101baabb124af209bb0245197a359a1",
    text: include_str!("lua/limits_sliding_window.lua"),
    commands: &[Cmd::Get, Cmd::Pttl, Cmd::Rename, Cmd::Set],
    run: sliding_window,
};

pub const ACQUIRE_SLIDING_WINDOW: Native = Native {
    name: "limits sliding window acquire",
    library: "limits (Python), acquire_sliding_window.lua",
    version: "5.8.0",
    sha: "e8ac2a60cb040b0dbb56815a1e9c6fd032ce62e7",
    text: include_str!("lua/limits_acquire_sliding_window.lua"),
    commands: &[
        Cmd::Pttl,
        Cmd::Rename,
        Cmd::Set,
        Cmd::Get,
        Cmd::Exists,
        Cmd::Incrby,
    ],
    run: acquire_sliding_window,
};

/// A Lua number as `redis.call` passes it to a command that reads an
/// integer (`LINDEX`, `LTRIM`): one it refuses is a fallback.
fn int_arg(x: f64) -> Fb<i64> {
    let mut buf = [0u8; 32];
    parse_i64(fmt_num(x, &mut buf)).ok_or(Fallback)
}

/// `tonumber(redis.call('lindex', KEYS[1], i))`: `None` for no item or
/// one Lua reads as no number.
fn lindex_num(db: &mut Locked<'_>, key: &[u8], i: f64, c: &mut Call) -> Fb<Option<f64>> {
    let i = int_arg(i)?;
    Ok(lindex(db, key, i, c, lua_tonumber)?.transpose()?.flatten())
}

fn moving_window(c: &mut Call) -> Fb<()> {
    let key = c.key(0)?;
    let len = lua_num(c.arg(1)?)?;
    let target = lua_num(c.arg(0)?)?;
    // A binary search over at most 2^53 items: every index an exact
    // integer.
    if len.abs() > 9007199254740992.0 {
        return Err(Fallback);
    }
    let mut db = c.lock(&[key])?;
    let (mut low, mut high) = (0.0f64, len - 1.0);
    let mut result = None;
    while low <= high {
        let mid = ((low + high) / 2.0).floor();
        match lindex_num(&mut db, key, mid, c)? {
            Some(val) if val >= target => {
                result = Some(mid);
                low = mid + 1.0;
            }
            _ => high = mid - 1.0,
        }
    }
    let Some(index) = result else {
        // No return: nil.
        c.ctx.out.null();
        return Ok(());
    };
    let count = index + 1.0;
    let oldest = lindex_num(&mut db, key, index, c)?.ok_or(Fallback)?;
    let mut text = [0u8; 32];
    let out = &mut *c.ctx.out;
    out.array(2);
    out.bulk(lua_str(oldest, &mut text));
    out.int(lua_int(count));
    Ok(())
}

fn acquire_moving_window(c: &mut Call) -> Fb<()> {
    let key = c.key(0)?;
    let timestamp = lua_num(c.arg(0)?)?;
    let limit = lua_num(c.arg(1)?)?;
    let expiry = lua_num(c.arg(2)?)?;
    let amount = lua_num(c.arg(3)?)?;
    if amount > limit {
        c.ctx.out.null();
        return Ok(());
    }
    let mut db = c.lock(&[key])?;
    let entry = lindex(&mut db, key, int_arg(limit - amount)?, c, lua_tonumber)?;
    if let Some(entry) = entry {
        // `tonumber(entry) >= ...` of a nil is a Lua error.
        let entry = entry?.ok_or(Fallback)?;
        if entry >= timestamp - expiry {
            c.ctx.out.null();
            return Ok(());
        }
    }
    // `for i = 1, amount`: the pushes, in calls of 5000 (one here, or Lua).
    let pushes = if amount >= 1.0 { amount.floor() } else { 0.0 };
    if pushes > 5000.0 {
        return Err(Fallback);
    }
    let pushes = pushes as usize;
    // Every argument checked, as its command reads it, before the first
    // write (LINDEX found the key a list or missing).
    let mut ts = [0u8; 32];
    let ts = fmt_num(timestamp, &mut ts);
    let stop = int_arg(limit - 1.0)?;
    let mut ex = [0u8; 32];
    let at = expire_at(fmt_num(expiry, &mut ex), c)?;
    if !is_list_or_none(&mut db, key, c) {
        return Err(Fallback);
    }
    if pushes > 0 {
        lpush(&mut db, key, ts, pushes, c)?;
    }
    ltrim(&mut db, key, 0, stop, c)?;
    expire(&mut db, key, at, c)?;
    c.ctx.out.int(1);
    Ok(())
}

/// A `GET` reply as a script holds it: the value, or `None` (false).
fn get_bytes(db: &mut Locked<'_>, key: &[u8], c: &mut Call) -> Fb<Option<bytes::Bytes>> {
    get(db, key, c, bytes::Bytes::copy_from_slice)
}

/// Whether `key` holds a string (what `GET` takes); `None` if missing.
fn string_value(db: &mut Locked<'_>, key: &[u8], c: &Call) -> Option<Option<bytes::Bytes>> {
    db.get(key, c.now(), |e| {
        e.value.as_str().map(|s| bytes::Bytes::copy_from_slice(s))
    })
}

/// The shift both sliding-window scripts make when the current window's
/// counter has less than a window to live: `RENAME current previous`,
/// `SET current 0 PX ttl + expiry`, with `at` the deadline worked out.
fn shift(db: &mut Locked<'_>, prev: &[u8], cur: &[u8], at: u64, c: &mut Call) -> Fb<()> {
    rename(db, cur, prev, c)?;
    set(db, cur, b"0", at, false, c)?;
    Ok(())
}

/// `SET ... PX ttl + expiry`'s deadline.
fn shift_deadline(ttl: i64, expiry: f64, c: &Call) -> Fb<u64> {
    let mut text = [0u8; 32];
    set_deadline(fmt_num(ttl as f64 + expiry, &mut text), Unit::Millis, c)
}

fn sliding_window(c: &mut Call) -> Fb<()> {
    let (prev, cur) = (c.key(0)?, c.key(1)?);
    if prev == cur {
        return Err(Fallback);
    }
    let expiry = lua_num(c.arg(0)?)? * 1000.0;
    let mut db = c.lock(&[prev, cur])?;
    let mut previous_count = get_bytes(&mut db, prev, c)?;
    let mut previous_ttl = pttl(&mut db, prev, c);
    let mut current_count = get_bytes(&mut db, cur, c)?;
    let mut current_ttl = pttl(&mut db, cur, c);
    if current_ttl > 0 && (current_ttl as f64) < expiry {
        let at = shift_deadline(current_ttl, expiry, c)?;
        shift(&mut db, prev, cur, at, c)?;
        previous_count = get_bytes(&mut db, prev, c)?;
        previous_ttl = pttl(&mut db, prev, c);
        current_count = get_bytes(&mut db, cur, c)?;
        current_ttl = pttl(&mut db, cur, c);
    }
    let out = &mut *c.ctx.out;
    out.array(4);
    for (count, ttl) in [(previous_count, previous_ttl), (current_count, current_ttl)] {
        match count {
            Some(v) => out.bulk(&v),
            None => out.null(),
        }
        out.int(through_lua(ttl));
    }
    Ok(())
}

/// `tonumber(redis.call('get', k)) or 0` of a string value (or none).
fn count_of(v: Option<&[u8]>) -> Fb<f64> {
    Ok(match v {
        Some(v) => lua_tonumber(v)?.unwrap_or(0.0),
        None => 0.0,
    })
}

fn acquire_sliding_window(c: &mut Call) -> Fb<()> {
    let (prev, cur) = (c.key(0)?, c.key(1)?);
    if prev == cur {
        return Err(Fallback);
    }
    let limit = lua_num(c.arg(0)?)?;
    let expiry = lua_num(c.arg(1)?)? * 1000.0;
    let amount = lua_num(c.arg(2)?)?;
    if amount > limit {
        c.ctx.out.null();
        return Ok(());
    }
    let mut db = c.lock(&[prev, cur])?;
    let ttl = pttl(&mut db, cur, c);
    if ttl > 0 && (ttl as f64) < expiry {
        // What follows the shift, checked before it writes: the moved
        // counter is read by GET and `tonumber`, and an admit adds to the
        // new "0" with INCRBY.
        let at = shift_deadline(ttl, expiry, c)?;
        match string_value(&mut db, cur, c) {
            Some(Some(v)) => count_of(Some(&v))?,
            _ => return Err(Fallback),
        };
        int_arg(amount)?;
        shift(&mut db, prev, cur, at, c)?;
    }
    let previous_count = count_of(get_bytes(&mut db, prev, c)?.as_deref())?;
    let previous_ttl = (pttl(&mut db, prev, c) as f64).max(0.0);
    let current_count = count_of(get_bytes(&mut db, cur, c)?.as_deref())?;
    let _current_ttl = pttl(&mut db, cur, c);
    let weighted = (previous_count * previous_ttl / expiry).floor() + current_count;
    if weighted + amount > limit {
        c.ctx.out.null();
        return Ok(());
    }
    if exists(&mut db, cur, c) {
        incrby(&mut db, cur, int_arg(amount)?, c, Cmd::Incrby)?;
    } else {
        let mut ttl = [0u8; 32];
        let at = set_deadline(fmt_num(expiry * 2.0, &mut ttl), Unit::Millis, c)?;
        let mut value = [0u8; 32];
        set(&mut db, cur, fmt_num(amount, &mut value), at, false, c)?;
    }
    c.ctx.out.int(1);
    Ok(())
}
