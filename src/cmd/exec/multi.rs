//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH, as Redis 7 runs
//! them (`multi.c`).
//!
//! After `MULTI` each command is checked (name, arity, auth, cluster
//! slot, `no_multi`) and queued, answered `+QUEUED`; a command refused
//! there marks the transaction, and `EXEC` then discards it whole
//! (`EXECABORT`), so a failed transaction writes nothing. `EXEC` locks
//! every shard its commands' keys (and the watched keys) live in, in
//! ascending order as `RL.ALLOWMANY` does, checks the watched keys, and
//! runs the queue through those locks: no other client's command on any of
//! its keys interleaves, and no global lock is taken. A command that
//! reaches beyond its arguments (`DBSIZE`, `KEYS`, `FLUSHALL`, `INFO`)
//! makes `EXEC` lock every shard.
//!
//! `WATCH` notes, per key, the write counter of the key's bucket in its
//! shard (`store::Store::watch`) and whether the key was live; `EXEC`
//! answers a null array if a counter moved (the key, or another of its
//! bucket, was written, deleted or expired) or a key that was live has
//! expired since. Redis allows such false conflicts; a missed one cannot
//! happen.

use bytes::Bytes;

use super::run::{admit_write, run};
use super::tx::{Queued, Transaction};
use crate::cmd::registry::error::CmdError;
use crate::cmd::registry::spec::{CommandSpec, Ctx, Flags, Registry};
use crate::protocol::Request;
use crate::stats::TxOutcome;
use crate::store::{Keyspace, WatchMark};

/// ```text
/// MULTI
/// ```
pub fn multi(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let tx = &mut ctx.session.tx;
    if tx.in_multi() {
        return Err(CmdError::err("MULTI calls can not be nested"));
    }
    tx.begin();
    ctx.out.ok();
    Ok(())
}

/// ```text
/// DISCARD
/// ```
pub fn discard(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let tx = &mut ctx.session.tx;
    if !tx.in_multi() {
        return Err(CmdError::err("DISCARD without MULTI"));
    }
    tx.clear(&ctx.state.store);
    ctx.state.stats.counters.add_at(
        crate::metrics::table::TRANSACTIONS,
        TxOutcome::Discarded as usize,
        1,
    );
    ctx.out.ok();
    Ok(())
}

/// ```text
/// WATCH key [key ...]
/// ```
pub fn watch(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if ctx.session.tx.in_multi() {
        return Err(CmdError::err("WATCH inside MULTI is not allowed"));
    }
    let limit = ctx
        .state
        .settings
        .get(&ctx.state.settings.client_query_buffer_limit);
    let tx = &mut ctx.session.tx;
    for i in 1..req.len() {
        let key = req.arg_bytes(i);
        tx.watch_bytes += key.len() + std::mem::size_of::<(Bytes, WatchMark)>();
        if tx.bytes() as u64 > limit {
            ctx.session.query_limit_hit = true;
            return Ok(());
        }
        let mark = ctx.state.store.watch(&key, ctx.now);
        tx.watched.push((key, mark));
    }
    ctx.out.ok();
    Ok(())
}

/// ```text
/// UNWATCH
/// ```
pub fn unwatch(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    ctx.session.tx.unwatch(&ctx.state.store);
    ctx.out.ok();
    Ok(())
}

/// ```text
/// EXEC
/// ```
/// Replies with an array of the queued commands' replies (errors in
/// place), a null array if a watched key changed, or `EXECABORT` if a
/// command was refused while queueing.
pub fn exec(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    // Only the queue is taken out: the watched keys are read in place and
    // the connection's transaction state is never moved whole.
    let Some(mut tx) = ctx.session.tx.multi.take() else {
        // Not in MULTI: the watched keys stay watched, as in Redis.
        return Err(CmdError::err("EXEC without MULTI"));
    };
    // The transaction runs at EXEC's time, as in Redis: the batch reused
    // an earlier reading for the commands it only queued.
    ctx.now = ctx.state.clock.now();
    let (counters, store) = (&ctx.state.stats.counters, &ctx.state.store);
    if tx.dirty {
        let state = &mut ctx.session.tx;
        state.clear(store);
        state.recycle(tx);
        counters.add_at(
            crate::metrics::table::TRANSACTIONS,
            TxOutcome::ExecAbort as usize,
            1,
        );
        return Err(CmdError::Prefixed(
            "EXECABORT Transaction discarded because of previous errors.".into(),
        ));
    }
    if let Err(e) = admit(ctx, &tx) {
        return Err(abort(ctx, e));
    }
    // A queue with a script takes its Lua state before its shards (see
    // `Engine::reserve`).
    let _vm = tx
        .queue
        .iter()
        .any(|q| resolved(ctx.registry, q).0.group == "scripting")
        .then(|| ctx.state.scripts.reserve());
    let watched = &ctx.session.tx.watched;
    let mut lock = if tx
        .queue
        .iter()
        .any(|q| resolved(ctx.registry, q).1.flags.contains(Flags::ALL_KEYS))
    {
        store.lock_all()
    } else {
        // The queued keys' shards go in the transaction's reused vector,
        // so no request outlives its pass and nothing is allocated.
        for q in &tx.queue {
            let _ = resolved(ctx.registry, q)
                .1
                .try_for_each_key(&q.request(&tx.spans), |k| {
                    tx.shards.push(store.shard_of(k));
                    Ok::<(), ()>(())
                });
        }
        store.lock_many_and(watched.iter().map(|(k, _)| &k[..]), &tx.shards)
    };
    let now = ctx.now;
    let touched = watched
        .iter()
        .any(|(key, mark)| lock.touched_since(key, mark, now));
    // EXEC unwatches whatever it does; the shards are held already.
    lock.unwatch(watched.iter().map(|(_, m)| m));
    ctx.session.tx.forget_watches();
    if touched {
        drop(lock);
        ctx.session.tx.recycle(tx);
        counters.add_at(
            crate::metrics::table::TRANSACTIONS,
            TxOutcome::WatchAborted as usize,
            1,
        );
        ctx.out.null_array();
        return Ok(());
    }
    // CLUSTER commands run as one change of the cluster state (see
    // `ClusterNode::batch`), taken after the shards.
    let _batch = ctx
        .state
        .cluster_node
        .as_ref()
        .filter(|_| {
            tx.queue
                .iter()
                .any(|q| resolved(ctx.registry, q).0.name == "cluster")
        })
        .map(|n| n.batch());
    ctx.out.array(tx.queue.len());
    {
        let held = lock.held();
        // One context for the whole queue: it lends the same held shards
        // to each command in turn.
        let mut inner = Ctx {
            state: ctx.state,
            session: &mut *ctx.session,
            out: &mut *ctx.out,
            db: Keyspace::Held(&held),
            now,
            registry: ctx.registry,
        };
        for q in &tx.queue {
            let (cmd, spec) = resolved(ctx.registry, q);
            let req = q.request(&tx.spans);
            // The rules are checked again, as Redis's EXEC does: they may
            // have changed since the command was queued.
            if let Err(e) = permitted_now(&inner, cmd, spec, &req) {
                crate::cmd::exec::run::fail(&mut inner, &e);
                continue;
            }
            run(&mut inner, cmd, spec, &req);
        }
    }
    drop(lock);
    // Nothing a queued command does reaches the transaction state (the
    // commands that would run at once instead), so the buffers go back.
    ctx.session.tx.recycle(tx);
    counters.add_at(
        crate::metrics::table::TRANSACTIONS,
        TxOutcome::Executed as usize,
        1,
    );
    Ok(())
}

