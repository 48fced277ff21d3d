//! Envoy's rate limit service over gRPC on `--rls-port`:
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` (messages
//! generated from Envoy's own protos by the `envoy-types` crate), and the
//! gRPC health service beside it. The decision is `cmd::rls`'s; this
//! module converts messages and maps a refusal to `UNAVAILABLE`, so
//! Envoy's `failure_mode_deny` chooses what happens then.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    self, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cmd::rls::{self, Code, Descriptor, Override};
use crate::state::State;
use crate::stats::{Local, RlsOutcome};

/// A request's whole budget: Envoy's own timeout for the call is 20 ms by
/// default, so one that waits longer is answered by Envoy anyway.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Streams one HTTP/2 connection may carry at once (Envoy multiplexes
/// every rate limit call of a worker over one connection).
const MAX_STREAMS: u32 = 1024;

/// The service, as tonic calls it.
pub struct Service {
    state: Arc<State>,
    /// `--rls-headers`.
    headers: bool,
}

/// Decides one request: the message's borrowed descriptors, the decision,
/// its response.
pub fn decide(
    state: &State,
    req: &RateLimitRequest,
    headers: bool,
) -> Result<RateLimitResponse, rls::RlsError> {
    let mut pairs: Vec<(&[u8], &[u8])> = Vec::new();
    for d in &req.descriptors {
        pairs.extend(
            d.entries
                .iter()
                .map(|e| (e.key.as_bytes(), e.value.as_bytes())),
        );
    }
    let mut descriptors = Vec::with_capacity(req.descriptors.len());
    let mut at = 0;
    for d in &req.descriptors {
        let n = d.entries.len();
        descriptors.push(Descriptor {
            entries: &pairs[at..at + n],
            limit: d.limit.as_ref().map(|l| Override {
                requests_per_unit: l.requests_per_unit,
                unit: l.unit,
            }),
            hits: d.hits_addend.as_ref().map(|h| h.value),
            refund: d.is_negative_hits,
        });
        at += n;
    }
    let mut stats = Local::new(0);
    let r = rls::should_rate_limit(
        state,
        req.domain.as_bytes(),
        &descriptors,
        u64::from(req.hits_addend),
        state.clock.now(),
        &mut stats,
    );
    stats.flush(&state.stats);
    state.stats.rls_call(match &r {
        Ok(r) if r.overall == Code::OverLimit => RlsOutcome::OverLimit,
        Ok(_) => RlsOutcome::Ok,
        Err(_) => RlsOutcome::Error,
    });
    Ok(to_proto(&r?, headers))
}

/// The response message for a decision.
pub fn to_proto(r: &rls::Response, headers: bool) -> RateLimitResponse {
    let code = |c: Code| match c {
        Code::Ok => rate_limit_response::Code::Ok as i32,
        Code::OverLimit => rate_limit_response::Code::OverLimit as i32,
    };
    RateLimitResponse {
        overall_code: code(r.overall),
        statuses: r
            .statuses
            .iter()
            .map(|s| DescriptorStatus {
                code: code(s.code),
                current_limit: s.limit.as_ref().map(|l| RateLimit {
                    name: l.name.clone(),
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit,
                }),
                limit_remaining: s.remaining,
                duration_until_reset: s.until_reset.map(|ns| {
                    envoy_types::pb::google::protobuf::Duration {
                        seconds: (ns / 1_000_000_000) as i64,
                        nanos: (ns % 1_000_000_000) as i32,
                    }
                }),
                quota: None,
            })
            .collect(),
        response_headers_to_add: if headers {
            rls::headers(r)
                .into_iter()
                .map(|(key, value)| HeaderValue {
                    key: key.to_string(),
                    value,
                    ..HeaderValue::default()
                })
                .collect()
        } else {
            Vec::new()
        },
        ..RateLimitResponse::default()
    }
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        decide(&self.state, request.get_ref(), self.headers)
            .map(tonic::Response::new)
            .map_err(|e| tonic::Status::unavailable(e.to_string()))
    }
}

/// Serves the rate limit and health services on `listener` until
/// `shutdown` fires; the health service answers `NOT_SERVING` from then.
pub async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    headers: bool,
    mut shutdown: watch::Receiver<bool>,
) {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<RateLimitServiceServer<Service>>()
        .await;
    let service = RateLimitServiceServer::new(Service { state, headers });
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let stop = async move {
        let _ = shutdown.wait_for(|&stop| stop).await;
        health
            .set_not_serving::<RateLimitServiceServer<Service>>()
            .await;
    };
    let served = tonic::transport::Server::builder()
        .timeout(REQUEST_TIMEOUT)
        .max_concurrent_streams(MAX_STREAMS)
        .add_service(health_service)
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, stop)
        .await;
    if let Err(e) = served {
        tracing::error!("rate limit service stopped: {e}");
    }
}

/// envoyproxy/ratelimit's `POST /json` on the metrics port: a
/// `RateLimitRequest` in protojson (camelCase or proto field names),
/// answered with the `RateLimitResponse` in protojson: HTTP 200 when OK,
/// 429 when over the limit, 400 for a request it cannot read or decide.
pub fn json(state: &State, headers: bool, body: &[u8]) -> (u16, String) {
    let req = match serde_json::from_slice(body)
        .map_err(|e| e.to_string())
        .and_then(|v| json::request(&v))
    {
        Ok(r) => r,
        Err(e) => {
            state.stats.rls_call(RlsOutcome::Error);
            return (400, format!("{{\"error\":{}}}", serde_json::Value::from(e)));
        }
    };
    match decide(state, &req, headers) {
        Ok(r) => {
            let status = if r.overall_code == rate_limit_response::Code::OverLimit as i32 {
                429
            } else {
                200
            };
            (status, json::response(&r).to_string())
        }
        Err(e) => (
            400,
            format!("{{\"error\":{}}}", serde_json::Value::from(e.to_string())),
        ),
    }
}

/// protojson for the two messages, by hand: `envoy-types` derives no
/// serde, and these two are all `/json` needs.
mod json {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor::{Entry, RateLimitOverride},
        RateLimitDescriptor,
    };
    use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
        rate_limit::Unit, Code,
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
    use envoy_types::pb::google::protobuf::UInt64Value;
    use serde_json::{json, Map, Value};

    /// A field by its protojson (lowerCamel) or proto name.
    fn field<'v>(o: &'v Map<String, Value>, camel: &str, proto: &str) -> Option<&'v Value> {
        o.get(camel)
            .or_else(|| o.get(proto))
            .filter(|v| !v.is_null())
    }

    fn object<'v>(v: &'v Value, what: &str) -> Result<&'v Map<String, Value>, String> {
        v.as_object()
            .ok_or_else(|| format!("{what} must be an object"))
    }

    fn string(v: Option<&Value>, what: &str) -> Result<String, String> {
        match v {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("{what} must be a string")),
        }
    }

    /// An integer, as protojson writes one: a number or a decimal string.
    fn uint(v: Option<&Value>, max: u64, what: &str) -> Result<u64, String> {
        let n = match v {
            None => Some(0),
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.parse().ok(),
            Some(_) => None,
        };
        n.filter(|&n| n <= max)
            .ok_or_else(|| format!("{what} must be an integer from 0 to {max}"))
    }

    pub fn request(v: &Value) -> Result<RateLimitRequest, String> {
        let o = object(v, "the request")?;
        let mut descriptors = Vec::new();
        if let Some(list) = field(o, "descriptors", "descriptors") {
            let list = list.as_array().ok_or("descriptors must be a list")?;
            for d in list {
                descriptors.push(descriptor(object(d, "a descriptor")?)?);
            }
        }
        Ok(RateLimitRequest {
            domain: string(field(o, "domain", "domain"), "domain")?,
            descriptors,
            hits_addend: uint(
                field(o, "hitsAddend", "hits_addend"),
                u32::MAX.into(),
                "hitsAddend",
            )? as u32,
        })
    }

    fn descriptor(o: &Map<String, Value>) -> Result<RateLimitDescriptor, String> {
        let mut entries = Vec::new();
        if let Some(list) = field(o, "entries", "entries") {
            for e in list.as_array().ok_or("entries must be a list")? {
                let e = object(e, "an entry")?;
                entries.push(Entry {
                    key: string(field(e, "key", "key"), "key")?,
                    value: string(field(e, "value", "value"), "value")?,
                });
            }
        }
        let limit = match field(o, "limit", "limit") {
            None => None,
            Some(l) => {
                let l = object(l, "limit")?;
                let unit = match field(l, "unit", "unit") {
                    None => 0,
                    Some(Value::String(s)) => RateLimitUnit::from_str_name(s)
                        .ok_or_else(|| format!("unknown unit {s}"))?
                        as i32,
                    u => uint(u, i32::MAX as u64, "unit")? as i32,
                };
                Some(RateLimitOverride {
                    requests_per_unit: uint(
                        field(l, "requestsPerUnit", "requests_per_unit"),
                        u32::MAX.into(),
                        "requestsPerUnit",
                    )? as u32,
                    unit,
                })
            }
        };
        // A `google.protobuf.UInt64Value` is written as its bare value.
        let hits_addend = match field(o, "hitsAddend", "hits_addend") {
            None => None,
            v => Some(UInt64Value {
                value: uint(v, u64::MAX, "hitsAddend")?,
            }),
        };
        let is_negative_hits = match field(o, "isNegativeHits", "is_negative_hits") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("isNegativeHits must be true or false".into()),
        };
        Ok(RateLimitDescriptor {
            entries,
            limit,
            hits_addend,
            is_negative_hits,
        })
    }

    /// protojson leaves out fields at their default value.
    pub fn response(r: &RateLimitResponse) -> Value {
        let code = |c: i32| Code::try_from(c).unwrap_or(Code::Unknown).as_str_name();
        let mut out = Map::new();
        out.insert("overallCode".into(), json!(code(r.overall_code)));
        let statuses: Vec<Value> = r
            .statuses
            .iter()
            .map(|s| {
                let mut st = Map::new();
                st.insert("code".into(), json!(code(s.code)));
                if let Some(l) = &s.current_limit {
                    let mut cl = Map::new();
                    if !l.name.is_empty() {
                        cl.insert("name".into(), json!(l.name));
                    }
                    if l.requests_per_unit != 0 {
                        cl.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                    }
                    if l.unit != 0 {
                        let unit = Unit::try_from(l.unit).unwrap_or(Unit::Unknown);
                        cl.insert("unit".into(), json!(unit.as_str_name()));
                    }
                    st.insert("currentLimit".into(), Value::Object(cl));
                }
                if s.limit_remaining != 0 {
                    st.insert("limitRemaining".into(), json!(s.limit_remaining));
                }
                if let Some(d) = &s.duration_until_reset {
                    st.insert(
                        "durationUntilReset".into(),
                        json!(duration(d.seconds, d.nanos)),
                    );
                }
                Value::Object(st)
            })
            .collect();
        if !statuses.is_empty() {
            out.insert("statuses".into(), Value::Array(statuses));
        }
        if !r.response_headers_to_add.is_empty() {
            let headers: Vec<Value> = r
                .response_headers_to_add
                .iter()
                .map(|h| json!({"key": h.key, "value": h.value}))
                .collect();
            out.insert("responseHeadersToAdd".into(), Value::Array(headers));
        }
        Value::Object(out)
    }

    /// A `google.protobuf.Duration` in protojson: seconds with 0, 3, 6 or
    /// 9 fractional digits and an `s`.
    fn duration(seconds: i64, nanos: i32) -> String {
        match nanos {
            0 => format!("{seconds}s"),
            n if n % 1_000_000 == 0 => format!("{seconds}.{:03}s", n / 1_000_000),
            n if n % 1_000 == 0 => format!("{seconds}.{:06}s", n / 1_000),
            n => format!("{seconds}.{n:09}s"),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn reads_both_field_spellings_and_string_integers() {
            let v: Value = serde_json::from_str(
                r#"{"domain":"rl","hits_addend":2,"descriptors":[
                    {"entries":[{"key":"a","value":"b"}],"hitsAddend":"5",
                     "limit":{"requestsPerUnit":3,"unit":"MINUTE"},"isNegativeHits":true}]}"#,
            )
            .unwrap();
            let r = request(&v).unwrap();
            assert_eq!(r.domain, "rl");
            assert_eq!(r.hits_addend, 2);
            let d = &r.descriptors[0];
            assert_eq!(
                (d.entries[0].key.as_str(), d.entries[0].value.as_str()),
                ("a", "b")
            );
            assert_eq!(d.hits_addend.as_ref().map(|h| h.value), Some(5));
            let l = d.limit.as_ref().unwrap();
            assert_eq!(
                (l.requests_per_unit, l.unit),
                (3, RateLimitUnit::Minute as i32)
            );
            assert!(d.is_negative_hits);
            for bad in [
                r#"{"domain":1}"#,
                r#"{"descriptors":{}}"#,
                r#"{"hitsAddend":-1}"#,
                r#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#,
            ] {
                assert!(
                    request(&serde_json::from_str(bad).unwrap()).is_err(),
                    "{bad}"
                );
            }
        }

        #[test]
        fn durations_as_protojson_writes_them() {
            assert_eq!(duration(60, 0), "60s");
            assert_eq!(duration(1, 500_000_000), "1.500s");
            assert_eq!(duration(0, 1_000), "0.000001s");
            assert_eq!(duration(0, 7), "0.000000007s");
        }
    }
}
