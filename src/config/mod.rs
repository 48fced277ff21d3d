//! Command-line flags, environment variables and the optional config file.
//!
//! Precedence: flag > `TURNSTILE_<FLAG>` environment variable > `--config`
//! TOML file > built-in default. clap resolves the first two and the
//! default; a value clap reports as "from the default" is then replaced by
//! the file's, if the file sets it.

use crate::util::parse_host_port;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::{Path, PathBuf};

mod values;
use values::number_of;
pub use values::*;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "turnstile",
    version,
    about = "An in-memory rate-limiter server that speaks the Redis protocol",
    after_help = "Each option also reads TURNSTILE_<OPTION> (TURNSTILE_REPL_TIMEOUT for \
                  --repl-timeout)\nand its key in the --config file. --help says more.",
    // Never wrap nor move help to its own line: `-h` keeps one line an
    // option (clap is built without `wrap_help`, so nothing wraps anyway).
    term_width = 0
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub config: Config,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Exit 0 if a server answers PING (for container health checks).
    Healthcheck {
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        #[arg(long, env = "TURNSTILE_PORT", default_value_t = 6379)]
        port: u16,
    },
}

/// Server settings. Field docs are the help text: a doc comment's first
/// paragraph is `-h`'s one line (one sentence, about 70 characters at
/// most), the whole comment is `--help`'s. Every flag sits under one
/// heading; value names follow one style (`<N>`, `<SIZE>`, `<DURATION>`,
/// `<PATH>`, `<HOST:PORT>`, `<yes|no>`).
#[derive(Args, Debug, Clone)]
pub struct Config {
    /// TOML file with any of these settings (kebab-case keys).
    ///
    /// Keys are the flags' names without `--` (`port = 7000`,
    /// `protected-mode = "no"`); a flag or a variable beats the file, and
    /// an unknown key is an error.
    #[arg(long, env = "TURNSTILE_CONFIG", value_name = "PATH", help_heading = SERVER)]
    pub config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "TURNSTILE_BIND", default_value = "127.0.0.1", value_name = "ADDR", help_heading = SERVER)]
    pub bind: String,
    /// Port to listen on; 0 picks a free one.
    ///
    /// With 0, the bound address is logged.
    #[arg(long, env = "TURNSTILE_PORT", default_value_t = 6379, value_name = "PORT", help_heading = SERVER)]
    pub port: u16,
    /// Worker threads serving clients; 0 = one per CPU core but one.
    ///
    /// 0 runs at least one. The core left is for the kernel's network work
    /// and the machine's other processes: see docs/performance.md,
    /// "Threads".
    #[arg(long, env = "TURNSTILE_THREADS", default_value_t = 0, value_name = "N", help_heading = SERVER)]
    pub threads: usize,
    /// Password clients must give with AUTH or HELLO first.
    ///
    /// Every command but AUTH, HELLO and a few connection commands is
    /// refused with NOAUTH until the client authenticates.
    #[arg(long, env = "TURNSTILE_REQUIREPASS", hide_env_values = true, value_name = "PASSWORD", help_heading = SECURITY)]
    pub requirepass: Option<String>,
    /// Read the password from this file (trailing newline ignored).
    #[arg(long, env = "TURNSTILE_REQUIREPASS_FILE", value_name = "PATH", help_heading = SECURITY)]
    pub requirepass_file: Option<PathBuf>,
    /// Refuse non-loopback clients while no password is set.
    ///
    /// Redis's protected mode: with no --requirepass, a client from an
    /// address other than loopback is refused with an error saying how to
    /// allow it.
    #[arg(long, env = "TURNSTILE_PROTECTED_MODE", default_value = "yes", value_parser = parse_yes_no, action = clap::ArgAction::Set, value_name = "yes|no", help_heading = SECURITY)]
    pub protected_mode: bool,
    /// Rename a command, or disable it with an empty name; repeatable.
    ///
    /// `--rename-command FLUSHALL ""` disables FLUSHALL. The variable
    /// takes `NAME=NEWNAME` pairs separated by commas.
    #[arg(long, num_args = 2, value_names = ["NAME", "NEWNAME"], action = clap::ArgAction::Append, allow_hyphen_values = true, help_heading = SECURITY)]
    pub rename_command: Vec<String>,
    /// Also serve TLS on this port (0 picks a free one).
    ///
    /// Needs --tls-cert-file and --tls-key-file.
    #[arg(long, env = "TURNSTILE_TLS_PORT", value_name = "PORT", help_heading = TLS)]
    pub tls_port: Option<u16>,
    /// Server certificate chain (PEM).
    #[arg(long, env = "TURNSTILE_TLS_CERT_FILE", value_name = "PATH", help_heading = TLS)]
    pub tls_cert_file: Option<PathBuf>,
    /// Server private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "TURNSTILE_TLS_KEY_FILE", value_name = "PATH", help_heading = TLS)]
    pub tls_key_file: Option<PathBuf>,
    /// Require TLS clients to present a certificate signed by these CAs.
    ///
    /// PEM.
    #[arg(long, env = "TURNSTILE_TLS_CA_CERT_FILE", value_name = "PATH", help_heading = TLS)]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// A replica reaches its primary over TLS.
    ///
    /// The primary's address is its --tls-port; its certificate must
    /// chain to --tls-ca-cert-file; --tls-cert-file and --tls-key-file, if
    /// given, are presented to a primary that asks for a client
    /// certificate.
    #[arg(long, env = "TURNSTILE_TLS_REPLICATION", default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set, value_name = "yes|no", help_heading = TLS)]
    pub tls_replication: bool,
    /// Most clients connected at once; the next one is refused.
    #[arg(long, value_parser = number_of(&number::MAXCLIENTS), env = "TURNSTILE_MAXCLIENTS", default_value_t = 10_000, value_name = "N", help_heading = CLIENTS)]
    pub maxclients: u64,
    /// Close a client idle for this many seconds; 0 = never.
    #[arg(long, value_parser = number_of(&number::TIMEOUT), env = "TURNSTILE_TIMEOUT", default_value_t = 0, value_name = "SECONDS", help_heading = CLIENTS)]
    pub timeout: u64,
    /// Largest bulk string a request may carry.
    ///
    /// In bytes, or with a unit: k, kb, m, mb, g, gb (k = 1000, kb = 1024).
    #[arg(long, value_parser = number_of(&number::PROTO_MAX_BULK_LEN), env = "TURNSTILE_PROTO_MAX_BULK_LEN", default_value = "512mb", value_name = "SIZE", help_heading = CLIENTS)]
    pub proto_max_bulk_len: u64,
    /// Largest unprocessed input a client may have buffered.
    #[arg(long, value_parser = number_of(&number::CLIENT_QUERY_BUFFER_LIMIT), env = "TURNSTILE_CLIENT_QUERY_BUFFER_LIMIT", default_value = "1gb", value_name = "SIZE", help_heading = CLIENTS)]
    pub client_query_buffer_limit: u64,
    /// Memory cap; 0 = none.
    ///
    /// Sizes take units (k, kb, m, mb, g, gb). Past the cap, what happens
    /// to writes is --maxmemory-policy's choice.
    #[arg(long, value_parser = number_of(&number::MAXMEMORY), env = "TURNSTILE_MAXMEMORY", default_value = "0", value_name = "SIZE", help_heading = CLIENTS)]
    pub maxmemory: u64,
    /// What writes meet at the --maxmemory cap.
    ///
    /// `noeviction` refuses writes with -OOM; `volatile-ttl` evicts the
    /// keys nearest their expiry (a limiter key about to expire matters
    /// least).
    #[arg(long, env = "TURNSTILE_MAXMEMORY_POLICY", default_value = "noeviction", value_parser = MaxmemoryPolicy::parse, value_name = "POLICY", help_heading = CLIENTS)]
    pub maxmemory_policy: MaxmemoryPolicy,
    /// Disconnect clients that do not read their replies.
    ///
    /// `CLASS HARD SOFT SECONDS` groups as in redis.conf, for the classes
    /// `normal` and `replica` (or `slave`); a class not named keeps its
    /// default, and a bare `HARD SOFT SECONDS` is `normal`'s (sizes take
    /// units; 0 disables each part). Memory per client stays bounded
    /// regardless: the server stops reading from a client whose replies
    /// are not read. A replica's unread bytes are its full copy and the
    /// stream not yet taken.
    ///
    /// [default: normal 0 0 0 replica 256mb 64mb 60] (Redis's)
    #[arg(long, env = "TURNSTILE_CLIENT_OUTPUT_BUFFER_LIMIT", default_value = OutputLimits::DEFAULT, value_parser = OutputLimits::parse, hide_default_value = true, value_name = "LIMITS", help_heading = CLIENTS)]
    pub client_output_buffer_limit: OutputLimits,
    /// Keep the keyspace across restarts in this file; off by default.
    ///
    /// Written every --snapshot-interval and on SIGTERM, loaded at start.
    #[arg(long, env = "TURNSTILE_SNAPSHOT", value_name = "PATH", help_heading = PERSISTENCE)]
    pub snapshot: Option<PathBuf>,
    /// How often to write the snapshot: the most a crash loses.
    ///
    /// `1s`, `500ms`, `2m`; a bare number is seconds.
    #[arg(long, env = "TURNSTILE_SNAPSHOT_INTERVAL", default_value = "1s", value_parser = parse_duration, value_name = "DURATION", help_heading = PERSISTENCE)]
    pub snapshot_interval: std::time::Duration,
    /// Append every write's effect to a file, replayed at start.
    ///
    /// The file is --appendfilename, beside the snapshot, else in the
    /// working directory. With it on, a crash loses at most what
    /// --appendfsync allows (see docs/durability.md).
    #[arg(long, env = "TURNSTILE_APPENDONLY", default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set, value_name = "yes|no", help_heading = PERSISTENCE)]
    pub appendonly: bool,
    /// When the append-only file is fsynced.
    ///
    /// `always`: before the reply to a write (nothing acknowledged is
    /// lost); `everysec`: once a second; `no`: when the OS decides.
    #[arg(long, env = "TURNSTILE_APPENDFSYNC", default_value = "everysec", value_parser = crate::persist::aof::Fsync::parse, value_name = "always|everysec|no", help_heading = PERSISTENCE)]
    pub appendfsync: crate::persist::aof::Fsync,
    /// The append-only file's name, not a path.
    #[arg(long, env = "TURNSTILE_APPENDFILENAME", default_value = "appendonly.aof", value_parser = parse_file_name, value_name = "NAME", help_heading = PERSISTENCE)]
    pub appendfilename: String,
    /// Rewrite the append-only file at this many percent growth.
    ///
    /// 0: never.
    ///
    /// In percent over its base (its size after the last rewrite), once it
    /// is also at least --auto-aof-rewrite-min-size.
    #[arg(long, value_parser = number_of(&number::AUTO_AOF_REWRITE_PERCENTAGE), env = "TURNSTILE_AUTO_AOF_REWRITE_PERCENTAGE", default_value_t = 100, value_name = "PERCENT", help_heading = PERSISTENCE)]
    pub auto_aof_rewrite_percentage: u64,
    /// ... and is at least this large.
    ///
    /// Sizes take units (k, kb, m, mb, g, gb).
    #[arg(long, value_parser = number_of(&number::AUTO_AOF_REWRITE_MIN_SIZE), env = "TURNSTILE_AUTO_AOF_REWRITE_MIN_SIZE", default_value = "64mb", value_name = "SIZE", help_heading = PERSISTENCE)]
    pub auto_aof_rewrite_min_size: u64,
    /// Cut off a torn last AOF record, or refuse to start.
    ///
    /// A torn record is a write cut short by a crash: `yes` cuts it off
    /// with a warning, `no` refuses the start.
    #[arg(long, env = "TURNSTILE_AOF_LOAD_TRUNCATED", default_value = "yes", value_parser = parse_yes_no, action = clap::ArgAction::Set, value_name = "yes|no", help_heading = PERSISTENCE)]
    pub aof_load_truncated: bool,
    /// Start as a replica of this primary, as `REPLICAOF` does.
    ///
    /// Redis Sentinel may change it at run time.
    #[arg(long, env = "TURNSTILE_REPLICAOF", value_name = "HOST:PORT", value_parser = parse_host_port, help_heading = REPLICATION)]
    pub replicaof: Option<(String, u16)>,
    /// The password a replica gives its primary (its --requirepass).
    #[arg(long, env = "TURNSTILE_MASTERAUTH", hide_env_values = true, value_name = "PASSWORD", help_heading = REPLICATION)]
    pub masterauth: Option<String>,
    /// The user a replica authenticates as, with --masterauth.
    #[arg(long, env = "TURNSTILE_MASTERUSER", value_name = "USER", help_heading = REPLICATION)]
    pub masteruser: Option<String>,
    /// Stream kept for a reconnecting replica to resume from.
    ///
    /// The newest stream bytes a primary keeps, so a replica that
    /// reconnects within them resumes without a full copy (sizes take
    /// units; 16kb to 1gb, taken as the stream grows). A decision's effect
    /// is about 70 bytes plus the key: 16mb holds about 160,000 decisions
    /// on 30-byte keys.
    #[arg(long, value_parser = number_of(&number::REPL_BACKLOG_SIZE), env = "TURNSTILE_REPL_BACKLOG_SIZE", default_value = "16mb", value_name = "SIZE", help_heading = REPLICATION)]
    pub repl_backlog_size: u64,
    /// Seconds of silence after which a replication link is dropped.
    ///
    /// A replica that neither acknowledges nor takes data for this long
    /// (its primary's view), or a primary that sends nothing (its
    /// replica's).
    #[arg(long, value_parser = number_of(&number::REPL_TIMEOUT), env = "TURNSTILE_REPL_TIMEOUT", default_value = "60", value_name = "SECONDS", help_heading = REPLICATION)]
    pub repl_timeout: u64,
    /// Seconds between a primary's PINGs to its replicas.
    ///
    /// Written into the replication stream while replicas are attached,
    /// so they tell a quiet primary from a dead link (Redis's
    /// `repl-ping-replica-period`, 1 or more).
    #[arg(long, value_parser = number_of(&number::REPL_PING_REPLICA_PERIOD), env = "TURNSTILE_REPL_PING_REPLICA_PERIOD", default_value_t = 10, value_name = "SECONDS", help_heading = REPLICATION)]
    pub repl_ping_replica_period: u64,
    /// The address a replica tells its primary (and Sentinel) to reach.
    ///
    /// For a replica behind NAT or a port mapping; default: the address
    /// it connects from.
    #[arg(long, env = "TURNSTILE_REPLICA_ANNOUNCE_IP", value_name = "IP", help_heading = REPLICATION)]
    pub replica_announce_ip: Option<String>,
    /// The port a replica tells its primary; 0: the one it listens on.
    #[arg(long, value_parser = number_of(&number::REPLICA_ANNOUNCE_PORT), env = "TURNSTILE_REPLICA_ANNOUNCE_PORT", default_value_t = 0, value_name = "PORT", help_heading = REPLICATION)]
    pub replica_announce_port: u64,
    /// Sentinel promotes the lowest first; 0: never this one.
    #[arg(long, value_parser = number_of(&number::REPLICA_PRIORITY), env = "TURNSTILE_REPLICA_PRIORITY", default_value_t = 100, value_name = "N", help_heading = REPLICATION)]
    pub replica_priority: u64,
    /// Cluster mode as Redis runs it: nodes meet (CLUSTER MEET), gossip,
    /// and slots move live (redis-cli --cluster).
    #[arg(long, env = "TURNSTILE_CLUSTER_ENABLED", default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set, value_name = "yes|no", help_heading = CLUSTER)]
    pub cluster_enabled: bool,
    /// Where this node keeps its cluster configuration (Redis's
    /// nodes.conf format), rewritten on every change.
    #[arg(long, env = "TURNSTILE_CLUSTER_CONFIG_FILE", default_value = "nodes.conf", value_name = "PATH", help_heading = CLUSTER)]
    pub cluster_config_file: PathBuf,
    /// Milliseconds a node may go unanswered before it is suspected.
    #[arg(long, env = "TURNSTILE_CLUSTER_NODE_TIMEOUT", default_value_t = 15000, value_parser = clap::value_parser!(u64).range(1..=86_400_000), value_name = "MS", help_heading = CLUSTER)]
    pub cluster_node_timeout: u64,
    /// The cluster bus's port; 0: the client port + 10000.
    #[arg(long, env = "TURNSTILE_CLUSTER_PORT", default_value_t = 0, value_name = "PORT", help_heading = CLUSTER)]
    pub cluster_port: u16,
    /// The address other nodes and clients are told to use for this node
    /// (default: what the first MEET it gets was sent to).
    #[arg(long, env = "TURNSTILE_CLUSTER_ANNOUNCE_IP", value_name = "IP", help_heading = CLUSTER)]
    pub cluster_announce_ip: Option<String>,
    /// The client port announced; 0: the one it listens on.
    #[arg(long, env = "TURNSTILE_CLUSTER_ANNOUNCE_PORT", default_value_t = 0, value_name = "PORT", help_heading = CLUSTER)]
    pub cluster_announce_port: u16,
    /// The bus port announced; 0: the one it listens on.
    #[arg(long, env = "TURNSTILE_CLUSTER_ANNOUNCE_BUS_PORT", default_value_t = 0, value_name = "PORT", help_heading = CLUSTER)]
    pub cluster_announce_bus_port: u16,
    /// Cluster mode: every node's address, the same list on every node.
    ///
    /// Comma-separated; the 16384 slots are split into ranges in list
    /// order.
    #[arg(long, env = "TURNSTILE_CLUSTER_NODES", value_name = "HOST:PORT,...", help_heading = CLUSTER)]
    pub cluster_nodes: Option<String>,
    /// Cluster mode following failovers seen by these Redis Sentinels.
    ///
    /// Comma-separated. The Sentinels watch every shard's primary under the
    /// shard's name (`name` in --cluster-config, default `shard-N`). Each
    /// node follows their `+switch-master` events, so slots and `MOVED`
    /// replies follow a failover.
    #[arg(long, env = "TURNSTILE_CLUSTER_SENTINELS", value_name = "HOST:PORT,...", value_delimiter = ',', value_parser = parse_host_port, help_heading = CLUSTER)]
    pub cluster_sentinels: Vec<(String, u16)>,
    /// Which entry of the cluster this node is (default: bind:port).
    #[arg(long, env = "TURNSTILE_CLUSTER_ANNOUNCE", value_name = "HOST:PORT", help_heading = CLUSTER)]
    pub cluster_announce: Option<String>,
    /// Cluster mode with explicit slot ranges, from a TOML file.
    ///
    /// The file has `[[node]] addr = "HOST:PORT"  slots = ["0-8191"]`
    /// entries.
    #[arg(long, env = "TURNSTILE_CLUSTER_CONFIG", value_name = "PATH", help_heading = CLUSTER)]
    pub cluster_config: Option<PathBuf>,
    /// Named limits: a YAML file, or a directory of them.
    ///
    /// In envoyproxy/ratelimit's format (plus algorithm, period, burst,
    /// precision); reloaded when a file changes, on SIGHUP and on
    /// RL.POLICY RELOAD. A bad file is refused whole.
    #[arg(long, env = "TURNSTILE_POLICIES", value_name = "PATH", help_heading = POLICIES)]
    pub policies: Option<PathBuf>,
    /// Every policy in shadow mode: decide and count, but allow all.
    ///
    /// Decisions are taken, counted and reported, and every request is
    /// allowed.
    #[arg(long, env = "TURNSTILE_POLICIES_SHADOW", default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set, value_name = "yes|no", help_heading = POLICIES)]
    pub policies_shadow: bool,
    /// The largest policy file read; a larger one is refused whole.
    ///
    /// Sizes take units. The refusal names the file's size and this cap.
    #[arg(long, value_parser = number_of(&number::POLICIES_MAX_FILE_SIZE), env = "TURNSTILE_POLICIES_MAX_FILE_SIZE", default_value = "4mb", value_name = "SIZE", help_heading = POLICIES)]
    pub policies_max_file_size: u64,
    /// Milliseconds a Lua script runs before others are answered BUSY.
    ///
    /// From then on SCRIPT KILL may stop it (Redis's
    /// `busy-reply-threshold`).
    #[arg(
        long, value_parser = number_of(&number::LUA_TIME_LIMIT),
        env = "TURNSTILE_LUA_TIME_LIMIT",
        default_value_t = 5_000,
        value_name = "MS",
        help_heading = SCRIPTS
    )]
    pub lua_time_limit: u64,
    /// Run the limiter scripts Turnstile recognises in Rust, not Lua.
    ///
    /// The limiter libraries' scripts recognised by SHA1
    /// (docs/scripting.md's catalogue) run in Rust with the Lua script's
    /// replies and effects. `no` runs every script in Lua, to compare the
    /// two.
    #[arg(long, env = "TURNSTILE_SCRIPTS_NATIVE", default_value = "yes", value_parser = parse_yes_no, action = clap::ArgAction::Set, value_name = "yes|no", help_heading = SCRIPTS)]
    pub scripts_native: bool,
    /// Serve Envoy's rate limit service (gRPC) on this port; off by default.
    ///
    /// `envoy.service.ratelimit.v3.RateLimitService` and the gRPC health
    /// service; 0 picks a free port.
    #[arg(long, env = "TURNSTILE_RLS_PORT", value_name = "PORT", help_heading = RLS)]
    pub rls_port: Option<u16>,
    /// Add RateLimit headers to the rate limit service's responses.
    ///
    /// The IETF draft-10 `RateLimit-Policy` and `RateLimit` headers, and
    /// `Retry-After` when over the limit.
    #[arg(long, env = "TURNSTILE_RLS_HEADERS", default_value = "no", value_parser = parse_yes_no, action = clap::ArgAction::Set, value_name = "yes|no", help_heading = RLS)]
    pub rls_headers: bool,
    /// Most rate limit service connections at once; more are closed.
    ///
    /// Closed on accept, counted as
    /// `turnstile_connections_rejected_total{reason="rls_maxclients"}`.
    /// Envoy holds one per worker thread.
    #[arg(long, value_parser = number_of(&number::RLS_MAXCLIENTS), env = "TURNSTILE_RLS_MAXCLIENTS", default_value_t = 256, value_name = "N", help_heading = RLS)]
    pub rls_maxclients: u64,
    /// Milliseconds a new connection has to send the HTTP/2 preface.
    ///
    /// A rate limit service connection that has not sent it by then is
    /// closed.
    #[arg(
        long, value_parser = number_of(&number::RLS_HANDSHAKE_TIMEOUT),
        env = "TURNSTILE_RLS_HANDSHAKE_TIMEOUT",
        default_value_t = 5_000,
        value_name = "MS",
        help_heading = RLS
    )]
    pub rls_handshake_timeout: u64,
    /// Milliseconds of silence after which a connection is closed.
    ///
    /// Silent: no byte read. 0: no limit. Envoy reconnects.
    #[arg(
        long, value_parser = number_of(&number::RLS_IDLE_TIMEOUT),
        env = "TURNSTILE_RLS_IDLE_TIMEOUT",
        default_value_t = 300_000,
        value_name = "MS",
        help_heading = RLS
    )]
    pub rls_idle_timeout: u64,
    /// The largest gRPC request message decoded.
    ///
    /// Sizes take units; a larger message is answered RESOURCE_EXHAUSTED.
    #[arg(long, env = "TURNSTILE_RLS_MAX_MESSAGE_SIZE", default_value = "256kb", value_parser = parse_memory, value_name = "SIZE", help_heading = RLS)]
    pub rls_max_message_size: u64,
    /// HTTP/2 streams (calls in flight) a connection may carry.
    ///
    /// The connection's SETTINGS_MAX_CONCURRENT_STREAMS.
    #[arg(
        long,
        env = "TURNSTILE_RLS_MAX_CONCURRENT_STREAMS",
        default_value_t = 256,
        value_name = "N",
        help_heading = RLS
    )]
    pub rls_max_concurrent_streams: u32,
    /// Prometheus endpoint and status page, or `off`.
    ///
    /// `/metrics`, `/healthz` and the status page; port 0 picks a free
    /// one.
    #[arg(long, env = "TURNSTILE_METRICS_ADDR", default_value = "127.0.0.1:9898", value_name = "HOST:PORT|off", help_heading = METRICS)]
    pub metrics_addr: String,
    /// Host names the status page answers to, besides IPs and localhost.
    ///
    /// Comma-separated. The status page and `POST /json` refuse a request
    /// naming another host (421), so a page elsewhere cannot reach them by
    /// DNS rebinding. `/metrics` and `/healthz` answer any host.
    #[arg(
        long,
        env = "TURNSTILE_METRICS_ALLOWED_HOSTS",
        value_name = "HOST,...",
        value_delimiter = ',',
        help_heading = METRICS
    )]
    pub metrics_allowed_hosts: Vec<String>,
    /// Log filter: error, warn, info, debug, trace, or a directive.
    ///
    /// A directive is a `tracing` filter (`turnstile=debug,info`).
    #[arg(long, env = "TURNSTILE_LOG_LEVEL", default_value = "info", value_name = "FILTER", help_heading = METRICS)]
    pub log_level: String,
    /// Log lines as `text` (for people) or `json` (for collectors).
    ///
    /// `json` writes one JSON object a line, with the same fields.
    #[arg(long, env = "TURNSTILE_LOG_FORMAT", default_value = "text", value_parser = crate::logging::FORMATS, hide_possible_values = true, value_name = "text|json", help_heading = METRICS)]
    pub log_format: String,
    /// Keys the heavy hitters (RL.TOP) count; 0 turns them off.
    ///
    /// Counters per kind (denied, allowed, shadow) and period, across the
    /// node; memory is fixed by it, about 3 KB per counter at most. A
    /// count is off by at most about W * N / top-keys (W: CPUs, at most 8;
    /// N: that kind's decisions in the period).
    #[arg(long, env = "TURNSTILE_TOP_KEYS", default_value_t = crate::stats::top::DEFAULT_KEYS, value_parser = parse_top_keys, value_name = "N", help_heading = METRICS)]
    pub top_keys: usize,
    /// The period the heavy hitters cover (RL.TOP's longest WINDOW).
    ///
    /// Kept in six slices.
    #[arg(long, env = "TURNSTILE_TOP_WINDOW", default_value = "60s", value_parser = parse_duration, value_name = "DURATION", help_heading = METRICS)]
    pub top_window: std::time::Duration,
    /// Admissions the heavy hitters count: one in N; 1 counts all.
    ///
    /// One in N at random, each weighing N (denials and shadow denials are
    /// all counted). Admissions are most decisions; sampling them keeps
    /// the sketches' cost per decision small.
    #[arg(long, env = "TURNSTILE_TOP_SAMPLE", default_value_t = crate::stats::top::DEFAULT_SAMPLE, value_parser = clap::value_parser!(u32).range(1..=65_536), value_name = "N", help_heading = METRICS)]
    pub top_sample: u32,
}

