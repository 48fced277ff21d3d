//! `CLUSTER ...` for a cluster that grows (`--cluster-enabled yes`): the
//! subcommands `redis-cli --cluster` sends, with Redis 7's replies and
//! errors, over the node's [`ClusterState`]. Every change goes through
//! [`ClusterNode::with`], which writes the config file and republishes
//! routing before the reply.

use super::args::int;
use super::{CmdError, CommandSpec, Ctx};
use crate::cluster::key_slot;
use crate::cluster::node::{now_ms, ClusterNode, Gate};
use crate::cluster::routing::Route;
use crate::cluster::slot::SLOTS;
use crate::cluster::state::{flag, ClusterState, Effects, FailoverMode, StateError};
use crate::protocol::Request;
use crate::store::keys::Keys;

/// The one slot a request's keys hash to (`None`: no keys), or
/// `CROSSSLOT`. Keys come from the command table, so every command routes
/// by the same positions `COMMAND` reports.
pub fn one_slot(spec: &CommandSpec, req: &Request<'_>) -> Result<Option<u16>, CmdError> {
    let mut slot: Option<u16> = None;
    spec.try_for_each_key(req, |key| {
        let s = key_slot(key);
        match slot {
            Some(first) if first != s => Err(CmdError::CrossSlot),
            _ => {
                slot = Some(s);
                Ok(())
            }
        }
    })?;
    Ok(slot)
}

/// The routing check for a keyed request (Redis's `getNodeByQuery`):
/// `CROSSSLOT`, `MOVED`, `ASK` while a slot moves, `TRYAGAIN` for a
/// multi-key request split by the move, `CLUSTERDOWN`.
/// A request on a slot being moved comes back holding the migration gate
/// ([`ClusterNode::gate`]), to be kept until it has run.
pub fn route(
    ctx: &mut Ctx<'_>,
    node: &ClusterNode,
    spec: &CommandSpec,
    req: &Request<'_>,
) -> Result<Option<Gate>, CmdError> {
    let slot = one_slot(spec, req)?;
    let asking =
        std::mem::take(&mut ctx.session.asking) || spec.flags.contains(super::Flags::ASKING);
    let Some(slot) = slot else {
        return Ok(None);
    };
    let routing = node.routing();
    let is_migrate = spec.name == "migrate";
    // MIGRATE takes the gate whole itself.
    let gate = (routing.is_open(slot) && !is_migrate).then(|| node.gate.read_arc());
    // The keys themselves matter only on a slot being moved (which are
    // here); every other request routes by its slot alone.
    let mut keys: smallvec::SmallVec<[&[u8]; 4]> = smallvec::SmallVec::new();
    if gate.is_some() {
        let _ = spec.try_for_each_key(req, |k| {
            keys.push(k);
            Ok::<(), CmdError>(())
        });
    }
    let db = ctx.db;
    let now = ctx.now;
    let read_replica = ctx.session.readonly && !spec.flags.contains(super::Flags::WRITE);
    let route = routing.route(
        slot,
        keys.iter().copied(),
        |k| db.exists(k, now),
        asking,
        read_replica,
        is_migrate,
    );
    // A node cut off from a majority of the primaries serves no key (Redis's
    // cluster_state:fail in a minority partition, with
    // cluster-allow-reads-when-down no), so a primary on the minority side
    // stops admitting against limits the majority side now serves.
    let route = match route {
        Route::Unbound => Route::Unbound,
        _ if !routing.in_majority(now_ms()) => Route::Down,
        r => r,
    };
    match route {
        // A primary pausing for its replica's manual failover refuses
        // writes until the replica took over (then they get MOVED) or the
        // failover timed out. Redis holds such clients instead; TRYAGAIN
        // is retried by every cluster client.
        Route::Local
            if routing.writes_paused
                && (spec.flags.contains(super::Flags::WRITE) || spec.group == "scripting") =>
        {
            Err(CmdError::Prefixed(
                "TRYAGAIN Writes are paused for a manual failover".into(),
            ))
        }
        Route::Local => Ok(gate),
        Route::Moved(s, addr) => Err(CmdError::Moved(s, addr)),
        Route::Ask(s, addr) => Err(CmdError::Prefixed(format!("ASK {s} {addr}").into())),
        Route::TryAgain => Err(CmdError::Prefixed(
            "TRYAGAIN Multiple keys request during rehashing of slot".into(),
        )),
        Route::Unbound => Err(CmdError::SlotNotServed),
        Route::Down => Err(CmdError::Prefixed("CLUSTERDOWN The cluster is down".into())),
    }
}

