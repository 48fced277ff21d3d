//! Cluster commands (`CLUSTER ...`, `READONLY`, `READWRITE`, `ASKING`) and
//! the routing check every key-taking command passes in cluster mode.
//! Replies have the shapes Redis 7 gives, so cluster-aware clients parse
//! them unchanged.

use std::fmt::Write;

use super::args::int;
use super::{CmdError, CommandSpec, Ctx};
use crate::cluster::{key_slot, Node, Topology};
use crate::protocol::{ReplyBuf, Request};

/// Checks that a request's keys all hash to one slot and that this node
/// owns it: `CROSSSLOT`, `MOVED <slot> <host>:<port>` or `CLUSTERDOWN`
/// otherwise. Keys come from the command table, so every command routes
/// by the same positions `COMMAND` reports.
pub fn route(
    topology: &Topology,
    spec: &CommandSpec,
    req: &Request<'_>,
    readonly: bool,
) -> Result<(), CmdError> {
    let slot = super::cluster_live::one_slot(spec, req)?;
    let Some(slot) = slot else {
        return Ok(());
    };
    let Some(shard) = topology.shard_of(slot) else {
        return Err(CmdError::SlotNotServed);
    };
    let primary = topology.primary_of(shard);
    if primary == topology.me {
        return Ok(());
    }
    // A replica of the slot's shard serves reads to a READONLY connection,
    // as a Redis Cluster replica does; everything else goes to the primary.
    let mine = topology.nodes[topology.me].shard == shard;
    if mine && readonly && !spec.flags.contains(super::Flags::WRITE) {
        return Ok(());
    }
    Err(CmdError::Moved(slot, topology.nodes[primary].addr()))
}

/// Any cluster mode: the subcommands both answer alike.
fn in_cluster(ctx: &Ctx<'_>) -> Result<(), CmdError> {
    if ctx.state.in_cluster() {
        Ok(())
    } else {
        Err(CmdError::err("This instance has cluster support disabled"))
    }
}

/// The subcommands only a growing cluster has (`MEET`, `ADDSLOTS`,
/// `SETSLOT`, ...), and the growing cluster's own answers to the rest.
pub fn live(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    match ctx.state.cluster_node.clone() {
        Some(node) => super::cluster_live::run(ctx, req, &node),
        None if ctx.state.cluster.is_some() => Err(CmdError::err(format!(
            "CLUSTER {} needs --cluster-enabled yes: this node's topology is static (--cluster-nodes)",
            String::from_utf8_lossy(req.arg(1)).to_uppercase()
        ))),
        None => Err(CmdError::err("This instance has cluster support disabled")),
    }
}

fn topology<'a>(ctx: &Ctx<'a>) -> Result<&'a Topology, CmdError> {
    ctx.state
        .cluster
        .as_ref()
        .ok_or_else(|| CmdError::err("This instance has cluster support disabled"))
}

/// ```text
/// READONLY | READWRITE | ASKING
/// ```
/// `READONLY` lets this connection read the keys of this node's shard
/// while it is a replica; `READWRITE` ends that; `ASKING` is accepted
/// (slots never migrate).
pub fn accept(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    in_cluster(ctx)?;
    if req.arg(0).eq_ignore_ascii_case(b"asking") {
        ctx.session.asking = true;
    } else if req.arg(0).eq_ignore_ascii_case(b"readonly") {
        ctx.session.readonly = true;
    } else if req.arg(0).eq_ignore_ascii_case(b"readwrite") {
        ctx.session.readonly = false;
    }
    ctx.out.ok();
    Ok(())
}

