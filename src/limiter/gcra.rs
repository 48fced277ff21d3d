//! The generic cell rate algorithm: a token bucket without a refill task.
//! State is one "theoretical arrival time" (TAT): the moment the bucket
//! would be full again.
//!
//! With emission interval `T = period / limit` (rounded up to a whole
//! nanosecond, so rounding never admits more than the rate) and tolerance
//! `burst * T`, a request of `cost` is admitted iff
//! `max(tat, now) + cost * T - burst * T <= now`.

use crate::clock::Nanos;

use super::contract::{
    get_le, put_le, put_u64, Decision, Fields, Params, StateBytes, Storage, MAX_USAGE, STATE_MAX,
};

/// The theoretical arrival time; 0 = a full bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    pub tat: u64,
}

impl State {
    /// When the state stops mattering: once the bucket is full again.
    pub fn expires_at(&self) -> u64 {
        self.tat
    }
}

/// The emission interval: nanoseconds per unit.
pub fn emission_interval(p: &Params) -> u64 {
    p.period().div_ceil(p.limit())
}

/// Decides a request of `cost` at `now`; on admission, `state` is charged.
pub fn decide(state: &mut State, p: &Params, now: u64, cost: u64) -> Decision {
    let t = emission_interval(p);
    let tolerance = t.saturating_mul(p.burst.get());
    let tat = state.tat.max(now);
    let new_tat = tat.saturating_add(t.saturating_mul(cost));
    let allow_at = new_tat.saturating_sub(tolerance);
    let allowed = allow_at <= now;
    let kept_tat = if allowed { new_tat } else { tat };
    if allowed {
        state.tat = new_tat;
    }
    // Units that fit now: the room left in the tolerance, in whole units.
    let remaining = tolerance.saturating_sub(kept_tat - now) / t;
    Decision {
        allowed,
        limit: p.limit(),
        remaining,
        retry_after: (!allowed).then(|| allow_at - now),
        reset_after: kept_tat - now,
    }
}

/// Gives back up to `n` units: moves the TAT back, never before `now`.
pub fn refund(state: &mut State, p: &Params, now: u64, n: u64) {
    let back = emission_interval(p).saturating_mul(n);
    state.tat = state.tat.saturating_sub(back).max(now.min(state.tat));
}

/// Adds `n` units at `now`, past the tolerance if need be: the TAT moves
/// on by `n` emission intervals, up to [`max_debt`] ahead of `now` (never
/// back: a TAT already further, from an older file, stays).
pub fn record(state: &mut State, p: &Params, now: u64, n: u64) {
    let step = emission_interval(p).saturating_mul(n);
    let tat = state.tat.max(now).saturating_add(step);
    state.tat = tat.min(now.saturating_add(max_debt(p))).max(state.tat);
}

/// How far ahead of now an overdraft may push the TAT: a full bucket's
/// tolerance plus one period (`limit` units past the burst), and never
/// more than [`MAX_USAGE`] units. So an overdrawn key refills within
/// `burst * T + period` (two periods with the default burst, as long as
/// `window`'s state lives) rather than for centuries (`RL.CHARGE k 100 1h
/// 9223372036854775807` once set a 528-year TTL), and a refund of 2^63 - 1
/// always refills it.
pub fn max_debt(p: &Params) -> u64 {
    let t = emission_interval(p);
    t.saturating_mul(p.burst.get())
        .saturating_add(p.period())
        .min(t.saturating_mul(MAX_USAGE))
}

impl super::contract::Limiter for State {
    const ALGORITHM: super::contract::Algorithm = super::contract::Algorithm::Gcra;
    fn decide(&mut self, p: &Params, now: Nanos, cost: u64) -> Decision {
        decide(self, p, now.0, cost)
    }
    fn refund(&mut self, p: &Params, now: Nanos, n: u64) {
        refund(self, p, now.0, n)
    }
    fn record(&mut self, p: &Params, now: Nanos, n: u64) {
        record(self, p, now.0, n)
    }
    fn expires_at(&self, _: &Params) -> Nanos {
        Nanos(State::expires_at(self))
    }
}

/// Stored as its TAT, compact too.
impl Storage for State {
    const TAG: u8 = 4;
    const COMPACT_LEN: usize = 8;
    fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.tat);
    }
    fn decode<F: Fields>(_: &Params, f: &mut F) -> Result<Self, F::Error> {
        Ok(State { tat: f.u64()? })
    }
    #[inline]
    fn pack(&self, _: &Params) -> Option<StateBytes> {
        let mut b = [0; STATE_MAX];
        put_le::<8>(&mut b, 0, self.tat);
        Some(b)
    }
    #[inline]
    fn unpack(st: &[u8], _: &Params) -> Self {
        State {
            tat: get_le::<8>(st, 0),
        }
    }
    fn describe(&self, p: &Params, field: &mut dyn FnMut(&'static str, i64)) {
        field("burst", p.burst.get() as i64);
        field("tat_ms", (self.tat / 1_000_000) as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{check_moments, Moment};
    use std::num::NonZeroU64;

    const S: u64 = 1_000_000_000;

    fn params(limit: u64, period_s: u64, burst: u64) -> Params {
        Params {
            burst: NonZeroU64::new(burst).unwrap(),
            ..Params::new(
                NonZeroU64::new(limit).unwrap(),
                NonZeroU64::new(period_s * S).unwrap(),
            )
        }
    }

    /// (offset, cost, allowed, remaining, retry_after, reset_after)
    #[test]
    fn table_of_moments() {
        // 10 per 10 s, burst 3: one unit per second, three at once.
        let p = params(10, 10, 3);
        let t0 = 1_700_000_000 * S;
        let mut st = State::default();
        let rows: &[Moment] = &[
            (0, 1, true, 2, None, S),
            (0, 2, true, 0, None, 3 * S),
            (0, 1, false, 0, Some(S), 3 * S),
            (S, 1, true, 0, None, 3 * S),
            (S, 3, false, 0, Some(3 * S), 3 * S),
            (10 * S, 3, true, 0, None, 3 * S),
            (20 * S, 1, true, 2, None, S),
        ];
        check_moments(t0, rows, |now, cost| decide(&mut st, &p, now, cost));
    }

    #[test]
    fn refund_never_below_full() {
        let p = params(10, 10, 10);
        let mut st = State::default();
        let now = 100 * S;
        decide(&mut st, &p, now, 2);
        refund(&mut st, &p, now, 5);
        assert_eq!(st.tat, now);
        assert_eq!(decide(&mut st, &p, now, 1).remaining, 9);
    }
}
