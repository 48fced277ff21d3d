//! What every command can reach: the keyspace, the clock, the settings that
//! `CONFIG SET` may change, the counters `INFO` reports, and the clients.

use parking_lot::RwLock;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

pub use crate::stats::Stats;
use std::sync::Arc;
use std::time::Instant;

use crate::clients::Clients;
use crate::clock::Clock;
use crate::cluster::Topology;
use crate::config::{Config, MaxmemoryPolicy, OutputLimit, OutputLimits};
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
}

impl State {
    /// Bytes a write may still allocate under `--maxmemory` (unbounded
    /// without one): what a log ring may grow by, checked before it grows.
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
            settings: Settings::new(config, password),
            stats: Stats::with_top(
                catalog,
                crate::stats::top::Top::new(config.top_keys, config.top_window, config.top_sample),
                crate::metrics::table::counters(),
            ),
            clients: Clients::default(),
            metrics: config.metrics_enabled().then(|| Metrics::new(catalog)),
            cluster: None,
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
            aof: Arc::new(crate::persist::aof::Aof::new(config.aof_path())),
            scripts: crate::script::Engine::new(crate::script::EngineConfig {
                busy_threshold: std::time::Duration::from_millis(config.lua_time_limit),
                // One Lua state per worker thread, and one for a thread
                // outside the pool (a blocking section's stand-in).
                states: config.worker_threads() + 1,
                ..Default::default()
            }),
            policies: Arc::new(crate::policy::Policies::empty(config.policies_shadow)),
            pubsub: crate::pubsub::PubSub::default(),
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

/// The password and its digest, taken once when it is set.
struct Password {
    text: Arc<[u8]>,
    digest: [u8; 32],
}

impl Password {
    /// `None` for an empty password (none).
    fn new(text: &[u8]) -> Option<Password> {
        if text.is_empty() {
            return None;
        }
        let mut digest = [0; 32];
        digest.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, text).as_ref());
        Some(Password {
            text: text.into(),
            digest,
        })
    }
}

/// Settings readable on every request and changeable by `CONFIG SET`.
pub struct Settings {
    pub maxclients: AtomicU64,
    pub timeout_secs: AtomicU64,
    pub proto_max_bulk_len: AtomicU64,
    pub client_query_buffer_limit: AtomicU64,
    pub protected_mode: AtomicBool,
    pub maxmemory: AtomicU64,
    /// `--client-output-buffer-limit`: hard, soft, soft seconds.
    pub output_hard: AtomicU64,
    pub output_soft: AtomicU64,
    pub output_soft_seconds: AtomicU64,
    /// Its `replica` class: hard, soft, soft seconds.
    pub replica_output_hard: AtomicU64,
    pub replica_output_soft: AtomicU64,
    pub replica_output_soft_seconds: AtomicU64,
    /// `--repl-timeout`, seconds.
    pub repl_timeout_secs: AtomicU64,
    /// `MaxmemoryPolicy::index()`.
    pub maxmemory_policy: AtomicU8,
    /// `--lua-time-limit`, in milliseconds.
    pub lua_time_limit_ms: AtomicU64,
    /// `--scripts-native`: catalogued scripts run in Rust.
    pub scripts_native: AtomicBool,
    requirepass: RwLock<Option<Password>>,
    pub bind: String,
    /// `--repl-backlog-size`, bytes.
    pub repl_backlog_size: AtomicU64,
    /// `--repl-ping-replica-period`, seconds.
    pub repl_ping_replica_period: AtomicU64,
    /// `--replica-priority`, `--replica-announce-port`.
    pub replica_priority: AtomicU64,
    pub replica_announce_port: AtomicU64,
    /// `--masterauth`, `--masteruser`, `--replica-announce-ip`.
    pub masterauth: RwLock<Option<String>>,
    pub masteruser: RwLock<Option<String>>,
    pub replica_announce_ip: RwLock<Option<String>>,
    /// `--policies-max-file-size`, bytes.
    pub policies_max_file_size: AtomicU64,
    /// `--appendonly`, `--appendfsync` (`Fsync as u8`),
    /// `--auto-aof-rewrite-percentage`, `--auto-aof-rewrite-min-size`
    /// (bytes), `--aof-load-truncated`; the writer thread follows them.
    pub appendonly: AtomicBool,
    pub appendfsync: AtomicU8,
    pub auto_aof_rewrite_percentage: AtomicU64,
    pub auto_aof_rewrite_min_size: AtomicU64,
    pub aof_load_truncated: AtomicBool,
    /// `--rls-maxclients`, `--rls-handshake-timeout` and
    /// `--rls-idle-timeout` (ms): read at each connection.
    pub rls_maxclients: AtomicU64,
    pub rls_handshake_timeout_ms: AtomicU64,
    pub rls_idle_timeout_ms: AtomicU64,
    /// `--rls-max-message-size` and `--rls-max-concurrent-streams`: fixed
    /// when the service starts.
    pub rls_max_message_size: u64,
    pub rls_max_concurrent_streams: u32,
}

