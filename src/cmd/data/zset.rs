//! Sorted sets, as limiter scripts use them (the sorted-set log of
//! timestamps, pyrate-limiter's bucket): ZADD, ZREM, ZCARD, ZCOUNT, ZSCORE,
//! ZINCRBY, ZRANGE, ZRANGEBYSCORE, ZREMRANGEBYSCORE, ZREMRANGEBYRANK.
//! Scores are read with C's `strtod` and written with `%.17g`, as Redis
//! 7.0 does.

use bytes::Bytes;

use super::args::{int, is};
use super::collection::{index_range, read, write};
use super::{CmdError, Ctx};
use crate::protocol::{ReplyBuf, Request};
use crate::store::collections::{ScoreBound, ZSet};

fn not_float() -> CmdError {
    CmdError::err("value is not a valid float")
}

/// A score as Redis's `getDoubleFromObject` reads one.
fn score(arg: &[u8]) -> Result<f64, CmdError> {
    let (v, all, range) = crate::util::strtod(arg);
    let bad = arg.is_empty()
        || arg[0].is_ascii_whitespace()
        || !all
        || v.is_nan()
        || (range && (v.is_infinite() || v == 0.0));
    if bad {
        Err(not_float())
    } else {
        Ok(v)
    }
}

/// A range bound as Redis's `zslParseRange` reads one: `(` for exclusive.
fn bound(arg: &[u8]) -> Result<ScoreBound, CmdError> {
    let (exclusive, text) = match arg.strip_prefix(b"(") {
        Some(rest) => (true, rest),
        None => (false, arg),
    };
    let (value, all, _) = crate::util::strtod(text);
    if !all || value.is_nan() {
        return Err(CmdError::err("min or max is not a float"));
    }
    Ok(ScoreBound { value, exclusive })
}

