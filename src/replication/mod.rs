//! Replication: who this server follows, who follows it, and how a
//! replica applies its primary's stream. The sockets are the server's
//! (`server/replication.rs`); this module holds the facts `ROLE`, `INFO`,
//! `WAIT` and `REPLICAOF` read and change, and the pure parts of the
//! protocol: choosing a partial or a full resync, reading and applying
//! the stream, the full copy the replicas that attach together share
//! (`copy.rs`), and when a replica has overrun its limits ([`overrun`]).
//!
//! The stream carries effects, not commands (`store/effects.rs`): a full
//! copy is each shard's records, interleaved with the stream so that a
//! shard's copy follows every effect it already holds (see
//! [`Store::for_each_in_shard_at`](crate::store::Store::for_each_in_shard_at)).

pub mod copy;

use bytes::{Buf, BytesMut};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crate::clock::Nanos;
use crate::config::OutputLimit;
use crate::store::effects;
use crate::store::Store;

/// A record of the full copy: applied, not part of the stream's offsets.
pub const SNAP: u8 = 16;
/// The full copy is complete: the replica is in sync from here.
pub const SYNCED: u8 = 17;

/// What this server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Primary,
    Replica { host: String, port: u16 },
}

/// The replica side's link to its primary, for `INFO` and `ROLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Link {
    /// Not connected (yet, or any more).
    Down = 0,
    /// Connected, handshaking.
    Connecting = 1,
    /// Receiving the full copy.
    Sync = 2,
    /// In sync, following the stream.
    Up = 3,
}

/// The IDs of this server's history (Redis's PSYNC2): the current one, and
/// the one it followed before a promotion, valid up to `second_offset`, so
/// the other replicas of its old primary can resume from it.
#[derive(Debug, Clone)]
pub struct Ids {
    pub replid: String,
    pub replid2: String,
    /// The last offset of `replid2`'s history, plus one; -1 without one.
    pub second_offset: i64,
}

/// One replica attached to this server.
#[derive(Debug)]
pub struct Attached {
    /// Its client id (`CLIENT LIST`).
    pub id: u64,
    pub ip: Mutex<String>,
    /// The port it listens on (`REPLCONF listening-port`).
    pub port: AtomicU64,
    /// Receiving its copy (`wait_bgsave`/`send_bulk`) or `online`.
    pub online: AtomicBool,
    /// The offset it last acknowledged.
    pub acked: AtomicU64,
    /// When it last acknowledged, in server ms.
    pub acked_at_ms: AtomicU64,
    /// Its last sign of life, in server ms: an acknowledgement, or, while
    /// it takes its copy, bytes taken (or nothing left to take).
    pub alive_ms: AtomicU64,
    /// The next byte of the stream to send it.
    pub pos: AtomicU64,
}

impl Attached {
    /// A replica attached now (`now_ms`, server time).
    pub fn new(id: u64, ip: String, port: u16, online: bool, now_ms: u64) -> Attached {
        Attached {
            id,
            ip: Mutex::new(ip),
            port: u64::from(port).into(),
            online: online.into(),
            acked: 0.into(),
            acked_at_ms: now_ms.into(),
            alive_ms: now_ms.into(),
            pos: 0.into(),
        }
    }
}

/// Why a replica's link is dropped: Redis's `client-output-buffer-limit
/// replica` and `repl-timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Overrun {
    #[error("{0} bytes not taken, over the hard limit (client-output-buffer-limit replica)")]
    Hard(u64),
    #[error(
        "{0} bytes not taken, over the soft limit for {1} s (client-output-buffer-limit replica)"
    )]
    Soft(u64, u64),
    #[error("no acknowledgement or data taken for over {0} s (repl-timeout)")]
    Timeout(u64),
}

/// Whether a replica with `unread` bytes not taken, last alive at
/// `alive_ms`, is dropped at `now_ms` (server time, so tests drive it).
/// `soft_since` is when `unread` went over the soft limit, kept by the
/// caller from one check to the next.
pub fn overrun(
    limit: OutputLimit,
    timeout_secs: u64,
    now_ms: u64,
    unread: u64,
    alive_ms: u64,
    soft_since: &mut Option<u64>,
) -> Option<Overrun> {
    let timeout_ms = timeout_secs.saturating_mul(1000);
    if now_ms.saturating_sub(alive_ms) > timeout_ms {
        return Some(Overrun::Timeout(timeout_secs));
    }
    if limit.hard > 0 && unread > limit.hard {
        return Some(Overrun::Hard(unread));
    }
    if limit.soft == 0 || unread <= limit.soft {
        *soft_since = None;
        return None;
    }
    let since = *soft_since.get_or_insert(now_ms);
    (now_ms.saturating_sub(since) >= limit.soft_seconds.saturating_mul(1000))
        .then_some(Overrun::Soft(unread, limit.soft_seconds))
}

