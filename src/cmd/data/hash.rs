//! Hashes, as limiter scripts use them (a window's fields in one key):
//! HGET, HSET, HSETNX, HMGET, HMSET, HDEL, HINCRBY, HINCRBYFLOAT, HEXISTS,
//! HLEN, HGETALL.

use super::args::int;
use super::collection::{read, write};
use super::{CmdError, Ctx};
use crate::protocol::Request;
use crate::store::collections::Hash;
use crate::util::long_double::LongDouble;

/// ```text
/// HGET key field
/// ```
pub fn hget(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |h: Option<&Hash>, out| {
        match h.and_then(|h| h.get(req.arg(2))) {
            Some(v) => out.bulk(v),
            None => out.null(),
        }
    })
}

/// ```text
/// HMGET key field [field ...]
/// ```
pub fn hmget(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |h: Option<&Hash>, out| {
        out.array(req.len() - 2);
        for f in req.args().skip(2) {
            match h.and_then(|h| h.get(f)) {
                Some(v) => out.bulk(v),
                None => out.null(),
            }
        }
    })
}

fn set_pairs(ctx: &mut Ctx<'_>, req: &Request<'_>, name: &str) -> Result<usize, CmdError> {
    if req.len() % 2 == 1 {
        return Err(CmdError::WrongArity(name.into()));
    }
    write(ctx, req.arg(1), true, |h: Option<&mut Hash>| {
        let h = h.expect("created");
        Ok((2..req.len())
            .step_by(2)
            .filter(|&i| h.set(req.arg(i), req.arg(i + 1)))
            .count())
    })
}

/// ```text
/// HSET key field value [field value ...]
/// ```
pub fn hset(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let added = set_pairs(ctx, req, "hset")?;
    ctx.out.int(added as i64);
    Ok(())
}

/// ```text
/// HMSET key field value [field value ...]
/// ```
pub fn hmset(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    set_pairs(ctx, req, "hmset")?;
    ctx.out.ok();
    Ok(())
}

/// ```text
/// HSETNX key field value
/// ```
pub fn hsetnx(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let set = write(ctx, req.arg(1), true, |h: Option<&mut Hash>| {
        let h = h.expect("created");
        Ok(h.get(req.arg(2)).is_none() && h.set(req.arg(2), req.arg(3)))
    })?;
    ctx.out.int(set as i64);
    Ok(())
}

/// ```text
/// HDEL key field [field ...]
/// ```
pub fn hdel(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let removed = write(ctx, req.arg(1), false, |h: Option<&mut Hash>| {
        Ok(h.map_or(0, |h| req.args().skip(2).filter(|f| h.remove(f)).count()))
    })?;
    ctx.out.int(removed as i64);
    Ok(())
}

/// ```text
/// HINCRBY key field increment
/// ```
pub fn hincrby(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let by = int(req, 3)?;
    let field = req.arg(2);
    let n = write(ctx, req.arg(1), true, |h: Option<&mut Hash>| {
        let h = h.expect("created");
        let cur = match h.get(field) {
            None => 0,
            Some(v) => crate::util::parse_i64(v)
                .ok_or_else(|| CmdError::err("hash value is not an integer"))?,
        };
        let n = cur.checked_add(by).ok_or(CmdError::Overflow)?;
        h.set(field, itoa::Buffer::new().format(n).as_bytes());
        Ok(n)
    })?;
    ctx.out.int(n);
    Ok(())
}

/// ```text
/// HINCRBYFLOAT key field increment
/// ```
/// In `long double`, as `INCRBYFLOAT` (`util/long_double.rs`).
pub fn hincrbyfloat(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let by =
        LongDouble::parse(req.arg(3)).ok_or_else(|| CmdError::err("value is not a valid float"))?;
    // Redis refuses an infinite increment with its own message, before
    // looking at the key.
    if !by.is_finite() {
        return Err(CmdError::err("value is NaN or Infinity"));
    }
    let field = req.arg(2);
    let text = write(ctx, req.arg(1), true, |h: Option<&mut Hash>| {
        let h = h.expect("created");
        let cur = match h.get(field) {
            None => LongDouble::ZERO,
            Some(v) => {
                LongDouble::parse(v).ok_or_else(|| CmdError::err("hash value is not a float"))?
            }
        };
        let sum = cur
            .checked_add(by)
            .filter(|v| v.is_finite())
            .ok_or_else(|| CmdError::err("increment would produce NaN or Infinity"))?;
        let text = sum.to_human();
        h.set(field, text.as_bytes());
        Ok(text)
    })?;
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

/// ```text
/// HEXISTS key field
/// ```
pub fn hexists(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |h: Option<&Hash>, out| {
        out.int(h.is_some_and(|h| h.get(req.arg(2)).is_some()) as i64)
    })
}

/// ```text
/// HLEN key
/// ```
pub fn hlen(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |h: Option<&Hash>, out| {
        out.int(h.map_or(0, |h| h.len() as i64))
    })
}

/// ```text
/// HGETALL key
/// ```
pub fn hgetall(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |h: Option<&Hash>, out| {
        let Some(h) = h else {
            out.map(0);
            return;
        };
        out.map(h.len());
        for (f, v) in h.iter() {
            out.bulk(f);
            out.bulk(v);
        }
    })
}

/// ```text
/// HKEYS key
/// ```
pub fn hkeys(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |h: Option<&Hash>, out| {
        out.array(h.map_or(0, Hash::len));
        for (f, _) in h.into_iter().flat_map(Hash::iter) {
            out.bulk(f);
        }
    })
}

/// ```text
/// HVALS key
/// ```
pub fn hvals(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |h: Option<&Hash>, out| {
        out.array(h.map_or(0, Hash::len));
        for (_, v) in h.into_iter().flat_map(Hash::iter) {
            out.bulk(v);
        }
    })
}

/// ```text
/// HSTRLEN key field
/// ```
pub fn hstrlen(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |h: Option<&Hash>, out| {
        let len = h.and_then(|h| h.get(req.arg(2))).map_or(0, |v| v.len());
        out.int(len as i64);
    })
}
