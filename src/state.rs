//! What every command can reach: the keyspace, the clock, the settings that
//! `CONFIG SET` may change, the counters `INFO` reports, and the clients.

use std::net::SocketAddr;

pub use crate::stats::Stats;
use std::sync::Arc;
use std::time::Instant;

use crate::clients::Clients;
use crate::clock::Clock;
use crate::cluster::Topology;
use crate::config::Config;
pub use crate::config::Settings;
use crate::metrics::Metrics;
use crate::store::Store;

/// Server-wide state, shared by every connection.
pub struct State {
    pub store: Arc<Store>,
    pub clock: Arc<dyn Clock>,
    pub settings: Settings,
    pub stats: Stats,
    pub clients: Clients,
    /// The Prometheus recorder and its handles; `None` with
    /// `--metrics-addr off`, which then costs nothing at all.
    pub metrics: Option<Metrics>,
    /// The cluster topology; `None` in standalone mode.
    pub cluster: Option<Topology>,
    /// This node in a cluster that grows (`--cluster-enabled yes`).
    pub cluster_node: Option<Arc<crate::cluster::node::ClusterNode>>,
    /// `--rename-command`s in force.
    pub renames: Renames,
    /// Time every command for the latency histogram (metrics are on).
    pub time_commands: bool,
    pub started: Instant,
    /// The address actually bound (the port is real even with `--port 0`).
    pub addr: SocketAddr,
    pub run_id: String,
    /// Who this server follows and who follows it (`ROLE`, `INFO
    /// replication`, `WAIT`, `REPLICAOF`).
    pub replication: crate::replication::Replication,
    /// `--config`: the file `CONFIG REWRITE` writes the live settings to.
    pub config_file: Option<std::path::PathBuf>,
    /// `--requirepass-file` is in use: `CONFIG REWRITE` writes no password.
    pub password_from_file: bool,
    /// The TLS port actually bound, with `--tls-port`.
    pub tls_port: Option<u16>,
    /// `--snapshot`: where and how often, and how the last one went.
    /// Shared with `SAVE`'s blocking thread (`server/connection.rs`).
    pub persist: Option<Arc<crate::persist::Persist>>,
    /// The append-only file (`--appendonly`), on or off; its writer thread
    /// is `server/aof.rs`.
    pub aof: Arc<crate::persist::aof::Aof>,
    /// The Lua engine and its script cache, shared by every connection.
    pub scripts: crate::script::Engine,
    /// `--policies`: the named limits in force, and their reloading.
    pub policies: Arc<crate::policy::Policies>,
    /// Pub/Sub channels and patterns, and their subscribers.
    pub pubsub: crate::pubsub::PubSub,
    /// Connections `MIGRATE` keeps to its targets between calls.
    pub migrate_sockets: crate::util::sockets::SocketCache,
    /// The ACL users; `default`'s password is `requirepass`.
    pub acl: crate::acl::Acl,
    /// A client's `SHUTDOWN`: raised here, seen by the holder of the
    /// server's handle, which stops the server as SIGTERM does.
    pub shutdown: Shutdown,
}

/// What the server's stop does with the final snapshot (`--snapshot`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalSnapshot {
    /// Write it (SIGTERM, SIGINT).
    Write,
    /// `SHUTDOWN` wrote it before it let go of its client: write it again
    /// only if anything was written since, so a write answered in between
    /// is not lost, and it is not written twice for nothing.
    IfChanged,
    /// `SHUTDOWN NOSAVE`, or `FORCE` after a save that failed.
    Skip,
}

/// `SHUTDOWN`'s requests, kept where commands reach them (the command
/// layer does not see the server): the command raises the stop here, and
/// `ServerHandle::shutdown_requested` resolves on it.
#[derive(Debug)]
pub struct Shutdown {
    requested: tokio::sync::watch::Sender<Option<FinalSnapshot>>,
    /// `SHUTDOWN`s waiting for their replicas: what `SHUTDOWN ABORT`
    /// cancels.
    waiting: std::sync::atomic::AtomicUsize,
    /// Bumped by each `SHUTDOWN ABORT` that found a wait.
    aborts: tokio::sync::watch::Sender<u64>,
}

