//! The append-only file (`--appendonly yes`) through real servers and
//! clients: what a crash leaves behind is the file as it is at that
//! moment, so these tests copy the live file (with `appendfsync always`
//! every acknowledged write is in it) and start a second server from the
//! copy. SIGKILL of the real binary is `tests/ops/aof_crash.py`.

use crate::common::{info_u64, q, Server, START_SECS};
use redis::aio::MultiplexedConnection;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use turnstile::persist::aof::Fsync;
use turnstile::{Clock, Config, ManualClock, Nanos};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("turnstile-aof-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A server with the append-only file on in `dir` (beside a snapshot that
/// is never written: its interval is an hour).
fn durable(dir: &Path, fsync: Fsync) -> impl FnOnce(&mut Config) + '_ {
    move |c: &mut Config| {
        c.snapshot = Some(dir.join("dump.tsnap"));
        c.snapshot_interval = std::time::Duration::from_secs(3600);
        c.appendonly = true;
        c.appendfsync = fsync;
    }
}

/// The file a crash of `s` now would leave, copied to a new directory.
fn crash_image(dir: &Path, name: &str) -> PathBuf {
    let to = temp_dir(name);
    std::fs::copy(dir.join("appendonly.aof"), to.join("appendonly.aof")).unwrap();
    to
}

async fn info_field(c: &mut MultiplexedConnection, field: &str) -> String {
    let info: String = q(c, &["INFO", "persistence"]).await;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .to_string()
}

/// One key per algorithm and kind, some deleted, some flushed away.
async fn traffic(s: &Server, c: &mut MultiplexedConnection) {
    for step in 0..4 {
        for algo in ["window", "log", "gcra", "fixed"] {
            let key = format!("{algo}:k");
            let _: Vec<i64> = q(c, &["RL.ALLOW", &key, "10", "60", "ALGO", algo]).await;
            if step < 2 {
                let key = format!("{algo}:gone");
                let _: Vec<i64> = q(c, &["RL.ALLOW", &key, "10", "60", "ALGO", algo]).await;
            }
        }
        s.advance_ms(700);
    }
    let _: () = q(c, &["SET", "s:plain", "v"]).await;
    let _: () = q(c, &["SET", "s:ttl", "w", "PX", "50000"]).await;
    let _: i64 = q(c, &["INCRBY", "s:count", "41"]).await;
    let _: i64 = q(c, &["INCR", "s:count"]).await;
    let _: i64 = q(c, &["HSET", "h", "f", "1"]).await;
    let _: Vec<i64> = q(c, &["CL.THROTTLE", "cell", "4", "10", "60", "3"]).await;
    for algo in ["window", "log", "gcra", "fixed"] {
        let _: i64 = q(c, &["DEL", &format!("{algo}:gone")]).await;
    }
}

/// What every key answers now, charging nothing.
async fn observe(c: &mut MultiplexedConnection) -> Vec<String> {
    let mut seen = Vec::new();
    for algo in ["window", "log", "gcra", "fixed"] {
        for key in [format!("{algo}:k"), format!("{algo}:gone")] {
            let reply: Vec<i64> = q(c, &["RL.PEEK", &key, "10", "60", "ALGO", algo]).await;
            let pttl: i64 = q(c, &["PTTL", &key]).await;
            seen.push(format!("{key} {reply:?} pttl={pttl}"));
        }
    }
    for key in ["s:plain", "s:ttl", "s:count"] {
        let v: Option<String> = q(c, &["GET", key]).await;
        let pttl: i64 = q(c, &["PTTL", key]).await;
        seen.push(format!("{key}={v:?} pttl={pttl}"));
    }
    let h: Option<String> = q(c, &["HGET", "h", "f"]).await;
    let cell: Vec<i64> = q(c, &["CL.THROTTLE", "cell", "4", "10", "60", "0"]).await;
    let n: i64 = q(c, &["DBSIZE"]).await;
    seen.push(format!("h.f={h:?} cell={cell:?} dbsize={n}"));
    seen
}

/// A server started from `dir`'s files with the clock at `now`.
async fn restart(dir: &Path, now: Nanos) -> Server {
    Server::start_at(now, durable(dir, Fsync::Always)).await
}

