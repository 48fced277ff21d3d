//! The limiter algorithms, as pure functions over
//! `(state, validated parameters, now, cost)`: no I/O, no clock, no locks,
//! integer nanosecond maths. Each returns a [`Decision`] and leaves the new
//! state in place only when the request is admitted (a denied request
//! charges nothing).
//!
//! - [`window`]: the two-bucket sliding-window counter.
//! - [`log`]: the exact sliding-window log, a ring of (timestamp, count).
//! - [`gcra`]: the generic cell rate algorithm, one timestamp of state.
//! - [`fixed`]: fixed windows aligned to the Unix epoch.

pub mod cell;
pub mod fixed;
pub mod gcra;
pub mod log;
pub mod window;

use std::num::NonZeroU64;

/// Which algorithm a key uses; a key holds one kind of state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    #[default]
    Window,
    Log,
    Gcra,
    Fixed,
}

impl Algorithm {
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Window,
        Algorithm::Log,
        Algorithm::Gcra,
        Algorithm::Fixed,
    ];

    /// The name used by `ALGO` and reported by `RL.STATE`.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Window => "window",
            Algorithm::Log => "log",
            Algorithm::Gcra => "gcra",
            Algorithm::Fixed => "fixed",
        }
    }

    /// Case-insensitive lookup by name.
    pub fn parse(name: &[u8]) -> Option<Algorithm> {
        Self::ALL
            .into_iter()
            .find(|a| a.name().as_bytes().eq_ignore_ascii_case(name))
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
    /// Log only: timestamps are rounded up to a multiple of this (ns);
    /// 1 = exact.
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
