//! The concurrency-limit commands: `RL.ACQUIRE`, `RL.RELEASE`, `RL.RENEW`,
//! `RL.LEASES`, and `RL.PEEK ... ALGO lease`. The lease logic is
//! `limiter/lease.rs`'s; the key's record and TTL `store/limit.rs`'s.
//!
//! Lease ids are 16 bytes, so a lease costs 32 bytes: the server makes
//! them at random (128 bits, answered as 32 hex digits); a client's own
//! `ID` of 32 hex digits is those bytes, and any other is its SHA-256
//! truncated to 16 bytes (`RL.LEASES` then shows that digest).

use super::args::is;
use super::parse::{self, check_lease_cost};
use super::reply::write_decision;
use super::{error::show, CmdError, Ctx};
use crate::limiter::lease::{Lapsed, Lease, LeaseId, ID_LEN};
use crate::protocol::{ReplyBuf, Request};
use crate::stats::LeaseEvent;
use crate::store::keys::Keys;
use crate::store::{limit, Value};

/// A lease id as the client gave it (`ID`), or a new random one; and how
/// it is answered.
pub(super) fn lease_id(given: Option<&[u8]>) -> Result<LeaseId, CmdError> {
    match given {
        Some(text) => Ok(id_of(text)),
        None => {
            let mut id = [0u8; ID_LEN];
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id)
                .map_err(|_| CmdError::err("cannot make a lease id: no system randomness"))?;
            Ok(id)
        }
    }
}

/// The 16 bytes a client's id names: 32 hex digits are read as such (a
/// server-made id round-trips), anything else is digested.
pub fn id_of(text: &[u8]) -> LeaseId {
    let mut id = [0u8; ID_LEN];
    if text.len() == 2 * ID_LEN {
        let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        let ok =
            text.chunks(2)
                .zip(id.iter_mut())
                .all(|(pair, b)| match (hex(pair[0]), hex(pair[1])) {
                    (Some(h), Some(l)) => {
                        *b = h << 4 | l;
                        true
                    }
                    _ => false,
                });
        if ok {
            return id;
        }
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, text);
    id.copy_from_slice(&digest.as_ref()[..ID_LEN]);
    id
}

/// 32 lower-case hex digits.
pub fn hex(id: &LeaseId) -> [u8; 2 * ID_LEN] {
    let mut out = [0u8; 2 * ID_LEN];
    for (i, b) in id.iter().enumerate() {
        out[2 * i] = b"0123456789abcdef"[(b >> 4) as usize];
        out[2 * i + 1] = b"0123456789abcdef"[(b & 15) as usize];
    }
    out
}

/// Counts leases that lapsed unreleased, found by an operation.
fn lapsed(ctx: &mut Ctx<'_>, l: Lapsed) {
    if l.leases > 0 {
        ctx.state.stats.counters.add_at(
            crate::metrics::table::LEASES,
            LeaseEvent::Expired as usize,
            l.leases,
        );
    }
}

/// `key limit ttl [COST n] [ID id]` from argument 1: the validated parts.
pub struct AcquireRequest<'a> {
    pub key: &'a [u8],
    pub limit: u64,
    pub ttl: u64,
    pub cost: u64,
    pub id: Option<&'a [u8]>,
}

pub fn acquire_request<'a>(req: &'a Request<'_>) -> Result<AcquireRequest<'a>, CmdError> {
    let limit = parse::positive(req.arg(2), "limit")?;
    let ttl = parse::duration(req.arg(3), "ttl")?;
    let (mut cost, mut id) = (None, None);
    let mut at = 4;
    while at < req.len() {
        let (opt, value) = (req.arg(at), (at + 1 < req.len()).then(|| req.arg(at + 1)));
        match value {
            Some(v) if is(opt, "COST") && cost.is_none() => {
                cost = Some(parse::positive(v, "COST")?)
            }
            Some(v) if is(opt, "ID") && id.is_none() => {
                if v.is_empty() {
                    return Err(CmdError::err("ID must not be empty"));
                }
                id = Some(v)
            }
            _ => return Err(CmdError::Syntax),
        }
        at += 2;
    }
    let cost = cost.unwrap_or(1);
    check_lease_cost(limit, cost)?;
    Ok(AcquireRequest {
        key: req.arg(1),
        limit,
        ttl,
        cost,
        id,
    })
}