async fn start_error(dir: &Path, truncated_ok: bool) -> String {
    let mut config = Config::for_tests();
    durable(dir, Fsync::Always)(&mut config);
    config.aof_load_truncated = truncated_ok;
    let clock = ManualClock::new(Nanos(START_SECS * Nanos::PER_SEC));
    match turnstile::start(&config, Arc::new(clock)).await {
        Ok(_) => panic!("the server started"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_restores_every_count() {
    let dir = temp_dir("replay");
    let a = Server::start_with(durable(&dir, Fsync::Always)).await;
    let mut c = a.client().await;
    assert_eq!(info_field(&mut c, "aof_enabled").await, "1");
    traffic(&a, &mut c).await;
    let expected = observe(&mut c).await;
    let image = crash_image(&dir, "replay-image");

    let b = restart(&image, a.clock.now()).await;
    let mut cb = b.client().await;
    assert_eq!(observe(&mut cb).await, expected);
    // And the restarted server appends to the file it loaded.
    let _: Vec<i64> = q(
        &mut cb,
        &["RL.ALLOW", "fixed:k", "10", "60", "ALGO", "fixed"],
    )
    .await;
    let after = observe(&mut cb).await;
    let image2 = crash_image(&image, "replay-image2");
    let c2 = restart(&image2, b.clock.now()).await;
    assert_eq!(observe(&mut c2.client().await).await, after);

    // FLUSHALL is an effect too.
    let _: () = q(&mut c, &["FLUSHALL"]).await;
    let image3 = crash_image(&dir, "replay-image3");
    let d = restart(&image3, a.clock.now()).await;
    let n: i64 = q(&mut d.client().await, &["DBSIZE"]).await;
    assert_eq!(n, 0);

    for s in [a, b, c2, d] {
        s.shutdown().await;
    }
    for d in [&dir, &image, &image2, &image3] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// Clients charge keys while BGREWRITEAOF runs again and again: the file
/// left at the end (a fresh base plus what came during and after each
/// rewrite) holds every acknowledged decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_under_load_keeps_every_count() {
    const KEYS: usize = 200;
    const CLIENTS: usize = 4;
    const ROUNDS: usize = 30;
    let dir = temp_dir("rewrite");
    let a = Server::start_with(durable(&dir, Fsync::Always)).await;
    let mut admin = a.client().await;
    let mut tasks = Vec::new();
    for t in 0..CLIENTS {
        let mut c = a.client().await;
        tasks.push(tokio::spawn(async move {
            let mut allowed = vec![0i64; KEYS];
            for round in 0..ROUNDS {
                let mut pipe = redis::pipe();
                for k in 0..KEYS {
                    let key = format!("k{}", (k + t + round) % KEYS);
                    pipe.cmd("RL.ALLOW")
                        .arg(key)
                        .arg(1_000_000)
                        .arg(3600)
                        .arg("ALGO")
                        .arg("fixed");
                }
                let replies: Vec<Vec<i64>> = pipe.query_async(&mut c).await.unwrap();
                for (k, r) in replies.iter().enumerate() {
                    allowed[(k + t + round) % KEYS] += r[0];
                }
            }
            allowed
        }));
    }
    let mut rewrites_asked = 0;
    while !tasks.iter().all(|t| t.is_finished()) {
        let r: redis::RedisResult<String> = crate::common::cmd(&["BGREWRITEAOF"])
            .query_async(&mut admin)
            .await;
        if r.is_ok() {
            rewrites_asked += 1;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut allowed = vec![0i64; KEYS];
    for t in tasks {
        for (k, n) in t.await.unwrap().into_iter().enumerate() {
            allowed[k] += n;
        }
    }
    crate::common::eventually("the last rewrite finished", || !a.state().aof.rewriting()).await;
    let rewrites: u64 = info_field(&mut admin, "aof_rewrites")
        .await
        .parse()
        .unwrap();
    assert!(
        rewrites_asked >= 1 && rewrites >= 1,
        "asked {rewrites_asked}, done {rewrites}"
    );
    assert_eq!(
        info_field(&mut admin, "aof_last_bgrewrite_status").await,
        "ok"
    );
    let base: u64 = info_field(&mut admin, "aof_base_size")
        .await
        .parse()
        .unwrap();
    let size: u64 = info_field(&mut admin, "aof_current_size")
        .await
        .parse()
        .unwrap();
    let file = std::fs::read(dir.join("appendonly.aof")).unwrap();
    assert_eq!(size, file.len() as u64);
    assert!(
        base > 0 && file.starts_with(b"TURNSNAP"),
        "a rewritten file starts with its base"
    );

    let image = crash_image(&dir, "rewrite-image");
    let b = restart(&image, a.clock.now()).await;
    let mut cb = b.client().await;
    for (k, n) in allowed.iter().enumerate() {
        let r: Vec<i64> = q(
            &mut cb,
            &[
                "RL.PEEK",
                &format!("k{k}"),
                "1000000",
                "3600",
                "ALGO",
                "fixed",
            ],
        )
        .await;
        assert_eq!(1_000_000 - r[2] - 1, *n, "k{k}: remaining {r:?}");
    }
    assert_eq!(
        allowed.iter().sum::<i64>(),
        (CLIENTS * ROUNDS * KEYS) as i64,
        "every request was allowed and counted"
    );
    a.shutdown().await;
    b.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&image).unwrap();
}

/// The blocks after the base and its marker (`aof_base_size` bytes): each
/// one's offset and its payload's length.
fn blocks(file: &[u8], base: usize) -> Vec<(usize, usize)> {
    let mut at = base;
    let mut found = Vec::new();
    while at < file.len() {
        let len = u32::from_le_bytes(file[at..at + 4].try_into().unwrap()) as usize;
        found.push((at, len));
        at += 8 + len + 4;
    }
    assert_eq!(at, file.len(), "whole blocks");
    found
}

/// A block of `payload`, checksums and all, as the writer makes it.
fn block(payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    turnstile::persist::aof::encode_blocks(&mut b, payload);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_record_is_cut_off_and_the_rest_loads() {
    let dir = temp_dir("torn");
    let a = Server::start_with(durable(&dir, Fsync::Always)).await;
    let mut c = a.client().await;
    traffic(&a, &mut c).await;
    let expected = observe(&mut c).await;
    let image = crash_image(&dir, "torn-image");
    let path = image.join("appendonly.aof");
    let whole = std::fs::read(&path).unwrap();
    // A crash in the middle of the next write: its first bytes only.
    let _: Vec<i64> = q(
        &mut c,
        &["RL.ALLOW", "fixed:k", "10", "60", "ALGO", "fixed"],
    )
    .await;
    let next = std::fs::read(dir.join("appendonly.aof")).unwrap();
    let torn_block = &next[whole.len()..];
    assert!(torn_block.len() > 12, "{}", torn_block.len());
    let mut last_unwritten = torn_block.to_vec();
    let n = last_unwritten.len();
    last_unwritten[n - 6] ^= 0xFF;
    let mut cases: Vec<Vec<u8>> = [1, 4, 5, 8, 12, torn_block.len() - 1]
        .into_iter()
        .map(|cut| torn_block[..cut].to_vec())
        .collect();
    // Whole, but its last bytes not as written (a crash that extended the
    // file before writing its last page): the last block only.
    cases.push(last_unwritten);
    for (i, tail) in cases.iter().enumerate() {
        let mut torn = whole.clone();
        torn.extend_from_slice(tail);
        std::fs::write(&path, &torn).unwrap();
        // Refused when asked to (aof-load-truncated no), untouched.
        let e = start_error(&image, false).await;
        assert!(e.contains(&format!("torn at byte {}", whole.len())), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), torn);
        // Loaded up to it by default, and the tail cut off.
        let b = restart(&image, a.clock.now()).await;
        assert_eq!(observe(&mut b.client().await).await, expected, "case {i}");
        b.shutdown().await;
        let after = std::fs::read(&path).unwrap();
        assert_eq!(&after[..whole.len()], &whole[..], "case {i}");
    }
    // Zeros where a crash left the file longer than what was written.
    let mut zeros = whole.clone();
    zeros.extend_from_slice(&[0; 4096]);
    std::fs::write(&path, &zeros).unwrap();
    let b = restart(&image, a.clock.now()).await;
    assert_eq!(observe(&mut b.client().await).await, expected);
    b.shutdown().await;
    a.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&image).unwrap();
}

/// Only the last block may be torn: a block before the end that does not
/// check (a flipped byte anywhere: a length, a kind, a count) refuses the
/// start, naming its byte, with the file left as it is, whatever
/// `aof-load-truncated` says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_before_the_end_refuses_to_start() {
    let dir = temp_dir("corrupt");
    let a = Server::start_with(durable(&dir, Fsync::Always)).await;
    let mut c = a.client().await;
    let base: usize = info_field(&mut c, "aof_base_size").await.parse().unwrap();
    traffic(&a, &mut c).await;
    let image = crash_image(&dir, "corrupt-image");
    let path = image.join("appendonly.aof");
    let good = std::fs::read(&path).unwrap();
    let all = blocks(&good, base);
    assert!(all.len() > 6, "{}", all.len());
    let (third, third_len) = all[2];
    let middle = all[all.len() / 2].0;

    let refused = |bad: Vec<u8>, at: usize, why: &'static str| {
        let (image, path) = (image.clone(), path.clone());
        async move {
            std::fs::write(&path, &bad).unwrap();
            for truncated_ok in [true, false] {
                let e = start_error(&image, truncated_ok).await;
                assert!(e.contains(&format!("corrupted at byte {at}")), "{e}");
                assert!(e.contains(why), "{e}");
                assert!(e.contains(&path.display().to_string()), "{e}");
                assert_eq!(
                    std::fs::read(&path).unwrap(),
                    bad,
                    "the file is left as it is"
                );
            }
        }
    };
    // A length field mid-file that runs past the end: not a torn tail.
    let mut bad = good.clone();
    bad[middle + 2] = 0x7F;
    refused(bad, middle, "length does not match its checksum").await;
    // The frame kind in the third block.
    let mut bad = good.clone();
    bad[third + 8] = 0x77;
    refused(bad, third, "do not match its checksum").await;
    // A byte of a count (the last bytes of a record) in the middle block.
    let mut bad = good.clone();
    let (m, m_len) = all[all.len() / 2];
    bad[m + 8 + m_len - 1] ^= 0x01;
    refused(bad, m, "do not match its checksum").await;
    // A block that checks but holds a frame kind no stream has.
    let mut payload = good[third + 8..third + 8 + third_len].to_vec();
    payload[0] = 0x77;
    let mut bad = good[..third].to_vec();
    bad.extend_from_slice(&block(&payload));
    bad.extend_from_slice(&good[third + 8 + third_len + 4..]);
    refused(bad, third + 8, "unknown frame kind 119").await;

    // The base's checksum.
    let mut bad = good.clone();
    bad[base / 2] ^= 0x10;
    std::fs::write(&path, &bad).unwrap();
    let e = start_error(&image, true).await;
    assert!(e.contains("in its base"), "{e}");

    a.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&image).unwrap();
}

