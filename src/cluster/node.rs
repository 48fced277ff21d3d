//! This node's membership in a growing cluster: its [`ClusterState`]
//! behind one lock, the routing table published from it for the request
//! path to read without that lock, the bus links' send queues, and the
//! config file written whenever the state changes. Commands (`CLUSTER
//! ...`) and the bus (`server/cluster_bus.rs`) both change the state
//! through [`ClusterNode::with`].

use std::cell::Cell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::bus::Message;
use super::routing::Routing;
use super::state::{ClusterState, Effects, LinkId, Millis};

/// Wall-clock milliseconds: the bus's times are shown in `CLUSTER NODES`,
/// which Redis fills from `mstime()`.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// What the server does with effects that leave the cluster state:
/// following a primary, deleting the keys of slots lost.
pub trait Host: Send + Sync + 'static {
    fn apply(&self, effects: &Effects);

    /// Whether a peer's Hello naming ACL user `user` with `password` is
    /// let in (none is, without users to check it against).
    fn admits(&self, _user: &str, _password: &str) -> bool {
        false
    }

    /// Runs `f`, a wait for the disk (the config file's fsync when an
    /// epoch changed), where it holds up no client: the server moves it
    /// off the async worker, whose other clients would otherwise wait out
    /// the fsync (milliseconds, tens of them on a busy disk). Here it runs
    /// on this thread.
    fn off_worker(&self, f: &mut dyn FnMut()) {
        f()
    }
}

/// This node in its cluster.
pub struct ClusterNode {
    pub state: Mutex<ClusterState>,
    routing: ArcSwap<Routing>,
    links: Mutex<HashMap<LinkId, mpsc::UnboundedSender<Message>>>,
    next_link: AtomicU64,
    /// The password this node sends in its Hello.
    pub auth: Mutex<Option<String>>,
    /// The ACL user it sends with it (`masteruser`), if any.
    pub auth_user: Mutex<Option<String>>,
    /// The password a peer's Hello must carry.
    pub require: Mutex<Option<String>>,
    /// Links refused for a wrong or missing password.
    pub refused: AtomicU64,
    /// `--cluster-config-file`, rewritten on every change.
    file: Option<Arc<ConfigFile>>,
    /// The lock on `FILE.lock`, held while this node runs.
    lock: Mutex<Option<std::fs::File>>,
    /// [`close`](Self::close)d: the file is no longer this node's.
    closed: std::sync::atomic::AtomicBool,
    host: OnceLock<Box<dyn Host>>,
    /// Orders requests on a slot being moved against `MIGRATE`: a request
    /// that found its keys here holds it (shared) until it has run, and
    /// `MIGRATE` takes it whole before it reads a key, so no request can
    /// find a key present, wait while it moves, then create it afresh.
    pub gate: Arc<parking_lot::RwLock<()>>,
    /// Held for the moment of every change ([`with`](Self::with), a
    /// link's first message) and, by [`batch`](Self::batch), for a whole
    /// `EXEC` of CLUSTER commands: no message is composed between two
    /// commands of a transaction. `redis-cli --cluster fix` sends
    /// `DELSLOTS`, `ADDSLOTS` and `BUMPEPOCH` in one `MULTI`; a PONG sent
    /// after the first told every node that the slot was given up, which
    /// Redis, running one command at a time, never shows.
    atomic: parking_lot::ReentrantMutex<BatchState>,
}

/// `--cluster-config-file` and the thread that rewrites it in place.
/// A change that needs no fsync (slots, roles, addresses: most of a
/// slot's move, on every node) only marks the file stale, and its caller
/// goes on: the thread renders the state's text itself when it writes
/// (at most once a [`WRITE_GAP`]) and the write's system calls wait on
/// the filesystem's journal, milliseconds when other writers sync (an
/// `ftruncate` of 5.4 ms was seen on a node's worker during a reshard),
/// and the caller is the worker serving the node's clients. Rendering
/// the text for each change on the worker, most of them dropped unwritten
/// for a newer one, was 5% of the workers' CPU in a move. An epoch's
/// write, which must reach the disk before anything carries it, is made
/// by its caller ([`ClusterNode::save`]), under the same `disk` lock.
struct ConfigFile {
    path: PathBuf,
    /// Held across every write, whichever thread makes it: two writes
    /// never interleave, and none lands over a newer one.
    disk: Mutex<Disk>,
    /// What the thread is asked to write.
    queue: Mutex<Queue>,
    /// Wakes the thread for a write, and [`ConfigFile::settle`]'s callers
    /// once it is made.
    wake: parking_lot::Condvar,
    /// Renders the state's text now, with its version (taken under the
    /// state's lock with it); `None` once the node is gone. Set once the
    /// node exists; the thread calls it with no lock of the file held.
    render: OnceLock<Render>,
    /// Why the last write failed, if it did.
    error: Mutex<Option<String>>,
    /// Numbers the texts in the order of the changes (taken under the
    /// state lock), so that an older text never replaces a newer one.
    versions: AtomicU64,
}

