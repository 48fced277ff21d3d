//! Commands: one file per family; `table.rs` lists them all. Each handler
//! parses its arguments, calls the store, and writes its reply.

pub mod args;
pub mod client;
pub mod cluster;
pub mod command;
pub mod config;
pub mod connection;
pub mod error;
pub mod keys;
pub mod limiter;
pub mod rename;
pub mod server;
pub mod string;
pub mod table;

pub use error::CmdError;
pub use table::{lookup, CommandSpec, Flags, KeySpec, COMMANDS};

use crate::clock::Nanos;
use crate::protocol::{ReplyBuf, Request};
use crate::server::session::Session;
use crate::state::State;

/// Everything a handler may touch while running one command.
pub struct Ctx<'a> {
    pub state: &'a State,
    pub session: &'a mut Session,
    pub out: &'a mut ReplyBuf,
    /// Read once per command: every decision in it sees one instant.
    pub now: Nanos,
}

/// Applies `--maxmemory` to a command that may grow the keyspace. Over the
/// cap, `noeviction` refuses it; `volatile-ttl` first evicts up to two keys
/// nearest their expiry, so while over the cap every write removes at least
/// as many keys as it can add and the table stops growing (evicting frees
/// table slots for reuse rather than shrinking the measured heap at once),
/// and refuses it only if there is no key with a TTL left to evict.
fn admit_write(ctx: &Ctx<'_>) -> Result<(), CmdError> {
    let settings = &ctx.state.settings;
    let max = settings.get(&settings.maxmemory);
    if max == 0 || (crate::alloc::used_memory() as u64) <= max {
        return Ok(());
    }
    match settings.policy() {
        crate::config::MaxmemoryPolicy::NoEviction => Err(CmdError::OutOfMemory),
        crate::config::MaxmemoryPolicy::VolatileTtl => {
            let store = &ctx.state.store;
            let evicted = (0..2)
                .filter(|_| store.evict_volatile_ttl(ctx.now, 16))
                .count();
            if evicted == 0 {
                return Err(CmdError::OutOfMemory);
            }
            Ok(())
        }
    }
}

/// Runs one request and writes its reply (or its error) to `ctx.out`.
pub fn execute(ctx: &mut Ctx<'_>, req: &Request<'_>) {
    let mark = ctx.out.len();
    let started =
        (ctx.state.time_commands && ctx.session.sample_latency()).then(std::time::Instant::now);
    let mut index = None;
    let result =
        table::resolve_with(req, |name| ctx.state.renames.lookup(name)).and_then(|(cmd, sub)| {
            let spec = sub.unwrap_or(cmd);
            ctx.session.info.set_command(cmd, sub);
            index = Some(table::index_of(cmd));
            if !ctx.session.authenticated && !spec.flags.contains(Flags::NO_AUTH) {
                return Err(CmdError::NoAuth);
            }
            if let Some(topology) = &ctx.state.cluster {
                cluster::route(topology, spec, req)?;
            }
            if spec.flags.contains(Flags::DENYOOM) {
                admit_write(ctx)?;
            }
            (spec.handler)(ctx, req)
        });
    if let Err(e) = &result {
        // A handler that failed after writing part of a reply leaves none.
        ctx.out.truncate(mark);
        ctx.out.error(&e.to_string());
        ctx.session.stats.error_reply();
    }
    if let Some(i) = index {
        ctx.session.stats.command(i, result.is_ok());
        if let Some(t) = started {
            ctx.state.metrics.observe(i, t.elapsed());
        }
    }
}