/// A file of the format before checksummed blocks (frames straight after
/// the base) still loads, and is rewritten in the new format before
/// anything is appended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_the_old_format_loads_and_is_rewritten() {
    let dir = temp_dir("old-format");
    let a = Server::start_with(durable(&dir, Fsync::Always)).await;
    let mut c = a.client().await;
    let base: usize = info_field(&mut c, "aof_base_size").await.parse().unwrap();
    traffic(&a, &mut c).await;
    let expected = observe(&mut c).await;
    let image = crash_image(&dir, "old-format-image");
    let path = image.join("appendonly.aof");
    let new = std::fs::read(&path).unwrap();
    let marker = turnstile::persist::aof::TAIL_MAGIC.len();
    let mut old = new[..base - marker].to_vec();
    for (at, len) in blocks(&new, base) {
        old.extend_from_slice(&new[at + 8..at + 8 + len]);
    }
    std::fs::write(&path, &old).unwrap();
    let b = restart(&image, a.clock.now()).await;
    let mut cb = b.client().await;
    assert_eq!(observe(&mut cb).await, expected);
    let _: () = q(&mut cb, &["SET", "after", "1"]).await;
    let expected = observe(&mut cb).await;
    let rewritten = std::fs::read(&path).unwrap();
    let base_b: usize = info_field(&mut cb, "aof_base_size").await.parse().unwrap();
    assert_eq!(
        &rewritten[base_b - marker..base_b],
        turnstile::persist::aof::TAIL_MAGIC
    );
    blocks(&rewritten, base_b);
    let image2 = crash_image(&image, "old-format-image2");
    let d = restart(&image2, a.clock.now()).await;
    let mut cd = d.client().await;
    assert_eq!(observe(&mut cd).await, expected);
    let v: String = q(&mut cd, &["GET", "after"]).await;
    assert_eq!(v, "1");
    for s in [a, b, d] {
        s.shutdown().await;
    }
    for d in [&dir, &image, &image2] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// CONFIG SET turns the file on (a base of the keyspace as it is) and