/// Redis's wording for the state's refusals.
fn refuse(e: StateError) -> CmdError {
    match e {
        StateError::UnknownNode(id) => CmdError::err(format!("Unknown node {id}")),
        other => CmdError::err(other.to_string()),
    }
}

fn change<R>(
    node: &ClusterNode,
    f: impl FnOnce(&mut ClusterState) -> Result<R, StateError>,
) -> Result<R, CmdError> {
    node.with(|st| match f(st) {
        Ok(r) => (Ok(r), Effects::default()),
        Err(e) => (Err(refuse(e)), Effects::default()),
    })
}

/// [`change`] for a change that also asks something of the server.
fn change_fx(
    node: &ClusterNode,
    f: impl FnOnce(&mut ClusterState) -> Result<Effects, StateError>,
) -> Result<(), CmdError> {
    node.with(|st| match f(st) {
        Ok(fx) => (Ok(()), fx),
        Err(e) => (Err(refuse(e)), Effects::default()),
    })
}

/// A slot argument as Redis reads one (`getSlotOrReply`).
fn slot_at(req: &Request<'_>, i: usize) -> Result<u16, CmdError> {
    std::str::from_utf8(req.arg(i))
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|n| u16::try_from(n).ok())
        .filter(|&s| s < SLOTS)
        .ok_or_else(|| CmdError::err("Invalid or out of range slot"))
}

/// The slots of `ADDSLOTS`/`DELSLOTS` (one each) or of their `RANGE`
/// forms (pairs), each named once.
fn slot_list(req: &Request<'_>, ranges: bool) -> Result<Vec<u16>, CmdError> {
    let n = req.len();
    // The table's arity already asks for one slot, or one pair.
    if ranges && !(n - 2).is_multiple_of(2) {
        return Err(CmdError::err(format!(
            "wrong number of arguments for 'cluster|{}' command",
            String::from_utf8_lossy(req.arg(1)).to_lowercase()
        )));
    }
    let mut seen = vec![false; SLOTS as usize];
    let mut out = Vec::new();
    let mut push = |s: u16| -> Result<(), CmdError> {
        if std::mem::replace(&mut seen[s as usize], true) {
            return Err(CmdError::err(format!("Slot {s} specified multiple times")));
        }
        out.push(s);
        Ok(())
    };
    if ranges {
        let mut i = 2;
        while i < n {
            let (a, b) = (slot_at(req, i)?, slot_at(req, i + 1)?);
            if a > b {
                return Err(CmdError::err(format!(
                    "start slot number {a} is greater than end slot number {b}"
                )));
            }
            for s in a..=b {
                push(s)?;
            }
            i += 2;
        }
    } else {
        for i in 2..n {
            push(slot_at(req, i)?)?;
        }
    }
    Ok(out)
}

fn keys_in(ctx: &Ctx<'_>, slot: u16) -> usize {
    ctx.state.store.count_in_slot(slot, ctx.now)
}