/// ```text
/// RL.ACQUIRE key limit ttl [COST n] [ID lease_id]
/// ```
/// `RL.ALLOW`'s five fields (`remaining` = units still free,
/// `retry_after_ms` = until enough leases lapse if none is released,
/// `reset_after_ms` = until the last one lapses), then the lease id (nil
/// when denied).
pub fn acquire(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let r = acquire_request(req)?;
    let id = lease_id(r.id)?;
    let now = ctx.now;
    let room = ctx.state.write_room();
    let (a, gone) = ctx.db.update(r.key, now, |slot| {
        limit::acquire(slot, r.limit, r.ttl, now, r.cost, id, room)
    })?;
    lapsed(ctx, gone);
    let event = match (a.decision.allowed, a.existing) {
        (false, _) => LeaseEvent::Denied,
        (true, false) => LeaseEvent::Acquired,
        (true, true) => LeaseEvent::Retried,
    };
    ctx.state
        .stats
        .counters
        .add_at(crate::metrics::table::LEASES, event as usize, 1);
    // A lease refused is a denial on its key, for `RL.TOP` as any other.
    ctx.session
        .stats
        .key_decision(r.key, a.decision.allowed, false, None, now);
    write_decision(ctx.out, &a.decision, 1);
    match (a.decision.allowed, r.id) {
        (false, _) => ctx.out.null(),
        (true, Some(given)) => ctx.out.bulk(given),
        (true, None) => ctx.out.bulk(&hex(&id)),
    }
    Ok(())
}

/// ```text
/// RL.RELEASE key lease_id
/// ```
/// 1 if the lease was live (its units are free now), 0 if unknown or
/// already lapsed: releasing twice is harmless.
pub fn release(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let id = id_of(req.arg(2));
    let now = ctx.now;
    let (done, gone) = ctx
        .db
        .update(req.arg(1), now, |slot| limit::release(slot, now, &id))?;
    lapsed(ctx, gone);
    if done {
        ctx.state.stats.counters.add_at(
            crate::metrics::table::LEASES,
            LeaseEvent::Released as usize,
            1,
        );
    }
    ctx.out.int(done as i64);
    Ok(())
}

/// ```text
/// RL.RENEW key lease_id ttl
/// ```
/// 1 if the lease was live (it now lapses `ttl` from now), 0 if it had
/// already lapsed or is unknown.
pub fn renew(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let id = id_of(req.arg(2));
    let ttl = parse::duration(req.arg(3), "ttl")?;
    let now = ctx.now;
    let (done, gone) = ctx
        .db
        .update(req.arg(1), now, |slot| limit::renew(slot, now, &id, ttl))?;
    lapsed(ctx, gone);
    if done {
        ctx.state.stats.counters.add_at(
            crate::metrics::table::LEASES,
            LeaseEvent::Renewed as usize,
            1,
        );
    }
    ctx.out.int(done as i64);
    Ok(())
}

/// Leases `RL.LEASES` lists when not asked for a `COUNT`.
pub const LEASES_PAGE: usize = 1000;

