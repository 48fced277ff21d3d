//! rate-limiter-flexible's `RateLimiterRedis` (Node): its consume script.

use super::ops::{
    expire, expire_at, incrby, lua_int, lua_num, parse_i64, pttl, set, set_deadline, through_lua,
    Call, Cmd, Fallback, Fb, Native,
};

pub const CONSUME: Native = Native {
    name: "rate-limiter-flexible consume",
    library: "rate-limiter-flexible (Node), RateLimiterRedis incrTtlLuaScript",
    version: "11.4.0",
    sha: "a1de965f42e177aa339706bd580f049065eca79a",
    text: include_str!("lua/rlflex_consume.lua"),
    commands: &[Cmd::Set, Cmd::Incrby, Cmd::Pttl, Cmd::Expire],
    run: consume,
};

fn consume(c: &mut Call) -> Fb<()> {
    let key = c.key(0)?;
    let points = parse_i64(c.arg(0)?).ok_or(Fallback)?;
    let secs = c.arg(1)?;
    let set_at = set_deadline(secs, crate::cmd::data::keys::Unit::Seconds, c)?;
    let expire_to = expire_at(secs, c)?;
    let ttl_if_none = 1000.0 * lua_num(secs)?;
    let mut db = c.lock(&[key])?;
    set(&mut db, key, b"0", set_at, true, c)?;
    // Fails only on a key that was there already (SET NX left it alone).
    let consumed = incrby(&mut db, key, points, c, Cmd::Incrby)?;
    let mut ttl = pttl(&mut db, key, c);
    if ttl == -1 {
        expire(&mut db, key, expire_to, c)?;
        ttl = lua_int(ttl_if_none);
    } else {
        ttl = through_lua(ttl);
    }
    let out = &mut *c.ctx.out;
    out.array(2);
    out.int(through_lua(consumed));
    out.int(ttl);
    Ok(())
}
