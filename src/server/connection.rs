//! One client: read, decode every complete request in the buffer, run each,
//! collect every reply in one write buffer, write once per batch. A turn
//! is one read and at most [`batch::TURN_BYTES`] of requests; a client
//! whose input is waiting when it is asked for yields to the others and to
//! the sockets' poll between turns, so one pipelining flood cannot hold
//! the worker.

use super::replication::unsent;
use bytes::BytesMut;
use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::futures::Notified;
use tokio::sync::watch;

use crate::clients::ClientInfo;
use crate::cmd::admin::pubsub;
use crate::cmd::exec::batch::{self, End, Step};
use crate::cmd::exec::session::{Deferred, Park, Session};
use crate::cmd::registry::table::REGISTRY;
use crate::protocol::{Decoder, ReplyBuf};
use crate::state::State;

/// Read buffer size to keep free before each read.
const READ_CHUNK: usize = 16 * 1024;
/// A TLS close_notify waits on the client; one that does not read must not
/// hold its task (and a graceful shutdown) for ever.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a connection ended, for the debug log.
#[derive(Debug)]
enum Close {
    Eof,
    Quit,
    Killed,
    Shutdown,
    Idle,
    Protocol,
    QueryBufferLimit,
    /// `--client-output-buffer-limit`: the client does not read its replies.
    OutputLimit,
    /// `PSYNC`: the connection is a replica's link now.
    Psync(String, i64),
    /// Not a close: the clients' cron asked an idle connection for its
    /// query buffer (see [`release_idle_buffers`]).
    Release,
    // Read through `Debug`, in the log line.
    #[allow(dead_code)]
    Io(std::io::Error),
}

/// Serves one client over plain TCP or TLS: generic, so each stream type
/// gets its own monomorphised loop.
pub async fn run<S: AsyncRead + AsyncWrite + AsRawFd + Unpin>(
    mut socket: S,
    state: &State,
    info: Arc<ClientInfo>,
    shutdown: watch::Receiver<bool>,
) {
    let mut session = Session::new(
        info.clone(),
        state.acl.auth_required(),
        REGISTRY.commands().len(),
    );
    // Dropped before `socket` (locals go before parameters), panic or not.
    let attached = Attached(&info);
    info.attach_socket(socket.as_raw_fd());
    let mut why = serve(&mut socket, state, &mut session, &shutdown).await;
    if let Close::Psync(replid, offset) = std::mem::replace(&mut why, Close::Eof) {
        drop(attached);
        session.tx.clear(&state.store);
        pubsub::forget(state, &mut session);
        let hello = session.replica_hello.take();
        super::replication::feed(socket, state, &info, hello, (replid, offset), shutdown).await;
        return;
    }
    // A queue dies with its connection; its watches go back to the store,
    // its subscriptions to the channels.
    session.tx.clear(&state.store);
    pubsub::forget(state, &mut session);
    match &why {
        Close::OutputLimit => tracing::warn!(
            client = info.id,
            addr = %info.addr,
            "closing client that does not read its replies (client-output-buffer-limit)"
        ),
        _ => {
            tracing::debug!(client = info.id, addr = %info.addr, reason = ?why, "connection closed")
        }
    }
    // Immediate on TCP; on TLS it sends close_notify, which may block.
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, socket.shutdown()).await;
}

/// Detaches a connection's socket from its client's entry when dropped
/// (see [`ClientInfo::close`]).
struct Attached<'a>(&'a ClientInfo);

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.0.detach_socket();
    }
}

