//! The contract every algorithm keeps, and the types it speaks in: which
//! algorithm a key uses ([`Algorithm`]), the [`Limiter`] trait, validated
//! parameters ([`Params`]) and the [`Decision`]. The algorithm files import
//! these from here, not from `limiter/mod.rs`, which validates limits
//! against the algorithms (`LimitSpec`) and so imports them.

use std::num::NonZeroU64;

use super::calendar;
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
        impl $crate::limiter::contract::Limiter for State {
            const ALGORITHM: $crate::limiter::contract::Algorithm =
                $crate::limiter::contract::Algorithm::$variant;
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
    /// `cost` is positive and within the limit's capacity
    /// ([`crate::limiter::LimitSpec::capacity`]): every entry refuses more
    /// (`parse::check_cost`, the rate limit service's `Act::Refuse`), and
    /// a plan writes no 0-unit step (a 0-unit look is a `peek`).
    fn decide(&mut self, p: &Params, now: Nanos, cost: u64) -> Decision;
    /// What `decide` would answer, changing nothing; `cost` may be 0 too
    /// (`charge` reads so, and a `hits_addend` of 0 looks so).
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

/// The most usage a key records: the largest count a client can send
/// (`RL.CHARGE`'s `n`, `COST`, `RL.REFUND`'s `n` are 64-bit signed). A
/// charge past it records up to it, so no count or sum of counts ever
/// overflows (a record the loaders refuse), and a refund of 2^63 - 1 always
/// empties the key, whatever it was charged.
pub const MAX_USAGE: u64 = i64::MAX as u64;

/// `n` units added to `used`, within [`MAX_USAGE`] (never below `used`: a
/// state loaded from an older file may hold more).
pub(crate) fn add_usage(used: u64, n: u64) -> u64 {
    used.saturating_add(n).min(MAX_USAGE.max(used))
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