/// The replication facts of one server.
pub struct Replication {
    role: Mutex<Role>,
    /// Whether this server is a replica: read on every write command.
    replica: AtomicBool,
    /// Moves on every role change: a link task whose generation is past
    /// stops.
    generation: AtomicU64,
    /// Moves when this server's history is replaced (a full copy from its
    /// own primary, a new primary): the feeders of its replicas stop.
    feeds: AtomicU64,
    ids: Mutex<Ids>,
    pub link: AtomicU8,
    /// Server ms of the last byte from the primary.
    pub last_io_ms: AtomicU64,
    /// Server ms the link went down (0: never up, or up).
    pub down_since_ms: AtomicU64,
    /// The replicas attached here.
    pub replicas: Mutex<Vec<Arc<Attached>>>,
    /// The latest full copy, which replicas attaching together share.
    copy: Mutex<Option<Arc<copy::FullCopy>>>,
    /// Full and partial resyncs served, and partial ones refused.
    pub full_syncs: AtomicU64,
    pub partial_ok: AtomicU64,
    pub partial_err: AtomicU64,
    /// Woken when the role changes (the server starts or stops the link).
    pub role_changed: tokio::sync::Notify,
    /// Woken on each append to the stream (feeders wait on it).
    pub appended: Arc<tokio::sync::Notify>,
    /// Woken on each acknowledgement (`WAIT` waits on it).
    pub acked: tokio::sync::Notify,
}

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replication")
            .field("role", &*self.role.lock())
            .finish_non_exhaustive()
    }
}

/// How a replica's `PSYNC` is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resync {
    /// `+CONTINUE <replid>`: send the stream from this byte on.
    Partial { from: u64, replid: String },
    /// `+FULLRESYNC <replid> <offset>`: a full copy, then the stream from
    /// `offset + 1`.
    Full { replid: String, offset: u64 },
}

impl Replication {
    pub fn new(replid: String) -> Self {
        Replication {
            role: Mutex::new(Role::Primary),
            replica: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            feeds: AtomicU64::new(0),
            ids: Mutex::new(Ids {
                replid,
                replid2: "0".repeat(40),
                second_offset: -1,
            }),
            link: AtomicU8::new(Link::Down as u8),
            last_io_ms: AtomicU64::new(0),
            down_since_ms: AtomicU64::new(0),
            replicas: Mutex::new(Vec::new()),
            copy: Mutex::new(None),
            full_syncs: AtomicU64::new(0),
            partial_ok: AtomicU64::new(0),
            partial_err: AtomicU64::new(0),
            role_changed: tokio::sync::Notify::new(),
            appended: Arc::new(tokio::sync::Notify::new()),
            acked: tokio::sync::Notify::new(),
        }
    }

    pub fn role(&self) -> Role {
        self.role.lock().clone()
    }

