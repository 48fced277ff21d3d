//! `REPLICAOF` (`SLAVEOF`), `REPLCONF`, `PSYNC`, `WAIT`, `ROLE` and `INFO
//! replication`, as Redis 7 answers them. The links themselves run in the
//! server (`server/replication.rs`): a command changes the role, or parks
//! its connection (`PSYNC` hands the socket to a feeder, `WAIT` waits for
//! acknowledgements), and the connection does the rest.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::args::{int, is};
use super::{CmdError, Ctx};
use crate::cmd::exec::session::{Deferred, Later, Park};
use crate::protocol::Request;
use crate::replication::{Link, Role};
use crate::state::State;
use crate::store::effects;

/// ```text
/// REPLICAOF host port | REPLICAOF NO ONE
/// ```
pub fn replicaof(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let state = ctx.state;
    let repl = &state.replication;
    if is(req.arg(1), "no") && is(req.arg(2), "one") {
        if repl.promote(&state.store, backlog_size(ctx)) {
            tracing::info!("MASTER MODE enabled (user request)");
        }
        // In cluster mode this node now serves its shard's slots.
        if let Some(t) = &state.cluster {
            t.set_primary(t.me);
        }
        ctx.out.ok();
        return Ok(());
    }
    let port = int(req, 2)
        .ok()
        .filter(|p| (0..=65535).contains(p))
        .ok_or_else(|| CmdError::err("Invalid master port"))?;
    // The host is echoed in `INFO replication` and `ROLE` lines: a CR or
    // LF in it would forge fields there (Redis takes any bytes).
    if req.arg(1).iter().any(|b| b.is_ascii_control()) {
        return Err(CmdError::err("Invalid master host"));
    }
    let host = String::from_utf8_lossy(req.arg(1)).into_owned();
    // In cluster mode a node replicates only within its shard (Sentinel
    // moves a shard's primary among its members); its shard's slots follow.
    if let Some(t) = &state.cluster {
        match t.find(&host, port as u16) {
            Some(i) if t.nodes[i].shard == t.nodes[t.me].shard && i != t.me => {
                t.set_primary(i);
            }
            _ => {
                return Err(CmdError::err(
                    "REPLICAOF in cluster mode must name another node of this node's shard",
                ))
            }
        }
    }
    if !repl.follow(&state.store, host.clone(), port as u16) {
        ctx.out.simple("OK Already connected to specified master");
        return Ok(());
    }
    tracing::info!(
        "REPLICAOF {host}:{port} enabled (user request from 'id={}')",
        ctx.session.info.id
    );
    ctx.out.ok();
    Ok(())
}

fn backlog_size(ctx: &Ctx<'_>) -> usize {
    let s = &ctx.state.settings;
    usize::try_from(s.get(&s.repl_backlog_size)).unwrap_or(usize::MAX)
}

/// ```text
/// REPLCONF option value [option value ...]
/// ```
/// What a replica tells its primary before `PSYNC` (its port, its address,
/// its capabilities), and its acknowledgements after.
pub fn replconf(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if req.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    for i in (1..req.len()).step_by(2) {
        let (opt, value) = (req.arg(i), req.arg(i + 1));
        let hello = ctx
            .session
            .replica_hello
            .get_or_insert_with(Default::default);
        if is(opt, "listening-port") {
            hello.port = int(req, i + 1)?.clamp(0, 65535) as u16;
        } else if is(opt, "ip-address") {
            hello.ip = Some(String::from_utf8_lossy(value).into_owned());
        } else if is(opt, "capa") || is(opt, "rdb-only") || is(opt, "rdb-filter-only") {
        } else if is(opt, "ack") || is(opt, "getack") {
            // Read by the feeder on a replica's link; from anyone else,
            // Redis answers nothing.
            return Ok(());
        } else {
            return Err(CmdError::err(format!(
                "Unrecognized REPLCONF option: {}",
                super::error::show(opt)
            )));
        }
    }
    ctx.out.ok();
    Ok(())
}

/// ```text
/// PSYNC replicationid offset
/// ```
/// Turns this connection into a replica's link: the feeder answers
/// `+FULLRESYNC` or `+CONTINUE` and streams from there.
pub fn psync(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if ctx.state.replication.is_replica() && ctx.state.replication.link() != Link::Up {
        return Err(CmdError::Prefixed(
            "NOMASTERLINK Can't SYNC while not connected with my master".into(),
        ));
    }
    let offset = std::str::from_utf8(req.arg(2))
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or(CmdError::NotInteger)?;
    ctx.session.parked = Some(Park::Psync {
        replid: String::from_utf8_lossy(req.arg(1)).into_owned(),
        offset,
    });
    Ok(())
}

/// ```text
/// WAIT numreplicas timeout
/// ```
/// Blocks until `numreplicas` replicas acknowledged every write so far, or
/// `timeout` ms passed (0: no limit); replies how many did.
pub fn wait(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let repl = &ctx.state.replication;
    if repl.is_replica() {
        return Err(CmdError::err(
            "WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.",
        ));
    }
    let wanted = int(req, 1)?;
    let timeout =
        int(req, 2).map_err(|_| CmdError::err("timeout is not an integer or out of range"))?;
    if timeout < 0 {
        return Err(CmdError::err("timeout is negative"));
    }
    let offset = ctx.state.store.effects.offset();
    let acked = repl.acked_at_least(offset);
    // In a transaction (or with enough acknowledgements) it cannot block.
    if acked as i64 >= wanted || matches!(ctx.db, crate::store::Keyspace::Held(_)) {
        ctx.out.int(acked as i64);
        return Ok(());
    }
    // Ask for acknowledgements now rather than at the next second.
    if ctx.state.store.effects.emitting() {
        ctx.state.store.effects.put_bare(effects::GETACK);
    }
    let replicas = wanted.max(0) as usize;
    ctx.session.parked = Some(Park::Later(Later {
        run: Box::new(move |state| {
            Box::pin(async move {
                Deferred::Int(wait_for_acks(state, offset, replicas, timeout as u64).await as i64)
            })
        }),
        // No replicas where nothing runs it.
        unserved: Deferred::Int(0),
    }));
    Ok(())
}

