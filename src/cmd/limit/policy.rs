//! The policy commands: `RL.CHECK` (a descriptor against a domain's
//! policies), `RL.POLICY LIST|GET|RELOAD|KEY`, and the decision they share
//! with `RL.ALLOW ... POLICY` and the rate limit service: a policy's limit
//! applied to its counter key, shadow mode, and envoyproxy/ratelimit's
//! stats.

use super::args::is;
use super::error::show;
use super::reply::write_decision;
use super::{parse, CmdError, Ctx};
use crate::clock::Nanos;
use crate::cmd::exec::session::{Deferred, Later, Park};
use crate::limiter::Decision;
use crate::policy::{step, Action, Policy, DENY_ALL};
use crate::protocol::{ReplyBuf, Request};
use crate::stats::Local;
use crate::store::plan::{self, Act, Rules};
use crate::store::Keyspace;

/// The most descriptor entries `RL.CHECK` takes (envoyproxy/ratelimit's
/// configurations nest a few levels; this bounds the work of one request).
pub const MAX_ENTRIES: usize = 64;

/// What one descriptor came to.
#[derive(Debug, Clone, Copy)]
pub struct Verdict {
    pub decision: Decision,
    /// Denied by the limit but let through: shadow mode.
    pub shadowed: bool,
    /// No limit applies (no match, `unlimited`, or replaced).
    pub unlimited: bool,
}

impl Verdict {
    /// Allowed, nothing counted: no policy applies.
    pub fn unlimited() -> Verdict {
        Verdict {
            decision: Decision {
                allowed: true,
                limit: 0,
                remaining: 0,
                retry_after: None,
                reset_after: 0,
            },
            shadowed: false,
            unlimited: true,
        }
    }

    /// Whether the request goes through.
    pub fn allowed(&self) -> bool {
        self.decision.allowed || self.shadowed
    }
}

/// What a policy's decision does to its counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// `RL.ALLOW`: charged if admitted.
    Allow,
    /// `RL.PEEK`, `RL.CHECK ... PEEK`: nothing charged or counted.
    Peek,
    /// `RL.CHARGE`: recorded whatever the state; it may overdraw.
    Charge,
}

/// A policy's decision for `hits` units on `key`, charged as `how` says,
/// denied ones never charged; shadow mode (the policy's, or
/// `--policies-shadow`) lets a denied request through. Counts the
/// policy's stats and the algorithm's decision (`policy/step.rs`).
#[allow(clippy::too_many_arguments)]
pub fn decide(
    db: Keyspace<'_>,
    now: Nanos,
    room: usize,
    policy: &Policy,
    shadow_all: bool,
    key: &[u8],
    hits: u64,
    how: Use,
    stats: &mut Local,
) -> Result<Verdict, CmdError> {
    let peek = how == Use::Peek;
    let shadow = policy.def.shadow || shadow_all;
    let spec = match policy.def.action {
        Action::Unlimited => return Ok(Verdict::unlimited()),
        Action::DenyAll => {
            if !peek {
                step::account_denied(Some(policy), key, hits, shadow, now, stats);
            }
            return Ok(Verdict {
                decision: DENY_ALL,
                shadowed: shadow,
                unlimited: false,
            });
        }
        Action::Limit(spec) => spec,
    };
    // A charge records what was used, whatever it was.
    if how != Use::Charge {
        parse::check_cost(&spec, hits)?;
    }
    let act = match how {
        Use::Allow => Act::Allow,
        Use::Peek => Act::Peek,
        Use::Charge => Act::Charge,
    };
    let mut steps = [step::step(spec, key, hits, act, shadow)];
    plan::run(db, &mut steps, now, room, Rules::default())?;
    if !peek {
        step::account(Some(policy), &steps[0], now, stats);
    }
    let d = steps[0].decision.ok_or(CmdError::Syntax)?;
    Ok(Verdict {
        decision: d,
        shadowed: shadow && !d.allowed,
        unlimited: false,
    })
}

/// The five fields of `RL.ALLOW` for a verdict: a shadowed denial answers
/// allowed (with no retry time), no limit answers limit and remaining -1.
pub fn write_verdict(out: &mut ReplyBuf, v: &Verdict, extra: usize) {
    if v.unlimited {
        out.array(5 + extra);
        for n in [1, -1, -1, -1, 0] {
            out.int(n);
        }
        return;
    }
    let allowed = v.allowed();
    let d = Decision {
        allowed,
        retry_after: if allowed {
            None
        } else {
            v.decision.retry_after
        },
        ..v.decision
    };
    write_decision(out, &d, extra);
}

/// Why a descriptor's `key value` pairs were refused.
enum BadDescriptor {
    /// None, or an odd count.
    Shape,
    TooMany,
}

/// One descriptor entry: a key and its value.
type Pair<'a> = (&'a [u8], &'a [u8]);

