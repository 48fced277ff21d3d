//! DUMP, RESTORE and MIGRATE between two servers started in-process, each
//! on its own manual clock: every kind of key moves whole, limiter usage
//! included; hostile payloads and targets are refused without loss.

use std::time::{Duration, Instant};

use redis::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{cmd, q, q_err, Server, START_SECS};
use turnstile::Nanos;

/// Limiter keys longer than 16 bytes (40, 129 and 300), which compact
/// records hold whole.
const LONG_WINDOW: &str = "window:user:0000000000000000000000000007";
const LONG_SLIDING: &str = "sliding:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaz";
const LONG_GCRA: &str = "gcra:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbz";

/// Every kind of value a key can hold, made by commands on `con`.
const KEYS: &[&[&str]] = &[
    &["SET", "str", "hello\r\nworld"],
    &["HSET", "hash", "f", "v", "g", "w"],
    &["ZADD", "zset", "1.5", "a", "-2", "b"],
    &["RPUSH", "list", "x", "y", "z"],
    &["RL.ALLOW", "window", "10", "60", "COST", "4"],
    &[
        "RL.ALLOW", "sliding", "10", "60", "ALGO", "sliding", "COST", "3",
    ],
    &["RL.ALLOW", "gcra", "10", "60", "ALGO", "gcra", "COST", "6"],
    &[
        "RL.ALLOW", "fixed", "10", "60", "ALGO", "fixed", "COST", "2",
    ],
    &["RL.ALLOW", "log", "10", "60", "ALGO", "log", "COST", "5"],
    &[
        "RL.ALLOW", "month", "1000", "1mo", "ALGO", "fixed", "COST", "420",
    ],
    &["RL.CHARGE", "overdraft", "10", "60", "25"],
    &["RL.ACQUIRE", "lease", "5", "30", "COST", "2"],
    &["RL.ALLOW", "blocked", "1", "60", "BLOCK", "30"],
    &["RL.ALLOW", "blocked", "1", "60", "BLOCK", "30"],
    &["RL.ALLOW", LONG_WINDOW, "10", "60", "COST", "5"],
    &[
        "RL.ALLOW",
        LONG_SLIDING,
        "10",
        "60",
        "ALGO",
        "sliding",
        "COST",
        "2",
    ],
    &[
        "RL.ALLOW", LONG_GCRA, "10", "60", "ALGO", "gcra", "COST", "7",
    ],
];

/// What each limiter key has left, asked the same way on either server.
const PEEKS: &[&[&str]] = &[
    &["RL.PEEK", "window", "10", "60"],
    &["RL.PEEK", "sliding", "10", "60", "ALGO", "sliding"],
    &["RL.PEEK", "gcra", "10", "60", "ALGO", "gcra"],
    &["RL.PEEK", "fixed", "10", "60", "ALGO", "fixed"],
    &["RL.PEEK", "log", "10", "60", "ALGO", "log"],
    &["RL.PEEK", "month", "1000", "1mo", "ALGO", "fixed"],
    &["RL.PEEK", "overdraft", "10", "60"],
    &["RL.PEEK", "blocked", "1", "60"],
    &["RL.PEEK", LONG_WINDOW, "10", "60"],
    &["RL.PEEK", LONG_SLIDING, "10", "60", "ALGO", "sliding"],
    &["RL.PEEK", LONG_GCRA, "10", "60", "ALGO", "gcra"],
];

async fn fill(con: &mut redis::aio::MultiplexedConnection) {
    for c in KEYS {
        let _: Value = q(con, c).await;
    }
}

