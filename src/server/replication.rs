//! Replication's sockets: a primary feeding each replica that sent `PSYNC`
//! ([`feed`]), a replica's link to its primary ([`follow`]), and the
//! once-a-second chores of both ([`cron`]). What they decide and apply is
//! `replication/`'s; the stream's bytes are `store/effects.rs`'s.

use bytes::{Buf, BytesMut};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use crate::clients::ClientInfo;
use crate::cmd::exec::session::ReplicaHello;
use crate::protocol::{Decoder, Limits};
use crate::replication::{self, Attached, Link, Resync, Role};
use crate::state::State;
use crate::store::effects;

/// Bytes of stream a feeder copies out of the backlog per write.
const CHUNK: usize = 256 * 1024;
/// A feeder that sent less than this yields to the worker's other tasks
/// (the clients whose writes make the stream) before the next read, so
/// under load the stream leaves in fewer, larger writes. Measured against
/// sending each trickle at once (`benches/replication.py`, two replicas):
/// the primary's CPU per decision 1.38 against 1.65 us; a one-millisecond
/// sleep instead of the yield saved as much but doubled the lag.
const BATCH: usize = 16 * 1024;
/// How long a replica waits for its primary to accept, and between tries.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
enum LinkError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the backlog no longer holds this replica's next byte")]
    Gone,
    #[error("the primary answered {0:?}")]
    Refused(String),
    #[error("{0}")]
    Apply(#[from] replication::ApplyError),
    #[error("no data from the primary for {0:?}")]
    Timeout(Duration),
    #[error("the role changed")]
    Superseded,
    #[error("{0}")]
    Overrun(#[from] replication::Overrun),
}

impl From<effects::Gone> for LinkError {
    fn from(_: effects::Gone) -> Self {
        LinkError::Gone
    }
}

/// Serves a replica that sent `PSYNC replid offset` on this connection,
/// until it goes, the server stops, this server's history changes under
/// it (a full copy taken from its own primary), or it overruns its limits
/// (`client-output-buffer-limit replica`, `repl-timeout`: [`watch`]).
pub async fn feed<S: AsyncRead + AsyncWrite + AsRawFd + Unpin>(
    socket: S,
    state: &State,
    info: &Arc<ClientInfo>,
    hello: Option<ReplicaHello>,
    (replid, offset): (String, i64),
    mut shutdown: watch::Receiver<bool>,
) {
    let repl = &state.replication;
    let backlog = usize::try_from(state.settings.get(&state.settings.repl_backlog_size))
        .unwrap_or(usize::MAX);
    let epoch = repl.feeds_epoch();
    let resync = repl.resync(&state.store, &replid, offset, backlog);
    // A full resync reads a copy, shared with the replicas that attach
    // with this one; the first starts its maker.
    let copy = match &resync {
        Resync::Full { replid, offset } => {
            let (reader, new) =
                repl.full_copy(&state.store, epoch, (replid.clone(), *offset), info.id);
            if new {
                let (copy, store, clock) = (
                    reader.copy().clone(),
                    state.store.clone(),
                    state.clock.clone(),
                );
                tokio::task::spawn_blocking(move || copy.make(&store, &*clock));
            }
            Some(reader)
        }
        Resync::Partial { .. } => None,
    };
    let hello = hello.unwrap_or_default();
    let attached = Arc::new(Attached::new(
        info.id,
        hello.ip.unwrap_or_else(|| info.addr.ip().to_string()),
        hello.port,
        copy.is_none(),
        state.clock.now().as_millis(),
    ));
    let start = match (&resync, &copy) {
        (Resync::Partial { from, .. }, _) => *from,
        (_, Some(reader)) => reader.copy().offset + 1,
        (Resync::Full { offset, .. }, None) => offset + 1,
    };
    attached.pos.store(start, Ordering::Relaxed);
    tracing::info!(
        replica = %format!("{}:{}", attached.ip.lock(), hello.port),
        ?resync,
        shared_copy = ?copy.as_ref().map(|r| r.copy().offset),
        "replica attached"
    );
    info.replica.store(true, Ordering::Relaxed);
    repl.attach(attached.clone());
    let fd = socket.as_raw_fd();
    let shared = copy.as_ref().map(|r| r.copy().clone());
    let (rd, mut wr) = tokio::io::split(socket);
    let start = match (resync, copy) {
        (_, Some(reader)) => Start::Copy(reader),
        (Resync::Partial { replid, .. }, None) | (Resync::Full { replid, .. }, None) => {
            Start::Continue(replid)
        }
    };
    let why = tokio::select! {
        r = send(&mut wr, state, &attached, start, epoch) => r,
        r = read_acks(rd, state, &attached) => r,
        r = watch(state, &attached, shared.as_deref(), fd) => r,
        _ = shutdown.changed() => Ok(()),
        _ = info.killed() => Ok(()),
    };
    repl.detach(info.id);
    match why {
        Ok(()) => tracing::info!(client = info.id, "replica detached"),
        Err(e @ LinkError::Overrun(_)) => {
            tracing::warn!(client = info.id, error = %e, "disconnecting replica")
        }
        Err(e) => tracing::info!(client = info.id, error = %e, "replica link closed"),
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), wr.shutdown()).await;
}