/// ```text
/// CLUSTER INFO
/// ```
pub fn info(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if ctx.state.cluster_node.is_some() {
        return live(ctx, req);
    }
    let t = topology(ctx)?;
    let assigned = t.assigned();
    let state = if assigned == crate::cluster::slot::SLOTS as usize {
        "ok"
    } else {
        "fail"
    };
    let size = t
        .shards
        .iter()
        .filter(|s| !t.nodes[s.members[0]].ranges.is_empty())
        .count();
    let text = format!(
        "cluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\ncluster_size:{size}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{}\r\ncluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
        t.nodes.len(),
        t.shards.len(),
        t.nodes[t.me].shard + 1,
    );
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

/// ```text
/// CLUSTER MYID
/// ```
pub fn myid(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if ctx.state.cluster_node.is_some() {
        return live(ctx, req);
    }
    let t = topology(ctx)?;
    ctx.out.bulk_str(&t.myself().id);
    Ok(())
}

/// ```text
/// CLUSTER KEYSLOT key
/// ```
pub fn keyslot(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    in_cluster(ctx)?;
    ctx.out.int(i64::from(key_slot(req.arg(2))));
    Ok(())
}

/// A slot number, checked as Redis checks it: an integer first.
fn slot_arg(req: &Request<'_>, i: usize) -> Result<Option<u16>, CmdError> {
    let n = int(req, i)?;
    Ok(u16::try_from(n)
        .ok()
        .filter(|&s| s < crate::cluster::slot::SLOTS))
}

/// Deletes every key this node holds in `slots` (slots another node took
/// while this one still had keys there); returns how many.
pub fn delete_keys_in_slots(state: &crate::state::State, slots: &[u16]) -> usize {
    let now = state.clock.now();
    let mut n = 0;
    for &slot in slots {
        for k in state.store.keys_in_slot(slot, usize::MAX, now) {
            n += usize::from(state.store.remove(&k, now));
        }
    }
    n
}

/// ```text
/// CLUSTER COUNTKEYSINSLOT slot
/// ```
pub fn countkeysinslot(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    in_cluster(ctx)?;
    let slot = slot_arg(req, 2)?.ok_or_else(|| CmdError::err("Invalid slot"))?;
    // One shard of the store, never the keyspace: keys are sharded by slot
    // in cluster mode.
    let n = ctx.state.store.count_in_slot(slot, ctx.now);
    ctx.out.int(n as i64);
    Ok(())
}

/// ```text
/// CLUSTER GETKEYSINSLOT slot count
/// ```
pub fn getkeysinslot(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    in_cluster(ctx)?;
    let slot = slot_arg(req, 2)?;
    let count = int(req, 3)?;
    let (Some(slot), Ok(count)) = (slot, usize::try_from(count)) else {
        return Err(CmdError::err("Invalid slot or number of keys"));
    };
    let keys = ctx.state.store.keys_in_slot(slot, count, ctx.now);
    ctx.out.array(keys.len());
    for k in keys {
        ctx.out.bulk(&k);
    }
    Ok(())
}

fn write_node_entry(out: &mut ReplyBuf, n: &Node) {
    out.array(4);
    out.bulk_str(&n.host);
    out.int(i64::from(n.port));
    out.bulk_str(&n.id);
    out.map(0);
}

/// The members of shard `shard`, its primary first.
fn members(t: &Topology, shard: usize) -> impl Iterator<Item = (usize, &Node)> {
    let primary = t.primary_of(shard);
    std::iter::once(primary)
        .chain(
            t.shards[shard]
                .members
                .iter()
                .copied()
                .filter(move |&i| i != primary),
        )
        .map(|i| (i, &t.nodes[i]))
}

/// ```text
/// CLUSTER SLOTS
/// ```
/// Each range with its shard's primary, then its replicas.
pub fn slots(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if ctx.state.cluster_node.is_some() {
        return live(ctx, req);
    }
    let t = topology(ctx)?;
    let mut ranges: Vec<(u16, u16, usize)> = t
        .shards
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            t.nodes[s.members[0]]
                .ranges
                .iter()
                .map(move |&(a, b)| (a, b, i))
        })
        .collect();
    ranges.sort_by_key(|r| r.0);
    ctx.out.array(ranges.len());
    for (a, b, shard) in ranges {
        ctx.out.array(2 + t.shards[shard].members.len());
        ctx.out.int(i64::from(a));
        ctx.out.int(i64::from(b));
        for (_, n) in members(t, shard) {
            write_node_entry(ctx.out, n);
        }
    }
    Ok(())
}

