//! The HTTP endpoint on `--metrics-addr`: `/metrics` (Prometheus text),
//! `/healthz`, the status page (`/` and `/status.json`, `status.rs`), and
//! envoyproxy/ratelimit's `POST /json` (the rate limit service's decision
//! in JSON). Bounded like the Redis port: at most
//! [`MAX_CONNECTIONS`] at once (more are closed on accept), request
//! headers within [`HEADER_TIMEOUT`], and any connection closed after
//! [`CONNECTION_LIMIT`], so idle or trickling clients cannot hold
//! descriptors the Redis port needs.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::state::State;

/// Scrapers and health checks need a handful; a cap keeps a flood of them
/// from taking the descriptors Redis clients need.
pub const MAX_CONNECTIONS: usize = 64;
/// A request's headers must arrive within this (a slow-headers client is
/// closed, as is one idle between requests).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// No connection lasts longer than this; a keep-alive scraper reconnects.
pub const CONNECTION_LIMIT: Duration = Duration::from_secs(60);
/// The largest `POST /json` body read (a request of the most descriptors
/// with long values fits many times over).
pub const MAX_JSON_BODY: usize = 1 << 20;

/// Serves `/metrics`, `/healthz`, the status page and `/json` until
/// `shutdown` fires; also samples the decision totals every second (the
/// status page's chart) and folds histogram samples every five. `rls_headers` is
/// `--rls-headers`, for `/json`'s answers.
pub async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    rls_headers: bool,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut upkeep = tokio::time::interval(Duration::from_secs(1));
    let mut ticks = 0u64;
    let history = Arc::new(super::status::History::default());
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        // Over the cap: closed at once (dropping the stream).
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            state.stats.rejected_metrics.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let state = state.clone();
        let history = history.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let state = state.clone();
                let history = history.clone();
                async move {
                    if req.uri().path() == "/json" && req.method() == Method::POST {
                        return Ok::<_, Infallible>(json(&state, rls_headers, req).await);
                    }
                    Ok(respond(&state, &history, &req))
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(io, service);
            let _ = tokio::time::timeout(CONNECTION_LIMIT, conn).await;
            drop(permit);
        });
    }
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
                .map(|m| m.render(&readings(state)))
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

/// `POST /json`: the body read (up to [`MAX_JSON_BODY`]) and decided.
async fn json(
    state: &State,
    rls_headers: bool,
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
    let body = match http_body_util::Limited::new(req.into_body(), MAX_JSON_BODY)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return reply(
                400,
                format!("{{\"error\":{}}}", serde_json::Value::from(e.to_string())),
            )
        }
    };
    let (status, body) = super::rls::json(state, rls_headers, &body);
    super::aof::before_reply(state).await;
    reply(status, body)
}

/// What a scrape reads from the server's state.
pub fn readings(state: &State) -> crate::metrics::Readings<'_> {
    crate::metrics::Readings {
        stats: &state.stats,
        backward_steps: state.clock.backward_steps(),
        forward_steps: state.clock.forward_steps(),
        expired: state.store.expired_count(),
        evicted: state.store.evicted_count(),
        keys: state.store.counts(),
        // As Redis counts them: replicas are not clients here.
        clients: state
            .clients
            .len()
            .saturating_sub(state.replication.connected()),
        maxclients: state.settings.get(&state.settings.maxclients),
        maxmemory: state.settings.get(&state.settings.maxmemory),
        uptime: state.started.elapsed(),
        persist: state.persist.as_deref(),
        aof: &state.aof,
        scripts_cached: state.scripts.len(),
        lua_memory: state.scripts.used_memory(),
        policies: &state.policies,
        lapsed_leases: state.store.lapsed_leases(),
        replication: &state.replication,
        repl_offset: state.store.effects.offset(),
        now_ms: state.clock.now().as_millis(),
    }
}