#[derive(Default)]
struct Disk {
    /// The file, kept open for in-place rewrites.
    handle: Option<std::fs::File>,
    /// The version of the text the file holds.
    holds: u64,
    /// The node stopped: the file is no longer written.
    closed: bool,
}

/// See [`ConfigFile::render`].
type Render = Box<dyn Fn() -> Option<(u64, String)> + Send + Sync>;

#[derive(Default)]
struct Queue {
    /// The state changed since the thread last rendered it: the file
    /// holds the whole state, so one write of the newest covers every
    /// change before it.
    stale: bool,
    /// The thread is awake for a write (waiting out [`WRITE_GAP`], or
    /// writing): a new change needs no wake-up.
    busy: bool,
    /// The thread ends once the queue is empty.
    stop: bool,
}

/// The least time between two in-place writes: a change after a quiet
/// spell is written at once, and a burst (a slot's move every
/// millisecond, each changing every node) in one write per gap, its
/// newest text. One write and wake-up of the thread per change cost the
/// nodes 12-16% more CPU in a move than writing on the worker did.
const WRITE_GAP: std::time::Duration = std::time::Duration::from_millis(5);

impl ConfigFile {
    fn start(path: PathBuf) -> Arc<Self> {
        let file = Arc::new(ConfigFile {
            path,
            disk: Mutex::new(Disk::default()),
            queue: Mutex::new(Queue::default()),
            wake: parking_lot::Condvar::new(),
            render: OnceLock::new(),
            error: Mutex::new(None),
            versions: AtomicU64::new(0),
        });
        let thread_file = file.clone();
        let spawned = std::thread::Builder::new()
            .name("turnstile-cluster-file".into())
            .spawn(move || thread_file.run());
        if let Err(e) = spawned {
            // Without its thread the file is written by the caller, as
            // an epoch's is.
            tracing::warn!("cluster config file: cannot start its writer thread: {e}");
            file.queue.lock().stop = true;
        }
        file
    }

    /// The writer thread: the state's newest text, rendered and
    /// rewritten in place, at most once every [`WRITE_GAP`].
    fn run(&self) {
        crate::util::set_background(true);
        let mut last: Option<std::time::Instant> = None;
        loop {
            {
                let mut q = self.queue.lock();
                loop {
                    if !q.stale {
                        q.busy = false;
                        self.wake.notify_all();
                        if q.stop {
                            return;
                        }
                        self.wake.wait(&mut q);
                        continue;
                    }
                    q.busy = true;
                    let due = last.map(|t| t + WRITE_GAP);
                    match due {
                        // Stopping: written now, the gap is not waited.
                        Some(due) if !q.stop && std::time::Instant::now() < due => {
                            self.wake.wait_until(&mut q, due);
                        }
                        _ => {
                            q.stale = false;
                            break;
                        }
                    }
                }
            }
            // Rendered with no lock of the file held: the state's lock
            // is taken inside, and a change holding it marks the file
            // stale (this queue's lock) before it lets go.
            let Some(stamped) = self.render.get().and_then(|render| render()) else {
                continue;
            };
            self.write_in_place(stamped);
            last = Some(std::time::Instant::now());
        }
    }

    /// The state's text with the next version: called under the state's
    /// lock, so versions follow the changes.
    fn stamp(&self, st: &ClusterState) -> (u64, String) {
        (
            self.versions.fetch_add(1, Ordering::Relaxed) + 1,
            st.config_text(),
        )
    }

