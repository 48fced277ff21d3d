//! The limiter algorithms, as pure functions over
//! `(state, validated parameters, now, cost)`: no I/O, no clock, no locks,
//! integer nanosecond maths. Each returns a [`Decision`] and leaves the new
//! state in place only when the request is admitted (a denied request
//! charges nothing).
//!
//! - [`window`]: the two-bucket sliding-window counter.
//! - [`sliding`]: five sub-buckets a period, each with where its last
//!   request fell; nearer the exact window than `window`, same memory class.
//! - [`log`]: the exact sliding-window log, a ring of (timestamp, count).
//! - [`gcra`]: the generic cell rate algorithm, one timestamp of state.
//! - [`fixed`]: fixed windows aligned to the Unix epoch, or to the
//!   calendar ([`calendar`]: days, ISO weeks, months, years, with an offset).
//! - [`lease`]: concurrency limits, leases on units in flight (its own
//!   operations: acquire, release, renew).

pub mod calendar;
pub mod cell;
pub mod contract;
pub mod fixed;
pub mod gcra;
pub mod lease;
pub mod log;
pub mod sliding;
pub mod window;

pub use contract::*;

use std::num::NonZeroU64;

/// One limit to check: which algorithm, with which parameters, and the
/// penalty for a denial (`BLOCK`: the key denies everything for this
/// long, in ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitSpec {
    pub algo: Algorithm,
    pub params: Params,
    pub block: Option<NonZeroU64>,
}

/// Why a limit's parameters were refused, in words a client or a policy
/// file's author can act on. The command layer and the policy loader both
/// validate through [`LimitSpec::new`], so the rules are stated once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("BURST is only valid with ALGO gcra")]
    BurstWithoutGcra,
    #[error(
        "BURST is out of range: BURST * period / limit must be at most 2^63 - 1 ns (292 years)"
    )]
    BurstTooLarge,
    #[error("PRECISION is only valid with ALGO log")]
    PrecisionWithoutLog,
    #[error("PRECISION must not exceed the period")]
    PrecisionOverPeriod,
    #[error("limit {0} is over ALGO sliding's 65535 per period: use ALGO window")]
    SlidingLimitTooLarge(u64),
    #[error("period is too long for ALGO log (at most 6 days)")]
    LogPeriodTooLong,
    #[error("period {0} is a calendar period: only ALGO fixed counts by the calendar")]
    CalendarWithoutFixed(&'static str),
    #[error("TZ is only valid with ALGO fixed")]
    TzWithoutFixed,
    #[error("TZ needs a calendar period: 1d, 1w, 1mo or 1y")]
    TzWithoutCalendar,
    #[error("log limit {limit} per {period_ms}ms could keep {slots} timestamps in one key, over the cap of {cap}: add PRECISION {fit_ms}ms (or coarser), or use ALGO window")]
    LogTooLarge {
        limit: u64,
        period_ms: u64,
        slots: u64,
        cap: u64,
        fit_ms: u64,
    },
}

impl LimitSpec {
    /// A validated limit: `limit` and `period` (ns) positive, `burst` only
    /// for GCRA, `precision` (ns) only for the log and within the period,
    /// and a log ring that stays under its cap.
    pub fn new(
        algo: Algorithm,
        limit: NonZeroU64,
        period: NonZeroU64,
        burst: Option<NonZeroU64>,
        precision: Option<NonZeroU64>,
    ) -> Result<LimitSpec, SpecError> {
        if burst.is_some() && algo != Algorithm::Gcra {
            return Err(SpecError::BurstWithoutGcra);
        }
        // A bucket whose capacity in time does not fit 2^63 ns (as
        // `CL.THROTTLE`'s max_burst): its TAT would saturate, admitting
        // less than it reports, with a TTL of centuries.
        if let Some(b) = burst.filter(|b| *b > limit) {
            let t = period.get().div_ceil(limit.get());
            if t.checked_mul(b.get()).is_none_or(|v| v > i64::MAX as u64) {
                return Err(SpecError::BurstTooLarge);
            }
        }
        if precision.is_some() && algo != Algorithm::Log {
            return Err(SpecError::PrecisionWithoutLog);
        }
        if precision.is_some_and(|d| d > period) {
            return Err(SpecError::PrecisionOverPeriod);
        }
        if algo == Algorithm::Sliding && limit.get() > sliding::MAX_LIMIT {
            return Err(SpecError::SlidingLimitTooLarge(limit.get()));
        }
        if algo == Algorithm::Log && period.get() > log::MAX_PERIOD {
            return Err(SpecError::LogPeriodTooLong);
        }
        let params = Params {
            limit,
            period,
            burst: burst.unwrap_or(limit),
            precision: precision.unwrap_or(NonZeroU64::MIN),
        };
        if algo == Algorithm::Log && log::max_slots(&params) > log::MAX_SLOTS {
            return Err(SpecError::LogTooLarge {
                limit: params.limit(),
                period_ms: params.period() / 1_000_000,
                slots: log::max_slots(&params),
                cap: log::MAX_SLOTS,
                fit_ms: log::precision_to_fit(&params) / 1_000_000,
            });
        }
        Ok(LimitSpec {
            algo,
            params,
            block: None,
        })
    }

