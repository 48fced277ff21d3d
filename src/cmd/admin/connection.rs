//! Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET.

use std::sync::atomic::Ordering;

use super::args::{int, is, Cursor};
use super::{CmdError, Ctx};
use crate::acl::log::{Context, Reason};
use crate::protocol::{Protocol, Request};

/// ```text
/// PING [message]
/// ```
pub fn ping(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    // A RESP2 subscriber's replies share the stream with its messages:
    // Redis answers it with an array.
    if ctx.session.subscriptions() > 0 && ctx.out.proto == Protocol::Resp2 {
        if req.len() > 2 {
            return Err(CmdError::WrongArity("ping".into()));
        }
        ctx.out.array(2);
        ctx.out.bulk(b"pong");
        ctx.out.bulk(if req.len() == 2 { req.arg(1) } else { b"" });
        return Ok(());
    }
    match req.len() {
        1 => ctx.out.simple("PONG"),
        2 => ctx.out.bulk(req.arg(1)),
        _ => return Err(CmdError::WrongArity("ping".into())),
    }
    Ok(())
}

/// ```text
/// ECHO message
/// ```
pub fn echo(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    ctx.out.bulk(req.arg(1));
    Ok(())
}

/// Authenticates the connection as `user` (`default` when not given) if
/// the user exists, is on, and takes `pass` (`Acl::authenticate`: digests
/// compared in constant time, so the reply time says nothing about how
/// much of a guess was right, nor about the password's length).
/// A wrong password is logged for `ACL LOG` under the command that gave
/// it (`via`, as sent) and the user it named.
fn check_password(
    ctx: &mut Ctx<'_>,
    via: &[u8],
    user: Option<&[u8]>,
    pass: &[u8],
) -> Result<(), CmdError> {
    let acl = &ctx.state.acl;
    if user.is_none() && acl.default_user().load().nopass {
        return Err(CmdError::err(
            "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
        ));
    }
    let name = user.unwrap_or(b"default");
    match acl.authenticate(name, pass) {
        Some(cell) => {
            ctx.session.authenticated = true;
            let default = std::sync::Arc::ptr_eq(&cell, acl.default_user());
            ctx.session.set_user((!default).then_some(cell));
            Ok(())
        }
        None => {
            ctx.state
                .stats
                .counters
                .inc(crate::metrics::table::AUTH_FAILURES);
            let context = match ctx.session.tx.in_multi() {
                true => Context::Multi,
                false => Context::Toplevel,
            };
            let command = String::from_utf8_lossy(via).to_ascii_lowercase();
            crate::cmd::exec::permit::log_entry(
                ctx.state,
                ctx.session,
                ctx.now,
                Reason::Auth,
                context,
                via.into(),
                Some(name),
                &command,
            );
            Err(CmdError::WrongPass)
        }
    }
}

/// ```text
/// AUTH [username] password
/// ```
pub fn auth(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    match req.len() {
        2 => check_password(ctx, req.arg(0), None, req.arg(1))?,
        3 => check_password(ctx, req.arg(0), Some(req.arg(1)), req.arg(2))?,
        _ => return Err(CmdError::Syntax),
    }
    ctx.out.ok();
    Ok(())
}

/// ```text
/// HELLO [protover [AUTH username password] [SETNAME clientname]]
/// ```
pub fn hello(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let mut proto = ctx.out.proto;
    if req.len() >= 2 {
        proto = match int(req, 1) {
            Ok(2) => Protocol::Resp2,
            Ok(3) => Protocol::Resp3,
            Ok(_) => {
                return Err(CmdError::Prefixed(
                    "NOPROTO unsupported protocol version".into(),
                ))
            }
            Err(_) => {
                return Err(CmdError::err(
                    "Protocol version is not an integer or out of range",
                ))
            }
        };
    }
    let mut name = None;
    let mut c = Cursor::new(req, 2);
    while let Some(opt) = c.next() {
        let more = req.len() - c.position();
        if is(opt, "AUTH") && more >= 2 {
            let (user, pass) = (c.next_required()?, c.next_required()?);
            check_password(ctx, req.arg(0), Some(user), pass)?;
        } else if is(opt, "SETNAME") && more >= 1 {
            let given = c.next_required()?;
            super::client::validate_name(given)?;
            name = Some(given);
        } else {
            return Err(CmdError::err(format!(
                "Syntax error in HELLO option '{}'",
                super::error::show(opt)
            )));
        }
    }
    if !ctx.session.authenticated {
        return Err(CmdError::Prefixed(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into(),
        ));
    }
    if let Some(name) = name {
        *ctx.session.info.name.lock() = (!name.is_empty()).then(|| name.into());
    }
    ctx.out.proto = proto;
    ctx.session
        .info
        .resp
        .store(proto.version() as u8, Ordering::Relaxed);
    let out = &mut *ctx.out;
    out.map(7);
    out.bulk_str("server");
    out.bulk_str("redis");
    out.bulk_str("version");
    out.bulk_str(crate::protocol::REDIS_VERSION);
    out.bulk_str("proto");
    out.int(proto.version());
    out.bulk_str("id");
    out.int(ctx.session.info.id as i64);
    out.bulk_str("mode");
    out.bulk_str("standalone");
    out.bulk_str("role");
    out.bulk_str("master");
    out.bulk_str("modules");
    out.array(0);
    Ok(())
}

/// ```text
/// SELECT index
/// ```
/// Only database 0 exists: a limiter has no use for numbered databases.
pub fn select(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    match int(req, 1) {
        Ok(0) => {
            ctx.out.ok();
            Ok(())
        }
        Ok(_) => Err(CmdError::err("DB index is out of range")),
        Err(_) => Err(CmdError::NotInteger),
    }
}

/// ```text
/// QUIT
/// ```
pub fn quit(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    ctx.out.ok();
    ctx.session.close_after_reply = true;
    Ok(())
}

/// ```text
/// RESET
/// ```
/// Back to a fresh connection: RESP2, no name, the default user, and
/// (with a password set) not authenticated.
pub fn reset(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    ctx.out.proto = Protocol::Resp2;
    ctx.session.info.resp.store(2, Ordering::Relaxed);
    *ctx.session.info.name.lock() = None;
    ctx.session.authenticated = !ctx.state.acl.auth_required();
    ctx.session.set_user(None);
    // Discards a transaction and unwatches, as Redis's RESET does.
    if ctx.session.tx.in_multi() {
        let discarded = crate::stats::TxOutcome::Discarded as usize;
        ctx.state
            .stats
            .counters
            .add_at(crate::metrics::table::TRANSACTIONS, discarded, 1);
    }
    ctx.session.tx.clear(&ctx.state.store);
    super::pubsub::forget(ctx.state, ctx.session);
    ctx.session.readonly = false;
    ctx.out.simple("RESET");
    Ok(())
}