impl Settings {
    pub(crate) fn new(config: &Config, password: Option<Vec<u8>>) -> Self {
        Settings {
            maxclients: AtomicU64::new(config.maxclients),
            timeout_secs: AtomicU64::new(config.timeout),
            proto_max_bulk_len: AtomicU64::new(config.proto_max_bulk_len),
            client_query_buffer_limit: AtomicU64::new(config.client_query_buffer_limit),
            protected_mode: AtomicBool::new(config.protected_mode),
            maxmemory: AtomicU64::new(config.maxmemory),
            output_hard: AtomicU64::new(config.client_output_buffer_limit.normal.hard),
            output_soft: AtomicU64::new(config.client_output_buffer_limit.normal.soft),
            output_soft_seconds: AtomicU64::new(
                config.client_output_buffer_limit.normal.soft_seconds,
            ),
            replica_output_hard: AtomicU64::new(config.client_output_buffer_limit.replica.hard),
            replica_output_soft: AtomicU64::new(config.client_output_buffer_limit.replica.soft),
            replica_output_soft_seconds: AtomicU64::new(
                config.client_output_buffer_limit.replica.soft_seconds,
            ),
            repl_timeout_secs: AtomicU64::new(config.repl_timeout),
            maxmemory_policy: AtomicU8::new(config.maxmemory_policy.index()),
            lua_time_limit_ms: AtomicU64::new(config.lua_time_limit),
            scripts_native: AtomicBool::new(config.scripts_native),
            requirepass: RwLock::new(password.as_deref().and_then(Password::new)),
            bind: config.bind.clone(),
            repl_backlog_size: AtomicU64::new(config.repl_backlog_size),
            repl_ping_replica_period: AtomicU64::new(config.repl_ping_replica_period),
            replica_priority: AtomicU64::new(config.replica_priority),
            replica_announce_port: AtomicU64::new(config.replica_announce_port),
            masterauth: RwLock::new(config.masterauth.clone()),
            masteruser: RwLock::new(config.masteruser.clone()),
            replica_announce_ip: RwLock::new(config.replica_announce_ip.clone()),
            policies_max_file_size: AtomicU64::new(config.policies_max_file_size),
            appendonly: AtomicBool::new(config.appendonly),
            appendfsync: AtomicU8::new(config.appendfsync as u8),
            auto_aof_rewrite_percentage: AtomicU64::new(config.auto_aof_rewrite_percentage),
            auto_aof_rewrite_min_size: AtomicU64::new(config.auto_aof_rewrite_min_size),
            aof_load_truncated: AtomicBool::new(config.aof_load_truncated),
            rls_maxclients: AtomicU64::new(config.rls_maxclients),
            rls_handshake_timeout_ms: AtomicU64::new(config.rls_handshake_timeout),
            rls_idle_timeout_ms: AtomicU64::new(config.rls_idle_timeout),
            rls_max_message_size: config.rls_max_message_size,
            rls_max_concurrent_streams: config.rls_max_concurrent_streams,
        }
    }

