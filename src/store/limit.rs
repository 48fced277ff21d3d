//! Limiter state in the keyspace: find a key's state (or start a fresh
//! one), run its algorithm through the [`Limiter`] contract, write back
//! what changed with the TTL the state implies. Each algorithm's state is
//! one [`Value`] variant, so another algorithm (or a string command) on
//! the key is `WRONGTYPE`.

use crate::clock::Nanos;
use crate::limiter::lease::{Acquired, Lapsed, LeaseId, Leases};
use crate::limiter::{for_each_algorithm, with_algorithm};
use crate::limiter::{Algorithm, Decision, LimitSpec, Limiter, Params, Storage};
use crate::store::entry::{Blocked, Entry, LeaseKey, Stored, Value};

/// Why a limiter operation on a key was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// The key holds another kind of value.
    #[error("the key holds another kind of value")]
    WrongType,
    /// The key holds limiter state of another kind (`held`: an
    /// algorithm's name, or `lease`) than the command asked for (`asked`).
    #[error("the key holds a {held} limiter, not {asked}")]
    OtherLimiter {
        held: &'static str,
        asked: &'static str,
    },
    /// Admitting would allocate more than `--maxmemory` leaves.
    #[error("over maxmemory")]
    OutOfMemory,
    /// An acquire would hold more than `lease::MAX_LEASES` on one key.
    #[error("too many leases on one key")]
    TooManyLeases,
}

/// A limiter whose state the keyspace holds: its [`Value`] variant (one
/// impl per line of the algorithms' list).
pub trait Held: Storage + 'static {
    fn get(v: &Value) -> Option<&Stored<Self>>;
    fn get_mut(v: &mut Value) -> Option<&mut Stored<Self>>;
    fn into_value(s: Stored<Self>) -> Value;
}

macro_rules! held {
    ($([$variant:ident $module:ident])*) => {$(
        impl Held for crate::limiter::$module::State {
            fn get(v: &Value) -> Option<&Stored<Self>> {
                match v {
                    Value::$variant(s) => Some(s),
                    Value::Blocked(b) => Self::get(&b.value),
                    _ => None,
                }
            }
            fn get_mut(v: &mut Value) -> Option<&mut Stored<Self>> {
                match v {
                    Value::$variant(s) => Some(s),
                    Value::Blocked(b) => Self::get_mut(&mut b.value),
                    _ => None,
                }
            }
            fn into_value(s: Stored<Self>) -> Value {
                Value::$variant(s)
            }
        }
    )*};
}
for_each_algorithm!(held);

/// Code generic over a held state's type, run for an algorithm chosen at
/// run time by [`visit`]: how code outside the crate (the tests' model of
/// the store, the benchmarks), which cannot expand `with_algorithm!`, is
/// generic over the algorithms rather than naming each.
pub trait Visit {
    type Output;
    fn visit<S: Held>(self) -> Self::Output;
}

macro_rules! visitor {
    ($([$variant:ident $module:ident])*) => {
        /// Runs `v` for `algo`'s state type.
        pub fn visit<V: Visit>(algo: Algorithm, v: V) -> V::Output {
            match algo {
                $(Algorithm::$variant => v.visit::<crate::limiter::$module::State>(),)*
            }
        }
    };
}
for_each_algorithm!(visitor);

/// Why `v` is not the state `asked` names (an algorithm, or `lease`):
/// another limiter's (named, so the error can say what the key holds and
/// what to do), or no limiter at all.
fn other_limiter(v: &Value, asked: &'static str) -> LimitError {
    let held = match v.algorithm() {
        Some(a) => a.name(),
        None if matches!(v, Value::Lease(_)) => "lease",
        None => return LimitError::WrongType,
    };
    LimitError::OtherLimiter { held, asked }
}

/// Why `v` is not `S`'s state ([`other_limiter`]).
fn mismatch<S: Held>(v: &Value) -> LimitError {
    other_limiter(v, S::ALGORITHM.name())
}

