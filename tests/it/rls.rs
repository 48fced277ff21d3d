//! Envoy's rate limit service on a real server (`--rls-port 0`), through a
//! tonic client generated from Envoy's protos, with envoyproxy/ratelimit's
//! example configuration unchanged, on a driven clock: OK then OVER_LIMIT
//! at the right count, `replaces`, `unlimited`, a zero limit, shadow mode,
//! all-or-nothing charging, `hits_addend` (request and descriptor), limit
//! overrides, refunds, the draft-10 headers, errors as UNAVAILABLE, the
//! health service; and the same decisions through `POST /json`.

use crate::common::*;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::{Entry, RateLimitOverride},
    RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use turnstile::Nanos;

/// envoyproxy/ratelimit's example configuration, both files.
const EXAMPLE: &str = include_str!("../policies/envoy/example.yaml");
const MONGO: &str = include_str!("../policies/envoy/config.yaml");

async fn start(headers: bool) -> (Server, RateLimitServiceClient<Channel>) {
    let dir = std::env::temp_dir().join(format!("turnstile-rls-{headers}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("example.yaml"), EXAMPLE).unwrap();
    std::fs::write(dir.join("config.yaml"), MONGO).unwrap();
    let srv = Server::start_with(|c| {
        c.policies = Some(dir);
        c.rls_port = Some(0);
        c.rls_headers = headers;
    })
    .await;
    // Fixed windows start on the unit's boundaries, as envoyproxy/ratelimit
    // counts them: start on a minute's.
    srv.advance_ms(60_000 - START_MS % 60_000);
    let addr = srv.handle().rls_addr().expect("--rls-port serves");
    let client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("gRPC connect");
    (srv, client)
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    }
}

async fn ask(c: &mut RateLimitServiceClient<Channel>, r: RateLimitRequest) -> RateLimitResponse {
    c.should_rate_limit(r).await.expect("answered").into_inner()
}

/// `(code, requests_per_unit, unit, remaining)` of each status.
fn brief(r: &RateLimitResponse) -> Vec<(Code, u32, i32, u32)> {
    r.statuses
        .iter()
        .map(|s: &DescriptorStatus| {
            let (rpu, unit) = s
                .current_limit
                .as_ref()
                .map_or((0, 0), |l| (l.requests_per_unit, l.unit));
            (s.code(), rpu, unit, s.limit_remaining)
        })
        .collect()
}

const MINUTE: i32 = Unit::Minute as i32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_then_over_limit_at_the_configured_count_and_again_after_the_window() {
    let (srv, mut c) = start(false).await;
    let mock = || {
        request(
            "rl",
            vec![descriptor(&[
                ("source_cluster", "proxy"),
                ("destination_cluster", "mock"),
            ])],
        )
    };
    let r = ask(&mut c, mock()).await;
    assert_eq!(r.overall_code(), Code::Ok);
    assert_eq!(brief(&r), vec![(Code::Ok, 1, MINUTE, 0)]);
    let reset = r.statuses[0].duration_until_reset.as_ref().unwrap();
    assert!(reset.seconds > 0 && reset.seconds <= 60, "{reset:?}");
    assert!(r.response_headers_to_add.is_empty(), "headers are off");
    let r = ask(&mut c, mock()).await;
    assert_eq!(r.overall_code(), Code::OverLimit);
    assert_eq!(brief(&r), vec![(Code::OverLimit, 1, MINUTE, 0)]);
    srv.advance_ms(60_000);
    assert_eq!(ask(&mut c, mock()).await.overall_code(), Code::Ok);

    // The mongo_cps domain's second-long windows, hit by hits_addend.
    let mut users = request("mongo_cps", vec![descriptor(&[("database", "users")])]);
    users.hits_addend = 499;
    assert_eq!(brief(&ask(&mut c, users.clone()).await)[0].3, 1);
    users.hits_addend = 2;
    assert_eq!(
        ask(&mut c, users.clone()).await.overall_code(),
        Code::OverLimit
    );
    users.hits_addend = 0; // 0 means 1
    assert_eq!(
        brief(&ask(&mut c, users).await)[0],
        (Code::Ok, 500, Unit::Second as i32, 0)
    );

    // A domain or descriptor no file names: OK with no limit.
    let r = ask(&mut c, request("nosuch", vec![descriptor(&[("a", "b")])])).await;
    assert_eq!(brief(&r), vec![(Code::Ok, 0, 0, 0)]);
    assert!(r.statuses[0].current_limit.is_none());
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaces_unlimited_zero_limits_and_shadow_mode() {
    let (srv, mut c) = start(false).await;
    // bkthomps (1/min) is replaced by category=account (4/min).
    let both = || {
        request(
            "rl",
            vec![
                descriptor(&[("category", "account")]),
                descriptor(&[("foo", "x"), ("bar", "bkthomps")]),
            ],
        )
    };
    for left in (0..4).rev() {
        let r = ask(&mut c, both()).await;
        assert_eq!(
            brief(&r),
            vec![(Code::Ok, 4, MINUTE, left), (Code::Ok, 0, 0, 0)],
            "bkthomps replaced"
        );
    }
    assert_eq!(ask(&mut c, both()).await.overall_code(), Code::OverLimit);
    // Alone, bkthomps applies (1/min).
    let alone = || request("rl", vec![descriptor(&[("foo", "x"), ("bar", "bkthomps")])]);
    assert_eq!(
        brief(&ask(&mut c, alone()).await),
        vec![(Code::Ok, 1, MINUTE, 0)]
    );
    assert_eq!(ask(&mut c, alone()).await.overall_code(), Code::OverLimit);

    // unlimited: OK, remaining u32::MAX, no limit.
    let r = ask(
        &mut c,
        request("rl", vec![descriptor(&[("qux", "anything")])]),
    )
    .await;
    assert_eq!(brief(&r), vec![(Code::Ok, 0, 0, u32::MAX)]);

    // requests_per_unit 0 denies, unless replaced.
    let banned = || descriptor(&[("foo", "x"), ("bar", "banned")]);
    let r = ask(&mut c, request("rl", vec![banned()])).await;
    assert_eq!(brief(&r), vec![(Code::OverLimit, 0, MINUTE, 0)]);
    let r = ask(
        &mut c,
        request(
            "rl",
            vec![
                banned(),
                descriptor(&[
                    ("source_cluster", "proxy"),
                    ("destination_cluster", "override"),
                ]),
            ],
        ),
    )
    .await;
    assert_eq!(r.overall_code(), Code::Ok);
    assert_eq!(
        brief(&r),
        vec![(Code::Ok, 0, 0, 0), (Code::Ok, 2, MINUTE, 1)]
    );

    // shadow_mode: over the limit (3/min) but OK; counted as shadow.
    let shady = || request("rl", vec![descriptor(&[("foo", "x"), ("baz", "shady")])]);
    for _ in 0..3 {
        assert_eq!(ask(&mut c, shady()).await.overall_code(), Code::Ok);
    }
    let r = ask(&mut c, shady()).await;
    assert_eq!(r.overall_code(), Code::Ok);
    assert_eq!(brief(&r), vec![(Code::Ok, 3, MINUTE, 0)]);
    let mut con = srv.client().await;
    let v: redis::Value = q(&mut con, &["RL.POLICY", "GET", "rl.foo.baz_shady"]).await;
    assert!(format!("{v:?}").contains("shadow_mode"), "{v:?}");
    let stats = srv
        .state()
        .policies
        .current()
        .get("rl.foo.baz_shady")
        .unwrap()
        .stats
        .read();
    assert_eq!(stats, [4, 1, 1, 3, 1], "total, over, near, within, shadow");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_charges_no_descriptor() {
    let (srv, mut c) = start(false).await;
    let mock = || descriptor(&[("source_cluster", "proxy"), ("destination_cluster", "mock")]);
    let foo = || descriptor(&[("foo", "q")]);
    assert_eq!(
        ask(&mut c, request("rl", vec![mock()]))
            .await
            .overall_code(),
        Code::Ok
    );
    // mock is spent: the pair is denied, and foo (2/min) keeps both.
    let r = ask(&mut c, request("rl", vec![foo(), mock()])).await;
    assert_eq!(r.overall_code(), Code::OverLimit);
    assert_eq!(brief(&r)[1].0, Code::OverLimit);
    let r = ask(&mut c, request("rl", vec![foo()])).await;
    assert_eq!(
        brief(&r),
        vec![(Code::Ok, 2, MINUTE, 1)],
        "nothing was charged"
    );

    // A descriptor's own hits_addend: 0 is a look, and overrides the
    // request's.
    let mut look = foo();
    look.hits_addend = Some(UInt64Value { value: 0 });
    let mut req = request("rl", vec![look.clone()]);
    req.hits_addend = 5;
    assert_eq!(
        brief(&ask(&mut c, req).await),
        vec![(Code::Ok, 2, MINUTE, 1)]
    );
    // More than the whole limit at once: over, nothing charged.
    let mut big = foo();
    big.hits_addend = Some(UInt64Value { value: 3 });
    let r = ask(&mut c, request("rl", vec![big])).await;
    assert_eq!(r.overall_code(), Code::OverLimit);
    assert_eq!(
        brief(&ask(&mut c, request("rl", vec![look.clone()])).await)[0].3,
        1
    );
    // A refund gives a unit back.
    let mut back = foo();
    back.hits_addend = Some(UInt64Value { value: 1 });
    back.is_negative_hits = true;
    let r = ask(&mut c, request("rl", vec![back])).await;
    assert_eq!(brief(&r), vec![(Code::Ok, 2, MINUTE, 2)]);

    // A limit override: 2 per second on this descriptor, its own counter.
    let mut o = descriptor(&[("foo", "q")]);
    o.limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: Unit::Second as i32,
    });
    let req = || request("rl", vec![o.clone()]);
    assert_eq!(
        brief(&ask(&mut c, req()).await),
        vec![(Code::Ok, 2, Unit::Second as i32, 1)]
    );
    assert_eq!(ask(&mut c, req()).await.overall_code(), Code::Ok);
    assert_eq!(ask(&mut c, req()).await.overall_code(), Code::OverLimit);
    srv.advance_ms(1_000);
    assert_eq!(ask(&mut c, req()).await.overall_code(), Code::Ok);
    // The file's limit for the same descriptor was not touched.
    assert_eq!(brief(&ask(&mut c, request("rl", vec![look])).await)[0].3, 2);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_errors_and_health() {
    let (srv, mut c) = start(true).await;
    let req = || {
        request(
            "rl",
            vec![
                descriptor(&[("foo", "h")]),
                descriptor(&[("foo", "h"), ("bar", "any")]),
            ],
        )
    };
    let headers = |r: &RateLimitResponse| {
        r.response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect::<Vec<_>>()
    };
    let r = ask(&mut c, req()).await;
    assert_eq!(
        brief(&r),
        vec![(Code::Ok, 2, MINUTE, 1), (Code::Ok, 3, MINUTE, 2)]
    );
    assert_eq!(
        headers(&r),
        vec![
            (
                "RateLimit-Policy".into(),
                r#""rl.foo";q=2;w=60, "rl.foo.bar";q=3;w=60"#.into()
            ),
            ("RateLimit".into(), r#""rl.foo";r=1;t=60"#.into()),
        ]
    );
    ask(&mut c, req()).await;
    let r = ask(&mut c, req()).await;
    assert_eq!(r.overall_code(), Code::OverLimit);
    let h = headers(&r);
    assert_eq!(h[1], ("RateLimit".into(), r#""rl.foo";r=0;t=60"#.into()));
    assert_eq!(h[2], ("Retry-After".into(), "60".into()));

    // Errors are UNAVAILABLE, so failure_mode_deny decides.
    for bad in [
        request("", vec![descriptor(&[("foo", "h")])]),
        request("rl", vec![]),
        request("rl", vec![descriptor(&[])]),
    ] {
        let e = c.should_rate_limit(bad).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    }
    let mut unit = descriptor(&[("foo", "h")]);
    unit.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 99,
    });
    let e = c
        .should_rate_limit(request("rl", vec![unit]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert!(e.message().contains("unknown unit"), "{e:?}");

    // The gRPC health service, overall and for the rate limit service.
    let addr = srv.handle().rls_addr().unwrap();
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let r = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status(), ServingStatus::Serving, "{service:?}");
    }
    srv.shutdown().await;
}

/// One HTTP/1.1 request, as an Envoy-side caller sends it (JSON, from the
/// server's own address); the status and body.
async fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    http_with(
        addr,
        method,
        path,
        &format!("Host: {addr}\r\nContent-Type: application/json\r\n"),
        body,
    )
    .await
}

/// One HTTP/1.1 request with these header lines (each ending in CRLF);
/// the status and body.
pub(crate) async fn http_with(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(IO_TIMEOUT, s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

/// A server with the example policies and `password` (if any) on its
/// metrics port, on a minute's boundary; its metrics address.
async fn start_json(password: Option<&str>) -> (Server, std::net::SocketAddr) {
    let dir = std::env::temp_dir().join(format!(
        "turnstile-rls-json-{}-{}",
        password.is_some(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("example.yaml"), EXAMPLE).unwrap();
    let srv = Server::start_with(|c| {
        c.policies = Some(dir);
        c.requirepass = password.map(String::from);
    })
    .await;
    srv.advance_ms(60_000 - START_MS % 60_000);
    let addr = srv.handle().metrics_addr().unwrap();
    (srv, addr)
}

/// `source_cluster=proxy, destination_cluster=mock`: 1 a minute.
const ONE_A_MINUTE: &str = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"source_cluster","value":"proxy"},{"key":"destination_cluster","value":"mock"}]}]}"#;
/// The same descriptor's hit given back.
const REFUND: &str = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"source_cluster","value":"proxy"},{"key":"destination_cluster","value":"mock"}],"is_negative_hits":true}]}"#;

