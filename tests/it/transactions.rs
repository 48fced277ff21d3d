//! MULTI, EXEC, DISCARD, WATCH and UNWATCH through the `redis` crate and
//! raw RESP, on a real server on port 0 with the manual clock: queueing,
//! EXECABORT, errors in place, WATCH conflicts, atomicity across shards,
//! and that a failed transaction writes nothing, whichever way it fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::common::*;
use redis::Value;

type Con = redis::aio::MultiplexedConnection;

async fn val(con: &mut Con, args: &[&str]) -> Value {
    q(con, args).await
}

async fn get(con: &mut Con, key: &str) -> Option<String> {
    q(con, &["GET", key]).await
}

fn info_field(info: &str, name: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in INFO"))
        .trim()
        .parse()
        .expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_replies_and_exec_array_raw_bytes() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    assert_eq!(r.call(&["SET", "s", "text"]).await, "+OK\r\n");
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(r.call(&["INCR", "n"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["INCR", "s"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["EXPIRE", "n", "10"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["GET", "n"]).await, "+QUEUED\r\n");
    assert_eq!(
        r.call(&["RL.ALLOW", "lim", "1", "60", "ALGO", "gcra"])
            .await,
        "+QUEUED\r\n"
    );
    // Errors at run time stand in place; the rest ran.
    assert_eq!(
        r.call(&["EXEC"]).await,
        "*5\r\n:1\r\n-ERR value is not an integer or out of range\r\n:1\r\n$1\r\n1\r\n*5\r\n:1\r\n:1\r\n:0\r\n:-1\r\n:60000\r\n"
    );
    assert_eq!(r.call(&["PTTL", "n"]).await, ":10000\r\n");
    // An empty transaction.
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(r.call(&["EXEC"]).await, "*0\r\n");
    // Errors outside a transaction, and the ones MULTI refuses at once.
    assert_eq!(r.call(&["EXEC"]).await, "-ERR EXEC without MULTI\r\n");
    assert_eq!(r.call(&["DISCARD"]).await, "-ERR DISCARD without MULTI\r\n");
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(
        r.call(&["MULTI"]).await,
        "-ERR MULTI calls can not be nested\r\n"
    );
    assert_eq!(
        r.call(&["WATCH", "n"]).await,
        "-ERR WATCH inside MULTI is not allowed\r\n"
    );
    // Neither error dooms the transaction.
    assert_eq!(r.call(&["INCR", "n"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["EXEC"]).await, "*1\r\n:2\r\n");
    // EXEC refused as it arrives (given arguments) discards the
    // transaction, naming why, as Redis's execCommandAbort does.
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(r.call(&["INCR", "n"]).await, "+QUEUED\r\n");
    assert_eq!(
        r.call(&["EXEC", "now"]).await,
        "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n"
    );
    assert_eq!(r.call(&["EXEC"]).await, "-ERR EXEC without MULTI\r\n");
    assert_eq!(r.call(&["GET", "n"]).await, "$1\r\n2\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_time_errors_abort_the_whole_transaction() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    let refusals: [&[&str]; 3] = [
        &["NOSUCHCMD", "x"],
        &["GET", "a", "b"],
        // no_multi
        &["SAVE"],
    ];
    let errors = [
        "-ERR unknown command 'NOSUCHCMD', with args beginning with: 'x' \r\n",
        "-ERR wrong number of arguments for 'get' command\r\n",
        "-ERR Command not allowed inside a transaction\r\n",
    ];
    for (bad, error) in refusals.iter().zip(errors) {
        assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
        assert_eq!(r.call(&["SET", "k", "written"]).await, "+QUEUED\r\n");
        assert_eq!(r.call(bad).await, error);
        assert_eq!(r.call(&["INCR", "counter"]).await, "+QUEUED\r\n");
        assert_eq!(
            r.call(&["EXEC"]).await,
            "-EXECABORT Transaction discarded because of previous errors.\r\n"
        );
        // Nothing was written, and the connection is out of MULTI.
        assert_eq!(r.call(&["EXISTS", "k", "counter"]).await, ":0\r\n");
        assert_eq!(r.call(&["EXEC"]).await, "-ERR EXEC without MULTI\r\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_inside_multi_discards_it_and_logs_out() {
    let srv = Server::start_with(|c| c.requirepass = Some("pw".into())).await;
    let mut r = srv.raw().await;
    assert!(r.call(&["MULTI"]).await.starts_with("-NOAUTH"));
    assert_eq!(r.call(&["AUTH", "pw"]).await, "+OK\r\n");
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(r.call(&["SET", "k", "v"]).await, "+QUEUED\r\n");
    // RESET inside MULTI discards it and logs the connection out.
    assert_eq!(r.call(&["RESET"]).await, "+RESET\r\n");
    // Logged out, EXEC is refused as Redis refuses it (`rejectCommand`
    // answers any refused EXEC with EXECABORT, in MULTI or not).
    assert_eq!(
        r.call(&["EXEC"]).await,
        "-EXECABORT Transaction discarded because of: NOAUTH Authentication required.\r\n"
    );
    assert_eq!(r.call(&["AUTH", "pw"]).await, "+OK\r\n");
    assert_eq!(r.call(&["EXISTS", "k"]).await, ":0\r\n");
    assert_eq!(r.call(&["EXEC"]).await, "-ERR EXEC without MULTI\r\n");
}

/// The `allowed` field of a limiter reply (a RESP2 array, a RESP3 map).
fn allowed(v: &Value) -> i64 {
    match v {
        Value::Array(a) => redis::from_redis_value(&a[0]).expect("integer"),
        other => {
            let field = pairs(other).into_iter().find(|(k, _)| k == "allowed");
            redis::from_redis_value(&field.expect("allowed").1).expect("integer")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_crate_atomic_pipelines() {
    let srv = Server::start().await;
    for mut c in [srv.client().await, srv.client3().await] {
        let _: () = q(&mut c, &["DEL", "k"]).await;
        // redis-py's default pipeline() and the crate's atomic pipe send
        // MULTI ... EXEC: every reply comes back, the counter moves once per
        // transaction.
        for n in 1..=3i64 {
            let (count, set): (i64, bool) = redis::pipe()
                .atomic()
                .cmd("INCR")
                .arg("k")
                .cmd("EXPIRE")
                .arg("k")
                .arg(10)
                .query_async(&mut c)
                .await
                .expect("transaction");
            assert_eq!((count, set), (n, true));
        }
        assert_eq!(get(&mut c, "k").await.as_deref(), Some("3"));
        // A transaction whose queue has an unknown command fails whole
        // (the crate reports the first error it read: the refusal, before
        // EXEC's EXECABORT).
        let err = redis::pipe()
            .atomic()
            .cmd("INCR")
            .arg("k")
            .cmd("NOSUCH")
            .query_async::<Value>(&mut c)
            .await
            .expect_err("EXECABORT");
        assert!(
            err.to_string().contains("unknown command 'NOSUCH'"),
            "{err}"
        );
        assert_eq!(get(&mut c, "k").await.as_deref(), Some("3"));
        // Limiter commands are atomic together.
        let (a, b): (Value, Value) = redis::pipe()
            .atomic()
            .cmd("RL.ALLOW")
            .arg("u")
            .arg(1)
            .arg(60)
            .cmd("RL.ALLOW")
            .arg("u")
            .arg(1)
            .arg(60)
            .query_async(&mut c)
            .await
            .expect("limiter transaction");
        assert_eq!((allowed(&a), allowed(&b)), (1, 0));
        let _: () = q(&mut c, &["DEL", "u"]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_exec_is_a_null_array_in_resp2_and_resp3() {
    let srv = Server::start().await;
    let mut other = srv.client().await;
    for (hello, null) in [(None, "*-1\r\n"), (Some("3"), "_\r\n")] {
        let mut r = srv.raw().await;
        if let Some(v) = hello {
            assert!(r.call(&["HELLO", v]).await.starts_with('%'));
        }
        assert_eq!(r.call(&["WATCH", "w"]).await, "+OK\r\n");
        let _: () = q(&mut other, &["SET", "w", "changed"]).await;
        assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
        assert_eq!(r.call(&["SET", "w", "mine"]).await, "+QUEUED\r\n");
        assert_eq!(r.call(&["SET", "x", "mine"]).await, "+QUEUED\r\n");
        assert_eq!(r.call(&["EXEC"]).await, null);
        assert_eq!(get(&mut other, "w").await.as_deref(), Some("changed"));
        assert_eq!(get(&mut other, "x").await, None);
        // EXEC unwatched: the next transaction runs.
        assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
        assert_eq!(r.call(&["GET", "w"]).await, "+QUEUED\r\n");
        assert_eq!(r.call(&["EXEC"]).await, "*1\r\n$7\r\nchanged\r\n");
    }
}

/// Runs WATCH w; `change`; MULTI; SET w mine; EXEC and returns whether the
/// transaction ran.
async fn watched_exec_runs(
    srv: &Server,
    setup: &[&str],
    change: impl AsyncFnOnce(&mut Con),
) -> bool {
    let mut me = srv.client().await;
    let mut other = srv.client().await;
    let _: () = q(&mut other, &["DEL", "w"]).await;
    if !setup.is_empty() {
        let _: Value = q(&mut other, setup).await;
    }
    let _: () = q(&mut me, &["WATCH", "w"]).await;
    change(&mut other).await;
    let result: Option<(String,)> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("w")
        .arg("mine")
        .query_async(&mut me)
        .await
        .expect("EXEC");
    result.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_aborts_on_every_kind_of_change_and_only_then() {
    let srv = Server::start().await;
    let elsewhere = "elsewhere";
    // Written, deleted, expired (the clock moves past its TTL), charged
    // by a limiter decision.
    assert!(
        !watched_exec_runs(&srv, &[], async |c| {
            let _: () = q(c, &["SET", "w", "x"]).await;
        })
        .await
    );
    assert!(
        !watched_exec_runs(&srv, &["SET", "w", "x"], async |c| {
            let _: i64 = q(c, &["DEL", "w"]).await;
        })
        .await
    );
    assert!(
        !watched_exec_runs(&srv, &["SET", "w", "x", "PX", "500"], async |_| {
            srv.advance_ms(501);
        })
        .await
    );
    assert!(
        !watched_exec_runs(&srv, &[], async |c| {
            let _: Value = q(c, &["RL.ALLOW", "w", "5", "60"]).await;
        })
        .await
    );
    assert!(
        !watched_exec_runs(&srv, &["SET", "w", "1"], async |c| {
            let _: bool = q(c, &["EXPIRE", "w", "100"]).await;
        })
        .await
    );
    assert!(
        !watched_exec_runs(&srv, &["SET", "w", "1"], async |c| {
            let _: () = q(c, &["FLUSHALL"]).await;
        })
        .await
    );
    // No change to the key: it runs, whatever else happens.
    assert!(
        watched_exec_runs(&srv, &["SET", "w", "1"], async |c| {
            let _: () = q(c, &["SET", elsewhere, "x"]).await;
            let _: Option<String> = q(c, &["GET", "w"]).await;
            let _: Value = q(c, &["RL.PEEK", "w2", "5", "60"]).await;
        })
        .await
    );
    // Writes that fail or leave the key as it was, as in Redis.
    assert!(
        watched_exec_runs(&srv, &["SET", "w", "text"], async |c| {
            let _: String = q_err(c, &["INCR", "w"]).await;
            let _: Option<String> = q(c, &["SET", "w", "other", "NX"]).await;
            let _: bool = q(c, &["PERSIST", "w"]).await;
        })
        .await
    );
    // FLUSHALL aborts a watched key only if it existed, as in Redis 7.
    assert!(
        watched_exec_runs(&srv, &[], async |c| {
            let _: () = q(c, &["SET", elsewhere, "x"]).await;
            let _: () = q(c, &["FLUSHALL"]).await;
        })
        .await
    );
    // A key that did not exist and still does not: nothing to abort on.
    assert!(
        watched_exec_runs(&srv, &[], async |c| {
            let _: i64 = q(c, &["DEL", "w"]).await;
        })
        .await
    );
    // A key already expired when watched does not abort by expiring.
    assert!(
        watched_exec_runs(&srv, &[], async |_| {
            srv.advance_ms(10);
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwatch_discard_and_reset_forget_watched_keys() {
    let srv = Server::start().await;
    let mut other = srv.client().await;
    for forget in [&["UNWATCH"][..], &["RESET"], &["MULTI", "DISCARD"]] {
        let mut r = srv.raw().await;
        assert_eq!(r.call(&["WATCH", "w", "v"]).await, "+OK\r\n");
        for word in forget {
            assert!(r.call(&[word]).await.starts_with('+'));
        }
        let _: () = q(&mut other, &["SET", "w", "changed"]).await;
        assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
        assert_eq!(r.call(&["GET", "w"]).await, "+QUEUED\r\n");
        assert_eq!(r.call(&["EXEC"]).await, "*1\r\n$7\r\nchanged\r\n");
    }
    // EXEC without MULTI keeps the watch, as in Redis.
    let mut r = srv.raw().await;
    assert_eq!(r.call(&["WATCH", "w"]).await, "+OK\r\n");
    assert_eq!(r.call(&["EXEC"]).await, "-ERR EXEC without MULTI\r\n");
    let _: () = q(&mut other, &["SET", "w", "again"]).await;
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(r.call(&["GET", "w"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["EXEC"]).await, "*-1\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_increments_from_twenty_clients_end_exact() {
    const CLIENTS: usize = 20;
    const EACH: usize = 200;
    let srv = Server::start().await;
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let mut c = srv.client().await;
        tasks.push(tokio::spawn(async move {
            let mut retries = 0u64;
            for _ in 0..EACH {
                loop {
                    let _: () = q(&mut c, &["WATCH", "counter"]).await;
                    let n: Option<i64> = q(&mut c, &["GET", "counter"]).await;
                    let next = n.unwrap_or(0) + 1;
                    let done: Option<(String,)> = redis::pipe()
                        .atomic()
                        .cmd("SET")
                        .arg("counter")
                        .arg(next)
                        .query_async(&mut c)
                        .await
                        .expect("EXEC");
                    if done.is_some() {
                        break;
                    }
                    retries += 1;
                }
            }
            retries
        }));
    }
    let mut retries = 0;
    for t in tasks {
        retries += t.await.expect("client task");
    }
    let mut c = srv.client().await;
    assert_eq!(
        get(&mut c, "counter").await.as_deref(),
        Some(&*(CLIENTS * EACH).to_string()),
        "after {retries} retries"
    );
    let info: String = q(&mut c, &["INFO", "stats"]).await;
    assert_eq!(
        info_field(&info, "transactions_executed"),
        (CLIENTS * EACH) as u64
    );
    assert_eq!(info_field(&info, "transactions_watch_aborted"), retries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_over_sixteen_shards_is_never_seen_half_applied() {
    let srv = Server::start().await;
    let keys = keys_in_distinct_shards(&srv, "k", 16);
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut w = srv.client().await;
    let mut mset = vec!["MSET"];
    for k in &key_refs {
        mset.extend([*k, "0"]);
    }
    let _: () = q(&mut w, &mset).await;
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let mut r = srv.client().await;
        let mut mget = vec!["MGET".to_string()];
        mget.extend(keys.iter().cloned());
        tokio::spawn(async move {
            let args: Vec<&str> = mget.iter().map(String::as_str).collect();
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let values: Vec<String> = q(&mut r, &args).await;
                assert!(
                    values.iter().all(|v| *v == values[0]),
                    "half-applied transaction seen: {values:?}"
                );
                reads += 1;
            }
            reads
        })
    };
    for round in 1..=300 {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for k in &key_refs {
            pipe.cmd("SET").arg(*k).arg(round).ignore();
        }
        let _: () = pipe.query_async(&mut w).await.expect("EXEC");
    }
    stop.store(true, Ordering::Relaxed);
    let reads = reader.await.expect("reader");
    assert!(reads > 0);
    let values: Vec<String> = q(&mut w, &["MGET", key_refs[0], key_refs[15]]).await;
    assert_eq!(values, ["300", "300"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_keyspace_commands_run_inside_a_transaction() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    assert_eq!(r.call(&["MSET", "a", "1", "b", "2"]).await, "+OK\r\n");
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    for cmd in [
        &["DBSIZE"][..],
        &["KEYS", "*"],
        &["SCAN", "0", "COUNT", "1000"],
        &["INFO", "keyspace"],
        &["FLUSHALL"],
        &["DBSIZE"],
        &["SET", "c", "3"],
        &["DBSIZE"],
    ] {
        assert_eq!(r.call(cmd).await, "+QUEUED\r\n");
    }
    let reply = r.call(&["EXEC"]).await;
    assert!(reply.starts_with("*8\r\n:2\r\n*2\r\n"), "{reply}");
    assert!(reply.contains("db0:keys=2,expires=0"), "{reply}");
    assert!(reply.ends_with("+OK\r\n:0\r\n+OK\r\n:1\r\n"), "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connection_discards_its_queue() {
    let srv = Server::start().await;
    {
        let mut r = srv.raw().await;
        assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
        assert_eq!(r.call(&["SET", "k", "v"]).await, "+QUEUED\r\n");
    }
    let mut r = srv.raw().await;
    // DISCARD drops the queue unrun.
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(r.call(&["SET", "k3", "v"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["DISCARD"]).await, "+OK\r\n");
    assert_eq!(r.call(&["EXISTS", "k3"]).await, ":0\r\n");
    // QUIT inside MULTI runs at once and closes; nothing queued runs.
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(r.call(&["SET", "k2", "v"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["QUIT"]).await, "+OK\r\n");
    r.expect_closed().await;
    let mut c = srv.client().await;
    let n: i64 = q(&mut c, &["EXISTS", "k", "k2"]).await;
    assert_eq!(n, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_past_the_query_buffer_limit_disconnects_and_writes_nothing() {
    let srv = Server::start_with(|c| c.client_query_buffer_limit = 64 * 1024).await;
    let value = "x".repeat(1000);
    // Under the limit, a transaction of 32 KiB runs.
    let mut r = srv.raw().await;
    let mut batch = encode_words(&["MULTI"]);
    for _ in 0..32 {
        batch.extend(encode_words(&["SET", "small", &value]));
    }
    batch.extend(encode_words(&["EXEC"]));
    r.send(&batch).await;
    for _ in 0..33 {
        r.reply().await;
    }
    assert!(r.reply_text().await.starts_with("*32\r\n"));
    // Past it, the client is closed and nothing it queued runs.
    let mut batch = encode_words(&["MULTI"]);
    for _ in 0..200 {
        batch.extend(encode_words(&["SET", "big", &value]));
    }
    batch.extend(encode_words(&["EXEC"]));
    let _ = r.try_send(&batch).await;
    let rest = r.read_until_closed().await;
    assert!(!String::from_utf8_lossy(&rest).contains('*'), "EXEC ran");
    let mut c = srv.client().await;
    let n: i64 = q(&mut c, &["EXISTS", "big"]).await;
    assert_eq!(n, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_are_counted_in_info_and_metrics() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    for words in [
        &["MULTI", "EXEC"][..],
        &["MULTI", "DISCARD"],
        &["MULTI", "NOPE", "EXEC"],
        &["MULTI", "RESET"],
    ] {
        for w in words {
            r.call(&[w]).await;
        }
    }
    let mut c = srv.client().await;
    let info: String = q(&mut c, &["INFO", "stats"]).await;
    assert_eq!(info_field(&info, "transactions_executed"), 1);
    assert_eq!(info_field(&info, "transactions_discarded"), 2);
    assert_eq!(info_field(&info, "transactions_execabort"), 1);
    assert_eq!(info_field(&info, "transactions_watch_aborted"), 0);
    let metrics = srv
        .state()
        .metrics
        .as_ref()
        .expect("metrics on")
        .render(&srv.state().readings());
    for (result, n) in [("executed", 1), ("discarded", 2), ("execabort", 1)] {
        let line = format!("turnstile_transactions_total{{result=\"{result}\"}} {n}");
        assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_info_knows_the_transaction_commands() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    let v = val(&mut c, &["COMMAND", "INFO", "watch", "exec", "save"]).await;
    let Value::Array(items) = v else {
        panic!("{v:?}")
    };
    let Value::Array(watch) = &items[0] else {
        panic!()
    };
    assert_eq!(watch[1], Value::Int(-2));
    assert_eq!(
        &watch[3..6],
        &[Value::Int(1), Value::Int(-1), Value::Int(1)]
    );
    let Value::Array(save) = &items[2] else {
        panic!()
    };
    let Value::Array(flags) = &save[2] else {
        panic!()
    };
    assert!(flags.iter().any(|f| text(f) == "no_multi"), "{flags:?}");
    let keys: Vec<String> = q(&mut c, &["COMMAND", "GETKEYS", "WATCH", "a", "b"]).await;
    assert_eq!(keys, ["a", "b"]);
}
