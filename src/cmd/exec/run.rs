//! Runs a checked command: its handler, its counters and latency sample,
//! its error reply; and the `--maxmemory` check a write passes first. Both
//! the dispatcher and `EXEC` (for each queued command) come here.

use crate::cmd::registry::error::CmdError;
use crate::cmd::registry::spec::{CommandSpec, Ctx, Flags};
use crate::protocol::Request;

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
    let buffers = ctx
        .state
        .stats
        .counters
        .get(crate::metrics::table::CLIENT_BUFFERS);
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

/// Refuses a write (`spec` flagged `write`) while the append-only file's
/// last write failed (a full disk), as Redis does under every
/// `appendfsync`: what would be acknowledged could not be kept. Reads go
/// on; writes are accepted again once a write of the file succeeds. The
/// dispatcher, `EXEC` and a script's `redis.call` ask before a command.
pub(crate) fn admit_persist(
    state: &crate::state::State,
    spec: &CommandSpec,
) -> Result<(), CmdError> {
    if !spec.flags.contains(Flags::WRITE) {
        return Ok(());
    }
    match state.aof.write_error() {
        None => Ok(()),
        Some(e) => Err(CmdError::Prefixed(
            format!(
                "MISCONF Errors writing to the AOF file: {}",
                crate::util::strerror(&e)
            )
            .into(),
        )),
    }
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
    let i = ctx.registry.index_of(cmd);
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
pub(crate) fn fail(ctx: &mut Ctx<'_>, e: &CmdError) {
    let text = e.to_string();
    ctx.out.error(&text);
    ctx.session.stats.error_reply(text.as_bytes());
}
