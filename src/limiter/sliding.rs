//! The sub-bucketed sliding window: `window`'s constant memory, with the
//! previous bucket's estimate confined to a fifth of the period and
//! informed by where that fifth's last request fell.
//!
//! The period is cut into [`SUBS`] sub-buckets of width
//! `w = max(ceil(period / 5), MIN_WIDTH)`, aligned to multiples of `w` on
//! the server clock. A key keeps the units admitted in each of the last
//! [`SLOTS`] sub-buckets (the one now, and the five before it, which the
//! window `(now - period, now]` can reach) and, for each, where its last
//! admission fell, rounded up to 1/255 of the sub-bucket. At `now`, with
//! `x = now - period`:
//!
//! - sub-buckets wholly after `x` count in full;
//! - the sub-bucket holding `x` (the oldest, partly in the window) counts
//!   nothing once `x` has passed its last admission (exactly: none of its
//!   requests is in the window any more), and before that its count is
//!   taken as spread evenly from the sub-bucket's start to that last
//!   admission, so `count * (last - x) / (last - start)` of it is in the
//!   window;
//! - older sub-buckets count nothing.
//!
//! A request is admitted iff that estimate plus its cost fits the limit,
//! compared exactly (multiplied through, in 128-bit integers).
//!
//! Bounds: the estimate counts every admitted unit in the window except
//! those of the oldest sub-bucket, so the units admitted in any
//! period-long interval never exceed `limit` plus the most admitted in one
//! sub-bucket; and when the oldest sub-bucket holds nothing still in the
//! window (its last admission is behind `x`, or it is empty), the decision
//! is exactly the sliding-window log's. `tests/it/limiter_props.rs` checks
//! both. The state is 24 bytes for any limit up to [`MAX_LIMIT`]
//! (`docs/algorithms.md` has the measured error against `window` and
//! `log`). Why no constant-size state can be exact at the limit is there
//! too: under sustained overload an exact window frees each unit when the
//! request that took it leaves, and knowing when needs each admission's
//! time.

use super::contract::{
    put_u64, Decision, Fields, Params, SpecError, StateBytes, Storage, STATE_MAX,
};

/// Sub-buckets in a period.
pub const SUBS: u64 = 5;
/// Sub-buckets a key keeps: the window `(now - period, now]` reaches back
/// into at most `SUBS` sub-buckets before the current one.
pub const SLOTS: usize = SUBS as usize + 1;
/// Narrowest sub-bucket (ns): keeps the sub-bucket number within 48 bits
/// until 2116 for any period (commands take periods of 1 ms or more, whose
/// sub-buckets are at least 200 us wide).
pub const MIN_WIDTH: u64 = 1 << 14;
/// Largest limit: a sub-bucket's count is 16 bits.
pub const MAX_LIMIT: u64 = u16::MAX as u64;
/// Steps a sub-bucket's last admission is rounded up to.
const STEPS: u64 = 255;
const U48_MAX: u64 = (1 << 48) - 1;
/// Bytes of the state in memory.
pub const BYTES: usize = 24;
/// Bytes of [`State::to_compact`], a compact record's form.
pub const COMPACT_BYTES: usize = 20;
/// Largest count [`State::to_compact`] holds (12 bits).
const COMPACT_COUNT_MAX: u16 = (1 << 12) - 1;
/// Largest sub-bucket number [`State::to_compact`] holds (40 bits): any
/// sub-bucket of 3.8 ms or more (a period of 19 ms or more) until 2116.
const COMPACT_NEWEST_MAX: u64 = (1 << 40) - 1;
const _: () = assert!(SLOTS == 6 && COMPACT_BYTES == 14 + SLOTS);

/// Units per sub-bucket and where each one's last admission fell, newest
/// first: index `k` is sub-bucket `newest - k`. 24 bytes, no padding, so
/// it fits the keyspace's 64-byte values beside its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    /// The newest sub-bucket's number (`start / width`), 48 bits.
    newest: [u16; 3],
    counts: [u16; SLOTS],
    /// `1..=255`: the last admission was at most `last * width / 255`
    /// after the sub-bucket's start; 0 when the sub-bucket is empty.
    last: [u8; SLOTS],
}