    /// Aligns a `fixed` limit to the calendar: `unit` is the calendar unit
    /// its period named (`1d`, `1w`, `1mo`, `1y`), `offset_min` its `TZ`.
    /// Weeks and days are plain durations for the other algorithms
    /// (a day in UTC is always 86,400 s); months and years have no fixed
    /// length, so only `fixed` takes them. A `1d` with no offset is left
    /// as it was (its epoch-aligned windows are the UTC days already).
    pub fn with_calendar(
        mut self,
        unit: Option<calendar::Unit>,
        offset_min: Option<i16>,
    ) -> Result<LimitSpec, SpecError> {
        use calendar::Unit;
        if self.algo != Algorithm::Fixed {
            if let Some(u @ (Unit::Month | Unit::Year)) = unit {
                return Err(SpecError::CalendarWithoutFixed(u.name()));
            }
            if offset_min.is_some() {
                return Err(SpecError::TzWithoutFixed);
            }
            return Ok(self);
        }
        let Some(unit) = unit else {
            return match offset_min {
                Some(_) => Err(SpecError::TzWithoutCalendar),
                None => Ok(self),
            };
        };
        if unit == Unit::Day && offset_min.is_none() {
            return Ok(self);
        }
        let c = calendar::Calendar {
            unit,
            offset_min: offset_min.unwrap_or(0),
        };
        self.params.precision = NonZeroU64::new(c.code()).unwrap_or(NonZeroU64::MIN);
        Ok(self)
    }

    /// The most one request may cost: `burst` under GCRA, else `limit`.
    pub fn capacity(&self) -> u64 {
        match self.algo {
            Algorithm::Gcra => self.params.burst.get(),
            _ => self.params.limit(),
        }
    }
}

#[cfg(test)]
mod algorithm_tests {
    use super::*;
    use crate::clock::Nanos;
    use proptest::prelude::*;

    /// `ALL`, `COUNT` and `index` agree: a variant missing from `ALL`
    /// would go uncounted in every per-algorithm table.
    #[test]
    fn every_algorithm_has_its_place() {
        for (i, a) in Algorithm::ALL.into_iter().enumerate() {
            assert_eq!(a.index(), i);
            assert_eq!(Algorithm::parse(a.name().as_bytes()), Some(a));
        }
    }

    /// The contract every algorithm keeps, checked through the trait
    /// alone: peek answers what decide would; a denial charges nothing; a
    /// refund never fills past capacity; and once the state's TTL has
    /// passed, it answers as no state at all (so dropping the key then is
    /// safe).
    fn keeps_the_contract<S: Limiter>(
        p: &Params,
        steps: &[(u64, u64, u64)],
    ) -> Result<(), TestCaseError> {
        let mut st = S::default();
        let mut now = Nanos(1_700_000_000 * Nanos::PER_SEC);
        let capacity = p.limit().max(p.burst.get());
        for &(gap_ms, cost, refund) in steps {
            now = Nanos(now.0 + gap_ms * 1_000_000);
            let cost = cost.min(p.limit()).max(1);
            let peeked = st.peek(p, now, cost);
            let before = st.clone();
            let d = st.decide(p, now, cost);
            prop_assert_eq!(peeked, d, "{:?} peek", S::ALGORITHM);
            if !d.allowed {
                prop_assert_eq!(
                    before.peek(p, now, 1),
                    st.peek(p, now, 1),
                    "{:?}: a denial charged",
                    S::ALGORITHM
                );
            } else {
                prop_assert!(
                    st.expires_at(p) > now,
                    "{:?}: charged state already expired",
                    S::ALGORITHM
                );
            }
            if refund > 0 {
                st.refund(p, now, refund);
                prop_assert!(st.peek(p, now, 1).remaining <= capacity);
            }
            let end = st.expires_at(p);
            for c in [1, cost] {
                prop_assert_eq!(
                    st.peek(p, end.max(now), c),
                    S::default().peek(p, end.max(now), c),
                    "{:?}: state still mattered at its TTL",
                    S::ALGORITHM
                );
            }
        }
        Ok(())
    }

