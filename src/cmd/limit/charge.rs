//! Charging after use: `RL.CHARGE` (`RL.ALLOWMANY CHARGE n` is a plan of
//! charges, `allow.rs`). A charge records its units whatever the key's
//! state (a response's real token count is known only once it has been
//! served), so it may overdraw; the overdraft then denies until it has
//! left its window.

use super::parse;
use super::reply::write_decision;
use super::{CmdError, Ctx};
use crate::protocol::Request;
use crate::store::keys::Keys;
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
