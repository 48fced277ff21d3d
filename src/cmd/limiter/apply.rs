//! Glue between the keyspace and the pure algorithms: find a key's state
//! (or start a fresh one), run the algorithm, write back what changed with
//! the TTL at which the state stops mattering.

use super::super::CmdError;
use super::parse::LimitSpec;
use crate::clock::Nanos;
use crate::limiter::{fixed, gcra, log, window, Algorithm, Decision, Params};
use crate::store::entry::Stored;
use crate::store::{Entry, Value};

/// What every algorithm's state offers the glue.
pub trait AlgoState: Clone + Default {
    fn decide(&mut self, p: &Params, now: u64, cost: u64) -> Decision;
    /// What `decide` would answer, changing nothing. A copy and a decision
    /// for the fixed-size states; the log reads its ring in place.
    fn peek(&self, p: &Params, now: u64, cost: u64) -> Decision {
        self.clone().decide(p, now, cost)
    }
    /// Heap bytes an admission may allocate (the log's ring growing).
    fn growth(&self) -> usize {
        0
    }
    fn refund(&mut self, p: &Params, now: u64, n: u64);
    /// Absolute time (ns) when the state stops mattering.
    fn expires_at(&self, p: &Params) -> u64;
    fn get(v: &Value) -> Option<&Stored<Self>>;
    fn get_mut(v: &mut Value) -> Option<&mut Stored<Self>>;
    fn into_value(s: Stored<Self>) -> Value;
}

macro_rules! algo_state {
    ($module:ident, $variant:ident, $wrap:expr, $expires:expr $(, $extra:item)*) => {
        impl AlgoState for $module::State {
            fn decide(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
                $module::decide(self, p, now, cost)
            }
            $($extra)*
            fn refund(&mut self, p: &Params, now: u64, n: u64) {
                $module::refund(self, p, now, n)
            }
            fn expires_at(&self, p: &Params) -> u64 {
                #[allow(clippy::redundant_closure_call)]
                ($expires)(self, p)
            }
            fn get(v: &Value) -> Option<&Stored<Self>> {
                match v {
                    Value::$variant(s) => Some(s),
                    _ => None,
                }
            }
            fn get_mut(v: &mut Value) -> Option<&mut Stored<Self>> {
                match v {
                    Value::$variant(s) => Some(s),
                    _ => None,
                }
            }
            fn into_value(s: Stored<Self>) -> Value {
                #[allow(clippy::redundant_closure_call)]
                Value::$variant(($wrap)(s))
            }
        }
    };
}

algo_state!(window, Window, |s| s, |s: &window::State, p| s
    .expires_at(p));
algo_state!(fixed, Fixed, |s| s, |s: &fixed::State, p| s.expires_at(p));
algo_state!(gcra, Gcra, |s| s, |s: &gcra::State, _| s.expires_at());
algo_state!(
    log,
    Log,
    |s| s,
    |s: &log::State, p| s.expires_at(p),
    fn peek(&self, p: &Params, now: u64, cost: u64) -> Decision {
        log::peek(self, p, now, cost)
    },
    fn growth(&self) -> usize {
        self.growth()
    }
);

/// Sets `entry`'s TTL to `at`, or removes the key if `at` is not after now.
fn keep_until(slot: &mut Option<Entry>, at: u64, now: Nanos) {
    if at <= now.0 {
        *slot = None;
    } else if let Some(e) = slot.as_mut() {
        e.set_expiry(Some(Nanos(at)));
    }
}

/// Runs one limit against the entry in `slot`, charging it if admitted.
/// A denied request writes nothing (the log may drop expired slots). An
/// admission that would allocate more than `room` bytes (`--maxmemory`'s
/// headroom) is refused with `OOM` before anything is held.
pub fn allow(
    slot: &mut Option<Entry>,
    spec: &LimitSpec,
    now: Nanos,
    cost: u64,
    room: usize,
) -> Result<Decision, CmdError> {
    let p = &spec.params;
    match spec.algo {
        Algorithm::Window => allow_with::<window::State>(slot, p, now, cost, room),
        Algorithm::Fixed => allow_with::<fixed::State>(slot, p, now, cost, room),
        Algorithm::Gcra => allow_with::<gcra::State>(slot, p, now, cost, room),
        Algorithm::Log => allow_with::<log::State>(slot, p, now, cost, room),
    }
}