/// off; the settings read back as Redis names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_set_appendonly_starts_the_file_from_the_keyspace() {
    let dir = temp_dir("config");
    let a = Server::start_with(|c| {
        c.snapshot = Some(dir.join("dump.tsnap"));
        c.snapshot_interval = std::time::Duration::from_secs(3600);
    })
    .await;
    let mut c = a.client().await;
    assert_eq!(info_field(&mut c, "aof_enabled").await, "0");
    let e = crate::common::q_err(&mut c, &["BGREWRITEAOF"]).await;
    assert!(e.contains("append-only file is off"), "{e}");
    traffic(&a, &mut c).await;
    let v: Vec<String> = q(&mut c, &["CONFIG", "GET", "appendfsync"]).await;
    assert_eq!(v, ["appendfsync", "everysec"]);
    let e = crate::common::q_err(&mut c, &["CONFIG", "SET", "appendfsync", "sometimes"]).await;
    assert!(
        e.contains("must be one of the following: always, everysec, no"),
        "{e}"
    );
    let _: () = q(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "appendfsync",
            "always",
            "appendonly",
            "yes",
        ],
    )
    .await;
    crate::common::eventually("the file is on", || a.state().aof.is_on()).await;
    let _: Vec<i64> = q(
        &mut c,
        &["RL.ALLOW", "fixed:k", "10", "60", "ALGO", "fixed"],
    )
    .await;
    let expected = observe(&mut c).await;
    let image = crash_image(&dir, "config-image");
    let b = restart(&image, a.clock.now()).await;
    assert_eq!(observe(&mut b.client().await).await, expected);
    b.shutdown().await;

    let _: () = q(&mut c, &["CONFIG", "SET", "appendonly", "no"]).await;
    crate::common::eventually("the file is off", || !a.state().aof.is_on()).await;
    let size = std::fs::metadata(dir.join("appendonly.aof")).unwrap().len();
    let _: Vec<i64> = q(
        &mut c,
        &["RL.ALLOW", "fixed:k", "10", "60", "ALGO", "fixed"],
    )
    .await;
    assert_eq!(
        std::fs::metadata(dir.join("appendonly.aof")).unwrap().len(),
        size
    );
    a.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&image).unwrap();
}

