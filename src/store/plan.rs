//! All-or-nothing decisions over several limits, executed in one place:
//! `RL.ALLOWMANY` (with `CHARGE` too), a policy's `RL.ALLOW`, `RL.PEEK`,
//! `RL.CHARGE` and `RL.CHECK`, and Envoy's rate limit service each build
//! their steps and render what comes back.
//!
//! Every key's shard is locked together (in the store's fixed order, so
//! two plans never deadlock), every step is peeked at in place, and only
//! if no enforced step denies (and what the writes would allocate fits
//! `--maxmemory`) are the leases taken and the limits charged, under the
//! same locks, so each decides as its peek did. Nothing is copied,
//! however long a log ring is. A denied plan writes nothing but the
//! deniers' `BLOCK` penalties.

use crate::clock::Nanos;
use crate::limiter::lease::LeaseId;
use crate::limiter::{Decision, LimitSpec};
use crate::store::keys::KeyHash;
use crate::store::keys::Keys;
use crate::store::known::HeldKeys;
use crate::store::limit::{self, LimitError};
use crate::store::{Entry, Found, Keyspace, Locked};
use smallvec::SmallVec;

/// The limit one step runs against its key.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    Rate(LimitSpec),
    /// A concurrency limit: a lease of the step's cost, held for `ttl`
    /// as `id`.
    Lease {
        limit: u64,
        ttl: u64,
        id: LeaseId,
    },
}

/// What a step does to its key once the plan is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// Charged its cost (nothing for 0); a denial holds the plan back.
    Allow,
    /// Its cost recorded whatever the state (it may overdraw), the
    /// decision the charge's own: it never holds the plan back.
    Charge,
    /// Its cost given back (never below empty); a key whose look denies
    /// (under a block) holds the plan back.
    Refund,
    /// More than the limit can ever admit: denied, with what a look at
    /// the counter shows.
    Refuse,
    /// Looked at only: never written, never holds the plan back.
    Peek,
}

/// One key's part in a plan, and after [`run`] what it came to.
#[derive(Debug, Clone, Copy)]
pub struct Step<'k> {
    pub key: &'k [u8],
    pub limit: Limit,
    pub cost: u64,
    pub act: Act,
    /// Shadow mode: a denial is reported, but holds nothing back and
    /// takes no `BLOCK` penalty.
    pub shadow: bool,
    /// A policy's counter: state of another algorithm there is dropped (a
    /// reload changed the policy's algorithm) rather than `WRONGTYPE`.
    pub fresh: bool,
    /// The step's decision: its write's when written, else its peek's;
    /// `None` if the plan stopped before it.
    pub decision: Option<Decision>,
    /// Units charged to the key.
    pub charged: u64,
}

impl<'k> Step<'k> {
    pub fn new(key: &'k [u8], limit: Limit, cost: u64, act: Act) -> Step<'k> {
        Step {
            key,
            limit,
            cost,
            act,
            shadow: false,
            fresh: false,
            decision: None,
            charged: 0,
        }
    }

    /// Whether this step's peek holds the whole plan back.
    fn holds_back(&self, d: &Decision) -> bool {
        !d.allowed && !self.shadow && self.act != Act::Charge && self.act != Act::Peek
    }
}

/// How a plan is decided, beyond its steps.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rules {
    /// Stop peeking at the first step that holds the plan back (only its
    /// decision is wanted); otherwise every step is peeked at and
    /// reported.
    pub stop_at_denial: bool,
    /// Something outside the steps denies the request already (a
    /// policy's `requests_per_unit: 0`): peek and penalise only.
    pub denied: bool,
}

/// What the plan came to; each step's decision is in the step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Whether the writes were made.
    pub admitted: bool,
    /// Leases found lapsed while taking new ones.
    pub lapsed: u64,
}

/// Why a plan was refused; nothing was charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanError {
    /// The writes would allocate more than `--maxmemory` leaves.
    OutOfMemory,
    /// Step `at`'s key refused its limit (it holds another kind of value).
    Step { at: usize, err: LimitError },
}

fn refused(at: usize, err: LimitError) -> PlanError {
    match err {
        LimitError::OutOfMemory => PlanError::OutOfMemory,
        err => PlanError::Step { at, err },
    }
}

