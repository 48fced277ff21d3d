//! Replication in-process: a primary and its replicas on loopback, each on
//! its own manual clock (moved together), driven by the `redis` crate. The
//! replicas' keyspaces are compared with the primary's entry by entry.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::*;
use turnstile::clock::Clock;
use turnstile::replication::Link;
use turnstile::store::{Entry, SmallBytes, Value};

async fn replica_of(primary: &Server) -> Server {
    let port = primary.addr.port();
    Server::start_with(|c| c.replicaof = Some(("127.0.0.1".into(), port))).await
}

/// Every live entry, by key.
fn keyspace(srv: &Server) -> BTreeMap<Vec<u8>, Entry> {
    let store = &srv.state().store;
    let now = srv.clock.now();
    let mut all = BTreeMap::new();
    for i in 0..store.shard_count() {
        store.for_each_in_shard(i, now, |k, e| {
            all.insert(k.to_vec(), e.clone());
        });
    }
    all
}

/// Waits until every replica's link is up and it has applied the whole
/// stream the primary has written so far.
async fn in_sync(primary: &Server, replicas: &[&Server]) {
    eventually("replicas caught up with the primary", || {
        let end = primary.state().store.effects.offset();
        replicas.iter().all(|r| {
            r.state().replication.link() == Link::Up && r.state().store.effects.offset() == end
        })
    })
    .await;
}

fn advance_all(servers: &[&Server], ms: u64) {
    for s in servers {
        s.advance_ms(ms);
    }
}

fn assert_same(primary: &Server, replica: &Server) {
    let (p, r) = (keyspace(primary), keyspace(replica));
    assert_eq!(p.len(), r.len(), "key counts differ");
    for (k, e) in &p {
        assert_eq!(r.get(k), Some(e), "key {:?}", String::from_utf8_lossy(k));
    }
}