async fn dump(con: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<Vec<u8>> {
    q(con, &["DUMP", key]).await
}

async fn restore(
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
    ttl: &str,
    payload: &[u8],
    more: &[&str],
) -> redis::RedisResult<Value> {
    let mut c = cmd(&["RESTORE", key, ttl]);
    c.arg(payload);
    for m in more {
        c.arg(*m);
    }
    c.query_async(con).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dump_and_restore_carry_every_kind_of_key_across_clocks() {
    let a = Server::start().await;
    // The target's clock is 7 s behind the source's when it restores.
    let b = Server::start_at(Nanos((START_SECS - 7) * Nanos::PER_SEC), |_| {}).await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    a.advance_ms(1_500);
    fill(&mut ca).await;
    for c in KEYS {
        let key = c[1];
        let payload = dump(&mut ca, key).await.expect("a live key dumps");
        let ttl: i64 = q(&mut ca, &["PTTL", key]).await;
        let ttl = ttl.max(0).to_string();
        let _: Value = restore(&mut cb, key, &ttl, &payload, &["REPLACE"])
            .await
            .unwrap();
        // The same value, to the byte: DUMP of the copy is the original's.
        assert_eq!(dump(&mut cb, key).await, Some(payload), "{key}");
        let t: String = q(&mut cb, &["TYPE", key]).await;
        let want: String = q(&mut ca, &["TYPE", key]).await;
        assert_eq!(t, want);
    }
    // At one instant on both clocks, every limiter answers alike.
    b.advance_ms(9_500);
    a.advance_ms(1_000);
    for p in PEEKS {
        let on_a: Vec<i64> = q(&mut ca, p).await;
        let on_b: Vec<i64> = q(&mut cb, p).await;
        assert_eq!(on_a, on_b, "{p:?}");
    }
    let used: Vec<i64> = q(
        &mut cb,
        &["RL.PEEK", "month", "1000", "1mo", "ALGO", "fixed"],
    )
    .await;
    // PEEK's remaining is after a request of one unit.
    assert_eq!(used[2], 1000 - 420 - 1, "the month's usage kept exactly");
    let acquired: Vec<Value> = q(&mut cb, &["RL.ACQUIRE", "lease", "5", "30", "COST", "4"]).await;
    assert_eq!(
        acquired[0],
        Value::Int(0),
        "the two units leased at the source are held"
    );
}

/// `redis-cli --cluster fix` finds a key on both nodes when a crash cut a
/// move short, and replaces the importing copy only if DEBUG DIGEST-VALUE
/// says the two are equal: equal values, limiter state included, give
/// equal digests on two servers; a changed one does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_digest_value_is_equal_for_equal_values_on_two_servers() {
    let a = Server::start().await;
    let b = Server::start().await;
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    fill(&mut ca).await;
    let mut keys: Vec<&str> = KEYS.iter().map(|c| c[1]).collect();
    keys.dedup();
    for &key in &keys {
        let payload = dump(&mut ca, key).await.unwrap();
        let _: Value = restore(&mut cb, key, "0", &payload, &[]).await.unwrap();
    }
    let mut args = vec!["DEBUG", "DIGEST-VALUE"];
    args.extend(&keys);
    args.push("absent");
    let on_a: Vec<String> = q(&mut ca, &args).await;
    let on_b: Vec<String> = q(&mut cb, &args).await;
    assert_eq!(on_a, on_b);
    assert_eq!(on_a.last().unwrap(), &"0".repeat(40), "an absent key");
    assert!(on_a[..keys.len()].iter().all(|d| d.len() == 40
        && d.chars().all(|c| c.is_ascii_hexdigit())
        && d != &"0".repeat(40)));
    let distinct: std::collections::HashSet<&String> = on_a[..keys.len()].iter().collect();
    assert_eq!(
        distinct.len(),
        keys.len(),
        "different values, different digests"
    );
    // One more admission on one side: the copies differ now.
    let _: Value = q(&mut cb, &["RL.ALLOW", "window", "10", "60"]).await;
    let after: Vec<String> = q(&mut cb, &["DEBUG", "DIGEST-VALUE", "window"]).await;
    assert_ne!(
        after[0],
        on_a[keys.iter().position(|&k| k == "window").unwrap()]
    );
    // Status replies, as Redis sends them; other subcommands are unknown.
    let mut raw = a.raw().await;
    assert_eq!(
        raw.call(&["DEBUG", "DIGEST-VALUE", "absent"]).await,
        format!("*1\r\n+{}\r\n", "0".repeat(40))
    );
    assert_eq!(
        q_err(&mut ca, &["DEBUG", "SEGFAULT"]).await,
        "ERR unknown subcommand 'SEGFAULT'. Try DEBUG HELP."
    );
}

/// The target's count of connections it accepted, from INFO.
async fn accepted(con: &mut redis::aio::MultiplexedConnection) -> i64 {
    let info: String = q(con, &["INFO", "stats"]).await;
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .expect("INFO stats has it")
        .trim()
        .parse()
        .unwrap()
}

/// MIGRATE keeps its connection to a target for the next call, as Redis
/// does (redis-cli sends one per slot with keys); one the target closed
/// meanwhile is replaced without the caller seeing an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_keeps_its_connection_and_replaces_a_closed_one() {
    let a = Server::start().await;
    let b = Server::start().await;
    let (ip, port) = (b.addr.ip().to_string(), b.addr.port().to_string());
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    for k in ["k1", "k2", "k3"] {
        let _: Value = q(&mut ca, &["RL.ALLOW", k, "10", "60"]).await;
    }
    let before = accepted(&mut cb).await;
    for k in ["k1", "k2"] {
        let ok: String = q(&mut ca, &["MIGRATE", &ip, &port, k, "0", "1000"]).await;
        assert_eq!(ok, "OK");
    }
    assert_eq!(
        accepted(&mut cb).await - before,
        1,
        "two moves, one connection"
    );
    // The target drops every other client, the kept connection with them.
    let killed: i64 = q(
        &mut cb,
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    )
    .await;
    assert_eq!(killed, 1);
    let ok: String = q(&mut ca, &["MIGRATE", &ip, &port, "k3", "0", "1000"]).await;
    assert_eq!(ok, "OK");
    let moved: i64 = q(&mut cb, &["EXISTS", "k1", "k2", "k3"]).await;
    assert_eq!(moved, 3);
    let left: i64 = q(&mut ca, &["EXISTS", "k1", "k2", "k3"]).await;
    assert_eq!(left, 0);
    assert_eq!(
        accepted(&mut cb).await - before,
        2,
        "a new connection after the kill"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_answers_as_redis_does() {
    let a = Server::start().await;
    let mut c = a.client().await;
    let _: () = q(&mut c, &["SET", "k", "v"]).await;
    let payload = dump(&mut c, "k").await.unwrap();
    assert_eq!(dump(&mut c, "nokey").await, None);
    let err = |r: redis::RedisResult<Value>| crate::common::err_text(&r.unwrap_err());
    assert_eq!(
        err(restore(&mut c, "k", "0", &payload, &[]).await),
        "BUSYKEY Target key name already exists."
    );
    assert_eq!(
        err(restore(&mut c, "n", "-1", &payload, &[]).await),
        "ERR Invalid TTL value, must be >= 0"
    );
    assert_eq!(
        err(restore(&mut c, "n", "x", &payload, &[]).await),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        err(restore(&mut c, "n", "0", &payload, &["IDLETIME", "-1"]).await),
        "ERR Invalid IDLETIME value, must be >= 0"
    );
    assert_eq!(
        err(restore(&mut c, "n", "0", &payload, &["FREQ", "256"]).await),
        "ERR Invalid FREQ value, must be >= 0 and <= 255"
    );
    assert_eq!(
        err(restore(&mut c, "n", "0", &payload, &["IDLETIME", "1", "FREQ", "1"]).await),
        "ERR syntax error"
    );
    // A TTL, relative and absolute; an absolute one already past only
    // deletes (with REPLACE), as in Redis.
    let _: Value = restore(&mut c, "t", "5000", &payload, &["IDLETIME", "3"])
        .await
        .unwrap();
    let pttl: i64 = q(&mut c, &["PTTL", "t"]).await;
    assert_eq!(pttl, 5000);
    let at = (START_SECS * 1000 + 9_000).to_string();
    let _: Value = restore(&mut c, "t", &at, &payload, &["REPLACE", "ABSTTL"])
        .await
        .unwrap();
    let pttl: i64 = q(&mut c, &["PTTL", "t"]).await;
    assert_eq!(pttl, 9_000);
    let _: Value = restore(&mut c, "t", "1", &payload, &["REPLACE", "ABSTTL"])
        .await
        .unwrap();
    let n: i64 = q(&mut c, &["EXISTS", "t"]).await;
    assert_eq!(n, 0);
    // A TTL past the clock's range is kept as far as it goes.
    let _: Value = restore(&mut c, "far", "9223372036854775807", &payload, &[])
        .await
        .unwrap();
    let v: String = q(&mut c, &["GET", "far"]).await;
    assert_eq!(v, "v");
    let info: Value = q(&mut c, &["COMMAND", "INFO", "restore-asking"]).await;
    assert!(format!("{info:?}").contains("asking"), "{info:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_every_payload_it_did_not_write() {
    let a = Server::start().await;
    let mut c = a.client().await;
    fill(&mut c).await;
    const WRONG: &str = "ERR DUMP payload version or checksum are wrong";
    let refused = |r: redis::RedisResult<Value>| crate::common::err_text(&r.unwrap_err());
    // Redis 7.0.15's own DUMP of the string "bar".
    let redis = b"\x00\x03bar\n\x00\xe6\xbeI`\xeef\xfd\x17";
    assert_eq!(refused(restore(&mut c, "r", "0", redis, &[]).await), WRONG);
    for key in ["window", "log", "hash", "lease", "blocked", "month"] {
        let payload = dump(&mut c, key).await.unwrap();
        for cut in 0..payload.len() {
            assert_eq!(
                refused(restore(&mut c, "x", "0", &payload[..cut], &[]).await),
                WRONG,
                "{key} cut at {cut}"
            );
        }
        for bit in 0..payload.len() * 8 {
            let mut bad = payload.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                refused(restore(&mut c, "x", "0", &bad, &[]).await),
                WRONG,
                "{key} bit {bit}"
            );
        }
    }
    let n: i64 = q(&mut c, &["EXISTS", "x", "r"]).await;
    assert_eq!(n, 0, "nothing was written");
    let pong: String = q(&mut c, &["PING"]).await;
    assert_eq!(pong, "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_moves_keys_with_their_usage() {
    let a = Server::start().await;
    let b = Server::start_with(|c| c.requirepass = Some("sesame".into())).await;
    let (ip, port) = (b.addr.ip().to_string(), b.addr.port().to_string());
    let mut ca = a.client().await;
    let mut cb = crate::common::connect_url(&b.url(":sesame@", ""))
        .await
        .unwrap();
    fill(&mut ca).await;
    let migrate = |extra: &[&str]| {
        let mut c = cmd(&["MIGRATE", &ip, &port]);
        for e in extra {
            c.arg(*e);
        }
        c
    };
    // Without AUTH, the target's refusal, and the key stays.
    let e = migrate(&["window", "0", "1000"])
        .query_async::<Value>(&mut ca)
        .await
        .unwrap_err();
    assert_eq!(
        crate::common::err_text(&e),
        "ERR Target instance replied with error: NOAUTH Authentication required."
    );
    let ok: String = migrate(&["window", "0", "1000", "AUTH", "sesame"])
        .query_async(&mut ca)
        .await
        .unwrap();
    assert_eq!(ok, "OK");
    let n: i64 = q(&mut ca, &["EXISTS", "window"]).await;
    assert_eq!(n, 0, "moved, not copied");
    let peek: Vec<i64> = q(&mut cb, &["RL.PEEK", "window", "10", "60"]).await;
    assert_eq!(peek[2], 10 - 4 - 1, "four of ten used before the move");
    // COPY keeps the source; the same key again is BUSYKEY unless REPLACE.
    let ok: String = migrate(&["gcra", "0", "1000", "COPY", "AUTH2", "default", "sesame"])
        .query_async(&mut ca)
        .await
        .unwrap();
    assert_eq!(ok, "OK");
    let e = migrate(&["gcra", "0", "1000", "AUTH", "sesame"])
        .query_async::<Value>(&mut ca)
        .await
        .unwrap_err();
    assert_eq!(
        crate::common::err_text(&e),
        "ERR Target instance replied with error: BUSYKEY Target key name already exists."
    );
    let ok: String = migrate(&[
        "", "0", "1000", "REPLACE", "AUTH", "sesame", "KEYS", "gcra", "nokey", "str", "hash",
    ])
    .query_async(&mut ca)
    .await
    .unwrap();
    assert_eq!(ok, "OK");
    let n: i64 = q(&mut ca, &["EXISTS", "gcra", "str", "hash"]).await;
    assert_eq!(n, 0);
    // Long limiter keys move with their usage.
    let ok: String = migrate(&[
        "",
        "0",
        "1000",
        "AUTH",
        "sesame",
        "KEYS",
        LONG_WINDOW,
        LONG_SLIDING,
        LONG_GCRA,
    ])
    .query_async(&mut ca)
    .await
    .unwrap();
    assert_eq!(ok, "OK");
    let peek: Vec<i64> = q(&mut cb, &["RL.PEEK", LONG_WINDOW, "10", "60"]).await;
    assert_eq!(peek[2], 10 - 5 - 1, "five of ten used before the move");
    let peek: Vec<i64> = q(
        &mut cb,
        &["RL.PEEK", LONG_SLIDING, "10", "60", "ALGO", "sliding"],
    )
    .await;
    assert_eq!(peek[2], 10 - 2 - 1, "two of ten used before the move");
    let s: String = q(&mut cb, &["GET", "str"]).await;
    assert_eq!(s, "hello\r\nworld");
    let nokey: String = migrate(&["nokey", "0", "1000"])
        .query_async(&mut ca)
        .await
        .unwrap();
    assert_eq!(nokey, "NOKEY");
    let e = migrate(&["list", "3", "1000"])
        .query_async::<Value>(&mut ca)
        .await
        .unwrap_err();
    assert_eq!(crate::common::err_text(&e), "ERR DB index is out of range");
    // The target's TTL is the source's time left.
    let _: () = q(&mut ca, &["SET", "ttl", "v", "PX", "60000"]).await;
    let _: String = migrate(&["ttl", "0", "1000", "AUTH", "sesame"])
        .query_async(&mut ca)
        .await
        .unwrap();
    let pttl: i64 = q(&mut cb, &["PTTL", "ttl"]).await;
    assert_eq!(pttl, 60_000);
    // A dead target: IOERR, and the key stays.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let e = q_err(
        &mut ca,
        &["MIGRATE", "127.0.0.1", &dead, "list", "0", "1000"],
    )
    .await;
    assert_eq!(e, "IOERR error or timeout writing to target instance");
    let n: i64 = q(&mut ca, &["LLEN", "list"]).await;
    assert_eq!(n, 3);
}

/// A listener that accepts, reads, and answers `answer` (or nothing).
async fn target(answer: Option<&'static [u8]>) -> (u16, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let Ok((mut s, _)) = l.accept().await else {
            return;
        };
        let mut buf = vec![0u8; 1 << 16];
        let _ = s.read(&mut buf).await;
        if let Some(a) = answer {
            let _ = s.write_all(a).await;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    (port, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_to_a_silent_or_garbled_target_keeps_every_key() {
    let a = Server::start().await;
    let mut c = a.client().await;
    fill(&mut c).await;
    let others = crate::common::keys_in_distinct_shards(&a, "other", 2);
    let other = others
        .iter()
        .find(|k| a.state().store.shard_of(k.as_bytes()) != a.state().store.shard_of(b"window"))
        .unwrap()
        .clone();
    let _: () = q(&mut c, &["SET", &other, "1"]).await;
    for key in ["window", "log", "lease", "blocked", "zset", "list"] {
        let (port, task) = target(None).await;
        let port = port.to_string();
        let mut mc = a.client().await;
        let started = Instant::now();
        let pending = tokio::spawn(async move {
            cmd(&["MIGRATE", "127.0.0.1", &port, key, "0", "300"])
                .query_async::<Value>(&mut mc)
                .await
        });
        // While MIGRATE waits, keys in other shards are served.
        let v: String = q(&mut c, &["GET", &other]).await;
        assert_eq!(v, "1");
        let e = pending.await.unwrap().unwrap_err();
        assert_eq!(
            crate::common::err_text(&e),
            "IOERR error or timeout reading to target instance"
        );
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(3),
            "{took:?}"
        );
        task.abort();
        // The key is still here, and its lock was let go.
        let n: i64 = q(&mut c, &["EXISTS", key]).await;
        assert_eq!(n, 1, "{key}");
        let t: String = q(&mut c, &["TYPE", key]).await;
        assert_ne!(t, "none");
    }
    for garbage in [
        &b"garbage\r\n"[..],
        b":5\r\n",
        b"$3\r\nabc\r\n",
        b"+OK",
        b"\x00\xff\r\n",
    ] {
        let (port, task) = target(Some(garbage)).await;
        let e = q_err(
            &mut c,
            &[
                "MIGRATE",
                "127.0.0.1",
                &port.to_string(),
                "hash",
                "0",
                "300",
            ],
        )
        .await;
        assert_eq!(
            e, "IOERR error or timeout reading to target instance",
            "{garbage:?}"
        );
        task.abort();
        let n: i64 = q(&mut c, &["EXISTS", "hash"]).await;
        assert_eq!(n, 1);
    }
}

/// While one client migrates a window key, another hammers RL.ALLOW on it
/// at the source: the admissions at the source before the move and at the
/// target after it never add up to more than the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_around_a_migration_never_exceed_the_limit() {
    const LIMIT: i64 = 500;
    let limit = LIMIT.to_string();
    for round in 0..5 {
        let a = Server::start().await;
        let b = Server::start().await;
        let key = format!("hot{round}");
        let (ip, port) = (b.addr.ip().to_string(), b.addr.port().to_string());
        let mut hammer = a.client().await;
        let mut mover = a.client().await;
        let mut first: Vec<i64> = Vec::new();
        // Some usage before the move starts.
        for _ in 0..100 {
            let r: Vec<i64> = q(&mut hammer, &["RL.ALLOW", &key, &limit, "60"]).await;
            first.push(r[0]);
        }
        let (k2, l2) = (key.clone(), limit.clone());
        let hammering = tokio::spawn(async move {
            let mut admitted = 0;
            for _ in 0..300 {
                let r: Vec<i64> = q(&mut hammer, &["RL.ALLOW", &k2, &l2, "60"]).await;
                admitted += r[0];
            }
            admitted
        });
        tokio::task::yield_now().await;
        let ok: String = cmd(&["MIGRATE", &ip, &port, &key, "0", "2000"])
            .query_async(&mut mover)
            .await
            .unwrap();
        assert_eq!(ok, "OK");
        let during = hammering.await.unwrap();
        // What the source admitted after the move went to a new key there.
        let mut ca = a.client().await;
        let peek: Vec<i64> = q(&mut ca, &["RL.PEEK", &key, &limit, "60"]).await;
        // PEEK's remaining is after a request of one unit.
        let fresh = LIMIT - 1 - peek[2];
        let at_source = first.iter().sum::<i64>() + during - fresh;
        let mut cb = b.client().await;
        let mut at_target = 0;
        loop {
            let r: Vec<i64> = q(&mut cb, &["RL.ALLOW", &key, &limit, "60"]).await;
            if r[0] == 0 {
                break;
            }
            at_target += 1;
        }
        assert_eq!(at_source + at_target, LIMIT, "round {round}");
    }
}