async fn serve<S: AsyncRead + AsyncWrite + AsRawFd + Unpin>(
    socket: &mut S,
    state: &State,
    session: &mut Session,
    shutdown: &watch::Receiver<bool>,
) -> Close {
    let info = session.info.clone();
    // Declared before the buffers, so dropped after them: the gauge comes
    // down once their memory is given back, never before.
    let mut held = BufferGauge {
        gauge: state
            .stats
            .counters
            .cell(crate::metrics::table::CLIENT_BUFFERS),
        bytes: 0,
    };
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    // Bytes read since the buffer was last empty: a buffer a large request
    // grew shrinks after a round of small ones.
    let mut since_empty = 0usize;
    let mut out = ReplyBuf::with_capacity(READ_CHUNK);
    let mut decoder = Decoder::new();
    let mut stops = Stops {
        shutdown,
        woken: Box::pin(info.woken()),
        info: &info,
        state,
        heard: tokio::time::Instant::now(),
        stopping: None,
        over_soft: None,
        subscribed: false,
    };
    // The last turn stopped on its budget with requests left in `buf`:
    // the next runs them before reading more.
    let mut unrun = false;
    loop {
        // Whether this turn's input was waiting before it was asked for:
        // the client sends faster than it is served.
        let mut streaming = unrun;
        if !unrun {
            // A buffer given back while idle is made again by the next read
            // (at first small: `read_buf` asks for room as it needs it).
            if buf.capacity() > 0 && buf.capacity() - buf.len() < READ_CHUNK / 4 {
                buf.reserve(READ_CHUNK);
            }
            // A subscriber also wakes for messages published to it.
            let mailbox = session.subs.as_ref().map(|s| s.mailbox.clone());
            stops.subscribed = session.subscriptions() > 0;
            let mut waited = false;
            let read = match &mailbox {
                None => {
                    let read = noting_wait(socket.read_buf(&mut buf), &mut waited);
                    stops.around(Wait::Request, read).await
                }
                Some(mailbox) => {
                    let either = async {
                        tokio::select! {
                            r = socket.read_buf(&mut buf) => Some(r),
                            _ = mailbox.ready() => None,
                        }
                    };
                    match stops
                        .around(Wait::Request, noting_wait(either, &mut waited))
                        .await
                    {
                        Ok(Some(r)) => Ok(r),
                        Ok(None) => {
                            mailbox.drain_into(&mut out);
                            if let Err(why) = flush(socket, &mut out, &mut stops).await {
                                return why;
                            }
                            continue;
                        }
                        Err(why) => Err(why),
                    }
                }
            };
            streaming = !waited;
            let read = match read {
                Ok(r) => r,
                Err(Close::Release) => {
                    if buf.is_empty() {
                        buf = BytesMut::new();
                        info.set_qbuf(0, 0);
                        held.set(out.capacity());
                    }
                    continue;
                }
                Err(why) => return why,
            };
            match read {
                Ok(0) => return Close::Eof,
                Ok(n) => {
                    stops.heard = tokio::time::Instant::now();
                    since_empty += n;
                    state
                        .stats
                        .counters
                        .add(crate::metrics::table::NET_INPUT_BYTES, n as u64);
                    held.set(buf.capacity() + out.capacity());
                }
                Err(e) => return Close::Io(e),
            }
            // Messages published before these commands arrived go out before
            // their replies, as Redis writes them into the subscriber's output
            // first: a `PING` after a `PUBLISH` is answered after its message.
            if let Some(mailbox) = &mailbox {
                mailbox.drain_into(&mut out);
            }
        }

        let mut turn = batch::Turn::default();
        unrun = false;
        let close = loop {
            match batch::run(
                state,
                &REGISTRY,
                session,
                &mut decoder,
                &mut buf,
                &mut out,
                &mut turn,
            ) {
                Step::Drained => break None,
                Step::Yield => {
                    unrun = true;
                    break None;
                }
                Step::Flush => {
                    if let Err(why) = flush(socket, &mut out, &mut stops).await {
                        return why;
                    }
                }
                Step::Park => {
                    if let Err(why) = flush(socket, &mut out, &mut stops).await {
                        return why;
                    }
                    match session.parked.take() {
                        Some(Park::Psync { replid, offset }) => {
                            batch::finish(state, session, turn.commands);
                            return Close::Psync(replid, offset);
                        }
                        Some(Park::Later(later)) => {
                            match stops.around(Wait::Read, (later.run)(state)).await {
                                // Before the next request: nothing after a
                                // `SHUTDOWN` that went ahead runs.
                                Ok(Deferred::Close) => {
                                    batch::finish(state, session, turn.commands);
                                    return Close::Shutdown;
                                }
                                Ok(reply) => reply.write(&mut out, &mut session.stats),
                                Err(why) => return why,
                            }
                        }
                        None => {}
                    }
                }
                Step::End(End::QueryBufferLimit) => return Close::QueryBufferLimit,
                Step::End(End::Quit) => break Some(Close::Quit),
                Step::End(End::Killed) => break Some(Close::Killed),
                Step::End(End::Protocol) => break Some(Close::Protocol),
            }
        };
        batch::finish(state, session, turn.commands);
        // Every request read has been answered: read again from the start
        // of the buffer, so a connection keeps touching the same few cache
        // lines instead of walking its 16 KiB (with a thousand connections
        // that walk evicts everything else from the caches). A buffer a
        // large request grew goes back to its usual size after a round of
        // small requests (Redis's query buffer peak rule), so one big
        // argument does not hold its memory for good.
        if buf.is_empty() {
            if buf.capacity() > 2 * READ_CHUNK && since_empty < READ_CHUNK {
                buf = BytesMut::with_capacity(READ_CHUNK);
            } else {
                let _ = buf.try_reclaim(READ_CHUNK);
            }
            since_empty = 0;
        }
        // Before the replies go: a client that reads its reply and asks
        // `CLIENT LIST` sees its buffer as the batch left it.
        info.set_qbuf(buf.len(), buf.capacity());
        if let Some(subs) = &session.subs {
            subs.mailbox.drain_into(&mut out);
        }
        if streaming {
            // Input is waiting for this connection: had it read again at
            // once, it would never wait, and a worker polls the sockets
            // only when its run queue empties or every `event_interval`
            // (2,048) tasks, so one flooding client kept every other
            // unheard for hundreds of milliseconds. Deferred, it runs
            // again once the tasks ready now have run and the sockets
            // have been polled: one turn each, as Redis's event loop
            // serves its clients.
            tokio::task::yield_now().await;
        } else if !out.is_empty() {
            behind_the_ready().await;
        }
        if let Err(why) = flush(socket, &mut out, &mut stops).await {
            return why;
        }
        held.set(buf.capacity() + out.capacity());
        if let Some(why) = close {
            return why;
        }
        // Redis closes, without a reply, a client whose unprocessed input
        // outgrows the limit: what is left once the requests it read have
        // run (a turn that stopped on its budget has not run them all).
        if !unrun
            && buf.len() as u64
                > state
                    .settings
                    .get(&state.settings.client_query_buffer_limit)
        {
            tracing::warn!(client = info.id, addr = %info.addr, "closing client that reached max query buffer length");
            return Close::QueryBufferLimit;
        }
    }
}

