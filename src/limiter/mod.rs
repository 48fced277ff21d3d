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

pub mod algorithms;
pub mod calendar;
pub mod cell;
pub mod contract;
pub mod lease;

pub use contract::*;

/// Declares the macros over the algorithms' list (`algorithms.rs`); `$d`
/// is a `$`, for the variables of the macros it declares.
macro_rules! declare_dispatch {
    ($d:tt ; $($variant:ident $module:ident $place:literal,)*) => {
        $(pub mod $module;)*

        /// Runs `f::<S>(args)` with `S` the state type of `algo`: the one
        /// match from an algorithm to its state.
        macro_rules! with_algorithm {
            ($d algo:expr, $d f:ident ( $d($d arg:expr),* )) => {
                match $d algo {
                    $($crate::limiter::Algorithm::$variant => {
                        $d f::<$crate::limiter::$module::State>($d($d arg),*)
                    })*
                }
            };
        }

        /// Expands `then! { [Variant module] ... }` over the list: how a
        /// layer above builds its per-algorithm code (enum variants, the
        /// arms of a match on them) from it.
        macro_rules! for_each_algorithm {
            ($d then:ident) => {
                $d then! { $([$variant $module])* }
            };
        }

        // Every compact state fits the record's state bytes.
        const _: () = {
            $(assert!(
                <$module::State as Storage>::COMPACT_LEN <= STATE_MAX,
                "a compact state over STATE_MAX bytes"
            );)*
        };
    };
}
algorithms::algorithm_list!(declare_dispatch $);
pub(crate) use {for_each_algorithm, with_algorithm};

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
        let params = Params {
            limit,
            period,
            burst: burst.unwrap_or(limit),
            precision: precision.unwrap_or(NonZeroU64::MIN),
        };
        fn check<S: Limiter>(p: &Params) -> Result<(), SpecError> {
            S::check(p)
        }
        with_algorithm!(algo, check(&params))?;
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
            with_algorithm!(a, huge_charges_refund_alike(&p));
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
            // GCRA's bucket holds BURST, the others' the limit.
            for a in Algorithm::ALL {
                let p = if a == Algorithm::Gcra { &g } else { &p };
                with_algorithm!(a, both(p, &steps, &charges))?;
            }
        }
    }
}