/// How often a replica's limits are checked.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Drops the replica once it overruns `client-output-buffer-limit
/// replica` or `repl-timeout`, on the server's clock. Its unread bytes:
/// the copy it alone holds in memory (see
/// [`FullCopy::pinned`](replication::copy::FullCopy::pinned)), the stream
/// it has not taken, and what the kernel still queues for it.
async fn watch(
    state: &State,
    attached: &Attached,
    copy: Option<&replication::copy::FullCopy>,
    fd: RawFd,
) -> Result<(), LinkError> {
    let mut tick = tokio::time::interval(WATCH_EVERY);
    let mut soft_since = None;
    let settings = &state.settings;
    loop {
        tick.tick().await;
        let behind =
            (state.store.effects.offset() + 1).saturating_sub(attached.pos.load(Ordering::Relaxed));
        let unread = copy.map_or(0, |c| c.pinned(attached.id)) + behind + unsent(fd);
        if let Some(o) = replication::overrun(
            settings.output_limits().replica,
            settings.get(&settings.repl_timeout_secs),
            state.clock.now().as_millis(),
            unread,
            attached.alive_ms.load(Ordering::Relaxed),
            &mut soft_since,
        ) {
            return Err(o.into());
        }
    }
}

/// How a feeder starts: `+CONTINUE <replid>`, or a full copy.
enum Start {
    Continue(String),
    Copy(replication::copy::Reader),
}