/// Runs one `CLUSTER` subcommand of a growing cluster; `None` if it is one
/// the static handlers answer the same way for both modes.
pub fn run(ctx: &mut Ctx<'_>, req: &Request<'_>, node: &ClusterNode) -> Result<(), CmdError> {
    let sub = String::from_utf8_lossy(req.arg(1)).to_ascii_lowercase();
    match sub.as_str() {
        "info" => {
            let st = node.lock_state();
            let (mut pfail, mut fail) = (0usize, 0usize);
            for n in st.nodes.values() {
                if n.has(flag::FAIL) {
                    fail += n.slots.len();
                } else if n.has(flag::PFAIL) {
                    pfail += n.slots.len();
                }
            }
            let assigned = st.assigned();
            let text = format!(
                "cluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{}\r\ncluster_slots_pfail:{pfail}\r\ncluster_slots_fail:{fail}\r\ncluster_known_nodes:{}\r\ncluster_size:{}\r\ncluster_current_epoch:{}\r\ncluster_my_epoch:{}\r\ncluster_stats_messages_sent:{}\r\ncluster_stats_messages_received:{}\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
                if st.state_ok(now_ms()) { "ok" } else { "fail" },
                assigned - pfail - fail,
                st.nodes.values().filter(|n| !n.in_handshake()).count(),
                st.size(),
                st.current_epoch,
                st.nodes.get(st.my_primary()).map_or(0, |n| n.config_epoch),
                st.messages_sent,
                st.messages_received,
            );
            drop(st);
            ctx.out.verbatim(text.as_bytes());
        }
        "myid" => {
            let id = node.lock_state().myself.clone();
            ctx.out.bulk_str(&id);
        }
        "nodes" => {
            let text = node.lock_state().nodes_text();
            ctx.out.verbatim(text.as_bytes());
        }
        "slots" => slots(ctx, node),
        "shards" => shards(ctx, node),
        "meet" => {
            if req.len() != 4 && req.len() != 5 {
                return Err(CmdError::err(
                    "wrong number of arguments for 'cluster|meet' command",
                ));
            }
            let ip = String::from_utf8_lossy(req.arg(2)).into_owned();
            let bad = || {
                CmdError::err(format!(
                    "Invalid node address specified: {ip}:{}",
                    String::from_utf8_lossy(req.arg(3))
                ))
            };
            let port = int(req, 3).map_err(|_| {
                CmdError::err(format!(
                    "Invalid base port specified: {}",
                    String::from_utf8_lossy(req.arg(3))
                ))
            })?;
            let cport = if req.len() == 5 {
                int(req, 4).map_err(|_| {
                    CmdError::err(format!(
                        "Invalid bus port specified: {}",
                        String::from_utf8_lossy(req.arg(4))
                    ))
                })?
            } else {
                port + 10000
            };
            // Redis takes an IP address only: a name is resolved by the
            // caller (redis-cli does).
            if ip.parse::<std::net::IpAddr>().is_err()
                || !(1..=65535).contains(&port)
                || !(1..=65535).contains(&cport)
            {
                return Err(bad());
            }
            node.with(|st| {
                (
                    st.start_handshake(&ip, port as u16, cport as u16, now_ms()),
                    Effects::default(),
                )
            });
            ctx.out.ok();
        }
        "addslots" | "addslotsrange" => {
            let slots = slot_list(req, sub == "addslotsrange")?;
            change(node, |st| st.add_slots(&slots))?;
            node.broadcast();
            ctx.out.ok();
        }
        "delslots" | "delslotsrange" => {
            let slots = slot_list(req, sub == "delslotsrange")?;
            change(node, |st| st.del_slots(&slots))?;
            node.broadcast();
            ctx.out.ok();
        }
        "setslot" => setslot(ctx, req, node)?,
        "getkeysinslot" | "countkeysinslot" | "keyslot" | "help" => {
            return Err(CmdError::err("unreachable: answered by the shared handler"));
        }
        "replicate" => {
            let id = String::from_utf8_lossy(req.arg(2)).into_owned();
            let has_keys = !ctx.db.is_empty();
            change_fx(node, |st| st.replicate(&id, has_keys))?;
            node.broadcast();
            ctx.out.ok();
        }
        "forget" => {
            let id = String::from_utf8_lossy(req.arg(2)).into_owned();
            change(node, |st| st.forget(&id, now_ms()))?;
            ctx.out.ok();
        }
        "reset" => {
            let hard = match req.len() {
                2 => false,
                3 if req.arg(2).eq_ignore_ascii_case(b"hard") => true,
                3 if req.arg(2).eq_ignore_ascii_case(b"soft") => false,
                _ => return Err(CmdError::Syntax),
            };
            let primary_with_keys = node.lock_state().me().is_primary() && !ctx.db.is_empty();
            if primary_with_keys {
                return Err(CmdError::err(
                    "CLUSTER RESET can't be called with master nodes containing keys",
                ));
            }
            node.with(|st| ((), st.reset(hard)));
            ctx.out.ok();
        }
        "bumpepoch" => {
            let (bumped, epoch) = node.with(|st| {
                let b = st.bump_epoch();
                ((b, st.me().config_epoch), Effects::default())
            });
            if bumped {
                node.broadcast();
            }
            ctx.out.simple(&format!(
                "{} {epoch}",
                if bumped { "BUMPED" } else { "STILL" }
            ));
        }
        "set-config-epoch" => {
            let epoch = int(req, 2)?;
            change(node, |st| st.set_config_epoch(epoch))?;
            ctx.out.ok();
        }
        "saveconfig" => {
            node.save_now()
                .map_err(|e| CmdError::err(format!("error saving the cluster node config: {e}")))?;
            ctx.out.ok();
        }
        "failover" => {
            let mode = match req.len() {
                2 => FailoverMode::Default,
                3 if req.arg(2).eq_ignore_ascii_case(b"force") => FailoverMode::Force,
                3 if req.arg(2).eq_ignore_ascii_case(b"takeover") => FailoverMode::Takeover,
                3 => return Err(CmdError::Syntax),
                _ => {
                    return Err(CmdError::err(
                        "wrong number of arguments for 'cluster|failover' command",
                    ))
                }
            };
            change_fx(node, |st| st.manual_failover(mode, now_ms()))?;
            ctx.out.ok();
        }
        "count-failure-reports" => {
            let id = String::from_utf8_lossy(req.arg(2)).into_owned();
            let st = node.lock_state();
            let n = st
                .nodes
                .get(&id)
                .ok_or_else(|| CmdError::err(format!("Unknown node {id}")))?
                .fail_reports
                .len();
            drop(st);
            ctx.out.int(n as i64);
        }
        _ => {
            return Err(CmdError::err(format!(
                "unknown subcommand '{}'. Try CLUSTER HELP.",
                String::from_utf8_lossy(req.arg(1))
            )))
        }
    }
    Ok(())
}