/// One round of writes over every kind of state.
async fn load(con: &mut redis::aio::MultiplexedConnection, round: usize) {
    for i in 0..40 {
        for algo in ["window", "sliding", "log", "gcra", "fixed"] {
            let key = format!("rl:{algo}:{}", i % 7);
            let _: redis::Value = q(con, &["RL.ALLOW", &key, "5", "10s", "ALGO", algo]).await;
        }
        let _: redis::Value = q(
            con,
            &["CL.THROTTLE", &format!("cell:{}", i % 3), "4", "10", "60"],
        )
        .await;
        let _: redis::Value = q(
            con,
            &[
                "RL.ALLOWMANY",
                "LIMIT",
                &format!("m:a:{}", i % 4),
                "3",
                "1m",
                "LIMIT",
                &format!("m:b:{}", i % 5),
                "9",
                "1h",
            ],
        )
        .await;
    }
    let _: () = q(con, &["SET", &format!("s:{round}"), "v", "EX", "100"]).await;
    let _: () = q(con, &["SET", "plain", &round.to_string()]).await;
    let _: i64 = q(con, &["INCR", "counter"]).await;
    let _: i64 = q(con, &["PEXPIRE", "counter", "50000"]).await;
    let _: i64 = q(con, &["RPUSH", "list", "a", "b", &round.to_string()]).await;
    let _: i64 = q(
        con,
        &["ZADD", "zs", &round.to_string(), &format!("m{round}")],
    )
    .await;
    let _: i64 = q(con, &["HSET", "h", "f", &round.to_string(), "g", "x"]).await;
    let _: redis::Value = q(con, &["RL.ACQUIRE", "conc", "3", "30s"]).await;
    let _: i64 = q(
        con,
        &[
            "EVAL",
            "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('INCR', KEYS[2])",
            "2",
            "script:s",
            "script:n",
            "x",
        ],
    )
    .await;
    let _: i64 = q(con, &["DEL", &format!("s:{}", round.saturating_sub(1))]).await;
    let _: redis::Value = q(con, &["RL.RESET", "rl:window:0"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_hold_every_key_as_the_primary_does() {
    let primary = Server::start().await;
    let mut con = primary.client().await;
    // Keys written before any replica: the copy brings them.
    load(&mut con, 0).await;
    let a = replica_of(&primary).await;
    let b = replica_of(&primary).await;
    in_sync(&primary, &[&a, &b]).await;
    assert_same(&primary, &a);
    assert_same(&primary, &b);
    for round in 1..4 {
        load(&mut con, round).await;
        advance_all(&[&primary, &a, &b], 3_000);
        if round == 2 {
            // Expiry on the primary reaches the replicas as deletions.
            advance_all(&[&primary, &a, &b], 60_000);
            assert!(primary.sweep() > 0);
            let _: () = q(&mut con, &["FLUSHALL"]).await;
            load(&mut con, round).await;
        }
    }
    in_sync(&primary, &[&a, &b]).await;
    assert!(keyspace(&primary).len() > 40);
    assert_same(&primary, &a);
    assert_same(&primary, &b);
    // The replicas answer reads from what they hold.
    let mut ra = a.client().await;
    let got: Option<String> = q(&mut ra, &["GET", "plain"]).await;
    assert_eq!(got.as_deref(), Some("3"));
    let peek: Vec<i64> = q(
        &mut ra,
        &["RL.PEEK", "rl:gcra:1", "5", "10s", "ALGO", "gcra"],
    )
    .await;
    let mut con_b = primary.client().await;
    let on_primary: Vec<i64> = q(
        &mut con_b,
        &["RL.PEEK", "rl:gcra:1", "5", "10s", "ALGO", "gcra"],
    )
    .await;
    assert_eq!(peek, on_primary);
    let ttl: i64 = q(&mut ra, &["PTTL", "counter"]).await;
    let ttl_p: i64 = q(&mut con_b, &["PTTL", "counter"]).await;
    assert_eq!(ttl, ttl_p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_link_resumes_from_the_backlog() {
    let primary = Server::start().await;
    let replica = replica_of(&primary).await;
    let mut con = primary.client().await;
    load(&mut con, 0).await;
    in_sync(&primary, &[&replica]).await;
    let repl = &primary.state().replication;
    assert_eq!(repl.full_syncs.load(Ordering::Relaxed), 1);
    let id = repl.replicas.lock()[0].id;
    let killed: i64 = q(&mut con, &["CLIENT", "KILL", "ID", &id.to_string()]).await;
    assert_eq!(killed, 1);
    // Written while the link is down: the backlog keeps it.
    load(&mut con, 1).await;
    in_sync(&primary, &[&replica]).await;
    assert_eq!(repl.partial_ok.load(Ordering::Relaxed), 1);
    assert_eq!(repl.full_syncs.load(Ordering::Relaxed), 1);
    assert_same(&primary, &replica);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_larger_than_the_backlog_takes_a_full_copy() {
    let primary = Server::start_with(|c| c.repl_backlog_size = 16 * 1024).await;
    let replica = replica_of(&primary).await;
    let mut con = primary.client().await;
    load(&mut con, 0).await;
    in_sync(&primary, &[&replica]).await;
    let repl = &primary.state().replication;
    let id = repl.replicas.lock()[0].id;
    // A password the primary refuses keeps the replica out until the gap
    // is written, however slowly the machine runs the pipeline below (its
    // one-second retry alone was a race under a loaded CI).
    let mut rcon = replica.client().await;
    let _: () = q(&mut rcon, &["CONFIG", "SET", "masterauth", "wrong"]).await;
    let mut pipe = redis::pipe();
    pipe.cmd("CLIENT").arg("KILL").arg("ID").arg(id);
    let big = "x".repeat(1000);
    for i in 0..40 {
        pipe.cmd("SET").arg(format!("big:{i}")).arg(&big).ignore();
    }
    let (killed,): (i64,) = pipe.query_async(&mut con).await.unwrap();
    assert_eq!(killed, 1);
    let _: () = q(&mut rcon, &["CONFIG", "SET", "masterauth", ""]).await;
    in_sync(&primary, &[&replica]).await;
    assert_eq!(repl.full_syncs.load(Ordering::Relaxed), 2);
    assert_eq!(repl.partial_err.load(Ordering::Relaxed), 1);
    assert_same(&primary, &replica);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_refuses_writes_and_wait_counts_acknowledgements() {
    let primary = Server::start().await;
    let a = replica_of(&primary).await;
    let b = replica_of(&primary).await;
    in_sync(&primary, &[&a, &b]).await;
    let mut ra = a.client().await;
    for cmd in [
        &["SET", "k", "v"][..],
        &["RL.ALLOW", "k", "5", "1m"],
        &["INCR", "n"],
        &["DEL", "k"],
    ] {
        assert_eq!(
            q_err(&mut ra, cmd).await,
            "READONLY You can't write against a read only replica.",
            "{cmd:?}"
        );
    }
    // A script may read; its writes are refused as Redis refuses them.
    let e = q_err(
        &mut ra,
        &["EVAL", "return redis.call('SET', KEYS[1], 'v')", "1", "k"],
    )
    .await;
    assert!(
        e.contains("READONLY You can't write against a read only replica."),
        "{e}"
    );
    let n: i64 = q(
        &mut ra,
        &["EVAL", "return redis.call('EXISTS', KEYS[1])", "1", "k"],
    )
    .await;
    assert_eq!(n, 0);
    let e = q_err(&mut ra, &["WAIT", "1", "10"]).await;
    assert!(
        e.starts_with("ERR WAIT cannot be used with replica instances."),
        "{e}"
    );

    let mut con = primary.client().await;
    let _: redis::Value = q(&mut con, &["RL.ALLOW", "user:1", "5", "1m"]).await;
    let acked: i64 = q(&mut con, &["WAIT", "2", "10000"]).await;
    assert_eq!(acked, 2);
    // More replicas than there are: the timeout answers how many did.
    let _: redis::Value = q(&mut con, &["RL.ALLOW", "user:1", "5", "1m"]).await;
    let acked: i64 = q(&mut con, &["WAIT", "3", "200"]).await;
    assert_eq!(acked, 2);
    let role: Vec<redis::Value> = q(&mut ra, &["ROLE"]).await;
    assert_eq!(text(&role[0]), "slave");
    assert_eq!(text(&role[3]), "connected");
    let role: Vec<redis::Value> = q(&mut con, &["ROLE"]).await;
    assert_eq!(text(&role[0]), "master");
    let info: String = q(&mut con, &["INFO", "replication"]).await;
    assert!(info.contains("connected_slaves:2"), "{info}");
    assert!(info.contains("slave1:ip=127.0.0.1,port="), "{info}");
    let info: String = q(&mut ra, &["INFO", "replication"]).await;
    assert!(info.contains("role:slave"), "{info}");
    assert!(info.contains("master_link_status:up"), "{info}");
    assert!(
        info.contains(&format!("master_port:{}", primary.addr.port())),
        "{info}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_takes_the_others_with_a_partial_resync() {
    let primary = Server::start().await;
    let a = replica_of(&primary).await;
    let b = replica_of(&primary).await;
    let mut con = primary.client().await;
    load(&mut con, 0).await;
    in_sync(&primary, &[&a, &b]).await;
    // What Sentinel does at failover.
    let mut ra = a.client().await;
    let _: () = q(&mut ra, &["REPLICAOF", "NO", "ONE"]).await;
    let mut rb = b.client().await;
    let _: () = q(
        &mut rb,
        &["REPLICAOF", "127.0.0.1", &a.addr.port().to_string()],
    )
    .await;
    let _: () = q(
        &mut con,
        &["REPLICAOF", "127.0.0.1", &a.addr.port().to_string()],
    )
    .await;
    load(&mut ra, 1).await;
    in_sync(&a, &[&b, &primary]).await;
    let ra_repl = &a.state().replication;
    assert_eq!(ra_repl.partial_ok.load(Ordering::Relaxed), 2);
    assert_eq!(ra_repl.full_syncs.load(Ordering::Relaxed), 0);
    assert_same(&a, &b);
    assert_same(&a, &primary);
    let e = q_err(&mut con, &["SET", "k", "v"]).await;
    assert!(e.starts_with("READONLY"), "{e}");
}

/// A replica's full copy of a million keys while the primary keeps
/// deciding: the decisions' latency during the copy is reported (a
/// benchmark measures it properly: this shows the copy never stops them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_key_copy_while_the_primary_decides() {
    const KEYS: usize = 1_000_000;
    let primary = Server::start().await;
    let now = primary.clock.now();
    let store = &primary.state().store;
    for i in 0..KEYS {
        let key = format!("k:{i}");
        store.update(key.as_bytes(), now, |e| {
            *e = Some(Entry::with_expiry_ms(
                Value::Str(SmallBytes::from(&b"value"[..])),
                None,
            ))
        });
    }
    let mut con = primary.client().await;
    let replica = replica_of(&primary).await;
    let mut latencies = Vec::new();
    let started = Instant::now();
    let mut i = 0u64;
    while replica.state().replication.link() != Link::Up {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the copy took over 2 minutes"
        );
        let t = Instant::now();
        let _: Vec<i64> = q(
            &mut con,
            &["RL.ALLOW", &format!("d:{}", i % 1000), "100", "1m"],
        )
        .await;
        latencies.push(t.elapsed());
        i += 1;
    }
    let copy = started.elapsed();
    in_sync(&primary, &[&replica]).await;
    latencies.sort_unstable();
    let pct = |p: usize| {
        latencies
            .get(latencies.len() * p / 100)
            .copied()
            .unwrap_or_default()
    };
    println!(
        "full copy of {KEYS} keys: {copy:?}; {} decisions meanwhile, p50 {:?}, p99 {:?}, max {:?}",
        latencies.len(),
        pct(50),
        pct(99),
        latencies.last().copied().unwrap_or_default()
    );
    assert!(latencies.len() > 1, "the primary answered during the copy");
    assert_eq!(replica.state().store.len(), primary.state().store.len());
    assert_same(&primary, &replica);
}

/// What Sentinel sends a replica it promotes, and one it repoints: one
/// transaction of `SLAVEOF`, `CONFIG REWRITE` and `CLIENT KILL`s. The
/// rewrite keeps the file's comments and records the new role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_failover_transaction_runs_and_rewrites_the_config() {
    let primary = Server::start().await;
    let dir = std::env::temp_dir().join(format!("turnstile-rewrite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("turnstile.toml");
    std::fs::write(&path, "# kept\nmaxmemory = \"1gb\"\n").unwrap();
    let port = primary.addr.port();
    let config_path = path.clone();
    let replica = Server::start_with(move |c| {
        // As if read from the file (the flags' parser reads it).
        c.config = Some(config_path);
        c.maxmemory = 1 << 30;
        c.replicaof = Some(("127.0.0.1".into(), port));
    })
    .await;
    in_sync(&primary, &[&replica]).await;
    let mut con = replica.client().await;
    let _: () = q(&mut con, &["CONFIG", "SET", "timeout", "30"]).await;
    let (ok, rewritten, killed): (String, String, i64) = redis::pipe()
        .atomic()
        .cmd("SLAVEOF")
        .arg("NO")
        .arg("ONE")
        .cmd("CONFIG")
        .arg("REWRITE")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!((ok.as_str(), rewritten.as_str(), killed), ("OK", "OK", 0));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# kept\nmaxmemory = \"1gb\"\n"), "{text}");
    assert!(text.contains("timeout = 30"), "{text}");
    assert!(!text.contains("replicaof"), "{text}");
    let _: () = q(&mut con, &["REPLICAOF", "127.0.0.1", &port.to_string()]).await;
    let _: () = q(&mut con, &["CONFIG", "REWRITE"]).await;
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains(&format!("replicaof = \"127.0.0.1:{port}\"")),
        "{text}"
    );
    // Without a config file, Redis's error.
    let mut p = primary.client().await;
    let e = q_err(&mut p, &["CONFIG", "REWRITE"]).await;
    assert_eq!(e, "ERR The server is running without a config file");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--masterauth`: a replica of a primary with a password authenticates
/// first; with a wrong one its link never comes up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_authenticates_with_masterauth() {
    let primary = Server::start_with(|c| c.requirepass = Some("s3cret".into())).await;
    let port = primary.addr.port();
    let good = Server::start_with(|c| {
        c.replicaof = Some(("127.0.0.1".into(), port));
        c.masterauth = Some("s3cret".into());
    })
    .await;
    let bad = Server::start_with(|c| {
        c.replicaof = Some(("127.0.0.1".into(), port));
        c.masterauth = Some("wrong".into());
    })
    .await;
    in_sync(&primary, &[&good]).await;
    assert_ne!(bad.state().replication.link(), Link::Up);
    assert_eq!(primary.state().replication.connected(), 1);
}

/// A primary may send its copy in the same write as `+FULLRESYNC`: the
/// replica applies the bytes that came with the line at once, rather than
/// when the next bytes arrive (here: never).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_arrives_with_the_fullresync_line_is_applied() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut oks = 0;
        let mut buf = [0u8; 4096];
        // +OK to each REPLCONF, then the line and the copy's end together.
        loop {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "the replica hung up");
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen).to_string();
            while oks < text.matches("REPLCONF").count() {
                s.write_all(b"+OK\r\n").await.unwrap();
                oks += 1;
            }
            if text.contains("PSYNC") {
                let mut reply = format!("+FULLRESYNC {} 0\r\n", "a".repeat(40)).into_bytes();
                reply.extend_from_slice(&[17, 0, 0, 0, 0]);
                s.write_all(&reply).await.unwrap();
                break;
            }
        }
        // Keep the link open, silent.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(s);
    });
    let replica = Server::start_with(|c| c.replicaof = Some(("127.0.0.1".into(), port))).await;
    eventually("the replica is in sync without another byte", || {
        replica.state().replication.link() == Link::Up
    })
    .await;
    fake.abort();
}

/// A replica's connection from a raw client: `PSYNC ? -1`, and the
/// `+FULLRESYNC` line's offset.
async fn fake_replica(primary: &Server) -> (Raw, u64) {
    let mut raw = primary.raw().await;
    let line = raw.call(&["PSYNC", "?", "-1"]).await;
    let offset = line
        .trim_end()
        .rsplit(' ')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("not a FULLRESYNC line: {line:?}"));
    (raw, offset)
}

/// `repl-backlog-size` is bounded (100gb used to be accepted and allocated
/// whole, zero-filled, at the first PSYNC: the process aborted), and the
/// replica limits are settings as Redis names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_limits_are_settings_as_redis_names_them() {
    let primary = Server::start().await;
    let mut con = primary.client().await;
    let e = q_err(&mut con, &["CONFIG", "SET", "repl-backlog-size", "100gb"]).await;
    assert_eq!(
        e,
        "ERR CONFIG SET failed (possibly related to argument 'repl-backlog-size') - argument must be between 16384 and 1073741824 inclusive"
    );
    let _: () = q(&mut con, &["CONFIG", "SET", "repl-backlog-size", "1gb"]).await;
    // The largest backlog costs what the stream brings, not its size.
    let (_fake, _) = fake_replica(&primary).await;
    let info: String = q(&mut con, &["INFO", "replication"]).await;
    assert!(info.contains("repl_backlog_active:1"), "{info}");
    assert!(info.contains("repl_backlog_size:1073741824"), "{info}");
    assert_pong(&mut con).await;

    let get = |v: Vec<String>| v.get(1).cloned().unwrap_or_default();
    let limits: Vec<String> = q(&mut con, &["CONFIG", "GET", "client-output-buffer-limit"]).await;
    assert_eq!(get(limits), "normal 0 0 0 slave 268435456 67108864 60");
    let _: () = q(
        &mut con,
        &[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "replica 1mb 512kb 10",
        ],
    )
    .await;
    let limits: Vec<String> = q(&mut con, &["CONFIG", "GET", "client-output-buffer-limit"]).await;
    assert_eq!(get(limits), "normal 0 0 0 slave 1048576 524288 10");
    for (value, why) in [
        (
            "pubsub 1 2 3",
            "Invalid client class specified in buffer limit configuration.",
        ),
        (
            "replica 1 2",
            "Wrong number of arguments in buffer limit configuration.",
        ),
        (
            "replica x 2 3",
            "Error in hard, soft or soft_seconds setting in buffer limit configuration.",
        ),
    ] {
        let e = q_err(
            &mut con,
            &["CONFIG", "SET", "client-output-buffer-limit", value],
        )
        .await;
        assert_eq!(
            e,
            format!("ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - {why}")
        );
    }
    let timeout: Vec<String> = q(&mut con, &["CONFIG", "GET", "repl-timeout"]).await;
    assert_eq!(get(timeout), "60");
    let e = q_err(&mut con, &["CONFIG", "SET", "repl-timeout", "0"]).await;
    assert!(
        e.ends_with("argument must be between 1 and 2147483647 inclusive"),
        "{e}"
    );
}

/// A replica that never reads is dropped once what it has not taken
/// passes the replica class's hard limit (it used to stay attached for
/// ever, with nothing to bound it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_never_reads_is_dropped_at_the_hard_limit() {
    let primary = Server::start_with(|c| {
        c.client_output_buffer_limit.replica.hard = 1 << 20;
        c.repl_backlog_size = 64 << 20;
    })
    .await;
    let (mut fake, _) = fake_replica(&primary).await;
    let repl = &primary.state().replication;
    eventually("the replica is attached", || repl.connected() == 1).await;
    // 16 MiB of effects: more than loopback's socket buffers take.
    let mut con = primary.client().await;
    let value = "v".repeat(64 * 1024);
    let mut pipe = redis::pipe();
    for i in 0..256 {
        pipe.cmd("SET").arg(format!("big:{i}")).arg(&value).ignore();
    }
    let () = pipe.query_async(&mut con).await.unwrap();
    eventually("the replica is dropped", || repl.connected() == 0).await;
    assert!(fake.closed_within(IO_TIMEOUT).await.is_some());
    assert_pong(&mut con).await;
}

/// `repl-timeout` on the server's clock: a replica that does not
/// acknowledge goes once the timeout passes; one that acknowledges every
/// second (a real replica) stays however long the clock runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_stops_acknowledging_is_dropped_after_repl_timeout() {
    let primary = Server::start_with(|c| c.repl_timeout = 5).await;
    let real = replica_of(&primary).await;
    in_sync(&primary, &[&real]).await;
    let (mut fake, _) = fake_replica(&primary).await;
    let repl = &primary.state().replication;
    eventually("both replicas are online", || {
        let r = repl.replicas.lock();
        r.len() == 2 && r.iter().all(|a| a.online.load(Ordering::Relaxed))
    })
    .await;
    let real_id = repl
        .replicas
        .lock()
        .iter()
        .find(|a| a.port.load(Ordering::Relaxed) == u64::from(real.addr.port()))
        .map(|a| a.id)
        .unwrap();
    // Second by second, waiting each time for the real replica's
    // acknowledgement of that second.
    for _ in 0..8 {
        advance_all(&[&primary, &real], 1_000);
        let now = primary.clock.now().as_millis();
        eventually("the real replica acknowledged", || {
            repl.replicas
                .lock()
                .iter()
                .any(|a| a.id == real_id && a.acked_at_ms.load(Ordering::Relaxed) >= now)
        })
        .await;
    }
    eventually("the silent replica is dropped", || repl.connected() == 1).await;
    assert!(fake.closed_within(IO_TIMEOUT).await.is_some());
    assert_eq!(repl.replicas.lock()[0].id, real_id);
    assert_eq!(
        primary
            .state()
            .replication
            .full_syncs
            .load(Ordering::Relaxed),
        2
    );
}

/// Replicas that attach while a copy is being sent share it (they used to
/// make one each, every one pinning its own encoding of a 120 MiB key):
/// the second is told the first one's offset, and the stream from there
/// comes from the backlog, so a real replica joining it converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_attach_together_share_one_copy() {
    let primary = Server::start().await;
    let store = &primary.state().store;
    let big = (0..)
        .map(|i| format!("big:{i}"))
        .find(|k| store.shard_of(k.as_bytes()) == 0)
        .unwrap();
    let mut con = primary.client().await;
    // Bigger than loopback's socket buffers: a replica that does not read
    // is still writing the first shard's copy.
    let _: () = q(&mut con, &["SET", &big, &"x".repeat(32 << 20)]).await;
    load(&mut con, 0).await;
    let (_stuck, first) = fake_replica(&primary).await;
    let _: () = q(&mut con, &["SET", "after", "the first copy began"]).await;
    let now = store.effects.offset();
    assert!(now > first);
    let (_other, second) = fake_replica(&primary).await;
    assert_eq!(
        second, first,
        "the second replica shares the first one's copy"
    );
    let replica = replica_of(&primary).await;
    in_sync(&primary, &[&replica]).await;
    assert_same(&primary, &replica);
    let repl = &primary.state().replication;
    assert_eq!(repl.full_syncs.load(Ordering::Relaxed), 3);
    assert_eq!(repl.connected(), 3);
}

/// `REPLICAOF` with CR or LF in the host would forge `INFO replication`
/// and `ROLE` lines (Redis takes any bytes): refused, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_a_line_break_is_refused() {
    let srv = Server::start().await;
    let mut c = srv.client().await;
    for host in ["evil\r\nrole:master", "a\nb", "a\rb", "a\tb"] {
        assert_eq!(
            q_err(&mut c, &["REPLICAOF", host, "6379"]).await,
            "ERR Invalid master host",
            "{host:?}"
        );
    }
    let info: String = q(&mut c, &["INFO", "replication"]).await;
    assert!(info.contains("role:master"), "{info}");
    assert!(!info.contains("evil"), "{info}");
    srv.shutdown().await;
}
