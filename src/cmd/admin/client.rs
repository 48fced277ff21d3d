//! CLIENT subcommands.

use super::args::{is, Cursor};
use super::{error::show, CmdError, Ctx};
use crate::cmd::registry::help::write_help;
use crate::cmd::Registry;
use crate::protocol::Request;
use crate::util::parse_i64;

/// Redis refuses names with spaces or newlines (they would break
/// `CLIENT LIST` lines).
pub fn validate_name(name: &[u8]) -> Result<(), CmdError> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(CmdError::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

/// ```text
/// CLIENT SETNAME name
/// ```
pub fn setname(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let name = req.arg(2);
    validate_name(name)?;
    *ctx.session.info.name.lock() = (!name.is_empty()).then(|| name.into());
    ctx.out.ok();
    Ok(())
}

/// ```text
/// CLIENT GETNAME
/// ```
pub fn getname(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let name = ctx.session.info.name.lock().clone();
    match name {
        Some(n) => ctx.out.bulk(&n),
        None => ctx.out.null(),
    }
    Ok(())
}

/// ```text
/// CLIENT SETINFO LIB-NAME name | LIB-VER version
/// ```
pub fn setinfo(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let (attr, value) = (req.arg(2), req.arg(3));
    let slot = if is(attr, "LIB-NAME") {
        &ctx.session.info.lib_name
    } else if is(attr, "LIB-VER") {
        &ctx.session.info.lib_ver
    } else {
        return Err(CmdError::err(format!(
            "Unrecognized option '{}'",
            show(attr)
        )));
    };
    if value.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(CmdError::err(format!(
            "{} cannot contain spaces, newlines or special characters.",
            show(attr)
        )));
    }
    *slot.lock() = (!value.is_empty()).then(|| value.into());
    ctx.out.ok();
    Ok(())
}

/// ```text
/// CLIENT ID
/// ```
pub fn id(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    ctx.out.int(ctx.session.info.id as i64);
    Ok(())
}

/// ```text
/// CLIENT INFO
/// ```
pub fn info(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let mut line = describe(ctx.registry, &ctx.session.info);
    line.push('\n');
    ctx.out.verbatim(line.as_bytes());
    Ok(())
}

/// The client types `CLIENT LIST` and `CLIENT KILL` filter by (Sentinel
/// sends `CLIENT KILL TYPE normal` and `TYPE pubsub` at failover). A
/// replica's link is a replica; a replica's own link to its primary is
/// not a client here, so no client is a master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientType {
    Normal,
    PubSub,
    Replica,
    Master,
}

impl ClientType {
    fn of(c: &crate::clients::ClientInfo) -> ClientType {
        if c.replica.load(std::sync::atomic::Ordering::Relaxed) {
            ClientType::Replica
        } else if c.is_pubsub() {
            ClientType::PubSub
        } else {
            ClientType::Normal
        }
    }
}

fn client_type(t: &[u8]) -> Result<ClientType, CmdError> {
    if is(t, "normal") {
        Ok(ClientType::Normal)
    } else if is(t, "pubsub") {
        Ok(ClientType::PubSub)
    } else if is(t, "replica") || is(t, "slave") {
        Ok(ClientType::Replica)
    } else if is(t, "master") {
        Ok(ClientType::Master)
    } else {
        Err(CmdError::err(format!("Unknown client type '{}'", show(t))))
    }
}

