//! The HTTP endpoint on `--metrics-addr`: `/metrics` (Prometheus text),
//! `/healthz`, the status page (`/` and `/status.json`, `status.rs`), and
//! envoyproxy/ratelimit's `POST /json` (the rate limit service's decision
//! in JSON).
//!
//! `/metrics` and `/healthz` carry no key names and change nothing: they
//! answer anyone, whatever the Host, so Prometheus and orchestrators reach
//! them by pod IP or service name. The status page shows key names and
//! `POST /json` charges and refunds limits, so they are guarded
//! ([`guard`]): the Host must be an IP literal, `localhost` or a name in
//! `--metrics-allowed-hosts` (DNS rebinding), a user's credentials when the
//! `default` user needs a password or is off (HTTP Basic `user:password`,
//! a name no user has standing for `default`, or `default`'s password as a
//! bearer token; read live, as `ACL SETUSER` and `CONFIG SET requirepass`
//! change them), loopback clients only while protected mode is on and no
//! password is needed (as the Redis port), and a `POST` a browser could
//! send cross-site is refused (JSON only, no cross-site `Origin` or
//! `Sec-Fetch-Site`). Then the user's rules, as if it ran a command: the
//! status page needs `INFO` and `RL.TOP` (it shows the heaviest keys),
//! `POST /json` needs `RL.CHECK` on the request's domain (checked by
//! `server/rls.rs`), else 403 with Redis's `NOPERM` words.
//!
//! Bounded like the Redis port: at most [`MAX_CONNECTIONS`] at once,
//! request headers within [`HEADER_TIMEOUT`] (a slow-headers client is
//! closed, as is one idle between requests), a `POST /json` body within
//! [`BODY_TIMEOUT`], and any connection closed after [`CONNECTION_LIMIT`],
//! so idle or trickling clients cannot hold descriptors the Redis port
//! needs. At the cap a new connection closes the one waiting longest on
//! its client (idle, or still sending its request) rather than being
//! refused: 64 ordinary keep-alive clients used to leave a health check
//! unanswered (0 of 80 probes) until one of them went away.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderMap, AUTHORIZATION, CONTENT_TYPE, HOST, ORIGIN, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::acl::UserCell;
use crate::state::State;

/// Scrapers and health checks need a handful; a cap keeps a flood of them
/// from taking the descriptors Redis clients need.
pub const MAX_CONNECTIONS: usize = 64;
/// A request's headers must arrive within this (a slow-headers client is
/// closed, as is one idle between requests).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A `POST /json` body must arrive within this once its headers have.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(5);
/// No connection lasts longer than this; a keep-alive scraper reconnects.
pub const CONNECTION_LIMIT: Duration = Duration::from_secs(60);
/// The largest `POST /json` body read (a request of the most descriptors
/// with long values fits many times over).
pub const MAX_JSON_BODY: usize = 1 << 20;

/// The endpoint's settings fixed at start.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--rls-headers`, for `/json`'s answers.
    pub rls_headers: bool,
    /// `--metrics-allowed-hosts`: names the guarded pages answer to.
    pub allowed_hosts: Vec<String>,
}

