//! The growing cluster through real servers started in-process, each on its
//! own port and bus port, talked to over TCP: nodes meet and agree, keys
//! route with MOVED, a moving slot answers ASK, ASKING and TRYAGAIN as
//! Redis 7 does, MIGRATE carries usage, and a node restarts from its file.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::common::{q, q_err, Server};

async fn node(dir: &std::path::Path, name: &str) -> Server {
    let file = dir.join(format!("{name}.conf"));
    Server::start_with(move |c| {
        c.cluster_enabled = true;
        c.cluster_config_file = file;
        c.cluster_node_timeout = 2000;
    })
    .await
}

async fn until(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Each node's `CLUSTER NODES` reduced to id and slots, as redis-cli's
/// "waiting for the cluster to join" compares them.
async fn signature(con: &mut MultiplexedConnection) -> Vec<String> {
    let text: String = q(con, &["CLUSTER", "NODES"]).await;
    let mut sig: Vec<String> = text
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            format!("{} {}", w[0], w[8..].join(" "))
        })
        .collect();
    sig.sort();
    sig
}

async fn myid(con: &mut MultiplexedConnection) -> String {
    q(con, &["CLUSTER", "MYID"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_meet_route_and_move_a_slot_with_its_usage() {
    let dir = tempfile_dir();
    let (a, b, c) = (
        node(&dir, "a").await,
        node(&dir, "b").await,
        node(&dir, "c").await,
    );
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    let mut cc = c.client().await;

    // A fresh node: alone, no slots, cluster down for keys.
    let info: String = q(&mut ca, &["CLUSTER", "INFO"]).await;
    assert!(
        info.contains("cluster_state:fail") && info.contains("cluster_known_nodes:1"),
        "{info}"
    );
    assert_eq!(
        q_err(&mut ca, &["RL.ALLOW", "k", "1", "60"]).await,
        "CLUSTERDOWN Hash slot not served"
    );

    let ports: Vec<u16> = [&a, &b, &c]
        .iter()
        .map(|s| s.handle().addr().port())
        .collect();
    let cports: Vec<u16> = [&a, &b, &c]
        .iter()
        .map(|s| {
            s.state()
                .cluster_node
                .as_ref()
                .unwrap()
                .state
                .lock()
                .me()
                .cport
        })
        .collect();
    // Distinct config epochs before the nodes meet, as `redis-cli
    // --cluster create` gives them. Two primaries met at epoch 0 settle
    // the collision by one of them bumping, in its own time; a move
    // started before that can bump the taker to the same epoch the other
    // reaches, and if the giver wins that tie, the third node never takes
    // the taker's claim (Redis's rules, which this test does not race).
    for (con, epoch) in [(&mut ca, "1"), (&mut cb, "2"), (&mut cc, "3")] {
        let _: () = q(con, &["CLUSTER", "SET-CONFIG-EPOCH", epoch]).await;
    }
    let _: () = q(&mut ca, &["CLUSTER", "ADDSLOTSRANGE", "0", "8000"]).await;
    let _: () = q(&mut cb, &["CLUSTER", "ADDSLOTSRANGE", "8001", "16383"]).await;
    for (con, i) in [(&mut cb, 0usize), (&mut cc, 0)] {
        let _: () = q(
            con,
            &[
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                &ports[i].to_string(),
                &cports[i].to_string(),
            ],
        )
        .await;
    }
    until("three nodes to agree", async || {
        let s = signature(&mut ca).await;
        s.len() == 3 && s == signature(&mut cb).await && s == signature(&mut cc).await
    })
    .await;
    let info: String = q(&mut cc, &["CLUSTER", "INFO"]).await;
    assert!(
        info.contains("cluster_state:ok") && info.contains("cluster_size:2"),
        "{info}"
    );

    // "k" hashes to slot 7629, a's; "{k}x" shares it.
    let slot: i64 = q(&mut cc, &["CLUSTER", "KEYSLOT", "k"]).await;
    assert_eq!(slot, 7629);
    let moved = q_err(&mut cc, &["RL.ALLOW", "k", "10", "60"]).await;
    assert_eq!(moved, format!("MOVED 7629 127.0.0.1:{}", ports[0]));
    for _ in 0..4 {
        let _: Vec<i64> = q(&mut ca, &["RL.ALLOW", "k", "10", "1h", "ALGO", "log"]).await;
    }
    let _: Vec<i64> = q(&mut ca, &["RL.ALLOW", "{k}x", "10", "1h"]).await;

    // Move slot 7629 from a to b in redis-cli's steps, one key at a time.
    let (ida, idb) = (myid(&mut ca).await, myid(&mut cb).await);
    let _: () = q(&mut cb, &["CLUSTER", "SETSLOT", "7629", "IMPORTING", &ida]).await;
    let _: () = q(&mut ca, &["CLUSTER", "SETSLOT", "7629", "MIGRATING", &idb]).await;
    let nodes: String = q(&mut ca, &["CLUSTER", "NODES"]).await;
    assert!(nodes.contains(&format!("[7629->-{idb}]")), "{nodes}");
    // Before any key moves: served where it is; a key not there is asked
    // for at the target; the target serves it only after ASKING.
    let _: Vec<i64> = q(&mut ca, &["RL.PEEK", "k", "10", "1h", "ALGO", "log"]).await;
    assert_eq!(
        q_err(&mut ca, &["RL.ALLOW", "{k}new", "10", "60"]).await,
        format!("ASK 7629 127.0.0.1:{}", ports[1])
    );
    assert_eq!(
        q_err(&mut cb, &["RL.ALLOW", "{k}new", "10", "60"]).await,
        format!("MOVED 7629 127.0.0.1:{}", ports[0])
    );
    let _: () = q(&mut cb, &["ASKING"]).await;
    let _: Vec<i64> = q(&mut cb, &["RL.ALLOW", "{k}new", "10", "60"]).await;
    // ASKING lasts one command.
    assert!(q_err(&mut cb, &["RL.ALLOW", "{k}new", "10", "60"])
        .await
        .starts_with("MOVED"));

    let keys: Vec<String> = q(&mut ca, &["CLUSTER", "GETKEYSINSLOT", "7629", "10"]).await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    let count: i64 = q(&mut ca, &["CLUSTER", "COUNTKEYSINSLOT", "7629"]).await;
    assert_eq!(count, 2);
    let port_b = ports[1].to_string();
    let _: () = q(
        &mut ca,
        &[
            "MIGRATE",
            "127.0.0.1",
            &port_b,
            "",
            "0",
            "5000",
            "KEYS",
            "k",
        ],
    )
    .await;
    // Half moved: a two-key request on the slot must wait.
    let split = q_err(
        &mut ca,
        &[
            "RL.ALLOWMANY",
            "LIMIT",
            "k",
            "10",
            "1h",
            "LIMIT",
            "{k}x",
            "10",
            "1h",
        ],
    )
    .await;
    assert_eq!(
        split,
        "TRYAGAIN Multiple keys request during rehashing of slot"
    );
    let _: () = q(
        &mut ca,
        &[
            "MIGRATE",
            "127.0.0.1",
            &port_b,
            "",
            "0",
            "5000",
            "KEYS",
            "{k}x",
        ],
    )
    .await;
    // Redis refuses to give away a slot that still has keys.
    let _: () = q(&mut cb, &["CLUSTER", "SETSLOT", "7629", "NODE", &idb]).await;
    let _: () = q(&mut ca, &["CLUSTER", "SETSLOT", "7629", "NODE", &idb]).await;
    until("the slot's new owner known everywhere", async || {
        let s = signature(&mut ca).await;
        s == signature(&mut cb).await
            && s == signature(&mut cc).await
            && q_err(&mut cc, &["RL.ALLOW", "k", "10", "60"]).await
                == format!("MOVED 7629 127.0.0.1:{}", ports[1])
    })
    .await;
    // The usage came along: 4 of 10 used, 6 left; one more leaves 5.
    let r: Vec<i64> = q(&mut cb, &["RL.ALLOW", "k", "10", "1h", "ALGO", "log"]).await;
    assert_eq!(&r[..3], &[1, 10, 5], "{r:?}");

    // b restarts from its file: same id, same slots.
    let before = signature(&mut cb).await;
    drop(cb);
    b.shutdown().await;
    let b = node(&dir, "b").await;
    let mut cb = b.client().await;
    assert_eq!(myid(&mut cb).await, idb);
    let mine = |sig: &[String]| sig.iter().find(|l| l.starts_with(&idb)).cloned();
    assert_eq!(mine(&signature(&mut cb).await), mine(&before));
    drop((ca, cc));
    for s in [a, c] {
        s.shutdown().await;
    }
    b.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_commands_refuse_as_redis_does() {
    let dir = tempfile_dir();
    let a = node(&dir, "a").await;
    let mut ca = a.client().await;
    for (args, want) in [
        (
            &["CLUSTER", "ADDSLOTS", "16384"][..],
            "ERR Invalid or out of range slot",
        ),
        (
            &["CLUSTER", "ADDSLOTS", "1", "1"],
            "ERR Slot 1 specified multiple times",
        ),
        (
            &["CLUSTER", "ADDSLOTSRANGE", "9", "3"],
            "ERR start slot number 9 is greater than end slot number 3",
        ),
        (
            &["CLUSTER", "DELSLOTS", "5"],
            "ERR Slot 5 is already unassigned",
        ),
        (
            &["CLUSTER", "SETSLOT", "5", "NODE", "nobody"],
            "ERR I don't know about node nobody",
        ),
        (
            &["CLUSTER", "SETSLOT", "5", "BOGUS"],
            "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP",
        ),
        (&["CLUSTER", "FORGET", "nobody"], "ERR Unknown node nobody"),
        (
            &["CLUSTER", "REPLICATE", "nobody"],
            "ERR Unknown node nobody",
        ),
        (
            &["CLUSTER", "MEET", "not-an-ip", "7000"],
            "ERR Invalid node address specified: not-an-ip:7000",
        ),
        (
            &["CLUSTER", "SET-CONFIG-EPOCH", "-1"],
            "ERR Invalid config epoch specified: -1",
        ),
    ] {
        assert_eq!(q_err(&mut ca, args).await, want, "{args:?}");
    }
    let me = myid(&mut ca).await;
    assert_eq!(
        q_err(&mut ca, &["CLUSTER", "FORGET", &me]).await,
        "ERR I tried hard but I can't forget myself..."
    );
    assert_eq!(
        q_err(&mut ca, &["CLUSTER", "REPLICATE", &me]).await,
        "ERR Can't replicate myself"
    );
    let _: () = q(&mut ca, &["CLUSTER", "ADDSLOTS", "1", "2"]).await;
    assert_eq!(
        q_err(&mut ca, &["CLUSTER", "ADDSLOTS", "2"]).await,
        "ERR Slot 2 is already busy"
    );
    let bumped: String = q(&mut ca, &["CLUSTER", "BUMPEPOCH"]).await;
    assert_eq!(bumped, "BUMPED 1");
    let still: String = q(&mut ca, &["CLUSTER", "BUMPEPOCH"]).await;
    assert_eq!(still, "STILL 1");
    assert_eq!(
        q_err(&mut ca, &["CLUSTER", "SET-CONFIG-EPOCH", "5"]).await,
        "ERR Node config epoch is already non-zero"
    );
    // The metrics say what CLUSTER INFO says.
    let addr = a.handle().metrics_addr().expect("metrics are on in tests");
    let (status, _, body) = crate::common::http(addr, "GET", "/metrics").await;
    assert_eq!(status, 200);
    for line in [
        "turnstile_cluster_state_ok 0",
        "turnstile_cluster_known_nodes 1",
        "turnstile_cluster_current_epoch 1",
        "turnstile_cluster_failovers_won_total 0",
    ] {
        assert!(body.lines().any(|l| l == line), "no {line:?} in:\n{body}");
    }
    assert!(
        body.contains("turnstile_cluster_messages_total{direction=\"sent\"}"),
        "{body}"
    );
    let _: () = q(&mut ca, &["CLUSTER", "SAVECONFIG"]).await;
    let text = std::fs::read_to_string(dir.join("a.conf")).unwrap();
    assert!(
        text.contains("myself,master") && text.ends_with("vars currentEpoch 1 lastVoteEpoch 0\n"),
        "{text}"
    );
    drop(ca);
    a.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The addresses `CLUSTER MEET` needs for `s`.
pub(crate) fn meet_args(s: &Server) -> (String, String) {
    let cport = s
        .state()
        .cluster_node
        .as_ref()
        .unwrap()
        .state
        .lock()
        .me()
        .cport;
    (s.handle().addr().port().to_string(), cport.to_string())
}

async fn my_flags(con: &mut MultiplexedConnection) -> String {
    let text: String = q(con, &["CLUSTER", "NODES"]).await;
    let line = text.lines().find(|l| l.contains("myself")).unwrap();
    line.split(' ').nth(2).unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_on_a_replica_swaps_roles_and_keeps_every_count() {
    let dir = tempfile_dir();
    let (a, b, c) = (
        node(&dir, "fa").await,
        node(&dir, "fb").await,
        node(&dir, "fc").await,
    );
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    let mut cc = c.client().await;
    let _: () = q(&mut ca, &["CLUSTER", "ADDSLOTSRANGE", "0", "8000"]).await;
    let _: () = q(&mut cb, &["CLUSTER", "ADDSLOTSRANGE", "8001", "16383"]).await;
    let (port_a, cport_a) = meet_args(&a);
    for con in [&mut cb, &mut cc] {
        let _: () = q(con, &["CLUSTER", "MEET", "127.0.0.1", &port_a, &cport_a]).await;
    }
    until("three nodes to agree", async || {
        let s = signature(&mut ca).await;
        s.len() == 3 && s == signature(&mut cb).await && s == signature(&mut cc).await
    })
    .await;
    let id_a = myid(&mut ca).await;
    let id_c = myid(&mut cc).await;
    let _: () = q(&mut cc, &["CLUSTER", "REPLICATE", &id_a]).await;
    until("c to replicate a", async || {
        let info: String = q(&mut cc, &["INFO", "replication"]).await;
        info.contains("master_link_status:up")
    })
    .await;

    // Redis's refusals.
    assert_eq!(
        q_err(&mut ca, &["CLUSTER", "FAILOVER"]).await,
        "ERR You should send CLUSTER FAILOVER to a replica"
    );
    assert_eq!(
        q_err(&mut cc, &["CLUSTER", "FAILOVER", "NOW"]).await,
        "ERR syntax error"
    );

    // Acknowledged counts on a's slots ("k" is slot 7629), then the switch
    // while the writes keep coming.
    let mut acked = 0i64;
    for _ in 0..200 {
        let _: i64 = q(&mut ca, &["INCR", "k"]).await;
        acked += 1;
    }
    let _: () = q(&mut cc, &["CLUSTER", "FAILOVER"]).await;
    let mut refused = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match redis::cmd("INCR")
            .arg("k")
            .query_async::<i64>(&mut ca)
            .await
        {
            Ok(_) => acked += 1,
            Err(e) => {
                let code = e.code().unwrap_or("?").to_string();
                if code == "MOVED" {
                    break;
                }
                refused.push(code);
            }
        }
        assert!(Instant::now() < deadline, "no switch: {refused:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        refused.iter().all(|c| c == "TRYAGAIN"),
        "only TRYAGAIN while paused: {refused:?}"
    );
    until("c to be primary and a its replica", async || {
        my_flags(&mut cc).await == "myself,master" && my_flags(&mut ca).await == "myself,slave"
    })
    .await;
    let text: String = q(&mut ca, &["CLUSTER", "NODES"]).await;
    let mine = text.lines().find(|l| l.contains("myself")).unwrap();
    assert_eq!(mine.split(' ').nth(3), Some(id_c.as_str()), "{text}");
    // Every acknowledged increment is on the new primary.
    let v: i64 = q(&mut cc, &["GET", "k"]).await;
    assert_eq!(v, acked);
    let _: i64 = q(&mut cc, &["INCR", "k"]).await;
    let info: String = q(&mut cb, &["CLUSTER", "INFO"]).await;
    assert!(info.contains("cluster_state:ok"), "{info}");
    until("a to resynchronise from c", async || {
        let info: String = q(&mut ca, &["INFO", "replication"]).await;
        info.contains("master_link_status:up")
    })
    .await;
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "turnstile-cluster-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Two nodes on one config file would overwrite each other's identity:
/// the second is refused, as Redis locks nodes.conf; an empty file is no
/// configuration yet; a symbolic link at the lock is not followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_config_file_is_one_nodes_and_an_empty_one_is_new() {
    let dir = tempfile_dir();
    let file = dir.join("shared.conf");
    std::fs::write(&file, "").unwrap();
    let a = node(&dir, "shared").await;
    let mut ca = a.client().await;
    let info: String = q(&mut ca, &["CLUSTER", "INFO"]).await;
    assert!(info.contains("cluster_known_nodes:1"), "{info}");
    let start_error = |name: &str| {
        let mut config = turnstile::config::Config::for_tests();
        config.cluster_enabled = true;
        config.cluster_config_file = dir.join(name);
        async move {
            let clock = turnstile::clock::ManualClock::new(turnstile::Nanos(
                1_700_000_000 * turnstile::Nanos::PER_SEC,
            ));
            match turnstile::start(&config, std::sync::Arc::new(clock)).await {
                Ok(_) => panic!("a second node started on the file"),
                Err(e) => e.to_string(),
            }
        }
    };
    let e = start_error("shared.conf").await;
    assert!(e.contains("is in use by another node"), "{e}");
    std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join("linked.conf.lock")).unwrap();
    let e = start_error("linked.conf").await;
    assert!(e.contains("is a symbolic link"), "{e}");
    assert!(!dir.join("elsewhere").exists());
    drop(ca);
    a.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
