//! Keyspace commands: DEL, UNLINK, EXISTS, TYPE, RENAME, RENAMENX, TTL,
//! PTTL, EXPIRETIME, PEXPIRETIME, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT,
//! PERSIST, SCAN, KEYS.

use super::args::{int, is, Cursor};
use super::{error::show, CmdError, Ctx};
use crate::clock::Nanos;
use crate::glob;
use crate::protocol::Request;
use crate::store::keys::Keys;
use crate::store::Touch;
use crate::util::parse_i64;

/// ```text
/// DEL key [key ...]
/// UNLINK key [key ...]
/// ```
pub fn del(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let store = ctx.db;
    let removed = req
        .args()
        .skip(1)
        .filter(|k| store.remove(k, ctx.now))
        .count();
    ctx.out.int(removed as i64);
    Ok(())
}

/// ```text
/// EXISTS key [key ...]
/// ```
/// A key named twice counts twice, as in Redis.
pub fn exists(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let store = ctx.db;
    let n = req
        .args()
        .skip(1)
        .filter(|k| store.exists(k, ctx.now))
        .count();
    ctx.out.int(n as i64);
    Ok(())
}

/// ```text
/// TYPE key
/// ```
pub fn type_(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let t = ctx
        .db
        .get(req.arg(1), ctx.now, |e| e.value.type_name())
        .unwrap_or("none");
    ctx.out.simple(t);
    Ok(())
}

/// ```text
/// RENAME key newkey
/// ```
pub fn rename(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    rename_generic(ctx, req, false)
}

/// ```text
/// RENAMENX key newkey
/// ```
pub fn renamenx(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    rename_generic(ctx, req, true)
}

/// Moves the value and TTL of `key` to `newkey`, replacing what was there
/// (unless `nx`), with both keys' shards locked together so no client
/// sees both keys or neither. The entry moves whole: a limiter key keeps
/// its state, and the TTL it carries, which for a packed record is the one
/// derived from its state (`store/record.rs`), so the new key has the same
/// TTL whichever way it is stored.
fn rename_generic(ctx: &mut Ctx<'_>, req: &Request<'_>, nx: bool) -> Result<(), CmdError> {
    let (from, to) = (req.arg(1), req.arg(2));
    let now = ctx.now;
    let mut lock = ctx.db.lock_many([from, to]);
    let moved = rename_in(&mut lock, from, to, now, nx)?;
    drop(lock);
    if nx {
        ctx.out.int(moved as i64);
    } else {
        ctx.out.ok();
    }
    Ok(())
}

/// `RENAME`'s (or `RENAMENX`'s) move under `lock` holding both keys'
/// shards: whether it moved; "no such key" if `from` is missing.
pub(crate) fn rename_in(
    lock: &mut crate::store::Locked<'_>,
    from: &[u8],
    to: &[u8],
    now: crate::clock::Nanos,
    nx: bool,
) -> Result<bool, CmdError> {
    if lock.get(from, now, |_| ()).is_none() {
        return Err(CmdError::err("no such key"));
    }
    // Onto itself: nothing moves, but Redis still answers as for a rename
    // (OK), or as for a taken name (0).
    Ok(
        if from == to || (nx && lock.get(to, now, |_| ()).is_some()) {
            false
        } else {
            let entry = lock.update(from, now, Option::take);
            // The new name is written, for WATCH, whatever it held before.
            lock.update_touching(to, now, Touch::Always, |slot| *slot = entry);
            true
        },
    )
}

/// -2 if the key is missing, -1 if it has no expiry, else milliseconds.
fn pttl_of(ctx: &Ctx<'_>, key: &[u8]) -> i64 {
    ctx.db
        .get(key, ctx.now, |e| e.pttl_ms(ctx.now).unwrap_or(-1))
        .unwrap_or(-2)
}

/// ```text
/// TTL key
/// ```
pub fn ttl(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let ms = pttl_of(ctx, req.arg(1));
    // Redis rounds to the nearest second.
    ctx.out.int(if ms < 0 { ms } else { (ms + 500) / 1000 });
    Ok(())
}

/// ```text
/// PTTL key
/// ```
pub fn pttl(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let ms = pttl_of(ctx, req.arg(1));
    ctx.out.int(ms);
    Ok(())
}

/// -2 if the key is missing, -1 if it has no expiry, else its absolute
/// expiry in milliseconds.
fn expiry_of(ctx: &Ctx<'_>, key: &[u8]) -> i64 {
    ctx.db
        .get(key, ctx.now, |e| {
            e.expiry_ms()
                .map_or(-1, |ms| ms.min(i64::MAX as u64) as i64)
        })
        .unwrap_or(-2)
}

/// ```text
/// EXPIRETIME key
/// ```
pub fn expiretime(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let ms = expiry_of(ctx, req.arg(1));
    // Redis rounds to the nearest second, as TTL does.
    ctx.out.int(if ms < 0 {
        ms
    } else {
        ((ms as u64 + 500) / 1000) as i64
    });
    Ok(())
}

/// ```text
/// PEXPIRETIME key
/// ```
pub fn pexpiretime(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let ms = expiry_of(ctx, req.arg(1));
    ctx.out.int(ms);
    Ok(())
}

/// The unit of an expiry argument.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Millis,
}

/// ```text
/// EXPIRE key seconds [NX | XX | GT | LT]
/// ```
pub fn expire(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    expire_generic(ctx, req, "expire", Unit::Seconds, false)
}

