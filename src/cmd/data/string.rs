//! String commands: GET, GETEX, GETDEL, SET, SETEX, PSETEX, SETNX, MGET,
//! MSET, INCR, INCRBY, INCRBYFLOAT, DECR, DECRBY. Enough for limiters
//! written with plain commands (`INCR` + `EXPIRE`, `SET ... NX EX` or
//! `SETNX` locks, `MGET` of two bucket keys, `INCRBYFLOAT` token buckets).

use super::args::{int, is, Cursor};
use super::keys::{deadline, Unit};
use super::{CmdError, Ctx};
use crate::protocol::{ReplyBuf, Request};
use crate::store::keys::Keys;
use crate::store::{Entry, SmallBytes, Touch, Value};
use crate::util::long_double::LongDouble;
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

/// The expiry options of `GETEX`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GetexTtl {
    Persist,
    Ex,
    Px,
    ExAt,
    PxAt,
}

/// ```text
/// GETEX key [EX seconds | PX milliseconds | EXAT unix-time-seconds |
///   PXAT unix-time-milliseconds | PERSIST]
/// ```
/// Checked in Redis's order: the options (a syntax error), then the key
/// (nil if missing, `WRONGTYPE` if not a string), then the time.
pub fn getex(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    const OPTIONS: [(&str, GetexTtl); 5] = [
        ("PERSIST", GetexTtl::Persist),
        ("EX", GetexTtl::Ex),
        ("PX", GetexTtl::Px),
        ("EXAT", GetexTtl::ExAt),
        ("PXAT", GetexTtl::PxAt),
    ];
    // The option and the index of its time argument. Redis accepts the
    // same option again (the last one counts), never two different ones.
    let mut chosen: Option<(GetexTtl, &[u8])> = None;
    let mut c = Cursor::new(req, 2);
    while let Some(arg) = c.next() {
        let opt = OPTIONS.iter().find(|(name, _)| is(arg, name));
        let Some(&(_, ttl)) = opt else {
            return Err(CmdError::Syntax);
        };
        let timed = ttl != GetexTtl::Persist;
        if chosen.is_some_and(|(c, _)| c != ttl) || (timed && c.peek().is_none()) {
            return Err(CmdError::Syntax);
        }
        let time = if timed { c.next_required()? } else { &[][..] };
        chosen = Some((ttl, time));
    }
    let Some((ttl, time)) = chosen else {
        // No option: a plain read, as GET.
        return get(ctx, req);
    };
    let now = ctx.now;
    let found = ctx.db.update(req.arg(1), now, |slot| {
        let Some(entry) = slot.as_mut() else {
            return Ok(None);
        };
        let value = entry.value.as_str().ok_or(CmdError::WrongType)?.clone();
        let (unit, absolute) = match ttl {
            GetexTtl::Persist => {
                entry.set_expiry_ms(None);
                return Ok(Some(value));
            }
            GetexTtl::Ex => (Unit::Seconds, false),
            GetexTtl::Px => (Unit::Millis, false),
            GetexTtl::ExAt => (Unit::Seconds, true),
            GetexTtl::PxAt => (Unit::Millis, true),
        };
        let n = parse_i64(time).ok_or(CmdError::NotInteger)?;
        if n <= 0 {
            return Err(CmdError::InvalidExpire("getex"));
        }
        match deadline(now, n, unit, absolute, "getex")? {
            Some(t) => entry.set_expiry_ms(Some(t)),
            // An absolute time already past: the key goes, once read.
            None => *slot = None,
        }
        Ok(Some(value))
    })?;
    match found {
        Some(s) => ctx.out.bulk(&s),
        None => ctx.out.null(),
    }
    Ok(())
}