    /// Whether this server is a replica (writes from clients are refused).
    #[inline]
    pub fn is_replica(&self) -> bool {
        self.replica.load(Ordering::Relaxed)
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn feeds_epoch(&self) -> u64 {
        self.feeds.load(Ordering::Acquire)
    }

    /// Stops every feeder: their replicas reconnect and resync.
    pub fn new_feeds_epoch(&self) {
        self.feeds.fetch_add(1, Ordering::AcqRel);
        self.appended.notify_waiters();
    }

    pub fn ids(&self) -> Ids {
        self.ids.lock().clone()
    }

    pub fn link(&self) -> Link {
        match self.link.load(Ordering::Relaxed) {
            1 => Link::Connecting,
            2 => Link::Sync,
            3 => Link::Up,
            _ => Link::Down,
        }
    }

    pub fn set_link(&self, link: Link, now_ms: u64) {
        let was = self.link.swap(link as u8, Ordering::Relaxed);
        if link == Link::Down && was != Link::Down as u8 {
            self.down_since_ms.store(now_ms, Ordering::Relaxed);
        }
        if link == Link::Up {
            self.down_since_ms.store(0, Ordering::Relaxed);
        }
    }

    /// `REPLICAOF host port`: follow a primary. Local writes stop being
    /// logged (the stream is the primary's now); the link task starts.
    /// False if it already follows that primary.
    pub fn follow(&self, store: &Store, host: String, port: u16) -> bool {
        let mut role = self.role.lock();
        let new = Role::Replica { host, port };
        if *role == new {
            return false;
        }
        *role = new;
        self.replica.store(true, Ordering::Relaxed);
        store.effects.set_emitting(false);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.link.store(Link::Down as u8, Ordering::Relaxed);
        drop(role);
        // As Redis: our replicas resync with us, now that our history is
        // about to change.
        self.new_feeds_epoch();
        self.role_changed.notify_waiters();
        true
    }

    /// `REPLICAOF NO ONE`: become a primary, keeping the keys. The
    /// history so far stays resumable under the old ID (PSYNC2), so the
    /// other replicas of the old primary resume from here with a partial
    /// resync.
    pub fn promote(&self, store: &Store, backlog_size: usize) -> bool {
        let mut role = self.role.lock();
        if *role == Role::Primary {
            return false;
        }
        *role = Role::Primary;
        {
            let mut ids = self.ids.lock();
            let old = std::mem::replace(&mut ids.replid, new_id());
            ids.replid2 = old;
            ids.second_offset = store.effects.offset() as i64 + 1;
        }
        self.replica.store(false, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.link.store(Link::Down as u8, Ordering::Relaxed);
        self.down_since_ms.store(0, Ordering::Relaxed);
        store.effects.activate(backlog_size);
        store.effects.set_emitting(true);
        drop(role);
        self.role_changed.notify_waiters();
        true
    }

    /// A replica took a full copy: its history is its primary's from
    /// `offset` on.
    pub fn adopt(&self, store: &Store, replid: String, offset: u64, backlog_size: usize) {
        *self.ids.lock() = Ids {
            replid,
            replid2: "0".repeat(40),
            second_offset: -1,
        };
        store.effects.activate(backlog_size);
        store.effects.reset(offset);
    }

    /// A replica's primary changed ID (`+CONTINUE <new id>` after its
    /// promotion): the history so far is the old ID's.
    pub fn switch_id(&self, store: &Store, replid: String) {
        let mut ids = self.ids.lock();
        if ids.replid != replid {
            let old = std::mem::replace(&mut ids.replid, replid);
            ids.replid2 = old;
            ids.second_offset = store.effects.offset() as i64 + 1;
        }
    }

    /// Decides how to answer `PSYNC replid offset` (`offset` is the first
    /// byte the replica lacks). A primary starts logging here if it was
    /// not (its backlog is made when its first replica comes, as Redis's).
    pub fn resync(&self, store: &Store, replid: &str, offset: i64, backlog_size: usize) -> Resync {
        let fx = &store.effects;
        // The append-only file may have turned logging on without a
        // backlog: a replica needs the backlog.
        if !self.is_replica() && !fx.active() {
            fx.activate(backlog_size);
            fx.set_emitting(true);
        }
        let ids = self.ids.lock();
        let known = replid == ids.replid
            || (replid == ids.replid2 && offset >= 0 && offset <= ids.second_offset);
        if known && offset > 0 && fx.holds_from(offset as u64) {
            self.partial_ok.fetch_add(1, Ordering::Relaxed);
            return Resync::Partial {
                from: offset as u64,
                replid: ids.replid.clone(),
            };
        }
        if replid != "?" {
            self.partial_err.fetch_add(1, Ordering::Relaxed);
        }
        self.full_syncs.fetch_add(1, Ordering::Relaxed);
        Resync::Full {
            replid: ids.replid.clone(),
            offset: fx.offset(),
        }
    }

    /// The copy replica `id` reads after `resync` answered `Full`: the
    /// one being made if it may still join it (same history, its first
    /// chunk still held, the backlog still holding the stream from its
    /// offset), else a new one, whose maker the caller starts (true).
    pub fn full_copy(
        &self,
        store: &Store,
        epoch: u64,
        (replid, offset): (String, u64),
        id: u64,
    ) -> (copy::Reader, bool) {
        let mut current = self.copy.lock();
        let shared = current.as_ref().filter(|c| {
            c.epoch == epoch && c.replid == replid && store.effects.holds_from(c.offset + 1)
        });
        if let Some(reader) = shared.and_then(|c| c.join(id)) {
            return (reader, false);
        }
        let (copy, reader) = copy::FullCopy::start(replid, offset, epoch, id);
        *current = Some(copy);
        (reader, true)
    }

    pub fn attach(&self, a: Arc<Attached>) {
        self.replicas.lock().push(a);
    }

    pub fn detach(&self, id: u64) {
        self.replicas.lock().retain(|a| a.id != id);
    }

    /// Replicas that acknowledged byte `offset` (`WAIT`).
    pub fn acked_at_least(&self, offset: u64) -> usize {
        self.replicas
            .lock()
            .iter()
            .filter(|a| a.acked.load(Ordering::Acquire) >= offset)
            .count()
    }

    pub fn connected(&self) -> usize {
        self.replicas.lock().len()
    }
}

/// A new replication ID: 40 hex characters.
pub fn new_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::with_capacity(40);
    let mut i = 0u64;
    while out.len() < 40 {
        let mut h = ahash::RandomState::new().build_hasher();
        h.write_u64(i);
        out.push_str(&format!("{:016x}", h.finish()));
        i += 1;
    }
    out.truncate(40);
    out
}

pub use crate::store::effects::ApplyError;

/// Applies one frame of the stream (or of the copy) to a replica's store.
/// Writes on a replica are not logged by the store: the link appends what
/// it received, verbatim, once applied.
pub fn apply(store: &Store, kind: u8, body: &[u8], now: Nanos) -> Result<(), ApplyError> {
    match kind {
        SNAP => effects::apply(store, effects::SET, body, now),
        SYNCED => Ok(()),
        k => effects::apply(store, k, body, now),
    }
}

/// What one read of the stream held.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The primary asked for an acknowledgement now (GETACK).
    pub getack: bool,
    /// The full copy ended (SYNCED): the replica is in sync.
    pub synced: bool,
}