    /// An in-place rewrite, timed and its outcome recorded.
    fn write_in_place(&self, (version, text): (u64, String)) {
        let started = std::time::Instant::now();
        let result = self.overwrite(version, &text);
        self.settled(result, started.elapsed(), false);
    }

    /// The state changed: the thread renders and writes it (or, without
    /// one, `render` does now).
    fn mark_stale(&self, render: impl FnOnce() -> (u64, String)) {
        let mut q = self.queue.lock();
        if q.stop {
            drop(q);
            self.write_in_place(render());
            return;
        }
        q.stale = true;
        let asleep = !q.busy;
        drop(q);
        if asleep {
            self.wake.notify_all();
        }
    }

    /// Waits until every change marked so far is written (or failed).
    fn settle(&self) {
        let mut q = self.queue.lock();
        while q.stale || q.busy {
            self.wake.wait(&mut q);
        }
    }

    /// Records how a write went; whether it succeeded.
    fn settled(
        &self,
        result: std::io::Result<()>,
        took: std::time::Duration,
        durable: bool,
    ) -> bool {
        // The bus waits for an epoch's write (it must be on disk before
        // any message carries it): a slow disk stalls this node's gossip,
        // and its peers may count it gone. Say so when it happens.
        if took >= std::time::Duration::from_millis(500) {
            tracing::warn!(
                "cluster: writing the config file took {} ms{}",
                took.as_millis(),
                if durable { " (fsync)" } else { "" }
            );
        }
        let mut err = self.error.lock();
        match result {
            Ok(()) => {
                *err = None;
                true
            }
            Err(e) => {
                tracing::warn!(
                    "could not write the cluster config file {}: {e}",
                    self.path.display()
                );
                *err = Some(e.to_string());
                false
            }
        }
    }

    /// A new file beside the old, fsynced, renamed over it.
    fn replace(&self, version: u64, text: &str) -> std::io::Result<()> {
        use std::io::Write;
        let mut disk = self.disk.lock();
        if disk.closed {
            return Ok(());
        }
        let (mut f, tmp) = crate::store::snapshot::create_temp(&self.path)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        crate::store::snapshot::install(&tmp, &self.path)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // The kept handle named the file just replaced.
        disk.handle = None;
        disk.holds = disk.holds.max(version);
        Ok(())
    }

    /// The file rewritten in place through a kept handle, as Redis 7.0's
    /// `clusterSaveConfig` does: the text padded with newlines to the old
    /// length, then cut to its own. A process killed between the two
    /// leaves blank lines, which the loader skips; a new file per change
    /// (create, rename) cost 2-4 ms each here, most of a slot's move. A
    /// text older than the file's is not written.
    fn overwrite(&self, version: u64, text: &str) -> std::io::Result<()> {
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let mut disk = self.disk.lock();
        if disk.closed || disk.holds >= version {
            return Ok(());
        }
        if disk.handle.is_none() {
            disk.handle = Some(
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .custom_flags(libc::O_NOFOLLOW)
                    .mode(0o600)
                    .open(&self.path)?,
            );
        }
        let f = disk.handle.as_ref().expect("opened above");
        let old = f.metadata()?.len() as usize;
        let mut bytes = text.as_bytes().to_vec();
        if bytes.len() < old {
            bytes.resize(old, b'\n');
        }
        // Cut only what the padding added, as Redis does: most changes
        // keep the length or grow it, and a cut is one more inode update
        // for the journal (a third of a rewrite's system calls).
        let written = f.write_all_at(&bytes, 0).and_then(|()| {
            if text.len() < old {
                f.set_len(text.len() as u64)?;
            }
            Ok(())
        });
        match written {
            Ok(()) => disk.holds = version,
            Err(_) => disk.handle = None,
        }
        written
    }

    /// The node stops: no more writes, the thread ends.
    fn close(&self) {
        let mut disk = self.disk.lock();
        disk.closed = true;
        disk.handle = None;
        drop(disk);
        self.stop();
    }

    fn stop(&self) {
        self.queue.lock().stop = true;
        self.wake.notify_all();
    }
}

/// What a [`batch`](ClusterNode::batch) holds back until it ends; only
/// the thread holding `atomic` reads it.
#[derive(Default)]
struct BatchState {
    depth: Cell<u32>,
    broadcast: Cell<bool>,
}

