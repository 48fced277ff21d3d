//! `ACL`: users and their rules (`crate::acl`), with Redis 7.0's replies.
//! `ACL LOAD` and `ACL SAVE` read and write `--aclfile`
//! (`crate::acl::file`), and answer as Redis does without one.

use super::args::int;
use super::error::show;
use super::{CmdError, Ctx};
use crate::acl::Category;
use crate::protocol::Request;

/// ```text
/// ACL SETUSER username [rule [rule ...]]
/// ```
/// A user's subscribers whose channels or patterns the new rules deny
/// are disconnected, as Redis's `ACLKillPubsubClientsIfNeeded` does.
pub fn setuser(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let name = req.arg(2);
    let rules: Vec<&[u8]> = req.args().skip(3).collect();
    let acl = &ctx.state.acl;
    let old = acl.get(name).map(|c| c.load());
    acl.set_user(ctx.registry.acl(), name, &rules)
        .map_err(CmdError::err)?;
    if let (Some(old), Some(new)) = (old, acl.get(name).map(|c| c.load())) {
        if !new.channels_cover(&old) {
            close_denied_subscribers(ctx, &new);
        }
    }
    ctx.out.ok();
    Ok(())
}

fn close_denied_subscribers(ctx: &mut Ctx<'_>, user: &crate::acl::User) {
    let mut denied = Vec::new();
    ctx.state
        .pubsub
        .each_subscription(|pattern, channel, info| {
            let theirs = match info.user.lock().as_deref() {
                Some(name) => name == &user.name[..],
                None => &*user.name == b"default",
            };
            if theirs && !user.may_use_channel(channel, pattern) {
                denied.push(info.clone());
            }
        });
    for info in denied {
        if info.id == ctx.session.info.id {
            ctx.session.close_after_reply = true;
        } else {
            info.close();
        }
    }
}

/// ```text
/// ACL GETUSER username
/// ```
pub fn getuser(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let Some(cell) = ctx.state.acl.get(req.arg(2)) else {
        ctx.out.null();
        return Ok(());
    };
    let u = cell.load();
    let out = &mut *ctx.out;
    out.map(6);
    out.bulk_str("flags");
    let flags = u.flags();
    out.set(flags.len());
    for f in flags {
        out.bulk_str(f);
    }
    out.bulk_str("passwords");
    let hashes = u.password_hashes();
    out.array(hashes.len());
    for h in hashes {
        out.bulk_str(&h);
    }
    out.bulk_str("commands");
    out.bulk_str(&u.command_rules(ctx.registry.acl()));
    out.bulk_str("keys");
    out.bulk_str(&u.key_rules());
    out.bulk_str("channels");
    out.bulk_str(&u.channel_rules());
    out.bulk_str("selectors");
    let selectors = u.extra_selectors();
    out.array(selectors.len());
    for s in selectors {
        out.map(3);
        out.bulk_str("commands");
        out.bulk_str(&s.command_rules(ctx.registry.acl()));
        out.bulk_str("keys");
        out.bulk_str(&s.key_rules());
        out.bulk_str("channels");
        out.bulk_str(&s.channel_rules());
    }
    Ok(())
}

/// ```text
/// ACL DELUSER username [username ...]
/// ```
/// Closes the connections authenticated as a deleted user, this one after
/// its reply, as Redis does.
pub fn deluser(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let names: Vec<&[u8]> = req.args().skip(2).collect();
    if names.iter().any(|n| *n == b"default") {
        return Err(CmdError::err("The 'default' user cannot be removed"));
    }
    let gone = ctx.state.acl.delete(&names);
    close_connections_of(ctx, &gone);
    ctx.out.int(gone.len() as i64);
    Ok(())
}

/// Closes the connections authenticated as these (deleted) users, this
/// one after its reply.
fn close_connections_of(ctx: &mut Ctx<'_>, gone: &[std::sync::Arc<crate::acl::UserCell>]) {
    for cell in gone {
        let name = &cell.load().name;
        for client in ctx.state.clients.all() {
            if client.user.lock().as_deref() != Some(&name[..]) {
                continue;
            }
            if client.id == ctx.session.info.id {
                ctx.session.close_after_reply = true;
            } else {
                client.close();
            }
        }
    }
}

/// ```text
/// ACL USERS
/// ```
pub fn users(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let users = ctx.state.acl.users();
    ctx.out.array(users.len());
    for u in users {
        ctx.out.bulk(&u.name);
    }
    Ok(())
}

