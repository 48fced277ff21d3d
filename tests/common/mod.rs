//! Test harness: a Turnstile server started in-process on port 0 with a
//! manual clock, `redis` crate connections (RESP2 and RESP3) and a raw TCP
//! client for checking exact bytes on the wire.
//!
//! Every network wait is bounded by [`IO_TIMEOUT`], so a wedged server fails
//! a test instead of hanging the suite. Time is driven with the
//! [`ManualClock`], never by sleeping.

// Each test binary uses a different part of the harness.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue, RedisError, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use turnstile::state::State;
use turnstile::store::sweeper::sweep_all;
use turnstile::{Config, ManualClock, Nanos, ServerHandle};

/// The manual clock starts here: a round Unix time (2023-11-14T22:13:20Z).
pub const START_SECS: u64 = 1_700_000_000;
pub const START_MS: u64 = START_SECS * 1000;

/// Keys, as `prefix0`, `prefix1`, ..., each in a shard none of the others
/// is in.
pub fn keys_in_distinct_shards(srv: &Server, prefix: &str, n: usize) -> Vec<String> {
    let store = &srv.state().store;
    let mut seen = std::collections::HashSet::new();
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|k| seen.insert(store.shard_of(k.as_bytes())))
        .take(n)
        .collect()
}

/// Upper bound for any single network wait in a test.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A running server and the clock that drives it.
pub struct Server {
    handle: Option<ServerHandle>,
    pub clock: ManualClock,
    pub addr: SocketAddr,
}

impl Server {
    /// A server with `Config::for_tests()` (loopback, port 0).
    pub async fn start() -> Server {
        Self::start_with(|_| {}).await
    }

    /// A server whose config `tweak` may change first.
    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Server {
        Self::start_at(Nanos(START_SECS * Nanos::PER_SEC), tweak).await
    }

    /// A server whose clock starts at `start` (a restart some time later).
    pub async fn start_at(start: Nanos, tweak: impl FnOnce(&mut Config)) -> Server {
        let mut config = Config::for_tests();
        tweak(&mut config);
        let clock = ManualClock::new(start);
        let handle = turnstile::start(&config, Arc::new(clock.clone()))
            .await
            .expect("server starts");
        let addr = handle.addr();
        Server {
            handle: Some(handle),
            clock,
            addr,
        }
    }

    pub fn handle(&self) -> &ServerHandle {
        self.handle.as_ref().expect("server still running")
    }

    pub fn state(&self) -> &Arc<State> {
        self.handle().state()
    }

    pub fn advance_ms(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
    }

    /// Runs the expiry sweeper over every shard now; returns keys removed.
    pub fn sweep(&self) -> usize {
        sweep_all(&self.state().store, &self.clock)
    }

    /// A `redis://` URL for this server; `extra` is the query string
    /// (e.g. `protocol=resp3`), `auth` the `user:pass@` part.
    pub fn url(&self, auth: &str, extra: &str) -> String {
        let mut url = format!("redis://{auth}{}/", self.addr);
        if !extra.is_empty() {
            url.push('?');
            url.push_str(extra);
        }
        url
    }

    /// A RESP2 `redis` crate connection.
    pub async fn client(&self) -> MultiplexedConnection {
        connect_url(&self.url("", "")).await.expect("RESP2 connect")
    }

    /// A RESP3 `redis` crate connection (the crate sends `HELLO 3`).
    pub async fn client3(&self) -> MultiplexedConnection {
        connect_url(&self.url("", "protocol=resp3"))
            .await
            .expect("RESP3 connect")
    }

    pub async fn raw(&self) -> Raw {
        Raw::connect(self.addr).await
    }

    /// Shutdown's outcome, bounded by `limit`.
    pub async fn shutdown_within(
        mut self,
        limit: Duration,
    ) -> Result<(), turnstile::ShutdownError> {
        let handle = self.handle.take().expect("server still running");
        tokio::time::timeout(limit, handle.shutdown())
            .await
            .expect("shutdown finished within its bound")
    }

    /// Graceful shutdown; returns once every connection has drained.
    pub async fn shutdown(mut self) {
        let handle = self.handle.take().expect("server still running");
        tokio::time::timeout(IO_TIMEOUT, handle.shutdown())
            .await
            .expect("shutdown finished in time")
            .expect("final snapshot written");
    }
}