/// Why a stored state was refused (a snapshot or replication record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadState(pub &'static str);

/// The sub-bucket width under `p`.
pub fn width(p: &Params) -> u64 {
    p.period().div_ceil(SUBS).max(MIN_WIDTH)
}

/// Where `off` (ns into a sub-bucket of `w`) rounds up to, in `1..=255`.
/// In 64 bits when the product fits (any sub-bucket under 2^56 ns): a
/// 128-bit division is a library call, and this runs on every admission.
fn step_of(off: u64, w: u64) -> u8 {
    let q = match off.checked_mul(STEPS) {
        Some(n) => n / w,
        None => (off as u128 * STEPS as u128 / w as u128) as u64,
    };
    (q + 1) as u8
}

/// Ns from a sub-bucket's start to its last admission, rounded up: never
/// before the admission, never past the sub-bucket's end.
fn offset_of(step: u8, w: u64) -> u64 {
    match w.checked_mul(step as u64) {
        Some(n) => n.div_ceil(STEPS),
        None => (step as u128 * w as u128).div_ceil(STEPS as u128) as u64,
    }
}

/// `n / d`, in 64 bits when `n` fits them.
fn div_u128(n: u128, d: u128) -> u128 {
    match (u64::try_from(n), u64::try_from(d)) {
        (Ok(n), Ok(d)) => (n / d) as u128,
        _ => n / d,
    }
}

/// What the window holds at one moment: `num / den` units (`den` is 1
/// unless the oldest sub-bucket is partly estimated).
#[derive(Debug, Clone, Copy)]
struct Usage {
    num: u128,
    den: u128,
}

impl State {
    pub fn newest(&self) -> u64 {
        let [a, b, c] = self.newest;
        a as u64 | (b as u64) << 16 | (c as u64) << 32
    }

    fn set_newest(&mut self, n: u64) {
        let n = n & U48_MAX;
        self.newest = [n as u16, (n >> 16) as u16, (n >> 32) as u16];
    }

    /// Sub-bucket `newest - k`'s count and rounded last admission.
    pub fn slot(&self, k: usize) -> (u64, u8) {
        (self.counts[k] as u64, self.last[k])
    }

