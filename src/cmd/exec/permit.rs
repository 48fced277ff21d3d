//! Whether a connection's ACL user may run a request, as Redis's
//! `ACLSelectorCheckCmd` decides, and the errors that say why not at
//! dispatch, in `EXEC` and in a script: the one check the three share.

use crate::acl::log::{Context, Entry, Reason};
use crate::acl::{Access, Selector, User};
use crate::clock::Nanos;
use crate::cmd::exec::session::Session;
use crate::cmd::registry::error::CmdError;
use crate::cmd::registry::spec::{CommandSpec, Flags, Registry};
use crate::protocol::Request;
use crate::state::State;

/// What a user may not do with a request, and the argument that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused<'r> {
    Command,
    Key(&'r [u8]),
    Channel(&'r [u8]),
}

impl Refused<'_> {
    /// Redis's `-NOPERM` reply to a command refused at dispatch.
    pub fn noperm(self, cmd: &CommandSpec, sub: Option<&CommandSpec>) -> CmdError {
        CmdError::Prefixed(self.noperm_text(cmd, sub).into())
    }

    /// The text of [`Refused::noperm`].
    pub fn noperm_text(self, cmd: &CommandSpec, sub: Option<&CommandSpec>) -> String {
        match self {
            Refused::Command => format!(
                "NOPERM this user has no permissions to run the '{}' command",
                full_name(cmd, sub)
            ),
            Refused::Key(_) => {
                "NOPERM this user has no permissions to access one of the keys used as arguments"
                    .into()
            }
            Refused::Channel(_) => {
                "NOPERM this user has no permissions to access one of the channels used as arguments"
                    .into()
            }
        }
    }

    /// The reason a script's call was refused, in Redis's words
    /// (`getAclErrorMessage`).
    pub fn in_script(self) -> CmdError {
        CmdError::err(match self {
            Refused::Command => "The user executing the script can't run this command or subcommand",
            Refused::Key(_) => "The user executing the script can't access at least one of the keys mentioned in the command arguments",
            Refused::Channel(_) => "The user executing the script can't publish to the channel mentioned in the command",
        })
    }

    /// `EXEC`'s reply to a queued command the user's rules no longer
    /// allow.
    pub fn at_exec(self) -> CmdError {
        let reason = match self {
            Refused::Command => "no permission to execute the command or subcommand",
            Refused::Key(_) => "no permission to touch the specified keys",
            Refused::Channel(_) => "no permission to access one of the channels used as arguments",
        };
        CmdError::Prefixed(format!("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {reason}").into())
    }
}

/// `client|kill`, or `get`.
pub fn full_name(cmd: &CommandSpec, sub: Option<&CommandSpec>) -> String {
    match sub {
        Some(s) => format!("{}|{}", cmd.name, s.name),
        None => cmd.name.to_string(),
    }
}

/// [`permit`] for the user in `cell` now: one load and no lookup when it
/// may run anything on anything (the default user, as a rule).
pub fn permit_cell<'r>(
    registry: &Registry,
    cell: &crate::acl::UserCell,
    cmd: &'static CommandSpec,
    sub: Option<&'static CommandSpec>,
    req: &'r Request<'_>,
) -> Result<(), Refused<'r>> {
    if cell.unrestricted() {
        return Ok(());
    }
    permit(registry, &cell.peek(), cell.deleted(), cmd, sub, req)
}

/// Whether the user in `cell` may run the command `args` spell, as a
/// client would send it: how the other ports judge their requests as
/// commands (the metrics port's status page as `INFO` and `RL.TOP`, a
/// rate limit service decision as `RL.CHECK domain ...`). The `NOPERM`
/// text that says why not. Nothing is built for a user who may run
/// anything (the default user, as a rule).
pub fn may_run_args(
    registry: &Registry,
    cell: &crate::acl::UserCell,
    args: &[&[u8]],
) -> Result<(), String> {
    if cell.unrestricted() && !cell.deleted() {
        return Ok(());
    }
    let mut frame = Vec::new();
    let mut spans = Vec::with_capacity(args.len());
    for a in args {
        let start = frame.len();
        frame.extend_from_slice(a);
        spans.push(start..frame.len());
    }
    let req = Request::new(bytes::Bytes::from(frame), &spans);
    let (cmd, sub) = registry.resolve(&req).map_err(|e| e.to_string())?;
    permit_cell(registry, cell, cmd, sub, &req).map_err(|r| r.noperm_text(cmd, sub))
}

