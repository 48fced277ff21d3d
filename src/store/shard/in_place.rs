//! `RL.ALLOW` decided where its key's record lies. The general path
//! decodes a compact record into an [`Entry`](super::Entry), runs the
//! command over it, and packs it back, deriving its TTL and checking it
//! fits each time; for the command this server exists for, on a key it
//! already holds, that round trip was most of the store's cost. Here the
//! state is read from the record's bytes, decided, and its new bytes
//! written over the old: nothing else about the key can change. Anything
//! this path does not cover returns `None` before it has written, and the
//! caller takes the general path, which decides the same request from the
//! same record.

use super::{split, Class, Owner, Shard};
use crate::clock::Nanos;
use crate::limiter::with_algorithm;
use crate::limiter::{Decision, LimitSpec, Params};
use crate::limiter::{StateBytes, Storage};
use crate::store::entry::expiry_ms_at;
use crate::store::limit;
use crate::store::record::{self, Kind};

impl Shard {
    /// [`limit::allow`] on `key`, decided in place when a compact record
    /// of `spec`'s algorithm holds it. `None` (nothing written) when the
    /// general path must run: the key absent, stored whole or as another
    /// kind (a log's state is never constant-size); a write that must be
    /// logged (the append-only file or replicas) or that a `WATCH` must
    /// see; whatever [`limit::allow_in_place`] leaves to it; a new state
    /// the record cannot hold, or new parameters the shard has no id for.
    pub fn allow_here(
        &mut self,
        store: &impl Owner,
        hash: u64,
        key: &[u8],
        spec: &LimitSpec,
        now: Nanos,
        cost: u64,
    ) -> Option<Decision> {
        if store.effects().emitting() || self.watches.get(hash).is_some() {
            return None;
        }
        let Shard {
            index,
            records,
            next_expiry_ms,
            ..
        } = self;
        let pos = index.find(hash, |h| records.key(h) == key)?;
        let (Class::Compact(n), i) = split(index.get(pos)) else {
            return None;
        };
        let slab = &mut records.slabs[n as usize];
        let (l, rec) = (slab.layout, slab.slab.get_mut(i));
        // A log's or a lease key's record holds a slot, not a state (and a
        // lease key's has no parameters to read).
        if l.kind.owned() {
            return None;
        }
        let pid = record::pid(rec);
        let held = records.params.get(pid);
        let ask = (l.kind, l.state(rec), held, spec, now, cost);
        let (d, charged) = with_algorithm!(spec.algo, decide(ask))?;
        if let Some((bytes, at)) = charged {
            let new = records.params.replace(pid, &spec.params)?;
            if new != pid {
                record::set_pid(rec, new);
            }
            l.set_state(rec, &bytes);
            *next_expiry_ms = (*next_expiry_ms).min(expiry_ms_at(at));
        }
        Some(d)
    }
}

/// A record's kind and state bytes, the parameters it was last charged
/// with, and the request.
type Ask<'a> = (Kind, &'a [u8], &'a Params, &'a LimitSpec, Nanos, u64);

