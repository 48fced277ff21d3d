//! Concurrency limits on a real server on port 0, through the `redis`
//! crate (RESP2 and RESP3), on a driven clock: `RL.ACQUIRE` /
//! `RL.RELEASE` / `RL.RENEW` / `RL.LEASES`, lease keys under `RL.PEEK`,
//! `RL.STATE`, `RL.RESET`, `TYPE` and the other algorithms; 50 clients
//! looping acquire / hold / release never exceed the limit; holders that
//! never release free their units at the TTL; `RL.ALLOWMANY` with a rate
//! limit and a lease is all-or-nothing; leases survive a restart, lapsed
//! ones do not.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::common::*;
use redis::Value;
use turnstile::cmd::limit::lease::{hex, id_of};
use turnstile::Nanos;

/// The lease id at the end of a reply (nil when denied).
fn lease(v: &Value) -> Option<String> {
    match v {
        Value::Array(items) => match items.last() {
            Some(Value::Nil) | None => None,
            Some(other) => Some(text(other)),
        },
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_release_renew_and_list() {
    let srv = Server::start().await;
    for resp3 in [false, true] {
        let mut c = if resp3 {
            srv.client3().await
        } else {
            srv.client().await
        };
        let key = if resp3 { "l3" } else { "l2" };
        let a: Value = q(&mut c, &["RL.ACQUIRE", key, "3", "10s"]).await;
        assert_eq!(ints(&a), vec![1, 3, 2, -1, 10_000]);
        let first = lease(&a).unwrap();
        assert_eq!(first.len(), 32, "128 random bits in hex: {first}");
        let b: Value = q(&mut c, &["RL.ACQUIRE", key, "3", "20s", "COST", "2"]).await;
        assert_eq!(ints(&b), vec![1, 3, 0, -1, 20_000]);
        let second = lease(&b).unwrap();
        assert_ne!(first, second);
        // Full: waits for the first (1 unit) to lapse.
        let d: Value = q(&mut c, &["RL.ACQUIRE", key, "3", "5s"]).await;
        assert_eq!(ints(&d), vec![0, 3, 0, 10_000, 20_000]);
        assert_eq!(lease(&d), None);
        let listed: Value = q(&mut c, &["RL.LEASES", key]).await;
        let Value::Array(items) = &listed else {
            panic!("{listed:?}")
        };
        let rows: Vec<Vec<(String, Value)>> = items.iter().map(pairs).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(text(&rows[0][0].1), first);
        assert_eq!(rows[0][1].1, Value::Int(1));
        assert_eq!(rows[0][2].1, Value::Int(10_000));
        assert_eq!(text(&rows[1][0].1), second);
        assert_eq!(rows[1][1].1, Value::Int(2));
        // Renew the second to 1 s, release the first: two units free.
        assert_eq!(q::<i64>(&mut c, &["RL.RENEW", key, &second, "1s"]).await, 1);
        assert_eq!(q::<i64>(&mut c, &["RL.RELEASE", key, &first]).await, 1);
        assert_eq!(
            q::<i64>(&mut c, &["RL.RELEASE", key, &first]).await,
            0,
            "twice"
        );
        assert_eq!(q::<i64>(&mut c, &["RL.RENEW", key, &first, "1s"]).await, 0);
        let state = pairs(&q::<Value>(&mut c, &["RL.STATE", key]).await);
        let get = |k: &str| state.iter().find(|(n, _)| n == k).unwrap().1.clone();
        assert_eq!(text(&get("algorithm")), "lease");
        assert_eq!(get("held"), Value::Int(2));
        assert_eq!(
            get("ttl_ms"),
            Value::Int(1_000),
            "the key lives as its last lease"
        );
        assert_eq!(q::<String>(&mut c, &["TYPE", key]).await, "rl-lease");
        let peek: Value = q(&mut c, &["RL.PEEK", key, "3", "10s", "ALGO", "lease"]).await;
        assert_eq!(ints(&peek), vec![1, 3, 0, -1, 10_000]);
        // Another algorithm, or a string command, on a lease key.
        for cmd in [
            &["RL.ALLOW", key, "3", "10s"][..],
            &["RL.PEEK", key, "3", "10s"],
            &["RL.REFUND", key, "1"],
            &["GET", key],
        ] {
            assert!(q_err(&mut c, cmd).await.starts_with("WRONGTYPE"), "{cmd:?}");
        }
        let _: Value = q(&mut c, &["RL.ALLOW", "w", "3", "10s"]).await;
        assert!(q_err(&mut c, &["RL.ACQUIRE", "w", "3", "10s"])
            .await
            .starts_with("WRONGTYPE"));
        // Bad arguments change nothing.
        for (cmd, err) in [
            (
                &["RL.ACQUIRE", key, "0", "10s"][..],
                "limit must be a positive integer",
            ),
            (&["RL.ACQUIRE", key, "3", "0"], "ttl must be positive"),
            (
                &["RL.ACQUIRE", key, "3", "1s", "COST", "4"],
                "cost exceeds limit",
            ),
            (
                &["RL.ACQUIRE", key, "3", "1s", "ID", ""],
                "ID must not be empty",
            ),
            (
                &["RL.ACQUIRE", key, "3", "1s", "BOGUS", "1"],
                "syntax error",
            ),
        ] {
            let e = q_err(&mut c, cmd).await;
            assert!(e.contains(err), "{cmd:?}: {e}");
        }
        srv.advance_ms(1_000);
        assert_eq!(
            q::<i64>(&mut c, &["EXISTS", key]).await,
            0,
            "gone with its last lease"
        );
        assert_eq!(
            q::<Value>(&mut c, &["RL.LEASES", key]).await,
            Value::Array(vec![])
        );
    }
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_id_makes_a_retried_acquire_idempotent() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    for _ in 0..3 {
        let a: Value = q(&mut c, &["RL.ACQUIRE", "k", "2", "10s", "ID", "req-42"]).await;
        assert_eq!(ints(&a)[..3], [1, 2, 1]);
        assert_eq!(lease(&a).as_deref(), Some("req-42"));
    }
    assert_eq!(q::<i64>(&mut c, &["RL.RELEASE", "k", "req-42"]).await, 1);
    // A server-made id, given back as ID, is the same lease.
    let a: Value = q(&mut c, &["RL.ACQUIRE", "k", "2", "10s"]).await;
    let id = lease(&a).unwrap();
    let again: Value = q(&mut c, &["RL.ACQUIRE", "k", "2", "10s", "ID", &id]).await;
    assert_eq!(ints(&again)[..3], [1, 2, 1]);
    let info: String = q(&mut c, &["INFO", "stats"]).await;
    assert!(info.contains("leases_retried:3\r\n"), "{info}");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_never_hold_more_than_the_limit() {
    let srv = Server::start().await;
    let held = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let mut c = srv.client().await;
        let (held, peak) = (held.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            let mut got = 0;
            for _ in 0..40 {
                let a: Value = q(&mut c, &["RL.ACQUIRE", "pool", "5", "60s"]).await;
                let Some(id) = lease(&a) else {
                    tokio::task::yield_now().await;
                    continue;
                };
                got += 1;
                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                assert!(now <= 5, "{now} held at once");
                let listed: Value = q(&mut c, &["RL.LEASES", "pool"]).await;
                let Value::Array(items) = listed else {
                    panic!()
                };
                assert!(items.len() <= 5, "{} leases listed", items.len());
                held.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(q::<i64>(&mut c, &["RL.RELEASE", "pool", &id]).await, 1);
            }
            got
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert!(total > 50, "leases were taken and given back ({total})");
    assert!(peak.load(Ordering::SeqCst) >= 2, "clients overlapped");
    let mut c = srv.client().await;
    assert_eq!(
        q::<i64>(&mut c, &["EXISTS", "pool"]).await,
        0,
        "all released"
    );
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_that_never_release_free_their_units_at_the_ttl() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    for i in 0..5 {
        let a: Value = q(&mut c, &["RL.ACQUIRE", "crashy", "5", "30s"]).await;
        assert_eq!(ints(&a)[2], 4 - i);
    }
    let d: Value = q(&mut c, &["RL.ACQUIRE", "crashy", "5", "30s"]).await;
    assert_eq!(ints(&d)[..4], [0, 5, 0, 30_000]);
    srv.advance_ms(29_999);
    let d: Value = q(&mut c, &["RL.ACQUIRE", "crashy", "5", "30s"]).await;
    assert_eq!(ints(&d)[..4], [0, 5, 0, 1]);
    srv.advance_ms(1);
    let a: Value = q(&mut c, &["RL.ACQUIRE", "crashy", "5", "30s"]).await;
    assert_eq!(ints(&a)[..3], [1, 5, 4], "the five lapsed");
    let info: String = q(&mut c, &["INFO", "stats"]).await;
    assert!(info.contains("leases_expired:5\r\n"), "{info}");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowmany_with_a_rate_limit_and_a_lease_is_all_or_nothing() {
    let srv = Server::start().await;
    let mut c = srv.client3().await;
    let many = |id: Option<&'static str>| {
        let mut args = vec!["RL.ALLOWMANY"];
        if let Some(id) = id {
            args.extend(["ID", id]);
        }
        args.extend(["LIMIT", "rate", "3", "60", "LEASE", "conc", "2", "10s"]);
        args
    };
    // Two admitted: both clauses charged, a lease id each.
    let a: Value = q(&mut c, &many(None)).await;
    assert_eq!(
        ints(&a),
        vec![1, 2, 1, -1, 10_000, 1],
        "the lease binds (least left)"
    );
    let first = lease(&a).unwrap();
    let b: Value = q(&mut c, &many(Some("job-2"))).await;
    assert_eq!(lease(&b).as_deref(), Some("job-2"));
    // The lease is full: denied, and the rate limit is not charged.
    let d: Value = q(&mut c, &many(None)).await;
    assert_eq!(ints(&d)[..2], [0, 2]);
    assert_eq!(ints(&d)[5], 1, "the LEASE clause denied");
    assert_eq!(lease(&d), None);
    let peek: Value = q(&mut c, &["RL.PEEK", "rate", "3", "60"]).await;
    assert_eq!(
        ints(&peek)[2],
        0,
        "2 of 3 used: one left after this peek's unit"
    );
    // Free a lease; now the rate limit is full after one more.
    assert_eq!(q::<i64>(&mut c, &["RL.RELEASE", "conc", &first]).await, 1);
    let e: Value = q(&mut c, &many(None)).await;
    assert_eq!(ints(&e)[0], 1);
    assert_eq!(q::<i64>(&mut c, &["RL.RELEASE", "conc", "job-2"]).await, 1);
    let f: Value = q(&mut c, &many(None)).await;
    assert_eq!(ints(&f)[..2], [0, 3], "the rate limit denies");
    assert_eq!(ints(&f)[5], 0);
    let state = pairs(&q::<Value>(&mut c, &["RL.STATE", "conc"]).await);
    assert_eq!(
        state.iter().find(|(k, _)| k == "held").unwrap().1,
        Value::Int(1),
        "the denied request took no lease"
    );
    // Cluster clients find LEASE keys as they find LIMIT keys.
    let keys: Vec<String> = q(
        &mut c,
        &[
            "COMMAND",
            "GETKEYS",
            "RL.ALLOWMANY",
            "ID",
            "x",
            "LIMIT",
            "a",
            "1",
            "1",
            "LEASE",
            "b",
            "1",
            "1s",
        ],
    )
    .await;
    assert_eq!(keys, ["a", "b"]);
    // Without LEASE clauses the reply keeps its six fields.
    let g: Value = q(&mut c, &["RL.ALLOWMANY", "LIMIT", "other", "3", "60"]).await;
    assert_eq!(ints(&g).len(), 6);
    let Value::Array(items) = &g else { panic!() };
    assert_eq!(items.len(), 6);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_survive_a_restart_and_lapsed_ones_do_not() {
    let dir = std::env::temp_dir().join(format!("turnstile-leases-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dump.tsnap");
    let t0 = START_SECS * Nanos::PER_SEC;
    let p = path.clone();
    let a = Server::start_at(Nanos(t0), move |c| c.snapshot = Some(p)).await;
    let mut c = a.client().await;
    let _: Value = q(&mut c, &["RL.ACQUIRE", "k", "3", "10s", "ID", "short"]).await;
    let _: Value = q(&mut c, &["RL.ACQUIRE", "k", "3", "60s", "ID", "long"]).await;
    drop(c);
    a.shutdown().await;
    // Down for 20 s: the short lease lapsed meanwhile.
    let p = path.clone();
    let b = Server::start_at(Nanos(t0 + 20 * Nanos::PER_SEC), move |c| {
        c.snapshot = Some(p)
    })
    .await;
    let mut c = b.client().await;
    let Value::Array(items) = q::<Value>(&mut c, &["RL.LEASES", "k"]).await else {
        panic!()
    };
    assert_eq!(items.len(), 1);
    assert_eq!(q::<i64>(&mut c, &["RL.RELEASE", "k", "short"]).await, 0);
    assert_eq!(q::<i64>(&mut c, &["RL.RELEASE", "k", "long"]).await, 1);
    drop(c);
    b.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A key with a very large limit holds thousands of leases (one unit
/// each): `RL.LEASES` answers a page at a time, never the whole set: the
/// plain form the first 1,000 soonest to lapse (or `COUNT`), the
/// `CURSOR` form pages in id order that together list every lease once;
/// acquires and releases keep working on the large key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_on_one_key_are_listed_a_page_at_a_time() {
    const N: usize = 5_000;
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let mut pipe = redis::pipe();
    for i in 0..N {
        // Later leases lapse later: the soonest first are the first ones.
        pipe.cmd("RL.ACQUIRE")
            .arg("big")
            .arg(1_000_000_000u64)
            .arg(format!("{}ms", 600_000 + i))
            .arg("ID")
            .arg(format!("holder-{i}"));
    }
    let replies: Vec<Value> = pipe.query_async(&mut c).await.unwrap();
    let ids: Vec<String> = replies.iter().map(|r| lease(r).unwrap()).collect();
    let state = pairs(&q::<Value>(&mut c, &["RL.STATE", "big"]).await);
    assert!(state.contains(&("leases".into(), Value::Int(N as i64))));
    assert!(state.contains(&("held".into(), Value::Int(N as i64))));

    let listed_ids = |v: &Value| -> Vec<String> {
        let Value::Array(items) = v else {
            panic!("{v:?}")
        };
        items.iter().map(|m| text(&pairs(m)[0].1)).collect()
    };
    // Ids are answered as the client gave them; RL.LEASES shows their
    // digests in hex.
    let hex_of =
        |id: &str| -> String { String::from_utf8(hex(&id_of(id.as_bytes())).to_vec()).unwrap() };
    let plain: Value = q(&mut c, &["RL.LEASES", "big"]).await;
    let first: Vec<String> = ids[..1000].iter().map(|i| hex_of(i)).collect();
    assert_eq!(listed_ids(&plain), first, "the 1,000 soonest to lapse");
    let three: Value = q(&mut c, &["RL.LEASES", "big", "COUNT", "3"]).await;
    assert_eq!(listed_ids(&three), first[..3].to_vec());

    let mut seen = Vec::new();
    let mut cursor = "0".to_string();
    let mut pages = 0;
    loop {
        let r: Value = q(
            &mut c,
            &["RL.LEASES", "big", "CURSOR", &cursor, "COUNT", "700"],
        )
        .await;
        let Value::Array(parts) = &r else {
            panic!("{r:?}")
        };
        assert_eq!(parts.len(), 2, "[cursor, page]");
        let page = listed_ids(&parts[1]);
        assert!(page.len() <= 700);
        assert!(page.windows(2).all(|w| w[0] < w[1]), "id order");
        seen.extend(page);
        pages += 1;
        cursor = text(&parts[0]);
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(pages, N.div_ceil(700));
    let mut want: Vec<String> = ids.iter().map(|i| hex_of(i)).collect();
    want.sort();
    assert_eq!(seen, want, "every lease exactly once");

    // Releases and acquires on the large key.
    for id in &ids[..10] {
        assert_eq!(q::<i64>(&mut c, &["RL.RELEASE", "big", id]).await, 1);
    }
    let a: Value = q(&mut c, &["RL.ACQUIRE", "big", "1000000000", "1h"]).await;
    assert_eq!(
        ints(&a)[..3],
        [1, 1_000_000_000, 1_000_000_000 - N as i64 + 9]
    );

    assert!(q_err(&mut c, &["RL.LEASES", "big", "CURSOR", "zz"])
        .await
        .contains("invalid cursor"));
    assert!(q_err(&mut c, &["RL.LEASES", "big", "COUNT", "0"])
        .await
        .contains("COUNT must be a positive integer"));
    assert!(q_err(&mut c, &["RL.LEASES", "big", "COUNT"])
        .await
        .contains("syntax error"));
    let none: Value = q(&mut c, &["RL.LEASES", "nothing", "CURSOR", "0"]).await;
    assert_eq!(
        none,
        Value::Array(vec![Value::BulkString(b"0".to_vec()), Value::Array(vec![])])
    );
}
