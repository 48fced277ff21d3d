//! Envoy's rate limit service over gRPC on `--rls-port`:
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` (messages
//! generated from Envoy's own protos by the `envoy-types` crate), and the
//! gRPC health service beside it. The decision is `policy::rls`'s; this
//! module converts messages and maps a refusal to `UNAVAILABLE`, so
//! Envoy's `failure_mode_deny` chooses what happens then.
//!
//! Bounded like the Redis port: at most `--rls-maxclients` connections
//! (more are closed on accept and counted), the HTTP/2 preface within
//! `--rls-handshake-timeout`, no silence longer than `--rls-idle-timeout`,
//! messages up to `--rls-max-message-size` and
//! `--rls-max-concurrent-streams` calls per connection. Without them,
//! 1,100 connections that never sent a byte stayed open for good and took
//! the descriptors Redis clients needed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    self, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::acl::UserCell;
use crate::policy::rls::{self, Code, Descriptor, Override};
use crate::state::State;
use crate::stats::{Local, RlsOutcome};
use crate::store::Keyspace;

/// A request's whole budget: Envoy's own timeout for the call is 20 ms by
/// default, so one that waits longer is answered by Envoy anyway.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

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
    let routing = state.cluster_node.as_ref().map(|n| n.routing());
    let env = rls::Env {
        db: Keyspace::Store(&state.store),
        policies: &state.policies,
        cluster: state.cluster.as_ref(),
        routing: routing.as_ref().map(|r| &***r),
        room: state.write_room(),
    };
    let r = rls::should_rate_limit(
        env,
        req.domain.as_bytes(),
        &descriptors,
        u64::from(req.hits_addend),
        state.clock.now(),
        &mut stats,
    );
    stats.flush(&state.stats);
    let outcome = match &r {
        Ok(r) if r.overall == Code::OverLimit => RlsOutcome::OverLimit,
        Ok(_) => RlsOutcome::Ok,
        Err(_) => RlsOutcome::Error,
    };
    state
        .stats
        .counters
        .add_at(crate::metrics::table::RLS_REQUESTS, outcome as usize, 1);
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

/// Whether `user` may have a decision in `domain`: as if it ran
/// `RL.CHECK domain ...`, the command that decides a descriptor against a
/// domain's policies (its key is the domain).
fn may_decide(user: &UserCell, domain: &str) -> Result<(), String> {
    crate::cmd::exec::permit::may_run_args(
        &crate::cmd::registry::table::REGISTRY,
        user,
        &[b"RL.CHECK", domain.as_bytes(), b"descriptor", b"value"],
    )
}

/// The user a call runs as: the one its `authorization` metadata logs in
/// as (HTTP Basic `user:password`, or `default`'s password as a bearer
/// token, as on the metrics port), or without it the `default` user, as
/// every call was before there were users (its password is not asked:
/// Envoy sends none unless configured to). A call whose credentials do
/// not log in, or without any while `default` is off, is
/// `UNAUTHENTICATED`.
#[allow(clippy::result_large_err)]
fn caller(
    state: &State,
    metadata: &tonic::metadata::MetadataMap,
) -> Result<Arc<UserCell>, tonic::Status> {
    match metadata.get("authorization") {
        Some(given) => super::auth::authenticate(state, given.as_bytes()).ok_or_else(|| {
            state
                .stats
                .counters
                .inc(crate::metrics::table::AUTH_FAILURES);
            tonic::Status::unauthenticated(
                "WRONGPASS invalid username-password pair or user is disabled.",
            )
        }),
        None => {
            let default = state.acl.default_user();
            if default.load().enabled {
                Ok(default.clone())
            } else {
                Err(tonic::Status::unauthenticated(
                    "authentication required: the default user is off; send a user's credentials in the authorization metadata",
                ))
            }
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let user = caller(&self.state, request.metadata())?;
        may_decide(&user, &request.get_ref().domain).map_err(tonic::Status::permission_denied)?;
        let decided = decide(&self.state, request.get_ref(), self.headers);
        super::aof::before_reply(&self.state).await;
        decided
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
    let settings = &state.settings;
    let max_message = usize::try_from(settings.config.rls_max_message_size).unwrap_or(usize::MAX);
    let streams = settings.config.rls_max_concurrent_streams;
    let health_service = health_service.max_decoding_message_size(max_message);
    let incoming = Incoming {
        listener,
        slots: Arc::new(Semaphore::new(
            usize::try_from(settings.get(&settings.rls_maxclients)).unwrap_or(usize::MAX),
        )),
        cap: settings.get(&settings.rls_maxclients),
        backoff: None,
        state: state.clone(),
    };
    let service = RateLimitServiceServer::new(Service { state, headers })
        .max_decoding_message_size(max_message);
    let stop = async move {
        let _ = shutdown.wait_for(|&stop| stop).await;
        health
            .set_not_serving::<RateLimitServiceServer<Service>>()
            .await;
    };
    let served = tonic::transport::Server::builder()
        .timeout(REQUEST_TIMEOUT)
        .max_concurrent_streams(streams)
        .add_service(health_service)
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, stop)
        .await;
    if let Err(e) = served {
        tracing::error!("rate limit service stopped: {e}");
    }
}

/// The listener's connections as tonic takes them, each holding a slot of
/// `--rls-maxclients`: past the cap, a connection is closed on accept.
struct Incoming {
    listener: TcpListener,
    slots: Arc<Semaphore>,
    /// The slots `slots` was made with (at most `u32::MAX`, as the
    /// setting is bounded, far under the semaphore's own limit); `CONFIG
    /// SET rls-maxclients` moves the cap by adding or forgetting slots.
    cap: u64,
    /// After a failed accept (out of descriptors), a pause before the
    /// next, instead of a busy loop.
    backoff: Option<Pin<Box<Sleep>>>,
    state: Arc<State>,
}