/// Runs `io`, noting in `waited` whether it was ever pending: a read that
/// was not, found its input already there.
async fn noting_wait<F: Future>(io: F, waited: &mut bool) -> F::Output {
    let mut io = std::pin::pin!(io);
    std::future::poll_fn(|cx| {
        let poll = io.as_mut().poll(cx);
        *waited |= poll.is_pending();
        poll
    })
    .await
}

/// Resolves on its second poll, having woken its task on the first.
///
/// A task that wakes itself while it runs goes to the back of its worker's
/// run queue (tokio schedules it as a yield, never into the LIFO slot), so
/// the connections that became readable with this one read and decide
/// before this one writes.
pub(super) fn behind_the_ready() -> impl Future<Output = ()> {
    let mut queued = false;
    std::future::poll_fn(move |cx| {
        if queued {
            return Poll::Ready(());
        }
        queued = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
}

/// Writes the batch's replies, enforcing `--client-output-buffer-limit`.
///
/// The connection stops reading while a write is blocked, so a client that
/// sends and never reads holds at most one batch of replies in memory; the
/// limit decides how long such a client may stay. It counts what the client
/// has not read: the batch's bytes not yet written plus what the kernel
/// still queues for the client (`SIOCOUTQ`), so the socket's send buffer
/// (megabytes, once autotuned) is no blind spot. Past `hard` bytes the
/// client is disconnected at once; past `soft` bytes for `soft_seconds`
/// (across batches) too, as Redis does.
async fn flush<S: AsyncWrite + AsRawFd + Unpin>(
    socket: &mut S,
    out: &mut ReplyBuf,
    stops: &mut Stops<'_>,
) -> Result<(), Close> {
    let state = stops.state;
    if out.is_empty() {
        return Ok(());
    }
    // `appendfsync always`: no reply before the effects it may follow are
    // in the file, fsynced (one fsync for every connection waiting);
    // otherwise the writer thread is asked to write them, and replies go
    // (as `aof::before_reply`, inside this connection's stops).
    let fx = &state.store.effects;
    if let Some(target) = state.aof.reply_gate(|| fx.offset()) {
        stops
            .around(Wait::Write, state.aof.wait_durable(target))
            .await?;
    }
    let limit = state.settings.output_limit();
    let limited = limit.hard > 0 || limit.soft > 0;
    let buf = out.buffer();
    let total = buf.len();
    let mut written = 0;
    while written < total {
        let mut deadline = None;
        if limited {
            let unread = (total - written) as u64 + unsent(socket.as_raw_fd());
            if limit.hard > 0 && unread > limit.hard {
                return Err(Close::OutputLimit);
            }
            if limit.soft > 0 && unread > limit.soft {
                let since = *stops
                    .over_soft
                    .get_or_insert_with(tokio::time::Instant::now);
                let until = since + Duration::from_secs(limit.soft_seconds);
                if tokio::time::Instant::now() >= until {
                    return Err(Close::OutputLimit);
                }
                deadline = Some(until);
            } else {
                stops.over_soft = None;
            }
        }
        let write = socket.write(&buf[written..]);
        let n = match deadline {
            Some(d) => stops
                .around(Wait::Write, tokio::time::timeout_at(d, write))
                .await?
                .map_err(|_| Close::OutputLimit)?
                .map_err(Close::Io)?,
            None => stops.around(Wait::Write, write).await?.map_err(Close::Io)?,
        };
        if n == 0 {
            return Err(Close::Io(std::io::ErrorKind::WriteZero.into()));
        }
        // The client is reading: as alive as one that writes.
        stops.heard = tokio::time::Instant::now();
        written += n;
    }
    // A no-op on TCP; TLS may still hold records the socket did not take.
    stops
        .around(Wait::Write, socket.flush())
        .await?
        .map_err(Close::Io)?;
    state
        .stats
        .counters
        .add(crate::metrics::table::NET_OUTPUT_BYTES, total as u64);
    buf.clear();
    Ok(())
}

/// This connection's share of [`Stats::client_buffers`]: updated when its
/// buffers' sizes change (rarely: they are reused), given back when it ends.
struct BufferGauge<'a> {
    gauge: &'a std::sync::atomic::AtomicU64,
    bytes: usize,
}

impl BufferGauge<'_> {
    fn set(&mut self, bytes: usize) {
        if bytes > self.bytes {
            self.gauge
                .fetch_add((bytes - self.bytes) as u64, Ordering::Relaxed);
        } else if bytes < self.bytes {
            self.gauge
                .fetch_sub((self.bytes - bytes) as u64, Ordering::Relaxed);
        }
        self.bytes = bytes;
    }
}