/// Serves `/metrics`, `/healthz`, the status page and `/json` until
/// `shutdown` fires; also samples the decision totals every second (the
/// status page's chart) and folds histogram samples every five.
pub async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    options: Options,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut upkeep = tokio::time::interval(Duration::from_secs(1));
    let mut ticks = 0u64;
    let history = Arc::new(super::status::History::default());
    let options = Arc::new(options);
    let conns = Arc::new(Conns::new());
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = upkeep.tick() => {
                history.sample(&state);
                ticks += 1;
                if let (Some(m), 0) = (&state.metrics, ticks % 5) {
                    m.upkeep();
                }
                continue;
            }
            _ = shutdown.changed() => return,
        };
        let Ok((stream, peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        // At the cap, the connection waiting longest on its client makes
        // room (counted as refused); only if every one is being answered
        // is this one closed at once (dropping the stream).
        let (conn, evicted) = conns.admit();
        if evicted || conn.is_none() {
            state.stats.counters.add_at(
                crate::metrics::table::CONNECTIONS_REJECTED,
                crate::stats::Rejected::MetricsEndpoint as usize,
                1,
            );
        }
        let Some(conn) = conn else {
            continue;
        };
        let state = state.clone();
        let history = history.clone();
        let options = options.clone();
        let conns = conns.clone();
        tokio::spawn(async move {
            let this = conn.clone();
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let state = state.clone();
                let history = history.clone();
                let options = options.clone();
                let conn = this.clone();
                async move {
                    conn.touch();
                    let guarded = matches!(
                        (req.method(), req.uri().path()),
                        (&Method::GET, "/" | "/status.json") | (&Method::POST, "/json")
                    );
                    let user = match guarded {
                        false => None,
                        true => match guard(&state, &options, peer.ip(), &req) {
                            Ok(user) => Some(user),
                            Err(refused) => {
                                let json = req.method() == Method::POST;
                                return Ok::<_, Infallible>(refused.response(json));
                            }
                        },
                    };
                    if req.uri().path() == "/json" && req.method() == Method::POST {
                        let user = user.expect("POST /json is guarded");
                        return Ok(json(&state, options.rls_headers, &conn, &user, req).await);
                    }
                    if let Some(user) = &user {
                        if let Err(why) = may_see_status(user) {
                            return Ok(forbidden(why));
                        }
                    }
                    Ok(respond(&state, &history, &req))
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let served = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(io, service);
            tokio::select! {
                _ = tokio::time::timeout(CONNECTION_LIMIT, served) => {}
                _ = conn.evicted.notified() => {}
            }
            conns.release(&conn);
        });
    }
}

/// The connections open on the endpoint, for the cap and for choosing
/// which one makes room at it.
struct Conns {
    open: Mutex<Vec<Arc<Conn>>>,
    /// What [`Conn::active`] counts from.
    epoch: Instant,
}

/// One connection's standing.
struct Conn {
    /// Being answered (a decision and its write to the append-only file):
    /// never closed to make room, or the decision would be made and the
    /// answer lost.
    busy: AtomicBool,
    /// When its last request began (or it connected): ns from
    /// [`Conns::epoch`].
    active: AtomicU64,
    epoch: Instant,
    /// Told to close to make room.
    evicted: Notify,
}

impl Conn {
    fn touch(&self) {
        self.active
            .store(self.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    /// Marks the connection busy until the guard is dropped.
    fn busy(&self) -> impl Drop + '_ {
        struct Busy<'a>(&'a AtomicBool);
        impl Drop for Busy<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Relaxed);
            }
        }
        self.busy.store(true, Ordering::Relaxed);
        Busy(&self.busy)
    }
}

impl Conns {
    fn new() -> Self {
        Conns {
            open: Mutex::new(Vec::with_capacity(MAX_CONNECTIONS)),
            epoch: Instant::now(),
        }
    }

    /// A place for a new connection, and whether another was told to
    /// close for it: under the cap, a new one; at the cap, the place of
    /// the one whose last request began longest ago among those not
    /// being answered; `None` if all are.
    fn admit(&self) -> (Option<Arc<Conn>>, bool) {
        let conn = Arc::new(Conn {
            busy: AtomicBool::new(false),
            active: AtomicU64::new(0),
            epoch: self.epoch,
            evicted: Notify::new(),
        });
        conn.touch();
        let mut open = self.open.lock();
        let mut evicted = false;
        if open.len() >= MAX_CONNECTIONS {
            let oldest = open
                .iter()
                .enumerate()
                .filter(|(_, c)| !c.busy.load(Ordering::Relaxed))
                .min_by_key(|(_, c)| c.active.load(Ordering::Relaxed))
                .map(|(i, _)| i);
            let Some(i) = oldest else {
                return (None, false);
            };
            // Out of the count now; its task closes it at its next poll.
            open.swap_remove(i).evicted.notify_one();
            evicted = true;
        }
        open.push(conn.clone());
        (Some(conn), evicted)
    }

    /// A closed connection's place back (if it was not taken already).
    fn release(&self, conn: &Arc<Conn>) {
        let mut open = self.open.lock();
        if let Some(i) = open.iter().position(|c| Arc::ptr_eq(c, conn)) {
            open.swap_remove(i);
        }
    }
}