/// With a password set, `POST /json` needs it (Basic or bearer): without
/// it, or with a wrong one, nothing is charged or refunded (an
/// unauthenticated caller used to drain a tenant with `hits_addend` and
/// hand its own hits back with `is_negative_hits`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_json_needs_the_password_when_one_is_set() {
    let (srv, addr) = start_json(Some("pw-json-8Tq")).await;
    let json = format!("Host: {addr}\r\nContent-Type: application/json\r\n");
    let bearer = format!("{json}Authorization: Bearer pw-json-8Tq\r\n");
    // "envoy:pw-json-8Tq": any user name.
    let basic = format!("{json}Authorization: Basic ZW52b3k6cHctanNvbi04VHE=\r\n");
    let wrong = format!("{json}Authorization: Bearer pw-json-8Tr\r\n");
    for headers in [&json, &wrong] {
        let (status, text) = http_with(addr, "POST", "/json", headers, ONE_A_MINUTE).await;
        assert_eq!(status, 401, "{text}");
        assert!(text.contains("\"error\""), "{text}");
    }
    // Nothing was charged: the one request a minute is still there.
    let (status, text) = http_with(addr, "POST", "/json", &bearer, ONE_A_MINUTE).await;
    assert_eq!(status, 200, "{text}");
    let (status, _) = http_with(addr, "POST", "/json", &basic, ONE_A_MINUTE).await;
    assert_eq!(status, 429);
    // A refund without the password gives nothing back.
    let (status, _) = http_with(addr, "POST", "/json", &json, REFUND).await;
    assert_eq!(status, 401);
    let (status, _) = http_with(addr, "POST", "/json", &basic, ONE_A_MINUTE).await;
    assert_eq!(status, 429);
    // With it, as Envoy's callers use it.
    let (status, _) = http_with(addr, "POST", "/json", &bearer, REFUND).await;
    assert_eq!(status, 200);
    let (status, _) = http_with(addr, "POST", "/json", &basic, ONE_A_MINUTE).await;
    assert_eq!(status, 200);
    // The password is read live: CONFIG SET requirepass replaces it.
    let mut c = connect_url(&srv.url(":pw-json-8Tq@", "")).await.unwrap();
    let _: () = q(&mut c, &["CONFIG", "SET", "requirepass", "pw-json-new"]).await;
    let (status, _) = http_with(addr, "POST", "/json", &bearer, ONE_A_MINUTE).await;
    assert_eq!(status, 401);
    let renewed = format!("{json}Authorization: Bearer pw-json-new\r\n");
    let (status, _) = http_with(addr, "POST", "/json", &renewed, ONE_A_MINUTE).await;
    assert_eq!(status, 429);
    srv.shutdown().await;
}

