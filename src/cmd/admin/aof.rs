//! The append-only file's command and INFO fields: BGREWRITEAOF, and the
//! `aof_*` lines of `INFO persistence` (the file is `persist::aof`'s, its
//! writer thread `server/aof.rs`'s).

use super::{CmdError, Ctx};
use crate::protocol::Request;

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
