//! Native scripts: the limiter libraries' Lua scripts, recognised by the
//! SHA1 of their exact text, run in Rust instead of the Lua VM.
//!
//! A library sends the same few scripts on every request, and the Lua VM
//! costs most of such a call (reserving a state, the interpreter, each
//! `redis.call` built and parsed as RESP). Each entry of [`CATALOGUE`]
//! does what its script does with the store calls the commands it calls
//! make (`GET` as `cmd/string.rs`'s `get`, `EXPIRE` as `keys.rs`'s, ...),
//! in the script's order, holding every key's shard for the whole run as
//! the Lua path does, so replies, keys, TTLs, `WATCH`, replication effects
//! and `INFO commandstats` come out the same.
//!
//! Exactness over coverage: an implementation answers [`Fallback`] for any
//! case it does not reproduce byte for byte (an argument Lua's `tonumber`
//! would read otherwise than a plain decimal, a key of another type, a
//! value `INCR` refuses, ...), always before its first write, and the call
//! then runs in Lua as before. Numbers are Lua's: `f64` arithmetic in the
//! script's order, numbers passed to `redis.call` written as Redis writes
//! them (`%.17g`), numbers joined into strings as Lua 5.1 writes them
//! (`%.14g`), numbers returned truncated to integers.
//!
//! The catalogue is only a faster way to run a script the cache holds:
//! `EVALSHA` of a catalogued SHA1 still needs `SCRIPT LOAD` (or an `EVAL`)
//! first, and `NOSCRIPT` otherwise, as in Redis.

mod django_redis;
mod limits;
mod limits_windows;
mod ops;
mod rate_limit_redis;
mod rlflex;

pub use ops::{Fallback, Native};

use crate::cmd::registry::spec::Ctx;
use crate::protocol::Request;
use ops::{Call, Cmd};

/// The catalogue: only scripts a real library ships, byte for byte, each
/// entry naming the library and version it was taken from (a script of
/// this project's own, such as the benchmarks' limiters, runs in Lua like
/// any other). `tests/it/native_scripts.rs` checks each `sha` against its
/// text.
pub static CATALOGUE: &[Native] = &[
    limits::INCR_EXPIRE,
    limits_windows::MOVING_WINDOW,
    limits_windows::ACQUIRE_MOVING_WINDOW,
    limits_windows::SLIDING_WINDOW,
    limits_windows::ACQUIRE_SLIDING_WINDOW,
    rlflex::CONSUME,
    rate_limit_redis::INCREMENT,
    rate_limit_redis::GET,
    django_redis::INCR,
    django_redis::INCR_NO_CHECK,
];

/// The catalogued script of `sha` (the engine's lower-case hex), if any.
pub fn find(sha: &str) -> Option<&'static Native> {
    CATALOGUE.iter().find(|n| n.sha == sha)
}

/// Whether the Lua path's `redis.call` would refuse nothing a catalogued
/// script calls for a reason the native code does not check: no replica
/// (writes answer `READONLY`), no cluster (slot checks), not over
/// `--maxmemory` (`-OOM`), the append-only file writable (`-MISCONF`),
/// and every command under its own name.
fn allowed(ctx: &Ctx<'_>, native: &Native, over_maxmemory: bool) -> bool {
    let state = ctx.state;
    if state.replication.is_replica()
        || state.in_cluster()
        || over_maxmemory
        || state.aof.write_error().is_some()
    {
        return false;
    }
    if state.renames.by_name.is_empty() {
        return true;
    }
    native.commands.iter().all(|c| {
        let renamed = ctx.registry.renamed(&state.renames, c.name().as_bytes());
        renamed.is_some_and(|s| c.spec(ctx.registry).is_some_and(|c| std::ptr::eq(s, c)))
    })
}

/// Runs `native` for `req` (`n` keys) if it can: true if it answered
/// (its reply written to `ctx.out`), false if the call must run in Lua
/// (nothing written, nothing changed). `read_only` (`EVAL_RO`,
/// `EVALSHA_RO`): a run that would call a write command runs in Lua,
/// which refuses it in its own words.
pub fn run(
    ctx: &mut Ctx<'_>,
    native: &Native,
    req: &Request<'_>,
    n: usize,
    over_maxmemory: bool,
    read_only: bool,
) -> bool {
    if !allowed(ctx, native, over_maxmemory) {
        return false;
    }
    let mark = ctx.out.len();
    let mut call = Call {
        ctx,
        req,
        n,
        read_only,
        counted: [0; Cmd::ALL.len()],
    };
    match (native.run)(&mut call) {
        Ok(()) => {
            let Call { ctx, counted, .. } = call;
            for (c, times) in Cmd::ALL.iter().zip(counted) {
                for _ in 0..times {
                    ctx.session.stats.command(c.position(ctx.registry), true);
                }
            }
            true
        }
        Err(Fallback) => {
            call.ctx.out.truncate(mark);
            false
        }
    }
}