impl Limit {
    /// What the step's write would answer at `cost`, and the bytes it
    /// would allocate.
    fn peek(
        &self,
        e: Option<&Entry>,
        fresh: bool,
        now: Nanos,
        cost: u64,
    ) -> Result<(Decision, usize), LimitError> {
        match self {
            Limit::Rate(spec) => {
                let e = e.filter(|e| !fresh || e.value.algorithm() == Some(spec.algo));
                limit::peek(e, spec, now, cost)
            }
            Limit::Lease { limit, ttl, .. } => {
                Ok((limit::peek_lease(e, *limit, *ttl, now, cost)?, 0))
            }
        }
    }
}

/// The step's limit with shadow mode applied: a shadow limit reports what
/// it would do and lets everything through, so it blocks nothing either.
fn enforced(step: &Step<'_>, spec: &LimitSpec) -> LimitSpec {
    match step.shadow {
        true => LimitSpec {
            block: None,
            ..*spec
        },
        false => *spec,
    }
}

/// Runs `steps` at `now` with `room` bytes of `--maxmemory` headroom,
/// filling in each step's decision. One step that charges needs no peek
/// (its write decides, under one lock, as `RL.ALLOW` does); a lone
/// `Peek` reads under a shared lock.
#[inline]
pub fn run(
    db: Keyspace<'_>,
    steps: &mut [Step<'_>],
    now: Nanos,
    room: usize,
    rules: Rules,
) -> Result<Outcome, PlanError> {
    if let ([step], false) = (&mut *steps, rules.denied) {
        if let Some(outcome) = run_one(db, step, now, room)? {
            return Ok(outcome);
        }
    }
    if steps.is_empty() {
        return Ok(Outcome {
            admitted: !rules.denied,
            lapsed: 0,
        });
    }
    // Each step's key hashed once, and found and decoded once: its charge
    // starts from what its peek found. That is kept only for a key no
    // other step names, which nothing else writes before its charge.
    let mut known = Known::new();
    known.extend(steps.iter().map(|s| (db.hash(s.key), None)));
    let mut lock = db.lock_hashed(known.iter().map(|(h, _)| *h));
    let mut admitted = !rules.denied;
    let mut growth = 0usize;
    for at in 0..steps.len() {
        let step = &steps[at];
        let cost = match step.act {
            Act::Allow | Act::Peek => step.cost,
            // Looked at for its type and the bytes it may allocate.
            Act::Charge => 1,
            Act::Refund | Act::Refuse => 0,
        };
        let (fresh, l) = (step.fresh, &step.limit);
        let (hash, found) = &mut known[at];
        let (mut d, grows) = lock
            .get_known(step.key, *hash, now, found, |e| {
                l.peek(Some(e), fresh, now, cost)
            })
            .unwrap_or_else(|| l.peek(None, fresh, now, cost))
            .map_err(|e| refused(at, e))?;
        let writes = matches!(step.act, Act::Allow | Act::Charge);
        if !writes
            || steps
                .iter()
                .enumerate()
                .any(|(i, s)| i != at && s.key == step.key)
        {
            *found = None;
        }
        let step = &mut steps[at];
        if step.act == Act::Refuse {
            d.allowed = false;
        }
        growth = growth.saturating_add(grows);
        step.decision = Some(d);
        if step.holds_back(&d) {
            admitted = false;
            if rules.stop_at_denial {
                break;
            }
        }
    }
    if !admitted {
        penalise(&mut lock, steps, now);
        return Ok(Outcome::default());
    }
    if growth > room {
        return Err(PlanError::OutOfMemory);
    }
    let lapsed = take_leases(&mut lock, steps, now, room)?;
    for (at, step) in steps.iter_mut().enumerate() {
        // Borrowed field by field: the limit is read where it lies.
        let Step {
            key,
            limit: Limit::Rate(spec),
            cost,
            act,
            fresh,
            decision: Some(d),
            charged,
            ..
        } = step
        else {
            continue;
        };
        let (key, cost, act, fresh) = (*key, *cost, *act, *fresh);
        if (!d.allowed && act != Act::Charge) || cost == 0 {
            continue;
        }
        let clear = |slot: &mut Option<Entry>| {
            if fresh {
                clear_other_algorithm(slot, spec);
            }
        };
        let (hash, found) = &mut known[at];
        let hash = *hash;
        match act {
            Act::Allow => {
                *d = lock
                    .update_known(key, hash, now, found, |slot| {
                        clear(slot);
                        limit::allow(slot, spec, now, cost, usize::MAX)
                    })
                    .map_err(|e| refused(at, e))?;
                *charged = if d.allowed { cost } else { 0 };
            }
            Act::Charge => {
                *d = lock
                    .update_known(key, hash, now, found, |slot| {
                        clear(slot);
                        limit::charge(slot, spec, now, cost, usize::MAX)
                    })
                    .map_err(|e| refused(at, e))?;
                *charged = cost;
            }
            Act::Refund => {
                lock.update(key, now, |slot| {
                    clear(slot);
                    limit::refund(slot, now, cost)
                })
                .map_err(|e| refused(at, e))?;
                let l = Limit::Rate(*spec);
                *d = lock
                    .get(key, now, |e| l.peek(Some(e), false, now, 0))
                    .unwrap_or_else(|| l.peek(None, false, now, 0))
                    .map_err(|e| refused(at, e))?
                    .0;
            }
            Act::Refuse | Act::Peek => {}
        }
    }
    Ok(Outcome {
        admitted: true,
        lapsed,
    })
}

/// What a plan knows of each step's key: its hash, and where its peek
/// found it and what it decoded. Inline for the plans of a few keys that
/// requests make.
type Known = SmallVec<[(KeyHash, Option<Found>); 4]>;

/// A lone step: one that writes decides by its write alone, under its
/// shard's lock; a `Peek` reads. `None` for those the general path takes
/// (nothing to charge, a refund, a refusal, a lease).
fn run_one(
    db: Keyspace<'_>,
    step: &mut Step<'_>,
    now: Nanos,
    room: usize,
) -> Result<Option<Outcome>, PlanError> {
    let Limit::Rate(spec) = step.limit else {
        return Ok(None);
    };
    let spec = enforced(step, &spec);
    let (fresh, cost) = (step.fresh, step.cost);
    let write = |slot: &mut Option<Entry>, charge: bool| {
        if fresh {
            clear_other_algorithm(slot, &spec);
        }
        match charge {
            true => limit::charge(slot, &spec, now, cost, room),
            false => limit::allow(slot, &spec, now, cost, room),
        }
    };
    let d = match step.act {
        Act::Allow if cost > 0 => db.update(step.key, now, |slot| write(slot, false)),
        Act::Charge => db.update(step.key, now, |slot| write(slot, true)),
        Act::Peek => {
            let l = step.limit;
            db.get(step.key, now, |e| l.peek(Some(e), fresh, now, cost))
                .unwrap_or_else(|| l.peek(None, fresh, now, cost))
                .map(|(d, _)| d)
        }
        _ => return Ok(None),
    }
    .map_err(|e| refused(0, e))?;
    step.charged = match step.act {
        Act::Charge => cost,
        Act::Allow if d.allowed => cost,
        _ => 0,
    };
    step.decision = Some(d);
    Ok(Some(Outcome {
        admitted: !step.holds_back(&d),
        lapsed: 0,
    }))
}

/// A denied plan: each enforced rate limit whose peek denied takes its
/// `BLOCK` penalty (a blocked key's denial keeps its block as it is).
fn penalise(lock: &mut Locked<'_>, steps: &mut [Step<'_>], now: Nanos) {
    for step in steps.iter_mut() {
        let (Limit::Rate(spec), Some(d)) = (step.limit, step.decision.as_mut()) else {
            continue;
        };
        if d.allowed || step.shadow || spec.block.is_none() {
            continue;
        }
        if !matches!(step.act, Act::Allow | Act::Refuse) {
            continue;
        }
        let fresh = step.fresh;
        let blocked = lock.update(step.key, now, |slot| {
            if fresh {
                clear_other_algorithm(slot, &spec);
            }
            limit::block(slot, &spec, now)
        });
        if let Some(until) = blocked {
            *d = limit::under_block(*d, until, now);
        }
    }
}

