//! The contract every algorithm keeps, and the types it speaks in: which
//! algorithm a key uses ([`Algorithm`], declared by the list in
//! `algorithms.rs`), the [`Limiter`] trait, the [`Storage`] trait beside
//! it (how the store keeps a state), validated parameters ([`Params`]),
//! the [`Decision`] and why a limit is refused ([`SpecError`]). The
//! algorithm files import these from here, not from `limiter/mod.rs`,
//! which validates limits against the algorithms (`LimitSpec`) and so
//! imports them.

use std::num::NonZeroU64;

use super::calendar;
use crate::clock::Nanos;

/// Declares [`Algorithm`] from the algorithms' list (`algorithms.rs`).
macro_rules! declare_algorithm {
    (; $($variant:ident $module:ident $place:literal,)*) => {
        /// Which algorithm a key uses; a key holds one kind of state.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Algorithm {
            $($variant = $place,)*
        }

        impl Algorithm {
            /// How many algorithms there are: the size of per-algorithm tables.
            pub const COUNT: usize = [$($place),*].len();

            /// Every algorithm, in its place ([`Algorithm::index`]).
            pub const ALL: [Algorithm; Self::COUNT] = in_place([$(Algorithm::$variant),*]);

            /// The names `ALGO` takes, for error messages.
            pub const NAMES: &'static str = match std::str::from_utf8(&NAMES_BYTES) {
                Ok(s) => s,
                Err(_) => panic!("the names are ASCII"),
            };

            /// Position in per-algorithm tables (`ALL[a.index()] == a`).
            #[inline]
            pub fn index(self) -> usize {
                self as usize
            }

            /// The name used by `ALGO` and reported by `RL.STATE`: its
            /// module's.
            pub fn name(self) -> &'static str {
                match self {
                    $(Algorithm::$variant => stringify!($module),)*
                }
            }

            /// Case-insensitive lookup by name.
            pub fn parse(name: &[u8]) -> Option<Algorithm> {
                Self::ALL
                    .into_iter()
                    .find(|a| a.name().as_bytes().eq_ignore_ascii_case(name))
            }
        }


        const NAME_LIST: [&str; Algorithm::COUNT] = [$(stringify!($module)),*];
        const NAMES_BYTES: [u8; names_len(&NAME_LIST)] = join_names(&NAME_LIST);
    };
}
super::algorithms::algorithm_list!(declare_algorithm);

/// The default `ALGO`.
impl Default for Algorithm {
    fn default() -> Self {
        Algorithm::Window
    }
}

/// Implements [`Limiter`] for a module's `State` through its free
/// functions `decide(&mut State, &Params, u64, u64)`,
/// `refund(&mut State, &Params, u64, u64)`, `record` likewise and
/// `State::expires_at(&self, &Params) -> u64`; `check` (the parameters
/// it refuses) through the function named after the variant, if any.
macro_rules! limiter_of_fns {
    ($variant:ident $(, $check:ident)?) => {
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
            $(fn check(p: &Params) -> Result<(), $crate::limiter::contract::SpecError> {
                $check(p)
            })?
        }
    };
}
pub(crate) use limiter_of_fns;

/// One algorithm's state: what every algorithm offers the store and the
/// commands. Pure: no I/O, no clock, no locks, integer maths. A denied
/// request changes nothing that counts (the log may drop expired slots).
/// Adding an algorithm is one file here implementing this and
/// [`Storage`], and one line in the list (`algorithms.rs`): the compiler
/// points at nothing else (CONTRIBUTING.md, "Adding an algorithm").
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
    /// Refuses parameters this algorithm cannot keep its promises under
    /// (`LimitSpec::new`, after the checks every algorithm shares).
    fn check(_p: &Params) -> Result<(), SpecError> {
        Ok(())
    }
}

/// The largest compact state: the bytes of [`StateBytes`] (every
/// algorithm's [`Storage::COMPACT_LEN`] is checked against it).
pub const STATE_MAX: usize = 20;
pub type StateBytes = [u8; STATE_MAX];

