//! Property tests of the pure lease logic (`limiter::lease`) against a
//! model, over random acquires, releases, renewals and clock moves: units
//! held never exceed the limit at any instant; a lease past its TTL holds
//! nothing; releasing or renewing an unknown or lapsed lease changes
//! nothing; a retried acquire with a live id holds nothing more; peek
//! answers as acquire would; paging by id lists every live lease once.
//! Twice: with a dozen ids (the sorted vector) and with hundreds (past
//! `SMALL`, the trees, and back as they empty).

use std::collections::HashMap;

use proptest::prelude::*;
use turnstile::limiter::lease::{LeaseId, Leases, ID_LEN};

const MS: u64 = 1_000_000;
const T0: u64 = 1_700_000_000_000 * MS;

#[derive(Debug, Clone)]
enum Op {
    /// Wait, then acquire `cost` for `ttl` ms as id `id`.
    Acquire {
        wait: u64,
        id: u8,
        cost: u64,
        ttl: u64,
    },
    Release {
        wait: u64,
        id: u8,
    },
    Renew {
        wait: u64,
        id: u8,
        ttl: u64,
    },
}

/// Up to `len` operations on ids below `ids`, `wait` ms apart at most.
fn ops(ids: u8, wait: u64, len: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (0..wait, 0..ids, 1u64..4, 1u64..1_000)
            .prop_map(|(wait, id, cost, ttl)| Op::Acquire { wait, id, cost, ttl }),
        2 => (0..wait, 0..ids).prop_map(|(wait, id)| Op::Release { wait, id }),
        1 => (0..wait, 0..ids, 1u64..1_000).prop_map(|(wait, id, ttl)| Op::Renew { wait, id, ttl }),
    ];
    prop::collection::vec(op, 1..len)
}

fn id(n: u8) -> LeaseId {
    [n; ID_LEN]
}

/// The model: id -> (expires, units), the lapsed ones removed lazily.
fn live(model: &HashMap<u8, (u64, u64)>, now: u64) -> HashMap<u8, (u64, u64)> {
    model
        .iter()
        .filter(|(_, (e, _))| *e > now)
        .map(|(k, v)| (*k, *v))
        .collect()
}

/// Runs `ops` against the model; after each, compares at `now` and at
/// every later instant a lease lapses (or, with `every` false, at the
/// soonest and the last of those, for runs of many leases).
fn check(limit: u64, ops: Vec<Op>, every: bool) -> Result<(), TestCaseError> {
    let mut l = Leases::default();
    let mut model: HashMap<u8, (u64, u64)> = HashMap::new();
    let mut now = T0;
    for op in ops {
        match op {
            Op::Acquire {
                wait,
                id: n,
                cost,
                ttl,
            } => {
                now += wait * MS;
                let cost = cost.min(limit);
                model = live(&model, now);
                let held: u64 = model.values().map(|(_, u)| u).sum();
                let peek = l.peek(limit, ttl * MS, now, cost);
                let (a, _) = l.acquire(limit, ttl * MS, now, cost, id(n)).unwrap();
                let was_live = model.contains_key(&n);
                if was_live {
                    prop_assert!(
                        a.existing && a.decision.allowed,
                        "a live id is admitted again"
                    );
                } else {
                    prop_assert!(!a.existing);
                    prop_assert_eq!(a.decision.allowed, held + cost <= limit);
                    prop_assert_eq!(peek, a.decision, "peek answers as acquire");
                    if a.decision.allowed {
                        model.insert(n, (now + ttl * MS, cost));
                    } else {
                        // When it says, enough has lapsed for the cost.
                        let wait = a.decision.retry_after.unwrap();
                        prop_assert!(wait > 0);
                        let then = live(&model, now + wait);
                        prop_assert!(then.values().map(|(_, u)| u).sum::<u64>() + cost <= limit);
                        let before = live(&model, now + wait - 1);
                        prop_assert!(before.values().map(|(_, u)| u).sum::<u64>() + cost > limit);
                    }
                }
            }
            Op::Release { wait, id: n } => {
                now += wait * MS;
                model = live(&model, now);
                let (r, _) = l.release(now, &id(n));
                prop_assert_eq!(r, model.remove(&n).is_some());
            }
            Op::Renew { wait, id: n, ttl } => {
                now += wait * MS;
                model = live(&model, now);
                let (r, _) = l.renew(now, &id(n), ttl * MS);
                prop_assert_eq!(r, model.contains_key(&n));
                if let Some(e) = model.get_mut(&n) {
                    e.0 = now + ttl * MS;
                }
            }
        }
        // The same leases, the same units, never over the limit: now
        // and at every later instant something lapses.
        let mut instants: Vec<u64> = model.values().map(|(e, _)| *e).collect();
        instants.sort_unstable();
        if !every && instants.len() > 2 {
            instants = vec![instants[0], instants[instants.len() - 1]];
        }
        instants.push(now);
        for t in instants.into_iter().filter(|&t| t >= now) {
            let m = live(&model, t);
            let held: u64 = m.values().map(|(_, u)| u).sum();
            prop_assert_eq!(l.held(t), held);
            prop_assert!(held <= limit);
            let mut got: Vec<_> = l
                .list(t)
                .iter()
                .map(|x| (x.id[0], x.expires(), x.units()))
                .collect();
            let mut want: Vec<_> = m.iter().map(|(k, (e, u))| (*k, *e, *u)).collect();
            got.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(&got, &want);
            // Pages of 5 in id order: each live lease once.
            let (mut paged, mut after) = (Vec::new(), None);
            loop {
                let (page, next) = l.page(t, after.as_ref(), 5);
                prop_assert!(page.len() <= 5);
                paged.extend(page.iter().map(|x| (x.id[0], x.expires(), x.units())));
                match next {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            prop_assert!(paged.windows(2).all(|w| w[0].0 < w[1].0), "id order");
            prop_assert_eq!(paged, want);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn leases_match_the_model(limit in 1u64..8, ops in ops(12, 300, 200)) {
        check(limit, ops, true)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn many_leases_match_the_model(limit in 40u64..400, ops in ops(250, 5, 800)) {
        check(limit, ops, false)?;
    }
}