/// What the flags refuse, `CONFIG SET` refuses, in Redis's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_set_refuses_what_the_flags_refuse() {
    for args in [
        &["--appendfsync", "sometimes"][..],
        &["--auto-aof-rewrite-percentage", "-1"],
        &["--auto-aof-rewrite-min-size", "lots"],
        &["--aof-load-truncated", "maybe"],
        &["--appendonly", "1"],
        &["--appendfilename", "dir/appendonly.aof"],
    ] {
        let argv = std::iter::once("turnstile").chain(args.iter().copied());
        assert!(Config::parse_from(argv).is_err(), "{args:?}");
    }
    let a = Server::start().await;
    let mut c = a.client().await;
    for (name, value, why) in [
        (
            "appendfsync",
            "sometimes",
            "must be one of the following: always, everysec, no",
        ),
        (
            "auto-aof-rewrite-percentage",
            "-1",
            "argument must be between 0 and 2147483647 inclusive",
        ),
        (
            "auto-aof-rewrite-min-size",
            "lots",
            "argument must be a memory value",
        ),
        (
            "aof-load-truncated",
            "maybe",
            "argument must be 'yes' or 'no'",
        ),
        ("appendonly", "1", "argument must be 'yes' or 'no'"),
        ("appendfilename", "other.aof", "can't set immutable config"),
    ] {
        let e = crate::common::q_err(&mut c, &["CONFIG", "SET", name, value]).await;
        assert!(e.contains(why), "{name} {value}: {e}");
    }
    let _: () = q(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "auto-aof-rewrite-percentage",
            "50",
            "auto-aof-rewrite-min-size",
            "1mb",
        ],
    )
    .await;
    let v: Vec<String> = q(&mut c, &["CONFIG", "GET", "auto-aof-rewrite-*"]).await;
    assert_eq!(
        v,
        [
            "auto-aof-rewrite-min-size",
            "1048576",
            "auto-aof-rewrite-percentage",
            "50"
        ]
    );
    a.shutdown().await;
}

/// A script stopped after writing (it reaches every key, `DBSIZE`,
/// holding one shard), rolled back and run again sends its write to the
/// file (and replicas) once, as the run that counts, and counts its
/// commands once: the stream used to carry the abandoned write, its
/// undoing and the write again, and `cmdstat_incr` counted two calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_run_again_sends_its_effects_and_counts_its_calls_once() {
    let dir = temp_dir("rerun");
    let s = Server::start_with(durable(&dir, Fsync::Always)).await;
    let mut c = s.client().await;
    let script = "if ARGV[1] == '1' then redis.call('INCR', KEYS[1]) end \
                  redis.call('DBSIZE') return 1";
    // The first run finds the script reaches every key (nothing written:
    // it runs again over every shard), and remembers it.
    let _: i64 = q(&mut c, &["EVAL", script, "1", "k1", "0"]).await;
    // One INCR's frame, measured on a key of the same length and value.
    let before = info_u64(&mut c, "replication", "master_repl_offset").await;
    let _: i64 = q(&mut c, &["INCR", "k2"]).await;
    let one_write = info_u64(&mut c, "replication", "master_repl_offset").await - before;
    assert!(one_write > 0, "the file takes the stream");
    let _: () = q(&mut c, &["CONFIG", "RESETSTAT"]).await;
    // This run writes, then is stopped and run again holding every shard.
    let before = info_u64(&mut c, "replication", "master_repl_offset").await;
    let _: i64 = q(&mut c, &["EVAL", script, "1", "k3", "1"]).await;
    assert_eq!(
        info_u64(&mut c, "replication", "master_repl_offset").await - before,
        one_write
    );
    let got: String = q(&mut c, &["GET", "k3"]).await;
    assert_eq!(got, "1");
    let stats: String = q(&mut c, &["INFO", "commandstats"]).await;
    let incr = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_incr:"))
        .unwrap_or_else(|| panic!("no cmdstat_incr in {stats}"));
    assert!(incr.starts_with("cmdstat_incr:calls=1,"), "{incr}");
    s.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

const MISCONF: &str = "MISCONF Errors writing to the AOF file: No space left on device";

