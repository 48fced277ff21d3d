//! Snapshot commands: SAVE, BGSAVE, LASTSAVE (what they share with the
//! snapshot thread is `crate::persist`'s).

use super::{CmdError, Ctx};
use crate::persist::Persist;
use crate::protocol::Request;
use std::sync::atomic::Ordering;

fn persist<'a>(ctx: &Ctx<'a>) -> Result<&'a Persist, CmdError> {
    ctx.state.persist.as_deref().ok_or(CmdError::err(
        "snapshots are off: start with --snapshot PATH",
    ))
}

/// ```text
/// SAVE
/// ```
/// Writes a snapshot before replying. Unlike Redis's SAVE it does not stop
/// the server: the store is walked shard by shard, so only this connection
/// (and others scheduled on the same worker thread) wait for the file.
/// The walk and its `fsync` run on a blocking thread while the connection
/// waits parked (`Park::Save`), so no async worker waits for the disk.
pub fn save(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    persist(ctx)?;
    ctx.session.parked = Some(crate::cmd::exec::session::Park::Save);
    Ok(())
}

/// ```text
/// BGSAVE [SCHEDULE]
/// ```
pub fn bgsave(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if req.len() > 2 || (req.len() == 2 && !super::args::is(req.arg(1), "SCHEDULE")) {
        return Err(CmdError::Syntax);
    }
    persist(ctx)?.request();
    ctx.out.simple("Background saving started");
    Ok(())
}

/// ```text
/// LASTSAVE
/// ```
/// Unix time of the last successful snapshot (of the start, before one).
pub fn lastsave(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let at = persist(ctx)?.last_save.load(Ordering::Relaxed);
    ctx.out.int(i64::try_from(at).unwrap_or(i64::MAX));
    Ok(())
}
