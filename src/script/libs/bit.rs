//! `bit`: LuaBitOp's functions over 32-bit integers.

use super::args::*;

/// LuaBitOp's argument conversion: the number rounded to an integer,
/// then wrapped to 32 bits.
fn tobit(x: f64) -> i32 {
    if !x.is_finite() {
        return 0;
    }
    let r = x.round_ties_even();
    (r.rem_euclid(4_294_967_296.0) as u64 as u32) as i32
}

pub(super) fn bit_fns(lua: &Lua) -> mlua::Result<Vec<(&'static str, mlua::Function)>> {
    fn unary(lua: &Lua, name: &'static str, f: fn(i32) -> i32) -> mlua::Result<mlua::Function> {
        lua.create_function(
            move |lua, args: Variadic<Value>| match arg_num(&args, 1, name) {
                Ok(x) => ok(vec![Value::Integer(f(tobit(x)) as i64)]),
                Err(e) => fail(lua, e),
            },
        )
    }
    fn fold(lua: &Lua, name: &'static str, f: fn(i32, i32) -> i32) -> mlua::Result<mlua::Function> {
        lua.create_function(move |lua, args: Variadic<Value>| {
            let mut acc = match arg_num(&args, 1, name) {
                Ok(x) => tobit(x),
                Err(e) => return fail(lua, e),
            };
            for i in 2..=args.len() {
                match arg_num(&args, i, name) {
                    Ok(x) => acc = f(acc, tobit(x)),
                    Err(e) => return fail(lua, e),
                }
            }
            ok(vec![Value::Integer(acc as i64)])
        })
    }
    fn shift(
        lua: &Lua,
        name: &'static str,
        f: fn(i32, u32) -> i32,
    ) -> mlua::Result<mlua::Function> {
        lua.create_function(move |lua, args: Variadic<Value>| {
            let x = match arg_num(&args, 1, name) {
                Ok(x) => tobit(x),
                Err(e) => return fail(lua, e),
            };
            let n = match arg_num(&args, 2, name) {
                Ok(n) => (tobit(n) as u32) & 31,
                Err(e) => return fail(lua, e),
            };
            ok(vec![Value::Integer(f(x, n) as i64)])
        })
    }
    Ok(vec![
        ("tobit", unary(lua, "tobit", |x| x)?),
        ("bnot", unary(lua, "bnot", |x| !x)?),
        ("bswap", unary(lua, "bswap", |x| x.swap_bytes())?),
        ("band", fold(lua, "band", |a, b| a & b)?),
        ("bor", fold(lua, "bor", |a, b| a | b)?),
        ("bxor", fold(lua, "bxor", |a, b| a ^ b)?),
        (
            "lshift",
            shift(lua, "lshift", |x, n| ((x as u32) << n) as i32)?,
        ),
        (
            "rshift",
            shift(lua, "rshift", |x, n| ((x as u32) >> n) as i32)?,
        ),
        ("arshift", shift(lua, "arshift", |x, n| x >> n)?),
        (
            "rol",
            shift(lua, "rol", |x, n| (x as u32).rotate_left(n) as i32)?,
        ),
        (
            "ror",
            shift(lua, "ror", |x, n| (x as u32).rotate_right(n) as i32)?,
        ),
        (
            "tohex",
            lua.create_function(|lua, args: Variadic<Value>| {
                let x = match arg_num(&args, 1, "tohex") {
                    Ok(x) => tobit(x),
                    Err(e) => return fail(lua, e),
                };
                let n = match args.get(1) {
                    None | Some(Value::Nil) => 8,
                    _ => match arg_num(&args, 2, "tohex") {
                        Ok(n) => tobit(n),
                        Err(e) => return fail(lua, e),
                    },
                };
                let upper = n < 0;
                let n = n.unsigned_abs().min(8) as usize;
                let hex = if upper {
                    format!("{:08X}", x as u32)
                } else {
                    format!("{:08x}", x as u32)
                };
                ok(vec![Value::String(lua.create_string(&hex[8 - n..])?)])
            })?,
        ),
    ])
}