/// A transaction's hold on the cluster state ([`ClusterNode::batch`]).
pub struct Batch<'a> {
    node: &'a ClusterNode,
    guard: Option<parking_lot::ReentrantMutexGuard<'a, BatchState>>,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let depth = guard.depth.get() - 1;
        guard.depth.set(depth);
        if depth > 0 {
            return;
        }
        let broadcast = guard.broadcast.replace(false);
        // The routing the transaction's commands held back, published
        // before anyone else can change the state.
        self.node.with(|_| ((), Effects::default()));
        drop(guard);
        if broadcast {
            self.node.broadcast();
        }
    }
}

impl Drop for ClusterNode {
    /// A change the file's thread has not written yet (or is writing)
    /// is written here: the thread can no longer render this state. Then
    /// the thread ends. ([`ClusterNode::close`], the server's way out,
    /// has written the file already.)
    fn drop(&mut self) {
        let Some(file) = &self.file else { return };
        let pending = {
            let mut q = file.queue.lock();
            std::mem::take(&mut q.stale) || q.busy
        };
        if pending && !self.closed.load(Ordering::Relaxed) {
            file.write_in_place(file.stamp(self.state.get_mut()));
        }
        file.stop();
    }
}

/// A request's hold on the migration gate.
pub type Gate = parking_lot::ArcRwLockReadGuard<parking_lot::RawRwLock, ()>;

/// `MIGRATE`'s hold on the whole gate.
pub type GateClosed<'a> = parking_lot::RwLockWriteGuard<'a, ()>;

impl ClusterNode {
    pub fn new(state: ClusterState, file: Option<PathBuf>) -> Arc<Self> {
        let routing = Routing::from_state(&state);
        let node = Arc::new(ClusterNode {
            state: Mutex::new(state),
            routing: ArcSwap::from_pointee(routing),
            links: Mutex::new(HashMap::new()),
            next_link: AtomicU64::new(1),
            auth: Mutex::new(None),
            auth_user: Mutex::new(None),
            require: Mutex::new(None),
            refused: AtomicU64::new(0),
            file: file.map(ConfigFile::start),
            lock: Mutex::new(None),
            closed: std::sync::atomic::AtomicBool::new(false),
            host: OnceLock::new(),
            gate: Arc::new(parking_lot::RwLock::new(())),
            atomic: parking_lot::ReentrantMutex::new(BatchState::default()),
        });
        if let Some(file) = &node.file {
            let weak = Arc::downgrade(&node);
            let _ = file.render.set(Box::new(move || {
                let node = weak.upgrade()?;
                let st = node.state.lock();
                if node.closed.load(Ordering::Relaxed) {
                    return None;
                }
                Some(node.file.as_ref()?.stamp(&st))
            }));
        }
        node.with(|_| ((), Effects::default()));
        // The first write is waited for: a file that cannot be written
        // stops the server at its start (`file_error`).
        node.settle();
        node
    }

    /// The node stops: the file written once more, then no more writes
    /// (links still closing may change the state) and its lock let go.
    pub fn close(&self) {
        let st = self.lock_state();
        let _ = self.save(&st, true);
        self.closed.store(true, Ordering::Relaxed);
        if let Some(file) = &self.file {
            file.close();
        }
        *self.lock.lock() = None;
    }

    /// Why the last write of the config file failed, if it did.
    pub fn file_error(&self) -> Option<String> {
        self.file.as_ref().and_then(|f| f.error.lock().clone())
    }

    /// Waits until every change so far is in the config file (or its
    /// write failed): the in-place rewrites run on the file's thread.
    pub fn settle(&self) {
        if let Some(file) = &self.file {
            file.settle();
        }
    }

    /// Keeps the config file's lock for the node's life.
    pub fn hold_lock(&self, lock: std::fs::File) {
        *self.lock.lock() = Some(lock);
    }

    /// Sets what carries out the effects (once, when the server is built).
    pub fn set_host(&self, host: Box<dyn Host>) {
        let _ = self.host.set(host);
    }

    /// [`Host::admits`], through this node's host.
    pub fn admits(&self, user: &str, password: &str) -> bool {
        self.host.get().is_some_and(|h| h.admits(user, password))
    }