/// `WAIT`: how many replicas acknowledged byte `offset`, once `replicas`
/// did or `timeout_ms` passed (0: no limit).
async fn wait_for_acks(state: &State, offset: u64, replicas: usize, timeout_ms: u64) -> usize {
    let repl = &state.replication;
    let deadline = (timeout_ms > 0)
        .then(|| tokio::time::Instant::now() + std::time::Duration::from_millis(timeout_ms));
    loop {
        let acked = repl.acked.notified();
        tokio::pin!(acked);
        acked.as_mut().enable();
        let n = repl.acked_at_least(offset);
        if n >= replicas {
            return n;
        }
        match deadline {
            Some(d) => {
                if tokio::time::timeout_at(d, acked).await.is_err() {
                    return repl.acked_at_least(offset);
                }
            }
            None => acked.await,
        }
    }
}

/// ```text
/// ROLE
/// ```
pub fn role(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let repl = &ctx.state.replication;
    let offset = ctx.state.store.effects.offset();
    match repl.role() {
        Role::Primary => {
            let replicas = repl.replicas.lock().clone();
            ctx.out.array(3);
            ctx.out.bulk(b"master");
            ctx.out.int(offset as i64);
            ctx.out.array(replicas.len());
            for r in replicas {
                ctx.out.array(3);
                ctx.out.bulk_str(&r.ip.lock());
                ctx.out
                    .bulk_str(&r.port.load(Ordering::Relaxed).to_string());
                ctx.out
                    .bulk_str(&r.acked.load(Ordering::Relaxed).to_string());
            }
        }
        Role::Replica { host, port } => {
            ctx.out.array(5);
            ctx.out.bulk(b"slave");
            ctx.out.bulk_str(&host);
            ctx.out.int(port.into());
            ctx.out.bulk_str(match repl.link() {
                Link::Down => "connect",
                Link::Connecting => "connecting",
                Link::Sync => "sync",
                Link::Up => "connected",
            });
            ctx.out.int(match repl.link() {
                Link::Up => offset as i64,
                _ => -1,
            });
        }
    }
    Ok(())
}

/// `INFO replication`, with Redis 7's field names and meanings.
pub fn info(ctx: &Ctx<'_>, t: &mut String) {
    let state = ctx.state;
    let repl = &state.replication;
    let fx = &state.store.effects;
    let now_ms = state.clock.now().as_millis();
    let secs_since = |ms: u64| now_ms.saturating_sub(ms) / 1000;
    let offset = fx.offset();
    match repl.role() {
        Role::Primary => {
            let _ = t.write_str("role:master\r\n");
        }
        Role::Replica { host, port } => {
            let link = repl.link();
            let _ = write!(
                t,
                "role:slave\r\nmaster_host:{host}\r\nmaster_port:{port}\r\nmaster_link_status:{}\r\nmaster_last_io_seconds_ago:{}\r\nmaster_sync_in_progress:{}\r\nslave_read_repl_offset:{offset}\r\nslave_repl_offset:{offset}\r\n",
                if link == Link::Up { "up" } else { "down" },
                match link {
                    Link::Up | Link::Sync => secs_since(repl.last_io_ms.load(Ordering::Relaxed)) as i64,
                    _ => -1,
                },
                u8::from(link == Link::Sync),
            );
            if link != Link::Up {
                let since = repl.down_since_ms.load(Ordering::Relaxed);
                let _ = write!(
                    t,
                    "master_link_down_since_seconds:{}\r\n",
                    if since == 0 {
                        -1
                    } else {
                        secs_since(since) as i64
                    }
                );
            }
            let _ = write!(
                t,
                "slave_priority:{}\r\nslave_read_only:1\r\nreplica_announced:1\r\n",
                state.settings.get(&state.settings.replica_priority)
            );
        }
    }
    let replicas = repl.replicas.lock().clone();
    let _ = write!(t, "connected_slaves:{}\r\n", replicas.len());
    for (i, r) in replicas.iter().enumerate() {
        let _ = write!(
            t,
            "slave{i}:ip={},port={},state={},offset={},lag={}\r\n",
            r.ip.lock(),
            r.port.load(Ordering::Relaxed),
            if r.online.load(Ordering::Relaxed) {
                "online"
            } else {
                "wait_bgsave"
            },
            r.acked.load(Ordering::Relaxed),
            secs_since(r.acked_at_ms.load(Ordering::Relaxed)),
        );
    }
    let ids = repl.ids();
    let (size, first, held) = fx.backlog();
    let _ = write!(
        t,
        "master_failover_state:no-failover\r\nmaster_replid:{}\r\nmaster_replid2:{}\r\nmaster_repl_offset:{offset}\r\nsecond_repl_offset:{}\r\nrepl_backlog_active:{}\r\nrepl_backlog_size:{}\r\nrepl_backlog_first_byte_offset:{}\r\nrepl_backlog_histlen:{held}\r\n",
        ids.replid,
        ids.replid2,
        ids.second_offset,
        u8::from(size > 0),
        if size > 0 { size as u64 } else { state.settings.get(&state.settings.repl_backlog_size) },
        if size > 0 { first } else { 0 },
    );
}