/// Sets the entry's TTL to `at`, or removes the key if that is not after
/// now.
fn keep_until(slot: &mut Option<Entry>, at: Nanos, now: Nanos) {
    if at <= now {
        *slot = None;
    } else if let Some(e) = slot.as_mut() {
        e.set_expiry(Some(at));
    }
}

/// [`keep_until`] with `at` the moment the state the entry holds stops
/// mattering, and nothing later (no block): marked so, for the store.
fn keep_for_state(slot: &mut Option<Entry>, at: Nanos, now: Nanos) {
    if at <= now {
        *slot = None;
    } else if let Some(e) = slot.as_mut() {
        e.set_state_expiry(at);
    }
}

/// Runs one limit against the entry in `slot`, charging it if admitted.
/// A denied request writes nothing (the log may drop expired slots), but
/// for the limit's `BLOCK` penalty; a key under a block is denied,
/// uncounted, until it ends. An admission that would allocate more than
/// `room` bytes (`--maxmemory`'s headroom) is refused before anything is
/// held.
pub fn allow(
    slot: &mut Option<Entry>,
    spec: &LimitSpec,
    now: Nanos,
    cost: u64,
    room: usize,
) -> Result<Decision, LimitError> {
    if let Some(d) = blocked(slot.as_ref(), spec, now)? {
        return Ok(d);
    }
    unblock(slot, now);
    let d = with_algorithm!(spec.algo, allow_with(slot, &spec.params, now, cost, room))?;
    Ok(match d.allowed {
        true => d,
        false => block(slot, spec, now).map_or(d, |until| under_block(d, until, now)),
    })
}

/// [`allow`] on a constant-size state where it lies (a compact record,
/// read under `held`, the parameters it was last charged with), for the
/// common case only: the key live, not blocked, and the answer changing
/// nothing but the state. `None` when the general path must decide
/// (an expired key, a denial with a `BLOCK` penalty, an admission that
/// would end the key), which it does from the same unchanged record. On
/// admission, the new state (under `spec`'s parameters) and its expiry.
#[inline]
pub fn allow_in_place<S: Limiter>(
    state: &S,
    held: &Params,
    spec: &LimitSpec,
    now: Nanos,
    cost: u64,
) -> Option<(Decision, Option<(S, Nanos)>)> {
    debug_assert_eq!(S::ALGORITHM, spec.algo);
    if super::entry::passed(super::entry::expiry_ms_at(state.expires_at(held)), now) {
        return None;
    }
    let mut s = state.clone();
    let d = s.decide(&spec.params, now, cost);
    if !d.allowed {
        return spec.block.is_none().then_some((d, None));
    }
    let at = s.expires_at(&spec.params);
    (at > now).then_some((d, Some((s, at))))
}

/// `RL.CHARGE`: records `n` units whatever the state (it may overdraw),
/// answering allowed if usage is within the limit after it. A charge that
/// leaves the key over its limit is a denial, which its `BLOCK` penalty
/// follows; a key under a block is charged and answers denied.
pub fn charge(
    slot: &mut Option<Entry>,
    spec: &LimitSpec,
    now: Nanos,
    n: u64,
    room: usize,
) -> Result<Decision, LimitError> {
    let held = blocked(slot.as_ref(), spec, now)?;
    unblock(slot, now);
    let d = with_algorithm!(spec.algo, charge_with(slot, &spec.params, now, n, room))?;
    Ok(match (held, d.allowed) {
        (Some(b), _) => under_block(d, now.0 + b.retry_after.unwrap_or(0), now),
        (None, true) => d,
        (None, false) => block(slot, spec, now).map_or(d, |until| under_block(d, until, now)),
    })
}

fn charge_with<S: Held>(
    slot: &mut Option<Entry>,
    p: &Params,
    now: Nanos,
    n: u64,
    room: usize,
) -> Result<Decision, LimitError> {
    let entry = slot.get_or_insert_with(|| {
        Entry::new(S::into_value(Stored {
            params: *p,
            state: S::default(),
        }))
    });
    let block_end = match &entry.value {
        Value::Blocked(b) => b.until,
        _ => 0,
    };
    let stored = match S::get_mut(&mut entry.value) {
        Some(s) => s,
        None => return Err(mismatch::<S>(&entry.value)),
    };
    if stored.state.growth() > room {
        return Err(LimitError::OutOfMemory);
    }
    let d = stored.state.charge(p, now, n);
    stored.params = *p;
    let at = stored.expires_at().max(Nanos(block_end));
    keep_until(slot, at, now);
    Ok(d)
}