/// A replica's reader of its primary's stream, the only code that parses
/// what a primary sends after `PSYNC`: applies every whole frame at the
/// start of `buf`, logs the stream's frames (not the copy's) verbatim for
/// this server's own replicas, and leaves a frame not yet whole in `buf`
/// for the next read. On an error the frames before the bad one stay
/// applied; the link is dropped and the replica starts over (the fuzz
/// target `replication_stream` runs this on arbitrary bytes).
pub fn apply_frames(store: &Store, buf: &mut BytesMut, now: Nanos) -> Result<Applied, ApplyError> {
    let mut applied = Applied::default();
    while let Some((kind, body, n)) = effects::next_frame(buf) {
        apply(store, kind, body, now)?;
        match kind {
            SNAP => {}
            SYNCED => applied.synced = true,
            k => {
                // Applied first, then logged: a copy our own replicas take
                // never lacks what the log holds.
                store.effects.append(&buf[..n]);
                applied.getack |= k == effects::GETACK;
            }
        }
        buf.advance(n);
    }
    Ok(applied)
}

/// Appends shard `shard`'s copy, one SNAP frame a key, to `out`; returns
/// the stream's offset when it was taken (see
/// [`Store::for_each_in_shard_at`]).
pub fn copy_shard(store: &Store, shard: usize, now: Nanos, out: &mut Vec<u8>) -> u64 {
    store.for_each_in_shard_at(shard, now, |key, entry| {
        effects::frame(out, SNAP, |b| crate::store::snapshot::encode(b, key, entry));
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis's rules on plain numbers: the hard limit at once, the soft
    /// one after its seconds over it (and forgotten once under it), the
    /// timeout after its seconds without a sign of life.
    #[test]
    fn a_replica_overruns_as_redis_decides() {
        let limit = OutputLimit {
            hard: 1000,
            soft: 100,
            soft_seconds: 10,
        };
        let mut since = None;
        let check = |now, unread, alive, since: &mut Option<u64>| {
            overrun(limit, 60, now, unread, alive, since)
        };
        assert_eq!(check(0, 1001, 0, &mut since), Some(Overrun::Hard(1001)));
        assert_eq!(check(0, 1000, 0, &mut since), None);
        assert_eq!(since, Some(0));
        assert_eq!(check(9_999, 500, 9_000, &mut since), None);
        assert_eq!(
            check(10_000, 500, 9_000, &mut since),
            Some(Overrun::Soft(500, 10))
        );
        assert_eq!(check(10_000, 100, 9_000, &mut since), None);
        assert_eq!(since, None, "back under the soft limit: its clock restarts");
        assert_eq!(check(15_000, 101, 9_000, &mut since), None);
        assert_eq!(check(24_999, 101, 9_000, &mut since), None);
        assert_eq!(check(69_000, 0, 9_000, &mut since), None);
        assert_eq!(
            check(69_001, 0, 9_000, &mut since),
            Some(Overrun::Timeout(60))
        );
        let off = OutputLimit::default();
        assert_eq!(overrun(off, 60, 5, u64::MAX, 5, &mut None), None);
    }
}
