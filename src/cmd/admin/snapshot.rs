//! Snapshot commands: SAVE, BGSAVE, LASTSAVE (what they share with the
//! snapshot thread is `crate::persist`'s).

use super::{CmdError, Ctx};
use crate::cmd::exec::session::{Deferred, Later, Park};
use crate::persist::Persist;
use crate::protocol::Request;
use crate::state::State;
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
/// waits parked (`Park::Later`), so no async worker waits for the disk.
pub fn save(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    persist(ctx)?;
    ctx.session.parked = Some(Park::Later(Later {
        run: Box::new(|state| {
            Box::pin(async move {
                match write_snapshot(state).await {
                    Ok(()) => Deferred::Ok,
                    Err(e) => Deferred::Err(e),
                }
            })
        }),
        unserved: Deferred::Err("SAVE needs a server".into()),
    }));
    Ok(())
}

/// `SAVE`'s snapshot, written on a blocking thread, not the connection's
/// worker (the walk and the `fsync` may take seconds). If the connection
/// ends first, the snapshot is still finished.
async fn write_snapshot(state: &State) -> Result<(), String> {
    let Some(p) = state.persist.clone() else {
        return Err("snapshots are off: start with --snapshot PATH".into());
    };
    let (store, now, writes) = (state.store.clone(), state.clock.now(), state.stats.writes());
    match tokio::task::spawn_blocking(move || p.save(&store, now, writes)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("the snapshot failed: {e}")),
    }
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