/// Why a request to the status page or `POST /json` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The Host is not this server's for certain (DNS rebinding).
    Host,
    /// A browser says it comes from another site.
    CrossSite,
    /// A `POST` body not declared JSON (a cross-site form can send one).
    NotJson,
    /// The password is set and was not given.
    Unauthorized,
    /// Protected mode is on, no password is set, and the client is not on
    /// loopback.
    Protected,
}

impl Refusal {
    fn status(self) -> StatusCode {
        match self {
            Refusal::Host => StatusCode::MISDIRECTED_REQUEST,
            Refusal::CrossSite | Refusal::Protected => StatusCode::FORBIDDEN,
            Refusal::NotJson => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Refusal::Unauthorized => StatusCode::UNAUTHORIZED,
        }
    }

    fn why(self) -> &'static str {
        match self {
            Refusal::Host => "this host name is not served here: use an IP address or localhost, or allow the name with --metrics-allowed-hosts",
            Refusal::CrossSite => "cross-site request refused",
            Refusal::NotJson => "Content-Type must be application/json",
            Refusal::Unauthorized => "authentication required: a user's name and password with HTTP Basic, or the default user's password (requirepass) as a bearer token",
            Refusal::Protected => "protected mode is on and no password is set: the status page and POST /json answer loopback clients only (set --requirepass-file, or --protected-mode no)",
        }
    }

    /// The answer: `{"error": why}` for `/json`'s callers, else plain
    /// text; a 401 carries the challenge a browser answers with its
    /// password dialog.
    fn response(self, json: bool) -> Response<Full<Bytes>> {
        let (content_type, body) = match json {
            true => (
                "application/json",
                format!("{{\"error\":{}}}", serde_json::Value::from(self.why())),
            ),
            false => ("text/plain", format!("{}\n", self.why())),
        };
        let mut r = Response::builder()
            .status(self.status())
            .header("content-type", content_type);
        if self == Refusal::Unauthorized {
            r = r.header(
                WWW_AUTHENTICATE,
                "Basic realm=\"turnstile\", charset=\"UTF-8\"",
            );
        }
        r.body(Full::new(Bytes::from(body)))
            .expect("static response parts are valid")
    }
}

/// Whether a request may reach the status page or `POST /json`, and as
/// which user. In order: the Host (DNS rebinding), for a `POST` what a
/// browser could send cross-site, then who asks: with no password needed
/// (the `default` user on and `nopass`), protected mode's loopback rule;
/// then the credentials given, which must name a user who logs in with
/// them, or, given none, the `default` user when it needs no password.
fn guard<B>(
    state: &State,
    options: &Options,
    peer: IpAddr,
    req: &Request<B>,
) -> Result<Arc<UserCell>, Refusal> {
    let headers = req.headers();
    let host = headers.get(HOST).map(|h| h.to_str().unwrap_or(""));
    if !host_allowed(host, &options.allowed_hosts) {
        return Err(Refusal::Host);
    }
    if req.method() == Method::POST {
        if cross_site(headers, host) {
            return Err(Refusal::CrossSite);
        }
        if !is_json(headers) {
            return Err(Refusal::NotJson);
        }
    }
    let required = state.acl.auth_required();
    let protected = state.settings.protected_mode.load(Ordering::Relaxed);
    if !required && protected && !crate::util::is_loopback(peer) {
        return Err(Refusal::Protected);
    }
    match headers.get(AUTHORIZATION) {
        // A malformed Authorization header is a wrong password.
        Some(given) => super::auth::authenticate(state, given.as_bytes()).ok_or_else(|| {
            state
                .stats
                .counters
                .inc(crate::metrics::table::AUTH_FAILURES);
            Refusal::Unauthorized
        }),
        None if required => Err(Refusal::Unauthorized),
        None => Ok(state.acl.default_user().clone()),
    }
}

/// Whether `user` may see the status page: it shows the server's state
/// (`INFO`'s) and the keys with the most decisions (`RL.TOP`'s).
fn may_see_status(user: &UserCell) -> Result<(), String> {
    use crate::cmd::exec::permit::may_run_args;
    let registry = &crate::cmd::registry::table::REGISTRY;
    may_run_args(registry, user, &[b"INFO"])?;
    may_run_args(registry, user, &[b"RL.TOP"])
}