    /// Why the server is open to the network without protection, if it
    /// is: it listens beyond loopback with protected mode off and no
    /// password. Computed live (`CONFIG SET` changes both), for the
    /// start-up warning and `INFO`'s `security_warning`.
    pub fn exposure(&self, listening: std::net::IpAddr) -> Option<String> {
        let open = !listening.is_loopback()
            && !self.protected_mode.load(Ordering::Relaxed)
            && self.password().is_none();
        open.then(|| {
            format!(
                "listening on {listening} with protected mode off and no password: anyone who can reach the port can lift every limit (set --requirepass-file, or bind to 127.0.0.1)"
            )
        })
    }

    pub fn password(&self) -> Option<Arc<[u8]>> {
        self.requirepass.read().as_ref().map(|p| p.text.clone())
    }

    pub fn set_password(&self, p: Option<&[u8]>) {
        *self.requirepass.write() = p.and_then(Password::new);
    }

    /// Whether `guess` is the password, in time that depends on neither
    /// how much of it is right nor the password's length: SHA-256 digests
    /// are compared in constant time, the password's computed when it was
    /// set (comparing the bytes would take time in proportion to the
    /// password's length: 25 us for 15,000 bytes). `None` if there is no
    /// password.
    pub fn password_matches(&self, guess: &[u8]) -> Option<bool> {
        use subtle::ConstantTimeEq;
        let stored = self.requirepass.read();
        let p = stored.as_ref()?;
        let digest = ring::digest::digest(&ring::digest::SHA256, guess);
        Some(digest.as_ref().ct_eq(&p.digest).into())
    }

    pub fn output_limit(&self) -> OutputLimit {
        self.output_limits().normal
    }

    /// Every class of `--client-output-buffer-limit`.
    pub fn output_limits(&self) -> OutputLimits {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let class = |[hard, soft, secs]: [&AtomicU64; 3]| OutputLimit {
            hard: load(hard),
            soft: load(soft),
            soft_seconds: load(secs),
        };
        OutputLimits {
            normal: class(self.output_class(false)),
            replica: class(self.output_class(true)),
        }
    }

    /// `CONFIG SET client-output-buffer-limit`.
    pub fn set_output_limits(&self, limits: OutputLimits) {
        for (replica, l) in [(false, limits.normal), (true, limits.replica)] {
            let [hard, soft, secs] = self.output_class(replica);
            hard.store(l.hard, Ordering::Relaxed);
            soft.store(l.soft, Ordering::Relaxed);
            secs.store(l.soft_seconds, Ordering::Relaxed);
        }
    }

    /// One class's atomics: hard, soft, soft seconds.
    fn output_class(&self, replica: bool) -> [&AtomicU64; 3] {
        match replica {
            false => [
                &self.output_hard,
                &self.output_soft,
                &self.output_soft_seconds,
            ],
            true => [
                &self.replica_output_hard,
                &self.replica_output_soft,
                &self.replica_output_soft_seconds,
            ],
        }
    }

    pub fn policy(&self) -> MaxmemoryPolicy {
        MaxmemoryPolicy::from_index(self.maxmemory_policy.load(Ordering::Relaxed))
    }

    pub fn get(&self, a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_compare_by_digest() {
        let settings = Settings::new(&Config::default(), Some(b"s3cret".to_vec()));
        assert_eq!(settings.password_matches(b"s3cret"), Some(true));
        for wrong in [&b""[..], b"s3cre", b"s3cret!", b"S3CRET", &[b'x'; 15_000]] {
            assert_eq!(settings.password_matches(wrong), Some(false), "{wrong:?}");
        }
        settings.set_password(Some(b""));
        assert_eq!(settings.password_matches(b""), None);
        assert!(settings.password().is_none());
        settings.set_password(Some(b"new"));
        assert_eq!(settings.password_matches(b"new"), Some(true));
        assert_eq!(settings.password().as_deref(), Some(&b"new"[..]));
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