impl Incoming {
    /// Follows `CONFIG SET rls-maxclients`: slots are added, or taken out
    /// of use as they come free.
    fn follow_cap(&mut self) {
        let want = self.state.settings.get(&self.state.settings.rls_maxclients);
        if want > self.cap {
            let add = usize::try_from(want - self.cap).unwrap_or(usize::MAX);
            self.slots.add_permits(add);
            self.cap = want;
        } else if want < self.cap {
            let gone = usize::try_from(self.cap - want).unwrap_or(usize::MAX);
            let taken = self.slots.forget_permits(gone);
            self.cap -= taken as u64;
        }
    }
}

impl tokio_stream::Stream for Incoming {
    type Item = io::Result<Guarded>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(pause) = self.backoff.as_mut() {
                ready!(pause.as_mut().poll(cx));
                self.backoff = None;
            }
            let stream = match ready!(self.listener.poll_accept(cx)) {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("rate limit service: accept failed: {e}");
                    self.backoff = Some(Box::pin(tokio::time::sleep(Duration::from_millis(10))));
                    continue;
                }
            };
            self.follow_cap();
            // Over the cap: closed at once (dropping the stream).
            let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                let reason = crate::stats::Rejected::RlsMaxclients as usize;
                self.state.stats.counters.add_at(
                    crate::metrics::table::CONNECTIONS_REJECTED,
                    reason,
                    1,
                );
                continue;
            };
            let _ = stream.set_nodelay(true);
            let settings = &self.state.settings;
            let ms = |a| Duration::from_millis(settings.get(a));
            let handshake = ms(&settings.rls_handshake_timeout_ms);
            let idle = Some(ms(&settings.rls_idle_timeout_ms)).filter(|d| !d.is_zero());
            return Poll::Ready(Some(Ok(Guarded::new(stream, slot, handshake, idle))));
        }
    }
}

/// The HTTP/2 connection preface every client sends first.
const PREFACE_LEN: usize = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".len();

/// A rate limit service connection: holds its slot of the cap until it
/// is dropped, and fails its reads (which ends the connection) when the
/// client has not sent the preface within the handshake timeout, or has
/// sent nothing for the idle timeout.
struct Guarded {
    io: TcpStream,
    _slot: OwnedSemaphorePermit,
    /// Preface bytes not yet received.
    preface_left: usize,
    idle: Option<Duration>,
    /// When a byte was last read.
    heard: Instant,
    /// When the silence runs out: the handshake's deadline, then the
    /// idle one (moved forward lazily, when it fires, from `heard`).
    deadline: Option<Pin<Box<Sleep>>>,
}

impl Guarded {
    fn new(
        io: TcpStream,
        slot: OwnedSemaphorePermit,
        handshake: Duration,
        idle: Option<Duration>,
    ) -> Guarded {
        let now = Instant::now();
        Guarded {
            io,
            _slot: slot,
            preface_left: PREFACE_LEN,
            idle,
            heard: now,
            deadline: Some(Box::pin(tokio::time::sleep_until(now + handshake))),
        }
    }

    /// Whether the connection has been silent too long; if not, the
    /// deadline is moved to the next moment it could be.
    fn poll_silence(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            let Some(deadline) = self.deadline.as_mut() else {
                return Poll::Pending;
            };
            ready!(deadline.as_mut().poll(cx));
            if self.preface_left > 0 {
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no HTTP/2 preface within --rls-handshake-timeout",
                ));
            }
            let Some(idle) = self.idle else {
                self.deadline = None;
                return Poll::Pending;
            };
            let due = self.heard + idle;
            if due <= Instant::now() {
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "silent for --rls-idle-timeout",
                ));
            }
            deadline.as_mut().reset(due);
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len() - before;
                if n > 0 {
                    self.heard = Instant::now();
                    if self.preface_left > 0 {
                        self.preface_left = self.preface_left.saturating_sub(n);
                        if self.preface_left == 0 {
                            // From the handshake's deadline to the idle one.
                            let next = self.idle.map(|idle| self.heard + idle);
                            match (next, self.deadline.as_mut()) {
                                (Some(at), Some(d)) => d.as_mut().reset(at),
                                _ => self.deadline = None,
                            }
                        }
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.poll_silence(cx).map(Err),
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Guarded {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// envoyproxy/ratelimit's `POST /json` on the metrics port: a
/// `RateLimitRequest` in protojson (camelCase or proto field names),
/// answered with the `RateLimitResponse` in protojson: HTTP 200 when OK,
/// 429 when over the limit, 400 for a request it cannot read or decide.
pub fn json(state: &State, headers: bool, user: &UserCell, body: &[u8]) -> (u16, String) {
    let req = match serde_json::from_slice(body)
        .map_err(|e| e.to_string())
        .and_then(|v| json::request(&v))
    {
        Ok(r) => r,
        Err(e) => {
            state.stats.counters.add_at(
                crate::metrics::table::RLS_REQUESTS,
                RlsOutcome::Error as usize,
                1,
            );
            return (400, format!("{{\"error\":{}}}", serde_json::Value::from(e)));
        }
    };
    if let Err(why) = may_decide(user, &req.domain) {
        return (
            403,
            format!("{{\"error\":{}}}", serde_json::Value::from(why)),
        );
    }
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
