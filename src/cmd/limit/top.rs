//! `RL.TOP`: the keys with the most denials, admissions or shadow denials
//! on this node, from the heavy hitters' sketches (`stats/top.rs`).

use super::{CmdError, Ctx};
use crate::cmd::args::{is, Cursor};
use crate::protocol::Request;
use crate::stats::top::{Kind, Period};

/// `RL.TOP`'s default COUNT.
const DEFAULT_COUNT: usize = 10;

/// ```text
/// RL.TOP [DENIED|ALLOWED|SHADOW] [COUNT n] [POLICY name] [WINDOW d|ALL] [WITHERRORS]
/// ```
/// A flat array of key, count, key, count..., heaviest first, in RESP2 and
/// RESP3 alike (an array, not a map: the order is the answer), of the keys
/// counted past the sketches' error bound; WITHERRORS: key, count, error
/// triples of every key the sketches hold. WINDOW is a
/// duration up to `--top-window` (its default), or ALL for since start.
pub fn top(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let top = &ctx.state.stats.top;
    let mut kind = Kind::Denied;
    let mut count = DEFAULT_COUNT;
    let mut policy = None;
    let mut period = Period::Recent(top.window_ns());
    let mut with_errors = false;
    let mut args = Cursor::new(req, 1);
    while let Some(arg) = args.next() {
        if let Some(k) = Kind::ALL.into_iter().find(|k| is(arg, k.name())) {
            kind = k;
        } else if is(arg, "COUNT") {
            let n = crate::util::parse_i64(args.value_for("COUNT")?).ok_or(CmdError::NotInteger)?;
            count = usize::try_from(n)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| CmdError::err("COUNT must be positive"))?;
        } else if is(arg, "POLICY") {
            let name = args.value_for("POLICY")?;
            policy = Some(
                std::str::from_utf8(name).map_err(|_| CmdError::err("no policy by that name"))?,
            );
        } else if is(arg, "WINDOW") {
            period = window(args.value_for("WINDOW")?, top.window_ns())?;
        } else if is(arg, "WITHERRORS") {
            with_errors = true;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    if with_errors {
        // Every key the sketches hold, each with what its count may
        // overstate.
        let hitters = top.read(kind, count, policy, period, ctx.now);
        ctx.out.array(hitters.len() * 3);
        for h in &hitters {
            ctx.out.bulk(&h.key);
            ctx.out.int(h.count as i64);
            ctx.out.int(h.err as i64);
        }
        return Ok(());
    }
    // A count within the sketches' error bound could be any key's: under
    // many light keys each tracked one showed hundreds it never had. Only
    // keys counted past the bound are heavy hitters for sure.
    let bound = top.error_bound(kind, period, ctx.now);
    let hitters = top.read(kind, count, policy, period, ctx.now);
    let shown = hitters.iter().take_while(|h| h.count > bound).count();
    ctx.out.array(shown * 2);
    for h in &hitters[..shown] {
        ctx.out.bulk(&h.key);
        ctx.out.int(h.count as i64);
    }
    Ok(())
}

/// WINDOW's value: ALL, or a duration (`30s`, `500ms`, `5m`; bare
/// seconds) within `--top-window`.
fn window(arg: &[u8], max_ns: u64) -> Result<Period, CmdError> {
    if is(arg, "ALL") {
        return Ok(Period::All);
    }
    let d = std::str::from_utf8(arg)
        .ok()
        .and_then(|s| crate::config::parse_duration(s).ok())
        .ok_or_else(|| CmdError::err("WINDOW must be a duration (30s, 5m) or ALL"))?;
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if ns > max_ns {
        return Err(CmdError::err(format!(
            "WINDOW is at most --top-window ({} ms), or ALL",
            max_ns / 1_000_000
        )));
    }
    Ok(Period::Recent(ns))
}
