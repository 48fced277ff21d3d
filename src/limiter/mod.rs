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
pub mod fixed;
pub mod gcra;
pub mod lease;
pub mod log;
pub mod sliding;
pub mod window;

use std::num::NonZeroU64;

use crate::clock::Nanos;

/// Which algorithm a key uses; a key holds one kind of state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    #[default]
    Window,
    Log,
    Gcra,
    Fixed,
    Sliding,
}

impl Algorithm {
    /// How many algorithms there are: the size of per-algorithm tables.
    pub const COUNT: usize = 5;

    pub const ALL: [Algorithm; Self::COUNT] = [
        Algorithm::Window,
        Algorithm::Log,
        Algorithm::Gcra,
        Algorithm::Fixed,
        Algorithm::Sliding,
    ];

    /// The names `ALGO` takes, for error messages.
    pub const NAMES: &'static str = "window, sliding, log, gcra or fixed";

    /// Position in per-algorithm tables (`ALL[a.index()] == a`): a match,
    /// so a new variant is pointed at here.
    pub fn index(self) -> usize {
        match self {
            Algorithm::Window => 0,
            Algorithm::Log => 1,
            Algorithm::Gcra => 2,
            Algorithm::Fixed => 3,
            Algorithm::Sliding => 4,
        }
    }

    /// The name used by `ALGO` and reported by `RL.STATE`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Window => "window",
            Algorithm::Log => "log",
            Algorithm::Gcra => "gcra",
            Algorithm::Fixed => "fixed",
            Algorithm::Sliding => "sliding",
        }
    }

    /// Case-insensitive lookup by name.
    pub fn parse(name: &[u8]) -> Option<Algorithm> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().as_bytes().eq_ignore_ascii_case(name))
    }
}

/// Implements [`Limiter`] for a module's `State` through its free
/// functions `decide(&mut State, &Params, u64, u64)`,
/// `refund(&mut State, &Params, u64, u64)` and
/// `State::expires_at(&self, &Params) -> u64`.
macro_rules! limiter_of_fns {
    ($variant:ident) => {
        impl $crate::limiter::Limiter for State {
            const ALGORITHM: $crate::limiter::Algorithm = $crate::limiter::Algorithm::$variant;
            fn decide(&mut self, p: &Params, now: $crate::clock::Nanos, cost: u64) -> Decision {
                decide(self, p, now.0, cost)
            }
            fn refund(&mut self, p: &Params, now: $crate::clock::Nanos, n: u64) {
                refund(self, p, now.0, n)
            }
            fn record(&mut self, p: &Params, now: $crate::clock::Nanos, n: u64) {
                record(self, p, now.0, n)
            }
            fn expires_at(&self, p: &Params) -> $crate::clock::Nanos {
                $crate::clock::Nanos(State::expires_at(self, p))
            }
        }
    };
}
pub(crate) use limiter_of_fns;

/// One algorithm's state: what every algorithm offers the store and the
/// commands. Pure: no I/O, no clock, no locks, integer maths. A denied
/// request changes nothing that counts (the log may drop expired slots).
/// Adding an algorithm is one file here implementing this, one
/// [`Algorithm`] variant, and whatever the compiler then points at.
pub trait Limiter: Clone + Default + PartialEq + std::fmt::Debug {
    const ALGORITHM: Algorithm;
    /// Decides a request of `cost` at `now`; on admission, charges it.
    fn decide(&mut self, p: &Params, now: Nanos, cost: u64) -> Decision;
    /// What `decide` would answer, changing nothing.
    fn peek(&self, p: &Params, now: Nanos, cost: u64) -> Decision {
        self.clone().decide(p, now, cost)
    }
    /// Records `n` units at `now` whatever the state: `RL.CHARGE`, which
    /// may overdraw (the overdraft then denies until it leaves the window).
    fn record(&mut self, p: &Params, now: Nanos, n: u64);
    /// Records `n` units and answers as a decision: allowed if usage is
    /// within the limit after the charge, `remaining` what could still be
    /// admitted now, `retry_after` when one unit fits again.
    fn charge(&mut self, p: &Params, now: Nanos, n: u64) -> Decision {
        self.record(p, now, n);
        let after = self.peek(p, now, 0);
        Decision {
            allowed: after.allowed,
            retry_after: (!after.allowed).then(|| self.peek(p, now, 1).retry_after.unwrap_or(0)),
            ..after
        }
    }
    /// Gives back up to `n` units, never below empty.
    fn refund(&mut self, p: &Params, now: Nanos, n: u64);
    /// When the state stops mattering: the key's TTL. The one place this
    /// rule is computed; the store stores it and the commands report it.
    fn expires_at(&self, p: &Params) -> Nanos;
    /// Heap bytes an admission may allocate, checked against
    /// `--maxmemory` before it is held (only the log's ring grows).
    fn growth(&self) -> usize {
        0
    }
}

