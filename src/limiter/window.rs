//! The two-bucket sliding-window counter, as the articles "Sliding Window
//! Counter" and "Sliding Window - Fixed Rate: Practical Rate Limiting for
//! Web APIs" describe it.
//!
//! Buckets align to multiples of `period` on the server clock. The count in
//! the last `period` is estimated as
//! `previous * (period - elapsed) / period + current`, and a request is
//! admitted iff `estimate + cost <= limit`. The comparison is done exactly,
//! multiplied through by `period` in 128-bit integers, so no rounding ever
//! admits a request the formula would deny. Constant memory per key.
//!
//! Bound: within one aligned bucket at most `limit` units are admitted (the
//! estimate is at least `current`). Over any `period`-long interval that
//! spans two buckets, the estimate assumes the previous bucket's requests
//! were spread evenly; if they all came at its end, up to `2 * limit` can be
//! admitted in the worst case (all of the previous bucket just before the
//! boundary, then, as its weight decays, up to `limit` more). The property
//! tests check both bounds; `docs/algorithms.md` has the measured error on
//! realistic traffic.

use super::contract::{
    bucket, get_le, mul_div_floor, put_le, put_u64, u32_of, Decision, Fields, Params, StateBytes,
    Storage, MAX_USAGE, STATE_MAX,
};

/// Counts of the bucket starting at `start` and of the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    pub start: u64,
    pub prev: u64,
    pub curr: u64,
}

impl State {
    /// The state as seen at `now`, buckets rolled forward.
    fn at(self, now: u64, period: u64) -> State {
        let start = now - now % period;
        if self.start == start {
            self
        } else if self.start.checked_add(period) == Some(start) {
            State {
                start,
                prev: self.curr,
                curr: 0,
            }
        } else if self.start > start {
            // The period grew and re-aligned the buckets behind the stored
            // one: keep its counts rather than forget admitted requests.
            State { start, ..self }
        } else {
            State {
                start,
                prev: 0,
                curr: 0,
            }
        }
    }

    /// When this state stops mattering: the end of the next bucket, after
    /// which both counts have rolled out.
    pub fn expires_at(&self, p: &Params) -> u64 {
        self.start.saturating_add(p.period().saturating_mul(2))
    }
}

/// Decides a request of `cost` at `now`; on admission, `state` is charged.
/// `cost` is at most `limit` (see [`super::contract::Limiter::decide`]):
/// `retry_after` counts on it.
pub fn decide(state: &mut State, p: &Params, now: u64, cost: u64) -> Decision {
    let (limit, period) = (p.limit(), p.period());
    debug_assert!(cost <= limit, "cost {cost} over limit {limit}");
    let mut cur = state.at(now, period);
    let left = period - (now - cur.start);
    let scaled = |s: &State| s.prev as u128 * left as u128 + s.curr as u128 * period as u128;
    let cap = limit as u128 * period as u128;
    let allowed = scaled(&cur) + cost as u128 * period as u128 <= cap;
    if allowed {
        cur.curr += cost;
        *state = cur;
    }
    let used = scaled(&cur);
    let remaining = (cap.saturating_sub(used) / period as u128) as u64;
    let retry_after = (!allowed).then(|| retry_after(&cur, limit, period, left, cost));
    let reset_after = if cur.curr > 0 {
        left.saturating_add(period)
    } else if cur.prev > 0 {
        left
    } else {
        0
    };
    Decision {
        allowed,
        limit,
        remaining,
        retry_after,
        reset_after,
    }
}

/// Earliest wait after which `cost` fits, if nothing else arrives.
fn retry_after(s: &State, limit: u64, period: u64, left: u64, cost: u64) -> u64 {
    // Still in this bucket: the previous bucket's weight decays until
    // `prev * (left - t) <= (limit - curr - cost) * period`.
    if s.curr.saturating_add(cost) <= limit && s.prev > 0 {
        let room = limit - s.curr - cost;
        let t = left.saturating_sub(mul_div_floor(room, period, s.prev));
        if t < left {
            return t;
        }
    }
    // In the next bucket, `curr` becomes the previous one and decays:
    // wait `e` into it until `curr * (period - e) <= (limit - cost) * period`.
    let e = if s.curr == 0 {
        0
    } else {
        period.saturating_sub(mul_div_floor(limit - cost, period, s.curr))
    };
    left.saturating_add(e)
}

/// Gives back up to `n` units, from the current bucket first.
pub fn refund(state: &mut State, p: &Params, now: u64, n: u64) {
    let mut cur = state.at(now, p.period());
    let from_curr = n.min(cur.curr);
    cur.curr -= from_curr;
    cur.prev = cur.prev.saturating_sub(n - from_curr);
    *state = cur;
}