impl Drop for BufferGauge<'_> {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// What ends a connection while it waits on its client: shutdown,
/// `CLIENT KILL`, and `--timeout` seconds without a byte either way
/// (Redis's last interaction). A write the client never drains waits on
/// these too, so a client that never reads can hold neither a shutdown nor
/// its connection slot for ever. A shutdown stops reads at once, while
/// replies already decoded are still written to a client that takes them:
/// each write must then progress within [`WRITE_GRACE`], all within
/// [`SHUTDOWN_GRACE`] of the shutdown.
struct Stops<'a> {
    shutdown: &'a watch::Receiver<bool>,
    /// The client's wake-up ([`ClientInfo::woken`]): a kill, a request for
    /// its idle buffer, or the shutdown ([`ClientInfo::nudge`]), which each
    /// wait then reads from `shutdown`. Made once and kept across waits, so
    /// a wait does not register again.
    woken: Pin<Box<Notified<'a>>>,
    info: &'a ClientInfo,
    state: &'a State,
    /// The last time a read or a write made progress.
    heard: tokio::time::Instant,
    /// When this connection saw the shutdown.
    stopping: Option<tokio::time::Instant>,
    /// Since when the client's unread replies have been over the soft
    /// output limit.
    over_soft: Option<tokio::time::Instant>,
    /// The client subscribes (Pub/Sub): the idle `timeout` spares it, as
    /// Redis spares subscribers.
    subscribed: bool,
}