/// An admitted plan's leases, taken before any limit is charged: one that
/// cannot be held within `--maxmemory` gives back those taken before it,
/// and no limit is charged. Returns the leases found lapsed.
fn take_leases(
    lock: &mut Locked<'_>,
    steps: &mut [Step<'_>],
    now: Nanos,
    room: usize,
) -> Result<u64, PlanError> {
    let mut lapsed = 0;
    for at in 0..steps.len() {
        let step = &mut steps[at];
        let Limit::Lease { limit, ttl, id } = step.limit else {
            continue;
        };
        let cost = step.cost;
        let held = lock.update(step.key, now, |slot| {
            limit::acquire(slot, limit, ttl, now, cost, id, room)
        });
        match held {
            Ok((_, gone)) => {
                lapsed += gone.leases;
                step.charged = cost;
            }
            Err(e) => {
                for taken in &steps[..at] {
                    if let Limit::Lease { id, .. } = taken.limit {
                        let _ = lock.update(taken.key, now, |slot| limit::release(slot, now, &id));
                    }
                }
                return Err(refused(at, e));
            }
        }
    }
    Ok(lapsed)
}

/// The step that binds a decided plan: the first that denied, else the
/// one with the least remaining (the first of equals). `None` if no step
/// was decided.
pub fn binding(steps: &[Step<'_>]) -> Option<(usize, Decision)> {
    let decided = || {
        steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.decision.map(|d| (i, d)))
    };
    decided().find(|(_, d)| !d.allowed).or_else(|| {
        decided().reduce(|best, next| match next.1.remaining < best.1.remaining {
            true => next,
            false => best,
        })
    })
}

/// Takes the state of another algorithm off a policy's counter key: a
/// reload that changes a policy's algorithm starts its counters afresh
/// rather than answering WRONGTYPE (a string or collection there still
/// does).
pub fn clear_other_algorithm(slot: &mut Option<Entry>, spec: &LimitSpec) {
    if slot
        .as_ref()
        .and_then(|e| e.value.algorithm())
        .is_some_and(|a| a != spec.algo)
    {
        *slot = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Algorithm;
    use crate::store::Store;
    use std::num::NonZeroU64;

    const SEC: u64 = 1_000_000_000;

    fn spec(limit: u64, block: Option<u64>) -> LimitSpec {
        let s = LimitSpec::new(
            Algorithm::Fixed,
            NonZeroU64::new(limit).unwrap(),
            NonZeroU64::new(60 * SEC).unwrap(),
            None,
            None,
        )
        .unwrap();
        LimitSpec {
            block: block.and_then(NonZeroU64::new),
            ..s
        }
    }

    fn remaining(store: &Store, key: &[u8], s: &LimitSpec, now: Nanos) -> u64 {
        store
            .get(key, now, |e| limit::peek(Some(e), s, now, 1))
            .unwrap_or_else(|| limit::peek(None, s, now, 1))
            .unwrap()
            .0
            .remaining
    }

    /// A denial anywhere charges nothing anywhere, and only the denier
    /// takes its `BLOCK`; an admission charges every step.
    #[test]
    fn all_or_nothing_over_several_keys() {
        let store = Store::new(4);
        let now = Nanos(1000 * SEC);
        let (open, tight) = (spec(5, Some(30 * SEC)), spec(1, Some(30 * SEC)));
        let mut steps = [
            Step::new(b"a", Limit::Rate(open), 1, Act::Allow),
            Step::new(b"b", Limit::Rate(tight), 1, Act::Allow),
        ];
        let out = run(
            Keyspace::Store(&store),
            &mut steps,
            now,
            usize::MAX,
            Rules::default(),
        );
        assert_eq!(
            out,
            Ok(Outcome {
                admitted: true,
                lapsed: 0
            })
        );
        assert_eq!(binding(&steps).map(|(i, d)| (i, d.remaining)), Some((1, 0)));
        assert_eq!(remaining(&store, b"a", &open, now), 3, "a charged once");

        for s in &mut steps {
            s.decision = None;
        }
        let out = run(
            Keyspace::Store(&store),
            &mut steps,
            now,
            usize::MAX,
            Rules::default(),
        );
        assert_eq!(out, Ok(Outcome::default()));
        assert_eq!(
            remaining(&store, b"a", &open, now),
            3,
            "a denied plan charges a nothing"
        );
        let (at, d) = binding(&steps).unwrap();
        assert_eq!(at, 1);
        assert_eq!(d.retry_after, Some(30 * SEC), "the denier is blocked");
        let blocked = store.get(b"b", now, |e| {
            matches!(e.value, crate::store::Value::Blocked(_))
        });
        assert_eq!(blocked, Some(true));
        let blocked = store.get(b"a", now, |e| {
            matches!(e.value, crate::store::Value::Blocked(_))
        });
        assert_eq!(blocked, Some(false), "the admitting limit is not");
    }

    /// A plan decodes each key's record once: its charge starts from the
    /// entry its peek decoded. A key two steps name is read afresh by
    /// each write, so the second charge sees the first.
    #[test]
    fn a_plan_decodes_each_key_once() {
        let store = Store::new(4);
        let now = Nanos(1000 * SEC);
        let s = spec(10, None);
        let mut steps = [
            Step::new(b"a", Limit::Rate(s), 1, Act::Allow),
            Step::new(b"b", Limit::Rate(s), 2, Act::Charge),
        ];
        let db = Keyspace::Store(&store);
        for round in 1..=2 {
            let before = crate::store::shard::decodes();
            let out = run(db, &mut steps, now, usize::MAX, Rules::default());
            assert_eq!(out.map(|o| o.admitted), Ok(true));
            // The first round made the keys: nothing to decode.
            let decoded = crate::store::shard::decodes() - before;
            assert_eq!(decoded, 2 * (round - 1), "round {round}");
        }
        // What one more would leave: a charged 2, b 4.
        assert_eq!(remaining(&store, b"a", &s, now), 7);
        assert_eq!(remaining(&store, b"b", &s, now), 5);

        let mut twice = [
            Step::new(b"a", Limit::Rate(s), 1, Act::Allow),
            Step::new(b"a", Limit::Rate(s), 1, Act::Allow),
        ];
        let out = run(db, &mut twice, now, usize::MAX, Rules::default());
        assert_eq!(out.map(|o| o.admitted), Ok(true));
        assert_eq!(remaining(&store, b"a", &s, now), 5, "charged twice");
    }

    /// A plan over a log key, a lease key and a fixed one, charged again:
    /// the log's and the lease's states live in their arenas' slots, read
    /// there by the peek and moved out by the charge (no decoded entry is
    /// kept for them), and each charge lands.
    #[test]
    fn a_plan_over_log_and_lease_keys_charges_each() {
        let store = Store::new(1);
        let now = Nanos(1000 * SEC);
        let log = LimitSpec::new(
            Algorithm::Log,
            NonZeroU64::new(10).unwrap(),
            NonZeroU64::new(60 * SEC).unwrap(),
            None,
            None,
        )
        .unwrap();
        let db = Keyspace::Store(&store);
        for round in 0..3u8 {
            let mut steps = [
                Step::new(b"a-log-key-longer-than-16", Limit::Rate(log), 2, Act::Allow),
                Step::new(
                    b"a-lease-key",
                    Limit::Lease {
                        limit: 5,
                        ttl: 60 * SEC,
                        id: [round; 16],
                    },
                    1,
                    Act::Allow,
                ),
                Step::new(b"f", Limit::Rate(spec(10, None)), 1, Act::Allow),
            ];
            let out = run(
                db,
                &mut steps,
                Nanos(now.0 + round as u64),
                usize::MAX,
                Rules::default(),
            );
            assert_eq!(out.map(|o| o.admitted), Ok(true), "round {round}");
        }
        let later = Nanos(now.0 + 10);
        assert_eq!(
            remaining(&store, b"a-log-key-longer-than-16", &log, later),
            3
        );
        assert_eq!(remaining(&store, b"f", &spec(10, None), later), 6);
        let leases = store.get(b"a-lease-key", later, |e| match &e.value {
            crate::store::entry::Value::Lease(l) => l.leases.len(),
            _ => 0,
        });
        assert_eq!(leases, Some(3));
    }

    /// A step's key that another step's insert moved (the index grew
    /// under it) is found again: its charge lands on it, not on whatever
    /// took its place.
    #[test]
    fn a_key_moved_by_a_growing_index_is_found_again() {
        let store = Store::new(1);
        let now = Nanos(1000 * SEC);
        let s = spec(10, None);
        let db = Keyspace::Store(&store);
        let charge =
            |key: &[u8]| store.update(key, now, |slot| limit::allow(slot, &s, now, 1, usize::MAX));
        charge(b"b").unwrap();
        let mut i = 0;
        while !store.read_shard(0).index_full() {
            charge(format!("k{i}").as_bytes()).unwrap();
            i += 1;
        }
        let capacity = store.read_shard(0).index_capacity();
        let mut steps = [
            Step::new(b"new", Limit::Rate(s), 1, Act::Allow),
            Step::new(b"b", Limit::Rate(s), 1, Act::Allow),
        ];
        let out = run(db, &mut steps, now, usize::MAX, Rules::default());
        assert_eq!(out.map(|o| o.admitted), Ok(true));
        assert!(store.read_shard(0).index_capacity() > capacity, "grew");
        assert_eq!(remaining(&store, b"b", &s, now), 7, "b charged twice");
        assert_eq!(remaining(&store, b"new", &s, now), 8);
        for k in 0..i {
            let key = format!("k{k}");
            assert_eq!(remaining(&store, key.as_bytes(), &s, now), 8, "{key}");
        }
    }

    /// A shadow step's denial is reported but holds nothing back and
    /// blocks nothing; a refused step denies with what a look shows.
    #[test]
    fn shadow_and_refused_steps() {
        let store = Store::new(4);
        let now = Nanos(1000 * SEC);
        let s = spec(1, Some(30 * SEC));
        let shadow = |key| Step {
            shadow: true,
            ..Step::new(key, Limit::Rate(s), 2, Act::Allow)
        };
        let mut steps = [
            shadow(b"s"),
            Step::new(b"ok", Limit::Rate(spec(5, None)), 1, Act::Allow),
        ];
        let out = run(
            Keyspace::Store(&store),
            &mut steps,
            now,
            usize::MAX,
            Rules::default(),
        );
        assert_eq!(out.map(|o| o.admitted), Ok(true));
        assert!(!steps[0].decision.unwrap().allowed);
        assert!(!store.exists(b"s", now), "a shadow denial writes nothing");
        assert_eq!(steps[1].charged, 1);

        let mut steps = [Step::new(b"r", Limit::Rate(s), 2, Act::Refuse)];
        let out = run(
            Keyspace::Store(&store),
            &mut steps,
            now,
            usize::MAX,
            Rules::default(),
        );
        assert_eq!(out.map(|o| o.admitted), Ok(false));
        assert_eq!(steps[0].charged, 0);
    }

    /// A step whose key holds another kind of value names its index; a
    /// policy's counter of another algorithm starts afresh instead.
    #[test]
    fn wrong_type_names_the_step() {
        let store = Store::new(4);
        let now = Nanos(1000 * SEC);
        let gcra = LimitSpec::new(
            Algorithm::Gcra,
            NonZeroU64::new(5).unwrap(),
            NonZeroU64::new(60 * SEC).unwrap(),
            None,
            None,
        )
        .unwrap();
        let mut first = [Step::new(b"k", Limit::Rate(gcra), 1, Act::Allow)];
        run(
            Keyspace::Store(&store),
            &mut first,
            now,
            usize::MAX,
            Rules::default(),
        )
        .unwrap();
        let fixed = spec(5, None);
        let mut steps = [
            Step::new(b"x", Limit::Rate(fixed), 1, Act::Allow),
            Step::new(b"k", Limit::Rate(fixed), 1, Act::Allow),
        ];
        let out = run(
            Keyspace::Store(&store),
            &mut steps,
            now,
            usize::MAX,
            Rules::default(),
        );
        assert!(matches!(out, Err(PlanError::Step { at: 1, .. })), "{out:?}");
        assert!(!store.exists(b"x", now), "nothing charged");
        steps[1].fresh = true;
        let out = run(
            Keyspace::Store(&store),
            &mut steps,
            now,
            usize::MAX,
            Rules::default(),
        );
        assert_eq!(out.map(|o| o.admitted), Ok(true));
        assert_eq!(remaining(&store, b"k", &fixed, now), 3);
    }
}