/// `POST /json` refuses what a page on another site could make a browser
/// send: a body that is not JSON (a form or `text/plain` needs no CORS
/// preflight), a cross-site `Origin` or `Sec-Fetch-Site`, and a Host that
/// is not this server's (DNS rebinding). Refused requests charge nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_json_refuses_what_a_browser_could_send_cross_site() {
    let (srv, addr) = start_json(None).await;
    let host = format!("Host: {addr}\r\n");
    let json = format!("{host}Content-Type: application/json\r\n");
    for (headers, want) in [
        (format!("{host}Content-Type: text/plain\r\n"), 415),
        (
            format!("{host}Content-Type: application/x-www-form-urlencoded\r\n"),
            415,
        ),
        (host.clone(), 415),
        (format!("{json}Origin: http://evil.example\r\n"), 403),
        (format!("{json}Origin: null\r\n"), 403),
        (format!("{json}Sec-Fetch-Site: cross-site\r\n"), 403),
        (format!("{json}Sec-Fetch-Site: same-site\r\n"), 403),
        (
            format!(
                "Host: rebound.evil.example:{}\r\nContent-Type: application/json\r\n",
                addr.port()
            ),
            421,
        ),
    ] {
        let (status, text) = http_with(addr, "POST", "/json", &headers, ONE_A_MINUTE).await;
        assert_eq!(status, want, "{headers:?}: {text}");
    }
    // Nothing was charged; a same-origin call from a page on this port is
    // answered.
    let same = format!(
        "{host}Content-Type: application/json; charset=utf-8\r\nOrigin: http://{addr}\r\nSec-Fetch-Site: same-origin\r\n"
    );
    let (status, text) = http_with(addr, "POST", "/json", &same, ONE_A_MINUTE).await;
    assert_eq!(status, 200, "{text}");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_json_answers_as_envoyproxy_ratelimit_does() {
    let (srv, _c) = start(true).await;
    let addr = srv.handle().metrics_addr().unwrap();
    let body = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"source_cluster","value":"proxy"},{"key":"destination_cluster","value":"mock"}]}]}"#;
    let (status, text) = http(addr, "POST", "/json", body).await;
    assert_eq!(status, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["overallCode"], "OK");
    assert_eq!(v["statuses"][0]["code"], "OK");
    assert_eq!(v["statuses"][0]["currentLimit"]["requestsPerUnit"], 1);
    assert_eq!(v["statuses"][0]["currentLimit"]["unit"], "MINUTE");
    assert!(
        v["statuses"][0].get("limitRemaining").is_none(),
        "0 is left out"
    );
    assert_eq!(v["statuses"][0]["durationUntilReset"], "60s");
    assert_eq!(v["responseHeadersToAdd"][1]["key"], "RateLimit");
    let (status, text) = http(addr, "POST", "/json", body).await;
    assert_eq!(status, 429, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["overallCode"], "OVER_LIMIT");
    for bad in [
        "{",
        r#"{"domain":"rl","descriptors":[]}"#,
        r#"{"domain":7}"#,
    ] {
        let (status, text) = http(addr, "POST", "/json", bad).await;
        assert_eq!(status, 400, "{bad}: {text}");
        assert!(text.contains("error"), "{text}");
    }
    let (status, _) = http(addr, "GET", "/json", "").await;
    assert_eq!(status, 405);

    // detailed_metric (`unspec`, 2/min): stats per value; and the calls
    // by code.
    let unspec = |v: &str| {
        format!(
            r#"{{"domain":"rl","descriptors":[{{"entries":[{{"key":"unspec","value":"{v}"}}]}}]}}"#
        )
    };
    for v in ["a", "a", "a", "b"] {
        http(addr, "POST", "/json", &unspec(v)).await;
    }
    let (_, m) = http(addr, "GET", "/metrics", "").await;
    for line in [
        r#"turnstile_policy_hits_total{domain="rl",policy="rl.unspec",stat="total_hits"} 4"#,
        r#"turnstile_policy_detailed_hits_total{domain="rl",policy="rl.unspec",descriptor="rl.unspec_a",stat="over_limit"} 1"#,
        r#"turnstile_policy_detailed_hits_total{domain="rl",policy="rl.unspec",descriptor="rl.unspec_b",stat="within_limit"} 1"#,
        r#"turnstile_rls_requests_total{code="ok"} 4"#,
        r#"turnstile_rls_requests_total{code="over_limit"} 2"#,
        r#"turnstile_rls_requests_total{code="error"} 3"#,
    ] {
        assert!(m.contains(line), "{line} in\n{m}");
    }
    assert!(
        !m.contains(r#"policy="rl.foo",descriptor"#),
        "no per-value series without detailed_metric"
    );
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_counters_survive_a_restart_through_the_snapshot() {
    let dir = std::env::temp_dir().join(format!("turnstile-rls-snap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("example.yaml"), EXAMPLE).unwrap();
    let snap = dir.join("dump.tsnap");
    let start = |at: u64| {
        let (dir, snap) = (dir.clone(), snap.clone());
        Server::start_at(Nanos(at), move |c| {
            c.policies = Some(dir);
            c.snapshot = Some(snap);
            c.rls_port = Some(0);
        })
    };
    // At a minute's start, so the fixed window spans both servers' life.
    let t0 = (START_SECS / 60 + 1) * 60 * Nanos::PER_SEC;
    let foo = || request("rl", vec![descriptor(&[("foo", "snap")])]);
    let a = start(t0).await;
    let mut c =
        RateLimitServiceClient::connect(format!("http://{}", a.handle().rls_addr().unwrap()))
            .await
            .unwrap();
    assert_eq!(brief(&ask(&mut c, foo()).await)[0].3, 1);
    drop(c);
    a.shutdown().await;
    let b = start(t0 + 5 * Nanos::PER_SEC).await;
    let mut c =
        RateLimitServiceClient::connect(format!("http://{}", b.handle().rls_addr().unwrap()))
            .await
            .unwrap();
    assert_eq!(
        brief(&ask(&mut c, foo()).await),
        vec![(Code::Ok, 2, MINUTE, 0)],
        "counted on"
    );
    assert_eq!(ask(&mut c, foo()).await.overall_code(), Code::OverLimit);
    drop(c);
    b.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A server with the example policies and `--rls-port 0`, its settings
/// tweaked by `tweak`; the rate limit service's address.
async fn start_bounded(
    name: &str,
    tweak: impl FnOnce(&mut turnstile::config::Config),
) -> (Server, std::net::SocketAddr) {
    let dir = std::env::temp_dir().join(format!("turnstile-rls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("example.yaml"), EXAMPLE).unwrap();
    let srv = Server::start_with(|c| {
        c.policies = Some(dir);
        c.rls_port = Some(0);
        tweak(c);
    })
    .await;
    let addr = srv.handle().rls_addr().expect("--rls-port serves");
    (srv, addr)
}

/// The HTTP/2 connection preface and an empty SETTINGS frame: what a
/// client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// Reads until the server closes `s`; whether it did within `limit`.
async fn closed_within(s: &mut tokio::net::TcpStream, limit: std::time::Duration) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// One decision through a fresh gRPC connection: the service still
/// answers.
async fn answers(addr: std::net::SocketAddr) -> bool {
    let Ok(mut c) = RateLimitServiceClient::connect(format!("http://{addr}")).await else {
        return false;
    };
    let r = request("rl", vec![descriptor(&[("source_cluster", "proxy")])]);
    c.should_rate_limit(r).await.is_ok()
}

/// A connection that never sends the HTTP/2 preface, or only part of it,
/// is closed after `--rls-handshake-timeout` (1,100 such connections used
/// to stay open for good and took the descriptors Redis clients needed);
/// a real client is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_without_the_preface_is_closed() {
    let (srv, addr) = start_bounded("handshake", |c| c.rls_handshake_timeout = 200).await;
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut partial = tokio::net::TcpStream::connect(addr).await.unwrap();
    partial.write_all(&PREFACE[..10]).await.unwrap();
    assert!(answers(addr).await);
    assert!(
        closed_within(&mut silent, IO_TIMEOUT).await,
        "silent one kept"
    );
    assert!(
        closed_within(&mut partial, IO_TIMEOUT).await,
        "partial one kept"
    );
    srv.shutdown().await;
}

/// After the preface, a connection silent for `--rls-idle-timeout` is
/// closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_after_the_idle_timeout() {
    let (srv, addr) = start_bounded("idle", |c| {
        c.rls_handshake_timeout = 60_000;
        c.rls_idle_timeout = 300;
    })
    .await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    assert!(closed_within(&mut s, IO_TIMEOUT).await, "idle one kept");
    assert!(answers(addr).await);
    srv.shutdown().await;
}

/// Past `--rls-maxclients`, a new connection is closed on accept and
/// counted under `reason="rls_maxclients"`; once the others go, clients
/// are served again, and `CONFIG SET rls-maxclients` moves the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_closed() {
    let (srv, addr) = start_bounded("cap", |c| {
        c.rls_maxclients = 4;
        c.rls_handshake_timeout = 60_000;
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    // The handshake timeout is a minute: a close now is the cap's.
    let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_within(&mut extra, IO_TIMEOUT).await,
        "over the cap, kept"
    );
    let metrics = srv.handle().metrics_addr().unwrap();
    let (_, m) = http(metrics, "GET", "/metrics", "").await;
    let line = m
        .lines()
        .find(|l| l.starts_with("turnstile_connections_rejected_total{reason=\"rls_maxclients\"}"))
        .unwrap_or_else(|| panic!("no rls_maxclients series:\n{m}"));
    let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 1.0, "{line}");
    // One more slot: a client is served while the four are held.
    let mut con = srv.client().await;
    let _: String = q(&mut con, &["CONFIG", "SET", "rls-maxclients", "5"]).await;
    assert!(answers(addr).await);
    drop(held);
    let deadline = std::time::Instant::now() + IO_TIMEOUT;
    while !answers(addr).await {
        assert!(std::time::Instant::now() < deadline, "not served again");
    }
    srv.shutdown().await;
}

/// A message over `--rls-max-message-size` is refused (gRPC OUT_OF_RANGE)
/// without being decoded; the connection goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_cap_is_refused() {
    let (srv, addr) = start_bounded("message", |c| c.rls_max_message_size = 1024).await;
    let mut c = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let big = "x".repeat(2_000);
    let r = request("rl", vec![descriptor(&[("source_cluster", big.as_str())])]);
    let e = c.should_rate_limit(r).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::OutOfRange, "{e:?}");
    assert!(e.message().contains("the limit is: 1024 bytes"), "{e:?}");
    let r = request("rl", vec![descriptor(&[("source_cluster", "proxy")])]);
    assert!(c.should_rate_limit(r).await.is_ok());
    srv.shutdown().await;
}

/// The server's SETTINGS frame advertises `--rls-max-concurrent-streams`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_cap_is_advertised() {
    let (srv, addr) = start_bounded("streams", |c| c.rls_max_concurrent_streams = 7).await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    // The server's first frame is its SETTINGS: 9-byte header, then
    // 6-byte (id, value) pairs; SETTINGS_MAX_CONCURRENT_STREAMS is 3.
    let mut head = [0u8; 9];
    tokio::time::timeout(IO_TIMEOUT, s.read_exact(&mut head))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(head[3], 4, "a SETTINGS frame first: {head:?}");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.unwrap();
    let streams = body
        .chunks(6)
        .find(|p| u16::from_be_bytes([p[0], p[1]]) == 3)
        .map(|p| u32::from_be_bytes([p[2], p[3], p[4], p[5]]));
    assert_eq!(streams, Some(7));
    srv.shutdown().await;
}

