//! Every setting's row, in `--help`'s order, as one list: what a row
//! holds is `config/table.rs`'s `Setting`; how to add one, CONTRIBUTING.md.
//! A row is `{ field: Type; live cell: CellType } Setting { .. }`: the
//! setting, the `Config` field that keeps its start-up value (none for a
//! `CONFIG`-only parameter: `{}`), and, for one `CONFIG SET` changes, the
//! `Live` cell read while the server runs.
//!
//! The list is a macro that hands the rows to another (`rows!(m)` expands
//! `m! { rows }`), so that each file that needs them reads this one list:
//! `config/fields.rs` makes `Config` and `Live` from the heads,
//! `config/table.rs` makes `SETTINGS` from the rows. The names in the rows
//! are resolved where they are expanded, so this file imports nothing.

// Every setting, in `--help`'s order. Ranges are Redis's (a
// `proto-max-bulk-len` under 1 MiB or a `maxclients` of 0 would lock
// clients out) or, for Turnstile's own, what their meaning allows. A cell
// of a choice (`AtomicU8`) holds its index (`MaxmemoryPolicy::index`,
// `Fsync as u8`).
macro_rules! rows {
    ($m:ident) => {
        $m! {

            { config: Option<PathBuf> } Setting {
                name: "config",
                group: SERVER,
                value_name: "PATH",
                help: "TOML file with any of these settings (kebab-case keys).\n\nKeys are the flags' names without `--` (`port = 7000`, `protected-mode = \"no\"`); a flag or a variable beats the file, and an unknown key is an error.",
                kind: Kind::Other(path),
                ..Setting::ROW
            },
            { bind: String } Setting {
                name: "bind",
                group: SERVER,
                value_name: "ADDR",
                default: Some("127.0.0.1"),
                help: "Address to listen on.",
                kind: Kind::Other(text),
                flags: CONFIG,
                ..Setting::ROW
            },
            { port: u16 } Setting {
                name: "port",
                group: SERVER,
                value_name: "PORT",
                default: Some("6379"),
                help: "Port to listen on; 0 picks a free one.\n\nWith 0, the bound address is logged.",
                kind: Kind::Other(port),
                flags: FACT,
                ..Setting::ROW
            },
            { threads: usize } Setting {
                name: "threads",
                group: SERVER,
                value_name: "N",
                default: Some("0"),
                help: "Worker threads serving clients; 0 = one per CPU core but one.\n\n0 runs at least one. The core left is for the kernel's network work and the machine's other processes: see docs/performance.md, \"Threads\".",
                kind: Kind::Other(count),
                ..Setting::ROW
            },
            { requirepass: Option<String>; live requirepass: Secret } Setting {
                name: "requirepass",
                group: SECURITY,
                value_name: "PASSWORD",
                help: "Password clients must give with AUTH or HELLO first.\n\nEvery command but AUTH, HELLO and a few connection commands is refused with NOAUTH until the client authenticates.",
                kind: Kind::Password,
                flags: MODIFIABLE | SECRET,
                apply: Some(follow_requirepass),
                ..Setting::ROW
            },
            { requirepass_file: Option<PathBuf> } Setting {
                name: "requirepass-file",
                group: SECURITY,
                value_name: "PATH",
                help: "Read the password from this file (trailing newline ignored).",
                kind: Kind::Other(path),
                ..Setting::ROW
            },
            { aclfile: Option<PathBuf> } Setting {
                name: "aclfile",
                group: SECURITY,
                value_name: "PATH",
                help: "ACL users file: loaded at start and by ACL LOAD, written by ACL SAVE.\n\nRedis 7.0's format: one `user <name> <rules...>` line per user, as ACL LIST prints them. A missing file or a bad line refuses the start. Without a `user default` line, the default user is `on nopass ~* &* +@all`, with --requirepass's password if one is set. Not settable at runtime.",
                kind: Kind::Other(path),
                flags: CONFIG,
                ..Setting::ROW
            },
            { user: Vec<String> } Setting {
                name: "user",
                group: SECURITY,
                value_name: "LINE",
                help: "An ACL user, as a line of an ACL file without its `user` word; repeatable.\n\n`--user 'gw on >secret ~tenant:* +@ratelimit'`; in the config file an array, `user = [\"gw on ...\"]`, which CONFIG REWRITE writes. Redis's `user` lines of redis.conf: not with --aclfile. Without a `default` line, the default user is `on nopass ~* &* +@all`, with --requirepass's password if one is set.",
                kind: Kind::Other(text),
                flags: NO_ENV | REPEAT,
                ..Setting::ROW
            },
            { protected_mode: bool; live protected_mode: AtomicBool } Setting {
                name: "protected-mode",
                group: SECURITY,
                value_name: "yes|no",
                default: Some("yes"),
                help: "Refuse non-loopback clients while no password is set.\n\nRedis's protected mode: with no --requirepass, a client from an address other than loopback is refused with an error saying how to allow it.",
                kind: Kind::YesNo,
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { rename_command: Vec<String> } Setting {
                name: "rename-command",
                group: SECURITY,
                value_name: "NAME NEWNAME",
                help: "Rename a command, or disable it with an empty name; repeatable.\n\n`--rename-command FLUSHALL \"\"` disables FLUSHALL. The variable takes `NAME=NEWNAME` pairs separated by commas.",
                kind: Kind::Other(text),
                flags: NO_ENV,
                ..Setting::ROW
            },
            { tls_port: Option<u16> } Setting {
                name: "tls-port",
                group: TLS,
                value_name: "PORT",
                help: "Also serve TLS on this port (0 picks a free one).\n\nNeeds --tls-cert-file and --tls-key-file.",
                kind: Kind::Other(port),
                flags: FACT,
                ..Setting::ROW
            },
            { tls_cert_file: Option<PathBuf> } Setting {
                name: "tls-cert-file",
                group: TLS,
                value_name: "PATH",
                help: "Server certificate chain (PEM).",
                kind: Kind::Other(path),
                ..Setting::ROW
            },
            { tls_key_file: Option<PathBuf> } Setting {
                name: "tls-key-file",
                group: TLS,
                value_name: "PATH",
                help: "Server private key (PEM: PKCS#8, PKCS#1 or SEC1).",
                kind: Kind::Other(path),
                ..Setting::ROW
            },
            { tls_ca_cert_file: Option<PathBuf> } Setting {
                name: "tls-ca-cert-file",
                group: TLS,
                value_name: "PATH",
                help: "Require TLS clients to present a certificate signed by these CAs.\n\nPEM.",
                kind: Kind::Other(path),
                ..Setting::ROW
            },
            { tls_replication: bool } Setting {
                name: "tls-replication",
                group: TLS,
                value_name: "yes|no",
                default: Some("no"),
                help: "A replica reaches its primary over TLS.\n\nThe primary's address is its --tls-port; its certificate must chain to --tls-ca-cert-file; --tls-cert-file and --tls-key-file, if given, are presented to a primary that asks for a client certificate.",
                kind: Kind::YesNo,
                ..Setting::ROW
            },
            { maxclients: u64; live maxclients: AtomicU64 } Setting {
                name: "maxclients",
                group: CLIENTS,
                value_name: "N",
                default: Some("10000"),
                help: "Most clients connected at once; the next one is refused.",
                kind: Kind::Number(Number::count(1, U32)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { timeout: u64; live timeout_secs: AtomicU64 } Setting {
                name: "timeout",
                group: CLIENTS,
                value_name: "SECONDS",
                default: Some("0"),
                help: "Close a client idle for this many seconds; 0 = never.",
                kind: Kind::Number(Number::count(0, I32)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { proto_max_bulk_len: u64; live proto_max_bulk_len: AtomicU64 } Setting {
                name: "proto-max-bulk-len",
                group: CLIENTS,
                value_name: "SIZE",
                default: Some("512mb"),
                help: "Largest bulk string a request may carry.\n\nIn bytes, or with a unit: k, kb, m, mb, g, gb (k = 1000, kb = 1024).",
                kind: Kind::Number(Number::size(1024 * 1024, MAX)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { client_query_buffer_limit: u64; live client_query_buffer_limit: AtomicU64 } Setting {
                name: "client-query-buffer-limit",
                group: CLIENTS,
                value_name: "SIZE",
                default: Some("1gb"),
                help: "Largest unprocessed input a client may have buffered.",
                kind: Kind::Number(Number::size(1024 * 1024, MAX)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { maxmemory: u64; live maxmemory: AtomicU64 } Setting {
                name: "maxmemory",
                group: CLIENTS,
                value_name: "SIZE",
                default: Some("0"),
                help: "Memory cap; 0 = none.\n\nSizes take units (k, kb, m, mb, g, gb). Past the cap, what happens to writes is --maxmemory-policy's choice.",
                kind: Kind::Number(Number::size(0, MAX)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { maxmemory_policy: MaxmemoryPolicy; live maxmemory_policy: AtomicU8 } Setting {
                name: "maxmemory-policy",
                group: CLIENTS,
                value_name: "POLICY",
                default: Some("noeviction"),
                help: "What writes meet at the --maxmemory cap.\n\n`noeviction` refuses writes with -OOM; `volatile-ttl` evicts the keys nearest their expiry (a limiter key about to expire matters least).",
                kind: Kind::Choice(&MaxmemoryPolicy::NAMES, maxmemory_policy),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { client_output_buffer_limit: OutputLimits; live output_limits: LiveOutputLimits } Setting {
                name: "client-output-buffer-limit",
                group: CLIENTS,
                value_name: "LIMITS",
                default: Some(OutputLimits::DEFAULT),
                help: "Disconnect clients that do not read their replies.\n\n`CLASS HARD SOFT SECONDS` groups as in redis.conf, for the classes `normal` and `replica` (or `slave`); a class not named keeps its default, and a bare `HARD SOFT SECONDS` is `normal`'s (sizes take units; 0 disables each part). Memory per client stays bounded regardless: the server stops reading from a client whose replies are not read. A replica's unread bytes are its full copy and the stream not yet taken.\n\n[default: normal 0 0 0 replica 256mb 64mb 60] (Redis's)",
                kind: Kind::Limits,
                flags: MODIFIABLE | HIDE_DEFAULT,
                ..Setting::ROW
            },
            { snapshot: Option<PathBuf> } Setting {
                name: "snapshot",
                group: PERSISTENCE,
                value_name: "PATH",
                help: "Keep the keyspace across restarts in this file; off by default.\n\nWritten every --snapshot-interval and on SIGTERM, loaded at start.",
                kind: Kind::Other(path),
                ..Setting::ROW
            },
            { snapshot_interval: std::time::Duration } Setting {
                name: "snapshot-interval",
                group: PERSISTENCE,
                value_name: "DURATION",
                default: Some("1s"),
                help: "How often to write the snapshot: the most a crash loses.\n\n`1s`, `500ms`, `2m`; a bare number is seconds.",
                kind: Kind::Other(duration),
                ..Setting::ROW
            },
            { appendonly: bool; live appendonly: AtomicBool } Setting {
                name: "appendonly",
                group: PERSISTENCE,
                value_name: "yes|no",
                default: Some("no"),
                help: "Append every write's effect to a file, replayed at start.\n\nThe file is --appendfilename, beside the snapshot, else in the working directory. With it on, a crash loses at most what --appendfsync allows (see docs/durability.md).",
                kind: Kind::YesNo,
                flags: MODIFIABLE,
                apply: Some(follow_appendonly),
                ..Setting::ROW
            },
            { appendfsync: crate::persist::aof::Fsync; live appendfsync: AtomicU8 } Setting {
                name: "appendfsync",
                group: PERSISTENCE,
                value_name: "always|everysec|no",
                default: Some("everysec"),
                help: "When the append-only file is fsynced.\n\n`always`: before the reply to a write (nothing acknowledged is lost); `everysec`: once a second; `no`: when the OS decides.",
                kind: Kind::Choice(&Fsync::NAMES, fsync),
                flags: MODIFIABLE,
                apply: Some(follow_appendfsync),
                ..Setting::ROW
            },
            { appendfilename: String } Setting {
                name: "appendfilename",
                group: PERSISTENCE,
                value_name: "NAME",
                default: Some("appendonly.aof"),
                help: "The append-only file's name, not a path.",
                kind: Kind::Other(file_name),
                flags: CONFIG,
                ..Setting::ROW
            },
            { auto_aof_rewrite_percentage: u64; live auto_aof_rewrite_percentage: AtomicU64 } Setting {
                name: "auto-aof-rewrite-percentage",
                group: PERSISTENCE,
                value_name: "PERCENT",
                default: Some("100"),
                help: "Rewrite the append-only file at this many percent growth.\n\n0: never.\n\nIn percent over its base (its size after the last rewrite), once it is also at least --auto-aof-rewrite-min-size.",
                kind: Kind::Number(Number::count(0, I32)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { auto_aof_rewrite_min_size: u64; live auto_aof_rewrite_min_size: AtomicU64 } Setting {
                name: "auto-aof-rewrite-min-size",
                group: PERSISTENCE,
                value_name: "SIZE",
                default: Some("64mb"),
                help: "... and is at least this large.\n\nSizes take units (k, kb, m, mb, g, gb).",
                kind: Kind::Number(Number::size(0, MAX)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { aof_load_truncated: bool; live aof_load_truncated: AtomicBool } Setting {
                name: "aof-load-truncated",
                group: PERSISTENCE,
                value_name: "yes|no",
                default: Some("yes"),
                help: "Cut off a torn last AOF record, or refuse to start.\n\nA torn record is a write cut short by a crash: `yes` cuts it off with a warning, `no` refuses the start.",
                kind: Kind::YesNo,
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { replicaof: Option<(String, u16)> } Setting {
                name: "replicaof",
                group: REPLICATION,
                value_name: "HOST:PORT",
                help: "Start as a replica of this primary, as `REPLICAOF` does.\n\nRedis Sentinel may change it at run time.",
                kind: Kind::Other(host_port),
                flags: FACT,
                ..Setting::ROW
            },
            { masterauth: Option<String>; live masterauth: RwLock<Option<String>> } Setting {
                name: "masterauth",
                group: REPLICATION,
                value_name: "PASSWORD",
                help: "The password a replica gives its primary (its --requirepass).",
                kind: Kind::Text(Line::Secret),
                flags: MODIFIABLE | SECRET,
                ..Setting::ROW
            },
            { masteruser: Option<String>; live masteruser: RwLock<Option<String>> } Setting {
                name: "masteruser",
                group: REPLICATION,
                value_name: "USER",
                help: "The user a replica authenticates as, with --masterauth.",
                kind: Kind::Text(Line::Name),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { repl_backlog_size: u64; live repl_backlog_size: AtomicU64 } Setting {
                name: "repl-backlog-size",
                group: REPLICATION,
                value_name: "SIZE",
                default: Some("16mb"),
                help: "Stream kept for a reconnecting replica to resume from.\n\nThe newest stream bytes a primary keeps, so a replica that reconnects within them resumes without a full copy (sizes take units; 16kb to 1gb, taken as the stream grows). A decision's effect is about 70 bytes plus the key: 16mb holds about 160,000 decisions on 30-byte keys.",
                // Redis's least, and at most 1 GiB (a disconnect of about two
                // minutes at 100,000 decisions a second; a longer one is cheaper
                // to end with a full copy than to hold in memory).
                kind: Kind::Number(Number::size(16 * 1024, 1 << 30)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { repl_timeout: u64; live repl_timeout_secs: AtomicU64 } Setting {
                name: "repl-timeout",
                group: REPLICATION,
                value_name: "SECONDS",
                default: Some("60"),
                help: "Seconds of silence after which a replication link is dropped.\n\nA replica that neither acknowledges nor takes data for this long (its primary's view), or a primary that sends nothing (its replica's).",
                kind: Kind::Number(Number::count(1, I32)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { repl_ping_replica_period: u64; live repl_ping_replica_period: AtomicU64 } Setting {
                name: "repl-ping-replica-period",
                group: REPLICATION,
                value_name: "SECONDS",
                default: Some("10"),
                help: "Seconds between a primary's PINGs to its replicas.\n\nWritten into the replication stream while replicas are attached, so they tell a quiet primary from a dead link (Redis's `repl-ping-replica-period`, 1 or more).",
                kind: Kind::Number(Number::count(1, I32)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { shutdown_timeout: u64; live shutdown_timeout: AtomicU64 } Setting {
                name: "shutdown-timeout",
                group: REPLICATION,
                value_name: "SECONDS",
                default: Some("10"),
                help: "Seconds `SHUTDOWN` waits for replicas to catch up.\n\nA primary with replicas attached waits for each to acknowledge the stream so far, or this long, unless `SHUTDOWN NOW`; 0 does not wait (Redis's `shutdown-timeout`). SIGTERM does not wait.",
                kind: Kind::Number(Number::count(0, I32)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { replica_announce_ip: Option<String>; live replica_announce_ip: RwLock<Option<String>> } Setting {
                name: "replica-announce-ip",
                group: REPLICATION,
                value_name: "IP",
                help: "The address a replica tells its primary (and Sentinel) to reach.\n\nFor a replica behind NAT or a port mapping; default: the address it connects from.",
                kind: Kind::Text(Line::Name),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { replica_announce_port: u64; live replica_announce_port: AtomicU64 } Setting {
                name: "replica-announce-port",
                group: REPLICATION,
                value_name: "PORT",
                default: Some("0"),
                help: "The port a replica tells its primary; 0: the one it listens on.",
                kind: Kind::Number(Number::count(0, 65535)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { replica_priority: u64; live replica_priority: AtomicU64 } Setting {
                name: "replica-priority",
                group: REPLICATION,
                value_name: "N",
                default: Some("100"),
                help: "Sentinel promotes the lowest first; 0: never this one.",
                kind: Kind::Number(Number::count(0, I32)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { cluster_enabled: bool } Setting {
                name: "cluster-enabled",
                group: CLUSTER,
                value_name: "yes|no",
                default: Some("no"),
                help: "Cluster mode as Redis runs it: nodes meet and slots move live.\n\nNodes join by CLUSTER MEET and gossip; redis-cli --cluster creates, grows and shrinks the cluster.",
                kind: Kind::YesNo,
                flags: CONFIG,
                ..Setting::ROW
            },
            { cluster_config_file: PathBuf } Setting {
                name: "cluster-config-file",
                group: CLUSTER,
                value_name: "PATH",
                default: Some("nodes.conf"),
                help: "This node's cluster configuration, in nodes.conf format.\n\nRewritten on every change: a node restarts with its id, epochs, role and slots.",
                kind: Kind::Other(path),
                flags: CONFIG,
                ..Setting::ROW
            },
            { cluster_node_timeout: u64 } Setting {
                name: "cluster-node-timeout",
                group: CLUSTER,
                value_name: "MS",
                default: Some("15000"),
                help: "Milliseconds a node may stay silent before it is suspected.",
                kind: Kind::Number(Number::count(1, I32)),
                flags: CONFIG,
                ..Setting::ROW
            },
            { cluster_port: u64 } Setting {
                name: "cluster-port",
                group: CLUSTER,
                value_name: "PORT",
                default: Some("0"),
                help: "The cluster bus's port; 0: the client port + 10000.",
                kind: Kind::Number(Number::count(0, 65535)),
                flags: CONFIG,
                ..Setting::ROW
            },
            { cluster_announce_ip: Option<String> } Setting {
                name: "cluster-announce-ip",
                group: CLUSTER,
                value_name: "IP",
                help: "The address other nodes and clients are told to use for this node.\n\nDefault: the one the first CLUSTER MEET it gets was sent to.",
                kind: Kind::Other(text),
                flags: CONFIG | LONG_HELP_ONLY,
                ..Setting::ROW
            },
            { cluster_announce_port: u64 } Setting {
                name: "cluster-announce-port",
                group: CLUSTER,
                value_name: "PORT",
                default: Some("0"),
                help: "The client port announced; 0: the one it listens on.",
                kind: Kind::Number(Number::count(0, 65535)),
                flags: CONFIG | LONG_HELP_ONLY,
                ..Setting::ROW
            },
            { cluster_announce_bus_port: u64 } Setting {
                name: "cluster-announce-bus-port",
                group: CLUSTER,
                value_name: "PORT",
                default: Some("0"),
                help: "The bus port announced; 0: the one it listens on.",
                kind: Kind::Number(Number::count(0, 65535)),
                flags: CONFIG | LONG_HELP_ONLY,
                ..Setting::ROW
            },
            { cluster_nodes: Option<String> } Setting {
                name: "cluster-nodes",
                group: CLUSTER,
                value_name: "HOST:PORT,...",
                help: "Cluster mode: every node's address, the same list on every node.\n\nComma-separated; the 16384 slots are split into ranges in list order.",
                kind: Kind::Other(text),
                ..Setting::ROW
            },
            { cluster_sentinels: Vec<(String, u16)> } Setting {
                name: "cluster-sentinels",
                group: CLUSTER,
                value_name: "HOST:PORT,...",
                help: "Cluster mode following failovers seen by these Redis Sentinels.\n\nComma-separated. The Sentinels watch every shard's primary under the shard's name (`name` in --cluster-config, default `shard-N`). Each node follows their `+switch-master` events, so slots and `MOVED` replies follow a failover.",
                kind: Kind::Other(host_port),
                flags: LIST | LONG_HELP_ONLY,
                ..Setting::ROW
            },
            { cluster_announce: Option<String> } Setting {
                name: "cluster-announce",
                group: CLUSTER,
                value_name: "HOST:PORT",
                help: "Which entry of the cluster this node is (default: bind:port).",
                kind: Kind::Other(text),
                flags: LONG_HELP_ONLY,
                ..Setting::ROW
            },
            { cluster_config: Option<PathBuf> } Setting {
                name: "cluster-config",
                group: CLUSTER,
                value_name: "PATH",
                help: "Cluster mode with explicit slot ranges, from a TOML file.\n\nThe file has `[[node]] addr = \"HOST:PORT\"  slots = [\"0-8191\"]` entries.",
                kind: Kind::Other(path),
                flags: LONG_HELP_ONLY,
                ..Setting::ROW
            },
            { policies: Option<PathBuf> } Setting {
                name: "policies",
                group: POLICIES,
                value_name: "PATH",
                help: "Named limits: a YAML file, or a directory of them.\n\nIn envoyproxy/ratelimit's format (plus algorithm, period, burst, precision); reloaded when a file changes, on SIGHUP and on RL.POLICY RELOAD. A bad file is refused whole.",
                kind: Kind::Other(path),
                ..Setting::ROW
            },
            { policies_shadow: bool } Setting {
                name: "policies-shadow",
                group: POLICIES,
                value_name: "yes|no",
                default: Some("no"),
                help: "Every policy in shadow mode: decide and count, but allow all.\n\nDecisions are taken, counted and reported, and every request is allowed.",
                kind: Kind::YesNo,
                ..Setting::ROW
            },
            { policies_max_file_size: u64; live policies_max_file_size: AtomicU64 } Setting {
                name: "policies-max-file-size",
                group: POLICIES,
                value_name: "SIZE",
                default: Some("4mb"),
                help: "The largest policy file read; a larger one is refused whole.\n\nSizes take units. The refusal names the file's size and this cap.",
                kind: Kind::Number(Number::size(1, MAX)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { lua_time_limit: u64; live lua_time_limit_ms: AtomicU64 } Setting {
                name: "lua-time-limit",
                group: SCRIPTS,
                value_name: "MS",
                default: Some("5000"),
                help: "Milliseconds a Lua script runs before others are answered BUSY.\n\nFrom then on SCRIPT KILL may stop it (Redis's `busy-reply-threshold`).",
                kind: Kind::Number(Number::count(0, MAX)),
                flags: MODIFIABLE,
                aliases: &["busy-reply-threshold"],
                ..Setting::ROW
            },
            { scripts_native: bool; live scripts_native: AtomicBool } Setting {
                name: "scripts-native",
                group: SCRIPTS,
                value_name: "yes|no",
                default: Some("yes"),
                help: "Run the limiter scripts Turnstile recognises in Rust, not Lua.\n\nThe limiter libraries' scripts recognised by SHA1 (docs/scripting.md's catalogue) run in Rust with the Lua script's replies and effects. `no` runs every script in Lua, to compare the two.",
                kind: Kind::YesNo,
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { rls_port: Option<u16> } Setting {
                name: "rls-port",
                group: RLS,
                value_name: "PORT",
                help: "Serve Envoy's rate limit service (gRPC) on this port; off by default.\n\n`envoy.service.ratelimit.v3.RateLimitService` and the gRPC health service; 0 picks a free port.",
                kind: Kind::Other(port),
                ..Setting::ROW
            },
            { rls_headers: bool } Setting {
                name: "rls-headers",
                group: RLS,
                value_name: "yes|no",
                default: Some("no"),
                help: "Add RateLimit headers to the rate limit service's responses.\n\nThe IETF draft-10 `RateLimit-Policy` and `RateLimit` headers, and `Retry-After` when over the limit.",
                kind: Kind::YesNo,
                ..Setting::ROW
            },
            { rls_maxclients: u64; live rls_maxclients: AtomicU64 } Setting {
                name: "rls-maxclients",
                group: RLS,
                value_name: "N",
                default: Some("256"),
                help: "Most rate limit service connections at once; more are closed.\n\nClosed on accept, counted as `turnstile_connections_rejected_total{reason=\"rls_maxclients\"}`. Envoy holds one per worker thread.",
                kind: Kind::Number(Number::count(1, U32)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { rls_handshake_timeout: u64; live rls_handshake_timeout_ms: AtomicU64 } Setting {
                name: "rls-handshake-timeout",
                group: RLS,
                value_name: "MS",
                default: Some("5000"),
                help: "Milliseconds a new connection has to send the HTTP/2 preface.\n\nA rate limit service connection that has not sent it by then is closed.",
                kind: Kind::Number(Number::count(1, I32)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { rls_idle_timeout: u64; live rls_idle_timeout_ms: AtomicU64 } Setting {
                name: "rls-idle-timeout",
                group: RLS,
                value_name: "MS",
                default: Some("300000"),
                help: "Milliseconds of silence after which a connection is closed.\n\nSilent: no byte read. 0: no limit. Envoy reconnects.",
                kind: Kind::Number(Number::count(0, I32)),
                flags: MODIFIABLE,
                ..Setting::ROW
            },
            { rls_max_message_size: u64 } Setting {
                name: "rls-max-message-size",
                group: RLS,
                value_name: "SIZE",
                default: Some("256kb"),
                help: "The largest gRPC request message decoded.\n\nSizes take units; a larger message is answered RESOURCE_EXHAUSTED.",
                kind: Kind::Other(size),
                flags: CONFIG,
                ..Setting::ROW
            },
            { rls_max_concurrent_streams: u32 } Setting {
                name: "rls-max-concurrent-streams",
                group: RLS,
                value_name: "N",
                default: Some("256"),
                help: "HTTP/2 streams (calls in flight) a connection may carry.\n\nThe connection's SETTINGS_MAX_CONCURRENT_STREAMS.",
                kind: Kind::Other(count32),
                flags: CONFIG,
                ..Setting::ROW
            },
            { metrics_addr: String } Setting {
                name: "metrics-addr",
                group: METRICS,
                value_name: "HOST:PORT|off",
                default: Some("127.0.0.1:9898"),
                help: "Prometheus endpoint and status page, or `off`.\n\n`/metrics`, `/healthz` and the status page; port 0 picks a free one.",
                kind: Kind::Other(text),
                ..Setting::ROW
            },
            { metrics_allowed_hosts: Vec<String> } Setting {
                name: "metrics-allowed-hosts",
                group: METRICS,
                value_name: "HOST,...",
                help: "Host names the status page answers to, besides IPs and localhost.\n\nComma-separated. The status page and `POST /json` refuse a request naming another host (421), so a page elsewhere cannot reach them by DNS rebinding. `/metrics` and `/healthz` answer any host.",
                kind: Kind::Other(text),
                flags: LIST,
                ..Setting::ROW
            },
            { log_level: String } Setting {
                name: "log-level",
                group: METRICS,
                value_name: "FILTER",
                default: Some("info"),
                help: "Log filter: error, warn, info, debug, trace, or a directive.\n\nA directive is a `tracing` filter (`turnstile=debug,info`).",
                kind: Kind::Other(text),
                ..Setting::ROW
            },
            { log_format: String } Setting {
                name: "log-format",
                group: METRICS,
                value_name: "text|json",
                default: Some("text"),
                help: "Log lines as `text` (for people) or `json` (for collectors).\n\n`json` writes one JSON object a line, with the same fields.",
                kind: Kind::Other(log_format),
                ..Setting::ROW
            },
            { top_keys: usize } Setting {
                name: "top-keys",
                group: METRICS,
                value_name: "N",
                default: Some("512"),
                help: "Keys the heavy hitters (RL.TOP) count; 0 turns them off.\n\nCounters per kind (denied, allowed, shadow) and period, across the node; memory is fixed by it, about 3 KB per counter at most. A count is off by at most about W * N / top-keys (W: CPUs, at most 8; N: that kind's decisions in the period).",
                kind: Kind::Other(top_keys),
                flags: FACT,
                ..Setting::ROW
            },
            { top_window: std::time::Duration } Setting {
                name: "top-window",
                group: METRICS,
                value_name: "DURATION",
                default: Some("60s"),
                help: "The period the heavy hitters cover (RL.TOP's longest WINDOW).\n\nKept in six slices.",
                kind: Kind::Other(duration),
                flags: CONFIG,
                ..Setting::ROW
            },
            { top_sample: u32 } Setting {
                name: "top-sample",
                group: METRICS,
                value_name: "N",
                default: Some("16"),
                help: "Admissions the heavy hitters count: one in N; 1 counts all.\n\nOne in N at random, each weighing N (denials and shadow denials are all counted). Admissions are most decisions; sampling them keeps the sketches' cost per decision small.",
                kind: Kind::Other(top_sample),
                flags: CONFIG,
                ..Setting::ROW
            },
            {} Setting {
                name: "databases",
                flags: FACT | NOT_A_FLAG,
                ..Setting::ROW
            },
            {} Setting {
                name: "save",
                flags: FACT | NOT_A_FLAG,
                ..Setting::ROW
            },
        }
    };
}
pub(super) use rows;