/// After a shutdown, how long one write may wait on the client.
const WRITE_GRACE: Duration = Duration::from_secs(1);
/// After a shutdown, how long a connection may take to write out the
/// replies it owes.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What a connection waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// The next request: the only wait in which an idle connection gives
    /// its query buffer back.
    Request,
    /// A parked command's end (`WAIT`, `SAVE`, a policy reload): counts as
    /// a read for shutdown, keeps the buffer.
    Read,
    Write,
}

impl Stops<'_> {
    /// Whether the server is shutting down; notes when this connection
    /// first saw it.
    fn stopping(&mut self) -> bool {
        // `has_changed` is an atomic load; the value is read (under the
        // signal's lock) only once it changed, which it does once. A
        // dropped sender means a shutdown too.
        if self.stopping.is_none()
            && self
                .shutdown
                .has_changed()
                .map_or(true, |changed| changed && *self.shutdown.borrow())
        {
            self.stopping = Some(tokio::time::Instant::now());
        }
        self.stopping.is_some()
    }

    /// Runs `io` unless something ends the connection first. `io` comes
    /// first: a reply that can be written is written (a client that kills
    /// itself gets its `:1`). So a write that completes at its first poll,
    /// as nearly all do on a socket with room (and a TCP flush always),
    /// is taken before the stop checks and timers are set up (about 100
    /// instructions, twice a request without pipelining); a read is not:
    /// a shutdown stops reads before they are tried.
    async fn around<T>(
        &mut self,
        wait: Wait,
        io: impl std::future::Future<Output = T>,
    ) -> Result<T, Close> {
        tokio::pin!(io);
        if wait == Wait::Write {
            let first = std::future::poll_fn(|cx| Poll::Ready(io.as_mut().poll(cx))).await;
            if let Poll::Ready(r) = first {
                return Ok(r);
            }
        }
        loop {
            let stopping = self.stopping();
            if stopping && wait != Wait::Write {
                return Err(Close::Shutdown);
            }
            let timeout = match self.subscribed {
                true => 0,
                false => self.state.settings.timeout_secs.load(Ordering::Relaxed),
            };
            // A timeout too far ahead to represent is no timeout.
            let idle_at = (timeout > 0)
                .then(|| self.heard.checked_add(Duration::from_secs(timeout)))
                .flatten();
            let grace_at = self
                .stopping
                .map(|at| (tokio::time::Instant::now() + WRITE_GRACE).min(at + SHUTDOWN_GRACE));
            let until = |at: Option<tokio::time::Instant>| async move {
                match at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                r = &mut io => return Ok(r),
                _ = self.woken.as_mut() => {}
                _ = until(idle_at) => return Err(Close::Idle),
                _ = until(grace_at) => return Err(Close::Shutdown),
            }
            // Woken: a kill, the cron, or the shutdown (seen at the top of
            // the loop).
            self.woken.set(self.info.woken());
            if self.info.is_killed() {
                return Err(Close::Killed);
            }
            // The clients' cron: a connection waiting for its next
            // request gives its buffer back; one busy with a parked
            // command or a write leaves the request for the cron's
            // next round.
            if wait == Wait::Request && self.info.take_release() {
                return Err(Close::Release);
            }
        }
    }
}

/// How long a connection runs no command before its empty query buffer is
/// given back: Redis's 2 s.
const BUFFER_IDLE_MS: u64 = 2_000;

/// The clients' cron: once a second, asks each connection idle for
/// [`BUFFER_IDLE_MS`] with an empty query buffer to free it, as Redis's
/// `clientsCronResizeQueryBuffer` does, so idle connections hold no
/// 16 KiB each. The request wakes the connection through its kill
/// notification, so reads pay for no timer of their own.
pub(super) async fn release_idle_buffers(state: Arc<State>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        for client in state.clients.all() {
            if client.holds_idle_buffer(BUFFER_IDLE_MS) {
                client.request_release();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::{Context, Poll, Wake, Waker};

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The write waits one turn of the run queue: the first poll queues the
    /// task again (one wake) and is pending; the next one is ready.
    #[test]
    fn a_batch_writes_after_one_turn_of_the_run_queue() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut turn = std::pin::pin!(behind_the_ready());
        assert!(turn.as_mut().poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert_eq!(turn.as_mut().poll(&mut cx), Poll::Ready(()));
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
    }
}