/// In a growing cluster, a domain's decisions are made only by the node
/// serving the domain's slot: before this node has the slot it refuses,
/// naming who serves it; once it has it, it decides.
#[tokio::test]
async fn a_growing_cluster_node_decides_only_domains_whose_slot_it_serves() {
    let dir = std::env::temp_dir().join(format!("turnstile-rls-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("example.yaml"), EXAMPLE).unwrap();
    let conf = dir.join("nodes.conf");
    let policies = dir.clone();
    let srv = Server::start_with(move |c| {
        c.policies = Some(policies);
        c.cluster_enabled = true;
        c.cluster_config_file = conf;
    })
    .await;
    let addr = srv.handle().metrics_addr().unwrap();
    let json = format!("Host: {addr}\r\nContent-Type: application/json\r\n");
    let (status, text) = http_with(addr, "POST", "/json", &json, ONE_A_MINUTE).await;
    assert_ne!(status, 200, "{text}");
    assert!(
        text.contains("domain 'rl' is served by no node in this cluster"),
        "{text}"
    );
    let mut con = srv.client().await;
    let _: () = q(&mut con, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]).await;
    let (status, text) = http_with(addr, "POST", "/json", &json, ONE_A_MINUTE).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"overallCode\":\"OK\""), "{text}");
    drop(con);
    srv.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A descriptor's `hits_addend` is any u64 the caller sends: more than the
