//! The reply every limiter decision shares.

use crate::limiter::Decision;
use crate::protocol::ReplyBuf;

/// Nanoseconds to whole milliseconds, rounded up: a client told to retry
/// after the rounded time is never early.
pub(crate) fn ms_ceil(ns: u64) -> i64 {
    ns.div_ceil(1_000_000) as i64
}

/// The five fields of a decision: a positional array of integers in RESP2
/// and RESP3 alike, as `CL.THROTTLE` (and redis-cell) answer. Clients now
/// negotiate RESP3 by default, and a limiter reply must never change shape
/// under code written for it: a map there read as its keys (`allowed` =
/// `b"allowed"`, always true) and turned limiting off without a word.
/// `extra` more elements follow, which the caller writes (`RL.ALLOWMANY`'s
/// index, `RL.CHECK`'s policy name).
pub fn write_decision(out: &mut ReplyBuf, d: &Decision, extra: usize) {
    out.array_of_ints(
        5 + extra,
        &[
            d.allowed as i64,
            d.limit as i64,
            d.remaining as i64,
            d.retry_after.map_or(-1, ms_ceil),
            ms_ceil(d.reset_after),
        ],
    );
}
