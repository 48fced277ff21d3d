//! Lists, sorted sets and hashes through the `redis` crate on a real server
//! on port 0: the type rules (WRONGTYPE, emptied collections deleted,
//! TYPE, SCAN TYPE), expiry on the manual clock, transactions, a snapshot
//! round trip, and the sorted set against a model (proptest). Every reply
//! format is compared byte for byte with redis-server in
//! `tests/compat/diff_cases/collections.txt`.

use std::collections::BTreeMap;

use crate::common::*;
use proptest::prelude::*;
use turnstile::store::collections::{ScoreBound, ZSet};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn type_rules_and_emptied_collections() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let n: i64 = q(&mut c, &["RPUSH", "l", "a", "b"]).await;
    assert_eq!(n, 2);
    let n: i64 = q(&mut c, &["ZADD", "z", "1", "m"]).await;
    assert_eq!(n, 1);
    let n: i64 = q(&mut c, &["HSET", "h", "f", "v"]).await;
    assert_eq!(n, 1);
    let _: () = q(&mut c, &["SET", "s", "x"]).await;
    let _: Vec<i64> = q(&mut c, &["RL.ALLOW", "r", "5", "60"]).await;
    for (key, t) in [("l", "list"), ("z", "zset"), ("h", "hash"), ("s", "string")] {
        let got: String = q(&mut c, &["TYPE", key]).await;
        assert_eq!(got, t);
    }
    for (cmd, key) in [
        (&["LPUSH", "s", "a"][..], "s"),
        (&["ZADD", "l", "1", "a"], "l"),
        (&["HGET", "z", "f"], "z"),
        (&["LLEN", "h"], "h"),
        (&["GET", "l"], "l"),
        (&["ZCARD", "r"], "r"),
        (&["RL.ALLOW", "z", "5", "60"], "z"),
    ] {
        assert_eq!(q_err(&mut c, cmd).await, WRONGTYPE, "{cmd:?} on {key}");
    }
    let (cursor, keys): (String, Vec<String>) =
        q(&mut c, &["SCAN", "0", "TYPE", "zset", "COUNT", "1000"]).await;
    assert_eq!((cursor.as_str(), keys), ("0", vec!["z".to_string()]));
    // A collection its last member leaves is gone, as in Redis.
    let _: Vec<String> = q(&mut c, &["LPOP", "l", "2"]).await;
    let _: i64 = q(&mut c, &["ZREM", "z", "m"]).await;
    let _: i64 = q(&mut c, &["HDEL", "h", "f"]).await;
    let left: i64 = q(&mut c, &["EXISTS", "l", "z", "h"]).await;
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collections_expire_and_run_in_transactions() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let _: i64 = q(&mut c, &["ZADD", "log", "1", "a", "2", "b"]).await;
    let _: i64 = q(&mut c, &["PEXPIRE", "log", "1500"]).await;
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("ZREMRANGEBYSCORE")
        .arg("log")
        .arg("-inf")
        .arg(1)
        .cmd("ZADD")
        .arg("log")
        .arg(3)
        .arg("c")
        .cmd("ZCARD")
        .arg("log")
        .cmd("LPUSH")
        .arg("q")
        .arg("x");
    let (removed, added, card, len): (i64, i64, i64, i64) =
        pipe.query_async(&mut c).await.expect("EXEC");
    assert_eq!((removed, added, card, len), (1, 1, 2, 1));
    let ttl: i64 = q(&mut c, &["PTTL", "log"]).await;
    assert_eq!(ttl, 1500, "writes keep the TTL");
    srv.advance_ms(1500);
    let card: i64 = q(&mut c, &["ZCARD", "log"]).await;
    assert_eq!(card, 0, "expired with its TTL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collections_survive_a_snapshot_restart() {
    let dir = std::env::temp_dir().join(format!("turnstile-types-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("snap");
    let _ = std::fs::remove_file(&path);
    let p = path.clone();
    let a = Server::start_with(move |cfg| cfg.snapshot = Some(p)).await;
    let mut c = a.client().await;
    let _: i64 = q(&mut c, &["RPUSH", "l", "a", "b", ""]).await;
    let _: i64 = q(&mut c, &["ZADD", "z", "0.1", "m", "-5", "n", "inf", "o"]).await;
    let _: i64 = q(&mut c, &["HSET", "h", "f", "1", "g", "2"]).await;
    let _: i64 = q(&mut c, &["PEXPIRE", "h", "100000"]).await;
    let before: (Vec<String>, Vec<String>, Vec<String>) = (
        q(&mut c, &["LRANGE", "l", "0", "-1"]).await,
        q(&mut c, &["ZRANGE", "z", "0", "-1", "WITHSCORES"]).await,
        q(&mut c, &["HGETALL", "h"]).await,
    );
    a.shutdown().await;
    let p = path.clone();
    let b = Server::start_with(move |cfg| cfg.snapshot = Some(p)).await;
    let mut c = b.client().await;
    let after: (Vec<String>, Vec<String>, Vec<String>) = (
        q(&mut c, &["LRANGE", "l", "0", "-1"]).await,
        q(&mut c, &["ZRANGE", "z", "0", "-1", "WITHSCORES"]).await,
        q(&mut c, &["HGETALL", "h"]).await,
    );
    assert_eq!(before, after);
    assert_eq!(after.1, ["n", "-5", "m", "0.10000000000000001", "o", "inf"]);
    let ttl: i64 = q(&mut c, &["PTTL", "h"]).await;
    assert_eq!(ttl, 100000);
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The model: members by name, ordered for ranges by (score, member).
fn model_order(m: &BTreeMap<Vec<u8>, i32>) -> Vec<(Vec<u8>, i32)> {
    let mut v: Vec<(Vec<u8>, i32)> = m.iter().map(|(k, s)| (k.clone(), *s)).collect();
    v.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    v
}

proptest! {
    /// Random adds and removes keep the sorted set equal to the model in
    /// order, scores, counts and score ranges.
    #[test]
    fn sorted_set_matches_a_model(ops in prop::collection::vec((0u8..3, 0u8..12, -5i32..5), 1..200),
                                  lo in -6i32..6, span in 0i32..8, lo_ex: bool, hi_ex: bool) {
        let mut z = ZSet::default();
        let mut model: BTreeMap<Vec<u8>, i32> = BTreeMap::new();
        for (op, m, s) in ops {
            let member = vec![b'a' + m];
            match op {
                0 | 1 => {
                    let added = z.insert(&member, f64::from(s));
                    prop_assert_eq!(added, model.insert(member, s).is_none());
                }
                _ => prop_assert_eq!(z.remove(&member), model.remove(&member).is_some()),
            }
        }
        let got: Vec<(Vec<u8>, i32)> = z.iter().map(|(m, s)| (m.to_vec(), s as i32)).collect();
        prop_assert_eq!(&got, &model_order(&model));
        prop_assert_eq!(z.len(), model.len());
        let hi = lo + span;
        let min = ScoreBound { value: f64::from(lo), exclusive: lo_ex };
        let max = ScoreBound { value: f64::from(hi), exclusive: hi_ex };
        let in_range: Vec<Vec<u8>> = z.range_by_score(min, max).map(|(m, _)| m.to_vec()).collect();
        let want: Vec<Vec<u8>> = model_order(&model)
            .into_iter()
            .filter(|(_, s)| (if lo_ex { *s > lo } else { *s >= lo }) && (if hi_ex { *s < hi } else { *s <= hi }))
            .map(|(m, _)| m)
            .collect();
        prop_assert_eq!(in_range, want);
    }
}