fn allow_with<S: AlgoState>(
    slot: &mut Option<Entry>,
    p: &Params,
    now: Nanos,
    cost: u64,
    room: usize,
) -> Result<Decision, CmdError> {
    match slot.as_mut() {
        Some(entry) => {
            let stored = S::get_mut(&mut entry.value).ok_or(CmdError::WrongType)?;
            if stored.state.growth() > room && stored.state.peek(p, now.0, cost).allowed {
                return Err(CmdError::OutOfMemory);
            }
            let d = stored.state.decide(p, now.0, cost);
            if d.allowed {
                // New limit or period take effect at once, and are what
                // REFUND and STATE use from now on.
                stored.params = *p;
                let at = stored.state.expires_at(p);
                keep_until(slot, at, now);
            }
            Ok(d)
        }
        None => {
            let mut state = S::default();
            let d = state.decide(p, now.0, cost);
            if d.allowed {
                let at = state.expires_at(p);
                *slot = Some(Entry::new(S::into_value(Stored { params: *p, state })));
                keep_until(slot, at, now);
            }
            Ok(d)
        }
    }
}

/// What `allow` would answer now, changing nothing, and the heap bytes
/// its admission would allocate.
pub fn peek(
    entry: Option<&Entry>,
    spec: &LimitSpec,
    now: Nanos,
    cost: u64,
) -> Result<(Decision, usize), CmdError> {
    let p = &spec.params;
    match spec.algo {
        Algorithm::Window => peek_with::<window::State>(entry, p, now, cost),
        Algorithm::Fixed => peek_with::<fixed::State>(entry, p, now, cost),
        Algorithm::Gcra => peek_with::<gcra::State>(entry, p, now, cost),
        Algorithm::Log => peek_with::<log::State>(entry, p, now, cost),
    }
}

fn peek_with<S: AlgoState>(
    entry: Option<&Entry>,
    p: &Params,
    now: Nanos,
    cost: u64,
) -> Result<(Decision, usize), CmdError> {
    let fresh;
    let state = match entry {
        Some(e) => &S::get(&e.value).ok_or(CmdError::WrongType)?.state,
        None => {
            fresh = S::default();
            &fresh
        }
    };
    let d = state.peek(p, now.0, cost);
    let growth = if d.allowed { state.growth() } else { 0 };
    Ok((d, growth))
}

/// Gives back `n` units to whatever limiter the key holds, with the
/// parameters it was last charged with. False if the key does not exist.
pub fn refund(slot: &mut Option<Entry>, now: Nanos, n: u64) -> Result<bool, CmdError> {
    let Some(entry) = slot.as_mut() else {
        return Ok(false);
    };
    let at = match &mut entry.value {
        Value::Str(_) => return Err(CmdError::WrongType),
        Value::Window(s) => refund_with(s, now, n),
        Value::Fixed(s) => refund_with(s, now, n),
        Value::Gcra(s) => refund_with(s, now, n),
        Value::Log(s) => refund_with(s, now, n),
    };
    keep_until(slot, at, now);
    Ok(true)
}

fn refund_with<S: AlgoState>(s: &mut Stored<S>, now: Nanos, n: u64) -> u64 {
    s.state.refund(&s.params, now.0, n);
    s.state.expires_at(&s.params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU64;

    const S: u64 = 1_000_000_000;

    fn log_spec(limit: u64) -> LimitSpec {
        LimitSpec {
            algo: Algorithm::Log,
            params: Params::new(
                NonZeroU64::new(limit).unwrap(),
                NonZeroU64::new(60 * S).unwrap(),
            ),
        }
    }

    /// A ring that must grow to admit is refused when the growth does not
    /// fit the room left under `--maxmemory`; a denial, which records
    /// nothing, is still answered.
    #[test]
    fn a_ring_grows_only_within_the_room_left() {
        let spec = log_spec(10);
        let mut slot = None;
        for i in 0..4 {
            let d = allow(
                &mut slot,
                &spec,
                Nanos(1_000 * S + i * 1_000),
                1,
                usize::MAX,
            )
            .unwrap();
            assert!(d.allowed);
        }
        let ring = |slot: &Option<Entry>| match &slot.as_ref().unwrap().value {
            Value::Log(l) => (l.state.slots(), l.state.growth()),
            _ => unreachable!(),
        };
        let (slots, growth) = ring(&slot);
        assert_eq!(slots, 4);
        assert!(growth > 0);
        let now = Nanos(1_000 * S + 10_000);
        assert_eq!(
            allow(&mut slot, &spec, now, 1, growth - 1),
            Err(CmdError::OutOfMemory)
        );
        assert_eq!(ring(&slot).0, 4, "nothing recorded");
        // A request that would be denied anyway is answered.
        let d = allow(&mut slot, &spec, now, 7, 0).unwrap();
        assert!(!d.allowed);
        let d = allow(&mut slot, &spec, now, 1, growth).unwrap();
        assert!(d.allowed);
        assert_eq!(ring(&slot).0, 5);
        let (d, grows) = peek(slot.as_ref(), &spec, now, 1).unwrap();
        assert!(d.allowed);
        assert_eq!(grows, 0, "room for three more");
    }
}
