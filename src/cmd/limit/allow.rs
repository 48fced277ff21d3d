//! The limiter commands on a key's own limit: `RL.ALLOW`, `RL.PEEK`,
//! `RL.ALLOWMANY`, `RL.REFUND`, `RL.RESET`, `RL.STATE`. Each parses into a
//! validated request (`parse.rs`), runs the algorithm on the key's state
//! (`store/limit.rs`), then writes the reply (`reply.rs`).

use super::reply::{ms_ceil, write_decision};
use super::{lease, parse, policy, CmdError, Ctx};
use crate::limiter::lease::LeaseId;
use crate::limiter::with_algorithm;
use crate::limiter::Params;
use crate::protocol::Request;
use crate::stats::LeaseEvent;
use crate::store::keys::Keys;
use crate::store::limit::Held;
use crate::store::plan::{self, Limit, Rules};
use crate::store::{limit, Value};

/// ```text
/// RL.ALLOW key limit period [ALGO window|sliding|log|gcra|fixed] [COST n] [BURST b] [PRECISION d]
/// RL.ALLOW key POLICY name [COST n]
/// ```
pub fn allow(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if let Some(n) = parse::named_request(req, false)? {
        return policy::allow_named(ctx, n, policy::Use::Allow);
    }
    let r = parse::allow_request_memo(req, &mut ctx.session.limit_memo)?;
    let now = ctx.now;
    let room = ctx.state.write_room();
    let d = ctx.db.allow(r.key, &r.spec, now, r.cost, room)?;
    let charged = if d.allowed { r.cost } else { 0 };
    ctx.session.stats.decision(r.spec.algo, &d, charged);
    ctx.session
        .stats
        .key_decision(r.key, d.allowed, false, None, now);
    write_decision(ctx.out, &d, 0);
    Ok(())
}

/// ```text
/// RL.PEEK key limit period [ALGO ...] [COST n] [BURST b] [PRECISION d]
/// ```
pub fn peek(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if lease::peek(ctx, req)?.is_some() {
        return Ok(());
    }
    if let Some(n) = parse::named_request(req, false)? {
        return policy::allow_named(ctx, n, policy::Use::Peek);
    }
    let r = parse::allow_request_memo(req, &mut ctx.session.limit_memo)?;
    let now = ctx.now;
    let (d, _) = ctx
        .db
        .get(r.key, now, |e| limit::peek(Some(e), &r.spec, now, r.cost))
        .unwrap_or_else(|| limit::peek(None, &r.spec, now, r.cost))?;
    write_decision(ctx.out, &d, 0);
    Ok(())
}

/// ```text
/// RL.ALLOWMANY [COST n | CHARGE n] [ID lease_id] LIMIT key limit period [ALGO a] [BURST b]
///     [PRECISION d] [LIMIT ...] [LEASE key limit ttl ...]
/// ```
/// All-or-nothing over rate limits (`LIMIT`) and concurrency limits
/// (`LEASE`), one plan (`store/plan.rs`): every key locked, every clause
/// peeked at, and only if all admit (and what they would allocate fits
/// `--maxmemory`) are the leases taken and the limits charged. With
/// `CHARGE n`, `n` is recorded under every limit whatever its state (see
/// `charge.rs`). The reply is `RL.ALLOW`'s for the binding clause (the
/// first that denied, else the one with the least remaining) plus its
/// index, and with `LEASE` clauses the lease id (nil when denied).
pub fn allowmany(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let mut steps = parse::Steps::new();
    let r = parse::many_request(req, &mut steps)?;
    let has_lease = steps.iter().any(|s| matches!(s.limit, Limit::Lease { .. }));
    let mut id = LeaseId::default();
    if has_lease {
        id = lease::lease_id(r.id)?;
        for s in &mut steps {
            if let Limit::Lease { id: lease, .. } = &mut s.limit {
                *lease = id;
            }
        }
    }
    let steps = &mut steps[..];
    let now = ctx.now;
    let room = ctx.state.write_room();
    let rules = Rules {
        stop_at_denial: true,
        denied: false,
    };
    let outcome = plan::run(ctx.db, steps, now, room, rules)?;
    let (index, d) = plan::binding(steps).ok_or(CmdError::Syntax)?;
    // One decision per request, under the binding limit's algorithm; units
    // under every limit charged.
    let stats = &mut ctx.session.stats;
    if let Limit::Rate(spec) = steps[index].limit {
        stats.decision(spec.algo, &d, 0);
    }
    stats.key_decision(steps[index].key, d.allowed, false, None, now);
    if outcome.admitted {
        for s in steps.iter() {
            if let Limit::Rate(spec) = s.limit {
                stats.units(spec.algo, r.cost);
            }
        }
    }
    if has_lease {
        let leases = steps
            .iter()
            .filter(|s| matches!(s.limit, Limit::Lease { .. }));
        let shared = &ctx.state.stats.counters;
        match d.allowed {
            true => shared.add_at(
                crate::metrics::table::LEASES,
                LeaseEvent::Acquired as usize,
                leases.count() as u64,
            ),
            false => shared.add_at(
                crate::metrics::table::LEASES,
                LeaseEvent::Denied as usize,
                1,
            ),
        }
        if outcome.lapsed > 0 {
            shared.add_at(
                crate::metrics::table::LEASES,
                LeaseEvent::Expired as usize,
                outcome.lapsed,
            );
        }
    }
    write_decision(ctx.out, &d, 1 + has_lease as usize);
    ctx.out.int(index as i64);
    match (has_lease, d.allowed, r.id) {
        (false, ..) => {}
        (true, true, Some(given)) => ctx.out.bulk(given),
        (true, true, None) => ctx.out.bulk(&lease::hex(&id)),
        (true, ..) => ctx.out.null(),
    }
    Ok(())
}

