//! `/metrics` and `INFO` report the same figures after a known number of
//! decisions, and the endpoint serves `/healthz` and refuses the rest.

use std::net::SocketAddr;

use crate::common::{q, Server};
use turnstile::Clock;

async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (status, _, body) = crate::common::http(addr, "GET", path).await;
    (status, body)
}

/// The value of a sample line `name{labels} value` in the exposition.
fn sample(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .unwrap_or_else(|| panic!("no sample {series} in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

/// `field:value` (or `field:a=1,b=2` sub-field) from INFO text.
fn info_field(info: &str, field: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO"))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_and_metrics_agree_after_known_decisions() {
    let server = Server::start().await;
    let metrics = server
        .handle()
        .metrics_addr()
        .expect("metrics are on in tests");
    let mut c = server.client().await;
    // window: 7 requests against a limit of 5 -> 5 allowed, 2 limited.
    for _ in 0..7 {
        let _: Vec<i64> = q(&mut c, &["RL.ALLOW", "w", "5", "60"]).await;
    }
    // gcra: cost 3 twice against a burst of 4 -> 1 allowed (3 units), 1 limited.
    for _ in 0..2 {
        let _: Vec<i64> = q(
            &mut c,
            &["RL.ALLOW", "g", "4", "60", "ALGO", "gcra", "COST", "3"],
        )
        .await;
    }
    // CL.THROTTLE counts as gcra: 1 allowed.
    let _: Vec<i64> = q(&mut c, &["CL.THROTTLE", "t", "15", "30", "60"]).await;
    // A peek is not a decision; an error is an error reply.
    let _: Vec<i64> = q(&mut c, &["RL.PEEK", "w", "5", "60"]).await;
    let _ = crate::common::q_err(&mut c, &["RL.ALLOW", "w", "0", "60"]).await;
    let _ = crate::common::q_err(&mut c, &["NOSUCH"]).await;
    drop(c);
    // The server notices the close on its own time: wait (bounded) until
    // the first connection is gone, so only the next one is counted.
    let deadline = std::time::Instant::now() + crate::common::IO_TIMEOUT;
    while !server.state().clients.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "first connection never closed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Counters are flushed once per batch: a fresh connection's INFO sees all.
    let mut c = server.client().await;
    let info: String = q(&mut c, &["INFO", "all"]).await;
    let (status, body) = http_get(metrics, "/metrics").await;
    assert_eq!(status, 200);

    assert_eq!(
        info_field(&info, "decisions_window"),
        "allowed=5,limited=2,units=5,near_limit=1"
    );
    assert_eq!(
        info_field(&info, "decisions_gcra"),
        "allowed=2,limited=1,units=4,near_limit=0"
    );
    let decision = |algo: &str, result: &str| {
        sample(
            &body,
            &format!("turnstile_decisions_total{{algorithm=\"{algo}\",result=\"{result}\"}}"),
        )
    };
    assert_eq!(decision("window", "allowed"), 5.0);
    assert_eq!(decision("window", "limited"), 2.0);
    assert_eq!(decision("gcra", "allowed"), 2.0);
    assert_eq!(decision("gcra", "limited"), 1.0);
    assert_eq!(
        sample(&body, "turnstile_units_consumed_total{algorithm=\"gcra\"}"),
        4.0
    );
    assert_eq!(
        sample(
            &body,
            "turnstile_near_limit_decisions_total{algorithm=\"window\"}"
        ),
        1.0
    );

    // Commands: 8 RL.ALLOW ok + 1 error; the same in INFO commandstats.
    assert_eq!(
        info_field(&info, "cmdstat_rl.allow"),
        "calls=10,rejected_calls=0,failed_calls=1"
    );
    assert_eq!(
        sample(
            &body,
            "turnstile_commands_total{command=\"rl.allow\",status=\"ok\"}"
        ),
        9.0
    );
    assert_eq!(
        sample(
            &body,
            "turnstile_commands_total{command=\"rl.allow\",status=\"error\"}"
        ),
        1.0
    );
    // Latency is sampled: each connection's first command and one in 16
    // after it, so the histograms hold some commands, never more than ran.
    let timed: f64 = body
        .lines()
        .filter(|l| l.starts_with("turnstile_command_duration_seconds_count{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert!(
        timed >= 2.0,
        "two connections, each with a first command: {timed}"
    );
    assert!(
        sample(
            &body,
            "turnstile_command_duration_seconds_count{command=\"rl.allow\"}"
        ) <= 10.0
    );
    // Error replies include the unknown command.
    assert_eq!(info_field(&info, "total_error_replies"), "2");
    assert_eq!(sample(&body, "turnstile_error_replies_total"), 2.0);
    // Keys and clients.
    let keys: i64 = q(&mut c, &["DBSIZE"]).await;
    assert_eq!(keys, 3);
    assert_eq!(sample(&body, "turnstile_keys"), 3.0);
    assert_eq!(sample(&body, "turnstile_keys_with_expiry"), 3.0);
    assert!(info.contains("db0:keys=3,expires=3"));
    assert_eq!(
        info_field(&info, "total_connections_received"),
        sample(&body, "turnstile_connections_received_total").to_string()
    );
    assert_eq!(sample(&body, "turnstile_connected_clients"), 1.0);
    assert!(body.contains("turnstile_build_info{version=\""));

    assert_eq!(
        http_get(metrics, "/healthz").await,
        (200, "ok\n".to_string())
    );
    assert_eq!(http_get(metrics, "/nope").await.0, 404);
    server.shutdown().await;
}

/// Wrong passwords and clock steps backwards are counted, in INFO and
/// `/metrics` alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_and_clock_steps_are_counted() {
    let server = Server::start_with(|c| c.requirepass = Some("s3cret".into())).await;
    let metrics = server.handle().metrics_addr().unwrap();
    let mut raw = server.raw().await;
    for _ in 0..2 {
        assert_eq!(
            raw.call(&["AUTH", "nope"]).await,
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        );
    }
    assert_eq!(raw.call(&["AUTH", "s3cret"]).await, "+OK\r\n");
    // The manual clock set back an hour, then forward, then back again.
    let now = server.clock.now();
    server
        .clock
        .set(turnstile::Nanos(now.0 - 3_600_000_000_000));
    server.clock.set(now);
    server.clock.set(turnstile::Nanos(now.0 - 1));
    let info = raw.call(&["INFO", "all"]).await;
    assert!(info.contains("acl_access_denied_auth:2\r\n"), "{info}");
    assert!(info.contains("clock_backward_steps:2\r\n"), "{info}");
    let (_, body) = http_get(metrics, "/metrics").await;
    assert_eq!(sample(&body, "turnstile_auth_failures_total"), 2.0);
    assert_eq!(sample(&body, "turnstile_clock_backward_steps_total"), 2.0);
    server.shutdown().await;
}

/// Reads until the server closes; how long that took (bounded).
async fn closed_within(
    stream: &mut tokio::net::TcpStream,
    bound: std::time::Duration,
) -> std::time::Duration {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(bound, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("still open after {bound:?}"),
        }
    }
}

/// A client trickling its headers is closed after the header timeout (it
/// used to be kept as long as it kept sending: 40 s and more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_headers_client_is_closed() {
    use tokio::io::AsyncWriteExt;
    use turnstile::server::http::HEADER_TIMEOUT;
    let server = Server::start_with(|c| c.metrics_addr = "127.0.0.1:0".into()).await;
    let addr = server.handle().metrics_addr().unwrap();
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let took = closed_within(&mut slow, HEADER_TIMEOUT * 3).await;
    assert!(took >= HEADER_TIMEOUT / 2, "closed too soon: {took:?}");
    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    server.shutdown().await;
}

/// Past the connection cap, the connection waiting longest on its client
/// is closed to make room (and counted), and the new one is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_the_longest_idle_connection_makes_room() {
    use turnstile::server::http::{HEADER_TIMEOUT, MAX_CONNECTIONS};
    let server = Server::start_with(|c| c.metrics_addr = "127.0.0.1:0".into()).await;
    let addr = server.handle().metrics_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    // Accepted in order: wait until the server has taken every one, so
    // the first is the longest idle.
    let body = try_get_metrics(addr).await.expect("answered at the cap");
    let took = closed_within(&mut held[0], HEADER_TIMEOUT).await;
    assert!(took < HEADER_TIMEOUT / 2, "not closed at once: {took:?}");
    let refused = sample(
        &body,
        "turnstile_connections_rejected_total{reason=\"metrics_endpoint\"}",
    );
    assert_eq!(refused, 1.0);
    server.shutdown().await;
}

