//! rate-limit-redis (the Redis store of express-rate-limit, Node): its
//! increment and get scripts.

use super::ops::{
    fmt_num, incrby, lua_int, lua_num, pttl, set, set_deadline, through_lua, Call, Cmd, Fb, Native,
};
use crate::store::keys::Keys;

pub const INCREMENT: Native = Native {
    name: "rate-limit-redis increment",
    library: "rate-limit-redis (Node), scripts.increment",
    version: "6.0.1",
    sha: "895b92e1712734e1b464999be23953485475357b",
    text: include_str!("lua/rlr_increment.lua"),
    commands: &[Cmd::Pttl, Cmd::Set, Cmd::Incr],
    run: increment,
};

pub const GET: Native = Native {
    name: "rate-limit-redis get",
    library: "rate-limit-redis (Node), scripts.get",
    version: "6.0.1",
    sha: "6aeb97ed6086dcdeafdc6fda3999a0d0e38ec96a",
    text: include_str!("lua/rlr_get.lua"),
    commands: &[Cmd::Get, Cmd::Pttl],
    run: get_hits,
};

fn increment(c: &mut Call) -> Fb<()> {
    let key = c.key(0)?;
    let window_ms = lua_num(c.arg(0)?)?;
    let mut db = c.lock(&[key])?;
    let time_to_expire = pttl(&mut db, key, c);
    if time_to_expire <= 0 {
        let mut text = [0u8; 32];
        let at = set_deadline(
            fmt_num(window_ms, &mut text),
            crate::cmd::data::keys::Unit::Millis,
            c,
        )?;
        set(&mut db, key, b"1", at, false, c)?;
        let out = &mut *c.ctx.out;
        out.array(2);
        out.int(1);
        out.int(lua_int(window_ms));
        return Ok(());
    }
    let hits = incrby(&mut db, key, 1, c, Cmd::Incr)?;
    let out = &mut *c.ctx.out;
    out.array(2);
    out.int(through_lua(hits));
    out.int(through_lua(time_to_expire));
    Ok(())
}

fn get_hits(c: &mut Call) -> Fb<()> {
    let key = c.key(0)?;
    let mut db = c.lock(&[key])?;
    // GET, its value straight into the reply (WRONGTYPE: run in Lua).
    c.ran(Cmd::Get);
    let now = c.now();
    let out = &mut *c.ctx.out;
    out.array(2);
    match db.get(key, now, |e| e.value.as_str().map(|s| out.bulk(s))) {
        None => out.null(),
        Some(None) => return Err(super::ops::Fallback),
        Some(Some(())) => {}
    }
    let ms = pttl(&mut db, key, c);
    c.ctx.out.int(through_lua(ms));
    Ok(())
}
