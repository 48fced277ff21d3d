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
    fn refund(&mut self, p: &Params, now: u64, n: u64);
    /// Absolute time (ns) when the state stops mattering.
    fn expires_at(&self, p: &Params) -> u64;
    fn get(v: &Value) -> Option<&Stored<Self>>;
    fn get_mut(v: &mut Value) -> Option<&mut Stored<Self>>;
    fn into_value(s: Stored<Self>) -> Value;
}

macro_rules! algo_state {
    ($module:ident, $variant:ident, $wrap:expr, $expires:expr) => {
        impl AlgoState for $module::State {
            fn decide(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
                $module::decide(self, p, now, cost)
            }
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
algo_state!(log, Log, |s| s, |s: &log::State, p| s.expires_at(p));

/// Sets `entry`'s TTL to `at`, or removes the key if `at` is not after now.
fn keep_until(slot: &mut Option<Entry>, at: u64, now: Nanos) {
    if at <= now.0 {
        *slot = None;
    } else if let Some(e) = slot.as_mut() {
        e.set_expiry(Some(Nanos(at)));
    }
}

/// Runs one limit against the entry in `slot`, charging it if admitted.
/// A denied request writes nothing (the log may drop expired slots).
pub fn allow(
    slot: &mut Option<Entry>,
    spec: &LimitSpec,
    now: Nanos,
    cost: u64,
) -> Result<Decision, CmdError> {
    match spec.algo {
        Algorithm::Window => allow_with::<window::State>(slot, &spec.params, now, cost),
        Algorithm::Fixed => allow_with::<fixed::State>(slot, &spec.params, now, cost),
        Algorithm::Gcra => allow_with::<gcra::State>(slot, &spec.params, now, cost),
        Algorithm::Log => allow_with::<log::State>(slot, &spec.params, now, cost),
    }
}

fn allow_with<S: AlgoState>(
    slot: &mut Option<Entry>,
    p: &Params,
    now: Nanos,
    cost: u64,
) -> Result<Decision, CmdError> {
    match slot.as_mut() {
        Some(entry) => {
            let stored = S::get_mut(&mut entry.value).ok_or(CmdError::WrongType)?;
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

/// What `allow` would answer now, changing nothing.
pub fn peek(
    entry: Option<&Entry>,
    spec: &LimitSpec,
    now: Nanos,
    cost: u64,
) -> Result<Decision, CmdError> {
    match spec.algo {
        Algorithm::Window => peek_with::<window::State>(entry, &spec.params, now, cost),
        Algorithm::Fixed => peek_with::<fixed::State>(entry, &spec.params, now, cost),
        Algorithm::Gcra => peek_with::<gcra::State>(entry, &spec.params, now, cost),
        Algorithm::Log => peek_with::<log::State>(entry, &spec.params, now, cost),
    }
}

fn peek_with<S: AlgoState>(
    entry: Option<&Entry>,
    p: &Params,
    now: Nanos,
    cost: u64,
) -> Result<Decision, CmdError> {
    let mut state = match entry {
        Some(e) => S::get(&e.value).ok_or(CmdError::WrongType)?.state.clone(),
        None => S::default(),
    };
    Ok(state.decide(p, now.0, cost))
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
