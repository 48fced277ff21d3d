//! Scripts that do not end on their own: `TIME` moves inside a script (so
//! one that waits on it ends), and shutdown finishes within its bound
//! while a script runs, whether it has written or not. In a file of its
//! own: a script shutdown gives up on keeps its thread busy until the
//! process exits.

use std::time::{Duration, Instant};

use crate::common::*;
use turnstile::server::{SCRIPT_GRACE, SCRIPT_WAIT};

/// Redis 7.0 reads the clock on every `TIME`, in scripts too: a script
/// that writes and then waits for `TIME` to move ends when the clock does
/// (it used to loop forever on the script's start time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_moves_inside_a_script() {
    let srv = Server::start().await;
    let mut runner = srv.raw().await;
    runner
        .send(&encode_words(&[
            "EVAL",
            "local t = redis.call('TIME')[1] redis.call('SET', KEYS[1], t) \
             while redis.call('TIME')[1] == t do end return redis.call('TIME')[1] - t",
            "1",
            "k",
        ]))
        .await;
    // The script may start after any given advance: keep the clock moving
    // until it answers.
    let reply = loop {
        srv.advance_ms(1000);
        let read = tokio::time::timeout(Duration::from_millis(20), runner.reply_text()).await;
        if let Ok(reply) = read {
            break reply;
        }
    };
    assert_eq!(reply, ":1\r\n");
    srv.shutdown().await;
}

/// A script that has not written is stopped by shutdown, after
/// `SCRIPT_GRACE`: its client gets the kill error, and the final snapshot
/// is written as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_a_script_that_has_not_written() {
    let dir = tempdir();
    let snapshot = dir.join("dump.tsnap");
    let srv = {
        let snapshot = snapshot.clone();
        Server::start_with(move |c| {
            c.snapshot = Some(snapshot);
            c.lua_time_limit = 50;
        })
        .await
    };
    let mut other = srv.raw().await;
    assert_eq!(other.call(&["SET", "before", "1"]).await, "+OK\r\n");
    let mut runner = srv.raw().await;
    runner
        .send(&encode_words(&["EVAL", "while true do end", "0"]))
        .await;
    wait_busy(&mut other).await;
    let started = Instant::now();
    srv.shutdown_within(SCRIPT_WAIT + Duration::from_secs(5))
        .await
        .expect("a clean shutdown with its final snapshot");
    let took = started.elapsed();
    assert!(took >= SCRIPT_GRACE, "stopped before the grace: {took:?}");
    let killed = runner.reply_text().await;
    assert!(
        killed.starts_with("-ERR Script killed by user with SCRIPT KILL"),
        "{killed}"
    );
    assert!(snapshot.exists(), "the final snapshot was written");
}

/// A script that has written cannot be stopped without leaving half its
/// writes: shutdown waits for it `SCRIPT_WAIT`, then gives up on it,
/// without a final snapshot (which would wait for its shards forever). It
/// used to wait forever.
///
/// The runtime is built by hand: the worker running the script never
/// returns, and a `#[tokio::test]` runtime would wait for it when dropped.
#[test]
fn shutdown_gives_up_on_a_script_that_has_written() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(gives_up());
    rt.shutdown_background();
}

async fn gives_up() {
    let srv = Server::start_with(|c| c.lua_time_limit = 50).await;
    let mut other = srv.raw().await;
    let mut runner = srv.raw().await;
    runner
        .send(&encode_words(&[
            "EVAL",
            "redis.call('SET', KEYS[1], 'x') while true do end",
            "1",
            "k",
        ]))
        .await;
    wait_busy(&mut other).await;
    assert!(other
        .call(&["SCRIPT", "KILL"])
        .await
        .starts_with("-UNKILLABLE"));
    let started = Instant::now();
    let outcome = srv
        .shutdown_within(SCRIPT_WAIT + Duration::from_secs(5))
        .await;
    assert!(
        matches!(outcome, Err(turnstile::ShutdownError::ScriptRunning)),
        "{outcome:?}"
    );
    assert!(started.elapsed() >= SCRIPT_WAIT - Duration::from_millis(100));
}

/// Waits until the server answers `BUSY` (a script runs past the limit).
pub(crate) async fn wait_busy(other: &mut Raw) {
    for _ in 0..500 {
        if other.call(&["PING"]).await.starts_with("-BUSY") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the script never became busy");
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "turnstile-script-shutdown-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