/// The copy (if a full resync), then the stream, as it grows.
async fn send<W: AsyncWrite + Unpin>(
    wr: &mut W,
    state: &State,
    attached: &Attached,
    start: Start,
    epoch: u64,
) -> Result<(), LinkError> {
    let fx = &state.store.effects;
    let repl = &state.replication;
    let mut buf = Vec::with_capacity(CHUNK);
    let pos = &attached.pos;
    match start {
        Start::Continue(replid) => {
            wr.write_all(format!("+CONTINUE {replid}\r\n").as_bytes())
                .await?;
        }
        Start::Copy(reader) => {
            let (replid, offset) = (&reader.copy().replid, reader.copy().offset);
            wr.write_all(format!("+FULLRESYNC {replid} {offset}\r\n").as_bytes())
                .await?;
            // Shard by shard: the stream up to the moment of each shard's
            // copy, then the copy, so no shard's copy is ever older than
            // effects already sent for its keys. The copies are made on a
            // blocking thread, a few ahead of the fastest replica at most,
            // so no worker stops serving clients to encode.
            while let Some((at, chunk)) = alive_while(state, attached, reader.next()).await {
                send_until(wr, state, attached, at, &mut buf).await?;
                write_out(wr, &chunk, state, attached, |n| reader.wrote(n)).await?;
                reader.advance();
            }
            // Every chunk written: it holds none of them any more.
            drop(reader);
            let mut end = Vec::new();
            effects::frame(&mut end, replication::SYNCED, |_| {});
            wr.write_all(&end).await?;
            // As Redis: acknowledgements are due from now, not from the
            // attach (a long copy is no silence).
            let now = state.clock.now().as_millis();
            attached.acked_at_ms.store(now, Ordering::Relaxed);
            attached.alive_ms.store(now, Ordering::Relaxed);
            attached.online.store(true, Ordering::Relaxed);
            tracing::info!(
                client = attached.id,
                "replica synchronised (full copy sent)"
            );
        }
    }
    loop {
        if repl.feeds_epoch() != epoch {
            return Err(LinkError::Superseded);
        }
        let woken = repl.appended.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        fx.want_wake();
        buf.clear();
        let n = fx.read(pos.load(Ordering::Relaxed), CHUNK, &mut buf)?;
        if n > 0 {
            write_out(wr, &buf, state, attached, |n| {
                pos.fetch_add(n as u64, Ordering::Relaxed);
            })
            .await?;
            // A trickle under load: let the clients on this worker add to
            // it first, so the stream goes out in few large writes rather
            // than one small write (and one wake-up) per effect.
            if n < BATCH {
                tokio::task::yield_now().await;
            }
            continue;
        }
        // The wake-up is asked for before the read: an append after it
        // wakes us. The timer only bounds how long a role change waits.
        let _ = tokio::time::timeout(Duration::from_secs(1), woken).await;
    }
}

/// Awaits `f` (the next chunk of a copy, made by another thread) with the
/// replica counted alive meanwhile: it is not what is waited for.
async fn alive_while<T>(
    state: &State,
    attached: &Attached,
    f: impl std::future::Future<Output = T>,
) -> T {
    let alive = || {
        attached
            .alive_ms
            .store(state.clock.now().as_millis(), Ordering::Relaxed)
    };
    alive();
    let mut tick = tokio::time::interval(WATCH_EVERY);
    tokio::pin!(f);
    loop {
        tokio::select! {
            r = &mut f => {
                alive();
                return r;
            }
            _ = tick.tick() => alive(),
        }
    }
}

