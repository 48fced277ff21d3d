//! Pub/Sub commands: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE,
//! PUBLISH and PUBSUB, with Redis 7's replies (a RESP3 push or a RESP2
//! array per channel named), over `crate::pubsub`.

use std::sync::atomic::Ordering;

use super::{CmdError, Ctx};
use crate::clients::ClientInfo;
use crate::cmd::exec::session::{Session, Subscriptions};
use crate::protocol::Request;
use crate::pubsub::Mailbox;
use crate::state::State;

/// What a RESP2 connection with subscriptions may still run (Redis's list
/// in `processCommand`).
pub const ALLOWED_WHILE_SUBSCRIBED: [&str; 9] = [
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "ping",
    "quit",
    "reset",
];

/// ```text
/// SUBSCRIBE channel [channel ...]
/// ```
pub fn subscribe(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    subscribe_to(ctx, req, false)
}

/// ```text
/// PSUBSCRIBE pattern [pattern ...]
/// ```
pub fn psubscribe(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    subscribe_to(ctx, req, true)
}

fn subscribe_to(ctx: &mut Ctx<'_>, req: &Request<'_>, pattern: bool) -> Result<(), CmdError> {
    let info = ctx.session.info.clone();
    let subs = ctx.session.subs.get_or_insert_with(|| {
        Box::new(Subscriptions {
            mailbox: Mailbox::new(info),
            channels: Vec::new(),
            patterns: Vec::new(),
        })
    });
    let kind: &[u8] = if pattern { b"psubscribe" } else { b"subscribe" };
    for name in req.args().skip(1) {
        let list = if pattern {
            &mut subs.patterns
        } else {
            &mut subs.channels
        };
        if !list.iter().any(|c| **c == *name) {
            list.push(name.into());
            ctx.state.pubsub.subscribe(pattern, name, &subs.mailbox);
        }
        let count = subs.channels.len() + subs.patterns.len();
        publish_counts(&ctx.session.info, subs);
        ctx.out.push(3);
        ctx.out.bulk(kind);
        ctx.out.bulk(name);
        ctx.out.int(count as i64);
    }
    Ok(())
}

/// ```text
/// UNSUBSCRIBE [channel [channel ...]]
/// ```
pub fn unsubscribe(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    unsubscribe_from(ctx, req, false)
}

/// ```text
/// PUNSUBSCRIBE [pattern [pattern ...]]
/// ```
pub fn punsubscribe(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    unsubscribe_from(ctx, req, true)
}

fn unsubscribe_from(ctx: &mut Ctx<'_>, req: &Request<'_>, pattern: bool) -> Result<(), CmdError> {
    let kind: &[u8] = if pattern {
        b"punsubscribe"
    } else {
        b"unsubscribe"
    };
    // With no names: every one subscribed, in order; none: one reply with
    // a null name.
    let names: Vec<Box<[u8]>> = if req.len() > 1 {
        req.args().skip(1).map(Into::into).collect()
    } else {
        ctx.session
            .subs
            .as_ref()
            .map(|s| {
                if pattern {
                    s.patterns.clone()
                } else {
                    s.channels.clone()
                }
            })
            .unwrap_or_default()
    };
    if names.is_empty() {
        ctx.out.push(3);
        ctx.out.bulk(kind);
        ctx.out.null();
        ctx.out.int(ctx.session.subscriptions() as i64);
        return Ok(());
    }
    let id = ctx.session.info.id;
    for name in &names {
        if let Some(subs) = ctx.session.subs.as_mut() {
            let list = if pattern {
                &mut subs.patterns
            } else {
                &mut subs.channels
            };
            if let Some(i) = list.iter().position(|c| c == name) {
                list.remove(i);
                ctx.state.pubsub.unsubscribe(pattern, name, id);
            }
            publish_counts(&ctx.session.info, subs);
        }
        ctx.out.push(3);
        ctx.out.bulk(kind);
        ctx.out.bulk(name);
        ctx.out.int(ctx.session.subscriptions() as i64);
    }
    Ok(())
}

/// ```text
/// PUBLISH channel message
/// ```
pub fn publish(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if let Some(later) = &mut ctx.session.publish_later {
        later.push((req.arg(1).into(), req.arg(2).into()));
        ctx.out.int(ctx.state.pubsub.receivers(req.arg(1)) as i64);
        return Ok(());
    }
    let receivers = ctx.state.pubsub.publish(req.arg(1), req.arg(2));
    // A connection that subscribes to the channel itself gets the message
    // before the count, as from Redis.
    if let Some(subs) = &ctx.session.subs {
        subs.mailbox.drain_into(ctx.out);
    }
    ctx.out.int(receivers as i64);
    Ok(())
}

/// ```text
/// PUBSUB CHANNELS [pattern]
/// ```
pub fn channels(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if req.len() > 3 {
        return Err(CmdError::err(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            String::from_utf8_lossy(req.arg(1))
        )));
    }
    let found = ctx
        .state
        .pubsub
        .channels((req.len() == 3).then(|| req.arg(2)));
    ctx.out.array(found.len());
    for c in &found {
        ctx.out.bulk(c);
    }
    Ok(())
}

/// ```text
/// PUBSUB NUMSUB [channel [channel ...]]
/// ```
pub fn numsub(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    // A flat array in RESP3 too, as Redis 7.0 replies.
    ctx.out.array(2 * (req.len() - 2));
    for c in req.args().skip(2) {
        ctx.out.bulk(c);
        ctx.out.int(ctx.state.pubsub.numsub(c) as i64);
    }
    Ok(())
}

/// ```text
/// PUBSUB NUMPAT
/// ```
pub fn numpat(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    ctx.out.int(ctx.state.pubsub.pattern_count() as i64);
    Ok(())
}

/// ```text
/// PUBSUB HELP
/// ```
pub fn help(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    const LINES: [&str; 13] = [
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "SHARDCHANNELS [<pattern>]",
        "    Return the currently active shard level channels matching a <pattern> (default: '*').",
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified shard level channel(s)",
        "HELP",
    ];
    ctx.out.array(LINES.len() + 1);
    for l in LINES {
        ctx.out.simple(l);
    }
    ctx.out.simple("    Prints this help.");
    Ok(())
}

/// Drops every subscription of a connection (it closed, or `RESET`).
pub fn forget(state: &State, session: &mut Session) {
    let Some(subs) = session.subs.take() else {
        return;
    };
    let id = session.info.id;
    for c in &subs.channels {
        state.pubsub.unsubscribe(false, c, id);
    }
    for p in &subs.patterns {
        state.pubsub.unsubscribe(true, p, id);
    }
    session.info.subs.store(0, Ordering::Relaxed);
    session.info.psubs.store(0, Ordering::Relaxed);
}

/// What other connections see of this one's subscriptions.
fn publish_counts(info: &ClientInfo, subs: &Subscriptions) {
    info.subs
        .store(subs.channels.len() as u32, Ordering::Relaxed);
    info.psubs
        .store(subs.patterns.len() as u32, Ordering::Relaxed);
}