/// ```text
/// GETDEL key
/// ```
pub fn getdel(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let taken = ctx.db.update(req.arg(1), ctx.now, |slot| {
        match slot.as_ref().map(|e| e.value.as_str()) {
            // Not a string: left as it is.
            Some(None) => Err(CmdError::WrongType),
            _ => Ok(slot.take()),
        }
    })?;
    match taken.as_ref().and_then(|e| e.value.as_str()) {
        Some(s) => ctx.out.bulk(s),
        None => ctx.out.null(),
    }
    Ok(())
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
    // The expiry option and its time argument, as Redis reads them: the
    // same option may come again (the last one counts), two different ones
    // or one with KEEPTTL are a syntax error, and the time is parsed only
    // after every option was read, so a syntax error anywhere wins.
    let mut expiry: Option<((Unit, bool), &[u8])> = None;
    let mut c = Cursor::new(req, 3);
    while let Some(opt) = c.next() {
        let kind = [
            ("EX", (Unit::Seconds, false)),
            ("PX", (Unit::Millis, false)),
            ("EXAT", (Unit::Seconds, true)),
            ("PXAT", (Unit::Millis, true)),
        ]
        .into_iter()
        .find(|(name, _)| is(opt, name))
        .map(|(_, k)| k);
        if is(opt, "NX") && cond != Cond::Xx {
            cond = Cond::Nx;
        } else if is(opt, "XX") && cond != Cond::Nx {
            cond = Cond::Xx;
        } else if is(opt, "GET") {
            get = true;
        } else if is(opt, "KEEPTTL") && expiry.is_none() {
            keep_ttl = true;
        } else if let Some(kind) =
            kind.filter(|k| !keep_ttl && expiry.is_none_or(|(e, _)| e == *k) && c.peek().is_some())
        {
            expiry = Some((kind, c.next_required()?));
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let expiry = match expiry {
        Some(((unit, absolute), arg)) => {
            let n = parse_i64(arg).ok_or(CmdError::NotInteger)?;
            if n <= 0 {
                return Err(CmdError::InvalidExpire("set"));
            }
            Some((n, unit, absolute))
        }
        None => None,
    };
    let now = ctx.now;
    let at = match expiry {
        Some((n, unit, absolute)) => Some(deadline(now, n, unit, absolute, "set")?),
        None => None,
    };
    let value = req.arg(2);
    let out = &mut *ctx.out;
    // A plain SET always stores, so it always counts as a write for WATCH,
    // as in Redis; with NX, XX or GET it may not (a refused or failed SET).
    let touch = if cond == Cond::Always && !get {
        Touch::Always
    } else {
        Touch::IfChanged
    };
    ctx.db.update_touching(req.arg(1), now, touch, |slot| {
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
/// SETEX key seconds value
/// ```
pub fn setex(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    set_expiring(ctx, req, Unit::Seconds, "setex")
}

/// ```text
/// PSETEX key milliseconds value
/// ```
pub fn psetex(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    set_expiring(ctx, req, Unit::Millis, "psetex")
}

/// `SET key value EX|PX n` as SETEX and PSETEX spell it: the time is
/// checked first, and a value of any type is replaced, as SET does.
fn set_expiring(
    ctx: &mut Ctx<'_>,
    req: &Request<'_>,
    unit: Unit,
    cmd: &'static str,
) -> Result<(), CmdError> {
    let n = int(req, 2)?;
    if n <= 0 {
        return Err(CmdError::InvalidExpire(cmd));
    }
    let at = deadline(ctx.now, n, unit, false, cmd)?;
    let value = Value::Str(SmallBytes::new(req.arg(3)));
    // It always stores: a write for WATCH, an equal value included.
    ctx.db
        .update_touching(req.arg(1), ctx.now, Touch::Always, |slot| {
            // A positive relative time is always to come, so `at` is set.
            *slot = at.map(|t| Entry::with_expiry_ms(value, Some(t)));
        });
    ctx.out.ok();
    Ok(())
}

/// ```text
/// SETNX key value
/// ```
/// 1 if the key was set; 0 if it holds anything, limiter state included.
pub fn setnx(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let value = req.arg(2);
    let set = ctx.db.update(req.arg(1), ctx.now, |slot| {
        if slot.is_some() {
            return false;
        }
        *slot = Some(Entry::new(Value::Str(SmallBytes::new(value))));
        true
    });
    ctx.out.int(set as i64);
    Ok(())
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
        lock.update_touching(req.arg(i), ctx.now, Touch::Always, |slot| {
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
    let result = ctx
        .db
        .update(req.arg(1), ctx.now, |slot| add_to(slot, delta))?;
    ctx.out.int(result);
    Ok(())
}

/// `INCRBY`'s change to a key's slot: the new value, or the error
/// `INCRBY` answers (the slot then untouched). Shared with the native
/// scripts (`cmd/script/native`).
pub(crate) fn add_to(slot: &mut Option<Entry>, delta: i64) -> Result<i64, CmdError> {
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
}

/// ```text
/// INCRBYFLOAT key increment
/// ```
/// In x87 extended precision, printed as Redis prints it
/// ([`LongDouble`]), so the bytes are Redis's own. Keeps the key's TTL.
pub fn incrbyfloat(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let not_float = || CmdError::err("value is not a valid float");
    // Read before the lock; a bad increment is reported after the key's
    // own errors, as in Redis.
    let incr = LongDouble::parse(req.arg(2));
    let text = ctx.db.update(req.arg(1), ctx.now, |slot| {
        let current = match slot.as_ref() {
            None => LongDouble::ZERO,
            Some(e) => {
                let s = e.value.as_str().ok_or(CmdError::WrongType)?;
                LongDouble::parse(s).ok_or_else(not_float)?
            }
        };
        let sum = current
            .checked_add(incr.ok_or_else(not_float)?)
            .filter(|v| v.is_finite())
            .ok_or_else(|| CmdError::err("increment would produce NaN or Infinity"))?;
        let text = sum.to_human();
        let value = Value::Str(SmallBytes::new(text.as_bytes()));
        match slot {
            Some(e) => e.value = value,
            None => *slot = Some(Entry::new(value)),
        }
        Ok::<_, CmdError>(text)
    })?;
    ctx.out.bulk(text.as_bytes());
    Ok(())
}
