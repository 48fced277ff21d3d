//! The append-only file's command and INFO fields: BGREWRITEAOF, and the
//! `aof_*` lines of `INFO persistence` (the file is `persist::aof`'s, its
//! writer thread `server/aof.rs`'s).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::{CmdError, Ctx};
use crate::protocol::Request;
use crate::state::State;
use crate::stats::Stats;

/// ```text
/// BGREWRITEAOF
/// ```
/// Asks the writer thread for a rewrite: a fresh base and the effects
/// since, switched in by rename. Unlike Redis, which then writes a file
/// it does not keep up, it is refused while the file is off.
pub fn bgrewriteaof(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let aof = &ctx.state.aof;
    if !aof.is_on() {
        return Err(CmdError::err(
            "the append-only file is off: CONFIG SET appendonly yes starts one",
        ));
    }
    if aof.rewriting() {
        return Err(CmdError::err(
            "Background append only file rewriting already in progress",
        ));
    }
    aof.request_rewrite();
    ctx.out
        .simple("Background append only file rewriting started");
    Ok(())
}

/// `INFO persistence`'s append-only file lines, as Redis 7.0 names them
/// (the sizes only while the file is on, as Redis shows them).
/// `aof_last_write_status:err` while write commands are refused with
/// `-MISCONF`; `aof_buffer_length` is what waits for the file.
pub fn info(state: &State, t: &mut String) -> std::fmt::Result {
    let aof = &state.aof;
    let ok = |b: &std::sync::atomic::AtomicBool| match b.load(Ordering::Relaxed) {
        true => "ok",
        false => "err",
    };
    write!(
        t,
        "aof_enabled:{}\r\naof_rewrite_in_progress:{}\r\naof_rewrite_scheduled:0\r\naof_last_rewrite_time_sec:{}\r\naof_current_rewrite_time_sec:-1\r\naof_last_bgrewrite_status:{}\r\naof_rewrites:{}\r\naof_last_write_status:{}\r\n",
        u8::from(aof.is_on()),
        u8::from(aof.rewriting()),
        if Stats::read(&aof.rewrites) == 0 { -1 } else { Stats::read(&aof.last_rewrite_secs) as i64 },
        ok(&aof.last_rewrite_ok),
        Stats::read(&aof.rewrites),
        ok(&aof.last_write_ok),
    )?;
    if aof.is_on() {
        write!(
            t,
            "aof_current_size:{}\r\naof_base_size:{}\r\naof_buffer_length:{}\r\naof_path:{}\r\n",
            Stats::read(&aof.size),
            Stats::read(&aof.base_size),
            Stats::read(&aof.pending),
            aof.path().display(),
        )?;
    }
    Ok(())
}
