//! Redis Cluster mode: three Turnstile nodes in-process on loopback with one
//! shared manual clock (frozen unless a test moves it), driven by the `redis`
//! crate's cluster client and by plain connections that check the exact
//! bytes of `MOVED`, `CROSSSLOT` and `CLUSTERDOWN` and the shapes of the
//! `CLUSTER` replies (as Redis 7 gives them).
//!
//! Every node must know every address before any node starts, so the ports
//! are picked first (bind port 0, read it, let it go) and a start that loses
//! the race for a port is retried with fresh ones.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ProtocolVersion, Value};
use turnstile::clock::Clock;
use turnstile::cluster::key_slot;
use turnstile::{Config, ManualClock, Nanos, ServerHandle};

type Con = redis::aio::MultiplexedConnection;

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";
const DISABLED: &str = "ERR This instance has cluster support disabled";
/// The even split of `redis-cli --cluster create` for three nodes.
const RANGES3: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

/// A running cluster of in-process nodes sharing one manual clock.
struct Cluster {
    nodes: Vec<ServerHandle>,
    ports: Vec<u16>,
    clock: ManualClock,
}

/// `n` distinct ports that were free a moment ago.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind port 0"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

fn node_list(ports: &[u16]) -> String {
    ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl Cluster {
    /// `n` nodes with the same `--cluster-nodes` list.
    async fn start(n: usize) -> Cluster {
        Self::start_with(n, |_, _| {}).await
    }

    /// `n` nodes; `tweak(config, ports)` may change each node's config.
    async fn start_with(n: usize, tweak: impl Fn(&mut Config, &[u16])) -> Cluster {
        for _attempt in 0..5 {
            let ports = free_ports(n);
            let clock = ManualClock::new(Nanos(START_SECS * Nanos::PER_SEC));
            let mut nodes = Vec::new();
            for &port in &ports {
                let mut config = Config {
                    port,
                    cluster_nodes: Some(node_list(&ports)),
                    metrics_addr: "off".into(),
                    ..Config::for_tests()
                };
                tweak(&mut config, &ports);
                match turnstile::start(&config, Arc::new(clock.clone())).await {
                    Ok(h) => nodes.push(h),
                    Err(e) => {
                        eprintln!("node on port {port} did not start ({e}); retrying");
                        break;
                    }
                }
            }
            if nodes.len() == n {
                return Cluster {
                    nodes,
                    ports,
                    clock,
                };
            }
            for h in nodes {
                h.shutdown().await.expect("no snapshot to fail");
            }
        }
        panic!("could not start a {n}-node cluster on free ports");
    }

    fn url(&self, i: usize) -> String {
        format!("redis://127.0.0.1:{}/", self.ports[i])
    }

    /// A plain (non-cluster) RESP2 connection to node `i`.
    async fn plain(&self, i: usize) -> Con {
        connect_url(&self.url(i)).await.expect("connect")
    }

    /// A plain RESP3 connection to node `i`.
    async fn plain3(&self, i: usize) -> Con {
        connect_url(&format!("{}?protocol=resp3", self.url(i)))
            .await
            .expect("connect resp3")
    }

    async fn raw(&self, i: usize) -> Raw {
        Raw::connect(self.nodes[i].addr()).await
    }

    /// The `redis` crate's cluster client, seeded with node 0 only (it must
    /// learn the others from `CLUSTER SLOTS`).
    async fn client(&self, protocol: ProtocolVersion) -> ClusterConnection {
        let client = ClusterClient::builder(vec![self.url(0)])
            .connection_timeout(IO_TIMEOUT)
            .response_timeout(IO_TIMEOUT)
            .use_protocol(protocol)
            .build()
            .expect("cluster client");
        tokio::time::timeout(IO_TIMEOUT, client.get_async_connection())
            .await
            .expect("cluster connect in time")
            .expect("cluster connect")
    }

    /// Index of the node that owns `slot` under the even split.
    fn owner(&self, slot: u16) -> usize {
        let n = self.nodes.len();
        (0..n)
            .find(|&i| {
                let (a, b) = even_range(n, i);
                (a..=b).contains(&slot)
            })
            .unwrap()
    }

    async fn shutdown(self) {
        for h in self.nodes {
            tokio::time::timeout(IO_TIMEOUT, h.shutdown())
                .await
                .expect("shutdown in time")
                .expect("no snapshot to fail");
        }
    }
}

/// Node `i`'s range in an even split over `n` nodes (only the cases used
/// here: one node and three nodes).
fn even_range(n: usize, i: usize) -> (u16, u16) {
    match n {
        1 => (0, 16383),
        3 => RANGES3[i],
        _ => unimplemented!("even_range for {n} nodes"),
    }
}

async fn cq<T: redis::FromRedisValue>(con: &mut ClusterConnection, args: &[&str]) -> T {
    match cmd(args).query_async::<T>(con).await {
        Ok(v) => v,
        Err(e) => panic!("{args:?} through the cluster client failed: {e}"),
    }
}

/// A few keys (with the given prefix) whose slots fall on node `want`.
fn keys_on(want: usize, prefix: &str, count: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|k| {
            let s = key_slot(k.as_bytes());
            (RANGES3[want].0..=RANGES3[want].1).contains(&s)
        })
        .take(count)
        .collect()
}