/// The descriptor's `key value` pairs from argument `at` on, in `buf`
/// (on the stack: the hot path allocates nothing for them).
fn descriptor<'a, 'b>(
    req: &'a Request<'_>,
    at: usize,
    buf: &'b mut [Pair<'a>; MAX_ENTRIES],
) -> Result<&'b [Pair<'a>], BadDescriptor> {
    let pairs = req.len().saturating_sub(at);
    if pairs == 0 || !pairs.is_multiple_of(2) {
        return Err(BadDescriptor::Shape);
    }
    if pairs / 2 > MAX_ENTRIES {
        return Err(BadDescriptor::TooMany);
    }
    for (i, e) in buf.iter_mut().take(pairs / 2).enumerate() {
        *e = (req.arg(at + 2 * i), req.arg(at + 2 * i + 1));
    }
    Ok(&buf[..pairs / 2])
}

/// ```text
/// RL.CHECK domain [COST n] [PEEK] key value [key value ...]
/// ```
/// `RL.ALLOW`'s five fields for the most specific policy matching the
/// descriptor, then the policy's name (nil when none matches).
pub fn check(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let domain = req.arg(1);
    let mut at = 2;
    let mut cost = 1;
    let mut peek = false;
    while let Some(arg) = (at < req.len()).then(|| req.arg(at)) {
        if is(arg, "COST") && at + 1 < req.len() {
            cost = parse::positive(req.arg(at + 1), "COST")?;
            at += 2;
        } else if is(arg, "PEEK") {
            peek = true;
            at += 1;
        } else {
            break;
        }
    }
    let mut buf: [Pair; MAX_ENTRIES] = [(&[], &[]); MAX_ENTRIES];
    let entries = descriptor(req, at, &mut buf).map_err(|e| match e {
        BadDescriptor::Shape => {
            CmdError::err("RL.CHECK needs a descriptor: one or more key value pairs")
        }
        BadDescriptor::TooMany => CmdError::err(format!(
            "RL.CHECK takes at most {MAX_ENTRIES} descriptor entries"
        )),
    })?;
    let policies = &ctx.state.policies;
    let set = policies.current();
    if !set.has_domain(domain) {
        return Err(unknown_domain(domain, &set));
    }
    let mut key = std::mem::take(&mut ctx.session.scratch);
    let found = set.resolve(domain, entries, &mut key);
    let result = match found {
        None => {
            policies.note_unmatched(domain, entries, ctx.now.0 / 1_000_000);
            write_verdict(ctx.out, &Verdict::unlimited(), 1);
            ctx.out.null();
            Ok(())
        }
        Some(m) => {
            let now = ctx.now;
            let room = ctx.state.write_room();
            decide(
                ctx.db,
                now,
                room,
                m.policy,
                policies.shadow_all(),
                &key,
                cost,
                if peek { Use::Peek } else { Use::Allow },
                &mut ctx.session.stats,
            )
            .map(|v| {
                write_verdict(ctx.out, &v, 1);
                ctx.out.bulk(m.policy.name.as_bytes());
            })
        }
    };
    ctx.session.scratch = key;
    result
}

/// `RL.CHECK`'s error for a domain no file declares: a misspelled domain,
/// or a server started without `--policies`, would otherwise allow every
/// request silently. Names the loaded domains (at most ten).
fn unknown_domain(domain: &[u8], set: &crate::policy::PolicySet) -> CmdError {
    let names = set.domain_names();
    if names.is_empty() {
        return CmdError::err(format!(
            "unknown policy domain '{}': no policies are loaded (start with --policies PATH)",
            String::from_utf8_lossy(domain)
        ));
    }
    let shown = names
        .iter()
        .take(10)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    let more = if names.len() > 10 { ", ..." } else { "" };
    CmdError::err(format!(
        "unknown policy domain '{}': the loaded domains are {shown}{more}",
        String::from_utf8_lossy(domain)
    ))
}

/// `RL.ALLOW`, `RL.PEEK` or `RL.CHARGE key POLICY name ...`: a named
/// policy's limit on the caller's key, with its shadow mode and stats.
pub fn allow_named(ctx: &mut Ctx<'_>, named: parse::Named<'_>, how: Use) -> Result<(), CmdError> {
    let name = named.policy;
    let policies = &ctx.state.policies;
    let set = policies.current();
    let policy = std::str::from_utf8(name)
        .ok()
        .map(|n| set.get(n))
        .unwrap_or(Err(crate::policy::NameError::Unknown))
        .map_err(|e| match e {
            crate::policy::NameError::Unknown => {
                CmdError::err(format!("no policy named '{}'", show(name)))
            }
            crate::policy::NameError::Ambiguous => CmdError::err(format!(
                "policy name '{}' is used in more than one domain: name it by its descriptor path",
                show(name)
            )),
        })?;
    let now = ctx.now;
    let room = ctx.state.write_room();
    let v = decide(
        ctx.db,
        now,
        room,
        policy,
        policies.shadow_all(),
        named.key,
        named.units,
        how,
        &mut ctx.session.stats,
    )?;
    write_verdict(ctx.out, &v, 0);
    Ok(())
}

