//! Property tests of the limiter algorithms, over random traffic on a
//! simulated clock.

use proptest::prelude::*;
use std::num::NonZeroU64;
use turnstile::limiter::{fixed, gcra, log, sliding, window, Decision, Params};

const MS: u64 = 1_000_000;
const T0: u64 = 1_700_000_000_000 * MS;

/// A request: wait this long after the previous one, then ask for `cost`.
fn traffic() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..400 * MS, 1u64..4), 1..300)
}

fn params(limit: u64, period_ms: u64) -> Params {
    Params::new(
        NonZeroU64::new(limit).unwrap(),
        NonZeroU64::new(period_ms * MS).unwrap(),
    )
}

/// Runs `decide` over the traffic; returns the admitted (time, cost) pairs
/// and checks that a denied request leaves the state untouched.
fn run<S: Clone + PartialEq + std::fmt::Debug>(
    state: &mut S,
    reqs: &[(u64, u64)],
    max_cost: u64,
    mut decide: impl FnMut(&mut S, u64, u64) -> Decision,
    compare_on_deny: bool,
) -> Vec<(u64, u64)> {
    let mut now = T0;
    let mut admitted = Vec::new();
    for &(gap, cost) in reqs {
        now += gap;
        let cost = cost.min(max_cost);
        let before = state.clone();
        let d = decide(state, now, cost);
        if d.allowed {
            admitted.push((now, cost));
            assert!(d.retry_after.is_none());
        } else {
            assert!(d.retry_after.is_some_and(|r| r > 0));
            if compare_on_deny {
                assert_eq!(&before, state, "a denied request changed the state");
            }
        }
    }
    admitted
}