/// `sliding`'s largest limit: a sub-bucket's count is 16 bits. Declared
/// here, where limits are validated, so that this file need not import
/// `sliding.rs` (which imports it).
pub const SLIDING_MAX_LIMIT: u64 = u16::MAX as u64;

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
        if precision.is_some() && algo != Algorithm::Log {
            return Err(SpecError::PrecisionWithoutLog);
        }
        if precision.is_some_and(|d| d > period) {
            return Err(SpecError::PrecisionOverPeriod);
        }
        if algo == Algorithm::Sliding && limit.get() > SLIDING_MAX_LIMIT {
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

/// Validated limiter parameters: every field is in range before an
/// algorithm sees it, so the algorithms need no error paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    /// Units admitted per `period`.
    pub limit: NonZeroU64,
    /// Length of the window, in nanoseconds.
    pub period: NonZeroU64,
    /// GCRA only: the bucket's capacity (defaults to `limit`).
    pub burst: NonZeroU64,
    /// Log: timestamps are rounded up to a multiple of this (ns); 1 =
    /// exact. Fixed: the calendar its windows follow
    /// ([`calendar::Calendar::code`]; 1 = epoch-aligned multiples of
    /// `period`). Read through [`Params::calendar`].
    pub precision: NonZeroU64,
}

impl Params {
    /// Parameters with the defaults for `BURST` and `PRECISION`.
    pub fn new(limit: NonZeroU64, period: NonZeroU64) -> Self {
        Params {
            limit,
            period,
            burst: limit,
            precision: NonZeroU64::MIN,
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit.get()
    }

    pub fn period(&self) -> u64 {
        self.period.get()
    }

    /// The calendar a `fixed` limit's windows follow, if any.
    pub fn calendar(&self) -> Option<calendar::Calendar> {
        match self.precision.get() {
            1 => None,
            code => calendar::Calendar::from_code(code),
        }
    }
}

/// The answer to "may this request go?", with what an HTTP 429 and the
/// `RateLimit` headers need. Durations in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u64,
    /// Units that could still be admitted now, after this request.
    pub remaining: u64,
    /// When denied: time until a request of this cost would be admitted if
    /// nothing else arrives. `None` when allowed.
    pub retry_after: Option<u64>,
    /// Time until the key is back to full capacity if nothing else arrives.
    pub reset_after: u64,
}

/// `floor(a * b / c)` without overflow (`c > 0`), saturating.
pub(crate) fn mul_div_floor(a: u64, b: u64, c: u64) -> u64 {
    let v = a as u128 * b as u128 / c as u128;
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// One row of an algorithm's table of moments: time since the start, cost,
/// then the expected allowed, remaining, retry_after and reset_after.
#[cfg(test)]
pub(crate) type Moment = (u64, u64, bool, u64, Option<u64>, u64);

/// Parameters of `limit` per `period_s` seconds, defaults elsewhere.
#[cfg(test)]
pub(crate) fn params_secs(limit: u64, period_s: u64) -> Params {
    Params::new(
        NonZeroU64::new(limit).unwrap(),
        NonZeroU64::new(period_s * 1_000_000_000).unwrap(),
    )
}

/// Plays a table of moments from `t0` against `decide`.
#[cfg(test)]
pub(crate) fn check_moments(
    t0: u64,
    rows: &[Moment],
    mut decide: impl FnMut(u64, u64) -> Decision,
) {
    for &(at, cost, allowed, remaining, retry, reset) in rows {
        let d = decide(t0 + at, cost);
        assert_eq!(
            (d.allowed, d.remaining, d.retry_after, d.reset_after),
            (allowed, remaining, retry, reset),
            "at +{}ms cost {cost}",
            at / 1_000_000
        );
    }
}

#[cfg(test)]
mod algorithm_tests {
    use super::*;
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