/// `RL.POLICY LIST`: every policy in force, each as a map of its name,
/// domain, descriptor path and since when (Unix ms).
pub fn list(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let set = ctx.state.policies.current();
    ctx.out.array(set.len());
    for p in set.iter() {
        ctx.out.map(4);
        ctx.out.bulk_str("name");
        ctx.out.bulk(p.name.as_bytes());
        ctx.out.bulk_str("domain");
        ctx.out.bulk(p.domain.as_bytes());
        ctx.out.bulk_str("descriptor");
        ctx.out.bulk(p.path.as_bytes());
        ctx.out.bulk_str("since_ms");
        ctx.out.int(p.since_ms as i64);
    }
    Ok(())
}

/// `RL.POLICY GET name`: one policy's definition, source and stats; nil
/// if there is none of that name.
pub fn get(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let set = ctx.state.policies.current();
    let Some(p) = std::str::from_utf8(req.arg(2))
        .ok()
        .and_then(|n| set.get(n).ok())
    else {
        ctx.out.null();
        return Ok(());
    };
    let out = &mut *ctx.out;
    let (algorithm, limit, period_ms, burst, precision_ms) = match p.def.action {
        Action::Limit(s) => (
            s.algo.name(),
            s.params.limit() as i64,
            (s.params.period() / 1_000_000) as i64,
            s.params.burst.get() as i64,
            (s.params.precision.get() / 1_000_000) as i64,
        ),
        Action::Unlimited => ("unlimited", -1, 0, 0, 0),
        Action::DenyAll => ("deny", 0, 0, 0, 0),
    };
    let stats = p.stats.read();
    out.map(14);
    out.bulk_str("name");
    out.bulk(p.name.as_bytes());
    out.bulk_str("domain");
    out.bulk(p.domain.as_bytes());
    out.bulk_str("descriptor");
    out.bulk(p.path.as_bytes());
    out.bulk_str("algorithm");
    out.bulk_str(algorithm);
    out.bulk_str("limit");
    out.int(limit);
    out.bulk_str("period_ms");
    out.int(period_ms);
    out.bulk_str("burst");
    out.int(burst);
    out.bulk_str("precision_ms");
    out.int(precision_ms);
    out.bulk_str("shadow_mode");
    out.int(p.def.shadow as i64);
    out.bulk_str("replaces");
    out.array(p.def.replaces.len());
    for r in &p.def.replaces {
        out.bulk(r.as_bytes());
    }
    out.bulk_str("unit");
    match p.def.unit {
        Some(u) => out.bulk_str(u.name()),
        None => out.null(),
    }
    out.bulk_str("source");
    out.bulk(p.source.as_bytes());
    out.bulk_str("since_ms");
    out.int(p.since_ms as i64);
    // Nested, under envoyproxy/ratelimit's names: its `shadow_mode` stat
    // beside the `shadow_mode` setting above gave a map two fields of one
    // name, and a client that builds a dict kept only the last.
    out.bulk_str("stats");
    out.map(stats.len());
    for (name, n) in crate::policy::PolicyStats::NAMES.iter().zip(stats) {
        out.bulk_str(name);
        out.int(n as i64);
    }
    Ok(())
}

/// `RL.POLICY RELOAD`: reads the files again; the new set replaces the
/// old whole, or an error says why and the old stays. The files are read
/// on the reload thread: the connection parks until its ticket's load is
/// done and replies then (`Park::Later`), so no worker waits.
pub fn reload(ctx: &mut Ctx<'_>, _req: &Request<'_>) -> Result<(), CmdError> {
    let ticket = ctx
        .state
        .reload_policies()
        .map_err(|e| CmdError::err(e.to_string()))?;
    ctx.session.parked = Some(Park::Later(Later {
        run: Box::new(move |state| {
            Box::pin(async move {
                match state.policies.reloaded(ticket).await {
                    Ok(_) => Deferred::Ok,
                    Err(e) => Deferred::Err(e.to_string()),
                }
            })
        }),
        unserved: Deferred::Err("RL.POLICY RELOAD needs a server".into()),
    }));
    Ok(())
}

/// `RL.POLICY KEY domain key value [key value ...]`: the counter key a
/// descriptor's policy uses (nil when none matches), for operators and
/// for cluster clients computing where `RL.CHECK` goes.
pub fn key(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let mut buf: [Pair; MAX_ENTRIES] = [(&[], &[]); MAX_ENTRIES];
    let entries = descriptor(req, 3, &mut buf).map_err(|_| {
        CmdError::err("RL.POLICY KEY needs a domain and one or more key value pairs")
    })?;
    let set = ctx.state.policies.current();
    let mut key = Vec::new();
    match set.resolve(req.arg(2), entries, &mut key) {
        Some(_) => ctx.out.bulk(&key),
        None => ctx.out.null(),
    }
    Ok(())
}