    /// Runs `f`, a wait, where it holds up no client ([`Host::off_worker`]).
    fn off_worker(&self, f: &mut dyn FnMut()) {
        match self.host.get() {
            Some(host) => host.off_worker(f),
            None => f(),
        }
    }

    /// The state, as a command takes any lock
    /// ([`crate::util::lock_or_wait_off`]): nearly always free at once; a
    /// longer wait (a change writing an epoch to disk holds it for the
    /// fsync, milliseconds) runs off the worker, whose other clients
    /// would otherwise wait it out with this one.
    pub fn lock_state(&self) -> parking_lot::MutexGuard<'_, ClusterState> {
        crate::util::lock_or_wait_off(
            |d| self.state.try_lock_for(d),
            || self.state.lock(),
            |f| self.off_worker(f),
        )
    }

    /// The hold every change takes first, taken as [`Self::lock_state`].
    fn lock_atomic(&self) -> parking_lot::ReentrantMutexGuard<'_, BatchState> {
        crate::util::lock_or_wait_off(
            |d| self.atomic.try_lock_for(d),
            || self.atomic.lock(),
            |f| self.off_worker(f),
        )
    }

    /// The routing table now: lock-free, for every keyed request.
    pub fn routing(&self) -> arc_swap::Guard<Arc<Routing>> {
        self.routing.load()
    }

    /// Runs `f` on the state, then publishes routing, writes the config
    /// file if the configuration changed, and carries out what `f` asked
    /// once the lock is released: the one way the state changes.
    pub fn with<R>(&self, f: impl FnOnce(&mut ClusterState) -> (R, Effects)) -> R {
        let (r, fx) = {
            let batch = self.lock_atomic();
            let mut st = self.lock_state();
            let epochs =
                |st: &ClusterState| (st.current_epoch, st.last_vote_epoch, st.me().config_epoch);
            let before = epochs(&st);
            let (r, mut fx) = f(&mut st);
            // Inside a batch the routing waits for its end: a request
            // must not see a slot between a transaction's DELSLOTS and
            // its ADDSLOTS.
            if st.changed && batch.depth.get() == 0 {
                let routing = Routing::from_state(&st);
                if routing.ok != self.routing.load().ok {
                    if routing.ok {
                        tracing::info!("cluster state changed: ok");
                    } else {
                        tracing::warn!(
                            "cluster state changed: fail (a slot unassigned or served by a failing node)"
                        );
                    }
                }
                self.routing.store(Arc::new(routing));
                st.changed = false;
            }
            if st.save_needed {
                st.save_needed = false;
                // Epochs are what the cluster's safety rests on (a vote or
                // an epoch reused after a crash could give a slot two
                // owners): a change to them reaches the disk before the
                // reply, as Redis fsyncs then. Other changes (slots,
                // roles, addresses) are written whole but not waited for,
                // as Redis writes them: gossip brings them back.
                let durable = epochs(&st) != before;
                if !self.save(&st, durable) && durable {
                    // An epoch or a vote not on disk must not leave this
                    // node: after a crash it could be given again, and a
                    // slot could get two owners. Redis exits here; this
                    // node keeps serving and says nothing until a write
                    // succeeds (the next change retries it).
                    tracing::error!(
                        "cluster: an epoch change could not be saved; its messages are held back"
                    );
                    fx.send.clear();
                }
            }
            (r, fx)
        };
        self.dispatch(fx);
        r
    }

    /// Writes the config file now (`CLUSTER SAVECONFIG`).
    pub fn save_now(&self) -> Result<(), String> {
        let st = self.lock_state();
        let _ = self.save(&st, true);
        match self.file_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes the config file: `durable` (an epoch changed) as a new file,
    /// fsynced and renamed over the old, so that a power loss keeps it,
    /// before this returns; else marked stale for the file's thread to
    /// render and rewrite in place, which a killed process cannot tear. Whether it reached
    /// the file (or there is none to write; a rewrite in place counts as
    /// done: its failure is recorded when it happens).
    fn save(&self, st: &ClusterState, durable: bool) -> bool {
        let Some(file) = &self.file else { return true };
        if self.closed.load(Ordering::Relaxed) {
            return true;
        }
        if !durable {
            file.mark_stale(|| file.stamp(st));
            return true;
        }
        let (version, text) = file.stamp(st);
        let started = std::time::Instant::now();
        // The caller still waits for it (the epoch reaches the disk
        // before any message or reply carries it); only the worker's
        // other clients stop waiting with it.
        let mut replaced = None;
        let mut write = || replaced = Some(file.replace(version, &text));
        match self.host.get() {
            Some(host) => host.off_worker(&mut write),
            None => write(),
        }
        let result = replaced.unwrap_or_else(|| file.replace(version, &text));
        file.settled(result, started.elapsed(), true)
    }

    fn dispatch(&self, fx: Effects) {
        for link in &fx.close {
            // Dropping the sender ends the link's task.
            self.remove_link(*link);
        }
        if !fx.send.is_empty() {
            let links = self.links.lock();
            for (link, m) in &fx.send {
                if let Some(tx) = links.get(link) {
                    let _ = tx.send(m.clone());
                }
            }
        }
        if fx.follow.is_some() || !fx.dirty_slots.is_empty() {
            if let Some(h) = self.host.get() {
                h.apply(&fx);
            }
        }
    }

    /// Takes the migration gate whole for a `MIGRATE`, as a command takes
    /// any lock ([`crate::util::lock_or_wait_off`]): requests hold it
    /// shared for the moment they run, so it is nearly always free at
    /// once; a longer wait runs through `off`.
    pub fn close_gate(&self, off: &mut dyn FnMut(&mut dyn FnMut())) -> GateClosed<'_> {
        crate::util::lock_or_wait_off(|d| self.gate.try_write_for(d), || self.gate.write(), off)
    }

    /// Tells every node this node's configuration now (after a command
    /// changed its slots or epoch), rather than at the next PING.
    pub fn broadcast(&self) {
        {
            let batch = self.lock_atomic();
            if batch.depth.get() > 0 {
                batch.broadcast.set(true);
                return;
            }
        }
        self.with(|st| ((), st.broadcast_pong(now_ms())));
    }

    /// Holds the state for a transaction's commands: other threads' changes
    /// and messages wait, and the routing and any broadcast the commands
    /// ask for go out once, when the batch ends. Taken after the
    /// transaction's other locks (scripts, store shards), which a change
    /// never takes while holding it.
    pub fn batch(&self) -> Batch<'_> {
        let guard = self.lock_atomic();
        guard.depth.set(guard.depth.get() + 1);
        Batch {
            node: self,
            guard: Some(guard),
        }
    }

    /// A link's first message, composed under the same hold as changes.
    pub fn link_up(&self, id: &str, link: LinkId, now: Millis) -> Option<Message> {
        let _batch = self.lock_atomic();
        self.lock_state().link_up(id, link, now)
    }

    pub fn new_link_id(&self) -> LinkId {
        self.next_link.fetch_add(1, Ordering::Relaxed)
    }

    pub fn add_link(&self, link: LinkId, tx: mpsc::UnboundedSender<Message>) {
        self.links.lock().insert(link, tx);
    }

    pub fn remove_link(&self, link: LinkId) {
        self.links.lock().remove(&link);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::bus::Kind;

    /// Bumps the epoch and asks to send a message on link 1: what reaches
    /// the link with the config file at `file`.
    fn bump_and_send(file: PathBuf) -> usize {
        let st = ClusterState::new("a".repeat(40), "127.0.0.1".into(), 7000, 17000, 1000);
        let node = ClusterNode::new(st, Some(file));
        let (tx, mut rx) = mpsc::unbounded_channel();
        node.add_link(1, tx);
        node.with(|st| {
            assert!(st.bump_epoch());
            let m = st.message(Kind::Pong, 0);
            (
                (),
                Effects {
                    send: vec![(1, m)],
                    ..Effects::default()
                },
            )
        });
        std::iter::from_fn(|| rx.try_recv().ok()).count()
    }

    /// A transaction's DELSLOTS and ADDSLOTS are one change: the routing
    /// never shows the slot gone, and another thread's change waits for
    /// the batch's end.
    #[test]
    fn a_batch_is_one_change_for_routing_and_for_other_threads() {
        let mut st = ClusterState::new("a".repeat(40), "127.0.0.1".into(), 7000, 17000, 1000);
        st.add_slots(&[5]).unwrap();
        let node = ClusterNode::new(st, None);
        assert!(node.routing().serves(5));
        let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let batch = node.batch();
        let other = {
            let (node, ran) = (node.clone(), other_ran.clone());
            std::thread::spawn(move || {
                node.with(|_| {
                    ran.store(true, Ordering::SeqCst);
                    ((), Effects::default())
                })
            })
        };
        node.with(|st| (st.del_slots(&[5]).unwrap(), Effects::default()));
        assert!(node.routing().serves(5), "not published mid-batch");
        node.with(|st| (st.add_slots(&[5]).unwrap(), Effects::default()));
        assert!(!other_ran.load(Ordering::SeqCst), "another change waits");
        drop(batch);
        other.join().unwrap();
        assert!(other_ran.load(Ordering::SeqCst));
        assert!(node.routing().serves(5));
        // A change outside a batch is published at once.
        node.with(|st| (st.del_slots(&[5]).unwrap(), Effects::default()));
        assert!(!node.routing().serves(5));
    }

    /// MIGRATE takes a free gate on its thread; a gate a request holds
    /// is waited for off the worker.
    #[test]
    fn a_free_gate_is_taken_on_the_thread_and_a_held_one_waited_for_off_it() {
        let st = ClusterState::new("a".repeat(40), "127.0.0.1".into(), 7000, 17000, 1000);
        let node = ClusterNode::new(st, None);
        let moved = std::cell::Cell::new(0);
        let mut off = |wait: &mut dyn FnMut()| {
            moved.set(moved.get() + 1);
            wait();
        };
        drop(node.close_gate(&mut off));
        assert_eq!(moved.get(), 0);
        let (taken, holding) = std::sync::mpsc::channel();
        let gate = node.gate.clone();
        let release = std::thread::spawn(move || {
            let _held = gate.read();
            taken.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
        });
        holding.recv().unwrap();
        drop(node.close_gate(&mut off));
        assert_eq!(moved.get(), 1);
        release.join().unwrap();
    }

    /// A node whose config file is `nodes.conf` in a fresh directory
    /// named for `tag`: (the directory, the file, the node).
    fn node_on_file(tag: &str) -> (PathBuf, PathBuf, Arc<ClusterNode>) {
        let dir = std::env::temp_dir().join(format!("turnstile-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("nodes.conf");
        let st = ClusterState::new("a".repeat(40), "127.0.0.1".into(), 7000, 17000, 1000);
        let node = ClusterNode::new(st, Some(file.clone()));
        (dir, file, node)
    }

    /// Rewritten in place as the text grows, keeps its length and
    /// shrinks, the file always holds exactly the state's text.
    #[test]
    fn the_file_rewritten_in_place_is_the_state_as_it_grows_and_shrinks() {
        let (dir, file, node) = node_on_file("inplace");
        let mut held: Vec<u16> = Vec::new();
        for slots in [
            vec![1, 3, 5, 7, 9],
            vec![2, 4, 6, 8, 10],
            vec![],
            vec![100],
            vec![11, 13],
        ] {
            node.with(|st| {
                st.del_slots(&held).unwrap();
                st.add_slots(&slots).unwrap();
                ((), Effects::default())
            });
            held = slots;
            node.settle();
            let want = node.state.lock().config_text();
            assert_eq!(std::fs::read_to_string(&file).unwrap(), want);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Records what the node hands to be run off the worker, and what
    /// the file held when it ran.
    struct Recording {
        file: PathBuf,
        ran: Arc<Mutex<Vec<(String, String)>>>,
    }

    impl Host for Recording {
        fn apply(&self, _: &Effects) {}

        fn off_worker(&self, f: &mut dyn FnMut()) {
            let read = || std::fs::read_to_string(&self.file).unwrap_or_default();
            let before = read();
            f();
            self.ran.lock().push((before, read()));
        }
    }

    /// The write that waits for the disk (an epoch changed: a new file,
    /// fsynced) is the one handed off the worker, so that the worker's
    /// other clients do not wait for the fsync; it is done when the change
    /// returns. A slot change, rewritten in place, stays on its thread.
    #[test]
    fn an_fsynced_config_write_runs_off_the_worker() {
        let (dir, file, node) = node_on_file("offworker");
        let ran = Arc::new(Mutex::new(Vec::new()));
        node.set_host(Box::new(Recording {
            file: file.clone(),
            ran: ran.clone(),
        }));
        node.with(|st| (st.add_slots(&[1, 2, 3]).unwrap(), Effects::default()));
        assert!(ran.lock().is_empty(), "an in-place rewrite is not one");
        node.settle();
        let before = std::fs::read_to_string(&file).unwrap();
        node.with(|st| (assert!(st.bump_epoch()), Effects::default()));
        let after = node.state.lock().config_text();
        assert_ne!(before, after);
        assert_eq!(
            *ran.lock(),
            [(before, after.clone())],
            "the new epoch written by what ran off the worker"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), after);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A slot change returns while the file's writer is held up (a disk
    /// that takes nothing: a journal commit, a full queue): the in-place
    /// rewrite, which no one waits for, is no work of the thread that made
    /// the change (a worker serving clients). The file holds the change
    /// once the writer is let go.
    #[test]
    fn an_in_place_config_write_does_not_hold_the_changing_thread() {
        let (dir, file, node) = node_on_file("inplace-off");
        let stuck = node.file.as_ref().unwrap().disk.lock();
        let (done, returned) = std::sync::mpsc::channel();
        let changer = {
            let node = node.clone();
            std::thread::spawn(move || {
                node.with(|st| (st.add_slots(&[1, 2, 3]).unwrap(), Effects::default()));
                let _ = done.send(());
            })
        };
        // A bound on a hang, not a window: the change waits for nothing.
        let waited = returned.recv_timeout(std::time::Duration::from_secs(10));
        drop(stuck);
        changer.join().unwrap();
        assert!(waited.is_ok(), "the change waited for the file's write");
        node.settle();
        let want = node.state.lock().config_text();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), want);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A change the file's thread has not written when the node goes
    /// (dropped, not closed: a test's node, an abandoned start) is
    /// written by the drop: the thread renders the state itself, and can
    /// no longer reach it then.
    #[test]
    fn a_dropped_node_leaves_its_last_change_in_the_file() {
        let (dir, file, node) = node_on_file("drop-conf");
        // The first write (at the start) was just made: the thread waits
        // out its gap before it renders this change, and the node is gone
        // by then (were it not, the thread would write it: the file must
        // hold it either way).
        node.with(|st| (st.add_slots(&[5, 6, 7]).unwrap(), Effects::default()));
        let want = node.state.lock().config_text();
        drop(node);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), want);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Says when the node hands it a wait, then waits.
    struct Signals(std::sync::mpsc::Sender<()>);

    impl Host for Signals {
        fn apply(&self, _: &Effects) {}

        fn off_worker(&self, f: &mut dyn FnMut()) {
            let _ = self.0.send(());
            f();
        }
    }

    /// A change that finds the state held (another change writing an
    /// epoch to disk holds it for the fsync) waits for it off the worker,
    /// whose other clients would otherwise wait out the fsync with it.
    #[test]
    fn a_change_waits_for_a_held_state_off_the_worker() {
        let st = ClusterState::new("a".repeat(40), "127.0.0.1".into(), 7000, 17000, 1000);
        let node = ClusterNode::new(st, None);
        let (tx, handed) = std::sync::mpsc::channel();
        node.set_host(Box::new(Signals(tx)));
        // Free: taken on the thread.
        node.with(|st| (st.add_slots(&[1]).unwrap(), Effects::default()));
        assert!(handed.try_recv().is_err());
        let held = node.state.lock();
        let changer = {
            let node = node.clone();
            std::thread::spawn(move || {
                node.with(|st| (st.add_slots(&[2]).unwrap(), Effects::default()))
            })
        };
        // A bound on a hang, not a window: the wait is handed at once.
        let moved = handed.recv_timeout(std::time::Duration::from_secs(10));
        drop(held);
        changer.join().unwrap();
        assert!(moved.is_ok(), "the wait for the state stayed on the worker");
        assert!(node.routing().serves(2));
    }

    #[test]
    fn an_epoch_that_could_not_be_saved_does_not_leave_the_node() {
        let dir = std::env::temp_dir().join(format!("turnstile-node-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(bump_and_send(dir.join("nodes.conf")), 1);
        // A directory that does not exist: every write fails.
        assert_eq!(bump_and_send(dir.join("missing").join("nodes.conf")), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