// `--help`'s headings, in the order they first appear in `Config`.
const SERVER: &str = "Server";
const SECURITY: &str = "Security";
const TLS: &str = "TLS";
const CLIENTS: &str = "Clients and memory";
const PERSISTENCE: &str = "Persistence";
const REPLICATION: &str = "Replication";
const CLUSTER: &str = "Cluster";
const POLICIES: &str = "Policies";
const SCRIPTS: &str = "Scripts";
const RLS: &str = "Envoy rate limit service";
const METRICS: &str = "Metrics and logs";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("--requirepass-file: cannot read {path}: {source}")]
    PasswordFile {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A bad value that came from a `TURNSTILE_*` variable, not a flag:
    /// clap's message names only the flag.
    #[error("invalid value in the environment variable {var} (for {flag}): {message}")]
    Env {
        var: String,
        flag: String,
        message: String,
    },
    #[error("{0}")]
    Cli(#[from] clap::Error),
}

impl Default for Config {
    fn default() -> Self {
        Config::parse_from(["turnstile"]).expect("defaults are valid")
    }
}

impl Config {
    /// Settings for an in-process test server: loopback, a free port.
    pub fn for_tests() -> Self {
        Config {
            port: 0,
            metrics_addr: "127.0.0.1:0".into(),
            ..Config::default()
        }
    }

    /// Parses flags, environment and config file.
    pub fn parse_from<I, T>(args: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let cli = Cli::parse_full(args)?;
        Ok(cli.config)
    }

    /// Worker threads the runtime runs: `--threads`, or one per core but
    /// one (a 2-core host runs one worker, as measured best there, and a
    /// larger one still scales), at least one.
    pub fn worker_threads(&self) -> usize {
        match self.threads {
            0 => {
                std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
            }
            n => n,
        }
        .min(64)
    }

    /// Where the append-only file is: `--appendfilename` beside the
    /// snapshot, else in the working directory.
    pub fn aof_path(&self) -> PathBuf {
        match self.snapshot.as_deref().and_then(|p| p.parent()) {
            Some(dir) if !dir.as_os_str().is_empty() => dir.join(&self.appendfilename),
            _ => PathBuf::from(&self.appendfilename),
        }
    }

    /// Whether metrics are served (not `--metrics-addr off`).
    pub fn metrics_enabled(&self) -> bool {
        !self.metrics_addr.eq_ignore_ascii_case("off")
    }

    /// The cluster topology, if cluster mode is on; `port` is the port
    /// actually bound (the default announce address uses it).
    pub fn topology(
        &self,
        port: u16,
    ) -> Result<Option<crate::cluster::Topology>, crate::cluster::TopologyError> {
        use crate::cluster::Topology;
        let announce = self
            .cluster_announce
            .clone()
            .unwrap_or_else(|| format!("{}:{port}", self.bind));
        if let Some(path) = &self.cluster_config {
            return Topology::from_file(path, &announce).map(Some);
        }
        match &self.cluster_nodes {
            Some(list) => {
                let addrs: Vec<String> = list
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                Topology::even(&addrs, &announce).map(Some)
            }
            None => Ok(None),
        }
    }

    /// The `--rename-command` pairs: from the flags, else from
    /// `TURNSTILE_RENAME_COMMAND` (`NAME=NEWNAME,...`), else the file.
    pub fn renames(&self) -> Vec<(String, String)> {
        if self.rename_command.is_empty() {
            if let Ok(env) = std::env::var("TURNSTILE_RENAME_COMMAND") {
                return env
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|pair| match pair.split_once('=') {
                        Some((a, b)) => (a.trim().to_string(), b.trim().to_string()),
                        None => (pair.trim().to_string(), String::new()),
                    })
                    .collect();
            }
        }
        self.rename_command
            .chunks(2)
            .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default()))
            .collect()
    }

    /// The password in force: `--requirepass`, else `--requirepass-file`.
    pub fn password(&self) -> Result<Option<Vec<u8>>, ConfigError> {
        if let Some(p) = &self.requirepass {
            return Ok((!p.is_empty()).then(|| p.as_bytes().to_vec()));
        }
        let Some(path) = &self.requirepass_file else {
            return Ok(None);
        };
        let text = std::fs::read(path).map_err(|source| ConfigError::PasswordFile {
            path: path.clone(),
            source,
        })?;
        let trimmed = text.strip_suffix(b"\n").unwrap_or(&text);
        let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
        Ok((!trimmed.is_empty()).then(|| trimmed.to_vec()))
    }
}

