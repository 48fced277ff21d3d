//! Commands: one file per family; `table.rs` lists them all. Each handler
//! parses its arguments, calls the store, and writes its reply.

pub mod args;
pub mod batch;
pub mod client;
pub mod cluster;
pub mod collection;
pub mod command;
pub mod config;
pub mod connection;
pub mod error;
pub mod hash;
pub mod keys;
pub mod limiter;
pub mod list;
pub mod multi;
pub mod native;
pub mod policy;
pub mod pubsub;
pub mod rename;
pub mod replication;
pub mod rls;
pub mod script;
pub mod server;
pub mod session;
pub mod snapshot;
pub mod spec;
pub mod string;
pub mod table;
pub mod top;
pub mod zset;

pub use error::CmdError;
pub use table::{lookup, CommandSpec, Flags, KeySpec, COMMANDS};

use std::sync::atomic::Ordering;

use self::rename::Lookup;
use self::session::Session;
use crate::clock::Nanos;
use crate::protocol::{ReplyBuf, Request};
use crate::state::State;
use crate::store::Keyspace;

/// Everything a handler may touch while running one command.
pub struct Ctx<'a> {
    pub state: &'a State,
    pub session: &'a mut Session,
    pub out: &'a mut ReplyBuf,
    /// The keyspace, as this command may reach it: every handler reads
    /// and writes keys through it (in `EXEC`, it holds the transaction's
    /// shard locks).
    pub db: Keyspace<'a>,
    /// Read once per command: every decision in it sees one instant.
    pub now: Nanos,
}

/// Applies `--maxmemory` to a command that may grow the keyspace: it may
/// run if memory in use, plus what its shard's table would allocate to
/// take a new key, stays under the cap. Otherwise `noeviction` refuses it;
/// `volatile-ttl` first evicts one key, the nearest its expiry in the shard
/// the write lands in, which makes room in that table, so the table that
/// would cross the cap is never allocated and the keyspace stops growing
/// there. It refuses the write only if no key with a TTL is left to evict,
/// or if clients' buffers are most of the memory in use.
pub(crate) fn admit_write(
    ctx: &Ctx<'_>,
    spec: &CommandSpec,
    req: &Request<'_>,
) -> Result<(), CmdError> {
    let settings = &ctx.state.settings;
    let max = settings.get(&settings.maxmemory);
    if max == 0 {
        return Ok(());
    }
    let store = &ctx.state.store;
    // The command's first key is where the write lands.
    let key = spec.first_key(req).unwrap_or_default();
    let used = crate::alloc::used_memory() as u64;
    let growth = store.growth_for(key) as u64;
    if used.saturating_add(growth) <= max {
        return Ok(());
    }
    // Keys are evicted only to make room that keys took: evicting a
    // limiter key re-opens someone's limit, so while clients' own buffers
    // (an upload that never ends) are what fills the cap, the larger part
    // of the memory in use, writes are refused instead.
    let buffers = ctx.state.stats.client_buffers.load(Ordering::Relaxed);
    let buffers_fill_it = buffers >= used.saturating_sub(buffers);
    match settings.policy() {
        crate::config::MaxmemoryPolicy::NoEviction => Err(CmdError::OutOfMemory),
        crate::config::MaxmemoryPolicy::VolatileTtl if buffers_fill_it => {
            Err(CmdError::OutOfMemory)
        }
        crate::config::MaxmemoryPolicy::VolatileTtl => {
            if !store.make_room(key, ctx.now) {
                return Err(CmdError::OutOfMemory);
            }
            Ok(())
        }
    }
}

/// Bytes a write may still allocate under `--maxmemory` (unbounded
/// without one): what a log ring may grow by, checked before it grows.
pub(crate) fn write_room(ctx: &Ctx<'_>) -> usize {
    room(ctx.state)
}

/// [`write_room`] for a write outside a command (the rate limit service).
pub(crate) fn room(state: &State) -> usize {
    let settings = &state.settings;
    match settings.get(&settings.maxmemory) {
        0 => usize::MAX,
        max => usize::try_from(max)
            .unwrap_or(usize::MAX)
            .saturating_sub(crate::alloc::used_memory()),
    }
}