/// `CLUSTER SETSLOT slot IMPORTING id | MIGRATING id | STABLE | NODE id`.
fn setslot(ctx: &mut Ctx<'_>, req: &Request<'_>, node: &ClusterNode) -> Result<(), CmdError> {
    if !node.lock_state().me().is_primary() {
        return Err(CmdError::err("Please use SETSLOT only with masters."));
    }
    let slot = slot_at(req, 2)?;
    let action = String::from_utf8_lossy(req.arg(3)).to_ascii_lowercase();
    let id = (req.len() == 5).then(|| String::from_utf8_lossy(req.arg(4)).into_owned());
    let unknown = |id: &str| CmdError::err(format!("I don't know about node {id}"));
    let known = |id: &str| node.lock_state().nodes.contains_key(id);
    match (action.as_str(), id) {
        ("migrating", Some(id)) => {
            if !known(&id) {
                return Err(unknown(&id));
            }
            change(node, |st| st.set_migrating(slot, &id))?;
        }
        ("importing", Some(id)) => {
            if !known(&id) {
                return Err(unknown(&id));
            }
            change(node, |st| st.set_importing(slot, &id))?;
        }
        ("stable", None) => change(node, |st| st.set_stable(slot))?,
        ("node", Some(id)) => {
            if !known(&id) {
                return Err(unknown(&id));
            }
            let keys = keys_in(ctx, slot);
            change_fx(node, |st| st.set_node(slot, &id, keys))?;
            // The node that took the slot tells everyone at once (Redis
            // broadcasts a PONG then); the others' news travels by gossip,
            // and redis-cli tells each of them itself.
            if node.lock_state().myself == id {
                node.broadcast();
            }
        }
        _ => {
            return Err(CmdError::err(
                "Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP",
            ))
        }
    }
    ctx.out.ok();
    Ok(())
}