    /// Units in all kept sub-buckets.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|&c| c as u64).sum()
    }

    /// The state in [`COMPACT_BYTES`], as a compact record keeps it: the
    /// newest sub-bucket's number in 40 bits, the six counts in 12 bits
    /// each, then the six steps. `None` when a count is over 4,095 or the
    /// number over 40 bits (the store then keeps the key whole): four bytes
    /// fewer than the fields' own widths, which is what brings a key to its
    /// length plus 32 bytes, and almost every key fits.
    #[inline]
    pub fn to_compact(&self) -> Option<[u8; COMPACT_BYTES]> {
        let newest = self.newest();
        // Every count within 12 bits iff their OR is: one test, no branch
        // per count.
        let any = self.counts.iter().fold(0, |a, &c| a | c);
        if newest > COMPACT_NEWEST_MAX || any > COMPACT_COUNT_MAX {
            return None;
        }
        // The number and the counts are one 112-bit little-endian field,
        // the number in bits 0..40 and count `k` in bits `40 + 12k..`: as
        // two words, the number and two counts, then four counts.
        let c = |k: usize| self.counts[k] as u64;
        let lo = newest | c(0) << 40 | c(1) << 52;
        let hi = c(2) | c(3) << 12 | c(4) << 24 | c(5) << 36;
        let mut b = [0u8; COMPACT_BYTES];
        b[..8].copy_from_slice(&lo.to_le_bytes());
        b[8..14].copy_from_slice(&hi.to_le_bytes()[..6]);
        b[14..].copy_from_slice(&self.last);
        Some(b)
    }

    /// The state [`State::to_compact`] wrote (any 20 bytes read as one; the
    /// record holds only what `to_compact` wrote).
    #[inline]
    pub fn from_compact(b: &[u8; COMPACT_BYTES]) -> State {
        let lo = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let mut w = [0u8; 8];
        w[..6].copy_from_slice(&b[8..14]);
        let hi = u64::from_le_bytes(w);
        let m = COMPACT_COUNT_MAX as u64;
        let mut s = State::default();
        s.set_newest(lo & COMPACT_NEWEST_MAX);
        s.counts = [
            (lo >> 40 & m) as u16,
            (lo >> 52) as u16,
            (hi & m) as u16,
            (hi >> 12 & m) as u16,
            (hi >> 24 & m) as u16,
            (hi >> 36 & m) as u16,
        ];
        s.last.copy_from_slice(&b[14..]);
        s
    }

    /// A state from its parts, checked as a snapshot must be: a 48-bit
    /// sub-bucket number, 16-bit counts, and a last admission exactly
    /// where there is a count.
    pub fn from_parts(newest: u64, slots: [(u64, u64); SLOTS]) -> Result<State, BadState> {
        if newest > U48_MAX {
            return Err(BadState("sliding sub-bucket number over 48 bits"));
        }
        let mut s = State::default();
        s.set_newest(newest);
        for (k, (count, last)) in slots.into_iter().enumerate() {
            s.counts[k] =
                u16::try_from(count).map_err(|_| BadState("sliding count over 16 bits"))?;
            s.last[k] = u8::try_from(last).map_err(|_| BadState("sliding step over 255"))?;
            if (count == 0) != (last == 0) {
                return Err(BadState("sliding count without its last admission"));
            }
        }
        Ok(s)
    }

    /// The state as seen in sub-bucket `n`: older sub-buckets shifted
    /// back, those past the last slot dropped.
    fn at(self, n: u64) -> State {
        let newest = self.newest();
        if n == newest {
            return self;
        }
        let mut s = State::default();
        s.set_newest(n);
        if n < newest {
            // The period grew (wider sub-buckets, smaller numbers): keep
            // the counts rather than forget admitted requests.
            s.counts = self.counts;
            s.last = self.last;
        } else if let Ok(shift) = usize::try_from(n - newest) {
            for k in 0..SLOTS.saturating_sub(shift) {
                s.counts[k + shift] = self.counts[k];
                s.last[k + shift] = self.last[k];
            }
        }
        s
    }

    /// The age of the sub-bucket holding `now - period`: slots younger
    /// count in full, that one is estimated, older ones count nothing.
    /// `SLOTS` when every kept slot is wholly in the window.
    fn oldest_age(&self, p: &Params, now: u64, w: u64) -> usize {
        match now.checked_sub(p.period()) {
            Some(x) => {
                usize::try_from(self.newest().saturating_sub(x / w)).map_or(SLOTS, |a| a.min(SLOTS))
            }
            None => SLOTS,
        }
    }

    /// Units in `(now - period, now]`, as estimated (see the module docs).
    /// `self` is already rolled to `now`'s sub-bucket, and `age` is its
    /// [`State::oldest_age`].
    fn usage(&self, p: &Params, now: u64, w: u64, age: usize) -> Usage {
        let full: u128 = self.counts[..age].iter().map(|&c| c as u128).sum();
        if age >= SLOTS || self.counts[age] == 0 {
            return Usage { num: full, den: 1 };
        }
        let x = now - p.period();
        let start = (self.newest() - age as u64) * w;
        let last = start + offset_of(self.last[age], w);
        if x >= last {
            return Usage { num: full, den: 1 };
        }
        let den = (last - start) as u128;
        Usage {
            num: full * den + self.counts[age] as u128 * (last - x) as u128,
            den,
        }
    }

    /// When the youngest admission still counted leaves the window (ns),
    /// or `None` if nothing is counted.
    fn last_leaves(&self, p: &Params, w: u64, age: usize) -> Option<u64> {
        let k = (0..SLOTS.min(age + 1)).find(|&k| self.counts[k] > 0)?;
        let start = self.newest().saturating_sub(k as u64).saturating_mul(w);
        Some(
            start
                .saturating_add(offset_of(self.last[k], w))
                .saturating_add(p.period()),
        )
    }

    /// When this state stops mattering: when its youngest admission has
    /// left the window. An empty state never mattered.
    #[inline]
    pub fn expires_at(&self, p: &Params) -> u64 {
        self.last_leaves(p, width(p), SLOTS).unwrap_or(0)
    }
}

