//! Checks and runs one request: resolves it in the command table (renames
//! applied), makes the checks Redis makes before running or queueing a
//! command, then runs it (or queues it in `MULTI`), counts and times it.

use super::multi;
use super::permit::{log, permit_cell};
use super::run::{admit_persist, admit_write, fail, run};
use crate::acl::log::Context;
use crate::cmd::admin::cluster;
use crate::cmd::admin::pubsub::ALLOWED_WHILE_SUBSCRIBED;
use crate::cmd::registry::error::CmdError;
use crate::cmd::registry::spec::{CommandSpec, Ctx, Flags, Registry};
use crate::protocol::Request;

/// Runs one request and writes its reply (or its error) to `ctx.out`; in
/// `MULTI`, checks and queues it instead (`multi.rs`).
pub fn execute(ctx: &mut Ctx<'_>, req: &Request<'_>) {
    let (cmd, spec, _gate) = match check(ctx, req) {
        Ok(found) => found,
        Err((cmd, e)) => {
            // Refused before it ran: in MULTI, the transaction is doomed,
            // and an EXEC refused (say, given arguments) discards it now;
            // outside MULTI too a refused EXEC answers `EXECABORT`, as
            // Redis's `rejectCommand` does.
            let e = if names_exec(ctx, req) {
                if ctx.session.tx.in_multi() {
                    multi::abort(ctx, e)
                } else {
                    multi::abort_reply(e)
                }
            } else {
                ctx.session.tx.flag();
                e
            };
            fail(ctx, &e);
            // An arity error names no command; Redis still counts it
            // against the command named.
            if let Some(cmd) = cmd.or_else(|| ctx.registry.renamed(&ctx.state.renames, req.arg(0)))
            {
                ctx.session.stats.rejected(ctx.registry.index_of(cmd));
            }
            return;
        }
    };
    if ctx.session.tx.in_multi() && !spec.flags.contains(Flags::NOT_QUEUED) {
        let limit = ctx
            .state
            .settings
            .get(&ctx.state.settings.client_query_buffer_limit);
        let sub = (!std::ptr::eq(cmd, spec)).then(|| Registry::sub_index_of(cmd, spec));
        if ctx
            .session
            .tx
            .queue(req, ctx.registry.index_of(cmd), sub, limit)
        {
            ctx.out.queued();
        } else {
            ctx.session.query_limit_hit = true;
        }
        return;
    }
    run(ctx, cmd, spec, req);
}

/// Whether `req` names EXEC (under its `--rename-command` name, if any).
fn names_exec(ctx: &Ctx<'_>, req: &Request<'_>) -> bool {
    ctx.registry
        .renamed(&ctx.state.renames, req.arg(0))
        .is_some_and(|c| c.name == "exec")
}

/// Resolves a request to its command and the spec that runs it (the
/// subcommand's, if any) and makes the checks Redis makes before running
/// or queueing one: arity, auth, cluster slot, `--maxmemory`, the
/// append-only file's failed write (`-MISCONF`), `no_multi`.
/// On refusal, the command (if one was found) and why.
#[allow(clippy::type_complexity)]
fn check(
    ctx: &mut Ctx<'_>,
    req: &Request<'_>,
) -> Result<
    (
        &'static CommandSpec,
        &'static CommandSpec,
        Option<crate::cluster::node::Gate>,
    ),
    (Option<&'static CommandSpec>, CmdError),
> {
    let (cmd, sub) = ctx
        .registry
        .resolve_remembered(&ctx.state.renames, &mut ctx.session.command_memo, req)
        .map_err(|e| (None, e))?;
    let spec = sub.unwrap_or(cmd);
    ctx.session.info.set_command(
        ctx.registry.index_of(cmd),
        sub.map(|s| Registry::sub_index_of(cmd, s)),
    );
    let refuse = |e| (Some(cmd), e);
    if !ctx.session.authenticated && !spec.flags.contains(Flags::NO_AUTH) {
        return Err(refuse(CmdError::NoAuth));
    }
    // The user's rules, after AUTH and before routing, as Redis's
    // `processCommand` checks them; the default user (all commands, keys
    // and channels) costs one load.
    let user = ctx.state.acl.user_of(&ctx.session.user);
    if let Err(r) = permit_cell(ctx.registry, user, cmd, sub, req) {
        let context = match ctx.session.tx.in_multi() {
            true => Context::Multi,
            false => Context::Toplevel,
        };
        log(ctx.state, ctx.session, ctx.now, r, context, cmd, sub);
        return Err(refuse(r.noperm(cmd, sub)));
    }
    if let Some(topology) = &ctx.state.cluster {
        cluster::route(topology, spec, req, ctx.session.readonly).map_err(refuse)?;
    }
    let mut gate = None;
    let state = ctx.state;
    if let Some(node) = &state.cluster_node {
        if cmd.name != "asking" {
            gate = crate::cmd::admin::cluster_live::route(ctx, node, spec, req).map_err(refuse)?;
        }
    }
    if spec.flags.contains(Flags::WRITE) && ctx.state.replication.is_replica() {
        return Err(refuse(CmdError::ReadOnlyReplica));
    }
    if spec.flags.contains(Flags::DENYOOM) {
        admit_write(ctx, spec, req).map_err(refuse)?;
    }
    admit_persist(ctx.state, spec).map_err(refuse)?;
    // A RESP2 connection that subscribes can only (un)subscribe, as in
    // Redis: its replies share the stream with the messages.
    if ctx.session.subscriptions() > 0
        && ctx.out.proto == crate::protocol::Protocol::Resp2
        && !ALLOWED_WHILE_SUBSCRIBED.contains(&cmd.name)
    {
        let name = match sub {
            Some(s) => format!("{}|{}", cmd.name, s.name),
            None => cmd.name.to_string(),
        };
        return Err(refuse(CmdError::err(format!(
            "Can't execute '{name}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
        ))));
    }
    // Another client's script has run past --lua-time-limit: Redis is
    // blocked then, and answers BUSY to all but a few commands.
    if !spec.flags.contains(Flags::ALLOW_BUSY) && ctx.state.scripts.busy() {
        return Err(refuse(CmdError::Prefixed(
            crate::cmd::admin::shutdown::BUSY.into(),
        )));
    }
    if ctx.session.tx.in_multi() && spec.flags.contains(Flags::NO_MULTI) {
        return Err(refuse(CmdError::err(
            "Command not allowed inside a transaction",
        )));
    }
    Ok((cmd, spec, gate))
}
