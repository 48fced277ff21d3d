//! The status page on the metrics address: `/` is one self-contained page,
//! `/status.json` its data, and neither carries a secret. The page shows
//! key names, so it answers only with the password when one is set, only
//! to Host names that are this server's, and only loopback clients while
//! protected mode is on without a password; `/metrics` and `/healthz`
//! answer anyone.

mod common;

use std::net::SocketAddr;

use base64::Engine;
use common::{connect_url, outside_address, q, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `GET path` with the test password (HTTP Basic).
async fn http_get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    get(
        addr,
        path,
        &format!("Authorization: {}\r\n", basic("", PASSWORD)),
    )
    .await
}

/// `Basic ...` for `user:password`.
fn basic(user: &str, password: &str) -> String {
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {pair}")
}

/// `GET path` with these header lines (each ending in CRLF; `Host:` is
/// the server's address unless given).
async fn get(addr: SocketAddr, path: &str, headers: &str) -> (u16, String, String) {
    request(TcpStream::connect(addr).await.unwrap(), addr, path, headers).await
}

/// `GET path` on `stream`: the status, the head (lowercased), the body.
async fn request(
    mut s: TcpStream,
    addr: SocketAddr,
    path: &str,
    headers: &str,
) -> (u16, String, String) {
    let host = match headers.to_ascii_lowercase().contains("host:") {
        true => String::new(),
        false => format!("Host: {addr}\r\n"),
    };
    let req = format!("GET {path} HTTP/1.1\r\n{host}{headers}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(common::IO_TIMEOUT, s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text[9..12].parse().unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_ascii_lowercase(), body.to_string())
}

const PASSWORD: &str = "pw-Zq81-never-shown";
const MASTERAUTH: &str = "ma-Kx07-never-shown";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_data_show_the_server_and_no_secret() {
    let server = Server::start_with(|c| {
        c.requirepass = Some(PASSWORD.into());
        c.masterauth = Some(MASTERAUTH.into());
        c.maxmemory = 64 << 20;
    })
    .await;
    let metrics = server.handle().metrics_addr().expect("metrics are on");
    let mut c = connect_url(&server.url(&format!(":{PASSWORD}@"), ""))
        .await
        .unwrap();
    for _ in 0..4 {
        let _: Vec<i64> = q(&mut c, &["RL.ALLOW", "tenant:<b>noisy</b>", "1", "60"]).await;
    }

    let (status, head, page) = http_get(metrics, "/").await;
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/html"), "{head}");
    // Self-contained: nothing fetched from elsewhere, only /status.json.
    for outside in [
        "<script src",
        "<link",
        "@import",
        "url(",
        "http://",
        "https://",
    ] {
        assert!(!page.contains(outside), "page refers outside: {outside}");
    }
    assert!(page.contains("fetch(\"/status.json\""));
    // Keys are never written as HTML.
    assert!(!page.contains("innerHTML"));

    let (status, head, body) = http_get(metrics, "/status.json").await;
    assert_eq!(status, 200);
    assert!(head.contains("content-type: application/json"), "{head}");
    let s: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(s["role"], "primary");
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(s["decisions"]["allowed"], 1);
    assert_eq!(s["decisions"]["denied"], 3);
    assert_eq!(s["top"]["denied"][0]["key"], "tenant:<b>noisy</b>");
    assert_eq!(s["top"]["denied"][0]["count"], 3);
    assert_eq!(s["top"]["shadow"], serde_json::json!([]));
    assert_eq!(s["memory"]["max"], 64 << 20);
    assert!(s["memory"]["used"].as_u64().unwrap() > 0);
    assert_eq!(s["clients"]["connected"], 1);
    assert_eq!(s["replication"]["role"], "primary");
    assert!(s["rates"].is_array());

    for path in ["/", "/status.json", "/metrics", "/healthz"] {
        let (_, head, body) = http_get(metrics, path).await;
        for secret in [PASSWORD, MASTERAUTH] {
            assert!(
                !body.contains(secret) && !head.contains(&secret.to_ascii_lowercase()),
                "{path} shows a secret"
            );
        }
    }
    // Read-only: nothing but GET.
    let (status, _, _) = common::http(metrics, "POST", "/status.json").await;
    assert_eq!(status, 405);
}

/// With a password set, the page and its data need it (they list the
/// denied keys: they used to answer anyone the Redis port told `NOAUTH`):
/// HTTP Basic with any user name, or a bearer token; read live, as
/// `CONFIG SET requirepass` changes it. `/metrics` and `/healthz` stay
/// open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_password_the_page_and_its_data_need_it() {
    let server = Server::start_with(|c| c.requirepass = Some(PASSWORD.into())).await;
    let metrics = server.handle().metrics_addr().unwrap();
    let mut c = connect_url(&server.url(&format!(":{PASSWORD}@"), ""))
        .await
        .unwrap();
    for _ in 0..2 {
        let _: Vec<i64> = q(&mut c, &["RL.ALLOW", "tenant:secret-name", "1", "60"]).await;
    }
    for path in ["/", "/status.json"] {
        for auth in [
            String::new(),
            format!("Authorization: {}\r\n", basic("", "wrong")),
            "Authorization: Bearer wrong\r\n".to_string(),
            format!("Authorization: Bearer {PASSWORD}x\r\n"),
            "Authorization: Basic not-base64!\r\n".to_string(),
        ] {
            let (status, head, body) = get(metrics, path, &auth).await;
            assert_eq!(status, 401, "{path} {auth:?}");
            assert!(
                head.contains("www-authenticate: basic realm=\"turnstile\""),
                "{head}"
            );
            assert!(!body.contains("secret-name"), "{body}");
        }
        for auth in [
            basic("", PASSWORD),
            basic("default", PASSWORD),
            basic("anyone", PASSWORD),
            format!("Bearer {PASSWORD}"),
        ] {
            let (status, _, _) = get(metrics, path, &format!("Authorization: {auth}\r\n")).await;
            assert_eq!(status, 200, "{path} {auth}");
        }
    }
    let (_, _, body) = http_get(metrics, "/status.json").await;
    assert!(body.contains("tenant:secret-name"), "{body}");
    for path in ["/metrics", "/healthz"] {
        assert_eq!(get(metrics, path, "").await.0, 200, "{path}");
    }
    // Wrong passwords count, as on the Redis port.
    let (_, _, m) = get(metrics, "/metrics", "").await;
    assert!(m.contains("turnstile_auth_failures_total 8"), "{m}");

    let _: () = q(&mut c, &["CONFIG", "SET", "requirepass", "renewed"]).await;
    assert_eq!(http_get(metrics, "/status.json").await.0, 401);
    let renewed = format!("Authorization: {}\r\n", basic("", "renewed"));
    assert_eq!(get(metrics, "/status.json", &renewed).await.0, 200);
    // Without a password, open again.
    let mut c = connect_url(&server.url(":renewed@", "")).await.unwrap();
    let _: () = q(&mut c, &["CONFIG", "SET", "requirepass", ""]).await;
    assert_eq!(get(metrics, "/status.json", "").await.0, 200);
    server.shutdown().await;
}