impl Cli {
    /// The command line; for `-h`, without each option's `[env: ...]`,
    /// which would take `-h`'s one line an option past 120 characters
    /// (the after-help names the rule, and `--help` shows each). Only
    /// the help text differs: parsing is the same either way.
    fn command_for(args: &[std::ffi::OsString]) -> clap::Command {
        let command = Cli::command();
        if args.iter().skip(1).any(|a| a == "-h") {
            command.mut_args(|a| a.hide_env(true))
        } else {
            command
        }
    }

    /// Parses the command line (and environment, and config file).
    pub fn parse_full<I, T>(args: I) -> Result<Cli, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let matches = Cli::command_for(&args)
            .try_get_matches_from(args.clone())
            .map_err(|e| name_the_variable(e, &args))?;
        if let Some(path) = matches.get_one::<PathBuf>("config") {
            // The file's settings become arguments of the lowest rank:
            // only those neither a flag nor a variable gave are added, and
            // clap parses them as it parses flags.
            let from_file = file_arguments(&matches, path)?;
            args.splice(1..1, from_file);
        }
        let matches = Cli::command()
            .try_get_matches_from(args.clone())
            .map_err(|e| name_the_variable(e, &args))?;
        Ok(Cli::from_arg_matches(&matches)?)
    }
}