/// A primary and its replicas, the primary first, as routing lists them.
fn shard_members(st: &ClusterState, primary: &str) -> Vec<String> {
    let mut out = vec![primary.to_string()];
    out.extend(
        st.nodes
            .values()
            .filter(|n| {
                n.primary.as_deref() == Some(primary) && !n.has(flag::FAIL) && !n.in_handshake()
            })
            .map(|n| n.id.clone()),
    );
    out
}

/// `CLUSTER SLOTS`: each range with its primary, then its replicas.
fn slots(ctx: &mut Ctx<'_>, node: &ClusterNode) {
    let st = node.lock_state();
    let mut ranges: Vec<(u16, u16, String)> = st
        .nodes
        .values()
        .filter(|n| n.is_primary())
        .flat_map(|n| {
            n.slots
                .ranges()
                .into_iter()
                .map(move |(a, b)| (a, b, n.id.clone()))
        })
        .collect();
    // A freed slot under the node that gave it away, as routing has it.
    ranges.extend(
        st.released()
            .filter(|(_, prev)| st.nodes.contains_key(*prev))
            .map(|(s, prev)| (s, s, prev.to_string())),
    );
    ranges.sort_by_key(|r| r.0);
    let out = &mut *ctx.out;
    out.array(ranges.len());
    for (a, b, id) in ranges {
        let members = shard_members(&st, &id);
        out.array(2 + members.len());
        out.int(i64::from(a));
        out.int(i64::from(b));
        for m in members {
            let n = &st.nodes[&m];
            out.array(4);
            out.bulk_str(&n.ip);
            out.int(i64::from(n.port));
            out.bulk_str(&n.id);
            out.map(0);
        }
    }
}

/// `CLUSTER SHARDS`.
fn shards(ctx: &mut Ctx<'_>, node: &ClusterNode) {
    let st = node.lock_state();
    let offset = ctx.state.store.effects.offset() as i64;
    let primaries: Vec<&crate::cluster::state::Node> = st
        .nodes
        .values()
        .filter(|n| n.is_primary() && !n.in_handshake())
        .collect();
    let out = &mut *ctx.out;
    out.array(primaries.len());
    for p in primaries {
        let ranges = p.slots.ranges();
        out.map(2);
        out.bulk_str("slots");
        out.array(ranges.len() * 2);
        for (a, b) in ranges {
            out.int(i64::from(a));
            out.int(i64::from(b));
        }
        out.bulk_str("nodes");
        let members = shard_members(&st, &p.id);
        out.array(members.len());
        for m in members {
            let n = &st.nodes[&m];
            let mut health = "online";
            if n.has(flag::FAIL | flag::PFAIL) {
                health = "failed";
            }
            out.map(7);
            out.bulk_str("id");
            out.bulk_str(&n.id);
            out.bulk_str("port");
            out.int(i64::from(n.port));
            out.bulk_str("ip");
            out.bulk_str(&n.ip);
            out.bulk_str("endpoint");
            out.bulk_str(&n.ip);
            out.bulk_str("role");
            out.bulk_str(if n.is_primary() { "master" } else { "replica" });
            out.bulk_str("replication-offset");
            out.int(if n.id == st.myself {
                offset
            } else {
                n.repl_offset as i64
            });
            out.bulk_str("health");
            out.bulk_str(health);
        }
    }
}
