//! EVAL, EVALSHA, EVAL_RO and SCRIPT on a real server on port 0, through
//! raw RESP and the `redis` crate: Redis 7.0's error words (each expected
//! reply below is what redis-server 7.0.15 answered), atomicity under
//! concurrency with declared and undeclared keys, scripts inside
//! transactions, BUSY and SCRIPT KILL.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;

type Con = redis::aio::MultiplexedConnection;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_redis_words() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    assert_eq!(r.call(&["SET", "s", "text"]).await, "+OK\r\n");
    let cases: &[(&[&str], &str)] = &[
        (
            &["EVAL", "return redis.call(\"nosuch\")", "0"],
            "-ERR Unknown Redis command called from script script: 2218effcac8108416909801acfb39c080a85adfa, on @user_script:1.\r\n",
        ),
        (
            &["EVAL", "return redis.call(\"get\")", "0"],
            "-ERR Wrong number of args calling Redis command from script script: ad9cf9305028be601cfd2abed4ce895eb41a4a6f, on @user_script:1.\r\n",
        ),
        (
            &["EVAL", "return redis.call(\"multi\")", "0"],
            "-ERR This Redis command is not allowed from script script: 211a39902cf76b98677003ff6f4c16cf0d1d5d6b, on @user_script:1.\r\n",
        ),
        (
            &["EVAL_RO", "return redis.call(\"set\",\"a\",\"1\")", "0"],
            "-ERR Write commands are not allowed from read-only scripts. script: 62749f3c5255d53515ca591d4021efbc801830df, on @user_script:1.\r\n",
        ),
        (
            &["EVAL", "return redis.call(\"incr\",\"s\")", "1", "s"],
            "-ERR value is not an integer or out of range script: 05a024512c22e9b7468dd3041a9a5108eb66b85c, on @user_script:1.\r\n",
        ),
        (
            &["EVAL", "return redis.pcall(\"incr\",\"s\")", "1", "s"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            &["EVAL", "return 1", "-1"],
            "-ERR Number of keys can't be negative\r\n",
        ),
        (
            &["EVAL", "return 1", "2", "a"],
            "-ERR Number of keys can't be greater than number of args\r\n",
        ),
        (
            &["EVAL", "return 1", "x"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            &["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"],
            "-NOSCRIPT No matching script. Please use EVAL.\r\n",
        ),
        (
            &["EVAL", "return redis.call(\"eval\",\"return 1\",\"0\")", "0"],
            "-ERR This Redis command is not allowed from script script: 6e5056688d554bd41f2476fb72f36efaeccbfd64, on @user_script:1.\r\n",
        ),
        (
            &["SCRIPT", "KILL"],
            "-NOTBUSY No scripts in execution right now.\r\n",
        ),
        (
            &["SCRIPT", "FLUSH", "x"],
            "-ERR SCRIPT FLUSH only support SYNC|ASYNC option\r\n",
        ),
        (
            &[
                "EVAL",
                "#!lua flags=no-writes\nreturn redis.call(\"set\",\"a\",\"1\")",
                "0",
            ],
            "-ERR Write commands are not allowed from read-only scripts. script: 86717419ceecb14f8b7a162ec7485f7d21d4ad13, on @user_script:2.\r\n",
        ),
        (
            &["EVAL", "retur 1", "0"],
            "-ERR Error compiling script (new function): user_script:1: '=' expected near '1'\r\n",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(r.call(args).await, *want, "{args:?}");
    }
    // Nothing of it wrote.
    assert_eq!(r.call(&["EXISTS", "a"]).await, ":0\r\n");
    assert_eq!(r.call(&["GET", "s"]).await, "$4\r\ntext\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_cache_load_exists_flush_and_evalsha() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"; // sha1("return 1")
    assert_eq!(
        r.call(&["SCRIPT", "LOAD", "return 1"]).await,
        format!("$40\r\n{sha}\r\n")
    );
    assert_eq!(
        r.call(&["SCRIPT", "EXISTS", sha, &sha.to_uppercase(), "nope"])
            .await,
        "*3\r\n:1\r\n:1\r\n:0\r\n"
    );
    assert_eq!(r.call(&["EVALSHA", sha, "0"]).await, ":1\r\n");
    assert_eq!(r.call(&["SCRIPT", "FLUSH", "ASYNC"]).await, "+OK\r\n");
    assert_eq!(r.call(&["SCRIPT", "EXISTS", sha]).await, "*1\r\n:0\r\n");
    assert_eq!(
        r.call(&["EVALSHA", sha, "0"]).await,
        "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    // EVAL caches what it runs.
    assert_eq!(r.call(&["EVAL", "return 1", "0"]).await, ":1\r\n");
    assert_eq!(r.call(&["EVALSHA_RO", sha, "0"]).await, ":1\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_reach_the_limiter_commands() {
    let srv = Server::start().await;
    let mut con = srv.client().await;
    let script = "return redis.call('RL.ALLOW', KEYS[1], ARGV[1], ARGV[2])";
    for i in 0..3 {
        let reply: Vec<i64> = redis::cmd("EVAL")
            .arg(script)
            .arg(1)
            .arg("rl:k")
            .arg(2)
            .arg(60)
            .query_async(&mut con)
            .await
            .expect("EVAL");
        assert_eq!(reply[0], i64::from(i < 2), "call {i}: {reply:?}");
    }
    let t: String = q(&mut con, &["TYPE", "rl:k"]).await;
    assert_eq!(t, "rl-window");
}

/// 20 clients x 500 read-modify-write scripts on one key: no increment is
/// lost, so no two scripts interleaved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_increments_by_script_lose_nothing() {
    const CLIENTS: usize = 20;
    const EACH: usize = 500;
    let srv = Server::start().await;
    let script = redis::Script::new(
        "local v = tonumber(redis.call('GET', KEYS[1]) or '0') + 1 \
         redis.call('SET', KEYS[1], v) return v",
    );
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let mut con = srv.client().await;
        let script = script.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                let _: i64 = script
                    .key("counter")
                    .invoke_async(&mut con)
                    .await
                    .expect("script");
            }
        }));
    }
    for t in tasks {
        t.await.expect("client");
    }
    let mut con = srv.client().await;
    let n: i64 = q(&mut con, &["GET", "counter"]).await;
    assert_eq!(n, (CLIENTS * EACH) as i64);
}