/// whole limit is over the limit and charges nothing, and the policy's
/// stats (`detailed_metric`'s per value too) count it up to 2^63 - 1,
/// however often it comes (they once wrapped, and the per-value sum
/// panicked a debug build on the second such request: the stream reset).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_descriptor_hits_addend_is_over_limit_and_counted_within_u64() {
    let (srv, mut c) = start(false).await;
    let mut huge = descriptor(&[("unspec", "x")]);
    huge.hits_addend = Some(UInt64Value { value: u64::MAX });
    for _ in 0..3 {
        let r = ask(&mut c, request("rl", vec![huge.clone()])).await;
        assert_eq!(brief(&r), vec![(Code::OverLimit, 2, MINUTE, 2)]);
    }
    let one = request("rl", vec![descriptor(&[("unspec", "x")])]);
    assert_eq!(
        brief(&ask(&mut c, one).await),
        vec![(Code::Ok, 2, MINUTE, 1)],
        "nothing was charged"
    );
    let addr = srv.handle().metrics_addr().unwrap();
    let (_, m) = http(addr, "GET", "/metrics", "").await;
    for line in [
        r#"turnstile_policy_hits_total{domain="rl",policy="rl.unspec",stat="total_hits"} 9223372036854775807"#,
        r#"turnstile_policy_hits_total{domain="rl",policy="rl.unspec",stat="over_limit"} 9223372036854775807"#,
        r#"turnstile_policy_hits_total{domain="rl",policy="rl.unspec",stat="within_limit"} 1"#,
        r#"turnstile_policy_detailed_hits_total{domain="rl",policy="rl.unspec",descriptor="rl.unspec_x",stat="total_hits"} 9223372036854775807"#,
        r#"turnstile_policy_detailed_hits_total{domain="rl",policy="rl.unspec",descriptor="rl.unspec_x",stat="within_limit"} 1"#,
    ] {
        assert!(m.contains(line), "{line} in\n{m}");
    }
    srv.shutdown().await;
}