/// ```text
/// RL.LEASES key [COUNT n] [CURSOR c]
/// ```
/// The live leases, each a map of `id`, `units` and `ttl_ms`. Without
/// `CURSOR`: the first `COUNT` (default [`LEASES_PAGE`]) soonest to lapse,
/// a flat array (an empty one if the key holds none); `RL.STATE` says how
/// many there are. With `CURSOR` (`0` to start): a page of up to `COUNT`
/// in id order and the cursor to pass next, as `SCAN` answers
/// (`[cursor, [leases...]]`, cursor `0` when done); a lease held for the
/// whole walk is listed exactly once. A reply never holds more than
/// `COUNT` leases, however many the key holds.
pub fn leases(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let (mut count, mut cursor) = (None, None);
    let mut at = 2;
    while at < req.len() {
        let (opt, value) = (req.arg(at), (at + 1 < req.len()).then(|| req.arg(at + 1)));
        match value {
            Some(v) if is(opt, "COUNT") && count.is_none() => {
                count = Some(usize::try_from(parse::positive(v, "COUNT")?).unwrap_or(usize::MAX))
            }
            Some(v) if is(opt, "CURSOR") && cursor.is_none() => cursor = Some(parse_cursor(v)?),
            _ => return Err(CmdError::Syntax),
        }
        at += 2;
    }
    let count = count.unwrap_or(LEASES_PAGE);
    let now = ctx.now;
    let out = &mut *ctx.out;
    let found = ctx.db.get(req.arg(1), now, |e| match &e.value {
        Value::Lease(l) => {
            match cursor {
                None => {
                    let n = l.leases.live_count(now.0).min(count);
                    write_leases(out, n, l.leases.live(now.0).take(n), now.0)
                }
                Some(after) => {
                    let (page, next) = l.leases.page(now.0, after.as_ref(), count);
                    out.array(2);
                    match next {
                        Some(id) => out.bulk(&hex(&id)),
                        None => out.bulk_str("0"),
                    }
                    write_leases(out, page.len(), page.iter(), now.0);
                }
            }
            Ok(())
        }
        _ => Err(CmdError::WrongType),
    });
    found.unwrap_or_else(|| {
        if cursor.is_some() {
            out.array(2);
            out.bulk_str("0");
        }
        out.array(0);
        Ok(())
    })
}

/// A lease cursor: `0` (from the start), or the 32 hex digits of the id
/// a page ended with.
fn parse_cursor(text: &[u8]) -> Result<Option<LeaseId>, CmdError> {
    if text == b"0" {
        return Ok(None);
    }
    let invalid = || CmdError::err("invalid cursor");
    if text.len() != 2 * ID_LEN || !text.iter().all(u8::is_ascii_hexdigit) {
        return Err(invalid());
    }
    Ok(Some(id_of(text)))
}

/// `n` leases, each a map of `id`, `units` and `ttl_ms`.
fn write_leases<'a>(
    out: &mut ReplyBuf,
    n: usize,
    leases: impl Iterator<Item = &'a Lease>,
    now: u64,
) {
    out.array(n);
    for lease in leases {
        out.map(3);
        out.bulk_str("id");
        out.bulk(&hex(&{ lease.id }));
        out.bulk_str("units");
        out.int(lease.units() as i64);
        out.bulk_str("ttl_ms");
        out.int(super::reply::ms_ceil(lease.expires() - now));
    }
}

/// `RL.PEEK key limit ttl ALGO lease [COST n]`: what `RL.ACQUIRE` would
/// answer, holding nothing; `None` when the request names no lease.
pub fn peek(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<Option<()>, CmdError> {
    let names_lease = (4..req.len().saturating_sub(1))
        .any(|i| is(req.arg(i), "ALGO") && is(req.arg(i + 1), "lease"));
    if !names_lease {
        return Ok(None);
    }
    let limit = parse::positive(req.arg(2), "limit")?;
    let ttl = parse::duration(req.arg(3), "ttl")?;
    let mut cost = 1;
    let mut at = 4;
    while at + 1 < req.len() {
        match req.arg(at) {
            o if is(o, "ALGO") => {}
            o if is(o, "COST") => cost = parse::positive(req.arg(at + 1), "COST")?,
            o => {
                return Err(CmdError::err(format!(
                    "'{}' is not an option of a lease",
                    show(o)
                )))
            }
        }
        at += 2;
    }
    if at != req.len() {
        return Err(CmdError::Syntax);
    }
    check_lease_cost(limit, cost)?;
    let now = ctx.now;
    let d = ctx
        .db
        .get(req.arg(1), now, |e| {
            limit::peek_lease(Some(e), limit, ttl, now, cost)
        })
        .unwrap_or_else(|| limit::peek_lease(None, limit, ttl, now, cost))?;
    write_decision(ctx.out, &d, 0);
    Ok(Some(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_others_digest() {
        let id = [0xab; ID_LEN];
        assert_eq!(id_of(&hex(&id)), id);
        assert_eq!(id_of(b"ABABABABABABABABABABABABABABABAB"), id, "any case");
        let a = id_of(b"req-7f3a");
        assert_ne!(a, id_of(b"req-7f3b"));
        assert_eq!(a, id_of(b"req-7f3a"));
        // 32 characters that are not all hex are digested too.
        assert_ne!(id_of(b"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"), [0; ID_LEN]);
    }
}