/// ```text
/// CLUSTER SHARDS
/// ```
pub fn shards(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if ctx.state.cluster_node.is_some() {
        return live(ctx, req);
    }
    let t = topology(ctx)?;
    let offset = ctx.state.store.effects.offset() as i64;
    let out = &mut *ctx.out;
    out.array(t.shards.len());
    for (shard, s) in t.shards.iter().enumerate() {
        let ranges = &t.nodes[s.members[0]].ranges;
        out.map(2);
        out.bulk_str("slots");
        out.array(ranges.len() * 2);
        for &(a, b) in ranges {
            out.int(i64::from(a));
            out.int(i64::from(b));
        }
        out.bulk_str("nodes");
        out.array(s.members.len());
        for (i, n) in members(t, shard) {
            out.map(7);
            out.bulk_str("id");
            out.bulk_str(&n.id);
            out.bulk_str("port");
            out.int(i64::from(n.port));
            out.bulk_str("ip");
            out.bulk_str(&n.host);
            out.bulk_str("endpoint");
            out.bulk_str(&n.host);
            out.bulk_str("role");
            out.bulk_str(if t.is_primary(i) { "master" } else { "replica" });
            out.bulk_str("replication-offset");
            out.int(if i == t.me { offset } else { 0 });
            out.bulk_str("health");
            out.bulk_str("online");
        }
    }
    Ok(())
}

/// ```text
/// CLUSTER NODES
/// ```
/// One line per node, as Redis 7 writes them; the cluster bus port is
/// reported as port + 10000 though Turnstile runs no bus. A replica names
/// its primary and lists no slots.
pub fn nodes(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if ctx.state.cluster_node.is_some() {
        return live(ctx, req);
    }
    let t = topology(ctx)?;
    let mut text = String::new();
    for (i, n) in t.nodes.iter().enumerate() {
        let primary = t.primary_of(n.shard);
        let role = if primary == i { "master" } else { "slave" };
        let flags = if i == t.me {
            format!("myself,{role}")
        } else {
            role.to_string()
        };
        let of = if primary == i {
            "-"
        } else {
            &t.nodes[primary].id
        };
        let _ = write!(
            text,
            "{} {}:{}@{} {flags} {of} 0 0 {} connected",
            n.id,
            n.host,
            n.port,
            u32::from(n.port) + 10000,
            n.shard + 1
        );
        if primary == i {
            for &(a, b) in &n.ranges {
                if a == b {
                    let _ = write!(text, " {a}");
                } else {
                    let _ = write!(text, " {a}-{b}");
                }
            }
        }
        text.push('\n');
    }
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

/// ```text
/// CLUSTER HELP
/// ```
pub fn help(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    in_cluster(ctx)?;
    crate::cmd::registry::help::write_help(
        ctx,
        "CLUSTER",
        &[
            "COUNTKEYSINSLOT <slot>",
            "    Return the number of keys in <slot>.",
            "GETKEYSINSLOT <slot> <count>",
            "    Return key names stored by current node in a slot.",
            "INFO",
            "    Return information about the cluster.",
            "KEYSLOT <key>",
            "    Return the hash slot for <key>.",
            "MYID",
            "    Return the node id.",
            "NODES",
            "    Return cluster configuration seen by node. Output format:",
            "    <id> <ip:port@bus-port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
            "SHARDS",
            "    Return information about slot range mappings and the nodes associated with them.",
            "SLOTS",
            "    Return information about slots range mappings. Each range is made of:",
            "    start, end, master and replicas IP addresses, ports and ids",
        ],
    );
    Ok(())
}