/// The settings of a `--config` file as command-line arguments, for those
/// settings `matches` has only by default.
///
/// The file's keys are the flags' long names (kebab-case), so every
/// setting is declared once, by its flag: its name, default, help and
/// value parser are the flag's, and a file value is checked by the same
/// parser, here, so a wrong one is reported with the file's path and key.
/// Values are TOML strings, integers or booleans (`yes`/`no`);
/// `rename-command` is a table of `NAME = "NEWNAME"`.
fn file_arguments(
    matches: &ArgMatches,
    path: &Path,
) -> Result<Vec<std::ffi::OsString>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_owned(),
        message,
    };
    let table: toml::Table = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let command = Cli::command();
    let mut out = Vec::new();
    for (key, value) in table {
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && a.get_id() != "config")
            .ok_or_else(|| invalid(unknown_setting(&command, &key)))?;
        let id = arg.get_id().as_str();
        if !matches!(
            matches.value_source(id),
            None | Some(ValueSource::DefaultValue)
        ) {
            continue;
        }
        let words: Vec<String> = match value {
            toml::Value::Table(pairs) if id == "rename_command" => pairs
                .into_iter()
                .map(|(name, new)| match new {
                    toml::Value::String(new) => Ok([name, new]),
                    other => Err(invalid(format!(
                        "rename-command: '{name}' must name a string, not {}",
                        other.type_str()
                    ))),
                })
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .flatten()
                .collect(),
            toml::Value::String(s) => vec![s],
            toml::Value::Integer(n) => vec![n.to_string()],
            toml::Value::Boolean(b) => vec![if b { "yes" } else { "no" }.to_string()],
            other => {
                return Err(invalid(format!(
                    "{key}: expected a string, a number or a boolean, not {}",
                    other.type_str()
                )))
            }
        };
        let per_use = arg.get_num_args().map_or(1, |n| n.min_values().max(1));
        for group in words.chunks(per_use) {
            let mut one = vec![std::ffi::OsString::from("turnstile")];
            match group {
                // `--key=value`: a value that starts with `-` (a password,
                // as `CONFIG REWRITE` writes it) is the flag's, not a flag.
                [value] => one.push(format!("--{key}={value}").into()),
                _ => {
                    one.push(format!("--{key}").into());
                    one.extend(group.iter().map(Into::into));
                }
            }
            // The flag alone, to check the value with its own parser.
            clap::Command::new("turnstile")
                .arg(arg.clone())
                .try_get_matches_from(&one)
                .map_err(|e| {
                    let msg = e.to_string();
                    let first = msg.lines().next().unwrap_or_default();
                    invalid(format!("{key}: {}", first.trim_start_matches("error: ")))
                })?;
            out.extend(one.into_iter().skip(1));
        }
    }
    Ok(out)
}

