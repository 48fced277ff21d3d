//! Server commands: INFO, DBSIZE, FLUSHALL/FLUSHDB, TIME.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::args::is;
use super::{CmdError, Ctx};
use crate::protocol::Request;
use crate::state::Stats;
use crate::util::human_bytes;

/// ```text
/// DBSIZE
/// ```
pub fn dbsize(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    ctx.out.int(ctx.db.len() as i64);
    Ok(())
}

/// ```text
/// FLUSHALL [ASYNC | SYNC]
/// FLUSHDB [ASYNC | SYNC]
/// ```
pub fn flushall(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    match req.len() {
        1 => {}
        2 if is(req.arg(1), "ASYNC") || is(req.arg(1), "SYNC") => {}
        _ => return Err(CmdError::Syntax),
    }
    ctx.db.clear();
    ctx.out.ok();
    Ok(())
}

/// ```text
/// TIME
/// ```
/// The server clock, which never steps backwards, read now: not the
/// batch's or the script's reading, as Redis 7.0 reads the clock on every
/// call, so a script that waits on `TIME` sees it move (and ends).
pub fn time(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let now = ctx.state.clock.now().0;
    ctx.out.array(2);
    ctx.out.bulk_int((now / 1_000_000_000) as i64);
    ctx.out.bulk_int((now % 1_000_000_000 / 1000) as i64);
    Ok(())
}

const SECTIONS: [&str; 12] = [
    "server",
    "clients",
    "memory",
    "persistence",
    "policies",
    "stats",
    "replication",
    "cpu",
    "commandstats",
    "errorstats",
    "cluster",
    "keyspace",
];