/// A health check answers while the cap is full of ordinary keep-alive
/// clients (each has had its answer and keeps its connection): before,
/// the new connection was closed unanswered until one of them left, and
/// 64 such clients left `/healthz` answering 0 of 80 probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_answers_while_keep_alive_clients_fill_the_cap() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use turnstile::server::http::MAX_CONNECTIONS;
    let server = Server::start_with(|c| c.metrics_addr = "127.0.0.1:0".into()).await;
    let addr = server.handle().metrics_addr().unwrap();
    let mut kept = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !got.ends_with(b"ok\n") {
            let n = tokio::time::timeout(crate::common::IO_TIMEOUT, s.read(&mut buf))
                .await
                .expect("a keep-alive client is answered")
                .unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        kept.push(s);
    }
    for _ in 0..3 {
        let (status, body) = http_get(addr, "/healthz").await;
        assert_eq!((status, body.as_str()), (200, "ok\n"));
    }
    // The most recent keep-alive clients keep their connections.
    let last = kept.last_mut().unwrap();
    last.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(crate::common::IO_TIMEOUT, last.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    server.shutdown().await;
}

/// `GET /metrics`, or `None` if the connection was closed without a reply.
async fn try_get_metrics(addr: SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut out = Vec::new();
    tokio::time::timeout(crate::common::IO_TIMEOUT, s.read_to_end(&mut out))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&out).into_owned();
    text.starts_with("HTTP/1.1 200")
        .then(|| text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()))
        .flatten()
}