impl Default for Shutdown {
    fn default() -> Shutdown {
        Shutdown {
            requested: tokio::sync::watch::Sender::new(None),
            waiting: Default::default(),
            aborts: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Shutdown {
    /// Asks the server to stop; the first request's snapshot choice stands.
    pub fn request(&self, snapshot: FinalSnapshot) {
        self.requested.send_if_modified(|r| {
            let first = r.is_none();
            if first {
                *r = Some(snapshot);
            }
            first
        });
    }

    /// The stop a `SHUTDOWN` asked for, if one did.
    pub fn requested(&self) -> Option<FinalSnapshot> {
        *self.requested.borrow()
    }

    /// Resolves once a `SHUTDOWN` asked the server to stop.
    pub async fn wait_requested(&self) -> FinalSnapshot {
        let mut rx = self.requested.subscribe();
        let got = rx.wait_for(Option::is_some).await;
        // The sender lives in `self`: it cannot close while borrowed.
        got.map_or(FinalSnapshot::Write, |r| r.unwrap_or(FinalSnapshot::Write))
    }

    /// A `SHUTDOWN` starts waiting for its replicas; the guard ends the
    /// wait. Returns the abort count to watch, with the guard.
    pub fn begin_wait(&self) -> (WaitGuard<'_>, tokio::sync::watch::Receiver<u64>) {
        use std::sync::atomic::Ordering;
        let rx = self.aborts.subscribe();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        (WaitGuard(self), rx)
    }

    /// `SHUTDOWN ABORT`: cancels every wait in progress; false if there
    /// was none.
    pub fn abort(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return false;
        }
        self.aborts.send_modify(|n| *n += 1);
        true
    }
}

/// A `SHUTDOWN` waiting for its replicas ([`Shutdown::begin_wait`]).
pub struct WaitGuard<'a>(&'a Shutdown);

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.0
            .waiting
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What a setting's apply step reaches (`config::table`).
impl crate::config::table::Services for State {
    fn settings(&self) -> &Settings {
        &self.settings
    }
    fn aof(&self) -> &crate::persist::aof::Aof {
        &self.aof
    }
    fn acl(&self) -> &crate::acl::Acl {
        &self.acl
    }
}

impl State {
    /// Bytes a write may still allocate under `--maxmemory` (unbounded
    /// without one): what a log ring may grow by, checked before it grows.
    /// Whether this node is in a cluster (static or growing): keys must
    /// hash to one slot, and scripts may touch only local keys.
    pub fn in_cluster(&self) -> bool {
        self.cluster.is_some() || self.cluster_node.is_some()
    }

    /// Whether this node serves `slot` now (always, outside a cluster).
    pub fn serves_slot(&self, slot: u16) -> bool {
        if let Some(t) = &self.cluster {
            return t.owner(slot).is_some_and(|(i, _)| i == t.me);
        }
        if let Some(n) = &self.cluster_node {
            return n.routing().serves(slot);
        }
        true
    }

    pub fn write_room(&self) -> usize {
        match self.settings.get(&self.settings.maxmemory) {
            0 => usize::MAX,
            max => usize::try_from(max)
                .unwrap_or(usize::MAX)
                .saturating_sub(crate::alloc::used_memory()),
        }
    }

    /// What a scrape and `/status.json` read from the state.
    pub fn readings(&self) -> crate::metrics::Readings<'_> {
        self.readings_with(self.store.counts())
    }

