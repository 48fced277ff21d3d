//! Protected mode through real sockets: a client from a non-loopback
//! address is refused with `-DENIED` while no password is set, unless
//! protected mode is off.

use std::net::{IpAddr, SocketAddr};

use crate::common::{outside_address, Raw, Server};
use tokio::net::TcpSocket;

/// Connects to the server's port on `ip`, from `ip`: the server sees a
/// non-loopback peer.
async fn connect_from(ip: IpAddr, port: u16) -> Raw {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(ip, 0)).unwrap();
    let stream = socket.connect(SocketAddr::new(ip, port)).await.unwrap();
    Raw::from_stream(stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_loopback_clients_need_a_password_or_an_opt_out() {
    let ip = outside_address().expect("this machine has a non-loopback IPv4 address");
    let server = Server::start_with(|c| c.bind = "0.0.0.0".into()).await;
    let port = server.addr.port();

    // Protected mode on, no password: refused with Redis's -DENIED, closed.
    let mut outside = connect_from(ip, port).await;
    let reply = String::from_utf8_lossy(&outside.read_until_closed().await).into_owned();
    assert!(
        reply.starts_with("-DENIED Turnstile is running in protected mode"),
        "{reply}"
    );
    assert!(reply.ends_with("\r\n"));

    // Loopback clients are unaffected and can lift it.
    let mut local = Raw::connect(SocketAddr::from(([127, 0, 0, 1], port))).await;
    assert_eq!(local.call(&["PING"]).await, "+PONG\r\n");
    assert_eq!(
        local.call(&["CONFIG", "GET", "protected-mode"]).await,
        "*2\r\n$14\r\nprotected-mode\r\n$3\r\nyes\r\n"
    );
    assert_eq!(
        local.call(&["CONFIG", "SET", "protected-mode", "no"]).await,
        "+OK\r\n"
    );
    let mut outside = connect_from(ip, port).await;
    assert_eq!(outside.call(&["PING"]).await, "+PONG\r\n");

    // Protected mode back on, but a password set: outside clients connect
    // (and must authenticate).
    assert_eq!(
        local
            .call(&["CONFIG", "SET", "protected-mode", "yes"])
            .await,
        "+OK\r\n"
    );
    assert_eq!(
        local
            .call(&["CONFIG", "SET", "requirepass", "s3cret"])
            .await,
        "+OK\r\n"
    );
    let mut outside = connect_from(ip, port).await;
    assert_eq!(
        outside.call(&["PING"]).await,
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(outside.call(&["AUTH", "s3cret"]).await, "+OK\r\n");

    let info = local.call(&["AUTH", "s3cret"]).await;
    assert_eq!(info, "+OK\r\n");
    let metrics_addr = server.handle().metrics_addr().unwrap();
    let body = reqwest_free_get(metrics_addr, "/metrics").await;
    assert!(
        body.contains("turnstile_connections_rejected_total{reason=\"protected_mode\"} 1"),
        "{body}"
    );
    server.shutdown().await;
}

/// A bare HTTP/1.1 GET, enough for the metrics endpoint.
async fn reqwest_free_get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// Listening beyond loopback with protected mode off and no password is
/// reported in `INFO` (and logged at start, `tests/it/first_hour.rs`), and the
/// report follows `CONFIG SET` live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_warns_of_an_unprotected_listener() {
    let field = |info: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix("security_warning:"))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no security_warning in {info}"))
    };
    let local = Server::start().await;
    let mut c = local.client().await;
    let _: () = crate::common::q(&mut c, &["CONFIG", "SET", "protected-mode", "no"]).await;
    let info: String = crate::common::q(&mut c, &["INFO", "server"]).await;
    assert_eq!(field(&info), "none", "loopback only");
    local.shutdown().await;

    let open = Server::start_with(|c| {
        c.bind = "0.0.0.0".into();
        c.protected_mode = false;
    })
    .await;
    let mut c = open.client().await;
    let info: String = crate::common::q(&mut c, &["INFO", "server"]).await;
    assert!(
        field(&info).starts_with("listening on 0.0.0.0 with protected mode off and no password"),
        "{info}"
    );
    let _: () = crate::common::q(&mut c, &["CONFIG", "SET", "protected-mode", "yes"]).await;
    let info: String = crate::common::q(&mut c, &["INFO", "server"]).await;
    assert_eq!(field(&info), "none");
    let _: () = crate::common::q(&mut c, &["CONFIG", "SET", "protected-mode", "no"]).await;
    let _: () = crate::common::q(&mut c, &["CONFIG", "SET", "requirepass", "s3cret"]).await;
    let _: () = crate::common::q(&mut c, &["AUTH", "s3cret"]).await;
    let info: String = crate::common::q(&mut c, &["INFO", "server"]).await;
    assert_eq!(field(&info), "none", "a password protects it");
    open.shutdown().await;
}
