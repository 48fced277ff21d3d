//! Charging after use: `RL.CHARGE` and `RL.ALLOWMANY CHARGE n`. A charge
//! records its units whatever the key's state (a response's real token
//! count is known only once it has been served), so it may overdraw; the
//! overdraft then denies until it has left its window.

use super::parse::{self, Clause, ManyRequest};
use super::reply::write_decision;
use super::{CmdError, Ctx};
use crate::limiter::Decision;
use crate::protocol::Request;
use crate::store::limit;

/// ```text
/// RL.CHARGE key limit period n [ALGO ...] [BURST b] [PRECISION d] [TZ ±HH:MM] [BLOCK d]
/// RL.CHARGE key POLICY name n
/// ```
/// Replies `RL.ALLOW`'s five fields: allowed is 1 if usage is within the
/// limit after the charge. Under a policy, with its shadow mode and stats
/// (an LLM gateway charges a response's tokens to the policy that let the
/// request in).
pub fn charge(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if let Some(n) = parse::named_request(req, true)? {
        return super::policy::allow_named(ctx, n, super::policy::Use::Charge);
    }
    let r = parse::charge_request(req)?;
    let now = ctx.now;
    let room = ctx.state.write_room();
    let d = ctx.db.update(r.key, now, |slot| {
        limit::charge(slot, &r.spec, now, r.n, room)
    })?;
    ctx.session.stats.decision(r.spec.algo, &d, r.n);
    ctx.session
        .stats
        .key_decision(r.key, d.allowed, false, None, now);
    write_decision(ctx.out, &d, 0);
    Ok(())
}

/// `RL.ALLOWMANY CHARGE n LIMIT ...`: `n` recorded under every limit,
/// under the locks of all their keys. Every key's type is checked first,
/// so a `WRONGTYPE` charges nothing. The reply is `RL.ALLOWMANY`'s: the
/// binding limit (the first over its limit, else the one with the least
/// remaining) and its index.
pub(super) fn many(ctx: &mut Ctx<'_>, r: ManyRequest<'_>) -> Result<(), CmdError> {
    let now = ctx.now;
    let room = ctx.state.write_room();
    // The parser refuses leases with CHARGE: every clause is a limit, so a
    // position among them is the clause's index. Walked again where needed
    // rather than collected, so a request allocates nothing for it.
    let limits = || {
        r.clauses.iter().filter_map(|(key, c)| match c {
            Clause::Limit(spec) => Some((*key, spec)),
            Clause::Lease { .. } => None,
        })
    };
    let mut lock = ctx.db.lock_many(limits().map(|(k, _)| k));
    let mut growth = 0usize;
    for (key, spec) in limits() {
        let (_, grows) = lock
            .get(key, now, |e| limit::peek(Some(e), spec, now, 1))
            .unwrap_or_else(|| limit::peek(None, spec, now, 1))?;
        growth = growth.saturating_add(grows);
    }
    if growth > room {
        return Err(CmdError::OutOfMemory);
    }
    let mut binding: Option<(usize, Decision)> = None;
    for (i, (key, spec)) in limits().enumerate() {
        let d = lock.update(key, now, |slot| {
            limit::charge(slot, spec, now, r.cost, usize::MAX)
        })?;
        let tighter =
            binding.is_none_or(|(_, b)| b.allowed && (!d.allowed || d.remaining < b.remaining));
        if tighter {
            binding = Some((i, d));
        }
    }
    drop(lock);
    let (index, d) = binding.ok_or(CmdError::Syntax)?;
    let (key, spec) = limits().nth(index).ok_or(CmdError::Syntax)?;
    ctx.session.stats.decision(spec.algo, &d, 0);
    ctx.session
        .stats
        .key_decision(key, d.allowed, false, None, now);
    for (_, spec) in limits() {
        ctx.session.stats.units(spec.algo, r.cost);
    }
    write_decision(ctx.out, &d, 1);
    ctx.out.int(index as i64);
    Ok(())
}