/// Writes `bytes`, telling `took` what each write took; while the replica
/// takes its copy, a write that progresses is a sign of life.
async fn write_out<W: AsyncWrite + Unpin>(
    wr: &mut W,
    bytes: &[u8],
    state: &State,
    attached: &Attached,
    mut took: impl FnMut(usize),
) -> Result<(), LinkError> {
    let mut done = 0;
    while done < bytes.len() {
        let n = wr.write(&bytes[done..]).await?;
        if n == 0 {
            return Err(LinkError::Io(std::io::ErrorKind::WriteZero.into()));
        }
        done += n;
        took(n);
        if !attached.online.load(Ordering::Relaxed) {
            attached
                .alive_ms
                .store(state.clock.now().as_millis(), Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Writes the stream from the replica's next byte through byte `upto`.
async fn send_until<W: AsyncWrite + Unpin>(
    wr: &mut W,
    state: &State,
    attached: &Attached,
    upto: u64,
    buf: &mut Vec<u8>,
) -> Result<(), LinkError> {
    let pos = &attached.pos;
    loop {
        let from = pos.load(Ordering::Relaxed);
        if from > upto {
            return Ok(());
        }
        buf.clear();
        let want = usize::try_from(upto + 1 - from)
            .unwrap_or(usize::MAX)
            .min(CHUNK);
        if state.store.effects.read(from, want, buf)? == 0 {
            return Ok(());
        }
        write_out(wr, buf, state, attached, |n| {
            pos.fetch_add(n as u64, Ordering::Relaxed);
        })
        .await?;
    }
}

/// Reads `REPLCONF ACK <offset>` from the replica.
async fn read_acks<R: AsyncRead + Unpin>(
    mut rd: R,
    state: &State,
    attached: &Attached,
) -> Result<(), LinkError> {
    let mut buf = BytesMut::with_capacity(4096);
    let mut decoder = Decoder::new();
    let limits = Limits {
        max_bulk_len: 1 << 20,
        unauthenticated: false,
    };
    loop {
        if rd.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
        while let Some(req) = decoder
            .decode(&mut buf, limits)
            .map_err(|e| LinkError::Refused(e.to_string()))?
        {
            let ack = req.len() >= 3
                && req.arg(0).eq_ignore_ascii_case(b"replconf")
                && req.arg(1).eq_ignore_ascii_case(b"ack");
            if let Some(n) = ack
                .then(|| std::str::from_utf8(req.arg(2)).ok()?.parse::<u64>().ok())
                .flatten()
            {
                attached.acked.fetch_max(n, Ordering::AcqRel);
                let now = state.clock.now().as_millis();
                attached.acked_at_ms.store(now, Ordering::Relaxed);
                attached.alive_ms.store(now, Ordering::Relaxed);
                state.replication.acked.notify_waiters();
            }
        }
        if buf.len() > 1 << 20 {
            return Err(LinkError::Refused("oversized input".into()));
        }
    }
}

/// The replica side: while this server is a replica, keeps a link to its
/// primary, reconnecting (with a partial resync where the primary's
/// backlog allows) after every failure. Runs for the server's life.
pub async fn follow(
    state: Arc<State>,
    tls: Option<TlsConnector>,
    mut shutdown: watch::Receiver<bool>,
) {
    let repl = &state.replication;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let changed = repl.role_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let generation = repl.generation();
        let Role::Replica { host, port } = repl.role() else {
            tokio::select! {
                _ = changed => {}
                _ = shutdown.changed() => {}
            }
            continue;
        };
        let why = tokio::select! {
            r = link(&state, tls.as_ref(), &host, port, generation) => r,
            _ = shutdown.changed() => return,
        };
        let now = state.clock.now().as_millis();
        if repl.generation() == generation {
            repl.set_link(Link::Down, now);
        }
        match why {
            Err(LinkError::Superseded) => continue,
            Err(e) => {
                tracing::warn!(primary = %format!("{host}:{port}"), error = %e, "replication link down")
            }
            Ok(()) => {
                tracing::warn!(primary = %format!("{host}:{port}"), "primary closed the replication link")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY) => {}
            _ = changed => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// One link: connect, handshake, resync, follow the stream.
async fn link(
    state: &State,
    tls: Option<&TlsConnector>,
    host: &str,
    port: u16,
    generation: u64,
) -> Result<(), LinkError> {
    let repl = &state.replication;
    if repl.generation() != generation {
        return Err(LinkError::Superseded);
    }
    repl.set_link(Link::Connecting, state.clock.now().as_millis());
    let timed_out = || std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out");
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port)))
        .await
        .map_err(|_| timed_out())??;
    let _ = stream.set_nodelay(true);
    match tls {
        None => stream_from(state, stream, host, port, generation).await,
        Some(connector) => {
            let name = ServerName::try_from(host.to_string()).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
            })?;
            let stream = tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, stream))
                .await
                .map_err(|_| timed_out())??;
            stream_from(state, stream, host, port, generation).await
        }
    }
}