/// ```text
/// ACL LIST
/// ```
/// Each user as a line of an ACL file; passwords as their digests only.
pub fn list(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let users = ctx.state.acl.users();
    ctx.out.array(users.len());
    for u in users {
        let mut line = b"user ".to_vec();
        line.extend_from_slice(&u.name);
        line.push(b' ');
        line.extend_from_slice(&u.describe(ctx.registry.acl()));
        ctx.out.bulk(&line);
    }
    Ok(())
}

/// ```text
/// ACL WHOAMI
/// ```
pub fn whoami(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    match &ctx.session.user {
        Some(cell) => ctx.out.bulk(&cell.load().name),
        None => ctx.out.bulk(b"default"),
    }
    Ok(())
}

/// ```text
/// ACL CAT [category]
/// ```
pub fn cat(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    match req.len() {
        2 => {
            ctx.out.array(crate::acl::CATEGORIES.len());
            for c in Category::all() {
                ctx.out.bulk_str(c.name());
            }
        }
        3 => {
            let Some(c) = Category::by_name(req.arg(2)) else {
                let name = req.arg(2);
                return Err(CmdError::err(format!(
                    "Unknown category '{}'",
                    show(&name[..name.len().min(128)])
                )));
            };
            let names: Vec<&str> = ctx.registry.acl().in_category(c).collect();
            ctx.out.array(names.len());
            for n in names {
                ctx.out.bulk_str(n);
            }
        }
        _ => return Err(wrong_args(req)),
    }
    Ok(())
}

/// Redis's reply to a subcommand given too many arguments.
fn wrong_args(req: &Request<'_>) -> CmdError {
    CmdError::err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try ACL HELP.",
        show(req.arg(1))
    ))
}

/// Most bits `ACL GENPASS` gives.
const GENPASS_MAX_BITS: i64 = 4096;

/// ```text
/// ACL GENPASS [bits]
/// ```
pub fn genpass(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let bits = match req.len() {
        2 => 256,
        3 => int(req, 2).map_err(|_| CmdError::NotInteger)?,
        _ => return Err(wrong_args(req)),
    };
    if bits <= 0 || bits > GENPASS_MAX_BITS {
        return Err(CmdError::err(format!(
            "ACL GENPASS argument must be the number of bits for the output password, a positive number up to {GENPASS_MAX_BITS}"
        )));
    }
    let chars = ((bits + 3) / 4) as usize;
    let mut bytes = vec![0u8; chars.div_ceil(2)];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| CmdError::err("no randomness available"))?;
    let mut pass = String::with_capacity(chars + 1);
    for b in bytes {
        pass.push_str(&format!("{b:02x}"));
    }
    pass.truncate(chars);
    ctx.out.bulk_str(&pass);
    Ok(())
}

/// ```text
/// ACL DRYRUN username command [arg ...]
/// ```
/// Whether the user could run the command, without running it: `+OK`, or
/// a bulk string saying why not.
pub fn dryrun(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let Some(cell) = ctx.state.acl.get(req.arg(2)) else {
        return Err(CmdError::err(format!(
            "User '{}' not found",
            show(req.arg(2))
        )));
    };
    let embedded = req.tail(3);
    let (cmd, sub) = ctx.registry.resolve(&embedded).map_err(|e| match e {
        CmdError::WrongArity(_) => e,
        _ => CmdError::err(format!("Command '{}' not found", show(req.arg(3)))),
    })?;
    let user = cell.load();
    let why = crate::cmd::exec::permit::permit(ctx.registry, &user, false, cmd, sub, &embedded);
    use crate::cmd::exec::permit::Refused;
    let text = match why {
        Ok(()) => {
            ctx.out.ok();
            return Ok(());
        }
        Err(Refused::Command) => format!(
            "This user has no permissions to run the '{}' command",
            crate::cmd::exec::permit::full_name(cmd, sub)
        ),
        Err(Refused::Key(k)) => format!(
            "This user has no permissions to access the '{}' key",
            show(k)
        ),
        Err(Refused::Channel(c)) => format!(
            "This user has no permissions to access the '{}' channel",
            show(c)
        ),
    };
    ctx.out.bulk_str(&text);
    Ok(())
}