/// Decides a request of `cost` at `now`; on admission, `state` is charged.
pub fn decide(state: &mut State, p: &Params, now: u64, cost: u64) -> Decision {
    let limit = p.limit();
    let w = width(p);
    let n = now / w;
    let mut cur = state.at(n);
    let age = cur.oldest_age(p, now, w);
    let u = cur.usage(p, now, w, age);
    let fits = u.num + cost as u128 * u.den <= limit as u128 * u.den;
    // A count stays within 16 bits (the limit does, except for a period
    // shorter than a sub-bucket, where the oldest is the current one).
    let charged = u16::try_from(cost)
        .ok()
        .and_then(|c| cur.counts[0].checked_add(c));
    let allowed = fits && charged.is_some();
    if let (true, Some(count)) = (allowed, charged) {
        cur.counts[0] = count;
        cur.last[0] = cur.last[0].max(step_of(now - n * w, w));
        *state = cur;
    }
    let after = match (allowed, age) {
        (false, _) => u,
        // The current sub-bucket counts in full: the cost adds as it is.
        (true, 1..) => Usage {
            num: u.num + cost as u128 * u.den,
            den: u.den,
        },
        (true, 0) => cur.usage(p, now, w, age),
    };
    let cap = limit as u128 * after.den;
    let remaining = div_u128(cap.saturating_sub(after.num), after.den) as u64;
    let reset_after = cur
        .last_leaves(p, w, age)
        .map_or(0, |at| at.saturating_sub(now));
    Decision {
        allowed,
        limit,
        remaining,
        retry_after: (!allowed).then(|| retry_after(&cur, p, now, w, cost, reset_after)),
        reset_after,
    }
}

/// Earliest wait after which `cost` fits, if nothing else arrives: the
/// first moment, walking forward one oldest sub-bucket at a time, at
/// which the younger ones plus what is left of the oldest leave room.
fn retry_after(s: &State, p: &Params, now: u64, w: u64, cost: u64, reset_after: u64) -> u64 {
    let limit = p.limit();
    // `x = now - period`, as a signed moment: before the epoch when the
    // period is longer than the clock.
    let x_now = now as i128 - p.period() as i128;
    let n = s.newest() as i128;
    let w128 = w as i128;
    let age = s.oldest_age(p, now, w).min(SLOTS - 1);
    let mut full: u64 = s.counts[..age].iter().map(|&c| c as u64).sum();
    for k in (0..=age).rev() {
        if k < age {
            full -= s.counts[k] as u64;
        }
        let Some(room) = limit.checked_sub(full.saturating_add(cost)) else {
            continue;
        };
        // While `x` is in sub-bucket `n - k`, it is the oldest.
        let start = (n - k as i128) * w128;
        let c = s.counts[k] as u64;
        let mut at = start.max(x_now);
        if c > room {
            // `c * (last - x) <= room * (last - start)`.
            let span = offset_of(s.last[k], w) as u128;
            let last = start + span as i128;
            let fits_at = last - div_u128(room as u128 * span, c as u128) as i128;
            at = at.max(fits_at);
        }
        // At least 1 ns: a denial for a full 16-bit count fits no sooner.
        return u64::try_from(at - x_now).unwrap_or(u64::MAX).max(1);
    }
    // A cost over the limit never fits; when the key is empty again is
    // the best answer there is.
    reset_after.max(1)
}

/// Gives back up to `n` units, from the newest sub-bucket first.
pub fn refund(state: &mut State, p: &Params, now: u64, n: u64) {
    let w = width(p);
    let mut cur = state.at(now / w);
    let mut left = n;
    for k in 0..SLOTS {
        let take = left.min(cur.counts[k] as u64);
        cur.counts[k] -= take as u16;
        left -= take;
        if cur.counts[k] == 0 {
            cur.last[k] = 0;
        }
    }
    *state = cur;
}