/// The answer for a key under a block at `now`: denied, uncounted,
/// retry at the block's end; `None` if the key is not blocked (or its
/// block has ended). `WRONGTYPE` for a key of another algorithm.
fn blocked(
    entry: Option<&Entry>,
    spec: &LimitSpec,
    now: Nanos,
) -> Result<Option<Decision>, LimitError> {
    let Some(Value::Blocked(b)) = entry.map(|e| &e.value) else {
        return Ok(None);
    };
    if b.until <= now.0 {
        return Ok(None);
    }
    let (beneath, _) = peek_state(entry, spec, now, 1)?;
    Ok(Some(under_block(beneath, b.until, now)))
}

/// Drops a block that has ended, leaving the state beneath.
fn unblock(slot: &mut Option<Entry>, now: Nanos) {
    let Some(entry) = slot.as_mut() else { return };
    let Value::Blocked(b) = &mut entry.value else {
        return;
    };
    if b.until > now.0 {
        return;
    }
    let beneath = std::mem::replace(&mut b.value, Value::Str(Default::default()));
    entry.value = beneath;
    fn state_expiry<S: Held>(v: &Value) -> Option<Nanos> {
        S::get(v).map(Stored::expires_at)
    }
    let Some(algo) = entry.value.algorithm() else {
        return;
    };
    if let Some(at) = with_algorithm!(algo, state_expiry(&entry.value)) {
        keep_until(slot, at, now);
    }
}

/// After a denial: `spec`'s `BLOCK` penalty, if it has one, blocks the key
/// from `now` (a fresh key's empty state is kept beneath) and returns the
/// block's end. A key already under a block keeps its end: denials during
/// a block do not extend it.
pub fn block(slot: &mut Option<Entry>, spec: &LimitSpec, now: Nanos) -> Option<u64> {
    let duration = spec.block?;
    let until = now.0.saturating_add(duration.get());
    let entry = match slot {
        Some(e) if matches!(e.value, Value::Blocked(_)) => return None,
        Some(e) => e,
        None => slot.insert(Entry::new(fresh_value(spec))),
    };
    let beneath = std::mem::replace(&mut entry.value, Value::Str(Default::default()));
    entry.value = Value::Blocked(Box::new(Blocked {
        until,
        value: beneath,
    }));
    let at = entry
        .expiry_ms()
        .unwrap_or(0)
        .max(super::entry::expiry_ms_at(Nanos(until)));
    entry.set_expiry_ms(Some(at));
    Some(until)
}

/// `d` for a key blocked until `until`: denied, nothing left, retry at
/// the block's end (or later, if the limit beneath still denies then).
pub fn under_block(d: Decision, until: u64, now: Nanos) -> Decision {
    let wait = until.saturating_sub(now.0);
    Decision {
        allowed: false,
        remaining: 0,
        retry_after: Some(wait.max(d.retry_after.unwrap_or(0))),
        reset_after: wait.max(d.reset_after),
        ..d
    }
}

/// An empty state of `spec`'s algorithm.
fn fresh_value(spec: &LimitSpec) -> Value {
    fn fresh<S: Held>(p: &Params) -> Value {
        S::into_value(Stored {
            params: *p,
            state: S::default(),
        })
    }
    with_algorithm!(spec.algo, fresh(&spec.params))
}

