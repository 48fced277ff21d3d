//! Users beyond the Redis port's clients: a replica that authenticates
//! to its primary as a user with only the rights replication needs
//! (`masteruser` + `masterauth`), the metrics/status HTTP port and the
//! gRPC rate limit service taking a user's credentials.

use turnstile::replication::Link;

use crate::common::*;

/// A path under the temp directory no other test or run uses.
fn temp_acl(tag: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "turnstile-it-acl-links-{tag}-{}-{}.acl",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A primary whose `default` user is off: an operator, a replication user
/// with Redis's documented rights (`+psync +replconf +ping`), and one
/// without `PSYNC`.
const USERS: &str = "user default off\n\
    user admin on >adminpw ~* &* +@all\n\
    user repl on >replpw +psync +replconf +ping\n\
    user norepl on >nopw +replconf +ping\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_authenticates_as_a_user_with_only_replications_rights() {
    let path = temp_acl("repl");
    std::fs::write(&path, USERS).unwrap();
    let p = path.clone();
    let primary = Server::start_with(move |c| c.aclfile = Some(p)).await;
    let port = primary.addr.port();
    let replica = Server::start_with(|c| {
        c.replicaof = Some(("127.0.0.1".into(), port));
        c.masteruser = Some("repl".into());
        c.masterauth = Some("replpw".into());
    })
    .await;
    let refused = Server::start_with(|c| {
        c.replicaof = Some(("127.0.0.1".into(), port));
        c.masteruser = Some("norepl".into());
        c.masterauth = Some("nopw".into());
    })
    .await;
    let mut admin = connect_url(&primary.url("admin:adminpw@", ""))
        .await
        .unwrap();
    let _: () = q(&mut admin, &["SET", "k", "v"]).await;
    let _: Vec<i64> = q(&mut admin, &["RL.ALLOW", "tenant:a", "10", "60"]).await;
    eventually("the replica caught up as user repl", || {
        replica.state().replication.link() == Link::Up
            && replica.state().store.effects.offset() == primary.state().store.effects.offset()
    })
    .await;
    let mut r = replica.client().await;
    let got: String = q(&mut r, &["GET", "k"]).await;
    assert_eq!(got, "v");
    // The primary names the replica's user, and the refusal of the other.
    let list: String = q(&mut admin, &["CLIENT", "LIST"]).await;
    assert!(
        list.lines()
            .any(|l| l.contains(" user=repl ") && l.contains("flags=S")),
        "{list}"
    );
    eventually("the user without PSYNC is refused and logged", || {
        primary
            .state()
            .acl
            .log
            .latest(10)
            .iter()
            .any(|e| &*e.object == b"psync" && &*e.username == b"norepl")
    })
    .await;
    assert_ne!(refused.state().replication.link(), Link::Up);
    assert_eq!(primary.state().replication.connected(), 1);
    let _ = std::fs::remove_file(&path);
}

/// The users of the metrics port's and the rate limit service's tests:
/// `default` off, Envoy's user deciding in domain `rl` alone, another
/// domain's user, a monitor that may see the status page, and one who
/// may run `INFO` but not `RL.TOP` (the page shows the heaviest keys).
const PORT_USERS: &str = "user default off\n\
    user envoy on >envoypw ~rl +rl.check\n\
    user other on >otherpw ~elsewhere +rl.check\n\
    user monitor on >monpw +info +rl.top\n\
    user blind on >blindpw +info\n";

