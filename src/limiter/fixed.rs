//! Fixed windows aligned to multiples of `period` from the Unix epoch, or
//! to the calendar (`calendar.rs`: days, ISO weeks, months and years, with
//! a `TZ` offset), for quotas ("10 000 per month, reset on the 1st").
//! Admits up to twice the limit across a window boundary: that is the
//! price of its simplicity, and why `window` and `log` exist.

use super::contract::{
    add_usage, bucket, get_le, put_le, put_u64, u32_of, Decision, Fields, Params, StateBytes,
    Storage, STATE_MAX,
};

/// The count of the window that starts at `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    pub start: u64,
    pub count: u64,
}

/// The window holding `now`: its start and end.
fn bounds(p: &Params, now: u64) -> (u64, u64) {
    match p.calendar() {
        Some(c) => c.window(now),
        None => {
            let start = now - now % p.period();
            (start, start.saturating_add(p.period()))
        }
    }
}

impl State {
    /// The state as seen at `now` (in the window ending at the second
    /// value): a past window counts nothing.
    fn at(self, now: u64, p: &Params) -> (State, u64) {
        let (start, end) = bounds(p, now);
        let count = if self.start == start { self.count } else { 0 };
        (State { start, count }, end)
    }

    /// When this state stops mattering: the end of its window.
    pub fn expires_at(&self, p: &Params) -> u64 {
        bounds(p, self.start).1
    }
}

/// Decides a request of `cost` at `now`; on admission, `state` is charged.
pub fn decide(state: &mut State, p: &Params, now: u64, cost: u64) -> Decision {
    // Time only moves forward for a key: a clock behind the stored window
    // neither re-opens an earlier window nor forgets this one's count.
    let now = now.max(state.start);
    let limit = p.limit();
    let (cur, window_end) = state.at(now, p);
    let to_end = window_end - now;
    let allowed = cur.count.saturating_add(cost) <= limit;
    let count = if allowed { cur.count + cost } else { cur.count };
    if allowed {
        *state = State {
            start: cur.start,
            count,
        };
    }
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(count),
        retry_after: (!allowed).then_some(to_end),
        reset_after: if count > 0 { to_end } else { 0 },
    }
}

/// Gives back up to `n` units of the current window.
pub fn refund(state: &mut State, p: &Params, now: u64, n: u64) {
    let (cur, _) = state.at(now.max(state.start), p);
    *state = State {
        start: cur.start,
        count: cur.count.saturating_sub(n),
    };
}

/// Adds `n` units to the current window, over the limit if need be (up
/// to [`super::MAX_USAGE`]).
pub fn record(state: &mut State, p: &Params, now: u64, n: u64) {
    let (cur, _) = state.at(now.max(state.start), p);
    *state = State {
        start: cur.start,
        count: add_usage(cur.count, n),
    };
}

super::contract::limiter_of_fns!(Fixed);

/// Stored as its window's start and count; compact, as the window's
/// number (48 bits) and the count (32 bits).
impl Storage for State {
    const TAG: u8 = 3;
    const COMPACT_LEN: usize = 6 + 4;
    fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.start);
        put_u64(out, self.count);
    }
    fn decode<F: Fields>(p: &Params, f: &mut F) -> Result<Self, F::Error> {
        if p.precision.get() > 1 && p.calendar().is_none() {
            return Err(f.corrupt("a fixed limit's calendar is unknown"));
        }
        Ok(State {
            start: f.u64()?,
            count: f.u64()?,
        })
    }
    #[inline]
    fn pack(&self, p: &Params) -> Option<StateBytes> {
        let mut b = [0; STATE_MAX];
        put_le::<6>(&mut b, 0, bucket(self.start, compact_unit(p))?);
        put_le::<4>(&mut b, 6, u32_of(self.count)?);
        Some(b)
    }
    #[inline]
    fn unpack(st: &[u8], p: &Params) -> Self {
        State {
            start: get_le::<6>(st, 0) * compact_unit(p),
            count: get_le::<4>(st, 6),
        }
    }
    fn describe(&self, _: &Params, field: &mut dyn FnMut(&'static str, i64)) {
        field("window_start_ms", (self.start / 1_000_000) as i64);
        field("count", self.count as i64);
    }
}

/// What a compact window number counts in: the period, or for a
/// calendar-aligned limit (whose windows are months, weeks, ...: no
/// multiple of one length) whole minutes, which every boundary is.
fn compact_unit(p: &Params) -> u64 {
    match p.calendar() {
        Some(_) => 60 * crate::clock::Nanos::PER_SEC,
        None => p.period(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{check_moments, params_secs as params, Moment};

    const S: u64 = 1_000_000_000;

    /// (time offset, cost, allowed, remaining, retry_after, reset_after)
    #[test]
    fn table_of_moments() {
        let p = params(3, 10);
        let t0 = 1_700_000_000 * S; // a multiple of 10 s
        let mut st = State::default();
        let rows: &[Moment] = &[
            (0, 1, true, 2, None, 10 * S),
            (2 * S, 2, true, 0, None, 8 * S),
            (3 * S, 1, false, 0, Some(7 * S), 7 * S),
            (10 * S, 3, true, 0, None, 10 * S),
            (25 * S, 1, true, 2, None, 5 * S),
        ];
        check_moments(t0, rows, |now, cost| decide(&mut st, &p, now, cost));
    }

    #[test]
    fn refund_never_below_zero() {
        let p = params(5, 1);
        let mut st = State::default();
        decide(&mut st, &p, 0, 2);
        refund(&mut st, &p, 0, 10);
        assert_eq!(st.count, 0);
    }
}