/// The link over a connected stream (TCP or TLS): handshake, resync,
/// follow.
async fn stream_from<S: AsyncRead + AsyncWrite + Unpin>(
    state: &State,
    stream: S,
    host: &str,
    port: u16,
    generation: u64,
) -> Result<(), LinkError> {
    let repl = &state.replication;
    let changed = repl.role_changed.notified();
    tokio::pin!(changed);
    changed.as_mut().enable();
    if repl.generation() != generation {
        return Err(LinkError::Superseded);
    }
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut buf = BytesMut::with_capacity(64 * 1024);

    let settings = &state.settings;
    let auth = settings.masterauth.read().clone();
    if let Some(pass) = auth {
        let user = settings.masteruser.read().clone();
        let mut args: Vec<&[u8]> = vec![b"AUTH"];
        if let Some(u) = &user {
            args.push(u.as_bytes());
        }
        args.push(pass.as_bytes());
        expect_ok(&mut rd, &mut wr, &mut buf, &args).await?;
    }
    let announce_port = match settings.get(&settings.replica_announce_port) {
        0 => state.addr.port().to_string(),
        p => p.to_string(),
    };
    expect_ok(
        &mut rd,
        &mut wr,
        &mut buf,
        &[b"REPLCONF", b"listening-port", announce_port.as_bytes()],
    )
    .await?;
    let announce_ip = settings.replica_announce_ip.read().clone();
    if let Some(ip) = announce_ip {
        expect_ok(
            &mut rd,
            &mut wr,
            &mut buf,
            &[b"REPLCONF", b"ip-address", ip.as_bytes()],
        )
        .await?;
    }
    expect_ok(
        &mut rd,
        &mut wr,
        &mut buf,
        &[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"],
    )
    .await?;
    let store = &state.store;
    // With a history (a stream followed, or served as a primary), ask to
    // resume it; a fresh server asks for a copy, as Redis's does.
    let ids = repl.ids();
    let (id, next) = match store.effects.offset() {
        0 => ("?".to_string(), "-1".to_string()),
        n => (ids.replid, (n + 1).to_string()),
    };
    write_command(&mut wr, &[b"PSYNC", id.as_bytes(), next.as_bytes()]).await?;
    let line = read_line(&mut rd, &mut buf).await?;
    let backlog = usize::try_from(settings.get(&settings.repl_backlog_size)).unwrap_or(usize::MAX);
    let mut words = line.split(' ');
    match words.next() {
        Some("+FULLRESYNC") => {
            let id = words.next().unwrap_or_default().to_string();
            let offset: u64 = words
                .next()
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| LinkError::Refused(line.clone()))?;
            tracing::info!(primary = %format!("{host}:{port}"), replid = %id, offset, "full resync: taking a copy");
            // Our own replicas followed the history we drop.
            repl.new_feeds_epoch();
            store.clear();
            repl.adopt(store, id, offset, backlog);
            repl.set_link(Link::Sync, state.clock.now().as_millis());
        }
        Some("+CONTINUE") => {
            if let Some(id) = words.next().filter(|w| !w.is_empty()) {
                repl.switch_id(store, id.to_string());
            }
            tracing::info!(primary = %format!("{host}:{port}"), "partial resync: resuming the stream");
            repl.set_link(Link::Up, state.clock.now().as_millis());
        }
        _ => return Err(LinkError::Refused(line)),
    }
    repl.last_io_ms
        .store(state.clock.now().as_millis(), Ordering::Relaxed);

    let mut ack = tokio::time::interval(Duration::from_secs(1));
    ack.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_io = tokio::time::Instant::now();
    let peer = format!("{host}:{port}");
    // Bytes that came with the handshake's last line are frames already.
    if apply_frames(state, &mut buf, &peer)? {
        send_ack(&mut wr, store.effects.offset()).await?;
    }
    loop {
        tokio::select! {
            r = rd.read_buf(&mut buf) => {
                if r? == 0 {
                    return Ok(());
                }
                last_io = tokio::time::Instant::now();
                if apply_frames(state, &mut buf, &peer)? {
                    send_ack(&mut wr, store.effects.offset()).await?;
                }
                if buf.capacity() - buf.len() < 16 * 1024 {
                    buf.reserve(64 * 1024);
                }
                // One read (at most the buffer's room, some 64 KiB) a
                // turn: while reads are ready, tokio's budget stops this
                // loop only after 128 of them (megabytes), and a full
                // copy was loaded in one poll with the worker's clients
                // waiting (11.7 ms for 1.9 MB at a reshard's end).
                tokio::task::yield_now().await;
            }
            _ = ack.tick() => {
                let timeout = Duration::from_secs(settings.get(&settings.repl_timeout_secs));
                if last_io.elapsed() > timeout {
                    return Err(LinkError::Timeout(timeout));
                }
                if repl.link() == Link::Up {
                    send_ack(&mut wr, store.effects.offset()).await?;
                }
            }
            _ = &mut changed => return Err(LinkError::Superseded),
        }
    }
}