/// The decision on a record of `S`'s kind, and on admission the new
/// state's bytes and expiry; `None` for another kind, or whatever the
/// general path must decide.
#[inline]
fn decide<S: Storage>(
    (kind, st, held, spec, now, cost): Ask<'_>,
) -> Option<(Decision, Option<(StateBytes, Nanos)>)> {
    if kind != Kind::of(S::ALGORITHM) {
        return None;
    }
    let state = S::unpack(st, held);
    let (d, charged) = limit::allow_in_place(&state, held, spec, now, cost)?;
    let charged = match charged {
        Some((s, at)) => Some((s.pack(&spec.params)?, at)),
        None => None,
    };
    Some((d, charged))
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use proptest::prelude::*;

    use crate::clock::Nanos;
    use crate::limiter::{Algorithm, LimitSpec};
    use crate::store::keys::Keys;
    use crate::store::{limit, Entry, Store};

    /// One step: a request on one of a few keys, or a hand-set TTL.
    #[derive(Debug, Clone)]
    enum Op {
        Allow {
            key: usize,
            algo: usize,
            limit: u64,
            period_ms: u64,
            cost: u64,
            block: bool,
        },
        Expire {
            key: usize,
            in_ms: u64,
        },
        /// A lease (`RL.ACQUIRE`): a key of another kind whose record
        /// holds a slot.
        Acquire {
            key: usize,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            12 => (0..4usize, 0..5usize, prop_oneof![Just(1u64), Just(3), Just(5_000), Just(65_535)],
                   prop_oneof![Just(1u64), Just(10), Just(1_000), Just(60_000)],
                   prop_oneof![Just(1u64), Just(2), Just(4_096), Just(70_000)],
                   any::<bool>())
                .prop_map(|(key, algo, limit, period_ms, cost, block)| Op::Allow {
                    key, algo, limit, period_ms, cost, block: block && cost == 1,
                }),
            1 => (0..4usize, 1..5_000u64).prop_map(|(key, in_ms)| Op::Expire { key, in_ms }),
            1 => (0..4usize).prop_map(|key| Op::Acquire { key }),
        ]
    }

    /// Keys of lengths either side of the compact classes' bounds.
    const KEYS: [&[u8]; 4] = [b"k", b"rl:user:1234567:x", &[b'q'; 200], &[b'z'; 1100]];

    fn spec(algo: usize, limit: u64, period_ms: u64, block: bool) -> Option<LimitSpec> {
        let algo = Algorithm::ALL[algo];
        let mut s = LimitSpec::new(
            algo,
            NonZeroU64::new(limit)?,
            NonZeroU64::new(period_ms * 1_000_000)?,
            None,
            None,
        )
        .ok()?;
        s.block = block.then(|| NonZeroU64::new(2_000_000_000).unwrap());
        Some(s)
    }

    fn dump(store: &Store, now: Nanos) -> Vec<Option<Entry>> {
        KEYS.iter()
            .map(|k| store.get(k, now, Entry::clone))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever the requests, keys and times, deciding in place answers
        /// and leaves exactly what the general path does: every decision,
        /// every key's value and TTL, the expired count and the keys with
        /// a TTL.
        #[test]
        fn in_place_decides_as_the_general_path(
            ops in prop::collection::vec((op(), 0..3_000u64), 1..120),
        ) {
            let (fast, general) = (Store::new(4), Store::new(4));
            let mut now = Nanos(1_700_000_000 * Nanos::PER_SEC);
            for (op, dt_ms) in ops {
                now = Nanos(now.0 + dt_ms * 1_000_000);
                match op {
                    Op::Allow { key, algo, limit, period_ms, cost, block } => {
                        // As the commands check: a valid limit, a cost within it.
                        let Some(s) = spec(algo, limit, period_ms, block) else { continue };
                        if cost > limit {
                            continue;
                        }
                        let k = KEYS[key];
                        let a = fast.allow(k, &s, now, cost, usize::MAX);
                        let b = general.update(k, now, |slot| limit::allow(slot, &s, now, cost, usize::MAX));
                        prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
                    }
                    Op::Acquire { key } => {
                        let got: Vec<_> = [&fast, &general]
                            .map(|st| {
                                st.update(KEYS[key], now, |slot| {
                                    format!("{:?}", limit::acquire(slot, 3, 5_000_000_000, now, 1, [7; 16], usize::MAX))
                                })
                            })
                            .into();
                        prop_assert_eq!(&got[0], &got[1]);
                    }
                    Op::Expire { key, in_ms } => {
                        let at = now.as_millis() + in_ms;
                        for st in [&fast, &general] {
                            st.update(KEYS[key], now, |e| {
                                if let Some(e) = e {
                                    e.set_expiry_ms(Some(at));
                                }
                            });
                        }
                    }
                }
                prop_assert_eq!(dump(&fast, now), dump(&general, now));
            }
            prop_assert_eq!(fast.expired_count(), general.expired_count());
            prop_assert_eq!(fast.counts().volatile, general.counts().volatile);
        }
    }

    /// The path is taken: a key charged again is decided without being
    /// decoded into an entry, and a watched one is not.
    #[test]
    fn a_held_key_is_decided_without_decoding() {
        let store = Store::new(1);
        let now = Nanos(1_700_000_000 * Nanos::PER_SEC);
        let s = spec(0, 10, 1_000, false).unwrap();
        store.allow(b"k", &s, now, 1, usize::MAX).unwrap();
        let _mark = store.watch(b"w", now);
        let before = super::super::decodes();
        for i in 1..5 {
            let d = store
                .allow(b"k", &s, Nanos(now.0 + i), 1, usize::MAX)
                .unwrap();
            assert_eq!(d.remaining, 10 - 1 - i);
        }
        assert_eq!(super::super::decodes(), before, "decided in place");
        let _mark = store.watch(b"k", now);
        let before = super::super::decodes();
        store.allow(b"k", &s, now, 1, usize::MAX).unwrap();
        assert_eq!(
            super::super::decodes(),
            before + 1,
            "a watched key: the general path"
        );
    }
}