/// A server with envoyproxy/ratelimit's example policies, `PORT_USERS`,
/// the rate limit service, on a minute's boundary.
async fn start_ports(tag: &str) -> (Server, std::path::PathBuf) {
    let dir =
        std::env::temp_dir().join(format!("turnstile-acl-ports-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("example.yaml"),
        include_str!("../policies/envoy/example.yaml"),
    )
    .unwrap();
    let acl = dir.join("users.acl");
    std::fs::write(&acl, PORT_USERS).unwrap();
    let (policies, a) = (dir.clone(), acl.clone());
    let srv = Server::start_with(move |c| {
        c.policies = Some(policies);
        c.aclfile = Some(a);
        c.rls_port = Some(0);
    })
    .await;
    srv.advance_ms(60_000 - START_MS % 60_000);
    (srv, dir)
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {pair}")
}

/// `source_cluster=proxy, destination_cluster=mock`: 1 a minute.
const ONE_A_MINUTE: &str = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"source_cluster","value":"proxy"},{"key":"destination_cluster","value":"mock"}]}]}"#;

/// One HTTP/1.1 request carrying `auth` as its Authorization header (rls.rs's
/// `http_with`); the status and body.
async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    auth: Option<String>,
    body: &str,
) -> (u16, String) {
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let headers = format!("Host: {addr}\r\nContent-Type: application/json\r\n{auth}");
    crate::rls::http_with(addr, method, path, &headers, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_port_takes_a_user_and_judges_it_by_its_rules() {
    let (srv, dir) = start_ports("http").await;
    let addr = srv.handle().metrics_addr().unwrap();
    // No credentials while `default` is off, a wrong password, `default`'s
    // (off) as a bearer token: 401, nothing charged.
    for auth in [
        None,
        Some(basic("envoy", "wrong")),
        Some("Bearer envoypw".to_string()),
        Some(basic("envoy\r\nX-Evil: 1", "envoypw")),
    ] {
        let (status, text) = http(addr, "POST", "/json", auth.clone(), ONE_A_MINUTE).await;
        assert_eq!(status, 401, "{auth:?}: {text}");
    }
    // A user whose keys do not cover the domain: 403 in Redis's words.
    let (status, text) = http(
        addr,
        "POST",
        "/json",
        Some(basic("other", "otherpw")),
        ONE_A_MINUTE,
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert!(
        text.contains(
            "NOPERM this user has no permissions to access one of the keys used as arguments"
        ),
        "{text}"
    );
    // Envoy's user decides; the refusals above charged nothing.
    let envoy = Some(basic("envoy", "envoypw"));
    let (status, text) = http(addr, "POST", "/json", envoy.clone(), ONE_A_MINUTE).await;
    assert_eq!(status, 200, "{text}");
    let (status, _) = http(addr, "POST", "/json", envoy.clone(), ONE_A_MINUTE).await;
    assert_eq!(status, 429);

    // The status page: INFO and RL.TOP.
    let (status, text) = http(
        addr,
        "GET",
        "/status.json",
        Some(basic("monitor", "monpw")),
        "",
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = http(
        addr,
        "GET",
        "/status.json",
        Some(basic("blind", "blindpw")),
        "",
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert!(
        text.contains("NOPERM this user has no permissions to run the 'rl.top' command"),
        "{text}"
    );
    let (status, text) = http(addr, "GET", "/", envoy, "").await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("'info'"), "{text}");
    let (status, _) = http(addr, "GET", "/status.json", None, "").await;
    assert_eq!(status, 401);
    // /metrics and /healthz name no key and change nothing: open.
    let (status, _) = http(addr, "GET", "/metrics", None, "").await;
    assert_eq!(status, 200);
    srv.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_service_takes_a_user_and_judges_it_by_its_rules() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::Entry, RateLimitDescriptor,
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

    let (srv, dir) = start_ports("grpc").await;
    let addr = srv.handle().rls_addr().unwrap();
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let call = |auth: Option<String>| {
        let mut r = tonic::Request::new(RateLimitRequest {
            domain: "rl".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: [("source_cluster", "proxy"), ("destination_cluster", "mock")]
                    .iter()
                    .map(|(k, v)| Entry {
                        key: k.to_string(),
                        value: v.to_string(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        });
        if let Some(a) = auth {
            r.metadata_mut().insert("authorization", a.parse().unwrap());
        }
        r
    };
    // Without credentials a call is `default`'s, which is off.
    let e = client.should_rate_limit(call(None)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    for auth in [
        basic("envoy", "wrong"),
        "Bearer envoypw".into(),
        basic("nobody", "x"),
        "Digest x".into(),
    ] {
        let e = client
            .should_rate_limit(call(Some(auth.clone())))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{auth}: {e:?}");
    }
    let e = client
        .should_rate_limit(call(Some(basic("other", "otherpw"))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().starts_with("NOPERM"), "{e:?}");
    // Envoy's user decides; nothing above was charged.
    let envoy = || call(Some(basic("envoy", "envoypw")));
    let r = client
        .should_rate_limit(envoy())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
    let r = client
        .should_rate_limit(envoy())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::OverLimit as i32);

    // `default` on and without a password: calls without credentials are
    // its, as before users existed.
    srv.state()
        .acl
        .set_user(
            turnstile::cmd::registry::table::REGISTRY.acl(),
            b"default",
            &[b"on", b"nopass", b"~*", b"+@all"],
        )
        .unwrap();
    let r = client
        .should_rate_limit(call(None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    srv.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cluster node started in-process with `tweak`, its bus on a port of
/// its own.
async fn cluster_node(
    dir: &std::path::Path,
    name: &str,
    tweak: impl FnOnce(&mut turnstile::config::Config) + Send + 'static,
) -> Server {
    let file = dir.join(format!("{name}.conf"));
    Server::start_with(move |c| {
        c.cluster_enabled = true;
        c.cluster_config_file = file;
        c.cluster_node_timeout = 2000;
        tweak(c);
    })
    .await
}

fn known_nodes(s: &Server) -> usize {
    s.state()
        .cluster_node
        .as_ref()
        .unwrap()
        .state
        .lock()
        .nodes
        .len()
}

/// A node whose Hello names a user (`masteruser` with `masterauth`) is let
/// onto the bus if that user logs in and may run `CLUSTER MEET`; a
/// gateway's credentials, which log in but may not, make no node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_bus_takes_a_user_allowed_cluster_meet() {
    let dir = std::env::temp_dir().join(format!("turnstile-acl-bus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let acl = dir.join("users.acl");
    std::fs::write(
        &acl,
        "user node on >nodepw +cluster|meet +psync +replconf +ping\n\
         user gw on >gwpw ~tenant:* +@ratelimit\n",
    )
    .unwrap();
    let a = acl.clone();
    let target = cluster_node(&dir, "t", move |c| {
        c.aclfile = Some(a);
        c.requirepass = Some("clusterpw".into());
    })
    .await;
    let node = cluster_node(&dir, "n", |c| {
        c.masteruser = Some("node".into());
        c.masterauth = Some("nodepw".into());
    })
    .await;
    let gw = cluster_node(&dir, "g", |c| {
        c.masteruser = Some("gw".into());
        c.masterauth = Some("gwpw".into());
    })
    .await;
    let (port, cport) = crate::cluster_live::meet_args(&target);
    for joiner in [&node, &gw] {
        let mut c = joiner.client().await;
        let ok: String = q(&mut c, &["CLUSTER", "MEET", "127.0.0.1", &port, &cport]).await;
        assert_eq!(ok, "OK");
    }
    let bus = target.state().cluster_node.as_ref().unwrap().clone();
    eventually(
        "the node user's links are let in and the gateway's refused",
        || {
            known_nodes(&node) == 2
                && known_nodes(&target) == 2
                && bus.refused.load(std::sync::atomic::Ordering::Relaxed) >= 2
        },
    )
    .await;
    // The gateway never became a member.
    assert_eq!(known_nodes(&target), 2);
    let st = gw.state().cluster_node.as_ref().unwrap().state.lock();
    assert!(st
        .nodes
        .values()
        .all(|n| n.in_handshake() || n.id == st.myself));
    drop(st);
    let _ = std::fs::remove_dir_all(&dir);
}
