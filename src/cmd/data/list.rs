//! Lists, as limiter scripts use them (the `limits` library's moving
//! window): LPUSH, RPUSH, LPOP, RPOP, LLEN, LINDEX, LRANGE, LTRIM, LREM.

use bytes::Bytes;

use super::args::int;
use super::collection::{index_range, read, write};
use super::{CmdError, Ctx};
use crate::protocol::Request;
use crate::store::collections::List;

/// ```text
/// LPUSH key element [element ...]
/// ```
pub fn lpush(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    push(ctx, req, true)
}

/// ```text
/// RPUSH key element [element ...]
/// ```
pub fn rpush(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    push(ctx, req, false)
}

fn push(ctx: &mut Ctx<'_>, req: &Request<'_>, front: bool) -> Result<(), CmdError> {
    let len = write(ctx, req.arg(1), true, |l: Option<&mut List>| {
        let l = l.expect("created");
        for i in 2..req.len() {
            let item = req.arg_bytes(i);
            if front {
                l.push_front(item);
            } else {
                l.push_back(item);
            }
        }
        Ok(l.len())
    })?;
    ctx.out.int(len as i64);
    Ok(())
}

/// ```text
/// LPOP key [count]
/// ```
pub fn lpop(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    pop(ctx, req, true)
}

/// ```text
/// RPOP key [count]
/// ```
pub fn rpop(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    pop(ctx, req, false)
}

fn pop(ctx: &mut Ctx<'_>, req: &Request<'_>, front: bool) -> Result<(), CmdError> {
    if req.len() > 3 {
        return Err(CmdError::WrongArity(
            if front { "lpop" } else { "rpop" }.into(),
        ));
    }
    let count = match req.len() {
        3 => Some(
            crate::util::parse_i64(req.arg(2))
                .filter(|n| *n >= 0)
                .ok_or_else(|| CmdError::err("value is out of range, must be positive"))?
                as usize,
        ),
        _ => None,
    };
    let popped: Option<Vec<Bytes>> = write(ctx, req.arg(1), false, |l: Option<&mut List>| {
        Ok(l.map(|l| {
            let n = count.unwrap_or(1).min(l.len());
            (0..n)
                .filter_map(|_| if front { l.pop_front() } else { l.pop_back() })
                .collect()
        }))
    })?;
    match (popped, count) {
        (None, None) => ctx.out.null(),
        (None, Some(_)) => ctx.out.null_array(),
        (Some(items), None) => ctx.out.bulk(&items[0]),
        (Some(items), Some(_)) => {
            ctx.out.array(items.len());
            for i in &items {
                ctx.out.bulk(i);
            }
        }
    }
    Ok(())
}

/// ```text
/// LLEN key
/// ```
pub fn llen(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    read(ctx, req.arg(1), |l: Option<&List>, out| {
        out.int(l.map_or(0, |l| l.len() as i64))
    })
}

/// ```text
/// LINDEX key index
/// ```
pub fn lindex(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let i = int(req, 2)?;
    read(ctx, req.arg(1), |l: Option<&List>, out| {
        match l.and_then(|l| item(l, i)) {
            Some(v) => out.bulk(v),
            None => out.null(),
        }
    })
}

/// The item `LINDEX` answers for index `i` (negative from the tail).
pub(crate) fn item(l: &List, i: i64) -> Option<&Bytes> {
    let i = if i < 0 { i + l.len() as i64 } else { i };
    usize::try_from(i).ok().and_then(|i| l.get(i))
}

/// ```text
/// LRANGE key start stop
/// ```
pub fn lrange(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let (start, stop) = (int(req, 2)?, int(req, 3)?);
    read(ctx, req.arg(1), |l: Option<&List>, out| {
        let Some((l, (a, b))) = l.and_then(|l| Some((l, index_range(start, stop, l.len())?)))
        else {
            out.array(0);
            return;
        };
        out.array(b - a + 1);
        for v in l.range(a..=b) {
            out.bulk(v);
        }
    })
}

/// ```text
/// LTRIM key start stop
/// ```
pub fn ltrim(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let (start, stop) = (int(req, 2)?, int(req, 3)?);
    write(ctx, req.arg(1), false, |l: Option<&mut List>| {
        if let Some(l) = l {
            trim(l, start, stop);
        }
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

/// What `LTRIM` does to a list (left empty: the caller deletes the key).
pub(crate) fn trim(l: &mut List, start: i64, stop: i64) {
    match index_range(start, stop, l.len()) {
        Some((a, b)) => {
            l.truncate(b + 1);
            l.drain(..a);
        }
        None => l.clear(),
    }
}

/// ```text
/// LREM key count element
/// ```
/// `count` > 0 removes that many from the head, < 0 from the tail, 0 all.
pub fn lrem(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let count = int(req, 2)?;
    let target = req.arg(3);
    let removed = write(ctx, req.arg(1), false, |l: Option<&mut List>| {
        let Some(l) = l else { return Ok(0) };
        let limit = if count == 0 {
            usize::MAX
        } else {
            count.unsigned_abs() as usize
        };
        let mut removed = 0;
        if count >= 0 {
            let mut i = 0;
            while i < l.len() && removed < limit {
                if l[i] == target {
                    l.remove(i);
                    removed += 1;
                } else {
                    i += 1;
                }
            }
        } else {
            let mut i = l.len();
            while i > 0 && removed < limit {
                i -= 1;
                if l[i] == target {
                    l.remove(i);
                    removed += 1;
                }
            }
        }
        Ok(removed)
    })?;
    ctx.out.int(removed as i64);
    Ok(())
}