/// A test that fails while a script loops would otherwise never end: the
/// runtime's drop waits for the worker the script runs on. Dropping the
/// server stops every running script first, as shutdown does.
impl Drop for Server {
    fn drop(&mut self) {
        if let Some(h) = &self.handle {
            h.state().scripts.stop_for_shutdown();
        }
    }
}

/// A multiplexed `redis` crate connection with bounded connect and response
/// times.
pub async fn connect_url(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    connect_client(redis::Client::open(url)?).await
}

/// The same for a client built otherwise (TLS certificates, say).
pub async fn connect_client(client: redis::Client) -> redis::RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(IO_TIMEOUT)
        .set_response_timeout(IO_TIMEOUT);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// A command from words.
pub fn cmd(args: &[&str]) -> redis::Cmd {
    let mut c = redis::Cmd::new();
    for a in args {
        c.arg(*a);
    }
    c
}

/// Runs a command and converts its reply; panics on any error.
pub async fn q<T: FromRedisValue>(con: &mut MultiplexedConnection, args: &[&str]) -> T {
    match cmd(args).query_async::<T>(con).await {
        Ok(v) => v,
        Err(e) => panic!("{args:?} failed: {e}"),
    }
}

/// Runs a command that must fail; returns the error line as the server sent
/// it (without the leading `-`).
pub async fn q_err(con: &mut MultiplexedConnection, args: &[&str]) -> String {
    match cmd(args).query_async::<Value>(con).await {
        Ok(v) => panic!("{args:?} should fail, got {v:?}"),
        Err(e) => err_text(&e),
    }
}

/// The error line of a server error: `CODE detail`.
pub fn err_text(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => panic!("not a server error: {e}"),
    }
}

pub async fn assert_pong(con: &mut MultiplexedConnection) {
    let pong: String = q(con, &["PING"]).await;
    assert_eq!(pong, "PONG");
}

/// The integers of an array reply, in order (other elements skipped).
pub fn ints(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items
            .iter()
            .filter_map(|i| match i {
                Value::Int(n) => Some(*n),
                _ => None,
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

/// Text of a bulk, simple or verbatim string reply.
pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).expect("utf-8"),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".into(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// A map reply as (key, value) pairs, from a RESP3 map or a RESP2 flat
/// array of alternating keys and values.
pub fn pairs(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Map(m) => m.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(a) => {
            assert_eq!(a.len() % 2, 0, "odd flat map: {a:?}");
            a.chunks(2).map(|p| (text(&p[0]), p[1].clone())).collect()
        }
        other => panic!("not a map: {other:?}"),
    }
}

pub use turnstile::harness::encode_request as encode;

/// Encodes words as a RESP multibulk.
pub fn encode_words(args: &[&str]) -> Vec<u8> {
    encode(args)
}

/// Length of the first complete RESP2/RESP3 reply in `buf`, or `None` if
/// it has not fully arrived.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    let cr = buf.windows(2).position(|w| w == b"\r\n")?;
    let end = cr + 2;
    let header = std::str::from_utf8(&buf[1..cr]).ok();
    let number = || -> i64 {
        header
            .and_then(|h| h.parse().ok())
            .unwrap_or_else(|| panic!("bad reply header: {:?}", String::from_utf8_lossy(buf)))
    };
    match buf[0] {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(end),
        b'$' | b'=' | b'!' => {
            let n = number();
            if n < 0 {
                return Some(end);
            }
            let total = end + n as usize + 2;
            (buf.len() >= total).then_some(total)
        }
        kind @ (b'*' | b'~' | b'>' | b'%' | b'|') => {
            let n = number();
            if n < 0 {
                return Some(end);
            }
            let items = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut pos = end;
            for _ in 0..items {
                pos += frame_len(&buf[pos..])?;
            }
            if kind == b'|' {
                // An attribute precedes the reply it describes.
                pos += frame_len(&buf[pos..])?;
            }
            Some(pos)
        }
        other => panic!(
            "not a RESP reply (first byte {:?}): {:?}",
            other as char,
            String::from_utf8_lossy(&buf[..buf.len().min(200)])
        ),
    }
}

