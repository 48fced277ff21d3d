//! `--client-output-buffer-limit`: a client that pipelines requests and
//! never reads its replies is disconnected; others keep being served.

mod common;

use std::time::Duration;

use common::{assert_pong, q, Raw, Server};
use turnstile::config::OutputLimit;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_disconnected() {
    let server = Server::start_with(|c| {
        c.client_output_buffer_limit = OutputLimit {
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
    let request = common::encode_words(&["GET", "big"]);
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
