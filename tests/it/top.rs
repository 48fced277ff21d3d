//! `RL.TOP`: the heavy hitters among limited keys, through a real client.

use crate::common::{q, q_err, text, Server};
use redis::Value;

/// Sends `args` lists as pipelines of 500, ignoring the replies' values.
async fn pipelined(con: &mut redis::aio::MultiplexedConnection, calls: &[Vec<String>]) {
    for chunk in calls.chunks(500) {
        let mut p = redis::pipe();
        for c in chunk {
            p.cmd(&c[0]).arg(&c[1..]);
        }
        let _: Vec<Value> = p.query_async(con).await.unwrap();
    }
}

fn allow(key: &str) -> Vec<String> {
    ["RL.ALLOW", key, "1", "60"].map(String::from).to_vec()
}

/// Key and count pairs of a flat reply.
fn pairs(v: &[Value]) -> Vec<(String, i64)> {
    v.chunks(2)
        .map(|p| match p {
            [Value::BulkString(k), Value::Int(n)] => (String::from_utf8_lossy(k).into(), *n),
            other => panic!("not a key and a count: {other:?}"),
        })
        .collect()
}

/// The issue's "done when": 600 denials of A, 300 of B, 120 of C and one
/// each of 2,000 other keys, interleaved; `RL.TOP DENIED COUNT 3` answers A,
/// B, C in that order, as a flat array in RESP2 and RESP3 alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_denied_names_the_heaviest_keys_in_order() {
    // Every admission counted (`--top-sample 1`): the test counts them.
    let server = Server::start_with(|c| c.top_sample = 1).await;
    let mut c = server.client().await;
    let others: Vec<String> = (0..2000).map(|i| format!("user:{i}")).collect();
    // Each key's one admission (limit 1 a minute); every call after it is
    // denied.
    let mut first: Vec<Vec<String>> = ["A", "B", "C"].iter().map(|k| allow(k)).collect();
    first.extend(others.iter().map(|k| allow(k)));
    pipelined(&mut c, &first).await;
    let mut denials: Vec<Vec<String>> = Vec::new();
    for (key, n) in [("A", 600), ("B", 300), ("C", 120)] {
        denials.extend((0..n).map(|_| allow(key)));
    }
    denials.extend(others.iter().map(|k| allow(k)));
    // Interleaved in a fixed pseudo-random order.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for i in (1..denials.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        denials.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    pipelined(&mut c, &denials).await;

    let expected = vec![("A".to_string(), 600), ("B".into(), 300), ("C".into(), 120)];
    let mut other = server.client().await;
    let got: Vec<Value> = q(&mut other, &["RL.TOP", "DENIED", "COUNT", "3"]).await;
    let got = pairs(&got);
    let keys: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["A", "B", "C"], "{got:?}");
    // The default sketches (512 counters in W <= 8 sets) over 3,020
    // denials: a count is over by at most 3,020 * W / 512, never under.
    for ((_, n), (_, truth)) in got.iter().zip(&expected) {
        assert!(*n >= *truth && *n - *truth <= 3020 * 8 / 512, "{got:?}");
    }
    let mut c3 = server.client3().await;
    let resp3: Vec<Value> = q(&mut c3, &["RL.TOP", "DENIED", "COUNT", "3"]).await;
    assert_eq!(pairs(&resp3), got);
    // Since start, the same; the default kind is DENIED.
    let all: Vec<Value> = q(&mut c3, &["rl.top", "count", "3", "window", "all"]).await;
    assert_eq!(pairs(&all), got);
    // Admissions: 2,003 keys once each. WITHERRORS lists what the
    // sketches hold, each key with what its count may overstate.
    let held: Vec<Value> = q(
        &mut c,
        &["RL.TOP", "ALLOWED", "COUNT", "5000", "WITHERRORS"],
    )
    .await;
    assert_eq!(held.len() % 3, 0, "{held:?}");
    let allowed: Vec<(String, i64, i64)> = held
        .chunks(3)
        .map(|t| match t {
            [k, Value::Int(n), Value::Int(e)] => (text(k), *n, *e),
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(
        allowed.iter().all(|(_, n, e)| *n >= 1 && e < n),
        "{allowed:?}"
    );
    // The 512 counters are split into one set of sketches per CPU (at
    // most 8 sets), and a thread counts in its own set: a connection whose
    // task stays on one worker fills one set's share, one that moves
    // between workers more. Every counter holds a key: 2,003 keys
    // outnumber them.
    let sets = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .next_power_of_two()
        .min(8);
    assert!(
        (512 / sets..=512).contains(&allowed.len()),
        "{} keys ({sets} sets)",
        allowed.len()
    );
    // Without WITHERRORS, only keys counted past the error bound (2,003 *
    // W / 512): a key admitted once among 2,003 is not a heavy hitter,
    // whatever count its counter inherited.
    let bound = 2003 * sets as i64 / 512;
    let shown: Vec<Value> = q(&mut c, &["RL.TOP", "ALLOWED", "COUNT", "5000"]).await;
    let shown = pairs(&shown);
    assert!(shown.iter().all(|(_, n)| *n > bound), "{shown:?}");
    let past: Vec<&(String, i64, i64)> = allowed.iter().filter(|(_, n, _)| *n > bound).collect();
    assert_eq!(shown.len(), past.len(), "{shown:?}");
    let none: Vec<Value> = q(&mut c, &["RL.TOP", "SHADOW"]).await;
    assert!(none.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_forgets_and_bad_arguments_are_errors() {
    let server = Server::start().await;
    let mut c = server.client().await;
    for _ in 0..3 {
        let _: Vec<i64> = q(&mut c, &["CL.THROTTLE", "old", "0", "1", "60"]).await;
    }
    server.advance_ms(120_000);
    for _ in 0..2 {
        let _: Vec<i64> = q(&mut c, &["CL.THROTTLE", "new", "0", "1", "60"]).await;
    }
    let recent: Vec<Value> = q(&mut c, &["RL.TOP"]).await;
    assert_eq!(pairs(&recent), [("new".to_string(), 1)]);
    let ten_s: Vec<Value> = q(&mut c, &["RL.TOP", "WINDOW", "10s"]).await;
    assert_eq!(pairs(&ten_s), [("new".to_string(), 1)]);
    let all: Vec<Value> = q(&mut c, &["RL.TOP", "WINDOW", "ALL"]).await;
    assert_eq!(pairs(&all), [("old".to_string(), 2), ("new".into(), 1)]);
    assert!(q_err(&mut c, &["RL.TOP", "WINDOW", "2m"])
        .await
        .contains("WINDOW is at most --top-window"));
    assert!(q_err(&mut c, &["RL.TOP", "COUNT", "0"])
        .await
        .contains("COUNT must be positive"));
    assert!(q_err(&mut c, &["RL.TOP", "COUNT"])
        .await
        .contains("needs a value"));
    assert!(q_err(&mut c, &["RL.TOP", "BOGUS"])
        .await
        .contains("syntax error"));
}

const POLICIES: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: path
    value: /login
    shadow_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
"#;

/// Shadow-mode denials are their own kind (the request went through), and
/// POLICY keeps one policy's keys; RL.CHECK's counter keys are what shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_denials_and_policies_are_told_apart() {
    let dir = std::env::temp_dir().join(format!("turnstile-top-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("edge.yaml"), POLICIES).unwrap();
    let server = Server::start_with(|c| {
        c.policies = Some(dir.clone());
        c.top_sample = 1;
    })
    .await;
    let mut c = server.client().await;
    for _ in 0..4 {
        let _: Value = q(&mut c, &["RL.CHECK", "edge", "path", "/login"]).await;
    }
    for _ in 0..3 {
        let _: Value = q(&mut c, &["RL.CHECK", "edge", "remote_address", "10.0.0.1"]).await;
    }
    let shadow: Vec<Value> = q(&mut c, &["RL.TOP", "SHADOW"]).await;
    let shadow = pairs(&shadow);
    assert_eq!(shadow.len(), 1, "{shadow:?}");
    assert!(shadow[0].0.contains("/login"), "{shadow:?}");
    assert_eq!(shadow[0].1, 3);
    let denied: Vec<Value> = q(&mut c, &["RL.TOP", "DENIED"]).await;
    let denied = pairs(&denied);
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert!(denied[0].0.contains("10.0.0.1"), "{denied:?}");
    assert_eq!(denied[0].1, 2);
    let by_policy = |name: &'static str| {
        let mut c = c.clone();
        async move {
            let v: Vec<Value> = q(&mut c, &["RL.TOP", "ALLOWED", "POLICY", name]).await;
            pairs(&v)
        }
    };
    let login = by_policy("edge.path_/login").await;
    assert_eq!(login.len(), 1, "{login:?}");
    assert!(login[0].0.contains("/login"));
    let remote = by_policy("edge.remote_address").await;
    assert_eq!(remote.len(), 1, "{remote:?}");
    assert!(remote[0].0.contains("10.0.0.1"));
    assert!(by_policy("nope").await.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// By default one admission in 16 is counted, weighing 16: a hot key still
/// heads `ALLOWED`, its count near the truth, and denials are all counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampled_admissions_still_find_the_hot_key() {
    let server = Server::start().await;
    let mut c = server.client().await;
    let mut calls = Vec::new();
    for i in 0..4_000 {
        let key = if i % 2 == 0 {
            "hot".to_string()
        } else {
            format!("cold{i}")
        };
        calls.push(vec!["RL.ALLOW".into(), key, "1000000".into(), "60".into()]);
    }
    for _ in 0..30 {
        calls.push(vec![
            "RL.ALLOW".into(),
            "over".into(),
            "1".into(),
            "60".into(),
        ]);
    }
    pipelined(&mut c, &calls).await;
    let allowed: Vec<Value> = q(&mut c, &["RL.TOP", "ALLOWED", "COUNT", "1"]).await;
    let allowed = pairs(&allowed);
    assert_eq!(allowed.len(), 1, "{allowed:?}");
    assert_eq!(allowed[0].0, "hot");
    // 2,000 admissions, sampled at 1/16: mean 2,000, sd about 170.
    assert!((1_000..=3_000).contains(&allowed[0].1), "{allowed:?}");
    let denied: Vec<Value> = q(&mut c, &["RL.TOP", "DENIED", "COUNT", "1"]).await;
    assert_eq!(pairs(&denied), vec![("over".to_string(), 29)]);
}

/// A lease refused (`RL.ACQUIRE` past its limit) is a denial on its key:
/// the key a client keeps asking leases of heads `RL.TOP DENIED`. Leases
/// were not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_leases_are_denials() {
    let server = Server::start_with(|c| c.top_sample = 1).await;
    let mut c = server.client().await;
    let acquire = |key: &str| ["RL.ACQUIRE", key, "2", "60"].map(String::from).to_vec();
    let mut calls: Vec<Vec<String>> = (0..40).map(|_| acquire("pool:db")).collect();
    calls.extend((0..5).map(|_| acquire("pool:cache")));
    pipelined(&mut c, &calls).await;
    let got: Vec<Value> = q(&mut c, &["RL.TOP", "DENIED"]).await;
    assert_eq!(
        pairs(&got),
        [("pool:db".to_string(), 38), ("pool:cache".to_string(), 3)]
    );
}