/// Largest number of units admitted in any half-open interval of length
/// `period` (checked at every admission as the interval's end).
fn worst_interval(admitted: &[(u64, u64)], period: u64) -> u64 {
    let mut worst = 0;
    for (i, &(t, _)) in admitted.iter().enumerate() {
        let sum: u64 = admitted[..=i]
            .iter()
            .filter(|&&(s, _)| s + period > t)
            .map(|&(_, c)| c)
            .sum();
        worst = worst.max(sum);
    }
    worst
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn log_never_exceeds_limit_in_any_period(reqs in traffic(), limit in 1u64..20, period_ms in 1u64..3000) {
        let p = params(limit, period_ms);
        let mut st = log::State::default();
        let admitted = run(&mut st, &reqs, limit, |s, now, c| log::decide(s, &p, now, c), false);
        prop_assert!(worst_interval(&admitted, p.period()) <= limit);
    }

    #[test]
    fn log_with_precision_never_exceeds_limit(reqs in traffic(), limit in 1u64..20, period_ms in 100u64..3000, prec_ms in 1u64..100) {
        let p = Params { precision: NonZeroU64::new(prec_ms * MS).unwrap(), ..params(limit, period_ms) };
        let mut st = log::State::default();
        let admitted = run(&mut st, &reqs, limit, |s, now, c| log::decide(s, &p, now, c), false);
        prop_assert!(worst_interval(&admitted, p.period()) <= limit);
    }

    #[test]
    fn fixed_never_exceeds_limit_per_aligned_window(reqs in traffic(), limit in 1u64..20, period_ms in 1u64..3000) {
        let p = params(limit, period_ms);
        let mut st = fixed::State::default();
        let admitted = run(&mut st, &reqs, limit, |s, now, c| fixed::decide(s, &p, now, c), true);
        let mut per_window = std::collections::HashMap::new();
        for (t, c) in admitted {
            *per_window.entry(t / p.period()).or_insert(0) += c;
        }
        prop_assert!(per_window.values().all(|&n| n <= limit));
    }

    #[test]
    fn window_bounds(reqs in traffic(), limit in 1u64..20, period_ms in 1u64..3000) {
        let p = params(limit, period_ms);
        let mut st = window::State::default();
        let admitted = run(&mut st, &reqs, limit, |s, now, c| window::decide(s, &p, now, c), true);
        let mut per_bucket = std::collections::HashMap::new();
        for &(t, c) in &admitted {
            *per_bucket.entry(t / p.period()).or_insert(0) += c;
        }
        // At most `limit` in any aligned bucket...
        prop_assert!(per_bucket.values().all(|&n| n <= limit));
        // ...and at most `2 * limit` in any period-long interval.
        prop_assert!(worst_interval(&admitted, p.period()) <= 2 * limit);
    }

    /// `sliding` counts every admitted unit in the window but those of the
    /// oldest sub-bucket, which it estimates: so any period-long interval
    /// holds at most `limit` plus the most units admitted in one
    /// sub-bucket, weighted costs included.
    #[test]
    fn sliding_bounds(reqs in traffic(), limit in 1u64..20, period_ms in 1u64..3000) {
        let p = params(limit, period_ms);
        let mut st = sliding::State::default();
        let admitted = run(&mut st, &reqs, limit, |s, now, c| sliding::decide(s, &p, now, c), true);
        let w = sliding::width(&p);
        let mut per_sub = std::collections::HashMap::new();
        for &(t, c) in &admitted {
            *per_sub.entry(t / w).or_insert(0) += c;
        }
        let most = per_sub.values().copied().max().unwrap_or(0);
        prop_assert!(worst_interval(&admitted, p.period()) <= limit + most);
    }

    /// Exactness where it holds: when every admission of the oldest
    /// sub-bucket (the one holding `now - period`) is at least a 255th of
    /// a sub-bucket behind `now - period` (its last admission's recorded
    /// step is then behind too), or it has none, `sliding` decides exactly
    /// as the sliding-window log would on the same admitted history.
    #[test]
    fn sliding_is_exact_when_the_oldest_sub_bucket_has_left(reqs in traffic(), limit in 1u64..20, period_ms in 1u64..3000) {
        let p = params(limit, period_ms);
        let w = sliding::width(&p);
        let mut st = sliding::State::default();
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        let mut now = T0;
        for &(gap, cost) in &reqs {
            now += gap;
            let cost = cost.min(limit);
            let x = now - p.period();
            let start = x / w * w;
            let clear = admitted
                .iter()
                .filter(|&&(t, _)| t >= start && t < start + w)
                .all(|&(t, _)| t + w.div_ceil(255) <= x);
            let in_window: u64 = admitted.iter().filter(|&&(t, _)| t > x).map(|&(_, c)| c).sum();
            let d = sliding::decide(&mut st, &p, now, cost);
            if clear {
                prop_assert_eq!(d.allowed, in_window + cost <= limit, "at {}", now - T0);
                if d.allowed {
                    prop_assert_eq!(d.remaining, limit - in_window - cost);
                }
            }
            if d.allowed {
                admitted.push((now, cost));
            }
        }
    }

    #[test]
    fn gcra_matches_a_reference_token_bucket(reqs in traffic(), limit in 1u64..20, burst in 1u64..20, period_ms in 1u64..3000) {
        let p = Params { burst: NonZeroU64::new(burst).unwrap(), ..params(limit, period_ms) };
        let mut st = gcra::State::default();
        // Reference: a bucket of `burst` tokens refilled one per emission
        // interval, tracked as nanoseconds of debt.
        let t = gcra::emission_interval(&p);
        let mut debt: u64 = 0;
        let mut last = T0;
        let mut now = T0;
        for &(gap, cost) in &reqs {
            now += gap;
            let cost = cost.min(burst);
            debt = debt.saturating_sub(now - last);
            last = now;
            let expect = debt + cost * t <= burst * t;
            let before = st;
            let d = gcra::decide(&mut st, &p, now, cost);
            prop_assert_eq!(d.allowed, expect);
            if expect {
                debt += cost * t;
            } else {
                prop_assert_eq!(before, st);
            }
            prop_assert_eq!(d.remaining, (burst * t - debt) / t);
        }
    }

    #[test]
    fn refund_never_goes_below_empty(limit in 1u64..20, charge in 1u64..20, give in 0u64..50) {
        let p = params(limit, 1000);
        let charge = charge.min(limit);
        let now = T0 + 5 * MS;

        let mut w = window::State::default();
        window::decide(&mut w, &p, now, charge);
        window::refund(&mut w, &p, now, give);
        prop_assert_eq!(w.curr, charge.saturating_sub(give));

        let mut f = fixed::State::default();
        fixed::decide(&mut f, &p, now, charge);
        fixed::refund(&mut f, &p, now, give);
        prop_assert_eq!(f.count, charge.saturating_sub(give));

        let mut l = log::State::default();
        log::decide(&mut l, &p, now, charge);
        log::refund(&mut l, &p, now, give);
        prop_assert_eq!(l.total(), charge.saturating_sub(give));

        let mut s = sliding::State::default();
        sliding::decide(&mut s, &p, now, charge);
        sliding::refund(&mut s, &p, now, give);
        prop_assert_eq!(s.total(), charge.saturating_sub(give));
        let left = sliding::decide(&mut s.clone(), &p, now, 1).remaining;
        prop_assert_eq!(left, (limit - charge.saturating_sub(give)).saturating_sub(1));

        let mut g = gcra::State::default();
        gcra::decide(&mut g, &p, now, charge);
        gcra::refund(&mut g, &p, now, give);
        prop_assert!(g.tat >= now);
        let full = gcra::decide(&mut gcra::State::default(), &p, now, 1).remaining;
        let after = gcra::decide(&mut g.clone(), &p, now, 1).remaining;
        prop_assert!(after <= full);
    }
}