/// A reader that MGETs `keys` in a loop until stopped and fails if they
/// ever differ: a script that sets them all is seen whole or not at all.
fn spawn_reader(
    mut con: Con,
    keys: Vec<String>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut args = vec!["MGET".to_string()];
        args.extend(keys);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut reads = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let values: Vec<Option<String>> = q(&mut con, &args).await;
            assert!(
                values.iter().all(|v| *v == values[0]),
                "half-applied script seen: {values:?}"
            );
            reads += 1;
        }
        reads
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_over_eight_shards_is_never_seen_half_applied() {
    let srv = Server::start().await;
    let keys = keys_in_distinct_shards(&srv, "k", 8);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(srv.client().await, keys.clone(), stop.clone());
    let mut w = srv.client().await;
    let script = redis::Script::new(
        "for i, k in ipairs(KEYS) do redis.call('SET', k, ARGV[1]) end return #KEYS",
    );
    for round in 1..=300 {
        let mut inv = script.prepare_invoke();
        for k in &keys {
            inv.key(k);
        }
        let n: i64 = inv.arg(round).invoke_async(&mut w).await.expect("script");
        assert_eq!(n, 8);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.await.expect("reader") > 0);
    let last: Vec<String> = q(&mut w, &["MGET", &keys[0], &keys[7]]).await;
    assert_eq!(last, ["300", "300"]);
}

/// Keys built inside the script (the two-bucket counter's `KEYS[1] .. ':' .. window`):
/// the first run finds out, starts again over every shard, and every later
/// run holds every shard from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_over_undeclared_keys_is_never_seen_half_applied() {
    let srv = Server::start().await;
    let keys: Vec<String> = (1..=8).map(|i| format!("base:{i}")).collect();
    let shards: HashSet<usize> = keys
        .iter()
        .map(|k| srv.state().store.shard_of(k.as_bytes()))
        .collect();
    assert!(shards.len() > 1, "the keys must span shards");
    let stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(srv.client().await, keys.clone(), stop.clone());
    let mut w = srv.client().await;
    let script = redis::Script::new(
        "for i = 1, 8 do redis.call('SET', KEYS[1] .. ':' .. i, ARGV[1]) end return 8",
    );
    for round in 1..=300 {
        let n: i64 = script
            .key("base")
            .arg(round)
            .invoke_async(&mut w)
            .await
            .expect("script");
        assert_eq!(n, 8);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.await.expect("reader") > 0);
    let last: Vec<String> = q(&mut w, &["MGET", &keys[0], &keys[7]]).await;
    assert_eq!(last, ["300", "300"]);
    let cached = srv
        .state()
        .scripts
        .get(script.get_hash().as_bytes())
        .expect("cached");
    assert!(
        cached.undeclared(),
        "remembered as reaching undeclared keys"
    );
}

/// A script that writes a declared key and then reaches an undeclared one
/// cannot start again: it takes the other shard as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_key_after_a_write_is_taken_too() {
    let srv = Server::start().await;
    let keys = keys_in_distinct_shards(&srv, "w", 2);
    let mut r = srv.raw().await;
    let script = "redis.call('SET', KEYS[1], 'a') redis.call('SET', ARGV[1], 'b') \
                  return redis.call('MGET', KEYS[1], ARGV[1])";
    assert_eq!(
        r.call(&["EVAL", script, "1", &keys[0], &keys[1]]).await,
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_run_inside_transactions() {
    let srv = Server::start().await;
    let mut con = srv.client().await;
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("SET")
        .arg("tx:a")
        .arg(1)
        .ignore()
        .cmd("EVAL")
        .arg("return redis.call('INCR', KEYS[1]) + redis.call('INCR', KEYS[1] .. ':b')")
        .arg(1)
        .arg("tx:a")
        .cmd("GET")
        .arg("tx:a:b");
    let (sum, b): (i64, i64) = pipe.query_async(&mut con).await.expect("EXEC");
    assert_eq!((sum, b), (3, 1));
}

/// A script past --lua-time-limit makes other clients' commands BUSY until
/// SCRIPT KILL stops it; the killed script's caller gets Redis's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_scripts_answer_busy_and_script_kill_stops_them() {
    let srv = Server::start_with(|c| c.lua_time_limit = 50).await;
    let mut runner = srv.raw().await;
    runner
        .send(&encode_words(&["EVAL", "while true do end", "0"]))
        .await;
    let mut other = srv.raw().await;
    let mut busy = None;
    for _ in 0..500 {
        let reply = other.call(&["PING"]).await;
        if reply.starts_with("-BUSY") {
            busy = Some(reply);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        busy.as_deref(),
        Some("-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n")
    );
    assert_eq!(other.call(&["SCRIPT", "KILL"]).await, "+OK\r\n");
    let killed = runner.reply_text().await;
    assert!(
        killed.starts_with("-ERR Script killed by user with SCRIPT KILL"),
        "{killed}"
    );
    assert_eq!(other.call(&["PING"]).await, "+PONG\r\n");
    assert_eq!(
        other.call(&["SCRIPT", "KILL"]).await,
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
}