/// A full disk under `everysec`: once a write of the file failed, write
/// commands are refused with Redis's `-MISCONF` (in `MULTI`, at `EXEC`,
/// and from a script), reads and PING go on, INFO says `err`; once the
/// disk takes a write again, writes are accepted and every acknowledged
/// one is in the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_everysec_refuses_writes_until_a_write_succeeds() {
    let dir = temp_dir("full-everysec");
    let a = Server::start_with(durable(&dir, Fsync::Everysec)).await;
    let mut c = a.client().await;
    let _: () = q(&mut c, &["SET", "before", "1"]).await;
    let aof = a.state().aof.clone();
    aof.fail_writes_with(libc::ENOSPC);
    // The next write (or everysec's fsync) finds the disk full: a write
    // acknowledged before that is the most `everysec` can lose.
    let _: redis::RedisResult<()> = redis::cmd("SET")
        .arg("at")
        .arg("1")
        .query_async(&mut c)
        .await;
    crate::common::eventually("the write failed", || aof.write_error().is_some()).await;
    assert_eq!(info_field(&mut c, "aof_last_write_status").await, "err");
    for w in [
        vec!["SET", "k", "v"],
        vec!["RL.ALLOW", "fixed:k", "10", "60", "ALGO", "fixed"],
        vec!["DEL", "before"],
        vec!["EVAL", "return redis.call('SET', 'from-script', '1')", "0"],
    ] {
        let e = crate::common::q_err(&mut c, &w).await;
        assert!(e.contains(MISCONF), "{w:?}: {e}");
    }
    // A transaction: the write is refused when queued, EXEC aborts.
    let _: () = q(&mut c, &["MULTI"]).await;
    let e = crate::common::q_err(&mut c, &["SET", "k", "v"]).await;
    assert!(e.starts_with(MISCONF), "{e}");
    let e = crate::common::q_err(&mut c, &["EXEC"]).await;
    assert!(e.starts_with("EXECABORT"), "{e}");
    // Reads, PING and RL.PEEK go on.
    crate::common::assert_pong(&mut c).await;
    let v: String = q(&mut c, &["GET", "before"]).await;
    assert_eq!(v, "1");
    let _: Vec<i64> = q(&mut c, &["RL.PEEK", "fixed:k", "10", "60", "ALGO", "fixed"]).await;
    // A transaction queued before the disk filled is refused at EXEC.
    let mut t = a.client().await;
    aof.fail_writes_with(0);
    crate::common::eventually("writes again", || aof.write_error().is_none()).await;
    let _: () = q(&mut t, &["MULTI"]).await;
    let _: String = q(&mut t, &["SET", "queued", "1"]).await;
    aof.fail_writes_with(libc::ENOSPC);
    let _: redis::RedisResult<()> = redis::cmd("SET")
        .arg("again")
        .arg("1")
        .query_async(&mut c)
        .await;
    crate::common::eventually("the write failed", || aof.write_error().is_some()).await;
    let e = crate::common::q_err(&mut t, &["EXEC"]).await;
    assert!(e.starts_with("EXECABORT") && e.contains("MISCONF"), "{e}");
    // The disk takes writes again: so do we.
    aof.fail_writes_with(0);
    crate::common::eventually("writes again", || aof.write_error().is_none()).await;
    assert_eq!(info_field(&mut c, "aof_last_write_status").await, "ok");
    let _: () = q(&mut c, &["SET", "after", "1"]).await;
    let expected: Vec<Option<String>> =
        q(&mut c, &["MGET", "before", "at", "again", "after", "k"]).await;
    assert_eq!(expected[0].as_deref(), Some("1"));
    assert_eq!(expected[3].as_deref(), Some("1"));
    assert_eq!(expected[4], None, "a refused write changed nothing");
    // Every acknowledged write is in the file (what a SIGKILL leaves).
    aof.flush(&a.state().store, true).unwrap();
    let image = crash_image(&dir, "full-everysec-image");
    let b = restart(&image, a.clock.now()).await;
    let got: Vec<Option<String>> = q(
        &mut b.client().await,
        &["MGET", "before", "at", "again", "after", "k"],
    )
    .await;
    assert_eq!(got, expected);
    for s in [a, b] {
        s.shutdown().await;
    }
    for d in [&dir, &image] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// A full disk under `always`: the server cannot keep its promise, so it