/// A config file's unknown key, with the setting it most likely means: the
/// flag's name when only `_` for `-` or the case differ (`protected_mode`
/// is `protected-mode`).
fn unknown_setting(command: &clap::Command, key: &str) -> String {
    let wanted = key.replace('_', "-").to_ascii_lowercase();
    match command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .find(|long| *long == wanted && *long != "config")
    {
        Some(long) => format!("unknown setting '{key}': did you mean '{long}'?"),
        None => format!("unknown setting '{key}' (settings are the flags' names, as `turnstile --help` lists them, without `--`)"),
    }
}

/// A value clap refused that came from a `TURNSTILE_*` variable (its flag
/// absent from the command line) is reported naming the variable; any
/// other error is clap's own.
fn name_the_variable(e: clap::Error, args: &[std::ffi::OsString]) -> ConfigError {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return e.into();
    }
    let Some(ContextValue::String(shown)) = e.get(ContextKind::InvalidArg) else {
        return e.into();
    };
    let long = shown
        .trim_start_matches("--")
        .split([' ', '='])
        .next()
        .unwrap_or_default()
        .to_string();
    let given = args.iter().any(|a| {
        a.to_str()
            .is_some_and(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")))
    });
    let command = Cli::command();
    let var = command
        .get_arguments()
        .find(|a| a.get_long() == Some(long.as_str()))
        .and_then(|a| a.get_env())
        .and_then(|v| v.to_str())
        .map(str::to_string);
    match var {
        Some(var) if !given && std::env::var_os(&var).is_some() => {
            let message = e
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_string();
            ConfigError::Env {
                var,
                flag: format!("--{long}"),
                message,
            }
        }
        _ => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn defaults() {
        let c = Config::parse_from(["turnstile"]).unwrap();
        assert_eq!(c.bind, "127.0.0.1");
        assert_eq!(c.port, 6379);
        assert_eq!(c.maxclients, 10_000);
        assert_eq!(c.proto_max_bulk_len, 512 * 1024 * 1024);
        assert_eq!(c.client_query_buffer_limit, 1024 * 1024 * 1024);
    }

    /// `--repl-backlog-size 100gb` used to start, and abort the process
    /// at the first PSYNC; it is refused at start-up now, in the words
    /// `CONFIG SET` uses. `--repl-timeout` takes Redis's range.
    #[test]
    fn replication_settings_are_bounded_at_start_up() {
        let err = Config::parse_from(["turnstile", "--repl-backlog-size", "100gb"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("argument must be between 16384 and 1073741824 inclusive"),
            "{err}"
        );
        assert!(Config::parse_from(["turnstile", "--repl-backlog-size", "1kb"]).is_err());
        let c = Config::parse_from(["turnstile", "--repl-backlog-size", "1gb"]).unwrap();
        assert_eq!(c.repl_backlog_size, 1 << 30);
        assert_eq!(Config::default().repl_timeout, 60);
        let err = Config::parse_from(["turnstile", "--repl-timeout", "0"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("argument must be between 1 and 2147483647 inclusive"),
            "{err}"
        );
        let c = Config::parse_from(["turnstile", "--repl-timeout", "5"]).unwrap();
        assert_eq!(c.repl_timeout, 5);
    }

    /// redis.conf's classes: a class not named keeps its limits (the
    /// replica class defaults to Redis's `256mb 64mb 60`); `slave` is
    /// `replica`; a bare `HARD SOFT SECONDS` is the normal class.
    #[test]
    fn output_limits_take_redis_classes() {
        let d = Config::default().client_output_buffer_limit;
        assert_eq!(d, OutputLimits::default());
        assert_eq!(
            d.to_string(),
            "normal 0 0 0 slave 268435456 67108864 60",
            "as Redis's CONFIG GET shows it"
        );
        let bare = OutputLimits::parse("1mb 512kb 10").unwrap();
        assert_eq!(bare.normal.hard, 1 << 20);
        assert_eq!(bare.replica, d.replica);
        let both = OutputLimits::parse("replica 1gb 100mb 5 normal 0 0 0").unwrap();
        assert_eq!(
            both.replica,
            OutputLimit {
                hard: 1 << 30,
                soft: 100 << 20,
                soft_seconds: 5
            }
        );
        assert_eq!(OutputLimits::parse(&both.to_string()), Ok(both));
        assert_eq!(d.with("SLAVE 1 2 3").unwrap().replica.soft, 2);
        assert_eq!(d.with("replica 1 2"), Err(OutputLimitError::Arguments));
        assert_eq!(d.with(""), Err(OutputLimitError::Arguments));
        assert_eq!(d.with("pubsub 1 2 3"), Err(OutputLimitError::Class));
        assert_eq!(d.with("replica x 2 3"), Err(OutputLimitError::Value));
        assert_eq!(d.with("replica 1 2 -3"), Err(OutputLimitError::Value));
        let c = Config::parse_from(["turnstile", "--client-output-buffer-limit", "replica 0 0 0"])
            .unwrap();
        assert_eq!(c.client_output_buffer_limit.replica, OutputLimit::default());
    }

    #[test]
    fn flag_beats_file_beats_default() {
        let mut f = tempfile();
        writeln!(
            f.1,
            "port = 7000\nmaxclients = 5\nproto-max-bulk-len = \"1mb\""
        )
        .unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let c = Config::parse_from(["turnstile", "--config", &path, "--port", "7001"]).unwrap();
        assert_eq!(c.port, 7001);
        assert_eq!(c.maxclients, 5);
        assert_eq!(c.proto_max_bulk_len, 1024 * 1024);
        std::fs::remove_file(&f.0).unwrap();
    }

    #[test]
    fn file_values_go_through_the_flags_parsers() {
        let mut f = tempfile();
        writeln!(
            f.1,
            "protected-mode = false\nmaxmemory = 1048576\nsnapshot-interval = \"250ms\"\nlua-time-limit = 70\n[rename-command]\nFLUSHALL = \"\"\nCONFIG = \"cfg-x\""
        )
        .unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let c = Config::parse_from(["turnstile", "--config", &path]).unwrap();
        assert!(!c.protected_mode);
        assert_eq!(c.maxmemory, 1 << 20);
        assert_eq!(c.snapshot_interval, std::time::Duration::from_millis(250));
        assert_eq!(c.lua_time_limit, 70);
        assert_eq!(
            c.renames(),
            vec![
                ("CONFIG".to_string(), "cfg-x".to_string()),
                ("FLUSHALL".to_string(), String::new()),
            ]
        );
        std::fs::remove_file(&f.0).unwrap();

        let mut f = tempfile();
        writeln!(f.1, "maxmemory = \"12tb\"").unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let err = Config::parse_from(["turnstile", "--config", &path])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("{path}: maxmemory: invalid value '12tb'")),
            "{err}"
        );
        std::fs::remove_file(&f.0).unwrap();

        let mut f = tempfile();
        writeln!(f.1, "port = [1, 2]").unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let err = Config::parse_from(["turnstile", "--config", &path])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!("{path}: port: expected a string, a number or a boolean, not array")
        );
        std::fs::remove_file(&f.0).unwrap();
    }

    #[test]
    fn unknown_file_key_is_an_error() {
        let mut f = tempfile();
        writeln!(f.1, "prot = 1").unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let err = Config::parse_from(["turnstile", "--config", &path]).unwrap_err();
        assert!(err.to_string().contains("prot"), "{err}");
        std::fs::remove_file(&f.0).unwrap();
        // A key in snake case names the setting it means.
        let mut f = tempfile();
        writeln!(f.1, "protected_mode = \"no\"").unwrap();
        let path = f.0.to_str().unwrap().to_string();
        let err = Config::parse_from(["turnstile", "--config", &path]).unwrap_err();
        assert!(
            err.to_string()
                .contains("unknown setting 'protected_mode': did you mean 'protected-mode'?"),
            "{err}"
        );
        std::fs::remove_file(&f.0).unwrap();
    }

    #[test]
    fn protected_mode_takes_yes_or_no() {
        assert!(Config::parse_from(["turnstile"]).unwrap().protected_mode);
        let off = Config::parse_from(["turnstile", "--protected-mode", "no"]).unwrap();
        assert!(!off.protected_mode);
        assert!(Config::parse_from(["turnstile", "--protected-mode", "maybe"]).is_err());
    }

    #[test]
    fn maxmemory_settings() {
        let c = Config::parse_from([
            "turnstile",
            "--maxmemory",
            "100mb",
            "--maxmemory-policy",
            "volatile-ttl",
        ])
        .unwrap();
        assert_eq!(c.maxmemory, 100 * 1024 * 1024);
        assert_eq!(c.maxmemory_policy, MaxmemoryPolicy::VolatileTtl);
        assert_eq!(
            Config::parse_from(["turnstile"]).unwrap().maxmemory_policy,
            MaxmemoryPolicy::NoEviction
        );
        assert!(Config::parse_from(["turnstile", "--maxmemory-policy", "allkeys-lru"]).is_err());
    }

    #[test]
    fn rename_command_pairs() {
        let c = Config::parse_from([
            "turnstile",
            "--rename-command",
            "FLUSHALL",
            "",
            "--rename-command",
            "CONFIG",
            "cfg-x",
        ])
        .unwrap();
        assert_eq!(
            c.renames(),
            vec![
                ("FLUSHALL".to_string(), String::new()),
                ("CONFIG".to_string(), "cfg-x".to_string())
            ]
        );
    }

    #[test]
    fn memory_units() {
        assert_eq!(parse_memory("100"), Ok(100));
        assert_eq!(parse_memory("1k"), Ok(1000));
        assert_eq!(parse_memory("1KB"), Ok(1024));
        assert_eq!(parse_memory("2gb"), Ok(2 << 30));
        assert!(parse_memory("-1").is_err());
        assert!(parse_memory("1tb").is_err());
        assert!(parse_memory("99999999999999gb").is_err());
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        // One grammar with limits' periods: days too.
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1e9").is_err());
        assert!(parse_duration("99999999999999999h").is_err());
        let c = Config::parse_from(["turnstile"]).unwrap();
        assert_eq!(c.snapshot, None);
        assert_eq!(c.snapshot_interval, Duration::from_secs(1));
        assert_eq!(c.tls_port, None);
        assert_eq!(c.threads, 0);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(c.worker_threads(), (cores - 1).max(1));
        let one = Config::parse_from(["turnstile", "--threads", "1"]).unwrap();
        assert_eq!((one.threads, one.worker_threads()), (1, 1));
        assert!(Config::parse_from(["turnstile", "--threads", "-1"]).is_err());
    }

    fn tempfile() -> (PathBuf, std::fs::File) {
        let path = std::env::temp_dir().join(format!(
            "turnstile-config-{}-{:?}.toml",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::File::create(&path).unwrap();
        (path, f)
    }
}