/// ```text
/// ZADD key [NX | XX] [GT | LT] [CH] [INCR] score member [score member ...]
/// ```
pub fn zadd(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    let mut i = 2;
    while i < req.len() {
        let a = req.arg(i);
        let flag = if is(a, "NX") {
            &mut nx
        } else if is(a, "XX") {
            &mut xx
        } else if is(a, "GT") {
            &mut gt
        } else if is(a, "LT") {
            &mut lt
        } else if is(a, "CH") {
            &mut ch
        } else if is(a, "INCR") {
            &mut incr
        } else {
            break;
        };
        *flag = true;
        i += 1;
    }
    let pairs = req.len() - i;
    if pairs == 0 || pairs % 2 == 1 {
        return Err(CmdError::Syntax);
    }
    if nx && xx {
        return Err(CmdError::err(
            "XX and NX options at the same time are not compatible",
        ));
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return Err(CmdError::err(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if incr && pairs > 2 {
        return Err(CmdError::err(
            "INCR option supports a single increment-element pair",
        ));
    }
    let mut items = Vec::with_capacity(pairs / 2);
    for j in (i..req.len()).step_by(2) {
        items.push((score(req.arg(j))?, req.arg(j + 1)));
    }
    let key = req.arg(1);
    // A key that does not exist is not created under XX.
    let create = !xx;
    let result = write(ctx, key, create, |z: Option<&mut ZSet>| {
        let Some(z) = z else {
            return Ok((0, 0, None));
        };
        let (mut added, mut updated, mut last) = (0, 0, None);
        for (s, member) in &items {
            match z.score(member) {
                Some(cur) => {
                    if nx {
                        continue;
                    }
                    let new = if incr { cur + s } else { *s };
                    if new.is_nan() {
                        return Err(CmdError::err("resulting score is not a number (NaN)"));
                    }
                    if (gt && new <= cur) || (lt && new >= cur) {
                        continue;
                    }
                    if new != cur {
                        z.insert(member, new);
                        updated += 1;
                    }
                    last = Some(new);
                }
                None => {
                    if xx {
                        continue;
                    }
                    z.insert(member, *s);
                    added += 1;
                    last = Some(*s);
                }
            }
        }
        Ok((added, updated, last))
    })?;
    let (added, updated, last) = result;
    if incr {
        match last {
            Some(s) => ctx.out.score(s),
            None => ctx.out.null(),
        }
    } else {
        ctx.out.int(if ch { added + updated } else { added });
    }
    Ok(())
}

/// ```text
/// ZINCRBY key increment member
/// ```
pub fn zincrby(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let by = score(req.arg(2))?;
    let member = req.arg(3);
    let new = write(ctx, req.arg(1), true, |z: Option<&mut ZSet>| {
        let z = z.expect("created");
        let new = z.score(member).unwrap_or(0.0) + by;
        if new.is_nan() {
            return Err(CmdError::err("resulting score is not a number (NaN)"));
        }
        z.insert(member, new);
        Ok(new)
    })?;
    ctx.out.score(new);
    Ok(())
}

/// ```text
/// ZREM key member [member ...]
/// ```
pub fn zrem(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let removed = write(ctx, req.arg(1), false, |z: Option<&mut ZSet>| {
        Ok(z.map_or(0, |z| req.args().skip(2).filter(|m| z.remove(m)).count()))
    })?;
    ctx.out.int(removed as i64);
    Ok(())
}

/// ```text
/// ZCARD key
/// ```
pub fn zcard(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |z: Option<&ZSet>, out| {
        out.int(z.map_or(0, |z| z.len() as i64))
    })
}

/// ```text
/// ZSCORE key member
/// ```
pub fn zscore(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |z: Option<&ZSet>, out| {
        match z.and_then(|z| z.score(req.arg(2))) {
            Some(s) => out.score(s),
            None => out.null(),
        }
    })
}

/// ```text
/// ZCOUNT key min max
/// ```
pub fn zcount(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let (min, max) = (bound(req.arg(2))?, bound(req.arg(3))?);
    read(ctx, req.arg(1), |z: Option<&ZSet>, out| {
        out.int(z.map_or(0, |z| z.range_by_score(min, max).count() as i64))
    })
}

/// How a range is chosen.
enum By {
    Rank(i64, i64),
    Score(ScoreBound, ScoreBound),
}

struct Range {
    by: By,
    rev: bool,
    /// `LIMIT offset count` (count < 0: no limit).
    limit: Option<(i64, i64)>,
    withscores: bool,
}

/// The members of `range`, in reply order, with their scores.
fn members<'z>(z: &'z ZSet, range: &Range) -> Vec<(&'z Bytes, f64)> {
    let mut picked: Vec<(&Bytes, f64)> = match range.by {
        By::Rank(start, stop) => match index_range(start, stop, z.len()) {
            None => Vec::new(),
            Some((a, b)) => {
                if range.rev {
                    z.iter().rev().skip(a).take(b - a + 1).collect()
                } else {
                    z.iter().skip(a).take(b - a + 1).collect()
                }
            }
        },
        By::Score(min, max) => {
            let mut v: Vec<_> = z.range_by_score(min, max).collect();
            if range.rev {
                v.reverse();
            }
            v
        }
    };
    if let Some((offset, count)) = range.limit {
        if offset < 0 {
            return Vec::new();
        }
        let offset = (offset as usize).min(picked.len());
        picked.drain(..offset);
        if count >= 0 {
            picked.truncate(count as usize);
        }
    }
    picked
}

fn reply_members(out: &mut ReplyBuf, picked: &[(&Bytes, f64)], withscores: bool) {
    match (withscores, out.proto) {
        (false, _) => {
            out.array(picked.len());
            for (m, _) in picked {
                out.bulk(m);
            }
        }
        (true, crate::protocol::Protocol::Resp2) => {
            out.array(picked.len() * 2);
            for (m, s) in picked {
                out.bulk(m);
                out.score(*s);
            }
        }
        (true, crate::protocol::Protocol::Resp3) => {
            out.array(picked.len());
            for (m, s) in picked {
                out.array(2);
                out.bulk(m);
                out.score(*s);
            }
        }
    }
}

