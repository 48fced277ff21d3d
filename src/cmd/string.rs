//! String commands: GET, SET, MGET, MSET, INCR, INCRBY, DECR, DECRBY.
//! Enough for fixed-window limiters written with plain commands
//! (`INCR` + `EXPIRE`, or `MGET` of two bucket keys).

use super::args::{int, is};
use super::keys::{deadline, Unit};
use super::{CmdError, Ctx};
use crate::protocol::{ReplyBuf, Request};
use crate::store::{Entry, SmallBytes, Value};
use crate::util::parse_i64;

/// ```text
/// GET key
/// ```
pub fn get(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let out = &mut *ctx.out;
    let found = ctx.db.get(req.arg(1), ctx.now, |e| {
        let s = e.value.as_str().ok_or(CmdError::WrongType)?;
        out.bulk(s);
        Ok(())
    });
    found.unwrap_or_else(|| {
        out.null();
        Ok(())
    })
}

/// ```text
/// MGET key [key ...]
/// ```
/// A missing key, or one of another type, reads as nil. Atomic, as in
/// Redis: the keys' shards are locked together, so a transaction's writes
/// are seen all or none.
pub fn mget(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let now = ctx.now;
    let out = &mut *ctx.out;
    out.array(req.len() - 1);
    let bulk = |out: &mut ReplyBuf, e: &Entry| match e.value.as_str() {
        Some(s) => {
            out.bulk(s);
            true
        }
        None => false,
    };
    if req.len() == 2 {
        // One key, one shard: no lock set to build.
        if ctx.db.get(req.arg(1), now, |e| bulk(out, e)) != Some(true) {
            out.null();
        }
        return Ok(());
    }
    let mut lock = ctx.db.lock_many(req.args().skip(1));
    for key in req.args().skip(1) {
        if lock.get(key, now, |e| bulk(out, e)) != Some(true) {
            out.null();
        }
    }
    Ok(())
}

/// ```text
/// SET key value [NX | XX] [GET] [EX seconds | PX milliseconds |
///   EXAT unix-time-seconds | PXAT unix-time-milliseconds | KEEPTTL]
/// ```
pub fn set(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    #[derive(PartialEq)]
    enum Cond {
        Always,
        Nx,
        Xx,
    }
    let mut cond = Cond::Always;
    let mut get = false;
    let mut keep_ttl = false;
    let mut expiry: Option<(i64, Unit, bool)> = None;
    let mut i = 3;
    while i < req.len() {
        let opt = req.arg(i);
        let has_value = i + 1 < req.len();
        if is(opt, "NX") && cond == Cond::Always {
            cond = Cond::Nx;
        } else if is(opt, "XX") && cond == Cond::Always {
            cond = Cond::Xx;
        } else if is(opt, "GET") && !get {
            get = true;
        } else if is(opt, "KEEPTTL") && !keep_ttl && expiry.is_none() {
            keep_ttl = true;
        } else if expiry.is_none() && !keep_ttl && has_value {
            let unit = if is(opt, "EX") {
                (Unit::Seconds, false)
            } else if is(opt, "PX") {
                (Unit::Millis, false)
            } else if is(opt, "EXAT") {
                (Unit::Seconds, true)
            } else if is(opt, "PXAT") {
                (Unit::Millis, true)
            } else {
                return Err(CmdError::Syntax);
            };
            let n = int(req, i + 1)?;
            if n <= 0 {
                return Err(CmdError::InvalidExpire("set"));
            }
            expiry = Some((n, unit.0, unit.1));
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let now = ctx.now;
    let at = match expiry {
        Some((n, unit, absolute)) => Some(deadline(now, n, unit, absolute, "set")?),
        None => None,
    };
    let value = req.arg(2);
    let out = &mut *ctx.out;
    ctx.db.update(req.arg(1), now, |slot| {
        // SET replaces a value of any type, as in Redis; only SET ... GET
        // must read the old one as a string.
        let old = match slot.as_ref().map(|e| e.value.as_str()) {
            Some(None) if get => return Err(CmdError::WrongType),
            old => old.flatten().cloned(),
        };
        let write = match cond {
            Cond::Always => true,
            Cond::Nx => slot.is_none(),
            Cond::Xx => slot.is_some(),
        };
        if write {
            match at {
                // An absolute time already past: the key is gone at once.
                Some(None) => *slot = None,
                Some(Some(t)) => {
                    *slot = Some(Entry::with_expiry_ms(
                        Value::Str(SmallBytes::new(value)),
                        Some(t),
                    ))
                }
                None => {
                    let ttl = slot
                        .as_ref()
                        .filter(|_| keep_ttl)
                        .and_then(Entry::expiry_ms);
                    *slot = Some(Entry::with_expiry_ms(
                        Value::Str(SmallBytes::new(value)),
                        ttl,
                    ));
                }
            }
        }
        match (get, write) {
            (true, _) => match old {
                Some(s) => out.bulk(&s),
                None => out.null(),
            },
            (false, true) => out.ok(),
            (false, false) => out.null(),
        }
        Ok(())
    })
}

/// ```text
/// MSET key value [key value ...]
/// ```
/// Atomic: every key's shard is locked before any is written.
pub fn mset(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if req.len().is_multiple_of(2) {
        return Err(CmdError::WrongArity("mset".into()));
    }
    let keys = (1..req.len()).step_by(2).map(|i| req.arg(i));
    let mut lock = ctx.db.lock_many(keys);
    for i in (1..req.len()).step_by(2) {
        let value = req.arg(i + 1);
        lock.update(req.arg(i), ctx.now, |slot| {
            *slot = Some(Entry::new(Value::Str(SmallBytes::new(value))));
        });
    }
    drop(lock);
    ctx.out.ok();
    Ok(())
}

/// ```text
/// INCR key
/// ```
pub fn incr(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    incr_by(ctx, req, 1)
}

/// ```text
/// DECR key
/// ```
pub fn decr(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    incr_by(ctx, req, -1)
}

/// ```text
/// INCRBY key increment
/// ```
pub fn incrby(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let n = int(req, 2)?;
    incr_by(ctx, req, n)
}

/// ```text
/// DECRBY key decrement
/// ```
pub fn decrby(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let n = int(req, 2)?;
    let n = n
        .checked_neg()
        .ok_or_else(|| CmdError::err("decrement would overflow"))?;
    incr_by(ctx, req, n)
}

/// Adds `delta` to the integer in `key` (0 if absent), keeping its TTL.
fn incr_by(ctx: &mut Ctx<'_>, req: &Request<'_>, delta: i64) -> Result<(), CmdError> {
    let result = ctx.db.update(req.arg(1), ctx.now, |slot| {
        let current = match slot.as_ref() {
            None => 0,
            Some(e) => {
                let s = e.value.as_str().ok_or(CmdError::WrongType)?;
                parse_i64(s).ok_or(CmdError::NotInteger)?
            }
        };
        let next = current.checked_add(delta).ok_or(CmdError::Overflow)?;
        let mut digits = itoa::Buffer::new();
        let value = Value::Str(SmallBytes::new(digits.format(next).as_bytes()));
        match slot {
            Some(e) => e.value = value,
            None => *slot = Some(Entry::new(value)),
        }
        Ok(next)
    })?;
    ctx.out.int(result);
    Ok(())
}