    /// Charges (`RL.CHARGE`) through the trait alone: a charge is
    /// allowed iff usage is within the limit after it; an overdraft
    /// denies the next request until `retry_after`, when one unit fits
    /// again; a refund never leaves usage below empty (a full refund
    /// gives back the whole capacity); the state's TTL still bounds it.
    fn charges_keep_the_contract<S: Limiter>(
        p: &Params,
        steps: &[(u64, u64, u64)],
    ) -> Result<(), TestCaseError> {
        let a = S::ALGORITHM;
        let mut st = S::default();
        let mut now = Nanos(1_700_000_000 * Nanos::PER_SEC);
        let capacity = if a == Algorithm::Gcra {
            p.burst.get()
        } else {
            p.limit()
        };
        for &(gap_ms, n, refund) in steps {
            now = Nanos(now.0 + gap_ms * 1_000_000);
            let before = st.peek(p, now, 0).remaining;
            let d = st.charge(p, now, n);
            prop_assert_eq!(
                d.remaining,
                before.saturating_sub(n),
                "{:?}: n not recorded",
                a
            );
            prop_assert!(d.remaining <= capacity, "{:?}: remaining over capacity", a);
            prop_assert_eq!(d.allowed, st.peek(p, now, 0).allowed, "{:?}", a);
            if d.allowed {
                prop_assert_eq!(d.retry_after, None);
            } else {
                let next = st.peek(p, now, 1);
                prop_assert!(
                    !next.allowed,
                    "{:?}: an overdraft admitted the next request",
                    a
                );
                let wait = d.retry_after.expect("a denial says when");
                prop_assert!(wait > 0);
                prop_assert!(
                    st.peek(p, Nanos(now.0 + wait), 1).allowed,
                    "{:?}: still denied at retry_after {}",
                    a,
                    wait
                );
            }
            prop_assert!(
                st.expires_at(p) > now || n == 0,
                "{:?}: a charge already expired",
                a
            );
            if refund > 0 {
                st.refund(p, now, refund);
                let left = st.peek(p, now, 1);
                prop_assert!(left.remaining < capacity, "{:?}: usage below empty", a);
                if refund == u64::MAX {
                    prop_assert!(left.allowed, "{:?}: a full refund left usage", a);
                    prop_assert_eq!(left.remaining, capacity - 1, "{:?}", a);
                }
            }
            let end = st.expires_at(p).max(now);
            prop_assert_eq!(
                st.peek(p, end, 1),
                S::default().peek(p, end, 1),
                "{:?}: an overdraft outlived its TTL",
                a
            );
        }
        Ok(())
    }

