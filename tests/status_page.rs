//! The status page on the metrics address: `/` is one self-contained page,
//! `/status.json` its data, and neither carries a secret.

mod common;

use std::net::SocketAddr;

use common::{connect_url, q, Server};

async fn http_get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    common::http(addr, "GET", path).await
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
