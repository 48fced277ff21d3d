//! `--client-output-buffer-limit`: a client that pipelines requests and
//! never reads its replies is disconnected; others keep being served.

use std::time::Duration;

use crate::common::{assert_pong, q, Raw, Server};
use turnstile::config::OutputLimit;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_disconnected() {
    let server = Server::start_with(|c| {
        c.client_output_buffer_limit.normal = OutputLimit {
            hard: 256 * 1024,
            soft: 0,
            soft_seconds: 0,
        }
    })
    .await;
    let mut other = server.client().await;
    let value = "x".repeat(1024 * 1024);
    let _: () = q(&mut other, &["SET", "big", &value]).await;

    // 64 GETs of a 1 MB value, written and never read: 64 MB of replies.
    let mut greedy = Raw::connect(server.addr).await;
    let request = crate::common::encode_words(&["GET", "big"]);
    let mut pipeline = Vec::new();
    for _ in 0..64 {
        pipeline.extend_from_slice(&request);
    }
    // The server may close before taking all of it; that is the point.
    let _ = greedy.try_send(&pipeline).await;
    // Meanwhile another client is served.
    assert_pong(&mut other).await;

    // The server gave up on it: reading now ends at EOF (or a reset) well
    // before 64 MB arrive.
    let received = tokio::time::timeout(Duration::from_secs(10), greedy.read_until_closed())
        .await
        .expect("the server closes the connection");
    assert!(
        received.len() < 64 * 1024 * 1024,
        "got {} bytes: every reply was delivered",
        received.len()
    );
    assert_pong(&mut other).await;
    server.shutdown().await;
}

/// A client that never reads, sent small replies: each batch the server
/// writes is under the limit, and used to be all it counted, so the client
/// stayed for ever however much it left unread. Counted with what the
/// kernel still queues for it, it is disconnected at the hard limit, and
/// at a soft limit held for `soft_seconds` (0 here: at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_bytes_in_the_kernel_count_against_the_limit() {
    for limit in [
        OutputLimit {
            hard: 96 * 1024,
            soft: 0,
            soft_seconds: 0,
        },
        OutputLimit {
            hard: 0,
            soft: 96 * 1024,
            soft_seconds: 0,
        },
    ] {
        let server = Server::start_with(|c| c.client_output_buffer_limit.normal = limit).await;
        let mut other = server.client().await;
        let _: () = q(&mut other, &["SET", "v", &"x".repeat(1024)]).await;
        let mut greedy = Raw::connect(server.addr).await;
        let addr = greedy.local_addr();
        // 16,384 replies of 1 KiB (16 MB), never read.
        let pipeline = crate::common::encode_words(&["GET", "v"]).repeat(16 * 1024);
        let task = tokio::spawn(async move {
            let _ = greedy.try_send(&pipeline).await;
            std::future::pending::<()>().await;
        });
        // Accepted (two connections so far), then gone (one left).
        let state = server.state();
        crate::common::eventually("the client that never reads is disconnected", || {
            state
                .stats
                .counters
                .get(turnstile::metrics::table::CONNECTIONS_RECEIVED)
                == 2
                && state.clients.len() == 1
                && client_line(&server, addr).is_none()
        })
        .await;
        task.abort();
        assert_pong(&mut other).await;
        server.shutdown().await;
    }
}

#[test]
fn limits_parse_as_redis_conf_writes_them() {
    assert_eq!(
        OutputLimit::parse("normal 32mb 8mb 60"),
        Ok(OutputLimit {
            hard: 32 * 1024 * 1024,
            soft: 8 * 1024 * 1024,
            soft_seconds: 60
        })
    );
    assert_eq!(OutputLimit::parse("0 0 0"), Ok(OutputLimit::default()));
    assert!(OutputLimit::parse("1mb 2mb").is_err());
    assert!(OutputLimit::parse("a b c").is_err());
}

/// A client that pipelines GETs of a 1 MB value and never reads: the
/// server is soon blocked writing to it. Returns its local address.
async fn stuck_reader(server: &Server) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let mut other = server.client().await;
    let value = "x".repeat(1024 * 1024);
    let _: () = q(&mut other, &["SET", "big", &value]).await;
    let mut greedy = Raw::connect(server.addr).await;
    let addr = greedy.local_addr();
    let request = crate::common::encode_words(&["GET", "big"]);
    let pipeline: Vec<u8> = request.repeat(64);
    // Sending blocks once the server stops reading; the task holds the
    // socket open and never reads.
    let task = tokio::spawn(async move {
        let _ = greedy.try_send(&pipeline).await;
        std::future::pending::<()>().await;
    });
    // It has run a GET (and cannot have taken 64 MB of replies).
    crate::common::eventually("the greedy client ran a command", || {
        client_line(server, addr).is_some_and(|l| l.contains("cmd=get"))
    })
    .await;
    (addr, task)
}

fn client_line(server: &Server, addr: std::net::SocketAddr) -> Option<String> {
    server
        .state()
        .clients
        .all()
        .into_iter()
        .map(|c| {
            turnstile::cmd::admin::client::describe(&turnstile::cmd::registry::table::REGISTRY, &c)
        })
        .find(|l| l.contains(&format!("addr={addr} ")))
}

/// Before, a blocked write waited on the client alone: shutdown hung
/// until the client closed its socket, and CLIENT KILL and --timeout had
/// no effect on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_does_not_wait_for_a_client_that_never_reads() {
    let server = Server::start().await;
    let (_, task) = stuck_reader(&server).await;
    // Server::shutdown fails the test if draining takes over 10 s.
    server.shutdown().await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_closes_a_client_that_never_reads() {
    let server = Server::start().await;
    let (addr, task) = stuck_reader(&server).await;
    let mut admin = server.client().await;
    let killed: i64 = q(
        &mut admin,
        &["CLIENT", "KILL", "ADDR", &addr.to_string(), "SKIPME", "yes"],
    )
    .await;
    assert_eq!(killed, 1);
    crate::common::eventually("the killed client is gone", || {
        client_line(&server, addr).is_none()
    })
    .await;
    assert_pong(&mut admin).await;
    task.abort();
    server.shutdown().await;
}

/// `--timeout` counts a write the client does not drain as silence, as
/// Redis's last-interaction time does. Real time: about 1 s, bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_closes_a_client_that_never_reads() {
    let server = Server::start_with(|c| c.timeout = 1).await;
    let (addr, task) = stuck_reader(&server).await;
    crate::common::eventually("the stuck client timed out", || {
        client_line(&server, addr).is_none()
    })
    .await;
    task.abort();
    server.shutdown().await;
}