/// Reads `[WITHSCORES] [LIMIT offset count]` (and, for `ZRANGE`,
/// `BYSCORE`, `BYLEX`, `REV`) from argument `from` on.
fn options(req: &Request<'_>, from: usize, zrange: bool) -> Result<Opts, CmdError> {
    let (mut byscore, mut bylex, mut rev, mut withscores, mut limit) =
        (false, false, false, false, None);
    let mut i = from;
    while i < req.len() {
        let a = req.arg(i);
        if is(a, "WITHSCORES") {
            withscores = true;
        } else if is(a, "LIMIT") && i + 2 < req.len() {
            limit = Some((int(req, i + 1)?, int(req, i + 2)?));
            i += 2;
        } else if zrange && is(a, "BYSCORE") {
            byscore = true;
        } else if zrange && is(a, "BYLEX") {
            bylex = true;
        } else if zrange && is(a, "REV") {
            rev = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if zrange && limit.is_some() && !byscore && !bylex {
        return Err(CmdError::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if bylex && withscores {
        return Err(CmdError::err(
            "syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    if bylex {
        // Lexicographic ranges serve no limiter; Turnstile leaves them out.
        return Err(CmdError::err("BYLEX is not supported by Turnstile"));
    }
    Ok(Opts {
        byscore,
        rev,
        withscores,
        limit,
    })
}

/// What [`options`] read.
struct Opts {
    byscore: bool,
    rev: bool,
    withscores: bool,
    limit: Option<(i64, i64)>,
}

/// ```text
/// ZRANGE key start stop [BYSCORE | BYLEX] [REV] [LIMIT offset count] [WITHSCORES]
/// ```
pub fn zrange(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let Opts {
        byscore,
        rev,
        withscores,
        limit,
    } = options(req, 4, true)?;
    let by = if byscore {
        // With REV the first bound is the maximum.
        let (a, b) = (bound(req.arg(2))?, bound(req.arg(3))?);
        if rev {
            By::Score(b, a)
        } else {
            By::Score(a, b)
        }
    } else {
        By::Rank(int(req, 2)?, int(req, 3)?)
    };
    let range = Range {
        by,
        rev,
        limit,
        withscores,
    };
    read(ctx, req.arg(1), |z: Option<&ZSet>, out| {
        let picked = z.map(|z| members(z, &range)).unwrap_or_default();
        reply_members(out, &picked, range.withscores);
    })
}

/// ```text
/// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]
/// ```
pub fn zrangebyscore(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let (min, max) = (bound(req.arg(2))?, bound(req.arg(3))?);
    let Opts {
        withscores, limit, ..
    } = options(req, 4, false)?;
    let range = Range {
        by: By::Score(min, max),
        rev: false,
        limit,
        withscores,
    };
    read(ctx, req.arg(1), |z: Option<&ZSet>, out| {
        let picked = z.map(|z| members(z, &range)).unwrap_or_default();
        reply_members(out, &picked, range.withscores);
    })
}

/// ```text
/// ZREMRANGEBYSCORE key min max
/// ```
pub fn zremrangebyscore(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let (min, max) = (bound(req.arg(2))?, bound(req.arg(3))?);
    remove_range(ctx, req, By::Score(min, max))
}

/// ```text
/// ZREMRANGEBYRANK key start stop
/// ```
pub fn zremrangebyrank(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let by = By::Rank(int(req, 2)?, int(req, 3)?);
    remove_range(ctx, req, by)
}

fn remove_range(ctx: &mut Ctx<'_>, req: &Request<'_>, by: By) -> Result<(), CmdError> {
    let range = Range {
        by,
        rev: false,
        limit: None,
        withscores: false,
    };
    let removed = write(ctx, req.arg(1), false, |z: Option<&mut ZSet>| {
        let Some(z) = z else { return Ok(0) };
        let gone: Vec<Bytes> = members(z, &range)
            .into_iter()
            .map(|(m, _)| m.clone())
            .collect();
        Ok(z.remove_all(gone))
    })?;
    ctx.out.int(removed as i64);
    Ok(())
}