/// ```text
/// RL.REFUND key n
/// ```
/// Replies 1 if the key held limiter state (refunded, never below empty),
/// 0 if there is no such key.
pub fn refund(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let n = parse::positive(req.arg(2), "refund")?;
    let now = ctx.now;
    let done = ctx
        .db
        .update(req.arg(1), now, |slot| limit::refund(slot, now, n))?;
    ctx.out.int(done as i64);
    Ok(())
}

/// ```text
/// RL.RESET key [key ...]
/// ```
/// Forgets limiter state; replies how many keys existed. A key holding a
/// string is `WRONGTYPE`, and then nothing is reset.
pub fn reset(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let now = ctx.now;
    let mut lock = ctx.db.lock_many(req.args().skip(1));
    for key in req.args().skip(1) {
        let is_string = lock.update(key, now, |slot| {
            slot.as_ref().is_some_and(|e| !e.value.is_limiter())
        });
        if is_string {
            return Err(CmdError::WrongType);
        }
    }
    let removed = req
        .args()
        .skip(1)
        .filter(|key| lock.update(key, now, |slot| slot.take().is_some()))
        .count();
    drop(lock);
    ctx.out.int(removed as i64);
    Ok(())
}

/// ```text
/// RL.STATE key
/// ```
/// What the key holds, for operators: algorithm, parameters, counts, TTL.
/// Nil if the key does not exist.
pub fn state(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let now = ctx.now;
    let out = &mut *ctx.out;
    let found = ctx.db.get(req.arg(1), now, |e| {
        if let Value::Lease(l) = &e.value {
            out.map(6);
            out.bulk_str("algorithm");
            out.bulk_str("lease");
            out.bulk_str("limit");
            out.int(l.limit as i64);
            out.bulk_str("held");
            out.int(l.leases.held(now.0) as i64);
            out.bulk_str("leases");
            out.int(l.leases.live_count(now.0) as i64);
            out.bulk_str("ttl_ms");
            out.int(e.pttl_ms(now).unwrap_or(-1));
            out.bulk_str("type");
            out.bulk_str(e.value.type_name());
            return Ok(());
        }
        let algo = e.value.algorithm().ok_or(CmdError::WrongType)?;
        let mut fields: Vec<(&str, i64)> = Vec::with_capacity(7);
        let value = match &e.value {
            Value::Blocked(b) => {
                let left = b.until.saturating_sub(now.0);
                fields.push(("blocked_ms", ms_ceil(left)));
                &b.value
            }
            v => v,
        };
        fn describe<S: Held>(v: &Value, fields: &mut Vec<(&str, i64)>) -> Option<Params> {
            let s = S::get(v)?;
            s.state
                .describe(&s.params, &mut |name, n| fields.push((name, n)));
            Some(s.params)
        }
        let params =
            with_algorithm!(algo, describe(value, &mut fields)).ok_or(CmdError::WrongType)?;
        out.map(5 + fields.len());
        out.bulk_str("algorithm");
        out.bulk_str(algo.name());
        out.bulk_str("limit");
        out.int(params.limit() as i64);
        out.bulk_str("period_ms");
        out.int(ms_ceil(params.period()));
        for (k, v) in fields {
            out.bulk_str(k);
            out.int(v);
        }
        out.bulk_str("ttl_ms");
        out.int(e.pttl_ms(now).unwrap_or(-1));
        out.bulk_str("type");
        out.bulk_str(e.value.type_name());
        Ok(())
    });
    found.unwrap_or_else(|| {
        out.null();
        Ok(())
    })
}