/// The names of the commands that have series in `body`.
fn commands_with_series(body: &str, metric: &str) -> std::collections::BTreeSet<String> {
    body.lines()
        .filter(|l| l.starts_with(metric))
        .filter_map(|l| l.split("command=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .map(String::from)
        .collect()
}

/// An idle server's scrape is small: no series for commands that never
/// ran, no histogram without samples (it was 197 KB, 118 commands with a
/// histogram and counters each). A busy one's, after a realistic mix of
/// commands, stays under 200 KB, with series for exactly those commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_has_series_only_for_commands_that_ran() {
    let server = Server::start().await;
    let metrics = server.handle().metrics_addr().expect("metrics are on");
    let (_, idle) = http_get(metrics, "/metrics").await;
    println!(
        "idle scrape: {} bytes, {} lines",
        idle.len(),
        idle.lines().count()
    );
    assert!(idle.len() < 40_000, "{} bytes:\n{idle}", idle.len());
    // docs/operations.md quotes the idle scrape's length: kept true here.
    let ops = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("operations.md");
    let quoted = ops
        .split_once("an idle server's is about ")
        .and_then(|(_, rest)| rest.split_once(" lines)"))
        .and_then(|(before, _)| before.rsplit_once('(')?.1.parse::<usize>().ok())
        .expect("operations.md quotes the idle scrape's lines");
    // "About": within a tenth, so that one more counter's lines need no
    // edit there, while a scrape that grew or shrank by much does.
    let lines = idle.lines().count();
    assert!(
        quoted.abs_diff(lines) * 10 <= lines,
        "docs/operations.md's idle scrape length: {quoted} quoted, {lines} now"
    );
    assert!(
        commands_with_series(&idle, "turnstile_commands_total").is_empty(),
        "{idle}"
    );
    assert!(
        !idle.contains("turnstile_command_duration_seconds_bucket"),
        "{idle}"
    );
    // Series that do not depend on traffic are still there.
    sample(&idle, "turnstile_connected_clients");

    let mut c = server.client().await;
    let mix: &[&[&str]] = &[
        &["PING"],
        &["RL.ALLOW", "a", "5", "60"],
        &["RL.ALLOW", "b", "5", "60", "ALGO", "gcra"],
        &["RL.ALLOW", "c", "5", "60", "ALGO", "fixed"],
        &["RL.ALLOW", "d", "5", "60", "ALGO", "log"],
        &["RL.PEEK", "a", "5", "60"],
        &[
            "RL.ALLOWMANY",
            "LIMIT",
            "e",
            "5",
            "60",
            "LIMIT",
            "f",
            "9",
            "60",
        ],
        &["CL.THROTTLE", "t", "15", "30", "60"],
        &["RL.STATE", "a"],
        &["RL.REFUND", "a", "1"],
        &["RL.RESET", "a"],
        &["RL.ACQUIRE", "l", "2", "10000"],
        &["RL.TOP"],
        &["SET", "s", "1"],
        &["GET", "s"],
        &["INCR", "n"],
        &["EXPIRE", "s", "100"],
        &["TTL", "s"],
        &["DEL", "s"],
        &["EXISTS", "s"],
        &["EVAL", "return 1", "0"],
        &["SCRIPT", "LOAD", "return 2"],
        &["INFO"],
        &["CONFIG", "GET", "maxmemory"],
        &["CLIENT", "SETNAME", "busy"],
        &["DBSIZE"],
        &["MULTI"],
        &["EXEC"],
        &["HELLO", "2"],
        &["SELECT", "0"],
    ];
    for _ in 0..20 {
        for args in mix {
            let _: redis::Value = crate::common::cmd(args).query_async(&mut c).await.unwrap();
        }
    }
    let (_, busy) = http_get(metrics, "/metrics").await;
    println!(
        "busy scrape: {} bytes, {} lines",
        busy.len(),
        busy.lines().count()
    );
    assert!(busy.len() < 200_000, "{} bytes", busy.len());
    // Subcommands count under their container, as in the table.
    let ran: std::collections::BTreeSet<String> =
        mix.iter().map(|a| a[0].to_ascii_lowercase()).collect();
    let counted = commands_with_series(&busy, "turnstile_commands_total");
    assert_eq!(counted, ran);
    // Every command that ran was timed at least once (the first on a
    // connection is), and only those have a histogram.
    let timed = commands_with_series(&busy, "turnstile_command_duration_seconds_count");
    assert_eq!(timed, ran);
}