/// Adds `n` units to the current bucket, over the limit if need be: both
/// buckets together count at most [`MAX_USAGE`], so a refund of that much
/// empties them.
pub fn record(state: &mut State, p: &Params, now: u64, n: u64) {
    let mut cur = state.at(now, p.period());
    let room = MAX_USAGE.saturating_sub(cur.prev.saturating_add(cur.curr));
    cur.curr = cur.curr.saturating_add(n.min(room));
    *state = cur;
}

super::contract::limiter_of_fns!(Window);

/// Stored as its bucket's start and two counts; compact, as the bucket's
/// number (48 bits) and the counts (32 bits each).
impl Storage for State {
    const TAG: u8 = 2;
    const COMPACT_LEN: usize = 6 + 4 + 4;
    fn encode(&self, out: &mut Vec<u8>) {
        for n in [self.start, self.prev, self.curr] {
            put_u64(out, n);
        }
    }
    fn decode<F: Fields>(_: &Params, f: &mut F) -> Result<Self, F::Error> {
        Ok(State {
            start: f.u64()?,
            prev: f.u64()?,
            curr: f.u64()?,
        })
    }
    #[inline]
    fn pack(&self, p: &Params) -> Option<StateBytes> {
        let mut b = [0; STATE_MAX];
        put_le::<6>(&mut b, 0, bucket(self.start, p.period())?);
        put_le::<4>(&mut b, 6, u32_of(self.prev)?);
        put_le::<4>(&mut b, 10, u32_of(self.curr)?);
        Some(b)
    }
    #[inline]
    fn unpack(st: &[u8], p: &Params) -> Self {
        State {
            start: get_le::<6>(st, 0) * p.period(),
            prev: get_le::<4>(st, 6),
            curr: get_le::<4>(st, 10),
        }
    }
    fn describe(&self, _: &Params, field: &mut dyn FnMut(&'static str, i64)) {
        field("bucket_start_ms", (self.start / 1_000_000) as i64);
        field("previous", self.prev as i64);
        field("current", self.curr as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{check_moments, params_secs as params, Moment};

    const S: u64 = 1_000_000_000;

    #[test]
    fn article_example_blocks_at_five() {
        // The "Sliding Window Counter" article's example: limit 5/min,
        // previous bucket 8, current 3, 45 s in:
        // estimate 8 * 15/60 + 3 = 5, so one more is denied.
        let p = params(5, 60);
        let t0 = 1_745_000_100 * S; // a multiple of 60 s
        let mut st = State {
            start: t0 - 60 * S,
            prev: 0,
            curr: 8,
        };
        st = st.at(t0, 60 * S);
        st.curr = 3;
        let d = decide(&mut st, &p, t0 + 45 * S, 1);
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        // It fits once the previous bucket's weight drops below 1:
        // 8 * (15 - t)/60 <= 1  =>  t >= 7.5 s.
        assert_eq!(d.retry_after, Some(7_500_000_000));
        assert_eq!(st.curr, 3, "a denied request charges nothing");
    }

    /// (offset, cost, allowed, remaining, retry_after, reset_after)
    #[test]
    fn table_of_moments() {
        let p = params(4, 10);
        let t0 = 1_700_000_000 * S;
        let mut st = State::default();
        let rows: &[Moment] = &[
            (0, 2, true, 2, None, 20 * S),
            (S, 2, true, 0, None, 19 * S),
            (2 * S, 1, false, 0, Some(8 * S + 2_500_000_000), 18 * S),
            // Next bucket, 5 s in: previous 4 weighs 4 * 5/10 = 2.
            (15 * S, 2, true, 0, None, 15 * S),
            (15 * S, 1, false, 0, Some(2_500_000_000), 15 * S),
            // Two buckets later everything has rolled out.
            (40 * S, 4, true, 0, None, 20 * S),
        ];
        check_moments(t0, rows, |now, cost| decide(&mut st, &p, now, cost));
    }

    #[test]
    fn retry_after_is_exact() {
        // Whatever the state, waiting retry_after makes the request fit and
        // waiting 1 ns less does not.
        let p = params(7, 3);
        let t0 = 1_700_000_001 * S;
        for prev in 0..=7 {
            for curr in 0..=7 {
                for cost in 1..=7 {
                    let base = State {
                        start: t0 - t0 % (3 * S),
                        prev,
                        curr,
                    };
                    let mut st = base;
                    let now = t0 + 700_000_000;
                    let d = decide(&mut st, &p, now, cost);
                    let Some(wait) = d.retry_after else { continue };
                    let mut later = base;
                    assert!(
                        decide(&mut later, &p, now + wait, cost).allowed,
                        "{prev} {curr} {cost}"
                    );
                    let mut earlier = base;
                    assert!(
                        !decide(&mut earlier, &p, now + wait - 1, cost).allowed,
                        "{prev} {curr} {cost}"
                    );
                }
            }
        }
    }
}