/// A raw TCP client: send exact bytes, read exact replies.
pub struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
    closed: bool,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        let stream = tokio::time::timeout(IO_TIMEOUT, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        Raw::from_stream(stream)
    }

    /// Wraps a stream connected some other way (from a chosen address).
    pub fn from_stream(stream: TcpStream) -> Raw {
        stream.set_nodelay(true).unwrap();
        Raw {
            stream,
            buf: Vec::new(),
            closed: false,
        }
    }

    /// The address the server sees for this client.
    pub fn local_addr(&self) -> SocketAddr {
        self.stream.local_addr().unwrap()
    }

    /// Writes `bytes`; panics on failure.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.try_send(bytes).await.expect("send");
    }

    /// Writes `bytes`, reporting failure (a server that closes on a
    /// protocol error may reset the connection while we still write).
    pub async fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        tokio::time::timeout(IO_TIMEOUT, self.stream.write_all(bytes))
            .await
            .expect("write in time")
    }

    /// Reads more bytes into the buffer; false once the peer has closed
    /// (EOF or reset).
    async fn fill(&mut self) -> bool {
        if self.closed {
            return false;
        }
        let mut chunk = vec![0u8; 64 * 1024];
        let n = tokio::time::timeout(IO_TIMEOUT, self.stream.read(&mut chunk))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no reply within {IO_TIMEOUT:?}; buffered: {:?}",
                    String::from_utf8_lossy(&self.buf)
                )
            });
        match n {
            Ok(0) => {
                self.closed = true;
                false
            }
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                self.closed = true;
                false
            }
            Err(e) => panic!("read failed: {e}"),
        }
    }

    /// The next complete reply, exactly as sent.
    pub async fn reply(&mut self) -> Vec<u8> {
        loop {
            if !self.buf.is_empty() {
                if let Some(n) = frame_len(&self.buf) {
                    return self.buf.drain(..n).collect();
                }
            }
            if !self.fill().await {
                panic!(
                    "connection closed before a full reply; buffered: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
            }
        }
    }

    /// The next reply as text (lossy), for readable assertions.
    pub async fn reply_text(&mut self) -> String {
        String::from_utf8_lossy(&self.reply().await).into_owned()
    }

    /// Exactly `n` bytes (for long runs of known replies).
    pub async fn read_exact(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            if !self.fill().await {
                panic!("connection closed after {} of {n} bytes", self.buf.len());
            }
        }
        self.buf.drain(..n).collect()
    }

    /// Sends one request (words) and returns its reply as text.
    pub async fn call(&mut self, args: &[&str]) -> String {
        self.send(&encode_words(args)).await;
        self.reply_text().await
    }

    /// Sends raw bytes and returns the next reply as text.
    pub async fn roundtrip(&mut self, bytes: &[u8]) -> String {
        self.send(bytes).await;
        self.reply_text().await
    }

    /// Everything left until the server closes the connection (EOF or
    /// reset); panics if it stays open longer than [`IO_TIMEOUT`].
    pub async fn read_until_closed(&mut self) -> Vec<u8> {
        while self.fill().await {}
        std::mem::take(&mut self.buf)
    }

    /// Asserts the server sends nothing more and closes.
    pub async fn expect_closed(&mut self) {
        let rest = self.read_until_closed().await;
        assert!(
            rest.is_empty(),
            "expected close, got {:?}",
            String::from_utf8_lossy(&rest)
        );
    }

    /// Reads until close within `limit`; `None` if still open then.
    pub async fn closed_within(&mut self, limit: Duration) -> Option<Vec<u8>> {
        tokio::time::timeout(limit, async { while self.fill().await {} })
            .await
            .ok()
            .map(|_| std::mem::take(&mut self.buf))
    }
}

/// A number `INFO section` reports as `field:`.
pub async fn info_u64(c: &mut MultiplexedConnection, section: &str, field: &str) -> u64 {
    let info: String = q(c, &["INFO", section]).await;
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
        .trim()
        .parse()
        .unwrap()
}

/// Polls `cond` (without advancing the manual clock) until it holds, for
/// server-side bookkeeping that finishes just after a socket closes.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + IO_TIMEOUT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One HTTP/1.1 request with an empty body on a fresh connection (closed
/// after): the status, the head (lowercased) and the body.
pub async fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text[9..12].parse().unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (status, head.to_ascii_lowercase(), body.to_string())
}

/// A non-loopback address of this machine: the source address the kernel
/// would pick for an outside destination (a UDP connect sends nothing).
pub fn outside_address() -> Option<std::net::IpAddr> {
    ["192.0.2.1:9", "10.255.255.255:9", "8.8.8.8:53"]
        .iter()
        .find_map(|dest| {
            let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
            s.connect(dest).ok()?;
            let ip = s.local_addr().ok()?.ip();
            (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
        })
}
