//! COMMAND and its subcommands: everything here is read from the command
//! table, so what clients learn is what dispatch enforces.

use super::args::is;
use super::{CmdError, CommandSpec, Ctx, Flags};
use crate::cmd::Registry;
use crate::glob;
use crate::protocol::{ReplyBuf, Request};

/// ```text
/// COMMAND
/// ```
pub fn all(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    ctx.out.array(ctx.registry.commands().len());
    for cmd in ctx.registry.commands() {
        write_info(ctx.out, cmd, None);
    }
    Ok(())
}

/// ```text
/// COMMAND COUNT
/// ```
pub fn count(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    ctx.out.int(ctx.registry.commands().len() as i64);
    Ok(())
}

/// ```text
/// COMMAND INFO [command-name ...]
/// ```
pub fn info(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if req.len() == 2 {
        return all(ctx, req);
    }
    ctx.out.array(req.len() - 2);
    for name in req.args().skip(2) {
        match find(ctx.registry, name) {
            Some((cmd, parent)) => write_info(ctx.out, cmd, parent),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

/// ```text
/// COMMAND DOCS [command-name ...]
/// ```
pub fn docs(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if req.len() == 2 {
        ctx.out.map(ctx.registry.commands().len());
        for cmd in ctx.registry.commands() {
            write_docs(ctx.out, cmd, None);
        }
        return Ok(());
    }
    let found: Vec<_> = req
        .args()
        .skip(2)
        .filter_map(|name| find(ctx.registry, name))
        .collect();
    ctx.out.map(found.len());
    for (cmd, parent) in found {
        write_docs(ctx.out, cmd, parent);
    }
    Ok(())
}

/// ```text
/// COMMAND LIST [FILTERBY MODULE module-name | ACLCAT category | PATTERN pattern]
/// ```
pub fn list(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    enum Filter<'a> {
        All,
        Module,
        AclCat(&'a [u8]),
        Pattern(&'a [u8]),
    }
    let filter = match req.len() {
        2 => Filter::All,
        5 if is(req.arg(2), "FILTERBY") => {
            let (kind, value) = (req.arg(3), req.arg(4));
            if is(kind, "MODULE") {
                Filter::Module
            } else if is(kind, "ACLCAT") {
                Filter::AclCat(value)
            } else if is(kind, "PATTERN") {
                Filter::Pattern(value)
            } else {
                return Err(CmdError::Syntax);
            }
        }
        _ => return Err(CmdError::Syntax),
    };
    let mut names = Vec::new();
    for cmd in ctx.registry.commands() {
        for (spec, name) in std::iter::once((cmd, cmd.name.to_string())).chain(
            cmd.subcommands
                .iter()
                .map(|s| (s, format!("{}|{}", cmd.name, s.name))),
        ) {
            let keep = match filter {
                Filter::All => true,
                Filter::Module => false,
                Filter::AclCat(cat) => spec.categories().names().any(|c| is(cat, &c[1..])),
                Filter::Pattern(p) => glob::matches(&p.to_ascii_lowercase(), name.as_bytes()),
            };
            if keep {
                names.push(name);
            }
        }
    }
    ctx.out.array(names.len());
    for n in names {
        ctx.out.bulk_str(&n);
    }
    Ok(())
}

/// ```text
/// COMMAND GETKEYS command [arg ...]
/// ```
pub fn getkeys(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let embedded: Vec<&[u8]> = req.args().skip(2).collect();
    let spec = match ctx.registry.resolve_in(&embedded) {
        Ok((cmd, sub)) => sub.unwrap_or(cmd),
        Err(CmdError::WrongArity(_)) => {
            return Err(CmdError::err(
                "Invalid number of arguments specified for command",
            ))
        }
        Err(_) => return Err(CmdError::err("Invalid command specified")),
    };
    let positions: Vec<usize> = match spec.key_finder {
        Some(find) => find(&embedded),
        None => spec.keys.positions(embedded.len()).collect(),
    };
    if positions.is_empty() {
        return Err(CmdError::err("The command has no key arguments"));
    }
    ctx.out.array(positions.len());
    for i in positions {
        ctx.out.bulk(embedded[i]);
    }
    Ok(())
}

/// ```text
/// COMMAND HELP
/// ```
pub fn help(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    crate::cmd::registry::help::write_help(
        ctx,
        "COMMAND",
        &[
            "(no subcommand)",
            "    Return details about all commands.",
            "COUNT",
            "    Return the total number of commands in this server.",
            "LIST",
            "    Return a list of all commands in this server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple commands.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple commands.",
            "GETKEYS <full-command>",
            "    Return the keys from a full command.",
        ],
    );
    Ok(())
}

/// A command by name, or a subcommand by `container|sub`, with its parent.
fn find(
    registry: &Registry,
    name: &[u8],
) -> Option<(&'static CommandSpec, Option<&'static CommandSpec>)> {
    match name.iter().position(|&b| b == b'|') {
        None => registry.lookup(name).map(|c| (c, None)),
        Some(bar) => {
            let parent = registry.lookup(&name[..bar])?;
            let sub = parent.find_subcommand(&name[bar + 1..])?;
            Some((sub, Some(parent)))
        }
    }
}

fn full_name(cmd: &CommandSpec, parent: Option<&CommandSpec>) -> String {
    match parent {
        Some(p) => format!("{}|{}", p.name, cmd.name),
        None => cmd.name.to_string(),
    }
}

/// One `COMMAND INFO` entry, in Redis 7's ten-field shape.
fn write_info(out: &mut ReplyBuf, cmd: &CommandSpec, parent: Option<&CommandSpec>) {
    out.array(10);
    out.bulk_str(&full_name(cmd, parent));
    out.int(cmd.arity as i64);
    let flags: Vec<_> = cmd.flags.names().collect();
    out.set(flags.len());
    for f in flags {
        out.simple(f);
    }
    out.int(cmd.keys.first as i64);
    out.int(cmd.keys.last as i64);
    out.int(cmd.keys.step as i64);
    let cats: Vec<_> = cmd.categories().names().collect();
    out.set(cats.len());
    for c in cats {
        out.simple(c);
    }
    out.array(0);
    write_key_specs(out, cmd);
    out.array(cmd.subcommands.len());
    for sub in cmd.subcommands {
        write_info(out, sub, Some(cmd));
    }
}

/// Redis 7 key specifications, derived from first/last/step; a
/// `movablekeys` command's keys follow each `LIMIT` keyword.
fn write_key_specs(out: &mut ReplyBuf, cmd: &CommandSpec) {
    if cmd.key_finder.is_none() && cmd.keys.first == 0 {
        out.array(0);
        return;
    }
    out.array(1);
    out.map(3);
    out.bulk_str("flags");
    let flags: &[&str] = if cmd.flags.contains(Flags::WRITE) {
        &["RW", "update"]
    } else {
        &["RO", "access"]
    };
    out.set(flags.len());
    for f in flags {
        out.simple(f);
    }
    out.bulk_str("begin_search");
    out.map(2);
    out.bulk_str("type");
    let (lastkey, step) = if cmd.key_finder.is_some() {
        out.bulk_str("keyword");
        out.bulk_str("spec");
        out.map(2);
        out.bulk_str("keyword");
        out.bulk_str("LIMIT");
        out.bulk_str("startfrom");
        out.int(1);
        (0, 1)
    } else {
        out.bulk_str("index");
        out.bulk_str("spec");
        out.map(1);
        out.bulk_str("index");
        out.int(i64::from(cmd.keys.first));
        let last = if cmd.keys.last < 0 {
            cmd.keys.last
        } else {
            cmd.keys.last - cmd.keys.first
        };
        (last, cmd.keys.step)
    };
    out.bulk_str("find_keys");
    out.map(2);
    out.bulk_str("type");
    out.bulk_str("range");
    out.bulk_str("spec");
    out.map(3);
    out.bulk_str("lastkey");
    out.int(i64::from(lastkey));
    out.bulk_str("keystep");
    out.int(i64::from(step));
    out.bulk_str("limit");
    out.int(0);
}

/// One `COMMAND DOCS` pair: name, then a map of its documentation.
fn write_docs(out: &mut ReplyBuf, cmd: &CommandSpec, parent: Option<&CommandSpec>) {
    out.bulk_str(&full_name(cmd, parent));
    let with_subs = !cmd.subcommands.is_empty();
    out.map(4 + with_subs as usize);
    out.bulk_str("summary");
    out.bulk_str(cmd.summary);
    out.bulk_str("since");
    out.bulk_str(cmd.since);
    out.bulk_str("group");
    out.bulk_str(cmd.group);
    out.bulk_str("complexity");
    out.bulk_str(cmd.complexity);
    if with_subs {
        out.bulk_str("subcommands");
        out.map(cmd.subcommands.len());
        for sub in cmd.subcommands {
            write_docs(out, sub, Some(cmd));
        }
    }
}