/// Adds `n` units to the current sub-bucket whatever the state (a charge
/// after use may overdraw): the estimate then denies until they leave the
/// window. A sub-bucket's count saturates at 16 bits.
pub fn record(state: &mut State, p: &Params, now: u64, n: u64) {
    let w = width(p);
    let b = now / w;
    let mut cur = state.at(b);
    if n > 0 {
        let n16 = u16::try_from(n).unwrap_or(u16::MAX);
        cur.counts[0] = cur.counts[0].saturating_add(n16);
        cur.last[0] = cur.last[0].max(step_of(now - b * w, w));
    }
    *state = cur;
}

super::contract::limiter_of_fns!(Sliding, check_spec);

/// A sub-bucket's count is 16 bits: a larger limit could not be counted.
fn check_spec(p: &Params) -> Result<(), SpecError> {
    match p.limit() > MAX_LIMIT {
        true => Err(SpecError::SlidingLimitTooLarge(p.limit())),
        false => Ok(()),
    }
}

/// Stored as its newest sub-bucket's number and each sub-bucket's count
/// and last step; compact, as [`State::to_compact`].
impl Storage for State {
    const TAG: u8 = 11;
    const COMPACT_LEN: usize = COMPACT_BYTES;
    fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.newest());
        for k in 0..SLOTS {
            let (count, last) = self.slot(k);
            put_u64(out, count);
            put_u64(out, last.into());
        }
    }
    fn decode<F: Fields>(p: &Params, f: &mut F) -> Result<Self, F::Error> {
        if p.limit() > MAX_LIMIT {
            return Err(f.corrupt("sliding limit over 65535"));
        }
        let newest = f.u64()?;
        let mut slots = [(0, 0); SLOTS];
        for slot in &mut slots {
            *slot = (f.u64()?, f.u64()?);
        }
        State::from_parts(newest, slots).map_err(|e| f.corrupt(e.0))
    }
    #[inline]
    fn pack(&self, _: &Params) -> Option<StateBytes> {
        // The widest compact state: its bytes are the whole of them.
        const _: () = assert!(COMPACT_BYTES == STATE_MAX);
        self.to_compact()
    }
    #[inline]
    fn unpack(st: &[u8], _: &Params) -> Self {
        let mut b = [0u8; COMPACT_BYTES];
        b.copy_from_slice(&st[..COMPACT_BYTES]);
        State::from_compact(&b)
    }
    fn describe(&self, _: &Params, field: &mut dyn FnMut(&'static str, i64)) {
        field("count", self.total() as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{check_moments, params_secs as params, Moment};

    const S: u64 = 1_000_000_000;
    /// A multiple of every sub-bucket width below.
    const T0: u64 = 1_700_000_000 * S;

    #[test]
    fn state_is_24_bytes_and_round_trips() {
        assert_eq!(std::mem::size_of::<State>(), BYTES);
        let p = params(100, 10);
        let mut st = State::default();
        for i in 0..40 {
            decide(&mut st, &p, T0 + i * 300_000_000, 1 + i % 3);
        }
        assert_eq!(State::from_compact(&st.to_compact().unwrap()), st);
        let parts = std::array::from_fn(|k| {
            let (c, l) = st.slot(k);
            (c, l as u64)
        });
        assert_eq!(State::from_parts(st.newest(), parts), Ok(st));
        let mut bad = parts;
        bad[0].1 = 0;
        assert!(State::from_parts(st.newest(), bad).is_err());
        assert!(State::from_parts(1 << 48, parts).is_err());
    }

    /// Every field at its compact form's extremes reads back; one past
    /// them has no compact form.
    #[test]
    fn compact_form_round_trips_at_its_limits() {
        let most = [
            (4095, 255),
            (1, 1),
            (4095, 7),
            (0, 0),
            (2048, 128),
            (4095, 255),
        ];
        for newest in [0, 1, (1 << 40) - 1, T0 / width(&params(100, 10))] {
            for slots in [most, [(0, 0); SLOTS], [(4095, 255); SLOTS]] {
                let st = State::from_parts(newest, slots).unwrap();
                assert_eq!(
                    State::from_compact(&st.to_compact().unwrap()),
                    st,
                    "{newest} {slots:?}"
                );
            }
        }
        assert!(State::from_parts(1 << 40, most)
            .unwrap()
            .to_compact()
            .is_none());
        for k in 0..SLOTS {
            let mut slots = most;
            slots[k] = (4096, 9);
            assert!(State::from_parts(5, slots).unwrap().to_compact().is_none());
        }
    }

    /// (offset, cost, allowed, remaining, retry_after, reset_after), limit
    /// 4 per 10 s: sub-buckets of 2 s.
    #[test]
    fn table_of_moments() {
        let p = params(4, 10);
        let mut st = State::default();
        // Step 255 of a 2 s sub-bucket is its end; step 1 is 2/255 s in.
        let step1 = offset_of(1, 2 * S);
        let rows: &[Moment] = &[
            (0, 2, true, 2, None, 10 * S + step1),
            // 1 s in is step 128: the last admission counts until
            // 128 * 2 s / 255 (1.0039 s) + 10 s.
            (S, 2, true, 0, None, 10_003_921_569),
            // Denied: the first sub-bucket's 4 units, taken as spread over
            // its first 1.0039 s, must decay to 3, which they do once
            // x = now - 10 s is 0.25098 s into it.
            (2 * S, 1, false, 0, Some(8_250_980_393), 9_003_921_569),
            // x = 0.5 s: 4 * (1.0039 - 0.5) / 1.0039 = 2.008 units still
            // count, so one more fits and none is left.
            (10 * S + S / 2, 1, true, 0, None, 10_001_960_785),
            // x = 1.1 s is past that sub-bucket's last admission: nothing
            // of it counts (exact again), 1 + 3 fit.
            (11 * S + S / 10, 3, true, 0, None, 10_005_882_353),
            // Now the newest sub-bucket's 4 must decay to 3 in its turn.
            (
                11 * S + S / 10,
                1,
                false,
                0,
                Some(9_176_470_589),
                10_005_882_353,
            ),
        ];
        check_moments(T0, rows, |now, cost| decide(&mut st, &p, now, cost));
    }

    #[test]
    fn retry_after_is_exact() {
        // Whatever the state, waiting retry_after makes the request fit
        // and waiting 1 ns less does not.
        let p = params(7, 3);
        let mut seen = 0;
        for seed in 0..400u64 {
            let mut st = State::default();
            let mut now = T0 + seed * 7_919_000;
            for i in 0..12 {
                now += (seed * 31 + i * 977) % 700 * 1_000_000;
                decide(&mut st, &p, now, 1 + (seed + i) % 3);
            }
            for cost in 1..=7 {
                let mut probe = st;
                let d = decide(&mut probe, &p, now, cost);
                let Some(wait) = d.retry_after else { continue };
                seen += 1;
                assert!(wait > 0);
                assert!(
                    decide(&mut st.clone(), &p, now + wait, cost).allowed,
                    "{seed} {cost}"
                );
                assert!(
                    !decide(&mut st.clone(), &p, now + wait - 1, cost).allowed,
                    "{seed} {cost}"
                );
            }
        }
        assert!(seen > 100, "only {seen} denials probed");
    }

    #[test]
    fn refund_takes_from_the_newest_first() {
        let p = params(10, 10);
        let mut st = State::default();
        decide(&mut st, &p, T0, 3);
        decide(&mut st, &p, T0 + 2 * S, 4);
        refund(&mut st, &p, T0 + 2 * S, 5);
        assert_eq!((st.slot(0).0, st.slot(1).0), (0, 2));
        assert_eq!(
            st.slot(0).1,
            0,
            "an emptied sub-bucket has no last admission"
        );
        refund(&mut st, &p, T0 + 2 * S, 99);
        assert_eq!(st.total(), 0);
        assert_eq!(st.expires_at(&p), 0);
    }
}