/// ```text
/// CLIENT LIST [TYPE NORMAL|MASTER|REPLICA|PUBSUB] [ID id [id ...]]
/// ```
pub fn list(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let mut ids: Option<Vec<u64>> = None;
    let mut kind = None;
    let mut c = Cursor::new(req, 2);
    while let Some(opt) = c.next() {
        if is(opt, "TYPE") && c.peek().is_some() {
            kind = Some(client_type(c.next_required()?)?);
        } else if is(opt, "ID") && c.peek().is_some() {
            // Every argument left is an id; one that is not an integer is
            // an error, one no client can have (0, negative) matches none,
            // as in Redis.
            let mut v = Vec::new();
            for arg in c.by_ref() {
                let n = parse_i64(arg).ok_or_else(|| CmdError::err("Invalid client ID"))?;
                if let Ok(id) = u64::try_from(n) {
                    v.push(id);
                }
            }
            ids = Some(v);
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let mut text = String::new();
    for c in ctx.state.clients.live() {
        if ids.as_ref().is_none_or(|ids| ids.contains(&c.id))
            && kind.is_none_or(|k| k == ClientType::of(&c))
        {
            text.push_str(&describe(ctx.registry, &c));
            text.push('\n');
        }
    }
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

/// Kills a client: another at once (its socket shut: it may be parked
/// waiting for a script), this one after its reply, as Redis does.
fn close(c: &crate::clients::ClientInfo, me: u64) {
    if c.id == me {
        c.kill();
    } else {
        c.close();
    }
}

/// ```text
/// CLIENT KILL ip:port
/// CLIENT KILL [ID id] [ADDR ip:port] [LADDR ip:port] [TYPE type]
///     [USER username] [SKIPME yes|no] ...
/// ```
/// `USER` keeps the connections authenticated as that user (an unknown
/// user is Redis's error). `MAXAGE` is Redis 7.4's: a syntax error, as in
/// Redis 7.0, rather than a filter ignored (which closed every client).
pub fn kill(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let clients = ctx.state.clients.live();
    if req.len() == 3 {
        // The old form: one address, and an error if nobody has it.
        let addr = req.arg(2);
        let target = clients
            .iter()
            .find(|c| c.addr.to_string().as_bytes() == addr);
        let Some(target) = target else {
            return Err(CmdError::err("No such client"));
        };
        close(target, ctx.session.info.id);
        ctx.out.ok();
        return Ok(());
    }
    let (mut id, mut addr, mut laddr, mut skipme) = (None, None, None, true);
    let mut kind = None;
    let mut user: Option<&[u8]> = None;
    let mut c = Cursor::new(req, 2);
    while let Some(opt) = c.next() {
        // Filters come in pairs; a lone word at the end is a syntax error.
        let val = c.next_required()?;
        if is(opt, "ID") {
            id = Some(match parse_i64(val) {
                Some(n) if n > 0 => n as u64,
                _ => return Err(CmdError::err("client-id should be greater than 0")),
            });
        } else if is(opt, "ADDR") {
            addr = Some(val);
        } else if is(opt, "LADDR") {
            laddr = Some(val);
        } else if is(opt, "SKIPME") {
            skipme = if is(val, "yes") {
                true
            } else if is(val, "no") {
                false
            } else {
                return Err(CmdError::Syntax);
            };
        } else if is(opt, "TYPE") {
            kind = Some(client_type(val)?);
        } else if is(opt, "USER") {
            if ctx.state.acl.get(val).is_none() {
                return Err(CmdError::err(format!(
                    "No such user '{}'",
                    String::from_utf8_lossy(&val[..val.len().min(128)])
                )));
            }
            user = Some(val);
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let me = ctx.session.info.id;
    let mut killed = 0;
    for c in clients {
        let hit = id.is_none_or(|id| c.id == id)
            && addr.is_none_or(|a| c.addr.to_string().as_bytes() == a)
            && laddr.is_none_or(|a| c.laddr.to_string().as_bytes() == a)
            && kind.is_none_or(|k| k == ClientType::of(&c))
            && user.is_none_or(|u| c.user.lock().as_deref().unwrap_or(b"default") == u)
            && !(skipme && c.id == me);
        if hit {
            close(&c, me);
            killed += 1;
        }
    }
    ctx.out.int(killed);
    Ok(())
}

/// ```text
/// CLIENT HELP
/// ```
pub fn help(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    write_help(
        ctx,
        "CLIENT",
        &[
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "INFO",
            "    Return information about the current client connection.",
            "KILL <ip:port>",
            "    Kill connection made from <ip:port>.",
            "KILL <option> <value> [<option> <value> [...]]",
            "    Kill connections. Options are: ID <client-id>, ADDR <ip:port>, LADDR <ip:port>, TYPE <type>, USER <username>, SKIPME (YES|NO).",
            "LIST [TYPE NORMAL] [ID <client-id> [...]]",
            "    Return information about client connections.",
            "SETINFO <option> <value>",
            "    Set client meta attribute: LIB-NAME or LIB-VER.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
        ],
    );
    Ok(())
}

/// One `CLIENT LIST` line for `info`, its last command named from the table.
pub fn describe(registry: &Registry, info: &crate::clients::ClientInfo) -> String {
    info.describe(&registry.full_name(info.last_command()))
}