/// Deterministic pseudo-random keys (xorshift64*), all distinct.
fn random_keys(n: usize, seed: u64) -> Vec<String> {
    let mut x = seed | 1;
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let key = format!("rl:{r:016x}");
        if seen.insert(key.clone()) {
            out.push(key);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// (a) the cluster client shards limiter keys and every limit holds exactly

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_client_holds_every_limit_exactly_on_10000_random_keys() {
    let c = Cluster::start(3).await;
    let con = c.client(ProtocolVersion::RESP2).await;
    let keys = Arc::new(random_keys(10_000, 0x9E37_79B9_7F4A_7C15));

    // Six rounds over every key (60 000 calls), eight tasks sharing the
    // multiplexed cluster connection; the clock is frozen, so each key admits
    // exactly 5 and denies the 6th.
    for round in 0..6i64 {
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..8usize {
            let keys = Arc::clone(&keys);
            let mut con = con.clone();
            tasks.spawn(async move {
                let mut out = Vec::new();
                for k in keys.iter().skip(t).step_by(8) {
                    let r: Vec<i64> = cq(&mut con, &["RL.ALLOW", k, "5", "60"]).await;
                    out.push((k.clone(), r));
                }
                out
            });
        }
        let mut seen = 0;
        while let Some(done) = tasks.join_next().await {
            for (k, r) in done.expect("task") {
                seen += 1;
                assert_eq!(r.len(), 5, "{k}: {r:?}");
                if round < 5 {
                    assert_eq!(r[..4], [1, 5, 4 - round, -1], "{k} round {round}: {r:?}");
                } else {
                    assert_eq!(r[..3], [0, 5, 0], "{k} round {round}: {r:?}");
                    assert!(r[3] > 0, "{k}: denied with retry_after {r:?}");
                }
            }
        }
        assert_eq!(seen, keys.len());
    }

    // Every key lives on exactly the node that owns its slot, and all three
    // nodes got some.
    let mut expected = [0i64; 3];
    for k in keys.iter() {
        expected[c.owner(key_slot(k.as_bytes()))] += 1;
    }
    let mut total = 0;
    for (i, &want) in expected.iter().enumerate() {
        let mut p = c.plain(i).await;
        let n: i64 = q(&mut p, &["DBSIZE"]).await;
        assert!(n > 0, "node {i} holds no keys");
        assert_eq!(n, want, "node {i} DBSIZE");
        total += n;
    }
    assert_eq!(total, 10_000);

    // A PEEK through the cluster client sees the exhausted state everywhere.
    let mut con = con;
    for k in keys.iter().take(50) {
        let r: Vec<i64> = cq(&mut con, &["RL.PEEK", k, "5", "60"]).await;
        assert_eq!(r[..3], [0, 5, 0], "{k}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_client_resp3_and_other_limiter_commands() {
    let c = Cluster::start(3).await;
    let mut con = c.client(ProtocolVersion::RESP3).await;
    // One key per node, so every node answers through the client.
    let keys: Vec<String> = (0..3).map(|i| keys_on(i, "r3:", 1).remove(0)).collect();
    for k in &keys {
        // The same positional array as in RESP2.
        for n in 0..3i64 {
            let v: Vec<i64> = cq(&mut con, &["RL.ALLOW", k, "3", "1h", "ALGO", "gcra"]).await;
            assert_eq!((v[0], v[2]), (1, 2 - n), "{k}: {v:?}");
        }
        let v: Vec<i64> = cq(&mut con, &["RL.ALLOW", k, "3", "1h", "ALGO", "gcra"]).await;
        assert_eq!(v[0], 0, "{k}: {v:?}");
        // REFUND, STATE, RESET and CL.THROTTLE route by their key too.
        let refunded: i64 = cq(&mut con, &["RL.REFUND", k, "1"]).await;
        assert_eq!(refunded, 1);
        let state: Value = cq(&mut con, &["RL.STATE", k]).await;
        assert!(matches!(state, Value::Map(_)), "{state:?}");
        let reset: i64 = cq(&mut con, &["RL.RESET", k]).await;
        assert_eq!(reset, 1);
        let cell: Vec<i64> = cq(
            &mut con,
            &["CL.THROTTLE", &format!("cell:{{{k}}}"), "1", "2", "60"],
        )
        .await;
        assert_eq!(cell[..3], [0, 2, 1]);
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_client_allowmany_with_hash_tags_is_all_or_nothing() {
    let c = Cluster::start(3).await;
    let mut con = c.client(ProtocolVersion::RESP2).await;

    // The two keys of one user share a slot; the command goes wherever that
    // slot lives (the client routes RL.ALLOWMANY by its first argument,
    // `LIMIT`, and follows the MOVED it gets back).
    assert_eq!(key_slot(b"{user42}:ip"), key_slot(b"{user42}:day"));
    let many = |user: &str| -> Vec<String> {
        [
            "RL.ALLOWMANY".to_string(),
            "LIMIT".into(),
            format!("{{{user}}}:ip"),
            "3".into(),
            "60".into(),
            "LIMIT".into(),
            format!("{{{user}}}:day"),
            "5".into(),
            "1d".into(),
            "ALGO".into(),
            "fixed".into(),
        ]
        .to_vec()
    };
    // Users spread over all three nodes.
    let mut users: Vec<String> = Vec::new();
    for node in 0..3 {
        users.extend(
            (0..)
                .map(|i| format!("user{i}"))
                .filter(|u| c.owner(key_slot(u.as_bytes())) == node)
                .take(4),
        );
    }
    users.push("user42".into());
    for u in &users {
        let args = many(u);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        for n in 0..3i64 {
            let r: Vec<i64> = cq(&mut con, &args).await;
            assert_eq!(r, vec![1, 3, 2 - n, -1, r[4], 0], "{u} call {n}");
        }
        // The per-minute limit denies the 4th; the day limit is not charged.
        let r: Vec<i64> = cq(&mut con, &args).await;
        assert_eq!(r[..3], [0, 3, 0], "{u}: {r:?}");
        assert_eq!(r[5], 0, "{u}: the binding limit is the first");
        let day = format!("{{{u}}}:day");
        let peek: Vec<i64> = cq(&mut con, &["RL.PEEK", &day, "5", "1d", "ALGO", "fixed"]).await;
        assert_eq!(
            peek[2], 1,
            "{u}: 2 left after 3 charged (peek shows after one more)"
        );
        let state: Vec<Value> = cq(&mut con, &["RL.STATE", &day]).await;
        let m: HashMap<String, Value> = pairs(&Value::Array(state)).into_iter().collect();
        assert_eq!(
            m["count"],
            Value::Int(3),
            "{u}: a denied call charged nothing"
        );
    }

    // Both keys of each user are on the node that owns the tag.
    for u in &users {
        let owner = c.owner(key_slot(u.as_bytes()));
        let mut p = c.plain(owner).await;
        let n: i64 = q(
            &mut p,
            &["EXISTS", &format!("{{{u}}}:ip"), &format!("{{{u}}}:day")],
        )
        .await;
        assert_eq!(n, 2, "{u} on node {owner}");
    }

    // Keys in different slots: the client gets CROSSSLOT.
    let e = cmd(&[
        "RL.ALLOWMANY",
        "LIMIT",
        "{u}:a",
        "1",
        "1",
        "LIMIT",
        "{v}:b",
        "1",
        "1",
    ])
    .query_async::<Value>(&mut con)
    .await
    .expect_err("cross-slot");
    assert_eq!(err_text(&e), CROSSSLOT);
    c.shutdown().await;
}

// ---------------------------------------------------------------------------
// (b) MOVED, CROSSSLOT and CLUSTERDOWN word for word

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moved_replies_word_for_word() {
    let c = Cluster::start(3).await;
    let foo_owner = 2; // slot 12182 is in 10923-16383
    assert_eq!(c.owner(12182), foo_owner);
    let moved_foo = format!("-MOVED 12182 127.0.0.1:{}\r\n", c.ports[foo_owner]);
    for i in 0..3 {
        let mut r = c.raw(i).await;
        let get = r.call(&["GET", "foo"]).await;
        let allow = r.call(&["RL.ALLOW", "foo", "1", "1"]).await;
        let many = r
            .call(&["RL.ALLOWMANY", "COST", "1", "LIMIT", "foo", "2", "1"])
            .await;
        let throttle = r.call(&["CL.THROTTLE", "foo", "1", "1", "1"]).await;
        if i == foo_owner {
            assert_eq!(get, "$-1\r\n");
            assert!(allow.starts_with("*5\r\n:1\r\n"), "{allow:?}");
            assert!(many.starts_with("*6\r\n:1\r\n"), "{many:?}");
            assert!(throttle.starts_with("-WRONGTYPE"), "{throttle:?}");
        } else {
            for reply in [&get, &allow, &many, &throttle] {
                assert_eq!(reply, &moved_foo, "node {i}");
            }
        }
        // Keyless commands answer on every node.
        assert_eq!(r.call(&["PING"]).await, "+PONG\r\n");
    }

    // Slot edges: the last slot of node 0 and the first of node 1.
    let edge = |slot: u16| {
        (0..)
            .map(|i| format!("edge{i}"))
            .find(|k| key_slot(k.as_bytes()) == slot)
            .unwrap()
    };
    for (slot, owner) in [
        (0u16, 0usize),
        (5460, 0),
        (5461, 1),
        (10922, 1),
        (10923, 2),
        (16383, 2),
    ] {
        let k = edge(slot);
        for i in 0..3 {
            let mut r = c.raw(i).await;
            let got = r.call(&["RL.ALLOW", &k, "1", "1"]).await;
            if i == owner {
                assert!(
                    got.starts_with("*5\r\n"),
                    "{k} (slot {slot}) on node {i}: {got:?}"
                );
            } else {
                assert_eq!(
                    got,
                    format!("-MOVED {slot} 127.0.0.1:{}\r\n", c.ports[owner]),
                    "{k} (slot {slot}) on node {i}"
                );
            }
        }
    }

    // Hash tags route RL.ALLOWMANY by the tag's slot.
    let u_slot = key_slot(b"u");
    assert_eq!(u_slot, 11826);
    let u_owner = c.owner(u_slot);
    for i in 0..3 {
        let mut r = c.raw(i).await;
        let got = r
            .call(&[
                "RL.ALLOWMANY",
                "LIMIT",
                "{u}:a",
                "1",
                "1",
                "LIMIT",
                "{u}:b",
                "1",
                "1",
            ])
            .await;
        if i == u_owner {
            assert!(got.starts_with("*6\r\n"), "{got:?}");
        } else {
            assert_eq!(
                got,
                format!("-MOVED 11826 127.0.0.1:{}\r\n", c.ports[u_owner])
            );
        }
    }

    // The redis crate reports the same error as MOVED with slot and address.
    let mut p = c.plain(0).await;
    let e = q_err(&mut p, &["RL.ALLOW", "foo", "1", "1"]).await;
    assert_eq!(e, format!("MOVED 12182 127.0.0.1:{}", c.ports[foo_owner]));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossslot_replies_word_for_word() {
    let c = Cluster::start(3).await;
    let crossslot = format!("-{CROSSSLOT}\r\n");
    for i in 0..3 {
        let mut r = c.raw(i).await;
        // a = 15495, b = 3300: CROSSSLOT comes before MOVED, on every node.
        assert_eq!(r.call(&["MSET", "a", "1", "b", "2"]).await, crossslot);
        assert_eq!(r.call(&["DEL", "a", "b"]).await, crossslot);
        assert_eq!(r.call(&["EXISTS", "a", "b"]).await, crossslot);
        assert_eq!(r.call(&["RL.RESET", "a", "b"]).await, crossslot);
        assert_eq!(
            r.call(&[
                "RL.ALLOWMANY",
                "LIMIT",
                "{u}:a",
                "1",
                "1",
                "LIMIT",
                "{v}:b",
                "1",
                "1"
            ])
            .await,
            crossslot
        );
        assert_eq!(
            r.call(&[
                "RL.ALLOWMANY",
                "COST",
                "1",
                "LIMIT",
                "{u}:a",
                "1",
                "1",
                "ALGO",
                "gcra",
                "BURST",
                "1",
                "LIMIT",
                "{v}:b",
                "1",
                "1",
            ])
            .await,
            crossslot
        );
        // One tag: no CROSSSLOT (an answer on the owner, MOVED elsewhere).
        let same = r
            .call(&[
                "RL.ALLOWMANY",
                "LIMIT",
                "{u}:a",
                "1",
                "1",
                "LIMIT",
                "{u}:b",
                "1",
                "1",
            ])
            .await;
        assert!(!same.contains("CROSSSLOT"), "{same:?}");
        let mset = r.call(&["MSET", "{t}a", "1", "{t}b", "2"]).await;
        assert!(!mset.contains("CROSSSLOT"), "{mset:?}");
    }
    // The redis crate sees the same line.
    let mut p = c.plain(1).await;
    assert_eq!(
        q_err(&mut p, &["MSET", "a", "1", "b", "2"]).await,
        CROSSSLOT
    );
    c.shutdown().await;
}

/// A cluster file that leaves slots unassigned: their keys are
/// `CLUSTERDOWN Hash slot not served`, and `CLUSTER INFO` says `fail`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_config_file_ranges_and_clusterdown() {
    let dir = std::env::temp_dir().join(format!(
        "turnstile-cluster-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cluster.toml");
    let dir2 = file.clone();
    let c = Cluster::start_with(2, move |config, ports| {
        // Node 0: 0-999 and 12182 (foo); node 1: 1000-9999; the rest unassigned.
        std::fs::write(
            &dir2,
            format!(
                "[[node]]\naddr = \"127.0.0.1:{}\"\nslots = [\"0-999\", \"12182\"]\n\n[[node]]\naddr = \"127.0.0.1:{}\"\nslots = [\"1000-9999\"]\n",
                ports[0], ports[1]
            ),
        )
        .unwrap();
        config.cluster_nodes = None;
        config.cluster_config = Some(dir2.clone());
    })
    .await;

    let mut r = c.raw(1).await;
    assert_eq!(
        r.call(&["GET", "foo"]).await,
        format!("-MOVED 12182 127.0.0.1:{}\r\n", c.ports[0])
    );
    // somekey = 11058: nobody owns it.
    assert_eq!(
        r.call(&["RL.ALLOW", "somekey", "1", "1"]).await,
        "-CLUSTERDOWN Hash slot not served\r\n"
    );
    // hello = 866 is node 0's; user1000 = 3443 is node 1's.
    assert_eq!(
        r.call(&["GET", "hello"]).await,
        format!("-MOVED 866 127.0.0.1:{}\r\n", c.ports[0])
    );
    assert_eq!(r.call(&["GET", "user1000"]).await, "$-1\r\n");

    let mut p = c.plain(0).await;
    let info: String = q(&mut p, &["CLUSTER", "INFO"]).await;
    assert!(info.contains("cluster_state:fail\r\n"), "{info}");
    assert!(info.contains("cluster_slots_assigned:10001\r\n"), "{info}");
    assert!(info.contains("cluster_known_nodes:2\r\n"), "{info}");
    let slots: Value = q(&mut p, &["CLUSTER", "SLOTS"]).await;
    let ranges: Vec<(i64, i64, i64)> = slot_entries(&slots)
        .into_iter()
        .map(|(a, b, _host, port, _id)| (a, b, port))
        .collect();
    assert_eq!(
        ranges,
        vec![
            (0, 999, i64::from(c.ports[0])),
            (1000, 9999, i64::from(c.ports[1])),
            (12182, 12182, i64::from(c.ports[0])),
        ]
    );
    let nodes: String = q(&mut p, &["CLUSTER", "NODES"]).await;
    let mine = nodes.lines().find(|l| l.contains("myself")).unwrap();
    assert!(mine.ends_with(" connected 0-999 12182"), "{mine}");
    c.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// (c) CLUSTER KEYSLOT against Redis's published vectors

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyslot_matches_redis_test_vectors() {
    let c = Cluster::start(3).await;
    let mut p = c.plain(1).await;
    let slot = |k: &'static str| {
        let mut p = p.clone();
        async move { q::<i64>(&mut p, &["CLUSTER", "KEYSLOT", k]).await }
    };
    // From the Redis docs (CLUSTER KEYSLOT, cluster spec) and its tests.
    assert_eq!(slot("somekey").await, 11058);
    assert_eq!(slot("foo").await, 12182);
    assert_eq!(slot("hello").await, 866);
    assert_eq!(slot("user1000").await, 3443);
    assert_eq!(slot("{user1000}.following").await, 3443);
    assert_eq!(slot("{user1000}.followers").await, 3443);
    assert_eq!(slot("").await, 0);
    // The spec's hash-tag examples.
    let whole = slot("foo{}{bar}").await;
    assert_eq!(whole, 8363, "an empty tag: the whole key is hashed");
    assert_ne!(whole, slot("bar").await);
    assert_eq!(slot("foo{{bar}}zap").await, slot("{bar").await);
    assert_eq!(slot("foo{{bar}}zap").await, 4015);
    assert_eq!(slot("foo{bar}{zap}").await, slot("bar").await);
    assert_eq!(slot("foo{bar}{zap}").await, 5061);
    assert_eq!(slot("{user42}:ip").await, slot("{user42}:day").await);
    assert_eq!(slot("{user42}:ip").await, 14710);
    assert_eq!(slot("{}").await, 15257);
    assert_eq!(slot("123456789").await, 12739); // CRC16 0x31C3 mod 16384
                                                // Binary-safe.
    let bin: i64 = cmd(&["CLUSTER", "KEYSLOT"])
        .arg(&b"\x00\xff{\x01}"[..])
        .query_async(&mut p)
        .await
        .unwrap();
    assert_eq!(bin, i64::from(key_slot(b"\x01")));
    // Arity.
    assert_eq!(
        q_err(&mut p, &["CLUSTER", "KEYSLOT"]).await,
        "ERR wrong number of arguments for 'cluster|keyslot' command"
    );
    c.shutdown().await;
}

// ---------------------------------------------------------------------------
// (d) CLUSTER SLOTS / SHARDS / NODES / INFO / MYID and friends

/// `CLUSTER SLOTS` entries as (start, end, host, port, id); asserts the
/// Redis 7 shape `[start, end, [host, port, id, {}]]`.
fn slot_entries(v: &Value) -> Vec<(i64, i64, String, i64, String)> {
    let Value::Array(entries) = v else {
        panic!("CLUSTER SLOTS: not an array: {v:?}")
    };
    entries
        .iter()
        .map(|e| {
            let Value::Array(e) = e else {
                panic!("entry {e:?}")
            };
            assert_eq!(e.len(), 3, "one primary, no replicas: {e:?}");
            let (Value::Int(a), Value::Int(b), Value::Array(node)) = (&e[0], &e[1], &e[2]) else {
                panic!("entry {e:?}")
            };
            assert_eq!(node.len(), 4, "[host, port, id, metadata]: {node:?}");
            let Value::Int(port) = node[1] else {
                panic!("port {node:?}")
            };
            match &node[3] {
                Value::Array(m) if m.is_empty() => {}
                Value::Map(m) if m.is_empty() => {}
                other => panic!("metadata should be an empty map: {other:?}"),
            }
            (*a, *b, text(&node[0]), port, text(&node[2]))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_introspection_has_redis7_shapes() {
    let c = Cluster::start(3).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let mut p = c.plain(i).await;
        let id: String = q(&mut p, &["CLUSTER", "MYID"]).await;
        assert_eq!(id.len(), 40, "{id}");
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{id}"
        );
        ids.push(id);
    }
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        3,
        "distinct ids {ids:?}"
    );

    let mut first_slots = None;
    for i in 0..3 {
        let mut p = c.plain(i).await;

        // CLUSTER SLOTS: the same on every node.
        let slots: Value = q(&mut p, &["CLUSTER", "SLOTS"]).await;
        let entries = slot_entries(&slots);
        let want: Vec<_> = (0..3)
            .map(|j| {
                (
                    i64::from(RANGES3[j].0),
                    i64::from(RANGES3[j].1),
                    "127.0.0.1".to_string(),
                    i64::from(c.ports[j]),
                    ids[j].clone(),
                )
            })
            .collect();
        assert_eq!(entries, want, "CLUSTER SLOTS on node {i}");
        match &first_slots {
            None => first_slots = Some(slots),
            Some(s) => assert_eq!(s, &slots, "every node agrees"),
        }

        // CLUSTER NODES: `<id> <ip:port@cport> <flags> - 0 0 <epoch> connected <range>`.
        let nodes: String = q(&mut p, &["CLUSTER", "NODES"]).await;
        let lines: Vec<&str> = nodes.lines().collect();
        assert_eq!(lines.len(), 3, "{nodes}");
        assert!(nodes.ends_with('\n'));
        for (j, line) in lines.iter().enumerate() {
            let flags = if i == j { "myself,master" } else { "master" };
            assert_eq!(
                *line,
                format!(
                    "{} 127.0.0.1:{}@{} {flags} - 0 0 {} connected {}-{}",
                    ids[j],
                    c.ports[j],
                    u32::from(c.ports[j]) + 10000,
                    j + 1,
                    RANGES3[j].0,
                    RANGES3[j].1
                ),
                "CLUSTER NODES on node {i}"
            );
        }

        // CLUSTER INFO.
        let info: String = q(&mut p, &["CLUSTER", "INFO"]).await;
        let fields: HashMap<&str, &str> = info
            .split("\r\n")
            .filter(|l| !l.is_empty())
            .map(|l| l.split_once(':').unwrap_or_else(|| panic!("line {l:?}")))
            .collect();
        assert_eq!(fields["cluster_state"], "ok");
        assert_eq!(fields["cluster_slots_assigned"], "16384");
        assert_eq!(fields["cluster_slots_ok"], "16384");
        assert_eq!(fields["cluster_slots_pfail"], "0");
        assert_eq!(fields["cluster_slots_fail"], "0");
        assert_eq!(fields["cluster_known_nodes"], "3");
        assert_eq!(fields["cluster_size"], "3");
        assert_eq!(fields["cluster_my_epoch"], (i + 1).to_string());

        // CLUSTER SHARDS.
        let shards: Value = q(&mut p, &["CLUSTER", "SHARDS"]).await;
        let Value::Array(shards) = shards else {
            panic!("{shards:?}")
        };
        assert_eq!(shards.len(), 3);
        for (j, s) in shards.iter().enumerate() {
            let s: HashMap<String, Value> = pairs(s).into_iter().collect();
            assert_eq!(
                s["slots"],
                Value::Array(vec![
                    Value::Int(i64::from(RANGES3[j].0)),
                    Value::Int(i64::from(RANGES3[j].1))
                ])
            );
            let Value::Array(ns) = &s["nodes"] else {
                panic!("{s:?}")
            };
            assert_eq!(ns.len(), 1);
            let n: HashMap<String, Value> = pairs(&ns[0]).into_iter().collect();
            assert_eq!(text(&n["id"]), ids[j]);
            assert_eq!(n["port"], Value::Int(i64::from(c.ports[j])));
            assert_eq!(text(&n["ip"]), "127.0.0.1");
            assert_eq!(text(&n["endpoint"]), "127.0.0.1");
            assert_eq!(text(&n["role"]), "master");
            assert_eq!(n["replication-offset"], Value::Int(0));
            assert_eq!(text(&n["health"]), "online");
        }

        // INFO cluster; READONLY / READWRITE / ASKING.
        let ic: String = q(&mut p, &["INFO", "cluster"]).await;
        assert!(ic.contains("cluster_enabled:1\r\n"), "{ic}");
        for c_ in ["READONLY", "READWRITE", "ASKING"] {
            let ok: String = q(&mut p, &[c_]).await;
            assert_eq!(ok, "OK", "{c_}");
        }
        let help: Vec<String> = q(&mut p, &["CLUSTER", "HELP"]).await;
        assert!(help[0].starts_with("CLUSTER <subcommand>"), "{help:?}");
        assert!(help.iter().any(|l| l.starts_with("SLOTS")), "{help:?}");
    }

    // RESP3: SLOTS metadata is an empty map; INFO and NODES are verbatim text.
    let mut p3 = c.plain3(0).await;
    let slots: Value = q(&mut p3, &["CLUSTER", "SLOTS"]).await;
    let Value::Array(e) = &slots else {
        panic!("{slots:?}")
    };
    let Value::Array(first) = &e[0] else {
        panic!("{slots:?}")
    };
    let Value::Array(node) = &first[2] else {
        panic!("{slots:?}")
    };
    assert_eq!(node[3], Value::Map(vec![]), "{slots:?}");
    let mut raw = c.raw(0).await;
    assert_eq!(raw.call(&["HELLO", "3"]).await.chars().next(), Some('%'));
    let info = raw.call(&["CLUSTER", "INFO"]).await;
    assert!(
        info.starts_with('=') && info.contains("\r\ntxt:cluster_state:ok\r\n"),
        "{info:?}"
    );
    let nodes = raw.call(&["CLUSTER", "NODES"]).await;
    assert!(
        nodes.starts_with('=') && nodes.contains("\r\ntxt:"),
        "{nodes:?}"
    );
    let shards = raw.call(&["CLUSTER", "SHARDS"]).await;
    assert!(shards.starts_with("*3\r\n%2\r\n"), "{shards:?}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn countkeysinslot_and_getkeysinslot_see_this_nodes_keys() {
    let c = Cluster::start(3).await;
    let owner = c.owner(key_slot(b"user42"));
    let mut p = c.plain(owner).await;
    let keys = ["{user42}:ip", "{user42}:day", "{user42}:min"];
    for k in keys {
        let r: Vec<i64> = q(&mut p, &["RL.ALLOW", k, "2", "60"]).await;
        assert_eq!(r[0], 1);
    }
    let n: i64 = q(&mut p, &["CLUSTER", "COUNTKEYSINSLOT", "14710"]).await;
    assert_eq!(n, 3);
    let mut got: Vec<String> = q(&mut p, &["CLUSTER", "GETKEYSINSLOT", "14710", "10"]).await;
    got.sort();
    let mut want: Vec<String> = keys.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(got, want);
    let two: Vec<String> = q(&mut p, &["CLUSTER", "GETKEYSINSLOT", "14710", "2"]).await;
    assert_eq!(two.len(), 2);
    let none: Vec<String> = q(&mut p, &["CLUSTER", "GETKEYSINSLOT", "14710", "0"]).await;
    assert!(none.is_empty());
    let other: i64 = q(&mut p, &["CLUSTER", "COUNTKEYSINSLOT", "14711"]).await;
    assert_eq!(other, 0);
    // Another node holds none of them (it counts only its own keys).
    let mut elsewhere = c.plain((owner + 1) % 3).await;
    let n: i64 = q(&mut elsewhere, &["CLUSTER", "COUNTKEYSINSLOT", "14710"]).await;
    assert_eq!(n, 0);
    // Errors, as Redis words them (out-of-range slots; the other cases are
    // in `getkeysinslot_errors_are_worded_as_redis`).
    assert_eq!(
        q_err(&mut p, &["CLUSTER", "COUNTKEYSINSLOT", "16384"]).await,
        "ERR Invalid slot"
    );
    assert_eq!(
        q_err(&mut p, &["CLUSTER", "COUNTKEYSINSLOT", "-1"]).await,
        "ERR Invalid slot"
    );
    assert!(q_err(&mut p, &["CLUSTER", "GETKEYSINSLOT", "1", "-1"])
        .await
        .starts_with("ERR Invalid"));
    // Expired keys are not counted: the window keys live at most two periods.
    c.clock.advance(Duration::from_secs(121));
    let n: i64 = q(&mut p, &["CLUSTER", "COUNTKEYSINSLOT", "14710"]).await;
    assert_eq!(n, 0, "expired keys are gone");
    let got: Vec<String> = q(&mut p, &["CLUSTER", "GETKEYSINSLOT", "14710", "10"]).await;
    assert!(got.is_empty(), "{got:?}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_cluster_owns_every_slot() {
    let c = Cluster::start(1).await;
    let mut r = c.raw(0).await;
    assert!(r
        .call(&["RL.ALLOW", "foo", "1", "1"])
        .await
        .starts_with("*5\r\n"));
    assert_eq!(
        r.call(&["MSET", "a", "1", "b", "2"]).await,
        format!("-{CROSSSLOT}\r\n")
    );
    let mut p = c.plain(0).await;
    let info: String = q(&mut p, &["CLUSTER", "INFO"]).await;
    assert!(info.contains("cluster_known_nodes:1\r\n") && info.contains("cluster_size:1\r\n"));
    let slots: Value = q(&mut p, &["CLUSTER", "SLOTS"]).await;
    assert_eq!(slot_entries(&slots).len(), 1);
    assert_eq!(slot_entries(&slots)[0].1, 16383);
    // The cluster client works with a single node too.
    let mut con = c.client(ProtocolVersion::RESP2).await;
    let r: Vec<i64> = cq(&mut con, &["RL.ALLOW", "x", "1", "1h"]).await;
    assert_eq!(r[0], 1);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn announce_picks_this_nodes_entry() {
    // Every node binds its own port but the list is given in another order
    // and each node names itself with --cluster-announce.
    let c = Cluster::start_with(3, |config, ports| {
        config.cluster_nodes = Some(node_list(&[ports[2], ports[0], ports[1]]));
        config.cluster_announce = Some(format!("127.0.0.1:{}", config.port));
    })
    .await;
    // Node 2 is listed first, so it owns 0-5460 (hello = 866).
    let mut r = c.raw(0).await;
    assert_eq!(
        r.call(&["GET", "hello"]).await,
        format!("-MOVED 866 127.0.0.1:{}\r\n", c.ports[2])
    );
    let mut p = c.plain(2).await;
    let nodes: String = q(&mut p, &["CLUSTER", "NODES"]).await;
    let mine = nodes.lines().find(|l| l.contains("myself")).unwrap();
    assert!(
        mine.contains(&format!("127.0.0.1:{}@", c.ports[2])),
        "{mine}"
    );
    assert!(mine.ends_with(" connected 0-5460"), "{mine}");
    c.shutdown().await;
}

#[tokio::test]
async fn a_node_that_is_not_in_the_list_does_not_start() {
    let ports = free_ports(2);
    let config = Config {
        port: ports[0],
        cluster_nodes: Some(format!("127.0.0.1:{}", ports[1])),
        metrics_addr: "off".into(),
        ..Config::for_tests()
    };
    let clock = ManualClock::new(Nanos(START_SECS * Nanos::PER_SEC));
    match turnstile::start(&config, Arc::new(clock)).await {
        Ok(h) => {
            h.shutdown().await.expect("no snapshot to fail");
            panic!(
                "started although 127.0.0.1:{} is not in the node list",
                ports[0]
            );
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("is not one of the cluster's nodes"), "{msg}");
        }
    }
}

#[tokio::test]
async fn standalone_server_refuses_cluster_commands() {
    let s = Server::start().await;
    let mut p = s.client().await;
    for args in [
        &["CLUSTER", "INFO"][..],
        &["CLUSTER", "SLOTS"],
        &["CLUSTER", "NODES"],
        &["CLUSTER", "SHARDS"],
        &["CLUSTER", "MYID"],
        &["CLUSTER", "KEYSLOT", "foo"],
        &["CLUSTER", "COUNTKEYSINSLOT", "1"],
        &["CLUSTER", "GETKEYSINSLOT", "1", "1"],
        &["READONLY"],
        &["READWRITE"],
        &["ASKING"],
    ] {
        assert_eq!(q_err(&mut p, args).await, DISABLED, "{args:?}");
    }
    let mut r = s.raw().await;
    assert_eq!(
        r.call(&["CLUSTER", "INFO"]).await,
        format!("-{DISABLED}\r\n")
    );
    let ic: String = q(&mut p, &["INFO", "cluster"]).await;
    assert!(ic.contains("cluster_enabled:0\r\n"), "{ic}");
    // And no routing: keys in different slots are fine.
    let ok: String = q(&mut p, &["MSET", "a", "1", "b", "2"]).await;
    assert_eq!(ok, "OK");
    s.shutdown().await;
}

// ---------------------------------------------------------------------------
// (e) COMMAND reports key positions, so clients can route RL.*

fn flags_of(v: &Value) -> Vec<String> {
    match v {
        Value::Array(a) | Value::Set(a) => a.iter().map(text).collect(),
        other => panic!("flags {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_info_reports_limiter_key_positions() {
    let c = Cluster::start(3).await;
    let mut p = c.plain(0).await;
    let info: Vec<Value> = q(
        &mut p,
        &[
            "COMMAND",
            "INFO",
            "rl.allow",
            "rl.allowmany",
            "rl.reset",
            "cl.throttle",
        ],
    )
    .await;
    assert_eq!(info.len(), 4);
    let Value::Array(allow) = &info[0] else {
        panic!("{:?}", info[0])
    };
    assert_eq!(text(&allow[0]), "rl.allow");
    assert_eq!(allow[1], Value::Int(-4));
    assert!(!flags_of(&allow[2]).contains(&"movablekeys".to_string()));
    assert_eq!(allow[3..6], [Value::Int(1), Value::Int(1), Value::Int(1)]);
    // Key specs: begin_search index 1, find_keys range 0/1/0.
    assert!(
        format!("{:?}", allow[8]).contains("index"),
        "{:?}",
        allow[8]
    );

    let Value::Array(many) = &info[1] else {
        panic!("{:?}", info[1])
    };
    assert_eq!(text(&many[0]), "rl.allowmany");
    assert_eq!(many[1], Value::Int(-5));
    assert!(
        flags_of(&many[2]).contains(&"movablekeys".to_string()),
        "{:?}",
        many[2]
    );
    assert_eq!(many[3..6], [Value::Int(0), Value::Int(0), Value::Int(0)]);
    let specs = format!("{:?}", many[8]);
    assert!(
        specs.contains("keyword") && specs.contains("LIMIT"),
        "{specs}"
    );

    let Value::Array(reset) = &info[2] else {
        panic!()
    };
    assert_eq!(reset[3..6], [Value::Int(1), Value::Int(-1), Value::Int(1)]);
    let Value::Array(cell) = &info[3] else {
        panic!()
    };
    assert_eq!(cell[3..6], [Value::Int(1), Value::Int(1), Value::Int(1)]);

    // COMMAND GETKEYS, as redis-py resolves movable keys.
    let keys: Vec<String> = q(
        &mut p,
        &[
            "COMMAND",
            "GETKEYS",
            "RL.ALLOWMANY",
            "COST",
            "2",
            "LIMIT",
            "{u}:a",
            "5",
            "1s",
            "ALGO",
            "gcra",
            "BURST",
            "5",
            "LIMIT",
            "{u}:b",
            "9",
            "1d",
        ],
    )
    .await;
    assert_eq!(keys, vec!["{u}:a", "{u}:b"]);
    let keys: Vec<String> = q(&mut p, &["COMMAND", "GETKEYS", "RL.ALLOW", "k", "5", "60"]).await;
    assert_eq!(keys, vec!["k"]);
    // COMMAND (the full table) lists every limiter command.
    let all: Vec<Value> = q(&mut p, &["COMMAND"]).await;
    let names: HashSet<String> = all
        .iter()
        .map(|c| match c {
            Value::Array(a) => text(&a[0]),
            other => panic!("{other:?}"),
        })
        .collect();
    for n in [
        "rl.allow",
        "rl.allowmany",
        "rl.peek",
        "rl.refund",
        "rl.reset",
        "rl.state",
        "cl.throttle",
        "cluster",
        "readonly",
        "readwrite",
        "asking",
    ] {
        assert!(names.contains(n), "COMMAND lacks {n}");
    }
    c.shutdown().await;
}

// ---------------------------------------------------------------------------
// Routing edge cases

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_allowmany_is_an_error_not_a_crash() {
    let c = Cluster::start(3).await;
    let mut r = c.raw(0).await;
    // Shapes where the LIMIT scan runs off the end or finds no key.
    for args in [
        &["RL.ALLOWMANY", "LIMIT", "k", "1", "LIMIT"][..],
        &["RL.ALLOWMANY", "COST", "1", "LIMIT", "k"],
        &["RL.ALLOWMANY", "x", "y", "z", "w"],
        &["RL.ALLOWMANY", "LIMIT", "LIMIT", "LIMIT", "LIMIT"],
        &["RL.ALLOWMANY", "COST", "LIMIT", "a", "1", "1"],
        &[
            "RL.ALLOWMANY",
            "LIMIT",
            "hello",
            "1",
            "1",
            "LIMIT",
            "hello",
            "1",
            "1",
        ],
    ] {
        let got = r.call(args).await;
        assert!(got.starts_with('-'), "{args:?}: {got:?}");
    }
    // The connection and the node are fine afterwards.
    assert_eq!(r.call(&["PING"]).await, "+PONG\r\n");
    c.shutdown().await;
}

/// Redis 7 (`clusterCommand` in cluster.c) parses both arguments with
/// `getLongLongFromObjectOrReply` first, so a non-integer is `ERR value is
/// not an integer or out of range`, and GETKEYSINSLOT has one message for a
/// bad slot or a negative count: `ERR Invalid slot or number of keys`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn getkeysinslot_errors_are_worded_as_redis() {
    let c = Cluster::start(1).await;
    let mut p = c.plain(0).await;
    const NOT_INT: &str = "ERR value is not an integer or out of range";
    const BAD: &str = "ERR Invalid slot or number of keys";
    assert_eq!(
        q_err(&mut p, &["CLUSTER", "COUNTKEYSINSLOT", "x"]).await,
        NOT_INT
    );
    assert_eq!(
        q_err(&mut p, &["CLUSTER", "GETKEYSINSLOT", "x", "1"]).await,
        NOT_INT
    );
    assert_eq!(
        q_err(&mut p, &["CLUSTER", "GETKEYSINSLOT", "1", "x"]).await,
        NOT_INT
    );
    assert_eq!(
        q_err(&mut p, &["CLUSTER", "GETKEYSINSLOT", "16384", "1"]).await,
        BAD
    );
    assert_eq!(
        q_err(&mut p, &["CLUSTER", "GETKEYSINSLOT", "1", "-1"]).await,
        BAD
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp3_redirections_are_the_same_lines() {
    let c = Cluster::start(3).await;
    let mut r = c.raw(0).await;
    assert!(r.call(&["HELLO", "3"]).await.starts_with('%'));
    assert_eq!(
        r.call(&["RL.ALLOW", "foo", "1", "1"]).await,
        format!("-MOVED 12182 127.0.0.1:{}\r\n", c.ports[2])
    );
    assert_eq!(
        r.call(&[
            "RL.ALLOWMANY",
            "LIMIT",
            "{u}:a",
            "1",
            "1",
            "LIMIT",
            "{v}:b",
            "1",
            "1"
        ])
        .await,
        format!("-{CROSSSLOT}\r\n")
    );
    // A pipeline mixing owned keys, foreign keys and keyless commands gets
    // one reply per request, in order.
    let hello = keys_on(0, "pipe:", 1).remove(0);
    let mut bytes = Vec::new();
    for args in [
        &["RL.ALLOW", hello.as_str(), "2", "60"][..],
        &["GET", "foo"],
        &["PING"],
        &["MGET", "a", "b"],
        &["RL.ALLOW", hello.as_str(), "2", "60"],
    ] {
        bytes.extend(encode_words(args));
    }
    r.send(&bytes).await;
    let first = r.reply_text().await;
    assert!(first.starts_with("*5\r\n"), "{first:?}");
    assert_eq!(
        r.reply_text().await,
        format!("-MOVED 12182 127.0.0.1:{}\r\n", c.ports[2])
    );
    assert_eq!(r.reply_text().await, "+PONG\r\n");
    assert_eq!(r.reply_text().await, format!("-{CROSSSLOT}\r\n"));
    // Limit 2: the second decision leaves none remaining.
    let last = r.reply_text().await;
    assert!(last.starts_with("*5\r\n:1\r\n:2\r\n:0\r\n"), "{last:?}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirepass_comes_before_routing() {
    const PW: &str = "cluster-secret";
    let c = Cluster::start_with(3, |config, _| config.requirepass = Some(PW.into())).await;
    let mut r = c.raw(0).await;
    // Unauthenticated: NOAUTH, not MOVED/CROSSSLOT, and no topology leaks.
    assert_eq!(
        r.call(&["GET", "foo"]).await,
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        r.call(&["MSET", "a", "1", "b", "2"]).await,
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        r.call(&["CLUSTER", "SLOTS"]).await,
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(r.call(&["AUTH", PW]).await, "+OK\r\n");
    assert_eq!(
        r.call(&["GET", "foo"]).await,
        format!("-MOVED 12182 127.0.0.1:{}\r\n", c.ports[2])
    );
    // The cluster client authenticates on every node it discovers.
    let client = ClusterClient::builder(vec![c.url(1)])
        .password(PW.into())
        .connection_timeout(IO_TIMEOUT)
        .response_timeout(IO_TIMEOUT)
        .build()
        .unwrap();
    let mut con = client
        .get_async_connection()
        .await
        .expect("cluster connect with AUTH");
    for node in 0..3 {
        let k = keys_on(node, "auth:", 1).remove(0);
        let r: Vec<i64> = cq(&mut con, &["RL.ALLOW", &k, "1", "1h"]).await;
        assert_eq!(r[..3], [1, 1, 0], "{k}");
    }
    c.shutdown().await;
}

/// A transaction's keys must share one slot: each command is routed as it
/// is queued (`MOVED` dooms the transaction), and EXEC refuses a queue
/// whose keys span slots with `CROSSSLOT`, discarding it, as Redis 7.0
/// does; WATCHed keys are not part of that check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_keep_to_one_slot() {
    let c = Cluster::start(3).await;
    // a = 15495, b = 3300, {t}... = one slot; find each one's owner.
    let owner = |key: &str| {
        let slot = turnstile::cluster::key_slot(key.as_bytes());
        (0..3)
            .find(|&i| {
                let topo = c.nodes[i].state().cluster.as_ref().unwrap();
                topo.owner(slot).map(|(n, _)| n) == Some(topo.me)
            })
            .expect("an owner")
    };
    let a = owner("a");
    let mut r = c.raw(a).await;
    // Two slots on one node: CROSSSLOT at EXEC, nothing written.
    let other = ["b", "c", "d", "e", "f", "g", "h"]
        .into_iter()
        .find(|k| {
            owner(k) == a
                && turnstile::cluster::key_slot(k.as_bytes()) != turnstile::cluster::key_slot(b"a")
        })
        .expect("another slot on a's node");
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(r.call(&["SET", "a", "1"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["SET", other, "1"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["EXEC"]).await, format!("-{CROSSSLOT}\r\n"));
    assert_eq!(r.call(&["EXISTS", "a", "a"]).await, ":0\r\n");
    assert_eq!(r.call(&["EXEC"]).await, "-ERR EXEC without MULTI\r\n");
    // A key another node owns: MOVED as it is queued, then EXECABORT.
    let elsewhere = ["b", "c", "d", "e", "f", "g", "h"]
        .into_iter()
        .find(|k| owner(k) != a)
        .expect("a key elsewhere");
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(r.call(&["SET", "a", "1"]).await, "+QUEUED\r\n");
    assert!(r
        .call(&["SET", elsewhere, "1"])
        .await
        .starts_with("-MOVED "));
    assert_eq!(
        r.call(&["EXEC"]).await,
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    // One slot (a hash tag): it runs; a watched key elsewhere in the
    // node does not count against the slot.
    let t = owner("{t}");
    let watched = (0..)
        .map(|i| format!("w{i}"))
        .find(|k| {
            owner(k) == t
                && turnstile::cluster::key_slot(k.as_bytes())
                    != turnstile::cluster::key_slot(b"{t}")
        })
        .expect("another slot on {t}'s node");
    let mut r = c.raw(t).await;
    assert_eq!(r.call(&["WATCH", &watched]).await, "+OK\r\n");
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(r.call(&["SET", "{t}a", "1"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["INCR", "{t}b"]).await, "+QUEUED\r\n");
    assert_eq!(r.call(&["EXEC"]).await, "*2\r\n+OK\r\n:1\r\n");
    c.shutdown().await;
}

/// The rate limit service on every node: the domain's owner decides, the
/// others answer UNAVAILABLE naming the owner (counting apart would split
/// the domain's limits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_service_answers_on_the_domains_node_only() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

    let dir = std::env::temp_dir().join(format!("turnstile-cluster-rls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("edge.yaml"),
        "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
    )
    .unwrap();
    let c = Cluster::start_with(3, |config, _| {
        config.policies = Some(dir.clone());
        config.rls_port = Some(0);
    })
    .await;
    let owner = c.owner(key_slot(b"edge"));
    let req = || RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "ip".into(),
                value: "10.0.0.1".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    };
    for (i, node) in c.nodes.iter().enumerate() {
        let addr = node.rls_addr().unwrap();
        let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let r = client.should_rate_limit(req()).await;
        if i == owner {
            assert_eq!(r.unwrap().into_inner().statuses[0].limit_remaining, 1);
        } else {
            let e = r.unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unavailable);
            let at = format!("127.0.0.1:{}", c.ports[owner]);
            assert!(e.message().contains(&at), "{e:?} names {at}");
        }
    }
    c.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Shards with replicas (`replicas` in the cluster file): a replica node
/// follows its shard's primary by itself, `CLUSTER SLOTS` lists it after
/// the primary, it sends writes (and reads, without `READONLY`) to the
/// primary with `MOVED`, serves reads to a `READONLY` connection, and once
/// promoted (`REPLICAOF NO ONE`, as Sentinel does) serves its shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_with_replicas() {
    let dir = std::env::temp_dir().join(format!(
        "turnstile-cluster-replicas-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cluster.toml");
    let path = file.clone();
    let c = Cluster::start_with(4, move |config, ports| {
        std::fs::write(
            &path,
            format!(
                "[[node]]\naddr = \"127.0.0.1:{}\"\nslots = [\"0-8191\"]\nreplicas = [\"127.0.0.1:{}\"]\n\n[[node]]\naddr = \"127.0.0.1:{}\"\nslots = [\"8192-16383\"]\nreplicas = [\"127.0.0.1:{}\"]\n",
                ports[0], ports[2], ports[1], ports[3]
            ),
        )
        .unwrap();
        config.cluster_nodes = None;
        config.cluster_config = Some(path.clone());
    })
    .await;
    for i in [2, 3] {
        let repl = &c.nodes[i].state().replication;
        eventually("the replicas are in sync", || {
            repl.link() == turnstile::replication::Link::Up
        })
        .await;
    }
    let mut p = c.plain(0).await;
    let slots: Value = q(&mut p, &["CLUSTER", "SLOTS"]).await;
    let Value::Array(ranges) = &slots else {
        panic!("{slots:?}")
    };
    assert_eq!(ranges.len(), 2);
    for (r, (primary, replica)) in ranges.iter().zip([(0, 2), (1, 3)]) {
        let Value::Array(entry) = r else {
            panic!("{r:?}")
        };
        assert_eq!(entry.len(), 4, "{entry:?}");
        let port = |v: &Value| match v {
            Value::Array(n) => match n[1] {
                Value::Int(p) => p,
                ref v => panic!("{v:?}"),
            },
            v => panic!("{v:?}"),
        };
        assert_eq!(port(&entry[2]), i64::from(c.ports[primary]));
        assert_eq!(port(&entry[3]), i64::from(c.ports[replica]));
    }
    let nodes: String = q(&mut p, &["CLUSTER", "NODES"]).await;
    let replica_line = nodes
        .lines()
        .find(|l| l.contains(&format!(":{}@", c.ports[2])))
        .unwrap();
    assert!(replica_line.contains(" slave "), "{nodes}");

    // hello = 866: shard 0's, written on its primary.
    let _: () = q(&mut p, &["SET", "hello", "world"]).await;
    let mut r = c.raw(2).await;
    let moved = format!("-MOVED 866 127.0.0.1:{}\r\n", c.ports[0]);
    assert_eq!(r.call(&["SET", "hello", "x"]).await, moved);
    assert_eq!(r.call(&["GET", "hello"]).await, moved);
    assert_eq!(r.call(&["READONLY"]).await, "+OK\r\n");
    eventually("the write reached the replica", || {
        c.nodes[2].state().store.exists(b"hello", c.clock.now())
    })
    .await;
    assert_eq!(r.call(&["GET", "hello"]).await, "$5\r\nworld\r\n");
    assert_eq!(r.call(&["SET", "hello", "x"]).await, moved);
    // user1000 = 3443 is shard 0's too; a key of shard 1 goes to its primary.
    assert_eq!(
        r.call(&["GET", "foo"]).await,
        format!("-MOVED 12182 127.0.0.1:{}\r\n", c.ports[1])
    );
    assert!(r
        .call(&["REPLICAOF", "127.0.0.1", &c.ports[1].to_string()])
        .await
        .starts_with("-ERR REPLICAOF in cluster mode must name another node of this node's shard"));
    // Promoted: it serves shard 0 now, and says so.
    assert_eq!(r.call(&["REPLICAOF", "NO", "ONE"]).await, "+OK\r\n");
    assert_eq!(r.call(&["SET", "hello", "again"]).await, "+OK\r\n");
    let mut p2 = c.plain(2).await;
    let nodes: String = q(&mut p2, &["CLUSTER", "NODES"]).await;
    let me = nodes.lines().find(|l| l.contains("myself")).unwrap();
    assert!(
        me.contains("myself,master - ") && me.ends_with(" 0-8191"),
        "{nodes}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    c.shutdown().await;
}