/// A 403 for a user whose rules do not allow what it asked.
fn forbidden(why: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::FORBIDDEN)
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from(why + "\n")))
        .expect("static response parts are valid")
}

/// Whether the Host names this server for certain: absent (not a
/// browser), an IP literal, `localhost`, or a name the operator allowed.
/// Any other name may be an attacker's, pointed here by DNS rebinding.
pub fn host_allowed(host: Option<&str>, allowed: &[String]) -> bool {
    let Some(host) = host else {
        return true;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => {
            return v6.split_once(']').is_some_and(|(ip, port)| {
                ip.parse::<std::net::Ipv6Addr>().is_ok()
                    && (port.is_empty() || port.strip_prefix(':').is_some_and(is_port))
            })
        }
        None => match host.rsplit_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return false,
            None => host,
        },
    };
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit())
}

/// Whether a browser says the request comes from another site: a
/// `Sec-Fetch-Site` other than `same-origin` or `none` (typed by the
/// user), or an `Origin` that is not this Host.
fn cross_site(headers: &HeaderMap, host: Option<&str>) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        if !matches!(site.as_bytes(), b"same-origin" | b"none") {
            return true;
        }
    }
    let Some(origin) = headers.get(ORIGIN) else {
        return false;
    };
    let origin = origin.to_str().unwrap_or("null");
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    !matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h))
}

/// `Content-Type: application/json` (parameters aside): a cross-site form
/// cannot send it, and a cross-site script cannot without a CORS
/// preflight this server never grants.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// Why the endpoint is open to the network, if it is, for the start-up
/// warning: it listens beyond loopback with no password.
pub fn exposure(state: &State, addr: SocketAddr) -> Option<String> {
    if addr.ip().is_loopback() || state.acl.auth_required() {
        return None;
    }
    Some(match state.settings.protected_mode.load(Ordering::Relaxed) {
        true => format!(
            "metrics endpoint on {addr} with no password: /metrics and /healthz answer anyone who can reach it; the status page and POST /json answer loopback clients only until a password is set (--requirepass-file)"
        ),
        false => format!(
            "metrics endpoint on {addr} with protected mode off and no password: anyone who can reach it can read key names on the status page and charge or refund limits with POST /json (set --requirepass-file, or --metrics-addr 127.0.0.1:9898)"
        ),
    })
}

fn respond<B>(
    state: &State,
    history: &super::status::History,
    req: &Request<B>,
) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .expect("static response parts are valid")
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            state
                .metrics
                .as_ref()
                .map(|m| m.render(&state.readings()))
                .unwrap_or_default(),
        ),
        (&Method::GET, "/healthz") => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        (&Method::GET, "/") => reply(
            StatusCode::OK,
            "text/html; charset=utf-8",
            super::status::PAGE.into(),
        ),
        (&Method::GET, "/status.json") => reply(
            StatusCode::OK,
            "application/json",
            super::status::json(state, history),
        ),
        (_, "/" | "/metrics" | "/healthz" | "/json" | "/status.json") => reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n".into(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /, /status.json, /metrics, /healthz or POST /json\n".into(),
        ),
    }
}

/// `POST /json`: the body read (up to [`MAX_JSON_BODY`], within
/// [`BODY_TIMEOUT`]) and decided.
async fn json(
    state: &State,
    rls_headers: bool,
    conn: &Conn,
    user: &UserCell,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    use http_body_util::BodyExt;
    let reply = |status: u16, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("static response parts are valid")
    };
    let read = http_body_util::Limited::new(req.into_body(), MAX_JSON_BODY).collect();
    let body = match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => {
            return reply(
                400,
                format!("{{\"error\":{}}}", serde_json::Value::from(e.to_string())),
            )
        }
        Err(_) => {
            return reply(
                408,
                format!(
                    "{{\"error\":\"the body did not arrive within {} s\"}}",
                    BODY_TIMEOUT.as_secs()
                ),
            )
        }
    };
    let _busy = conn.busy();
    let (status, body) = super::rls::json(state, rls_headers, user, &body);
    super::aof::before_reply(state).await;
    reply(status, body)
}