/// Whether `user` may run `req` (resolved to `cmd` and `sub`), as Redis's
/// `ACLCheckAllUserCommandPerm` decides: allowed if one selector (the
/// root one first, then each `(...)`) allows the command and every key
/// and channel of it. Refused otherwise, for the reason Redis picks: a
/// channel over a key over the command, and of the same kind the
/// argument furthest right any selector stopped at. A deleted user may
/// run nothing (its connections are being closed).
pub fn permit<'r>(
    registry: &Registry,
    user: &User,
    deleted: bool,
    cmd: &'static CommandSpec,
    sub: Option<&'static CommandSpec>,
    req: &'r Request<'_>,
) -> Result<(), Refused<'r>> {
    if deleted {
        return Err(Refused::Command);
    }
    let spec = sub.unwrap_or(cmd);
    let first = if sub.is_some() { 2 } else { 1 };
    let first = (req.len() > first).then(|| req.arg(first));
    let id = registry.acl_id(cmd, sub);
    let no_auth = spec.flags.contains(Flags::NO_AUTH);
    let mut access = None;
    // (rank, position): rank 0 command, 1 key, 2 channel.
    let mut worst: (u8, usize, Refused<'r>) = (0, 0, Refused::Command);
    for sel in user.selectors() {
        let refused = match check(sel, spec, cmd, id, no_auth, first, &mut access, req) {
            Ok(()) => return Ok(()),
            Err(r) => r,
        };
        if refused.0 > worst.0 || (refused.0 == worst.0 && refused.1 > worst.1) {
            worst = refused;
        }
    }
    Err(worst.2)
}

/// One selector's `ACLSelectorCheckCmd`: the command (or its first
/// argument), then each key where the table says keys are, with the
/// access the command needs, then the channels it publishes or
/// subscribes to. A refusal comes with its rank and the position of the
/// key (in key order) or channel it stopped at.
#[allow(clippy::too_many_arguments)]
fn check<'r>(
    sel: &Selector,
    spec: &'static CommandSpec,
    cmd: &'static CommandSpec,
    id: usize,
    no_auth: bool,
    first: Option<&[u8]>,
    access: &mut Option<Access>,
    req: &'r Request<'_>,
) -> Result<(), (u8, usize, Refused<'r>)> {
    if !sel.may_run(id, no_auth, first) {
        return Err((0, 0, Refused::Command));
    }
    if !sel.all_keys() {
        let access = *access.get_or_insert_with(|| spec.key_access(req));
        let mut pos = 0;
        spec.try_for_each_key(req, |k| {
            pos += 1;
            if sel.may_access(k, access) {
                Ok(())
            } else {
                Err((1, pos, Refused::Key(k)))
            }
        })?;
    }
    if !sel.all_channels() {
        // Redis 7.0's channel specs: PUBLISH's channel, SUBSCRIBE's
        // channels, PSUBSCRIBE's patterns (matched literally).
        let (range, pattern) = match cmd.name {
            "publish" => (1..2.min(req.len()), false),
            "subscribe" => (1..req.len(), false),
            "psubscribe" => (1..req.len(), true),
            _ => (0..0, false),
        };
        for i in range {
            let c = req.arg(i);
            if !sel.may_use_channel(c, pattern) {
                return Err((2, i, Refused::Channel(c)));
            }
        }
    }
    Ok(())
}

/// Records a refusal in `ACL LOG`, with the client as `CLIENT LIST` shows
/// it.
pub fn log(
    state: &State,
    session: &Session,
    now: Nanos,
    refused: Refused<'_>,
    context: Context,
    cmd: &CommandSpec,
    sub: Option<&CommandSpec>,
) {
    let name = full_name(cmd, sub);
    let (reason, object): (Reason, Box<[u8]>) = match refused {
        Refused::Command => (Reason::Command, name.as_bytes().into()),
        Refused::Key(k) => (Reason::Key, k.into()),
        Refused::Channel(c) => (Reason::Channel, c.into()),
    };
    log_entry(state, session, now, reason, context, object, None, &name);
}

/// Records a refusal of any reason; `username` overrides the session's
/// (a failed AUTH names the user it tried).
#[allow(clippy::too_many_arguments)]
pub fn log_entry(
    state: &State,
    session: &Session,
    now: Nanos,
    reason: Reason,
    context: Context,
    object: Box<[u8]>,
    username: Option<&[u8]>,
    command: &str,
) {
    let username: Box<[u8]> = match (username, &session.user) {
        (Some(u), _) => u.into(),
        (None, Some(cell)) => cell.load().name.clone(),
        (None, None) => (*b"default").into(),
    };
    state.acl.log.add(Entry {
        count: 1,
        reason,
        context,
        object,
        username,
        ms: now.as_millis(),
        client: session.info.describe(command),
    });
}