    /// What `INFO` reads, with `keys` counted through the command's view
    /// of the keyspace: inside `EXEC` the transaction holds every shard,
    /// and counting through the store would wait for it forever.
    pub fn readings_with(&self, keys: crate::store::Counts) -> crate::metrics::Readings<'_> {
        crate::metrics::Readings {
            stats: &self.stats,
            backward_steps: self.clock.backward_steps(),
            forward_steps: self.clock.forward_steps(),
            expired: self.store.expired_count(),
            evicted: self.store.evicted_count(),
            keys,
            // As Redis counts them: replicas are not clients here.
            clients: self
                .clients
                .len()
                .saturating_sub(self.replication.connected()),
            maxclients: self.settings.get(&self.settings.maxclients),
            maxmemory: self.settings.get(&self.settings.maxmemory),
            uptime: self.started.elapsed(),
            persist: self.persist.as_deref(),
            aof: &self.aof,
            scripts_cached: self.scripts.len(),
            scripts_evicted: self.scripts.evictions(),
            lua_memory: self.scripts.used_memory(),
            pubsub: [self.pubsub.channel_count(), self.pubsub.pattern_count()],
            policies: &self.policies,
            lapsed_leases: self.store.lapsed_leases(),
            replication: &self.replication,
            repl_offset: self.store.effects.offset(),
            now_ms: self.clock.now().as_millis(),
            cluster: self.cluster_node.as_ref().map(|n| {
                let now = crate::cluster::node::now_ms();
                let st = n.lock_state();
                crate::metrics::ClusterReadings {
                    ok: st.state_ok(now),
                    known_nodes: st.nodes.values().filter(|n| !n.in_handshake()).count(),
                    current_epoch: st.current_epoch,
                    failovers_won: st.election.won,
                    messages_sent: st.messages_sent,
                    messages_received: st.messages_received,
                }
            }),
        }
    }

    /// The state of a server whose command table `catalog` describes.
    pub fn new(
        config: &Config,
        password: Option<Vec<u8>>,
        clock: Arc<dyn Clock>,
        addr: SocketAddr,
        catalog: &crate::stats::Catalog,
    ) -> Self {
        State {
            store: Arc::new(Store::default()),
            clock,
            acl: crate::acl::Acl::new(password.as_deref()),
            settings: Settings::new(config, password),
            stats: Stats::with_top(
                catalog,
                crate::stats::top::Top::new(config.top_keys, config.top_window, config.top_sample),
                crate::metrics::table::counters(),
            ),
            clients: Clients::default(),
            metrics: config.metrics_enabled().then(|| Metrics::new(catalog)),
            cluster: None,
            cluster_node: None,
            renames: Renames::default(),
            time_commands: config.metrics_enabled(),
            started: Instant::now(),
            addr,
            run_id: crate::replication::new_id(),
            replication: crate::replication::Replication::new(crate::replication::new_id()),
            config_file: config.config.clone(),
            password_from_file: config.requirepass.is_none() && config.requirepass_file.is_some(),
            tls_port: None,
            persist: config
                .snapshot
                .clone()
                .map(|path| Arc::new(crate::persist::Persist::new(path, config.snapshot_interval))),
            aof: {
                let aof = crate::persist::aof::Aof::new(config.aof_path());
                aof.set_fsync(config.appendfsync);
                Arc::new(aof)
            },
            scripts: crate::script::Engine::new(crate::script::EngineConfig {
                busy_threshold: std::time::Duration::from_millis(config.lua_time_limit),
                // One Lua state per worker thread, and one for a thread
                // outside the pool (a blocking section's stand-in).
                states: config.worker_threads() + 1,
                ..Default::default()
            }),
            policies: Arc::new(crate::policy::Policies::empty(config.policies_shadow)),
            pubsub: crate::pubsub::PubSub::default(),
            migrate_sockets: Default::default(),
            shutdown: Shutdown::default(),
        }
    }

    /// Asks for the policy files to be read again (`RL.POLICY RELOAD`,
    /// SIGHUP, the watcher), on the reload thread, stamped with server
    /// time; `Policies::reloaded` waits for the outcome.
    pub fn reload_policies(&self) -> Result<crate::policy::Ticket, crate::policy::ReloadError> {
        self.policies.request_reload(self.policy_load_args())
    }

    /// What a policy load reads with now.
    pub fn policy_load_args(&self) -> crate::policy::LoadArgs {
        crate::policy::LoadArgs {
            now_ms: self.clock.now().as_millis(),
            max_file_size: self.settings.get(&self.settings.policies_max_file_size),
        }
    }
}

/// `--rename-command`'s table, built and read by the command layer
/// (`cmd/registry/rename.rs`): the lower-case name a client sends -> the position of
/// the command it runs in the command table, or `None` for an original name
/// renamed away or disabled. Empty: every command under its own name.
#[derive(Debug, Default)]
pub struct Renames {
    pub by_name: std::collections::HashMap<Vec<u8>, Option<usize>>,
}

impl Renames {
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}
