//! Checks and runs one request: resolves it in the command table (renames
//! applied), makes the checks Redis makes before running or queueing a
//! command, then runs it (or queues it in `MULTI`), counts and times it.

use super::multi;
use super::run::{admit_persist, admit_write, fail, run};
use crate::acl::User;
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
            // and an EXEC refused (say, given arguments) discards it now.
            let e = if ctx.session.tx.in_multi() && names_exec(ctx, req) {
                multi::abort(ctx, e)
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

/// What a user may not do with a request, and the argument that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused<'r> {
    Command,
    Key(&'r [u8]),
    Channel(&'r [u8]),
}

impl Refused<'_> {
    /// Redis's `-NOPERM` reply to a command refused at dispatch.
    pub fn noperm(self, cmd: &CommandSpec, sub: Option<&CommandSpec>) -> CmdError {
        CmdError::Prefixed(match self {
            Refused::Command => format!(
                "NOPERM this user has no permissions to run the '{}' command",
                full_name(cmd, sub)
            )
            .into(),
            Refused::Key(_) => {
                "NOPERM this user has no permissions to access one of the keys used as arguments"
                    .into()
            }
            Refused::Channel(_) => {
                "NOPERM this user has no permissions to access one of the channels used as arguments"
                    .into()
            }
        })
    }

    /// The reason a script's call was refused, in Redis's words
    /// (`getAclErrorMessage`).
    pub fn in_script(self) -> CmdError {
        CmdError::err(match self {
            Refused::Command => "The user executing the script can't run this command or subcommand",
            Refused::Key(_) => "The user executing the script can't access at least one of the keys mentioned in the command arguments",
            Refused::Channel(_) => "The user executing the script can't publish to the channel mentioned in the command",
        })
    }

    /// `EXEC`'s reply to a queued command the user's rules no longer
    /// allow.
    pub fn at_exec(self) -> CmdError {
        let reason = match self {
            Refused::Command => "no permission to execute the command or subcommand",
            Refused::Key(_) => "no permission to touch the specified keys",
            Refused::Channel(_) => "no permission to access one of the channels used as arguments",
        };
        CmdError::Prefixed(format!("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {reason}").into())
    }
}

/// `client|kill`, or `get`.
pub fn full_name(cmd: &CommandSpec, sub: Option<&CommandSpec>) -> String {
    match sub {
        Some(s) => format!("{}|{}", cmd.name, s.name),
        None => cmd.name.to_string(),
    }
}

/// Whether `user` may run `req` (resolved to `cmd` and `sub`), as Redis's
/// `ACLSelectorCheckCmd` decides: the command (or its first argument),
/// then each key where the table says keys are, with the access the
/// command needs, then the channels it publishes or subscribes to. A
/// deleted user may run nothing (its connections are being closed).
pub fn permit<'r>(
    registry: &Registry,
    user: &User,
    deleted: bool,
    cmd: &'static CommandSpec,
    sub: Option<&'static CommandSpec>,
    req: &'r Request<'_>,
) -> Result<(), Refused<'r>> {
    if deleted {
        return Err(Refused::Command);
    }
    let spec = sub.unwrap_or(cmd);
    let first = if sub.is_some() { 2 } else { 1 };
    let first = (req.len() > first).then(|| req.arg(first));
    let id = registry.acl_id(cmd, sub);
    if !user.may_run(id, spec.flags.contains(Flags::NO_AUTH), first) {
        return Err(Refused::Command);
    }
    if !user.all_keys() {
        let access = spec.key_access();
        spec.try_for_each_key(req, |k| {
            if user.may_access(k, access) {
                Ok(())
            } else {
                Err(Refused::Key(k))
            }
        })?;
    }
    if !user.all_channels() {
        // Redis 7.0's channel specs: PUBLISH's channel, SUBSCRIBE's
        // channels, PSUBSCRIBE's patterns (matched literally).
        let (range, pattern) = match cmd.name {
            "publish" => (1..2.min(req.len()), false),
            "subscribe" => (1..req.len(), false),
            "psubscribe" => (1..req.len(), true),
            _ => (0..0, false),
        };
        for i in range {
            let c = req.arg(i);
            if !user.may_use_channel(c, pattern) {
                return Err(Refused::Channel(c));
            }
        }
    }
    Ok(())
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
    let user = ctx
        .session
        .user
        .as_deref()
        .unwrap_or(ctx.state.acl.default_user());
    if !user.unrestricted() {
        permit(ctx.registry, &user.load(), user.deleted(), cmd, sub, req)
            .map_err(|r| refuse(r.noperm(cmd, sub)))?;
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
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
                .into(),
        )));
    }
    if ctx.session.tx.in_multi() && spec.flags.contains(Flags::NO_MULTI) {
        return Err(refuse(CmdError::err(
            "Command not allowed inside a transaction",
        )));
    }
    Ok((cmd, spec, gate))
}
