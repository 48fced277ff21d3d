//! django-redis's `cache.incr`: an `EVAL` of `EXISTS` and `INCRBY`
//! (the text as its client code indents it).

use super::ops::{exists, incrby, parse_i64, through_lua, Call, Cmd, Fallback, Fb, Native};

pub const INCR: Native = Native {
    name: "django-redis incr",
    library: "django-redis (Python), DefaultClient.incr",
    version: "7.0.0",
    sha: "f4a7da3e5d8ea3b46642af08427151cae0190400",
    text: include_str!("lua/django_redis_incr.lua"),
    commands: &[Cmd::Exists, Cmd::Incrby],
    run: incr,
};

/// `incr(..., ignore_key_check=True)`.
pub const INCR_NO_CHECK: Native = Native {
    name: "django-redis incr (ignore_key_check)",
    library: "django-redis (Python), DefaultClient.incr",
    version: "7.0.0",
    sha: "4d15273b16b10c15e1d9202cbe93c959ab7d250b",
    text: include_str!("lua/django_redis_incr_nocheck.lua"),
    commands: &[Cmd::Incrby],
    run: incr_no_check,
};

fn incr(c: &mut Call) -> Fb<()> {
    let key = c.key(0)?;
    let mut db = c.lock(&[key])?;
    if !exists(&mut db, key, c) {
        c.ctx.out.null();
        return Ok(());
    }
    let delta = parse_i64(c.arg(0)?).ok_or(Fallback)?;
    let n = incrby(&mut db, key, delta, c, Cmd::Incrby)?;
    c.ctx.out.int(through_lua(n));
    Ok(())
}

fn incr_no_check(c: &mut Call) -> Fb<()> {
    let key = c.key(0)?;
    let delta = parse_i64(c.arg(0)?).ok_or(Fallback)?;
    let mut db = c.lock(&[key])?;
    let n = incrby(&mut db, key, delta, c, Cmd::Incrby)?;
    c.ctx.out.int(through_lua(n));
    Ok(())
}
