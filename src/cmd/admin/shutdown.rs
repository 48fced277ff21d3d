//! `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]`, as Redis 7.0 answers
//! it. The command does what must happen while its client still waits
//! for an answer (wait for the replicas, write the snapshot), then raises
//! the stop in the shared state ([`crate::state::Shutdown`]); the holder
//! of the server's handle stops the server as SIGTERM does, and the
//! client's connection closes without a reply.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::args::is;
use super::{CmdError, Ctx};
use crate::cmd::exec::session::{Deferred, Later, Park};
use crate::protocol::Request;
use crate::state::{FinalSnapshot, State};
use crate::store::effects;

/// Redis's reply when the save failed, or `ABORT` ended the wait.
const FAILED: &str = "Errors trying to SHUTDOWN. Check logs.";

/// Redis's answer to anything but `SCRIPT KILL` or `SHUTDOWN NOSAVE`
/// while a script is busy.
pub const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// The words of one `SHUTDOWN`.
#[derive(Debug, Clone, Copy, Default)]
struct Words {
    nosave: bool,
    save: bool,
    now: bool,
    force: bool,
}

/// ```text
/// SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]
/// ```
/// Without `NOSAVE`, the final snapshot (`--snapshot`) is written before
/// the server lets go of the client: if that fails, the client is told
/// and the server keeps running, unless `FORCE`. `SAVE` without
/// `--snapshot` is such a failure (there is nowhere to write).
pub fn shutdown(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let mut w = Words::default();
    let mut abort = false;
    for a in req.args().skip(1) {
        if is(a, "nosave") {
            w.nosave = true;
        } else if is(a, "save") {
            w.save = true;
        } else if is(a, "now") {
            w.now = true;
        } else if is(a, "force") {
            w.force = true;
        } else if is(a, "abort") {
            abort = true;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let any = w.nosave || w.save || w.now || w.force;
    if (abort && any) || (w.nosave && w.save) {
        return Err(CmdError::Syntax);
    }
    if abort {
        if !ctx.state.shutdown.abort() {
            return Err(CmdError::err("No shutdown in progress."));
        }
        tracing::warn!("Shutdown manually aborted.");
        ctx.out.ok();
        return Ok(());
    }
    // A script past the busy threshold holds its shards: only a stop
    // that saves nothing may go ahead (processCommand let it through).
    if !w.nosave && ctx.state.scripts.busy() {
        return Err(CmdError::Prefixed(BUSY.into()));
    }
    tracing::warn!(client = ctx.session.info.id, "User requested shutdown...");
    ctx.session.parked = Some(Park::Later(Later {
        run: Box::new(move |state| Box::pin(async move { stop(state, w).await })),
        unserved: Deferred::Err("SHUTDOWN needs a server".into()),
    }));
    Ok(())
}

/// `SHUTDOWN`'s work while its client waits: the replicas, the snapshot,
/// then the stop. Its reply is an error, or none at all.
async fn stop(state: &State, w: Words) -> Deferred {
    let timeout = state.settings.get(&state.settings.shutdown_timeout);
    if !w.now && timeout > 0 && !wait_for_replicas(state, Duration::from_secs(timeout)).await {
        return Deferred::Err(FAILED.into());
    }
    let save = !w.nosave && (w.save || state.persist.is_some());
    let saved = save
        && {
            tracing::info!("Saving the final snapshot before exiting.");
            match write_snapshot(state).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!("SHUTDOWN: the final snapshot failed: {e}");
                    if !w.force {
                        tracing::warn!("Error trying to save the snapshot, can't exit. Errors trying to shut down the server: the server keeps running.");
                        return Deferred::Err(FAILED.into());
                    }
                    tracing::warn!("Error trying to save the snapshot. Exit anyway (FORCE).");
                    false
                }
            }
        };
    state.shutdown.request(if saved {
        FinalSnapshot::IfChanged
    } else {
        FinalSnapshot::Skip
    });
    Deferred::Close
}

/// The snapshot, on a blocking thread (as `SAVE` writes it).
async fn write_snapshot(state: &State) -> Result<(), String> {
    let Some(p) = state.persist.clone() else {
        return Err("SAVE given, but there is no --snapshot PATH to write to".into());
    };
    let (store, now, writes) = (state.store.clone(), state.clock.now(), state.stats.writes());
    match tokio::task::spawn_blocking(move || p.save(&store, now, writes)).await {
        Ok(Ok(keys)) => {
            tracing::info!(keys, "final snapshot written");
            Ok(())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("the snapshot failed: {e}")),
    }
}

/// Waits until every attached replica has acknowledged the stream as it
/// stood when `SHUTDOWN` came, or `timeout` passed (Redis goes ahead
/// then too, naming the replicas that lag). False if `SHUTDOWN ABORT`
/// ended the wait. Writes are not paused meanwhile (Redis pauses them):
/// those that come in are in the final snapshot and the append-only file,
/// and replicas get what the stream carries before the stop.
async fn wait_for_replicas(state: &State, timeout: Duration) -> bool {
    let repl = &state.replication;
    let fx = &state.store.effects;
    let offset = fx.offset();
    let ready = || repl.acked_at_least(offset) >= repl.connected();
    if ready() {
        return true;
    }
    let (_waiting, mut aborts) = state.shutdown.begin_wait();
    // Ask for acknowledgements now rather than at the next second. A
    // replica (with replicas of its own) passes its primary's stream on
    // verbatim: it adds nothing to it, and waits for their own acks.
    if fx.emitting() && !repl.is_replica() {
        fx.put_bare(effects::GETACK);
    }
    tracing::info!("Waiting for replicas before shutting down.");
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let acked = repl.acked.notified();
        tokio::pin!(acked);
        acked.as_mut().enable();
        if ready() {
            break;
        }
        tokio::select! {
            _ = acked => {}
            _ = aborts.changed() => return false,
            _ = tokio::time::sleep_until(deadline) => break,
        }
    }
    let replicas = repl.replicas.lock().clone();
    let lagging = replicas
        .iter()
        .filter(|r| r.acked.load(Ordering::Acquire) < offset)
        .inspect(|r| {
            tracing::warn!(
                "Lagging replica {}:{} reported offset {} behind master.",
                r.ip.lock(),
                r.port.load(Ordering::Relaxed),
                offset.saturating_sub(r.acked.load(Ordering::Acquire))
            )
        })
        .count();
    tracing::info!(
        "{} of {} replicas are in sync when shutting down.",
        replicas.len() - lagging,
        replicas.len()
    );
    true
}