/// Applies every whole frame in `buf` (the rest waits for more bytes);
/// true if the primary asked for an acknowledgement.
fn apply_frames(state: &State, buf: &mut BytesMut, primary: &str) -> Result<bool, LinkError> {
    let repl = &state.replication;
    let now = state.clock.now();
    repl.last_io_ms.store(now.as_millis(), Ordering::Relaxed);
    let applied = replication::apply_frames(&state.store, buf, now)?;
    if applied.synced {
        tracing::info!(%primary, "replica synchronised (full copy loaded)");
        // The copy's records are not in the stream: the append-only file
        // takes them in a fresh base.
        if state.aof.is_on() {
            state.aof.request_rewrite();
        }
        repl.set_link(Link::Up, now.as_millis());
    }
    Ok(applied.getack)
}

async fn send_ack<W: AsyncWrite + Unpin>(wr: &mut W, offset: u64) -> Result<(), LinkError> {
    let n = offset.to_string();
    write_command(wr, &[b"REPLCONF", b"ACK", n.as_bytes()]).await
}

async fn write_command<W: AsyncWrite + Unpin>(wr: &mut W, args: &[&[u8]]) -> Result<(), LinkError> {
    wr.write_all(&crate::protocol::request::encode(args))
        .await?;
    Ok(())
}

/// Sends a command and requires `+OK`.
async fn expect_ok<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    args: &[&[u8]],
) -> Result<(), LinkError> {
    write_command(wr, args).await?;
    let line = read_line(rd, buf).await?;
    if line.starts_with("+OK") {
        Ok(())
    } else {
        Err(LinkError::Refused(line))
    }
}

