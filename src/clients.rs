//! The registry of connected clients, for `CLIENT LIST`, `CLIENT KILL`,
//! `INFO clients` and `--maxclients`.

use dashmap::DashMap;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// What other connections may see or change about one client. The
/// connection keeps its hot state to itself; this is touched once per batch.
#[derive(Debug)]
pub struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub created: Instant,
    pub name: Mutex<Option<Box<[u8]>>>,
    pub lib_name: Mutex<Option<Box<[u8]>>>,
    pub lib_ver: Mutex<Option<Box<[u8]>>>,
    /// The ACL user it authenticated as; `None` for `default`.
    pub user: Mutex<Option<Box<[u8]>>>,
    pub resp: AtomicU8,
    /// Milliseconds since `created` at the last batch of commands.
    pub last_active_ms: AtomicU64,
    /// The command being run or last run, and its subcommand, as their
    /// positions in the command table (each plus one, the subcommand's in
    /// the high half; 0 = none): set before each command with one relaxed
    /// store, so `CLIENT LIST` can name it without a lock on the hot path.
    last_cmd: AtomicU32,
    /// Channels and patterns subscribed to (Pub/Sub), for `CLIENT LIST`
    /// and `CLIENT KILL TYPE`.
    pub subs: AtomicU32,
    pub psubs: AtomicU32,
    /// A replica's link (it sent `PSYNC`): flag `S`, `TYPE replica`.
    pub replica: AtomicBool,
    /// The query buffer's unread bytes and its capacity, as the connection
    /// last stored them (once a batch): `CLIENT LIST`'s `qbuf` and
    /// `qbuf-free`.
    qbuf_len: AtomicU32,
    qbuf_cap: AtomicU32,
    /// The clients' cron asks the connection to give its idle query buffer
    /// back (through the same wake-up as a kill).
    release: AtomicBool,
    killed: AtomicBool,
    kill: Notify,
    /// The connection's socket while it is open, so that [`ClientInfo::close`]
    /// reaches a connection that cannot look at its kill notification: one
    /// parked on its thread waiting for a shard a script holds. Detached
    /// under this lock before the socket closes, so a descriptor is never
    /// shut once another file may have it.
    socket: Mutex<Option<std::os::fd::RawFd>>,
}