/// ```text
/// PEXPIRE key milliseconds [NX | XX | GT | LT]
/// ```
pub fn pexpire(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    expire_generic(ctx, req, "pexpire", Unit::Millis, false)
}

/// ```text
/// EXPIREAT key unix-time-seconds [NX | XX | GT | LT]
/// ```
pub fn expireat(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    expire_generic(ctx, req, "expireat", Unit::Seconds, true)
}

/// ```text
/// PEXPIREAT key unix-time-milliseconds [NX | XX | GT | LT]
/// ```
pub fn pexpireat(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    expire_generic(ctx, req, "pexpireat", Unit::Millis, true)
}

/// The expiry a request asks for, in absolute milliseconds on the server
/// clock, with every step checked as Redis checks it: a client's number
/// never wraps. `None` means "already in the past" (the key is deleted, as
/// Redis does).
pub fn deadline(
    now: Nanos,
    amount: i64,
    unit: Unit,
    absolute: bool,
    cmd: &'static str,
) -> Result<Option<u64>, CmdError> {
    let invalid = CmdError::InvalidExpire(cmd);
    let ms = match unit {
        Unit::Seconds => amount.checked_mul(1000).ok_or(invalid.clone())?,
        Unit::Millis => amount,
    };
    let now_ms = now.as_millis() as i64;
    let abs_ms = if absolute {
        ms
    } else {
        ms.checked_add(now_ms).ok_or(invalid.clone())?
    };
    if abs_ms <= now_ms {
        return Ok(None);
    }
    Ok(Some(abs_ms as u64))
}

fn expire_generic(
    ctx: &mut Ctx<'_>,
    req: &Request<'_>,
    cmd: &'static str,
    unit: Unit,
    absolute: bool,
) -> Result<(), CmdError> {
    let amount = int(req, 2)?;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in req.args().skip(3) {
        if is(opt, "NX") {
            nx = true;
        } else if is(opt, "XX") {
            xx = true;
        } else if is(opt, "GT") {
            gt = true;
        } else if is(opt, "LT") {
            lt = true;
        } else {
            return Err(CmdError::err(format!("Unsupported option {}", show(opt))));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(CmdError::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Err(CmdError::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    let at = deadline(ctx.now, amount, unit, absolute, cmd)?;
    let now = ctx.now;
    let changed = ctx.db.update(req.arg(1), now, |slot| {
        let Some(entry) = slot.as_mut() else {
            return false;
        };
        let current = entry.expiry_ms();
        // A persistent key counts as expiring at infinity.
        let new = at.unwrap_or(0);
        let allowed = (!nx || current.is_none())
            && (!xx || current.is_some())
            && (!gt || current.is_some_and(|c| new > c))
            && (!lt || current.is_none_or(|c| new < c));
        if !allowed {
            return false;
        }
        match at {
            None => *slot = None,
            Some(t) => entry.set_expiry_ms(Some(t)),
        }
        true
    });
    ctx.out.int(changed as i64);
    Ok(())
}

/// ```text
/// PERSIST key
/// ```
pub fn persist(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let changed = ctx.db.update(req.arg(1), ctx.now, |slot| match slot {
        Some(e) if e.has_expiry() => {
            e.set_expiry_ms(None);
            true
        }
        _ => false,
    });
    ctx.out.int(changed as i64);
    Ok(())
}

/// ```text
/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
/// ```
/// The cursor is a shard index: each call returns whole shards until it
/// has at least COUNT keys, so every key present for the whole iteration
/// is returned exactly once, however the shards resize in between.
pub fn scan(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let cursor = std::str::from_utf8(req.arg(1))
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| CmdError::err("invalid cursor"))?;
    let (mut pattern, mut count, mut type_filter) = (None, 10usize, None);
    let mut c = Cursor::new(req, 2);
    while let Some(opt) = c.next() {
        let val = c.next_required()?;
        if is(opt, "MATCH") {
            pattern = Some(val);
        } else if is(opt, "COUNT") {
            count = match parse_i64(val).ok_or(CmdError::NotInteger)? {
                n if n >= 1 => n as usize,
                _ => return Err(CmdError::Syntax),
            };
        } else if is(opt, "TYPE") {
            type_filter = Some(val);
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let store = ctx.db;
    let shards = store.shard_count() as u64;
    let mut shard = cursor.min(shards);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut seen = 0;
    while shard < shards && seen < count {
        store.for_each_in_shard(shard as usize, ctx.now, |k, e| {
            seen += 1;
            let keep = pattern.is_none_or(|p| glob::matches(p, k))
                && type_filter.is_none_or(|t| is(t, e.value.type_name()));
            if keep {
                keys.push(k.to_vec());
            }
        });
        shard += 1;
    }
    let next = if shard >= shards { 0 } else { shard };
    ctx.out.array(2);
    ctx.out.bulk_int(next as i64);
    ctx.out.array(keys.len());
    for k in keys {
        ctx.out.bulk(&k);
    }
    Ok(())
}

/// ```text
/// KEYS pattern
/// ```
pub fn keys(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let pattern = req.arg(1);
    let store = ctx.db;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for shard in 0..store.shard_count() {
        store.for_each_in_shard(shard, ctx.now, |k, _| {
            if glob::matches(pattern, k) {
                keys.push(k.to_vec());
            }
        });
    }
    ctx.out.array(keys.len());
    for k in keys {
        ctx.out.bulk(&k);
    }
    Ok(())
}