/// One reply line (without CRLF), within the connect timeout.
async fn read_line<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
) -> Result<String, LinkError> {
    let read = async {
        loop {
            if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&buf[..i]).into_owned();
                buf.advance(i + 2);
                return Ok(line);
            }
            if buf.len() > 64 * 1024 {
                return Err(LinkError::Refused("an overlong reply line".into()));
            }
            if rd.read_buf(buf).await? == 0 {
                return Err(LinkError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, read)
        .await
        .map_err(|_| LinkError::Timeout(CONNECT_TIMEOUT))?
}

/// Once a second: a primary with replicas writes a PING into the stream
/// every `repl-ping-replica-period` seconds (as set now), and the backlog
/// follows `CONFIG SET repl-backlog-size`.
pub async fn cron(state: Arc<State>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut last_ping = tokio::time::Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let fx = &state.store.effects;
        let size = usize::try_from(state.settings.get(&state.settings.repl_backlog_size))
            .unwrap_or(usize::MAX);
        if fx.active() {
            fx.resize(size);
        }
        let repl = &state.replication;
        if !repl.is_replica()
            && fx.emitting()
            && repl.connected() > 0
            && last_ping.elapsed()
                >= Duration::from_secs(state.settings.get(&state.settings.repl_ping_replica_period))
        {
            fx.put_bare(effects::PING);
            last_ping = tokio::time::Instant::now();
        }
    }
}
/// Bytes the kernel still holds for the client (sent but not acknowledged,
/// or not sent yet): `SIOCOUTQ`. Read only when an output limit is set
/// (a client's, or a replica's: `server/replication.rs`).
#[cfg(target_os = "linux")]
pub(super) fn unsent(fd: RawFd) -> u64 {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ on a socket) writes one c_int through the
    // pointer, which points at a local that outlives the call; `fd` is the
    // open socket the caller borrows.
    let ok = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) } == 0;
    if ok {
        n.max(0) as u64
    } else {
        0
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn unsent(_fd: RawFd) -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Nanos;
    use crate::store::{Entry, SmallBytes, Store, Value};
    use std::pin::Pin;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    /// A primary whose every byte is already there: `chunk` bytes a read,
    /// never pending, as a socket whose buffer holds the whole copy (a
    /// primary on the same host, a large receive buffer). What the
    /// replica writes is taken and dropped.
    struct Ready {
        data: Vec<u8>,
        at: usize,
        chunk: usize,
        reads: Arc<AtomicUsize>,
    }

    impl AsyncRead for Ready {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = self
                .chunk
                .min(self.data.len() - self.at)
                .min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.data[at..at + n]);
            self.at += n;
            self.reads.fetch_add(1, Ordering::Relaxed);
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Ready {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A full copy is loaded a read at a time between the worker's other
    /// tasks: the link's task used to apply every read the socket had
    /// ready in one poll (tokio's budget stops a socket's loop only after
    /// 128 reads; this stream's reads use none), so a replica taking a
    /// copy served none of its clients meanwhile (a 1.9 MB copy held a node's worker for one
    /// 11.7 ms poll at a reshard's end; a larger copy, for longer).
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_copy_is_loaded_a_read_at_a_time_between_other_tasks() {
        let primary = Store::default();
        for i in 0..20_000 {
            primary.update(format!("k{i}").as_bytes(), Nanos(0), |e| {
                *e = Some(Entry::with_expiry_ms(
                    Value::Str(SmallBytes::from(&b"v"[..])),
                    None,
                ))
            });
        }
        // The handshake's replies (REPLCONF listening-port, REPLCONF capa),
        // the copy shard by shard, its end.
        let mut data = format!("+OK\r\n+OK\r\n+FULLRESYNC {} 0\r\n", "a".repeat(40)).into_bytes();
        for shard in 0..primary.shard_count() {
            replication::copy::copy_shard(&primary, shard, Nanos(0), &mut data);
        }
        effects::frame(&mut data, effects::SYNCED, |_| {});
        let chunk = 16 * 1024;
        let reads_needed = data.len() / chunk;
        assert!(reads_needed > 20, "a copy of many reads");

        let state = crate::harness::Harness::new(Nanos(0)).state;
        let reads = Arc::new(AtomicUsize::new(0));
        let stream = Ready {
            data,
            at: 0,
            chunk,
            reads: reads.clone(),
        };
        // Another task on the same worker (a client's connection): how many
        // turns it gets while the copy is being loaded.
        let turns = Arc::new(AtomicUsize::new(0));
        let other = {
            let (state, turns) = (state.clone(), turns.clone());
            tokio::spawn(async move {
                loop {
                    if state.replication.link() == Link::Sync {
                        turns.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::task::yield_now().await;
                }
            })
        };
        let generation = state.replication.generation();
        let end = stream_from(&state, stream, "127.0.0.1", 1, generation).await;
        other.abort();
        assert!(end.is_ok(), "the primary's stream ended: {:?}", end.err());
        assert_eq!(state.replication.link(), Link::Up, "the copy was loaded");
        assert_eq!(state.store.len(), 20_000);
        let turns = turns.load(Ordering::Relaxed);
        assert!(
            turns * 2 >= reads_needed,
            "the other task ran {turns} times during a copy of {reads_needed} reads"
        );
    }
}