/// exits (here the test's hook stands in for the exit), and no reply for
/// the write it could not persist went out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_always_exits_before_any_reply() {
    let dir = temp_dir("full-always");
    let a = Server::start_with(durable(&dir, Fsync::Always)).await;
    let mut c = a.client().await;
    let _: () = q(&mut c, &["SET", "before", "1"]).await;
    let aof = a.state().aof.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    aof.on_fatal(move || {
        let _ = tx.lock().unwrap().send(());
    });
    aof.fail_writes_with(libc::ENOSPC);
    let mut w = a.client().await;
    let write = tokio::spawn(async move {
        let _: () = q(&mut w, &["SET", "lost", "1"]).await;
    });
    tokio::task::spawn_blocking(move || rx.recv_timeout(crate::common::IO_TIMEOUT))
        .await
        .unwrap()
        .expect("the server exits when a write fails under always");
    // The reply never left (the process would be gone by now).
    let mut write = write;
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), &mut write)
            .await
            .is_err(),
        "a write not in the file was acknowledged"
    );
    aof.fail_writes_with(0);
    write.await.unwrap();
    a.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A zero-byte append-only file beside a snapshot (as `touch` or a restore
/// tool leaves it) means no effects since a base it does not hold: the
/// snapshot is loaded, and a proper base written before appending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_file_beside_a_snapshot_keeps_the_snapshot() {
    let dir = temp_dir("empty");
    let a = Server::start_with(|c| {
        c.snapshot = Some(dir.join("dump.tsnap"));
        c.snapshot_interval = std::time::Duration::from_secs(3600);
    })
    .await;
    let mut c = a.client().await;
    for i in 0..51 {
        let _: () = q(&mut c, &["SET", &format!("k{i}"), "v"]).await;
    }
    let _: () = q(&mut c, &["SAVE"]).await;
    a.shutdown().await;
    std::fs::File::create(dir.join("appendonly.aof")).unwrap();
    let b = restart(&dir, Nanos(START_SECS * Nanos::PER_SEC)).await;
    let mut cb = b.client().await;
    let n: i64 = q(&mut cb, &["DBSIZE"]).await;
    assert_eq!(n, 51);
    let _: () = q(&mut cb, &["SET", "k51", "v"]).await;
    let image = crash_image(&dir, "empty-image");
    let d = restart(&image, b.clock.now()).await;
    let n: i64 = q(&mut d.client().await, &["DBSIZE"]).await;
    assert_eq!(n, 52);
    for s in [b, d] {
        s.shutdown().await;
    }
    for d in [&dir, &image] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// Two servers on one append-only file would overwrite each other's
/// records: the second refuses to start, naming the lock; once the first
/// stops, it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_file_refuses_to_start() {
    let dir = temp_dir("two");
    let a = Server::start_with(durable(&dir, Fsync::Always)).await;
    let _: () = q(&mut a.client().await, &["SET", "a", "1"]).await;
    let e = start_error(&dir, true).await;
    assert!(e.contains("another server has it open"), "{e}");
    assert!(e.contains("appendonly.aof.lock"), "{e}");
    // After a rewrite (a rename over the file) too.
    let _: String = q(&mut a.client().await, &["BGREWRITEAOF"]).await;
    crate::common::eventually("rewritten", || {
        a.state()
            .aof
            .rewrites
            .load(std::sync::atomic::Ordering::Relaxed)
            == 1
    })
    .await;
    let e = start_error(&dir, true).await;
    assert!(e.contains("another server has it open"), "{e}");
    a.shutdown().await;
    let b = restart(&dir, Nanos(START_SECS * Nanos::PER_SEC)).await;
    let v: String = q(&mut b.client().await, &["GET", "a"]).await;
    assert_eq!(v, "1");
    b.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The file is not followed through a symbolic link (as snapshots are
/// not): the start is refused and the link's target left alone. Temporary
/// files of rewrites a kill cut short are removed at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlinked_file_is_refused_and_stale_temporaries_removed() {
    let dir = temp_dir("symlink");
    let victim = dir.join("victim");
    std::fs::write(&victim, b"").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("appendonly.aof")).unwrap();
    let e = start_error(&dir, true).await;
    assert!(e.contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"");
    std::fs::remove_file(dir.join("appendonly.aof")).unwrap();
    // The lock beside it too: refused naming the lock, its target never
    // created.
    let gone = dir.join("victim-lock");
    let _ = std::fs::remove_file(dir.join("appendonly.aof.lock"));
    std::os::unix::fs::symlink(&gone, dir.join("appendonly.aof.lock")).unwrap();
    let e = start_error(&dir, true).await;
    assert!(e.contains("appendonly.aof.lock: is a symbolic link"), "{e}");
    assert!(!gone.exists());
    std::fs::remove_file(dir.join("appendonly.aof.lock")).unwrap();

    let stale = dir.join(".appendonly.aof.tmp-12345-00000000deadbeef");
    std::fs::write(&stale, vec![7u8; 4096]).unwrap();
    let other = dir.join(".dump.tsnap.tmp-12345-00000000deadbeef");
    std::fs::write(&other, b"not ours to remove").unwrap();
    let a = Server::start_with(durable(&dir, Fsync::Always)).await;
    assert!(!stale.exists(), "a stale rewrite temporary is removed");
    assert!(other.exists());
    a.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With `always`, a write acknowledged while `CONFIG SET appendonly yes`
/// writes its base is in the file, fsynced, when its reply arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_during_the_first_base_are_durable_before_their_reply() {
    let dir = temp_dir("first-base");
    let a = Server::start_with(|c| {
        c.snapshot = Some(dir.join("dump.tsnap"));
        c.snapshot_interval = std::time::Duration::from_secs(3600);
    })
    .await;
    let mut c = a.client().await;
    // Enough keys that the base takes a while to write.
    let mut pipe = redis::pipe();
    for i in 0..200_000 {
        pipe.cmd("SET").arg(format!("fill:{i}")).arg("x").ignore();
    }
    let _: () = pipe.query_async(&mut c).await.unwrap();
    let _: () = q(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "appendfsync",
            "always",
            "appendonly",
            "yes",
        ],
    )
    .await;
    let path = dir.join("appendonly.aof");
    for i in 0..20 {
        let key = format!("probe:{i}");
        let _: () = q(&mut c, &["SET", &key, "1"]).await;
        let image = crash_image(&dir, "first-base-image");
        let b = restart(&image, a.clock.now()).await;
        let v: Option<String> = q(&mut b.client().await, &["GET", &key]).await;
        assert_eq!(
            v.as_deref(),
            Some("1"),
            "{key} was acknowledged, not in {}",
            path.display()
        );
        b.shutdown().await;
        std::fs::remove_dir_all(&image).unwrap();
        if a.state().aof.is_on() && i > 3 {
            break;
        }
    }
    a.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Whatever the writer writes, the loader reads back: a keyspace of every
