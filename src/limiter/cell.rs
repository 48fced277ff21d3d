//! `CL.THROTTLE`'s GCRA, exactly as redis-cell computes it, so its users
//! change nothing: `limit = max_burst + 1`, emission interval
//! `floor(period / count)`, tolerance `interval * limit`, `remaining` from
//! the room left in the tolerance, and a quantity that can never fit is
//! limited with no retry time. The state is the same theoretical arrival
//! time `gcra` keeps.

use super::gcra::State;

/// redis-cell's quota, validated: `count >= 1`, `period >= 1` ns,
/// `max_burst >= 0`, and an emission interval of at least 1 ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Nanoseconds per unit: `floor(period / count)`.
    pub interval: u64,
    /// `max_burst + 1`.
    pub limit: u64,
}

/// Why a quota cannot be enforced as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaError {
    /// A zero count or period (redis-cell: "Zero rates are not supported").
    ZeroRate,
    /// `max_burst + 1` emission intervals do not fit 2^63 ns (292 years):
    /// the bucket's capacity in time could not be represented, and the
    /// capacity enforced would silently be less than the one reported.
    BurstTooLarge,
}

impl Quota {
    pub fn new(max_burst: u64, count: u64, period_ns: u64) -> Result<Quota, QuotaError> {
        let interval = period_ns
            .checked_div(count)
            .filter(|&i| i > 0)
            .ok_or(QuotaError::ZeroRate)?;
        let limit = max_burst.checked_add(1).ok_or(QuotaError::BurstTooLarge)?;
        interval
            .checked_mul(limit)
            .filter(|&t| t <= i64::MAX as u64)
            .ok_or(QuotaError::BurstTooLarge)?;
        Ok(Quota { interval, limit })
    }

    /// The bucket's capacity in time: `limit` intervals (checked to fit).
    fn tolerance(&self) -> u64 {
        self.interval * self.limit
    }
}

/// redis-cell's answer, durations in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    pub limited: bool,
    pub limit: u64,
    pub remaining: u64,
    /// `None` when allowed, or when the quantity can never fit.
    pub retry_after: Option<u64>,
    pub reset_after: u64,
}

/// Decides `quantity` units at `now`. Quantity 0 only looks. On admission
/// `state.tat` moves; the key should then expire at `state.tat`.
pub fn throttle(state: &mut State, q: &Quota, now: u64, quantity: u64) -> Throttle {
    let increment = q.interval.saturating_mul(quantity);
    let tolerance = q.tolerance();
    let tat = state.tat.max(now);
    let new_tat = tat.saturating_add(increment);
    let allow_at = new_tat.saturating_sub(tolerance);
    let limited = allow_at > now;
    let ttl = if limited { tat - now } else { new_tat - now };
    if !limited && quantity > 0 {
        state.tat = new_tat;
    }
    // redis-cell: remaining = trunc((tolerance - ttl) / interval) when that
    // is above -1, measured in microseconds.
    let next_us = (tolerance / 1000) as i128 - (ttl / 1000) as i128;
    let interval_us = (q.interval / 1000) as i128;
    let remaining = if interval_us > 0 && next_us > 0 {
        (next_us / interval_us) as u64
    } else if interval_us == 0 && tolerance > ttl {
        // Sub-microsecond intervals: same formula in nanoseconds.
        (tolerance - ttl) / q.interval
    } else {
        0
    };
    // redis-cell's microsecond arithmetic can count more than the burst
    // left when the interval is a few microseconds (found by the property
    // test below: 121,213 per second, burst 45, answered 46 remaining
    // after one unit); what is left can never exceed what was not used.
    let used = if !limited { quantity } else { 0 };
    let remaining = remaining.min(q.limit.saturating_sub(used));
    Throttle {
        limited,
        limit: q.limit,
        remaining,
        retry_after: (limited && increment <= tolerance).then(|| allow_at - now),
        reset_after: ttl,
    }
}