/// Whether the connection's user may still run a queued command.
fn permitted_now(
    ctx: &Ctx<'_>,
    cmd: &'static CommandSpec,
    spec: &'static CommandSpec,
    req: &Request<'_>,
) -> Result<(), CmdError> {
    let user = ctx.state.acl.user_of(&ctx.session.user);
    let sub = (!std::ptr::eq(cmd, spec)).then_some(spec);
    use crate::cmd::exec::permit::{log, permit_cell};
    permit_cell(ctx.registry, user, cmd, sub, req).map_err(|r| {
        let context = crate::acl::log::Context::Multi;
        log(ctx.state, ctx.session, ctx.now, r, context, cmd, sub);
        r.at_exec()
    })
}

/// Discards the transaction of an `EXEC` refused as a whole, and the
/// error to answer it with: a cluster error as it is (Redis 7.0 redirects
/// before it looks at the transaction), any other reason named after
/// `EXECABORT` without its `ERR` (as Redis's `execCommandAbort` does).
pub fn abort(ctx: &mut Ctx<'_>, e: CmdError) -> CmdError {
    ctx.session.tx.clear(&ctx.state.store);
    ctx.state.stats.counters.add_at(
        crate::metrics::table::TRANSACTIONS,
        TxOutcome::ExecAbort as usize,
        1,
    );
    abort_reply(e)
}

/// The reply to an `EXEC` refused before it ran, in or out of `MULTI`
/// (Redis's `rejectCommand` answers any refused `EXEC` with
/// `execCommandAbort`): a cluster error as it is, any other reason named
/// after `EXECABORT` without its `ERR`.
pub fn abort_reply(e: CmdError) -> CmdError {
    if matches!(
        e,
        CmdError::CrossSlot | CmdError::Moved(..) | CmdError::SlotNotServed
    ) {
        return e;
    }
    let text = e.to_string();
    let reason = text.strip_prefix("ERR ").unwrap_or(&text);
    CmdError::Prefixed(format!("EXECABORT Transaction discarded because of: {reason}").into())
}

/// The checks `EXEC` makes before it runs anything, as Redis does: in
/// cluster mode every queued key in one slot (each command was routed as
/// it was queued; the slot of the whole is checked here), then room under
/// `--maxmemory` if any command may grow the keyspace.
fn admit(ctx: &Ctx<'_>, tx: &Transaction) -> Result<(), CmdError> {
    if ctx.state.in_cluster() {
        let mut slot = None;
        for q in &tx.queue {
            resolved(ctx.registry, q)
                .1
                .try_for_each_key(&q.request(&tx.spans), |key| {
                    let s = crate::cluster::key_slot(key);
                    match slot.replace(s) {
                        Some(first) if first != s => Err(CmdError::CrossSlot),
                        _ => Ok(()),
                    }
                })?;
        }
    }
    for q in &tx.queue {
        let spec = resolved(ctx.registry, q).1;
        if spec.flags.contains(Flags::DENYOOM) {
            admit_write(ctx, spec, &q.request(&tx.spans))?;
        }
        // The file failed since the write was queued: EXEC is refused
        // whole, as Redis refuses an EXEC with writes.
        super::run::admit_persist(ctx.state, spec)?;
    }
    Ok(())
}

/// A queued command's spec and the spec that runs it (its subcommand's,
/// if any). Positions were taken from the same table when queued.
fn resolved(
    registry: &'static Registry,
    q: &Queued,
) -> (&'static CommandSpec, &'static CommandSpec) {
    match registry.at(q.cmd, q.sub) {
        Some((cmd, sub)) => (cmd, sub.unwrap_or(cmd)),
        None => unreachable!("a queued command's position is in the table"),
    }
}