    /// Overdrafts of the largest charge a client can send, however many,
    /// whenever: usage saturates at [`MAX_USAGE`], so a refund of that
    /// much (the most `RL.REFUND` takes) empties every algorithm's key
    /// alike, and the state's TTL stays within two periods of the last
    /// charge (`gcra`'s overdraft is capped: [`gcra::max_debt`]).
    fn huge_charges_refund_alike<S: Limiter>(p: &Params) {
        let a = S::ALGORITHM;
        let capacity = p.limit().max(p.burst.get());
        let t0 = Nanos(1_700_000_000 * Nanos::PER_SEC);
        for gaps in [[0, 0, 0], [0, 1, 1], [1_000_000, 0, 7]] {
            let mut st = S::default();
            let mut now = t0;
            for gap in gaps {
                now = Nanos(now.0 + gap);
                st.record(p, now, MAX_USAGE);
                assert!(!st.peek(p, now, 1).allowed, "{a:?}: overdrawn");
                let ttl = st.expires_at(p).0 - now.0;
                assert!(
                    ttl <= 2 * p.period() + p.burst.get() * gcra::emission_interval(p),
                    "{a:?}: a TTL of {ttl} ns"
                );
            }
            st.refund(p, now, MAX_USAGE);
            let d = st.peek(p, now, 1);
            assert!(d.allowed, "{a:?} {gaps:?}: the refund left an overdraft");
            assert_eq!(d.remaining, capacity - 1, "{a:?} {gaps:?}: not empty");
        }
    }

    #[test]
    fn a_full_refund_empties_every_algorithm() {
        let p = params_secs(100, 3_600);
        for a in Algorithm::ALL {
            match a {
                Algorithm::Window => huge_charges_refund_alike::<window::State>(&p),
                Algorithm::Log => huge_charges_refund_alike::<log::State>(&p),
                Algorithm::Gcra => huge_charges_refund_alike::<gcra::State>(&p),
                Algorithm::Fixed => huge_charges_refund_alike::<fixed::State>(&p),
                Algorithm::Sliding => huge_charges_refund_alike::<sliding::State>(&p),
            }
        }
    }

    /// A `BURST` whose bucket would hold more than 2^63 ns is refused, as
    /// `CL.THROTTLE`'s max_burst is; the default burst never is.
    #[test]
    fn a_burst_is_bounded_in_time() {
        let nz = |n: u64| NonZeroU64::new(n).unwrap();
        let hour = nz(3_600 * Nanos::PER_SEC);
        let spec =
            |limit, period, burst| LimitSpec::new(Algorithm::Gcra, nz(limit), period, burst, None);
        assert_eq!(
            spec(100, hour, Some(nz(i64::MAX as u64))),
            Err(SpecError::BurstTooLarge)
        );
        // 36 s a unit: 2^63 ns holds 256,204,778 units.
        assert!(spec(100, hour, Some(nz(256_204_778))).is_ok());
        assert_eq!(
            spec(100, hour, Some(nz(256_204_779))),
            Err(SpecError::BurstTooLarge)
        );
        let longest = nz(i64::MAX as u64);
        assert!(spec(2, longest, None).is_ok());
        assert!(spec(i64::MAX as u64, longest, Some(nz(i64::MAX as u64))).is_ok());
    }

    proptest! {
        #[test]
        fn every_algorithm_keeps_the_contract(
            limit in 1u64..20,
            period_ms in 1u64..5_000,
            burst in 1u64..30,
            steps in prop::collection::vec((0u64..3_000, 1u64..6, prop_oneof![Just(0u64), 1u64..4, Just(u64::MAX)]), 1..60),
        ) {
            let p = Params::new(
                NonZeroU64::new(limit).unwrap(),
                NonZeroU64::new(period_ms * 1_000_000).unwrap(),
            );
            let g = Params { burst: NonZeroU64::new(burst).unwrap(), ..p };
            // Charges of up to three times the limit: most overdraw.
            let charges: Vec<_> = steps
                .iter()
                .map(|&(gap, cost, refund)| (gap, cost * limit.max(2) / 2, refund))
                .collect();
            fn both<S: Limiter>(p: &Params, steps: &[(u64, u64, u64)], charges: &[(u64, u64, u64)]) -> Result<(), TestCaseError> {
                keeps_the_contract::<S>(p, steps)?;
                charges_keep_the_contract::<S>(p, charges)
            }
            // One line per algorithm: a new one is added here.
            for a in Algorithm::ALL {
                match a {
                    Algorithm::Window => both::<window::State>(&p, &steps, &charges)?,
                    Algorithm::Log => both::<log::State>(&p, &steps, &charges)?,
                    Algorithm::Gcra => both::<gcra::State>(&g, &steps, &charges)?,
                    Algorithm::Fixed => both::<fixed::State>(&p, &steps, &charges)?,
                    Algorithm::Sliding => both::<sliding::State>(&p, &steps, &charges)?,
                }
            }
        }
    }
}