/// Without a password, loopback clients see the page as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_password_the_page_is_open_to_loopback_clients() {
    let server = Server::start().await;
    let metrics = server.handle().metrics_addr().unwrap();
    for path in ["/", "/status.json", "/metrics", "/healthz"] {
        assert_eq!(get(metrics, path, "").await.0, 200, "{path}");
    }
    server.shutdown().await;
}

/// The page answers only Host names that are this server's for certain
/// (an IP literal, `localhost`, or one `--metrics-allowed-hosts` names):
/// a page elsewhere that rebinds its own name to this address is refused
/// (421). `/metrics` and `/healthz` answer whatever the Host, for
/// Prometheus scraping by service name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_answers_only_host_names_that_are_this_servers() {
    let server = Server::start_with(|c| {
        c.metrics_allowed_hosts = vec!["Turnstile.Internal".into()];
    })
    .await;
    let metrics = server.handle().metrics_addr().unwrap();
    let port = metrics.port();
    for host in [
        format!("rebound.evil.example:{port}"),
        "rebound.evil.example".into(),
        "localhost.evil.example".into(),
        "127.0.0.1.evil.example".into(),
        format!("turnstile.internal.evil.example:{port}"),
        "localhost:notaport".into(),
        "[::1".into(),
        String::new(),
    ] {
        for path in ["/", "/status.json"] {
            let (status, _, body) = get(metrics, path, &format!("Host: {host}\r\n")).await;
            assert_eq!(status, 421, "{path} Host: {host}: {body}");
            assert!(body.contains("--metrics-allowed-hosts"), "{body}");
        }
        for path in ["/metrics", "/healthz"] {
            let (status, _, _) = get(metrics, path, &format!("Host: {host}\r\n")).await;
            assert_eq!(status, 200, "{path} Host: {host}");
        }
    }
    for host in [
        format!("127.0.0.1:{port}"),
        "10.1.2.3".into(),
        format!("[::1]:{port}"),
        "[fd00::7]".into(),
        format!("localhost:{port}"),
        "LOCALHOST".into(),
        format!("turnstile.internal:{port}"),
        "TURNSTILE.internal".into(),
    ] {
        let (status, _, _) = get(metrics, "/status.json", &format!("Host: {host}\r\n")).await;
        assert_eq!(status, 200, "Host: {host}");
    }
    server.shutdown().await;
}

