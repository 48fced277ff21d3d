//! The Python `limits` library's Redis scripts
//! (`limits/resources/redis/lua_scripts/`).

use super::ops::{
    expire, expire_at, fmt_num, incrby, lua_num, parse_i64, through_lua, Call, Cmd, Fb, Native,
};

/// The fixed window: what Flask-Limiter runs on every request by default.
pub const INCR_EXPIRE: Native = Native {
    name: "limits fixed window",
    library: "limits (Python), incr_expire.lua",
    version: "5.8.0",
    sha: "628bd136a573a06b346879695681af12ccef300f",
    text: include_str!("lua/limits_incr_expire.lua"),
    commands: &[Cmd::Incrby, Cmd::Expire],
    run: incr_expire,
};

fn incr_expire(c: &mut Call) -> Fb<()> {
    let key = c.key(0)?;
    let amount = lua_num(c.arg(1)?)?;
    let mut text = [0u8; 32];
    let delta = parse_i64(fmt_num(amount, &mut text)).ok_or(super::ops::Fallback)?;
    // EXPIRE's argument, checked before INCRBY writes.
    let at = expire_at(c.arg(0)?, c)?;
    let mut db = c.lock(&[key])?;
    let current = incrby(&mut db, key, delta, c, Cmd::Incrby)?;
    if current as f64 == amount {
        expire(&mut db, key, at, c)?;
    }
    c.ctx.out.int(through_lua(current));
    Ok(())
}
