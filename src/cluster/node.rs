//! This node's membership in a growing cluster: its [`ClusterState`]
//! behind one lock, the routing table published from it for the request
//! path to read without that lock, the bus links' send queues, and the
//! config file written whenever the state changes. Commands (`CLUSTER
//! ...`) and the bus (`server/cluster_bus.rs`) both change the state
//! through [`ClusterNode::with`].

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
}

/// This node in its cluster.
pub struct ClusterNode {
    pub state: Mutex<ClusterState>,
    routing: ArcSwap<Routing>,
    links: Mutex<HashMap<LinkId, mpsc::UnboundedSender<Message>>>,
    next_link: AtomicU64,
    /// The password this node sends in its Hello.
    pub auth: Mutex<Option<String>>,
    /// The password a peer's Hello must carry.
    pub require: Mutex<Option<String>>,
    /// Links refused for a wrong or missing password.
    pub refused: AtomicU64,
    /// `--cluster-config-file`, rewritten on every change.
    file: Option<PathBuf>,
    /// Why the last write of the file failed, if it did.
    pub file_error: Mutex<Option<String>>,
    /// The file, kept open for in-place rewrites.
    handle: Mutex<Option<std::fs::File>>,
    host: OnceLock<Box<dyn Host>>,
    /// Orders requests on a slot being moved against `MIGRATE`: a request
    /// that found its keys here holds it (shared) until it has run, and
    /// `MIGRATE` takes it whole before it reads a key, so no request can
    /// find a key present, wait while it moves, then create it afresh.
    pub gate: Arc<parking_lot::RwLock<()>>,
}

/// A request's hold on the migration gate.
pub type Gate = parking_lot::ArcRwLockReadGuard<parking_lot::RawRwLock, ()>;

impl ClusterNode {
    pub fn new(state: ClusterState, file: Option<PathBuf>) -> Arc<Self> {
        let routing = Routing::from_state(&state);
        let node = Arc::new(ClusterNode {
            state: Mutex::new(state),
            routing: ArcSwap::from_pointee(routing),
            links: Mutex::new(HashMap::new()),
            next_link: AtomicU64::new(1),
            auth: Mutex::new(None),
            require: Mutex::new(None),
            refused: AtomicU64::new(0),
            file,
            file_error: Mutex::new(None),
            handle: Mutex::new(None),
            host: OnceLock::new(),
            gate: Arc::new(parking_lot::RwLock::new(())),
        });
        node.with(|_| ((), Effects::default()));
        node
    }

    /// Sets what carries out the effects (once, when the server is built).
    pub fn set_host(&self, host: Box<dyn Host>) {
        let _ = self.host.set(host);
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
            let mut st = self.state.lock();
            let epochs =
                |st: &ClusterState| (st.current_epoch, st.last_vote_epoch, st.me().config_epoch);
            let before = epochs(&st);
            let (r, fx) = f(&mut st);
            if st.changed {
                self.routing.store(Arc::new(Routing::from_state(&st)));
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
                self.save(&st, epochs(&st) != before);
            }
            (r, fx)
        };
        self.dispatch(fx);
        r
    }

    /// Writes the config file now (`CLUSTER SAVECONFIG`).
    pub fn save_now(&self) -> Result<(), String> {
        let st = self.state.lock();
        self.save(&st, true);
        match self.file_error.lock().clone() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes the config file: `durable` (an epoch changed) as a new file,
    /// fsynced and renamed over the old, so that a power loss keeps it;
    /// else rewritten in place, which a killed process cannot tear.
    fn save(&self, st: &ClusterState, durable: bool) {
        let Some(path) = &self.file else { return };
        let text = st.config_text();
        let result = if durable {
            self.replace(path, &text)
        } else {
            self.overwrite(path, &text)
        };
        let mut err = self.file_error.lock();
        match result {
            Ok(()) => *err = None,
            Err(e) => {
                tracing::warn!(
                    "could not write the cluster config file {}: {e}",
                    path.display()
                );
                *err = Some(e.to_string());
            }
        }
    }

    /// A new file beside the old, fsynced, renamed over it.
    fn replace(&self, path: &std::path::Path, text: &str) -> std::io::Result<()> {
        use std::io::Write;
        let (mut f, tmp) = crate::store::snapshot::create_temp(path)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        crate::store::snapshot::install(&tmp, path)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // The kept handle named the file just replaced.
        *self.handle.lock() = None;
        Ok(())
    }

    /// The file rewritten in place through a kept handle, as Redis 7.0's
    /// `clusterSaveConfig` does: the text padded with newlines to the old
    /// length, then cut to its own. A process killed between the two
    /// leaves blank lines, which the loader skips; a new file per change
    /// (create, rename) cost 2-4 ms each here, most of a slot's move.
    fn overwrite(&self, path: &std::path::Path, text: &str) -> std::io::Result<()> {
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let mut handle = self.handle.lock();
        if handle.is_none() {
            *handle = Some(
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .custom_flags(libc::O_NOFOLLOW)
                    .mode(0o600)
                    .open(path)?,
            );
        }
        let f = handle.as_ref().expect("opened above");
        let old = f.metadata()?.len() as usize;
        let mut bytes = text.as_bytes().to_vec();
        if bytes.len() < old {
            bytes.resize(old, b'\n');
        }
        let written = f
            .write_all_at(&bytes, 0)
            .and_then(|()| f.set_len(text.len() as u64));
        if written.is_err() {
            *handle = None;
        }
        written
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

    /// Tells every node this node's configuration now (after a command
    /// changed its slots or epoch), rather than at the next PING.
    pub fn broadcast(&self) {
        self.with(|st| ((), st.broadcast_pong(now_ms())));
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