/// As the Redis port: with protected mode on and no password, the page
/// answers loopback clients only (the Docker image listens on 0.0.0.0);
/// `/metrics` and `/healthz` answer everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_mode_keeps_the_page_to_loopback_clients() {
    let ip = outside_address().expect("this machine has a non-loopback IPv4 address");
    let server = Server::start_with(|c| c.metrics_addr = "0.0.0.0:0".into()).await;
    let port = server.handle().metrics_addr().unwrap().port();
    let at = SocketAddr::new(ip, port);
    let from_outside = || async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(ip, 0)).unwrap();
        socket.connect(at).await.unwrap()
    };
    for path in ["/", "/status.json"] {
        let (status, _, body) = request(from_outside().await, at, path, "").await;
        assert_eq!(status, 403, "{path}");
        assert!(body.contains("protected mode"), "{body}");
        let local = SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!(get(local, path, "").await.0, 200, "{path}");
    }
    for path in ["/metrics", "/healthz"] {
        assert_eq!(request(from_outside().await, at, path, "").await.0, 200);
    }
    // Protected mode off: open, as the Redis port.
    let mut c = server.client().await;
    let _: () = q(&mut c, &["CONFIG", "SET", "protected-mode", "no"]).await;
    assert_eq!(
        request(from_outside().await, at, "/status.json", "")
            .await
            .0,
        200
    );
    server.shutdown().await;
}

/// The chart's x range is the history the server keeps (so a few seconds
/// of data are drawn at the right, not stretched across the width), and
/// it is drawn at its own pixel size: a stretched drawing stretched its
/// text sideways. `tests/ops/status_page.py` checks the rendered page in
/// Chromium.
#[test]
fn the_chart_window_is_the_history_kept_and_is_not_stretched() {
    use turnstile::server::status::{HISTORY_SECONDS, PAGE};
    assert!(
        PAGE.contains(&format!("const WINDOW_MS = {HISTORY_SECONDS} * 1000;")),
        "the page's chart window is not HISTORY_SECONDS"
    );
    assert!(!PAGE.contains("preserveAspectRatio=\"none\""));
}
