//! `SHUTDOWN`, as Redis 7.0 answers it: a stop that goes ahead closes the
//! client's connection without a reply and is seen by the server's handle
//! (`shutdown_requested`), which stops the server as SIGTERM does; the
//! final snapshot as the words ask (`NOSAVE`, `SAVE`, `FORCE`), a save
//! that fails refused and the server kept running; replicas waited for
//! (`shutdown-timeout`, `NOW`, `ABORT`); a busy script lets only `NOSAVE`
//! through. The binary's exit is `snapshot.rs`'s
//! `redis_cli_shutdown_exits_zero_with_the_final_snapshot`; the error
//! replies are compared with redis-server's in
//! `tests/compat/diff_cases/shutdown.txt`.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::config_rewrite::temp_dir;
use crate::script_shutdown::wait_busy;
use turnstile::server::SCRIPT_GRACE;

const FAILED: &str = "-ERR Errors trying to SHUTDOWN. Check logs.\r\n";

/// Waits (bounded) for the handle to see a `SHUTDOWN`.
async fn requested(srv: &Server) {
    tokio::time::timeout(IO_TIMEOUT, srv.handle().shutdown_requested())
        .await
        .expect("the handle saw the SHUTDOWN");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_the_connection_without_a_reply_and_the_handle_stops() {
    let srv = Server::start().await;
    let addr = srv.addr;
    let mut other = srv.raw().await;
    assert_eq!(other.call(&["PING"]).await, "+PONG\r\n");
    // redis-py's rule: a reply is a failure, a closed connection success.
    let mut c = srv.client().await;
    let r: redis::RedisResult<redis::Value> = cmd(&["SHUTDOWN"]).query_async(&mut c).await;
    let e = r.expect_err("no reply to a SHUTDOWN that went ahead");
    assert!(e.code().is_none(), "a server error, not a close: {e}");
    requested(&srv).await;
    srv.shutdown().await;
    other.expect_closed().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// Nothing after a `SHUTDOWN` in the same pipeline runs; what came before
/// is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_stops_at_shutdown() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    let mut wire = encode_words(&["SET", "a", "1"]);
    wire.extend(encode_words(&["SHUTDOWN", "NOSAVE"]));
    wire.extend(encode_words(&["SET", "b", "1"]));
    r.send(&wire).await;
    assert_eq!(r.read_until_closed().await, b"+OK\r\n");
    requested(&srv).await;
    assert_eq!(srv.state().store.len(), 1, "SET b did not run");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_final_snapshot_is_written_by_default_and_not_with_nosave() {
    for (words, written) in [
        (&["SHUTDOWN"][..], true),
        (&["shutdown", "save"], true),
        (&["SHUTDOWN", "NOW"], true),
        (&["SHUTDOWN", "NOSAVE"], false),
        (&["SHUTDOWN", "NOSAVE", "NOW", "FORCE"], false),
    ] {
        let dir = temp_dir("shutdown-snap");
        let path = dir.join("dump.tsnap");
        let srv = saving_to(&path).await;
        let mut r = srv.raw().await;
        assert_eq!(r.call(&["SET", "k", "v"]).await, "+OK\r\n");
        r.send(&encode_words(words)).await;
        assert!(r.read_until_closed().await.is_empty(), "{words:?}");
        requested(&srv).await;
        srv.shutdown().await;
        assert_eq!(path.exists(), written, "{words:?}");
        if written {
            let again = {
                let path = path.clone();
                Server::start_with(move |c| c.snapshot = Some(path)).await
            };
            let mut r = again.raw().await;
            assert_eq!(r.call(&["GET", "k"]).await, "$1\r\nv\r\n", "{words:?}");
            again.shutdown().await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A write answered after `SHUTDOWN`'s snapshot and before the stop is
/// in the snapshot the stop writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_shutdowns_snapshot_is_kept() {
    let dir = temp_dir("shutdown-again");
    let path = dir.join("dump.tsnap");
    let srv = saving_to(&path).await;
    let mut r = srv.raw().await;
    let mut late = srv.raw().await;
    r.send(&encode_words(&["SHUTDOWN"])).await;
    assert!(r.read_until_closed().await.is_empty());
    requested(&srv).await;
    // The handle has not stopped the server yet: this write is answered.
    assert_eq!(late.call(&["SET", "late", "1"]).await, "+OK\r\n");
    srv.shutdown().await;
    let again = {
        let path = path.clone();
        Server::start_with(move |c| c.snapshot = Some(path)).await
    };
    let mut r = again.raw().await;
    assert_eq!(r.call(&["GET", "late"]).await, "$1\r\n1\r\n");
    again.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A save that fails is Redis's error, and the server keeps serving;
/// `FORCE` stops it anyway. `SAVE` with no `--snapshot` is such a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_save_keeps_the_server_running_unless_force() {
    let dir = temp_dir("shutdown-fail");
    let sub = dir.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let srv = saving_to(&sub.join("dump.tsnap")).await;
    // The snapshot's directory is now a regular file: root or not, nothing
    // can be written under it.
    std::fs::remove_dir_all(&sub).unwrap();
    std::fs::write(&sub, b"not a directory").unwrap();
    let mut r = srv.raw().await;
    assert_eq!(r.call(&["SET", "k", "v"]).await, "+OK\r\n");
    assert_eq!(r.call(&["SHUTDOWN"]).await, FAILED);
    assert_eq!(r.call(&["SHUTDOWN", "SAVE", "NOW"]).await, FAILED);
    assert_eq!(r.call(&["GET", "k"]).await, "$1\r\nv\r\n");
    assert!(srv.state().shutdown.requested().is_none());
    let mut c = srv.raw().await;
    assert_eq!(c.call(&["PING"]).await, "+PONG\r\n");
    r.send(&encode_words(&["SHUTDOWN", "FORCE"])).await;
    assert!(r.read_until_closed().await.is_empty());
    requested(&srv).await;
    // No second try after the forced failure: a clean stop.
    srv.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    let srv = Server::start().await;
    let mut r = srv.raw().await;
    assert_eq!(r.call(&["SHUTDOWN", "SAVE"]).await, FAILED);
    assert_eq!(r.call(&["PING"]).await, "+PONG\r\n");
    // Without --snapshot and without SAVE there is nothing to write.
    r.send(&encode_words(&["SHUTDOWN", "SAVE", "FORCE"])).await;
    assert!(r.read_until_closed().await.is_empty());
    requested(&srv).await;
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_in_redis_words() {
    let srv = Server::start().await;
    let mut r = srv.raw().await;
    for words in [
        &["SHUTDOWN", "FOO"][..],
        &["SHUTDOWN", "NOSAVE", "SAVE"],
        &["SHUTDOWN", "ABORT", "NOW"],
        &["SHUTDOWN", "FORCE", "ABORT"],
        &["SHUTDOWN", "ABORT", "NOSAVE"],
    ] {
        assert_eq!(r.call(words).await, "-ERR syntax error\r\n", "{words:?}");
    }
    assert_eq!(
        r.call(&["SHUTDOWN", "ABORT"]).await,
        "-ERR No shutdown in progress.\r\n"
    );
    assert_eq!(r.call(&["MULTI"]).await, "+OK\r\n");
    assert_eq!(
        r.call(&["SHUTDOWN"]).await,
        "-ERR Command not allowed inside a transaction\r\n"
    );
    assert_eq!(
        r.call(&["EXEC"]).await,
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(
        r.call(&["EVAL", "return redis.pcall('shutdown')", "0"])
            .await,
        "-ERR This Redis command is not allowed from script\r\n"
    );
    let e = r
        .call(&["EVAL", "return redis.call('shutdown', 'nosave')", "0"])
        .await;
    assert!(
        e.starts_with("-ERR This Redis command is not allowed from script script: "),
        "{e}"
    );
    // ACL: @admin and @dangerous, from the table.
    assert_eq!(
        r.call(&[
            "ACL",
            "SETUSER",
            "app",
            "on",
            "nopass",
            "+@all",
            "-@dangerous"
        ])
        .await,
        "+OK\r\n"
    );
    assert_eq!(r.call(&["AUTH", "app", "x"]).await, "+OK\r\n");
    assert_eq!(
        r.call(&["SHUTDOWN", "NOSAVE"]).await,
        "-NOPERM this user has no permissions to run the 'shutdown' command\r\n"
    );
    assert_eq!(r.call(&["PING"]).await, "+PONG\r\n");
    assert!(srv.state().shutdown.requested().is_none());
    srv.shutdown().await;
}

/// While a script is busy, `SHUTDOWN` is refused as Redis refuses it;
/// `SHUTDOWN NOSAVE` gets through and the stop does not wait out the
/// script's grace (one that has not written is stopped at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_script_lets_only_nosave_through() {
    let srv = Server::start_with(|c| c.lua_time_limit = 50).await;
    let mut other = srv.raw().await;
    let mut runner = srv.raw().await;
    runner
        .send(&encode_words(&["EVAL", "while true do end", "0"]))
        .await;
    wait_busy(&mut other).await;
    let busy = "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
    assert_eq!(other.call(&["SHUTDOWN"]).await, busy);
    assert_eq!(other.call(&["SHUTDOWN", "SAVE", "NOW"]).await, busy);
    other.send(&encode_words(&["SHUTDOWN", "NOSAVE"])).await;
    assert!(other.read_until_closed().await.is_empty());
    requested(&srv).await;
    let started = Instant::now();
    srv.shutdown_within(IO_TIMEOUT)
        .await
        .expect("a clean stop: the script had not written");
    assert!(
        started.elapsed() < SCRIPT_GRACE,
        "waited out the grace: {:?}",
        started.elapsed()
    );
    let killed = runner.reply_text().await;
    assert!(
        killed.starts_with("-ERR Script killed by user with SCRIPT KILL"),
        "{killed}"
    );
}

/// A replica that never acknowledges (a raw `PSYNC`) holds `SHUTDOWN`
/// until `ABORT` (its client is told the shutdown failed), until
/// `shutdown-timeout`, or not at all with `NOW`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_replicas_until_abort_timeout_or_now() {
    let srv = Server::start().await;
    let mut replica = srv.raw().await;
    let line = replica.call(&["PSYNC", "?", "-1"]).await;
    assert!(line.starts_with("+FULLRESYNC"), "{line}");
    eventually("the replica attached", || {
        srv.state().replication.connected() == 1
    })
    .await;
    let mut r = srv.raw().await;
    assert_eq!(r.call(&["SET", "k", "v"]).await, "+OK\r\n");
    let mut waiting = srv.raw().await;
    waiting.send(&encode_words(&["SHUTDOWN"])).await;
    // ABORT finds the wait once it has begun.
    let deadline = Instant::now() + IO_TIMEOUT;
    loop {
        match r.call(&["SHUTDOWN", "ABORT"]).await.as_str() {
            "+OK\r\n" => break,
            "-ERR No shutdown in progress.\r\n" => {
                assert!(Instant::now() < deadline, "SHUTDOWN never waited");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(waiting.reply_text().await, FAILED);
    assert_eq!(waiting.call(&["GET", "k"]).await, "$1\r\nv\r\n");
    assert!(srv.state().shutdown.requested().is_none());

    // The timeout: the wait ends and the stop goes ahead.
    assert_eq!(
        r.call(&["CONFIG", "SET", "shutdown-timeout", "1"]).await,
        "+OK\r\n"
    );
    let started = Instant::now();
    waiting.send(&encode_words(&["SHUTDOWN", "NOSAVE"])).await;
    let closed = waiting.closed_within(IO_TIMEOUT).await;
    assert_eq!(closed.as_deref(), Some(&b""[..]));
    assert!(started.elapsed() >= Duration::from_secs(1));
    requested(&srv).await;
    srv.shutdown().await;

    // NOW does not wait.
    let srv = Server::start().await;
    let mut replica = srv.raw().await;
    let _ = replica.call(&["PSYNC", "?", "-1"]).await;
    eventually("the replica attached", || {
        srv.state().replication.connected() == 1
    })
    .await;
    let mut r = srv.raw().await;
    assert_eq!(r.call(&["SET", "k", "v"]).await, "+OK\r\n");
    r.send(&encode_words(&["SHUTDOWN", "NOW"])).await;
    assert!(r.read_until_closed().await.is_empty());
    requested(&srv).await;
    srv.shutdown().await;
}

/// A replica that acknowledges lets `SHUTDOWN` go ahead as soon as it has
/// the last write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_goes_ahead_once_replicas_have_caught_up() {
    let primary = Server::start().await;
    let port = primary.addr.port();
    let replica = Server::start_with(|c| c.replicaof = Some(("127.0.0.1".into(), port))).await;
    eventually("the replica attached", || {
        primary.state().replication.connected() == 1
    })
    .await;
    let mut r = primary.raw().await;
    assert_eq!(r.call(&["SET", "k", "v"]).await, "+OK\r\n");
    r.send(&encode_words(&["SHUTDOWN"])).await;
    assert!(r.read_until_closed().await.is_empty());
    requested(&primary).await;
    let mut on_replica = replica.raw().await;
    assert_eq!(on_replica.call(&["GET", "k"]).await, "$1\r\nv\r\n");
    primary.shutdown().await;
    replica.shutdown().await;
}

/// A server with its snapshot at `path`, written only at the stop.
async fn saving_to(path: &std::path::Path) -> Server {
    let path = path.to_owned();
    Server::start_with(move |c| {
        c.snapshot = Some(path);
        c.snapshot_interval = Duration::from_secs(3600);
    })
    .await
}