impl ClientInfo {
    pub fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        self.kill.notify_one();
    }

    /// Kills the client (another one asked: `CLIENT KILL`) and shuts its
    /// socket at once: the client sees the close whatever its connection
    /// is doing, as Redis closes a killed client before serving it again.
    pub fn close(&self) {
        self.kill();
        if let Some(fd) = *self.socket.lock() {
            // SAFETY: `fd` is open: its connection attached it and detaches
            // it under this lock before closing it. `shutdown` changes no
            // memory and leaves the descriptor for its owner to close.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }

    /// Lets [`ClientInfo::close`] shut the connection's socket.
    pub fn attach_socket(&self, fd: std::os::fd::RawFd) {
        *self.socket.lock() = Some(fd);
    }

    /// Before the socket closes (or moves to a replica's feed, which
    /// watches its kill notification): no close reaches it any more.
    pub fn detach_socket(&self) {
        *self.socket.lock() = None;
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }

    /// Resolves when another client kills this one.
    pub async fn killed(&self) {
        loop {
            self.kill.notified().await;
            if self.is_killed() {
                return;
            }
        }
    }

    /// Resolves when another client kills this one, the clients' cron
    /// asks for its idle query buffer, or the server shuts down
    /// ([`ClientInfo::is_killed`], [`ClientInfo::take_release`] and the
    /// shutdown signal tell which; [`ClientInfo::nudge`]): one wake-up for all, so a
    /// connection's reads wait on nothing more. A future to keep: once
    /// polled it stays registered until it fires or is dropped, so a
    /// connection that waits on it again and again registers once (one
    /// made per wait registered and unregistered under the notification's
    /// lock each time, per request without pipelining).
    pub fn woken(&self) -> tokio::sync::futures::Notified<'_> {
        self.kill.notified()
    }

    /// Stores the query buffer's unread bytes and capacity.
    pub fn set_qbuf(&self, len: usize, cap: usize) {
        let c = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        self.qbuf_len.store(c(len), Ordering::Relaxed);
        self.qbuf_cap.store(c(cap), Ordering::Relaxed);
    }

    /// Asks the connection to free its query buffer if it is still idle
    /// when it wakes, as Redis frees an idle client's after 2 s.
    pub fn request_release(&self) {
        self.release.store(true, Ordering::Relaxed);
        self.kill.notify_one();
    }

    /// Wakes the connection to look at the server's shutdown signal: its
    /// waits then need no wake-up of their own for it (polling the
    /// signal's watch on every wait cost about 220 instructions a request
    /// without pipelining).
    pub fn nudge(&self) {
        self.kill.notify_one();
    }

    /// Whether a release was asked for since the last call.
    pub fn take_release(&self) -> bool {
        self.release.swap(false, Ordering::Relaxed)
    }

    /// Whether the connection (a client's, not a replica's link) holds a
    /// query buffer with nothing unread in it, and has run no command for
    /// `ms` milliseconds.
    pub fn holds_idle_buffer(&self, ms: u64) -> bool {
        let now = self.created.elapsed().as_millis() as u64;
        !self.replica.load(Ordering::Relaxed)
            && self.qbuf_cap.load(Ordering::Relaxed) > 0
            && self.qbuf_len.load(Ordering::Relaxed) == 0
            && now.saturating_sub(self.last_active_ms.load(Ordering::Relaxed)) >= ms
    }

    /// Marks the client active now (once per batch of commands).
    pub fn touch(&self) {
        self.last_active_ms
            .store(self.created.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Records the command about to run: its index in the command table,
    /// and its subcommand's among the command's subcommands.
    pub fn set_command(&self, cmd: usize, sub: Option<usize>) {
        let part = |i: usize| u32::try_from(i + 1).unwrap_or(0) & 0xFFFF;
        let packed = part(cmd) | sub.map_or(0, |s| part(s) << 16);
        self.last_cmd.store(packed, Ordering::Relaxed);
    }

    /// The command being run or last run, as `set_command` recorded it.
    pub fn last_command(&self) -> Option<(usize, Option<usize>)> {
        let packed = self.last_cmd.load(Ordering::Relaxed);
        let cmd = (packed & 0xFFFF).checked_sub(1)? as usize;
        let sub = (packed >> 16).checked_sub(1).map(|s| s as usize);
        Some((cmd, sub))
    }

    /// One `CLIENT LIST` / `CLIENT INFO` line, fields as Redis 7 prints
    /// them; `cmd` names the last command (the command layer knows names).
    /// Subscribed to a channel or pattern: a `pubsub` client, as Redis
    /// types it (flag `P`), whatever its protocol.
    pub fn is_pubsub(&self) -> bool {
        self.subs.load(Ordering::Relaxed) + self.psubs.load(Ordering::Relaxed) > 0
    }

    pub fn describe(&self, cmd: &str) -> String {
        let text = |m: &Mutex<Option<Box<[u8]>>>| {
            m.lock()
                .as_deref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        let age = self.created.elapsed().as_secs();
        let idle = age.saturating_sub(self.last_active_ms.load(Ordering::Relaxed) / 1000);
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={} db=0 sub={} psub={} ssub=0 multi=-1 qbuf={} qbuf-free={} argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user={} redir=-1 resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.laddr,
            text(&self.name),
            age,
            idle,
            if self.replica.load(Ordering::Relaxed) {
                "S"
            } else if self.is_pubsub() {
                "P"
            } else {
                "N"
            },
            self.subs.load(Ordering::Relaxed),
            self.psubs.load(Ordering::Relaxed),
            self.qbuf_len.load(Ordering::Relaxed),
            self.qbuf_cap
                .load(Ordering::Relaxed)
                .saturating_sub(self.qbuf_len.load(Ordering::Relaxed)),
            cmd,
            self.user
                .lock()
                .as_deref()
                .map_or("default".into(), String::from_utf8_lossy),
            self.resp.load(Ordering::Relaxed),
            text(&self.lib_name),
            text(&self.lib_ver),
        )
    }
}

#[derive(Debug, Default)]
pub struct Clients {
    map: DashMap<u64, Arc<ClientInfo>>,
    next_id: AtomicU64,
}

impl Clients {
    pub fn register(&self, addr: SocketAddr, laddr: SocketAddr) -> Arc<ClientInfo> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let info = Arc::new(ClientInfo {
            id,
            addr,
            laddr,
            created: Instant::now(),
            name: Mutex::new(None),
            lib_name: Mutex::new(None),
            lib_ver: Mutex::new(None),
            user: Mutex::new(None),
            resp: AtomicU8::new(2),
            last_active_ms: AtomicU64::new(0),
            last_cmd: AtomicU32::new(0),
            subs: AtomicU32::new(0),
            psubs: AtomicU32::new(0),
            replica: AtomicBool::new(false),
            qbuf_len: AtomicU32::new(0),
            qbuf_cap: AtomicU32::new(0),
            release: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            kill: Notify::new(),
            socket: Mutex::new(None),
        });
        self.map.insert(id, info.clone());
        info
    }

    pub fn unregister(&self, id: u64) {
        self.map.remove(&id);
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn get(&self, id: u64) -> Option<Arc<ClientInfo>> {
        self.map.get(&id).map(|e| e.value().clone())
    }

    /// Every client, ordered by id as Redis lists them.
    pub fn all(&self) -> Vec<Arc<ClientInfo>> {
        self.sorted(|_| true)
    }

    /// Every client not killed, by id: what `CLIENT LIST` and `CLIENT
    /// KILL` see. A killed client is gone for Redis at once; here its
    /// socket may close ([`ClientInfo::close`]) before its connection
    /// leaves the registry.
    pub fn live(&self) -> Vec<Arc<ClientInfo>> {
        self.sorted(|c| !c.is_killed())
    }

    fn sorted(&self, keep: impl Fn(&ClientInfo) -> bool) -> Vec<Arc<ClientInfo>> {
        let mut v: Vec<_> = self
            .map
            .iter()
            .filter(|e| keep(e.value()))
            .map(|e| e.value().clone())
            .collect();
        v.sort_by_key(|c| c.id);
        v
    }
}
