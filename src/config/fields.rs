//! The server's settings as it starts, one field each.

use std::path::PathBuf;

use super::values::{MaxmemoryPolicy, OutputLimits};

/// Declares [`Config`] and `Config::blank`, every field at its type's
/// default, which the parsed values then fill.
macro_rules! config {
    ($(#[$m:meta])* pub struct Config { $($f:ident: $t:ty,)* }) => {
        $(#[$m])*
        pub struct Config { $(pub $f: $t,)* }

        impl Config {
            pub(super) fn blank() -> Config {
                Config { $($f: Default::default(),)* }
            }
        }
    };
}

config! {
    /// The server's settings as it starts: one field for each setting in
    /// `SETTINGS` (`config/rows.rs`) (whose row says what it means), in its type.
    #[derive(Debug, Clone)]
    pub struct Config {
        config: Option<PathBuf>,
        bind: String,
        port: u16,
        threads: usize,
        requirepass: Option<String>,
        requirepass_file: Option<PathBuf>,
        aclfile: Option<PathBuf>,
        user: Vec<String>,
        protected_mode: bool,
        rename_command: Vec<String>,
        tls_port: Option<u16>,
        tls_cert_file: Option<PathBuf>,
        tls_key_file: Option<PathBuf>,
        tls_ca_cert_file: Option<PathBuf>,
        tls_replication: bool,
        maxclients: u64,
        timeout: u64,
        proto_max_bulk_len: u64,
        client_query_buffer_limit: u64,
        maxmemory: u64,
        maxmemory_policy: MaxmemoryPolicy,
        client_output_buffer_limit: OutputLimits,
        snapshot: Option<PathBuf>,
        snapshot_interval: std::time::Duration,
        appendonly: bool,
        appendfsync: crate::persist::aof::Fsync,
        appendfilename: String,
        auto_aof_rewrite_percentage: u64,
        auto_aof_rewrite_min_size: u64,
        aof_load_truncated: bool,
        replicaof: Option<(String, u16)>,
        masterauth: Option<String>,
        masteruser: Option<String>,
        repl_backlog_size: u64,
        repl_timeout: u64,
        repl_ping_replica_period: u64,
        replica_announce_ip: Option<String>,
        replica_announce_port: u64,
        replica_priority: u64,
        cluster_enabled: bool,
        cluster_config_file: PathBuf,
        cluster_node_timeout: u64,
        cluster_port: u64,
        cluster_announce_ip: Option<String>,
        cluster_announce_port: u64,
        cluster_announce_bus_port: u64,
        cluster_nodes: Option<String>,
        cluster_sentinels: Vec<(String, u16)>,
        cluster_announce: Option<String>,
        cluster_config: Option<PathBuf>,
        policies: Option<PathBuf>,
        policies_shadow: bool,
        policies_max_file_size: u64,
        lua_time_limit: u64,
        scripts_native: bool,
        rls_port: Option<u16>,
        rls_headers: bool,
        rls_maxclients: u64,
        rls_handshake_timeout: u64,
        rls_idle_timeout: u64,
        rls_max_message_size: u64,
        rls_max_concurrent_streams: u32,
        metrics_addr: String,
        metrics_allowed_hosts: Vec<String>,
        log_level: String,
        log_format: String,
        top_keys: usize,
        top_window: std::time::Duration,
        top_sample: u32,
    }
}
