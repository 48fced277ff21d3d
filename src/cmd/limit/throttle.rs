//! `CL.THROTTLE`, answering exactly as redis-cell does (see
//! `limiter/cell.rs` and `docs/commands.md`), except where redis-cell
//! crashes its host (a key of another type: `WRONGTYPE`) or silently
//! misbehaves (negative numbers, zero rates: a clear error).

use std::num::NonZeroU64;

use super::{CmdError, Ctx};
use crate::clock::Nanos;
use crate::limiter::cell::{self, Quota, QuotaError};
use crate::limiter::{gcra, Params};
use crate::protocol::Request;
use crate::store::entry::Stored;
use crate::store::keys::Keys;
use crate::store::{Entry, Value};
use crate::util::parse_i64;

fn int(arg: &[u8], what: &str, min: i64) -> Result<i64, CmdError> {
    let n = parse_i64(arg).ok_or(CmdError::NotInteger)?;
    if n < min {
        return Err(CmdError::err(format!(
            "{what} must be {}",
            if min == 0 { "zero or more" } else { "positive" }
        )));
    }
    Ok(n)
}

/// ```text
/// CL.THROTTLE key max_burst count_per_period period [quantity]
/// ```
pub fn throttle(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    if req.len() > 6 {
        return Err(CmdError::WrongArity("cl.throttle".into()));
    }
    let max_burst = int(req.arg(2), "max_burst", 0)? as u64;
    // The reply carries max_burst + 1 as a signed integer.
    if max_burst >= i64::MAX as u64 {
        return Err(CmdError::err("max_burst is out of range"));
    }
    let count = int(req.arg(3), "count_per_period", 0)? as u64;
    let period_s = int(req.arg(4), "period", 0)? as u64;
    let quantity = match req.len() {
        6 => int(req.arg(5), "quantity", 0)? as u64,
        _ => 1,
    };
    let period = period_s
        .checked_mul(1_000_000_000)
        .filter(|&p| p <= i64::MAX as u64)
        .ok_or_else(|| CmdError::err("period is out of range"))?;
    let quota = Quota::new(max_burst, count, period).map_err(|e| match e {
        QuotaError::ZeroRate => CmdError::err("Zero rates are not supported"),
        QuotaError::BurstTooLarge => CmdError::err(
            "max_burst is out of range: max_burst + 1 times period / count must be under 292 years",
        ),
    })?;
    // What RL.STATE and RL.REFUND see: the same GCRA state, with the rate
    // as given and redis-cell's capacity as the burst.
    let params = Params {
        burst: NonZeroU64::new(quota.limit).expect("max_burst + 1 > 0"),
        ..Params::new(
            NonZeroU64::new(count).expect("checked by Quota::new"),
            NonZeroU64::new(period).expect("checked by Quota::new"),
        )
    };
    let now = ctx.now;
    let t = ctx.db.update(req.arg(1), now, |slot| {
        // A GCRA key under an `RL.ALLOW ... BLOCK` penalty is limited
        // until the block ends, uncounted; a block that has ended goes
        // with the next write.
        let (mut state, block_end) = match slot.as_ref().map(|e| &e.value) {
            Some(Value::Gcra(s)) => (s.state, 0),
            Some(Value::Blocked(b)) => match &b.value {
                Value::Gcra(s) => (s.state, b.until),
                _ => return Err(CmdError::WrongType),
            },
            Some(_) => return Err(CmdError::WrongType),
            None => (gcra::State::default(), 0),
        };
        if block_end > now.0 {
            let t = cell::throttle(&mut state, &quota, now.0, 0);
            let wait = block_end - now.0;
            return Ok(cell::Throttle {
                limited: true,
                remaining: 0,
                retry_after: Some(wait.max(t.retry_after.unwrap_or(0))),
                reset_after: wait.max(t.reset_after),
                ..t
            });
        }
        let t = cell::throttle(&mut state, &quota, now.0, quantity);
        if !t.limited && quantity > 0 {
            // The key lives until the bucket is full again.
            let mut e = Entry::new(Value::Gcra(Stored { params, state }));
            e.set_expiry(Some(Nanos(state.tat)));
            *slot = (state.tat > now.0).then_some(e);
        }
        Ok(t)
    })?;
    if quantity > 0 {
        let d = crate::limiter::Decision {
            allowed: !t.limited,
            limit: t.limit,
            remaining: t.remaining,
            retry_after: t.retry_after,
            reset_after: t.reset_after,
        };
        let charged = if t.limited { 0 } else { quantity };
        ctx.session
            .stats
            .decision(crate::limiter::Algorithm::Gcra, &d, charged);
        ctx.session
            .stats
            .key_decision(req.arg(1), d.allowed, false, None, now);
    }
    let out = &mut *ctx.out;
    out.array(5);
    out.int(t.limited as i64);
    out.int(t.limit as i64);
    out.int(t.remaining as i64);
    out.int(t.retry_after.map_or(-1, cell::reply_seconds));
    out.int(cell::reply_seconds(t.reset_after));
    Ok(())
}