/// Whole seconds as redis-cell replies them: truncated, plus one if any
/// millisecond part remains.
pub fn reply_seconds(ns: u64) -> i64 {
    let secs = (ns / 1_000_000_000) as i64;
    let sub_ms = ns % 1_000_000_000 / 1_000_000;
    secs + (sub_ms > 0) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    #[test]
    fn redis_cell_readme_example() {
        // CL.THROTTLE user123 15 30 60 -> 0 16 15 -1 2
        let q = Quota::new(15, 30, 60 * S).unwrap();
        let mut st = State::default();
        let t = throttle(&mut st, &q, 1_000 * S, 1);
        assert!(!t.limited);
        assert_eq!((t.limit, t.remaining, t.retry_after), (16, 15, None));
        assert_eq!(reply_seconds(t.reset_after), 2);
    }

    /// redis-cell's own test table (`it_rate_limits`): limit 5, one per
    /// second. (offset ms, quantity, remaining, reset_after ms,
    /// retry_after ms or None, limited)
    #[test]
    fn redis_cell_test_table() {
        let q = Quota::new(4, 1, S).unwrap();
        let start = 1_700_000_000 * S;
        let mut st = State::default();
        type Row = (u64, u64, u64, u64, Option<u64>, bool);
        let rows: &[Row] = &[
            (0, 6, 5, 0, None, true),
            (0, 1, 4, 1000, None, false),
            (0, 1, 3, 2000, None, false),
            (0, 1, 2, 3000, None, false),
            (0, 1, 1, 4000, None, false),
            (0, 1, 0, 5000, None, false),
            (0, 1, 0, 5000, Some(1000), true),
            (3000, 1, 2, 3000, None, false),
            (3100, 1, 1, 3900, None, false),
            (4000, 1, 1, 4000, None, false),
            (8000, 1, 4, 1000, None, false),
            (9500, 1, 4, 1000, None, false),
            (9500, 0, 4, 1000, None, false),
            (9500, 2, 2, 3000, None, false),
            (9500, 5, 2, 3000, Some(3000), true),
        ];
        for (i, &(at, qty, remaining, reset_ms, retry_ms, limited)) in rows.iter().enumerate() {
            let t = throttle(&mut st, &q, start + at * MS, qty);
            assert_eq!(
                (
                    t.limited,
                    t.limit,
                    t.remaining,
                    t.reset_after,
                    t.retry_after
                ),
                (
                    limited,
                    5,
                    remaining,
                    reset_ms * MS,
                    retry_ms.map(|m| m * MS)
                ),
                "case {i}"
            );
        }
    }

    #[test]
    fn rounding_as_redis_cell() {
        assert_eq!(reply_seconds(2 * S), 2);
        assert_eq!(reply_seconds(2 * S + MS), 3);
        assert_eq!(reply_seconds(2 * S + MS - 1), 2);
        assert_eq!(reply_seconds(0), 0);
    }

    #[test]
    fn zero_rates_are_refused() {
        assert_eq!(Quota::new(1, 0, S), Err(QuotaError::ZeroRate));
        assert_eq!(Quota::new(1, 10, 5), Err(QuotaError::ZeroRate));
        // A capacity whose refill time does not fit 2^63 ns used to be
        // capped silently: `limit` said 2^63 - 1, 18,446,744,073 enforced.
        assert_eq!(
            Quota::new(9_223_372_036_854_775_806, 1, S),
            Err(QuotaError::BurstTooLarge)
        );
        assert!(Quota::new(9_223_372_035, 1, S).is_ok());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Every quota accepted is enforced as reported: a fresh key
            /// admits `limit` units (remaining counts down to 0 within a
            /// microsecond's rounding), never more, and nothing overflows.
            #[test]
            fn an_accepted_quota_is_the_capacity_enforced(
                max_burst in prop_oneof![0u64..1_000, 0u64..=u64::MAX / 2],
                count in 1u64..1_000_000,
                period_s in 1u64..1_000_000,
                now in 0u64..=(u64::MAX / 4),
            ) {
                let Ok(q) = Quota::new(max_burst, count, period_s * S) else {
                    return Ok(());
                };
                let mut st = State::default();
                let first = throttle(&mut st, &q, now, 1);
                prop_assert!(!first.limited);
                prop_assert!(first.remaining < q.limit);
                prop_assert!(first.remaining + 2 >= q.limit, "{first:?} for {q:?}");
                let all = throttle(&mut st, &q, now, q.limit - 1);
                prop_assert!(!all.limited, "the rest of the capacity fits: {all:?}");
                prop_assert_eq!(all.remaining, 0);
                prop_assert!(throttle(&mut st, &q, now, 1).limited);
            }
        }
    }
}