/// ```text
/// INFO [section [section ...]]
/// ```
pub fn info(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    // As in Redis, commandstats is only in `all`/`everything` or by name.
    let wanted = |name: &str| {
        let default = name != "commandstats";
        (req.len() == 1 && default)
            || req.args().skip(1).any(|a| {
                is(a, name) || is(a, "all") || is(a, "everything") || (default && is(a, "default"))
            })
    };
    let mut text = String::new();
    for section in SECTIONS.into_iter().filter(|s| wanted(s)) {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        write_section(ctx, section, &mut text);
    }
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

fn write_section(ctx: &Ctx<'_>, section: &str, t: &mut String) {
    let state = ctx.state;
    let stats = &state.stats;
    // Writing to a String cannot fail.
    let _ = match section {
        "server" => {
            let uptime = state.started.elapsed().as_secs();
            let forward = state.clock.forward_steps();
            write!(
                t,
                "# Server\r\nredis_version:{}\r\nturnstile_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:{}\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\ntls_port:{}\r\nserver_time_usec:{}\r\nclock_backward_steps:{}\r\nclock_forward_steps:{}\r\nclock_forward_steps_ignored:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nexecutable:turnstile\r\nsecurity_warning:{}\r\n",
                crate::protocol::REDIS_VERSION,
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::env::consts::ARCH,
                usize::BITS,
                std::process::id(),
                state.run_id,
                state.addr.port(),
                state.tls_port.unwrap_or(0),
                ctx.now.0 / 1000,
                state.clock.backward_steps(),
                forward.adopted,
                forward.ignored,
                uptime,
                uptime / 86_400,
                state
                    .settings
                    .exposure(state.addr.ip())
                    .unwrap_or_else(|| "none".into()),
            )
        }
        "clients" => write!(
            t,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:0\r\n",
            // Replicas' links are not counted, as in Redis.
            state
                .clients
                .len()
                .saturating_sub(state.replication.connected()),
            state.settings.get(&state.settings.maxclients),
        ),
        "memory" => {
            let rss = crate::alloc::rss();
            let used = crate::alloc::used_memory();
            let max = state.settings.get(&state.settings.maxmemory);
            let lua = state.scripts.used_memory();
            write!(
                t,
                "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\nused_memory_rss_human:{}\r\nmaxmemory:{max}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:{}\r\nmem_clients_normal:{}\r\nused_memory_lua:{lua}\r\nused_memory_lua_human:{}\r\nnumber_of_cached_scripts:{}\r\n",
                human_bytes(used as u64),
                human_bytes(rss as u64),
                human_bytes(max),
                state.settings.policy().name(),
                Stats::read(&stats.client_buffers),
                human_bytes(lua as u64),
                state.scripts.len(),
            )
        }
        "stats" => write!(
            t,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\nexpired_keys:{}\r\nevicted_keys:{}\r\nevicted_scripts:{}\r\nsync_full:{}\r\nsync_partial_ok:{}\r\nsync_partial_err:{}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\nacl_access_denied_auth:{}\r\ntotal_error_replies:{}\r\nprotocol_errors:{}\r\n",
            Stats::read(&stats.connections_received),
            Stats::read(&stats.commands_processed),
            Stats::read(&stats.net_input_bytes),
            Stats::read(&stats.net_output_bytes),
            Stats::read(&stats.rejected_connections),
            state.store.expired_count(),
            state.store.evicted_count(),
            state.scripts.evictions(),
            Stats::read(&state.replication.full_syncs),
            Stats::read(&state.replication.partial_ok),
            Stats::read(&state.replication.partial_err),
            state.pubsub.channel_count(),
            state.pubsub.pattern_count(),
            Stats::read(&stats.auth_failures),
            Stats::read(&stats.error_replies),
            Stats::read(&stats.protocol_errors),
        )
        .and_then(|_| {
            for outcome in crate::stats::TxOutcome::ALL {
                write!(
                    t,
                    "transactions_{}:{}\r\n",
                    outcome.name(),
                    stats.transactions(outcome)
                )?;
            }
            for outcome in crate::stats::ScriptOutcome::ALL {
                write!(
                    t,
                    "scripts_{}:{}\r\n",
                    outcome.name(),
                    stats.scripts(outcome)
                )?;
            }
            write!(
                t,
                "scripts_native:{}\r\n",
                crate::stats::Stats::read(&stats.scripts_native)
            )?;
            for event in crate::stats::LeaseEvent::ALL {
                // Leases lapsed with their key are the store's count.
                let n = stats.leases(event)
                    + match event {
                        crate::stats::LeaseEvent::Expired => state.store.lapsed_leases(),
                        _ => 0,
                    };
                write!(t, "leases_{}:{n}\r\n", event.name())?;
            }
            // Limiter decisions, as /metrics reports them.
            for algo in crate::limiter::Algorithm::ALL {
                let d = stats.decisions(algo);
                write!(
                    t,
                    "decisions_{}:allowed={},limited={},units={},near_limit={}\r\n",
                    algo.name(),
                    d.allowed,
                    d.limited,
                    d.units,
                    d.near_limit
                )?;
            }
            Ok(())
        }),
        "commandstats" => {
            let _ = t.write_str("# Commandstats\r\n");
            for (i, cmd) in ctx.registry.commands().iter().enumerate() {
                let (calls, failed) = stats.command(i);
                let rejected = stats.rejected(i);
                if calls > 0 || rejected > 0 {
                    let _ = write!(
                        t,
                        "cmdstat_{}:calls={calls},rejected_calls={rejected},failed_calls={failed}\r\n",
                        cmd.name
                    );
                }
            }
            Ok(())
        }
        "errorstats" => {
            let _ = t.write_str("# Errorstats\r\n");
            for (code, n) in stats.error_codes() {
                let code = String::from_utf8_lossy(code.as_bytes());
                let _ = write!(t, "errorstat_{code}:count={n}\r\n");
            }
            Ok(())
        }
        "cpu" => {
            let [sys, user] = cpu_seconds(libc::RUSAGE_SELF);
            let [sys_children, user_children] = cpu_seconds(libc::RUSAGE_CHILDREN);
            write!(
                t,
                "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:{sys_children:.6}\r\nused_cpu_user_children:{user_children:.6}\r\n"
            )
        }
        "replication" => {
            super::replication::info(ctx, t);
            Ok(())
        }
        "cluster" => write!(
            t,
            "# Cluster\r\ncluster_enabled:{}\r\n",
            state.in_cluster() as u8
        ),
        "persistence" => match &state.persist {
            None => t.write_str("# Persistence\r\nloading:0\r\nsnapshot_enabled:0\r\n"),
            Some(p) => write!(
                t,
                "# Persistence\r\nloading:0\r\nsnapshot_enabled:1\r\nsnapshot_path:{}\r\nrdb_changes_since_last_save:{}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\nrdb_last_bgsave_time_usec:{}\r\nrdb_saves:{}\r\nsnapshot_failures:{}\r\nsnapshot_last_keys:{}\r\n",
                p.path().display(),
                p.changes_since_save(state.stats.writes()),
                u8::from(p.in_progress()),
                Stats::read(&p.last_save),
                if p.last_ok.load(Ordering::Relaxed) { "ok" } else { "err" },
                Stats::read(&p.last_duration_us),
                Stats::read(&p.saves),
                Stats::read(&p.failures),
                Stats::read(&p.last_keys),
            ),
        }
        .and_then(|()| super::aof::info(state, t)),
        "policies" => {
            let p = &state.policies;
            let set = p.current();
            let status = p.status();
            write!(
                t,
                "# Policies\r\npolicies_path:{}\r\npolicies_loaded:{}\r\npolicies_domains:{}\r\npolicies_shadow:{}\r\npolicies_reloads_ok:{}\r\npolicies_reloads_failed:{}\r\npolicies_last_reload_ok_ms:{}\r\npolicies_last_reload_status:{}\r\npolicies_last_error:{}\r\npolicies_unmatched:{}\r\n",
                p.path().map(|p| p.display().to_string()).unwrap_or_default(),
                set.len(),
                set.domains(),
                p.shadow_all() as u8,
                Stats::read(&p.reloads_ok),
                Stats::read(&p.reloads_failed),
                status.last_ok_ms,
                if status.last_error.is_some() { "err" } else { "ok" },
                // One line: the error's own newlines would end the field.
                status.last_error.unwrap_or_default().replace(['\r', '\n'], " "),
                Stats::read(&p.unmatched),
            )
        }
        "keyspace" => {
            let counts = ctx.db.counts();
            let _ = t.write_str("# Keyspace\r\n");
            if counts.keys > 0 {
                write!(t, "db0:keys={},expires={},avg_ttl=0\r\n", counts.keys, counts.volatile)
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    };
}

/// CPU seconds `who` (the process, or its waited-for children) spent in
/// the kernel and in user space, from getrusage(2), as Redis's `INFO cpu`.
fn cpu_seconds(who: libc::c_int) -> [f64; 2] {
    // SAFETY: `rusage` is plain integers, for which all zeroes is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct it is given and nothing else.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return [0.0; 2];
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    [secs(ru.ru_stime), secs(ru.ru_utime)]
}