/// ```text
/// ACL LOG [count | RESET]
/// ```
/// The latest refusals, newest first (10 by default).
pub fn log(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let count = match req.len() {
        2 => 10,
        3 if super::args::is(req.arg(2), "RESET") => {
            ctx.state.acl.log.reset();
            ctx.out.ok();
            return Ok(());
        }
        3 => int(req, 2).map_err(|_| CmdError::NotInteger)?.max(0) as usize,
        _ => return Err(wrong_args(req)),
    };
    let now = ctx.now.as_millis();
    let entries = ctx.state.acl.log.latest(count);
    let out = &mut *ctx.out;
    out.array(entries.len());
    for e in entries {
        out.map(7);
        out.bulk_str("count");
        out.int(e.count as i64);
        out.bulk_str("reason");
        out.bulk_str(e.reason.name());
        out.bulk_str("context");
        out.bulk_str(e.context.name());
        out.bulk_str("object");
        out.bulk(&e.object);
        out.bulk_str("username");
        out.bulk(&e.username);
        out.bulk_str("age-seconds");
        out.score(now.saturating_sub(e.ms) as f64 / 1000.0);
        out.bulk_str("client-info");
        out.bulk_str(&e.client);
    }
    Ok(())
}

/// Redis's answer to `ACL LOAD` or `ACL SAVE` without an ACL file.
fn no_file() -> CmdError {
    CmdError::err(
        "This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.",
    )
}

/// ```text
/// ACL LOAD
/// ```
/// The users of `--aclfile` replace the users in force, all or nothing: a
/// file with any bad line changes nothing and the reply lists every
/// error. Users the file no longer has are deleted as by `ACL DELUSER`
/// (their connections close); users whose rules changed take them as by
/// `ACL SETUSER` (subscribers to channels now denied are closed). Redis
/// 7.0 closes every connection of every user but `default`, changed or
/// not; connections whose user kept its rules stay open here.
pub fn load(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let Some(path) = ctx.state.settings.config.aclfile.clone() else {
        return Err(no_file());
    };
    let users = crate::acl::file::read(&path, ctx.registry.acl()).map_err(CmdError::err)?;
    let password = ctx.state.settings.password();
    let done = ctx.state.acl.replace(users, password.as_deref());
    close_connections_of(ctx, &done.gone);
    for (old, new) in &done.changed {
        if !new.channels_cover(old) {
            close_denied_subscribers(ctx, new);
        }
    }
    ctx.out.ok();
    Ok(())
}

/// ```text
/// ACL SAVE
/// ```
/// Every user, as `ACL LIST` prints it, to `--aclfile`: a temporary file
/// beside it, fsynced, renamed over it (as `CONFIG REWRITE` writes), so
/// the file is the old one or the new one, never half of either.
/// Passwords only as their digests. Redis's reply on failure; the cause
/// is logged.
pub fn save(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let Some(path) = ctx.state.settings.config.aclfile.clone() else {
        return Err(no_file());
    };
    let failed = |why: String| {
        tracing::warn!(path = %path.display(), "ACL SAVE: {why}");
        CmdError::err(
            "There was an error trying to save the ACLs. Please check the server logs for more information",
        )
    };
    let users = ctx.state.acl.users();
    let text = crate::acl::file::render(users.iter().map(|u| &**u), ctx.registry.acl())
        .map_err(&failed)?;
    super::config::write_file(&path, &text).map_err(|e| failed(e.to_string()))?;
    ctx.out.ok();
    Ok(())
}

/// ```text
/// ACL HELP
/// ```
pub fn help(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    crate::cmd::registry::help::write_help(
        ctx,
        "ACL",
        &[
            "CAT [<category>]",
            "    List all commands that belong to <category>, or all command categories",
            "    when no category is specified.",
            "DELUSER <username> [<username> ...]",
            "    Delete a list of users.",
            "DRYRUN <username> <command> [<arg> ...]",
            "    Returns whether the user can execute the given command without executing the command.",
            "GETUSER <username>",
            "    Get the user's details.",
            "GENPASS [<bits>]",
            "    Generate a secure 256-bit user password. The optional `bits` argument can",
            "    be used to specify a different size.",
            "LIST",
            "    Show users details in config file format.",
            "LOAD",
            "    Reload users from the ACL file.",
            "LOG [<count> | RESET]",
            "    Show the ACL log entries.",
            "SAVE",
            "    Save the current config to the ACL file.",
            "SETUSER <username> <attribute> [<attribute> ...]",
            "    Create or modify a user with the specified attributes.",
            "USERS",
            "    List all the registered usernames.",
            "WHOAMI",
            "    Return the current connection username.",
        ],
    );
    Ok(())
}
