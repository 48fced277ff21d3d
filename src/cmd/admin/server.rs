//! Server commands: INFO, DBSIZE, FLUSHALL/FLUSHDB, TIME.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::args::is;
use super::{CmdError, Ctx};
use crate::metrics::counters::Section;
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

/// ```text
/// INFO [section [section ...]]
/// ```
/// Each section is the counters' table's rows for it, in order
/// (`metrics/table.rs`), with the lines that are not counters (settings,
/// statuses) written here where its `Read::Text` rows say.
pub fn info(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    // As in Redis, commandstats is only in `all`/`everything` or by name.
    let wanted = |name: &str| {
        let default = name != "commandstats";
        (req.len() == 1 && default)
            || req.args().skip(1).any(|a| {
                is(a, name) || is(a, "all") || is(a, "everything") || (default && is(a, "default"))
            })
    };
    let readings = ctx.state.readings_with(ctx.db.counts());
    let mut text = String::new();
    for section in Section::ALL.into_iter().filter(|s| wanted(s.name().0)) {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        crate::metrics::info(section, &readings, &mut text, &mut |key, t| {
            write_text(ctx, key, t)
        });
    }
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

/// The INFO lines named `key` in the counters' table that are not
/// counters.
fn write_text(ctx: &Ctx<'_>, key: &str, t: &mut String) {
    let state = ctx.state;
    let stats = &state.stats;
    let aof = &state.aof;
    let status = |ok: bool| if ok { "ok" } else { "err" };
    // Writing to a String cannot fail.
    let _ = match key {
        "server" => write!(
            t,
            "redis_version:{}\r\nturnstile_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:{}\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\ntls_port:{}\r\nserver_time_usec:{}\r\n",
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
        ),
        "server_tail" => write!(
            t,
            "executable:turnstile\r\nsecurity_warning:{}\r\n",
            state
                .settings
                .exposure(state.addr.ip())
                .unwrap_or_else(|| "none".into()),
        ),
        "clients" => write!(
            t,
            "maxclients:{}\r\nblocked_clients:0\r\n",
            state.settings.get(&state.settings.maxclients),
        ),
        "memory" => {
            let max = state.settings.get(&state.settings.maxmemory);
            write!(
                t,
                "maxmemory:{max}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:{}\r\n",
                human_bytes(max),
                state.settings.policy().name(),
            )
        }
        "persistence" => match &state.persist {
            None => t.write_str("loading:0\r\nsnapshot_enabled:0\r\n"),
            Some(p) => write!(
                t,
                "loading:0\r\nsnapshot_enabled:1\r\nsnapshot_path:{}\r\n",
                p.path().display()
            ),
        },
        "rdb_bgsave_in_progress" => match &state.persist {
            Some(p) => write!(t, "rdb_bgsave_in_progress:{}\r\n", u8::from(p.in_progress())),
            None => Ok(()),
        },
        "rdb_last_bgsave_status" => match &state.persist {
            Some(p) => write!(
                t,
                "rdb_last_bgsave_status:{}\r\n",
                status(p.last_ok.load(Ordering::Relaxed))
            ),
            None => Ok(()),
        },
        // The append-only file's lines, as Redis 7.0 names them (its sizes,
        // table rows, only while the file is on, as Redis shows them);
        // `aof_last_write_status:err` while write commands are refused with
        // `-MISCONF`.
        "aof_rewrite" => write!(
            t,
            "aof_rewrite_in_progress:{}\r\naof_rewrite_scheduled:0\r\naof_last_rewrite_time_sec:{}\r\naof_current_rewrite_time_sec:-1\r\naof_last_bgrewrite_status:{}\r\n",
            u8::from(aof.rewriting()),
            if Stats::read(&aof.rewrites) == 0 { -1 } else { Stats::read(&aof.last_rewrite_secs) as i64 },
            status(aof.last_rewrite_ok.load(Ordering::Relaxed)),
        ),
        "aof_last_write_status" => write!(
            t,
            "aof_last_write_status:{}\r\n",
            status(aof.last_write_ok.load(Ordering::Relaxed))
        ),
        "aof_path" => write!(t, "aof_path:{}\r\n", aof.path().display()),
        "policies_path" => write!(
            t,
            "policies_path:{}\r\n",
            state.policies.path().map(|p| p.display().to_string()).unwrap_or_default()
        ),
        "policies_shadow" => write!(t, "policies_shadow:{}\r\n", state.policies.shadow_all() as u8),
        "policies_status" => {
            let status = state.policies.status();
            write!(
                t,
                "policies_last_reload_ok_ms:{}\r\npolicies_last_reload_status:{}\r\npolicies_last_error:{}\r\n",
                status.last_ok_ms,
                if status.last_error.is_some() { "err" } else { "ok" },
                // One line: the error's own newlines would end the field.
                status.last_error.unwrap_or_default().replace(['\r', '\n'], " "),
            )
        }
        "commandstats" => {
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
                "used_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:{sys_children:.6}\r\nused_cpu_user_children:{user_children:.6}\r\n"
            )
        }
        "replication" => {
            super::replication::info(ctx, t);
            Ok(())
        }
        "cluster" => write!(t, "cluster_enabled:{}\r\n", state.in_cluster() as u8),
        "keyspace" => {
            let counts = ctx.db.counts();
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