/// Runs one request and writes its reply (or its error) to `ctx.out`; in
/// `MULTI`, checks and queues it instead (`multi.rs`).
pub fn execute(ctx: &mut Ctx<'_>, req: &Request<'_>) {
    let (cmd, spec) = match check(ctx, req) {
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
            if let Some(cmd) = cmd.or_else(|| ctx.state.renames.lookup(req.arg(0))) {
                ctx.session.stats.rejected(table::index_of(cmd));
            }
            return;
        }
    };
    if ctx.session.tx.in_multi() && !spec.flags.contains(Flags::NOT_QUEUED) {
        let limit = ctx
            .state
            .settings
            .get(&ctx.state.settings.client_query_buffer_limit);
        let sub = (!std::ptr::eq(cmd, spec)).then_some(spec);
        if ctx.session.tx.queue(req, cmd, sub, limit) {
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
    ctx.state
        .renames
        .lookup(req.arg(0))
        .is_some_and(|c| c.name == "exec")
}

/// Resolves a request to its command and the spec that runs it (the
/// subcommand's, if any) and makes the checks Redis makes before running
/// or queueing one: arity, auth, cluster slot, `--maxmemory`, `no_multi`.
/// On refusal, the command (if one was found) and why.
#[allow(clippy::type_complexity)]
fn check(
    ctx: &mut Ctx<'_>,
    req: &Request<'_>,
) -> Result<(&'static CommandSpec, &'static CommandSpec), (Option<&'static CommandSpec>, CmdError)>
{
    let (cmd, sub) =
        table::resolve_with(req, |name| ctx.state.renames.lookup(name)).map_err(|e| (None, e))?;
    let spec = sub.unwrap_or(cmd);
    ctx.session.info.set_command(
        table::index_of(cmd),
        sub.map(|s| table::sub_index_of(cmd, s)),
    );
    let refuse = |e| (Some(cmd), e);
    if !ctx.session.authenticated && !spec.flags.contains(Flags::NO_AUTH) {
        return Err(refuse(CmdError::NoAuth));
    }
    if let Some(topology) = &ctx.state.cluster {
        cluster::route(topology, spec, req, ctx.session.readonly).map_err(refuse)?;
    }
    if spec.flags.contains(Flags::WRITE) && ctx.state.replication.is_replica() {
        return Err(refuse(CmdError::ReadOnlyReplica));
    }
    if spec.flags.contains(Flags::DENYOOM) {
        admit_write(ctx, spec, req).map_err(refuse)?;
    }
    // A RESP2 connection that subscribes can only (un)subscribe, as in
    // Redis: its replies share the stream with the messages.
    if ctx.session.subscriptions() > 0
        && ctx.out.proto == crate::protocol::Protocol::Resp2
        && !pubsub::ALLOWED_WHILE_SUBSCRIBED.contains(&cmd.name)
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
    Ok((cmd, spec))
}

/// Runs a checked command (`spec` is `cmd` or its subcommand) and writes
/// its reply or its error; counts and, sampled, times it. `EXEC` runs
/// each queued command through here.
pub(crate) fn run(
    ctx: &mut Ctx<'_>,
    cmd: &'static CommandSpec,
    spec: &'static CommandSpec,
    req: &Request<'_>,
) {
    let mark = ctx.out.len();
    let i = table::index_of(cmd);
    let started =
        (ctx.state.time_commands && ctx.session.sample_latency(i)).then(std::time::Instant::now);
    let result = (spec.handler)(ctx, req);
    let ok = match &result {
        Err(e) => {
            // A handler that failed after writing part of a reply leaves none.
            ctx.out.truncate(mark);
            if std::mem::take(&mut ctx.session.error_counted) {
                ctx.out.error(&e.to_string());
            } else {
                fail(ctx, e);
            }
            false
        }
        // A reply that is an error (a script's `redis.error_reply`) counts
        // as one, as in Redis, unless it is a command's error a script
        // returned (counted when the command failed).
        Ok(()) => match ctx.out.error_at(mark) {
            Some(text) => {
                if !std::mem::take(&mut ctx.session.error_counted) {
                    ctx.session.stats.error_reply(text);
                }
                false
            }
            None => true,
        },
    };
    ctx.session.stats.command(i, ok);
    if let Some(t) = started {
        if let Some(m) = &ctx.state.metrics {
            m.observe(i, t.elapsed());
        }
    }
}

/// Writes an error reply and counts it.
fn fail(ctx: &mut Ctx<'_>, e: &CmdError) {
    let text = e.to_string();
    ctx.out.error(&text);
    ctx.session.stats.error_reply(text.as_bytes());
}
