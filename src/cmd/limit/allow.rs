//! The limiter commands on a key's own limit: `RL.ALLOW`, `RL.PEEK`,
//! `RL.ALLOWMANY`, `RL.REFUND`, `RL.RESET`, `RL.STATE`. Each parses into a
//! validated request (`parse.rs`), runs the algorithm on the key's state
//! (`store/limit.rs`), then writes the reply (`reply.rs`).

use super::reply::{ms_ceil, write_decision};
use super::{charge, lease, parse, policy, CmdError, Ctx};
use crate::limiter::lease::Lapsed;
use crate::limiter::Decision;
use crate::protocol::Request;
use crate::stats::LeaseEvent;
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
    let d = ctx.db.update(r.key, now, |slot| {
        limit::allow(slot, &r.spec, now, r.cost, room)
    })?;
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
/// RL.ALLOWMANY [COST n] [ID lease_id] LIMIT key limit period [ALGO a] [BURST b] [PRECISION d]
///     [LIMIT ...] [LEASE key limit ttl ...]
/// ```
/// All-or-nothing over rate limits (`LIMIT`) and concurrency limits
/// (`LEASE`): every key's shard is locked (in a fixed order, so two
/// requests can never deadlock), every clause is peeked at in place, and
/// only if all admit (and what they would allocate fits `--maxmemory`)
/// are the leases taken and the limits charged, under the same locks, so
/// each decides as its peek did. Nothing is copied, however long a log
/// ring is. The reply is `RL.ALLOW`'s plus the binding clause's index,
/// and with `LEASE` clauses the lease id (nil when denied).
pub fn allowmany(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    use parse::Clause;
    let r = parse::many_request(req)?;
    if r.charge {
        return charge::many(ctx, r);
    }
    let has_lease = r
        .clauses
        .iter()
        .any(|(_, c)| matches!(c, Clause::Lease { .. }));
    let id = match has_lease {
        true => Some(lease::lease_id(r.id)?),
        false => None,
    };
    let now = ctx.now;
    let room = ctx.state.write_room();
    let mut lock = ctx.db.lock_many(r.clauses.iter().map(|(k, _)| *k));
    let mut binding: Option<(usize, Decision)> = None;
    let mut growth = 0usize;
    for (i, (key, clause)) in r.clauses.iter().enumerate() {
        let (d, grows) = match clause {
            Clause::Limit(spec) => lock
                .get(key, now, |e| limit::peek(Some(e), spec, now, r.cost))
                .unwrap_or_else(|| limit::peek(None, spec, now, r.cost))?,
            Clause::Lease { limit, ttl } => {
                let d = lock
                    .get(key, now, |e| {
                        limit::peek_lease(Some(e), *limit, *ttl, now, r.cost)
                    })
                    .unwrap_or_else(|| limit::peek_lease(None, *limit, *ttl, now, r.cost))?;
                (d, 0)
            }
        };
        growth = growth.saturating_add(grows);
        let tighter = binding.is_none_or(|(_, b)| d.remaining < b.remaining);
        if !d.allowed || tighter {
            binding = Some((i, d));
        }
        if !d.allowed {
            break;
        }
    }
    let (index, mut d) = binding.expect("at least one clause");
    // The denying limit's `BLOCK` penalty (a blocked key's denial keeps
    // its block as it is).
    if let (false, Clause::Limit(spec)) = (d.allowed, &r.clauses[index].1) {
        let key = r.clauses[index].0;
        if let Some(until) = lock.update(key, now, |slot| limit::block(slot, spec, now)) {
            d = limit::under_block(d, until, now);
        }
    }
    let mut gone = Lapsed::default();
    if d.allowed {
        if growth > room {
            return Err(CmdError::OutOfMemory);
        }
        let id = id.unwrap_or_default();
        // Leases first: one that cannot be held within `--maxmemory` gives
        // back those taken before it, and no limit is charged.
        let mut taken: Vec<&[u8]> = Vec::new();
        for (key, clause) in &r.clauses {
            let Clause::Lease { limit, ttl } = clause else {
                continue;
            };
            let held = lock.update(key, now, |slot| {
                limit::acquire(slot, *limit, *ttl, now, r.cost, id, room)
            });
            match held {
                Ok((_, lapsed)) => {
                    gone.leases += lapsed.leases;
                    taken.push(key);
                }
                Err(e) => {
                    for key in taken {
                        let _ = lock.update(key, now, |slot| limit::release(slot, now, &id));
                    }
                    return Err(e.into());
                }
            }
        }
        for (key, clause) in &r.clauses {
            if let Clause::Limit(spec) = clause {
                lock.update(key, now, |slot| {
                    limit::allow(slot, spec, now, r.cost, usize::MAX)
                })?;
            }
        }
    }
    drop(lock);
    // One decision per request, under the binding limit's algorithm; units
    // under every limit charged.
    let stats = &mut ctx.session.stats;
    if let Clause::Limit(spec) = r.clauses[index].1 {
        stats.decision(spec.algo, &d, 0);
    }
    stats.key_decision(r.clauses[index].0, d.allowed, false, None, now);
    if d.allowed {
        for (_, clause) in &r.clauses {
            if let Clause::Limit(spec) = clause {
                stats.units(spec.algo, r.cost);
            }
        }
    }
    if has_lease {
        let leases = r
            .clauses
            .iter()
            .filter(|(_, c)| matches!(c, Clause::Lease { .. }));
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
        if gone.leases > 0 {
            shared.add_at(
                crate::metrics::table::LEASES,
                LeaseEvent::Expired as usize,
                gone.leases,
            );
        }
    }
    write_decision(ctx.out, &d, 1 + has_lease as usize);
    ctx.out.int(index as i64);
    match (has_lease, d.allowed, r.id, id) {
        (false, ..) => {}
        (true, true, Some(given), _) => ctx.out.bulk(given),
        (true, true, None, Some(id)) => ctx.out.bulk(&lease::hex(&id)),
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
        let ms = |ns: u64| (ns / 1_000_000) as i64;
        let value = match &e.value {
            Value::Blocked(b) => {
                let left = b.until.saturating_sub(now.0);
                fields.push(("blocked_ms", ms_ceil(left)));
                &b.value
            }
            v => v,
        };
        let params = match value {
            Value::Str(_)
            | Value::List(_)
            | Value::ZSet(_)
            | Value::Hash(_)
            | Value::Lease(_)
            | Value::Blocked(_) => return Err(CmdError::WrongType),
            Value::Window(s) => {
                fields.push(("bucket_start_ms", ms(s.state.start)));
                fields.push(("previous", s.state.prev as i64));
                fields.push(("current", s.state.curr as i64));
                s.params
            }
            Value::Fixed(s) => {
                fields.push(("window_start_ms", ms(s.state.start)));
                fields.push(("count", s.state.count as i64));
                s.params
            }
            Value::Gcra(s) => {
                fields.push(("burst", s.params.burst.get() as i64));
                fields.push(("tat_ms", ms(s.state.tat)));
                s.params
            }
            Value::Sliding(s) => {
                fields.push(("count", s.state.total() as i64));
                s.params
            }
            Value::Log(s) => {
                fields.push(("precision_ms", ms(s.params.precision.get())));
                fields.push(("count", s.state.total() as i64));
                fields.push(("slots", s.state.slots() as i64));
                s.params
            }
        };
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