fn allow_with<S: Held>(
    slot: &mut Option<Entry>,
    p: &Params,
    now: Nanos,
    cost: u64,
    room: usize,
) -> Result<Decision, LimitError> {
    match slot.as_mut() {
        Some(entry) => {
            let stored = match S::get_mut(&mut entry.value) {
                Some(s) => s,
                None => return Err(mismatch::<S>(&entry.value)),
            };
            if stored.state.growth() > room && stored.state.peek(p, now, cost).allowed {
                return Err(LimitError::OutOfMemory);
            }
            let d = stored.state.decide(p, now, cost);
            if d.allowed {
                // New limit or period take effect at once, and are what
                // REFUND and STATE use from now on.
                stored.params = *p;
                let at = stored.expires_at();
                keep_for_state(slot, at, now);
            }
            Ok(d)
        }
        None => {
            let mut state = S::default();
            let d = state.decide(p, now, cost);
            if d.allowed {
                let stored = Stored { params: *p, state };
                let at = stored.expires_at();
                *slot = Some(Entry::new(S::into_value(stored)));
                keep_for_state(slot, at, now);
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
) -> Result<(Decision, usize), LimitError> {
    if let Some(d) = blocked(entry, spec, now)? {
        return Ok((d, 0));
    }
    peek_state(entry, spec, now, cost)
}

/// What the state beneath any block would answer.
fn peek_state(
    entry: Option<&Entry>,
    spec: &LimitSpec,
    now: Nanos,
    cost: u64,
) -> Result<(Decision, usize), LimitError> {
    with_algorithm!(spec.algo, peek_with(entry, &spec.params, now, cost))
}

fn peek_with<S: Held>(
    entry: Option<&Entry>,
    p: &Params,
    now: Nanos,
    cost: u64,
) -> Result<(Decision, usize), LimitError> {
    let fresh;
    let state = match entry {
        Some(e) => {
            &S::get(&e.value)
                .ok_or_else(|| mismatch::<S>(&e.value))?
                .state
        }
        None => {
            fresh = S::default();
            &fresh
        }
    };
    let d = state.peek(p, now, cost);
    let growth = if d.allowed { state.growth() } else { 0 };
    Ok((d, growth))
}

/// Gives back `n` units to whatever limiter the key holds, with the
/// parameters it was last charged with. False if the key does not exist.
pub fn refund(slot: &mut Option<Entry>, now: Nanos, n: u64) -> Result<bool, LimitError> {
    let Some(entry) = slot.as_mut() else {
        return Ok(false);
    };
    let (value, block_end) = match &mut entry.value {
        Value::Blocked(b) => (&mut b.value, b.until),
        v => (v, 0),
    };
    fn refund_as<S: Held>(v: &mut Value, now: Nanos, n: u64) -> Option<Nanos> {
        let s = S::get_mut(v)?;
        s.state.refund(&s.params, now, n);
        Some(s.expires_at())
    }
    // A block's state beneath is not refunded: `WRONGTYPE`, as before.
    let refunded = match value {
        Value::Blocked(_) => None,
        v => v
            .algorithm()
            .and_then(|a| with_algorithm!(a, refund_as(v, now, n))),
    };
    let Some(at) = refunded else {
        return Err(LimitError::WrongType);
    };
    keep_until(slot, at.max(Nanos(block_end)), now);
    Ok(true)
}

/// The lease key in `slot`, if it holds one; `WRONGTYPE` for any other
/// value.
fn lease_key(slot: &mut Option<Entry>) -> Result<Option<&mut LeaseKey>, LimitError> {
    match slot.as_mut().map(|e| &mut e.value) {
        None => Ok(None),
        Some(Value::Lease(l)) => Ok(Some(l)),
        Some(v) => Err(other_limiter(v, "lease")),
    }
}

/// After a lease operation: the key lives as long as its last lease, and
/// goes when none is left.
fn keep_leases(slot: &mut Option<Entry>, now: Nanos) {
    let last = match slot.as_ref().map(|e| &e.value) {
        Some(Value::Lease(l)) => l.leases.expires_at(),
        _ => return,
    };
    keep_until(slot, Nanos(last), now);
}

/// `RL.ACQUIRE`: a lease of `cost` units under `limit` for `ttl` as `id`
/// (see [`Leases::acquire`]). An admission that would allocate more than
/// `room` bytes is refused before anything is held.
pub fn acquire(
    slot: &mut Option<Entry>,
    limit: u64,
    ttl: u64,
    now: Nanos,
    cost: u64,
    id: LeaseId,
    room: usize,
) -> Result<(Acquired, Lapsed), LimitError> {
    let (acquired, lapsed) = match lease_key(slot)? {
        Some(l) => {
            let before = l.leases.heap_bytes();
            let r = l
                .leases
                .acquire(limit, ttl, now.0, cost, id)
                .map_err(|_| LimitError::TooManyLeases)?;
            l.limit = limit;
            // Held only within `--maxmemory`: a vector that had to grow
            // past the room left gives the lease back.
            if r.0.decision.allowed && l.leases.heap_bytes().saturating_sub(before) > room {
                l.leases.release(now.0, &id);
                return Err(LimitError::OutOfMemory);
            }
            r
        }
        None => {
            let mut l = LeaseKey {
                limit,
                leases: Leases::default(),
            };
            let r = l
                .leases
                .acquire(limit, ttl, now.0, cost, id)
                .map_err(|_| LimitError::TooManyLeases)?;
            if r.0.decision.allowed {
                if std::mem::size_of::<LeaseKey>() + l.leases.heap_bytes() > room {
                    return Err(LimitError::OutOfMemory);
                }
                *slot = Some(Entry::new(Value::Lease(l)));
            }
            r
        }
    };
    keep_leases(slot, now);
    Ok((acquired, lapsed))
}

/// What `RL.ACQUIRE` would answer (`RL.PEEK ... ALGO lease`).
pub fn peek_lease(
    entry: Option<&Entry>,
    limit: u64,
    ttl: u64,
    now: Nanos,
    cost: u64,
) -> Result<Decision, LimitError> {
    match entry.map(|e| &e.value) {
        None => Ok(Leases::default().peek(limit, ttl, now.0, cost)),
        Some(Value::Lease(l)) => Ok(l.leases.peek(limit, ttl, now.0, cost)),
        Some(v) => Err(other_limiter(v, "lease")),
    }
}

/// `RL.RELEASE`: true if lease `id` was live.
pub fn release(
    slot: &mut Option<Entry>,
    now: Nanos,
    id: &LeaseId,
) -> Result<(bool, Lapsed), LimitError> {
    let Some(l) = lease_key(slot)? else {
        return Ok((false, Lapsed::default()));
    };
    let r = l.leases.release(now.0, id);
    keep_leases(slot, now);
    Ok(r)
}

/// `RL.RENEW`: true if lease `id` was live; it then lapses `ttl` from now.
pub fn renew(
    slot: &mut Option<Entry>,
    now: Nanos,
    id: &LeaseId,
    ttl: u64,
) -> Result<(bool, Lapsed), LimitError> {
    let Some(l) = lease_key(slot)? else {
        return Ok((false, Lapsed::default()));
    };
    let r = l.leases.renew(now.0, id, ttl);
    keep_leases(slot, now);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU64;

    const S: u64 = 1_000_000_000;

    fn log_spec(limit: u64) -> LimitSpec {
        LimitSpec {
            algo: Algorithm::Log,
            block: None,
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
        // Single requests: a compact ring, full at eight slots.
        for i in 0..8 {
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
        assert_eq!(slots, 8);
        assert!(growth > 0, "a ring of eight is full");
        let now = Nanos(1_000 * S + 10_000);
        assert_eq!(
            allow(&mut slot, &spec, now, 1, growth - 1),
            Err(LimitError::OutOfMemory)
        );
        assert_eq!(ring(&slot).0, 8, "nothing recorded");
        // A request that would be denied anyway is answered.
        let d = allow(&mut slot, &spec, now, 3, 0).unwrap();
        assert!(!d.allowed);
        let d = allow(&mut slot, &spec, now, 1, growth).unwrap();
        assert!(d.allowed);
        assert_eq!(ring(&slot).0, 9);
        let (d, grows) = peek(slot.as_ref(), &spec, now, 1).unwrap();
        assert!(d.allowed);
        assert_eq!(grows, 0, "room for one more");
    }
}