/// kind, appended to, rewritten while written, appended to again, loads
/// to the same keys and states.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_writer_writes_the_loader_reads_back() {
    let dir = temp_dir("roundtrip");
    let a = Server::start_with(durable(&dir, Fsync::Everysec)).await;
    let mut c = a.client().await;
    traffic(&a, &mut c).await;
    let _: String = q(&mut c, &["BGREWRITEAOF"]).await;
    traffic(&a, &mut c).await;
    crate::common::eventually("rewritten", || {
        a.state()
            .aof
            .rewrites
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    })
    .await;
    traffic(&a, &mut c).await;
    let _: i64 = q(&mut c, &["LPUSH", "list", "a", "b"]).await;
    let _: i64 = q(&mut c, &["ZADD", "z", "1", "m"]).await;
    let expected = observe(&mut c).await;
    let dump = |s: &Server| {
        let mut keys = std::collections::BTreeMap::new();
        let store = &s.state().store;
        for i in 0..store.shard_count() {
            store.for_each_in_shard(i, s.clock.now(), |k, e| {
                keys.insert(k.to_vec(), format!("{e:?}"));
            });
        }
        keys
    };
    let want = dump(&a);
    a.state().aof.flush(&a.state().store, true).unwrap();
    let image = crash_image(&dir, "roundtrip-image");
    let b = restart(&image, a.clock.now()).await;
    assert_eq!(observe(&mut b.client().await).await, expected);
    assert_eq!(dump(&b), want);
    for s in [a, b] {
        s.shutdown().await;
    }
    for d in [&dir, &image] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// The value of `series` in a scrape of `s`'s `/metrics`.
async fn scraped(s: &Server, series: &str) -> f64 {
    let addr = s.handle().metrics_addr().expect("metrics are on in tests");
    let (status, _, body) = crate::common::http(addr, "GET", "/metrics").await;
    assert_eq!(status, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

/// Scrapes until `series` reads `want` (bounded by the tests' timeout).
async fn scraped_until(s: &Server, series: &str, want: impl Fn(f64) -> bool) -> f64 {
    let deadline = tokio::time::Instant::now() + crate::common::IO_TIMEOUT;
    loop {
        let v = scraped(s, series).await;
        if want(v) {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} stayed at {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// `/metrics` says whether the file is on, how long writes have waited
/// to be in it as `appendfsync` promises (growing while the disk takes
/// none, back to 0 once it does), and counts rewrites by result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_the_file_its_fsync_lag_and_its_rewrites() {
    const OK: &str = "turnstile_aof_rewrites_total{result=\"ok\"}";
    const FAILED: &str = "turnstile_aof_rewrites_total{result=\"error\"}";
    const LAG: &str = "turnstile_aof_fsync_lag_seconds";
    let dir = temp_dir("metrics");
    let a = Server::start_with(durable(&dir, Fsync::Everysec)).await;
    let mut c = a.client().await;
    assert_eq!(scraped(&a, "turnstile_aof_enabled").await, 1.0);
    let _: () = q(&mut c, &["SET", "k", "1"]).await;
    let ok = scraped(&a, OK).await;
    assert_eq!(scraped(&a, FAILED).await, 0.0);
    let _: String = q(&mut c, &["BGREWRITEAOF"]).await;
    scraped_until(&a, OK, |v| v == ok + 1.0).await;
    // Everything is fsynced within everysec's second.
    scraped_until(&a, LAG, |v| v == 0.0).await;

    // The disk takes nothing: the write waits, and its wait shows.
    let aof = a.state().aof.clone();
    aof.fail_writes_with(libc::ENOSPC);
    let _: redis::RedisResult<()> = redis::cmd("SET")
        .arg("at")
        .arg("1")
        .query_async(&mut c)
        .await;
    crate::common::eventually("the write failed", || aof.write_error().is_some()).await;
    let first = scraped(&a, LAG).await;
    assert!(first > 0.0, "{first}");
    scraped_until(&a, LAG, |v| v > first).await;
    assert_eq!(scraped(&a, "turnstile_aof_last_write_ok").await, 0.0);
    // A rewrite cannot be written either: counted as failed.
    let _: String = q(&mut c, &["BGREWRITEAOF"]).await;
    scraped_until(&a, FAILED, |v| v == 1.0).await;
    assert_eq!(info_field(&mut c, "aof_last_bgrewrite_status").await, "err");

    // The disk takes writes again: the lag is gone once they are fsynced.
    aof.fail_writes_with(0);
    scraped_until(&a, LAG, |v| v == 0.0).await;
    assert_eq!(scraped(&a, "turnstile_aof_last_write_ok").await, 1.0);

    let _: () = q(&mut c, &["CONFIG", "SET", "appendonly", "no"]).await;
    scraped_until(&a, "turnstile_aof_enabled", |v| v == 0.0).await;
    assert_eq!(scraped(&a, LAG).await, 0.0);
    a.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
