//! Policies on a real server on port 0, through the `redis` crate (RESP2
//! and RESP3): `RL.CHECK` and `RL.ALLOW ... POLICY` counting at the right
//! count on a driven clock, shadow mode, `RL.POLICY`, INFO and /metrics,
//! and reloads (the command, the file watcher) under load: no request
//! fails, an unchanged limit keeps counting, a bad file changes nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use redis::Value;

const CONFIG: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: path
    value: /login
    shadow_mode: true
    rate_limit:
      requests_per_unit: 2
      period: 10s
      algorithm: window
  - key: path
    value: /health
    rate_limit:
      unlimited: true
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit:
          name: free-plan
          requests_per_unit: 5
          period: 1s
          algorithm: gcra
          burst: 2
"#;

fn policy_dir(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("turnstile-policy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("edge.yaml"), text).unwrap();
    dir
}

fn last_text(v: &Value) -> Option<String> {
    match v {
        Value::Array(items) => match items.last() {
            Some(Value::Nil) => None,
            Some(other) => Some(text(other)),
            None => None,
        },
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rl_check_counts_per_value_and_names_the_policy() {
    let dir = policy_dir("check", CONFIG);
    let srv = Server::start_with(|c| c.policies = Some(dir.clone())).await;
    for resp3 in [false, true] {
        let mut con = if resp3 {
            srv.client3().await
        } else {
            srv.client().await
        };
        let ip = if resp3 { "10.0.0.3" } else { "10.0.0.2" };
        for i in 0..3 {
            let v: Value = q(&mut con, &["RL.CHECK", "edge", "remote_address", ip]).await;
            assert_eq!(ints(&v)[..3], [1, 3, 2 - i], "{v:?}");
            assert_eq!(last_text(&v).as_deref(), Some("edge.remote_address"));
        }
        let v: Value = q(&mut con, &["RL.CHECK", "edge", "remote_address", ip]).await;
        let f = ints(&v);
        assert_eq!(f[..3], [0, 3, 0], "the fourth in a minute is denied");
        assert!(f[3] > 0, "retry_after_ms");
        // PEEK charges nothing.
        let v: Value = q(
            &mut con,
            &["RL.CHECK", "edge", "PEEK", "remote_address", "10.9.9.9"],
        )
        .await;
        assert_eq!(ints(&v)[..3], [1, 3, 2]);
        let v: Value = q(
            &mut con,
            &["RL.CHECK", "edge", "remote_address", "10.9.9.9"],
        )
        .await;
        assert_eq!(ints(&v)[..3], [1, 3, 2], "PEEK left it untouched");
        let _: Value = q(&mut con, &["RL.RESET", "rl:{edge}.remote_address_10.9.9.9"]).await;
    }
    let mut con = srv.client().await;
    // No match, and unlimited: allowed with limit -1.
    for d in [&["nosuch", "x"][..], &["path", "/health"]] {
        let mut args = vec!["RL.CHECK", "edge"];
        args.extend_from_slice(d);
        let v: Value = q(&mut con, &args).await;
        assert_eq!(ints(&v), vec![1, -1, -1, -1, 0], "{d:?}");
    }
    // The descriptor that matched no policy was counted (the unlimited one
    // matched its policy).
    let info: String = q(&mut con, &["INFO", "policies"]).await;
    assert!(info.contains("policies_unmatched:1\r\n"), "{info}");
    // A domain no file declares is an error naming those that are: a
    // misspelled domain used to allow everything, silently.
    assert_eq!(
        q_err(&mut con, &["RL.CHECK", "other-domain", "path", "/"]).await,
        "ERR unknown policy domain 'other-domain': the loaded domains are edge"
    );
    // Nested, named, with COST.
    let v: Value = q(
        &mut con,
        &[
            "RL.CHECK", "edge", "COST", "2", "tenant", "acme", "plan", "free",
        ],
    )
    .await;
    assert_eq!(ints(&v)[..3], [1, 5, 0]);
    assert_eq!(last_text(&v).as_deref(), Some("free-plan"));
    let v: Value = q(
        &mut con,
        &["RL.CHECK", "edge", "tenant", "acme", "plan", "free"],
    )
    .await;
    assert_eq!(ints(&v)[0], 0, "gcra burst 2 spent");
    // The counter key is documented and shown.
    let k: Option<String> = q(
        &mut con,
        &["RL.POLICY", "KEY", "edge", "tenant", "acme", "plan", "free"],
    )
    .await;
    assert_eq!(k.as_deref(), Some("rl:{edge}.tenant_acme.plan_free"));
    let state: Value = q(&mut con, &["RL.STATE", "rl:{edge}.tenant_acme.plan_free"]).await;
    assert!(format!("{state:?}").contains("gcra"), "{state:?}");
    // Errors.
    for (args, want) in [
        (
            &["RL.CHECK", "edge", "remote_address"][..],
            "wrong number of arguments",
        ),
        (
            &["RL.CHECK", "edge", "remote_address", "x", "y"],
            "one or more key value pairs",
        ),
        (
            &["RL.CHECK", "edge", "COST", "0", "a", "b"],
            "COST must be a positive integer",
        ),
        (
            &["RL.CHECK", "edge", "COST", "9", "remote_address", "x"],
            "cost exceeds limit",
        ),
    ] {
        let e = q_err(&mut con, args).await;
        assert!(e.contains(want), "{args:?}: {e}");
    }
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_counts_and_allows() {
    let dir = policy_dir("shadow", CONFIG);
    let srv = Server::start_with(|c| c.policies = Some(dir.clone())).await;
    let mut con = srv.client().await;
    for _ in 0..5 {
        let v: Value = q(&mut con, &["RL.CHECK", "edge", "path", "/login"]).await;
        assert_eq!(ints(&v)[0], 1, "shadow mode allows");
        assert_eq!(ints(&v)[3], -1, "no retry time when allowed");
    }
    let info: Value = q(&mut con, &["RL.POLICY", "GET", "edge.path_/login"]).await;
    let fields: std::collections::HashMap<String, Value> = pairs(&info).into_iter().collect();
    let stats: std::collections::HashMap<String, Value> =
        pairs(&fields["stats"]).into_iter().collect();
    let n = |k: &str| match &stats[k] {
        Value::Int(n) => *n,
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!(
        (
            n("total_hits"),
            n("over_limit"),
            n("shadow_mode"),
            n("within_limit")
        ),
        (5, 3, 3, 2)
    );
    // The setting, apart from the stat of the same name.
    assert_eq!(fields["shadow_mode"], Value::Int(1));
    assert_eq!(text(&fields["algorithm"]), "window");
    // --policies-shadow: every policy.
    srv.shutdown().await;
    let srv = Server::start_with(|c| {
        c.policies = Some(dir.clone());
        c.policies_shadow = true;
    })
    .await;
    let mut con = srv.client().await;
    for _ in 0..5 {
        let v: Value = q(&mut con, &["RL.CHECK", "edge", "remote_address", "1.1.1.1"]).await;
        assert_eq!(ints(&v)[0], 1);
    }
    let m = reqwest_metrics(&srv).await;
    assert!(m.contains(r#"turnstile_policy_hits_total{domain="edge",policy="edge.remote_address",stat="shadow_mode"} 2"#), "{m}");
    assert!(m.contains("turnstile_policies_loaded 4"), "{m}");
    srv.shutdown().await;
}

async fn reqwest_metrics(srv: &Server) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = srv.handle().metrics_addr().expect("metrics on");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).await.unwrap();
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rl_allow_takes_a_named_policy() {
    let dir = policy_dir("named", CONFIG);
    let srv = Server::start_with(|c| c.policies = Some(dir.clone())).await;
    let mut con = srv.client3().await;
    let v: Value = q(
        &mut con,
        &["RL.ALLOW", "user:7", "POLICY", "free-plan", "COST", "2"],
    )
    .await;
    assert_eq!(ints(&v)[..3], [1, 5, 0]);
    let v: Value = q(&mut con, &["RL.PEEK", "user:7", "POLICY", "free-plan"]).await;
    assert_eq!(ints(&v)[0], 0);
    let v: Value = q(
        &mut con,
        &["RL.ALLOW", "user:8", "POLICY", "edge.remote_address"],
    )
    .await;
    assert_eq!(
        ints(&v)[..3],
        [1, 3, 2],
        "a policy without a name is named by its path"
    );
    let e = q_err(&mut con, &["RL.ALLOW", "k", "POLICY", "nope"]).await;
    assert!(e.contains("no policy named 'nope'"), "{e}");
    let e = q_err(
        &mut con,
        &["RL.ALLOW", "k", "POLICY", "free-plan", "BURST", "3"],
    )
    .await;
    assert!(e.contains("syntax error"), "{e}");
    let list: Value = q(&mut con, &["RL.POLICY", "LIST"]).await;
    let Value::Array(items) = &list else {
        panic!("{list:?}")
    };
    assert_eq!(items.len(), 4);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_loses_nothing() {
    let dir = policy_dir("reload", CONFIG);
    let srv = Server::start_with(|c| c.policies = Some(dir.clone())).await;
    let mut admin = srv.client().await;
    // A counter of a limit that will not change, charged before reloads.
    let v: Value = q(&mut admin, &["RL.CHECK", "edge", "remote_address", "keep"]).await;
    assert_eq!(ints(&v)[..3], [1, 3, 2]);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for c in 0..20 {
        let mut con = srv.client().await;
        let (stop, done) = (stop.clone(), done.clone());
        clients.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let ip = format!("c{c}-{i}");
                let v: Value = redis::cmd("RL.CHECK")
                    .arg("edge")
                    .arg("remote_address")
                    .arg(&ip)
                    .query_async(&mut con)
                    .await
                    .expect("no request fails during reloads");
                assert_eq!(ints(&v)[0], 1);
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for round in 0..100 {
        // Rewrite the file: the login limit changes each time, the
        // remote_address limit never; every tenth version is invalid.
        let text = if round % 10 == 9 {
            CONFIG.replace("unit: minute", "unit: fortnight")
        } else {
            CONFIG.replace(
                "requests_per_unit: 2\n",
                &format!("requests_per_unit: {}\n", 2 + round),
            )
        };
        std::fs::write(dir.join("edge.yaml"), &text).unwrap();
        let r: redis::RedisResult<String> = redis::cmd("RL.POLICY")
            .arg("RELOAD")
            .query_async(&mut admin)
            .await;
        if round % 10 == 9 {
            let e = r.unwrap_err().to_string();
            assert!(
                e.contains("edge.yaml:") && e.contains("invalid rate limit unit 'fortnight'"),
                "{e}"
            );
        } else {
            assert_eq!(r.unwrap(), "OK");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    assert!(done.load(Ordering::Relaxed) > 0);
    // The unchanged limit kept counting across 100 reloads.
    let v: Value = q(&mut admin, &["RL.CHECK", "edge", "remote_address", "keep"]).await;
    assert_eq!(ints(&v)[..3], [1, 3, 1]);
    let get: Value = q(&mut admin, &["RL.POLICY", "GET", "edge.path_/login"]).await;
    let fields: std::collections::HashMap<String, Value> = pairs(&get).into_iter().collect();
    assert_eq!(
        fields["limit"],
        Value::Int(2 + 98),
        "the last valid version is in force"
    );
    let info: String = q(&mut admin, &["INFO", "policies"]).await;
    // Ten refused by RL.POLICY RELOAD; the file watcher, which sees the
    // same rewrites, may have tried the bad versions too.
    let failed: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("policies_reloads_failed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("policies_reloads_failed");
    assert!(failed >= 10, "{info}");
    assert!(info.contains("policies_loaded:4"), "{info}");
    assert!(info.contains("policies_last_reload_status:err"), "{info}");
    // A bad file at reload: the old set stays (what LIST shows).
    let list: Value = q(&mut admin, &["RL.POLICY", "LIST"]).await;
    let Value::Array(items) = &list else { panic!() };
    assert_eq!(items.len(), 4);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_file_is_reloaded_by_the_watcher() {
    let dir = policy_dir("watch", CONFIG);
    let srv = Server::start_with(|c| c.policies = Some(dir.clone())).await;
    let mut con = srv.client().await;
    std::fs::write(
        dir.join("edge.yaml"),
        CONFIG.replace("requests_per_unit: 3", "requests_per_unit: 30"),
    )
    .unwrap();
    // The watcher reloads on its own; poll (bounded) for the outcome
    // rather than sleep a guessed time.
    let mut limit = 0;
    for _ in 0..200 {
        let v: Value = q(
            &mut con,
            &["RL.CHECK", "edge", "PEEK", "remote_address", "w"],
        )
        .await;
        limit = ints(&v)[1];
        if limit == 30 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(limit, 30, "the watcher reloaded the changed file");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_file_at_start_stops_the_server() {
    let dir = policy_dir("bad-start", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
    let mut config =
        turnstile::Config::parse_from(["turnstile", "--port", "0", "--metrics-addr", "off"])
            .unwrap();
    config.policies = Some(dir.clone());
    let e = turnstile::start(&config, Arc::new(turnstile::SystemClock::new()))
        .await
        .err()
        .expect("refused");
    let text = e.to_string();
    assert!(
        text.contains("edge.yaml:4:24: descriptors[0].rate_limit.unit: ")
            && text.contains("invalid rate limit unit 'fortnight'"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rl_check_is_refused_in_transactions_and_scripts() {
    // Its counter key is derived, not an argument: a transaction or a
    // script could not lock it.
    let dir = policy_dir("nomulti", CONFIG);
    let srv = Server::start_with(|c| c.policies = Some(dir.clone())).await;
    let mut r = srv.raw().await;
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    let queued = r.call(&["RL.CHECK", "edge", "remote_address", "x"]).await;
    assert!(queued.starts_with("-ERR"), "{queued}");
    assert_eq!(r.call(&["DISCARD"]).await, "+OK\r\n");
    let e = r
        .call(&[
            "EVAL",
            "return redis.call('RL.CHECK', 'edge', 'remote_address', 'x')",
            "1",
            "edge",
        ])
        .await;
    assert!(e.contains("not allowed from script"), "{e}");
    srv.shutdown().await;
}

/// `RL.POLICY RELOAD` reads the files on the reload thread: with one
/// async worker, a client's PING is answered while a large file is still
/// being read (it used to wait for the whole load: 22.6 s behind a
/// 60,000-descriptor file on the release build), and the reload's own
/// reply comes when the load is done. Refused inside MULTI, where the
/// connection cannot wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn reload_holds_no_worker() {
    use std::fmt::Write;
    let mut big = String::from("domain: edge\ndescriptors:\n");
    for i in 0..100_000 {
        writeln!(
            big,
            "  - {{key: k, value: v{i}, rate_limit: {{unit: second, requests_per_unit: 5}}}}"
        )
        .unwrap();
    }
    let dir = policy_dir("no-worker", CONFIG);
    let srv = Server::start_with(|c| {
        c.policies = Some(dir.clone());
        c.policies_max_file_size = 64 << 20;
    })
    .await;
    std::fs::write(dir.join("edge.yaml"), &big).unwrap();
    // The load of 100,000 descriptors takes seconds in a debug build, more
    // on a busy machine: the reloading client waits as long as it takes
    // (the test is that PING does not), so its reply has no 10 s bound.
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(IO_TIMEOUT)
        .set_response_timeout(Duration::from_secs(300));
    let mut admin = redis::Client::open(srv.url("", ""))
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let mut other = srv.client().await;
    let reload = tokio::spawn(async move {
        let r: redis::RedisResult<String> = redis::cmd("RL.POLICY")
            .arg("RELOAD")
            .query_async(&mut admin)
            .await;
        r
    });
    // Wait until the load is under way (the watcher may have started one
    // first: any load counts), then ask for PING.
    eventually("a reload in progress", || {
        srv.state().policies.is_reloading()
    })
    .await;
    assert_pong(&mut other).await;
    assert!(
        !reload.is_finished(),
        "PING waited for the policy load (or the load was too quick to tell)"
    );
    assert_eq!(reload.await.unwrap().unwrap(), "OK");
    let get: Value = q(&mut other, &["RL.POLICY", "GET", "edge.k_v99999"]).await;
    assert!(!matches!(get, Value::Nil), "the big file is in force");
    // In a transaction it is refused, and the transaction goes on.
    let mut raw = srv.raw().await;
    assert_eq!(raw.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(
        raw.call(&["RL.POLICY", "RELOAD"]).await,
        "-ERR Command not allowed inside a transaction\r\n"
    );
    srv.shutdown().await;
}

/// A file over `--policies-max-file-size` (CONFIG SET lowers it live) is
/// refused by RL.POLICY RELOAD naming both sizes; the set in force stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_refuses_a_file_over_the_cap() {
    let dir = policy_dir("cap", CONFIG);
    let srv = Server::start_with(|c| c.policies = Some(dir.clone())).await;
    let mut con = srv.client().await;
    let _: String = q(
        &mut con,
        &["CONFIG", "SET", "policies-max-file-size", "100"],
    )
    .await;
    let e = q_err(&mut con, &["RL.POLICY", "RELOAD"]).await;
    assert!(
        e.contains(&format!(
            "policy file edge.yaml is {}B, over the cap of 100B (--policies-max-file-size)",
            CONFIG.len()
        )),
        "{e}"
    );
    let list: Value = q(&mut con, &["RL.POLICY", "LIST"]).await;
    let Value::Array(items) = &list else { panic!() };
    assert_eq!(items.len(), 4);
    srv.shutdown().await;
}

/// Every key of `v`'s maps, at any depth, named once: a client that builds
/// a dict (redis-py over RESP3) keeps only the last of two fields of one
/// name. Returns the first repeated name and the map's path.
fn repeated_field(v: &Value, path: &str) -> Option<String> {
    match v {
        Value::Map(pairs) => {
            let mut seen = std::collections::HashSet::new();
            for (k, val) in pairs {
                let name = text(k);
                if !seen.insert(name.clone()) {
                    return Some(format!("{path}.{name}"));
                }
                if let Some(r) = repeated_field(val, &format!("{path}.{name}")) {
                    return Some(r);
                }
            }
            None
        }
        Value::Array(items) | Value::Set(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, x)| repeated_field(x, &format!("{path}[{i}]"))),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_map_reply_names_a_field_twice() {
    let dir = policy_dir("fields", CONFIG);
    let srv = Server::start_with(|c| c.policies = Some(dir.clone())).await;
    let mut con = srv.client3().await;
    for algo in ["window", "sliding", "log", "gcra", "fixed"] {
        let key = format!("k:{algo}");
        let _: Value = q(&mut con, &["RL.ALLOW", &key, "10", "1h", "ALGO", algo]).await;
    }
    let _: Value = q(&mut con, &["RL.ACQUIRE", "k:lease", "5", "10s", "ID", "a"]).await;
    let _: Value = q(&mut con, &["RL.CHECK", "edge", "path", "/login"]).await;
    let mut commands: Vec<Vec<String>> = vec![
        vec!["HELLO".into(), "3".into()],
        vec!["RL.POLICY".into(), "LIST".into()],
        vec!["RL.LEASES".into(), "k:lease".into()],
        vec!["COMMAND".into(), "DOCS".into()],
        vec!["COMMAND".into(), "INFO".into()],
        vec!["CONFIG".into(), "GET".into(), "*".into()],
    ];
    for algo in ["window", "sliding", "log", "gcra", "fixed", "lease"] {
        commands.push(vec!["RL.STATE".into(), format!("k:{algo}")]);
    }
    let listed: Value = q(&mut con, &["RL.POLICY", "LIST"]).await;
    let Value::Array(policies) = &listed else {
        panic!("{listed:?}")
    };
    assert_eq!(policies.len(), 4, "{listed:?}");
    for p in policies {
        let name = pairs(p).into_iter().find(|(k, _)| k == "name").unwrap().1;
        commands.push(vec!["RL.POLICY".into(), "GET".into(), text(&name)]);
    }
    for args in &commands {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let v: Value = q(&mut con, &args).await;
        assert!(
            matches!(v, Value::Map(_) | Value::Array(_)),
            "{args:?}: {v:?}"
        );
        assert_eq!(repeated_field(&v, &args.join(" ")), None, "{v:?}");
    }
    srv.shutdown().await;
}

/// `RL.CHARGE key POLICY name n`: the charge lands on the policy's
/// counter (what `RL.ALLOW key POLICY name` then sees), counts in its
/// stats, and in shadow mode answers allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charge_takes_a_policy() {
    let dir = policy_dir("charge", CONFIG);
    let srv = Server::start_with(|c| c.policies = Some(dir.clone())).await;
    let mut con = srv.client().await;
    // 3 a minute: a charge of 5 overdraws; the next allow is denied.
    let v: Value = q(
        &mut con,
        &["RL.CHARGE", "u1", "POLICY", "edge.remote_address", "5"],
    )
    .await;
    assert_eq!(&ints(&v)[..3], &[0, 3, 0]);
    let v: Value = q(
        &mut con,
        &["RL.ALLOW", "u1", "POLICY", "edge.remote_address"],
    )
    .await;
    assert_eq!(ints(&v)[0], 0, "the charge overdrew the policy's counter");
    let v: Value = q(
        &mut con,
        &["RL.ALLOW", "u2", "POLICY", "edge.remote_address"],
    )
    .await;
    assert_eq!(&ints(&v)[..3], &[1, 3, 2], "another key, its own counter");
    let info: Value = q(&mut con, &["RL.POLICY", "GET", "edge.remote_address"]).await;
    let fields: std::collections::HashMap<String, Value> = pairs(&info).into_iter().collect();
    let stats: std::collections::HashMap<String, Value> =
        pairs(&fields["stats"]).into_iter().collect();
    assert_eq!(stats["total_hits"], Value::Int(7), "{stats:?}");
    // Shadow mode: recorded, answered allowed.
    let v: Value = q(
        &mut con,
        &["RL.CHARGE", "u3", "POLICY", "edge.path_/login", "9"],
    )
    .await;
    assert_eq!(ints(&v)[0], 1, "{v:?}");
    // Errors name the fix.
    for (args, want) in [
        (
            vec!["RL.CHARGE", "u1", "POLICY", "nope", "1"],
            "ERR no policy named 'nope'",
        ),
        (
            vec!["RL.CHARGE", "u1", "POLICY", "edge.remote_address"],
            "ERR wrong number of arguments for 'rl.charge' command",
        ),
        (
            vec!["RL.CHARGE", "u1", "POLICY", "edge.remote_address", "0"],
            "ERR charge must be a positive integer",
        ),
        (
            vec!["RL.CHARGE", "u1", "POLICY", "edge.remote_address", "1", "x"],
            "ERR syntax error",
        ),
    ] {
        assert_eq!(q_err(&mut con, &args).await, want, "{args:?}");
    }
    srv.shutdown().await;
}

/// `1M` is minutes to some and months to others: refused wherever a
/// period is read, with both readings offered; `1m` and `1MO` still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uppercase_m_period_is_refused_as_ambiguous() {
    let srv = Server::start().await;
    let mut con = srv.client().await;
    let want = "ERR period '1M' is ambiguous: write 1m for minutes or 1mo for a calendar month";
    for args in [
        vec!["RL.ALLOW", "k", "10", "1M"],
        vec!["RL.PEEK", "k", "10", "1M", "ALGO", "fixed"],
        vec!["RL.CHARGE", "k", "10", "1M", "3"],
        vec!["RL.ALLOWMANY", "LIMIT", "k", "10", "1M"],
    ] {
        assert_eq!(q_err(&mut con, &args).await, want, "{args:?}");
    }
    assert_eq!(
        q_err(&mut con, &["RL.ALLOW", "k", "10", "1m", "BLOCK", "5M"]).await,
        "ERR BLOCK '5M' is ambiguous: write 5m for minutes (M alone could mean months)"
    );
    let v: Value = q(&mut con, &["RL.ALLOW", "k", "10", "1m"]).await;
    assert_eq!(ints(&v)[0], 1);
    let v: Value = q(&mut con, &["RL.ALLOW", "q", "10", "1MO", "ALGO", "fixed"]).await;
    assert_eq!(ints(&v)[0], 1);
    let state: Value = q(&mut con, &["RL.STATE", "k"]).await;
    let fields: std::collections::HashMap<String, Value> = pairs(&state).into_iter().collect();
    assert_eq!(fields["period_ms"], Value::Int(60_000));
    srv.shutdown().await;
}

/// The largest charges a client can send, on a `detailed_metric` policy:
/// each is answered (the per-value sum once overflowed on the third, a
/// panic that dropped the connection in a debug build; the totals
/// wrapped), and the stats stop at 2^63 - 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_charges_saturate_a_policys_stats() {
    let text = "domain: big\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 3\n";
    let dir = policy_dir("saturate", text);
    let srv = Server::start_with(|c| c.policies = Some(dir.clone())).await;
    let mut con = srv.client().await;
    const MAX: &str = "9223372036854775807";
    for _ in 0..3 {
        let v: Value = q(&mut con, &["RL.CHARGE", "u", "POLICY", "big.k", MAX]).await;
        assert_eq!(ints(&v)[0], 0, "an overdraft is a denial: {v:?}");
    }
    let info: Value = q(&mut con, &["RL.POLICY", "GET", "big.k"]).await;
    let fields: std::collections::HashMap<String, Value> = pairs(&info).into_iter().collect();
    let stats: std::collections::HashMap<String, Value> =
        pairs(&fields["stats"]).into_iter().collect();
    assert_eq!(stats["total_hits"], Value::Int(i64::MAX), "{stats:?}");
    assert_eq!(stats["over_limit"], Value::Int(i64::MAX), "{stats:?}");
    srv.shutdown().await;
}