/// How the store keeps an algorithm's state, beside its [`Limiter`]: its
/// record in the snapshot file, the append-only file, `DUMP` and the
/// replication stream (a tag, then the parameters the store writes, then
/// the fields written here), and its compact form in memory. Pure: bytes
/// in, bytes out.
pub trait Storage: Limiter {
    /// The record's type byte in every file and stream: fixed for ever
    /// (an old file must load), and unique (a tag the store's codec uses
    /// for anything else, or a second algorithm's, is an unreachable
    /// pattern there, which the build refuses).
    const TAG: u8;
    /// Bytes of the compact form ([`Storage::pack`]), at most
    /// [`STATE_MAX`]; 0 for none: the log, whose ring is variable-size, is
    /// kept in the store's arena of logs instead (the one algorithm the
    /// store's records treat apart).
    const COMPACT_LEN: usize;
    /// Appends the state's fields after the record's parameters.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads what [`Storage::encode`] wrote, under parameters already
    /// read and checked: anything a loader must refuse (parameters this
    /// algorithm never takes, a state its decisions could not have left)
    /// is `fields.corrupt(why)`, never a panic.
    fn decode<F: Fields>(p: &Params, fields: &mut F) -> Result<Self, F::Error>;
    /// The compact form's first [`Storage::COMPACT_LEN`] bytes under `p`,
    /// or `None` if this state does not fit it (it is then stored whole).
    fn pack(&self, p: &Params) -> Option<StateBytes>;
    /// The state `pack` wrote: any bytes read as one (a record holds only
    /// what `pack` wrote), so the exact inverse of `pack`.
    fn unpack(st: &[u8], p: &Params) -> Self;
    /// `RL.STATE`'s fields for this state, after `algorithm`, `limit` and
    /// `period_ms`.
    fn describe(&self, p: &Params, field: &mut dyn FnMut(&'static str, i64));
    /// Heap bytes the state owns.
    fn heap_size(&self) -> usize {
        0
    }
}

/// Where [`Storage::decode`] reads a record's fields from: the store's
/// reader (a file, a stream, a `RESTORE` payload), which knows where it
/// is for its errors.
pub trait Fields {
    type Error;
    fn u64(&mut self) -> Result<u64, Self::Error>;
    fn u32(&mut self) -> Result<u32, Self::Error>;
    /// The error for a record refused as corrupt, saying why.
    fn corrupt(&self, what: &'static str) -> Self::Error;
}

/// Reads `W` little-endian bytes at `at` as an integer.
#[inline]
pub(crate) fn get_le<const W: usize>(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v[..W].copy_from_slice(&b[at..at + W]);
    u64::from_le_bytes(v)
}

/// Writes the low `W` bytes of `v` at `at`; the caller checked it fits.
#[inline]
pub(crate) fn put_le<const W: usize>(b: &mut [u8], at: usize, v: u64) {
    b[at..at + W].copy_from_slice(&v.to_le_bytes()[..W]);
}

/// Appends `n` as a file's u64 field.
pub(crate) fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(&n.to_le_bytes());
}

/// Bits of a compact bucket number.
const U48_MAX: u64 = (1 << 48) - 1;

/// `start / period` if `start` is a bucket boundary that fits 48 bits:
/// bucket numbers rather than start times, as starts are multiples of the
/// period, and 48 bits cover the epoch to now for any period of 10 us or
/// more.
#[inline]
pub(crate) fn bucket(start: u64, period: u64) -> Option<u64> {
    let (q, r) = (start / period, start % period);
    (r == 0 && q <= U48_MAX).then_some(q)
}

/// `n` if it fits a compact u32 count.
#[inline]
pub(crate) fn u32_of(n: u64) -> Option<u64> {
    u32::try_from(n).ok().map(u64::from)
}

/// Why a limit's parameters were refused, in words a client or a policy
/// file's author can act on. The command layer and the policy loader both
/// validate through [`LimitSpec::new`](crate::limiter::LimitSpec::new), so
/// the rules are stated once.
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

/// `listed` rearranged so each is at its place; a place used twice or
/// left empty stops the build.
const fn in_place<const N: usize>(listed: [Algorithm; N]) -> [Algorithm; N] {
    let mut all = listed;
    let mut i = 0;
    while i < N {
        all[listed[i] as usize] = listed[i];
        i += 1;
    }
    let mut j = 0;
    while j < N {
        assert!(all[j] as usize == j, "the algorithms' places are 0..COUNT");
        j += 1;
    }
    all
}

/// Bytes of "a, b, c or d".
const fn names_len(names: &[&str]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < names.len() {
        n += names[i].len();
        if i + 1 < names.len() {
            n += if i + 2 == names.len() { 4 } else { 2 };
        }
        i += 1;
    }
    n
}

/// "a, b, c or d".
const fn join_names<const N: usize>(names: &[&str]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = 0;
    let mut i = 0;
    while i < names.len() {
        at = copy(&mut out, at, names[i].as_bytes());
        if i + 1 < names.len() {
            let sep: &[u8] = if i + 2 == names.len() { b" or " } else { b", " };
            at = copy(&mut out, at, sep);
        }
        i += 1;
    }
    out
}

const fn copy<const N: usize>(out: &mut [u8; N], mut at: usize, from: &[u8]) -> usize {
    let mut k = 0;
    while k < from.len() {
        out[at] = from[k];
        at += 1;
        k += 1;
    }
    at
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
