//! Every counter and gauge, declared once: its Prometheus name, kind,
//! unit, help and labels, where its reading comes from, and where `INFO`
//! and `/status.json` show it. `/metrics` (`metrics/mod.rs`), `INFO`
//! (`cmd/admin/server.rs`) and `/status.json` (`server/status.rs`) are
//! loops over this list; `docs/operations.md`'s metrics table lists the
//! named ones (`tests/it/docs_tables.rs` checks it).
//!
//! The list is in INFO's order: a section shows its rows as they come
//! here, and `Read::Text` rows mark where the `INFO` command writes the
//! lines that are not counters (settings, statuses). `/metrics` orders
//! itself, and `/status.json`'s keys are sorted.
//!
//! A counter the server counts itself is `Read::Own`: the macro gives
//! it atomics in [`Counters`] and a constant naming them, so counting is
//! `state.stats.counters.inc(table::NAME)` where the event happens.
//!
//! Why a macro over a plain `const` slice: the slice alone cannot name its
//! rows, and the rows the server counts need a constant each (their
//! atomics' place) that must not drift from the list; the macro takes
//! `NAME = Def { .. }` rows and makes the slice, the constants and the
//! atomics' count from that one list. Each row stays a plain struct
//! literal, so it reads without knowing the macro.

use super::counters::{
    at, div, field, human, slots, Def, Id, Kind, Read, Readings, Section, Series, Unit, COUNTER,
    GAUGE, TEXT,
};
use crate::stats::{Counters, Stats};

macro_rules! table {
    ($($(#[$doc:meta])* $id:ident = $def:expr;)*) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms, dead_code)]
        enum Row { $($id),* }
        /// Every row, in INFO's order.
        pub const TABLE: &[Def] = &[$($def),*];
        const ROWS: usize = TABLE.len();
        /// Each row's first atomic in [`Counters`] (`usize::MAX`: read
        /// elsewhere), and how many there are.
        pub const FIRST_SLOTS: ([usize; ROWS], usize) = slots::<ROWS>(TABLE);
        pub const SLOTS: usize = FIRST_SLOTS.1;
        $(
            $(#[$doc])*
            pub const $id: Id = Id::new(Row::$id as usize, FIRST_SLOTS.0[Row::$id as usize]);
        )*
    };
}

impl Id {
    /// The row's declaration.
    pub const fn def(self) -> &'static Def {
        &TABLE[self.row]
    }
}

/// The atomics for the rows the server counts itself.
pub fn counters() -> Counters {
    let mut gauge = vec![false; SLOTS];
    for (def, first) in TABLE.iter().zip(FIRST_SLOTS.0) {
        if first != usize::MAX {
            gauge[first..first + def.series.count()].fill(def.kind == Kind::Gauge);
        }
    }
    Counters::new(gauge.into_boxed_slice())
}

/// Row `row`'s place.
pub fn id(row: usize) -> Id {
    Id::new(row, FIRST_SLOTS.0[row])
}

/// The metrics' names (the rows Prometheus sees).
pub fn names() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|d| d.name).filter(|n| !n.is_empty())
}

/// The snapshot thread is on (`--snapshot`): persistence's fields show.
/// The node runs a growing cluster (`--cluster-enabled yes`).
fn cluster_on(r: &Readings<'_>) -> bool {
    r.cluster.is_some()
}

fn snapshots_on(r: &Readings<'_>) -> bool {
    r.persist.is_some()
}

/// The append-only file is on: its sizes and path show.
fn aof_on(r: &Readings<'_>) -> bool {
    r.aof.is_on()
}

/// A snapshot reading, 0 without snapshots.
fn snapshot(r: &Readings<'_>, f: fn(&crate::persist::Persist) -> u64) -> u64 {
    r.persist.map_or(0, f)
}

/// `decisions_ALGO:allowed=..,limited=..,units=..,near_limit=..`, a line
/// per algorithm: the figures `/metrics` reports by label.
fn decision_lines(r: &Readings<'_>, t: &mut String) {
    use std::fmt::Write;
    for algo in crate::limiter::Algorithm::ALL {
        let d = r.stats.decisions(algo);
        let _ = write!(
            t,
            "decisions_{}:allowed={},limited={},units={},near_limit={}\r\n",
            algo.name(),
            d.allowed,
            d.limited,
            d.units,
            d.near_limit
        );
    }
}

/// The labels series carry.
pub mod label {
    pub const ALGORITHM: &str = "algorithm";
    pub const COMMAND: &str = "command";
    pub const DESCRIPTOR: &str = "descriptor";
    pub const DOMAIN: &str = "domain";
    pub const REPLICA: &str = "replica";
    pub const POLICY: &str = "policy";
    pub const STAT: &str = "stat";
    pub const REDIS_VERSION: &str = "redis_version";
    pub const RESULT: &str = "result";
    pub const STATUS: &str = "status";
    pub const VERSION: &str = "version";
}

table! {
    // # Server
    SERVER_HEAD = Def { section: Some(Section::Server), read: Read::Text("server"), ..TEXT };
    CLOCK_BACKWARD_STEPS = Def {
        name: "turnstile_clock_backward_steps_total",
        help: "Steps backwards seen in the wall clock (server time never follows them).",
        read: Read::With(|r, _| r.backward_steps),
        section: Some(Section::Server),
        fields: &[field("clock_backward_steps")],
        ..COUNTER
    };
    CLOCK_FORWARD_STEPS = Def {
        name: "turnstile_clock_forward_steps_total",
        help: "Forward steps of the wall clock over 1 s that lasted 10 s and were followed.",
        read: Read::With(|r, _| r.forward_steps.adopted),
        section: Some(Section::Server),
        fields: &[field("clock_forward_steps")],
        ..COUNTER
    };
    CLOCK_FORWARD_STEPS_IGNORED = Def {
        name: "turnstile_clock_forward_steps_ignored_total",
        help: "Forward steps of the wall clock over 1 s that reverted within 10 s and were ignored.",
        read: Read::With(|r, _| r.forward_steps.ignored),
        section: Some(Section::Server),
        fields: &[field("clock_forward_steps_ignored")],
        ..COUNTER
    };
    /// Read in nanoseconds.
    UPTIME = Def {
        name: "turnstile_uptime_seconds",
        unit: Unit::Seconds,
        help: "Seconds since the server started.",
        read: Read::With(|r, _| r.uptime.as_nanos() as u64),
        scale: 1e9,
        section: Some(Section::Server),
        fields: &[div("uptime_in_seconds", 1_000_000_000), div("uptime_in_days", 86_400_000_000_000)],
        json: Some(("uptime_seconds", 1_000_000_000)),
        ..GAUGE
    };
    SERVER_TAIL = Def { section: Some(Section::Server), read: Read::Text("server_tail"), ..TEXT };

    // # Clients
    CONNECTED_CLIENTS = Def {
        name: "turnstile_connected_clients",
        help: "Clients connected now.",
        read: Read::With(|r, _| r.clients as u64),
        section: Some(Section::Clients),
        fields: &[field("connected_clients")],
        json: Some(("clients.connected", 1)),
        ..GAUGE
    };
    CLIENTS_TEXT = Def { section: Some(Section::Clients), read: Read::Text("clients"), ..TEXT };
    MAX_CLIENTS = Def {
        name: "turnstile_max_clients",
        help: "The --maxclients limit.",
        read: Read::With(|r, _| r.maxclients),
        json: Some(("clients.max", 1)),
        ..GAUGE
    };

    // # Memory
    MEMORY_USED = Def {
        name: "turnstile_memory_used_bytes",
        unit: Unit::Bytes,
        help: "Heap bytes in use (RSS where the counting allocator is absent).",
        read: Read::With(|_, _| crate::alloc::used_memory() as u64),
        section: Some(Section::Memory),
        fields: &[human("used_memory")],
        json: Some(("memory.used", 1)),
        ..GAUGE
    };
    MEMORY_RSS = Def {
        read: Read::With(|_, _| crate::alloc::rss() as u64),
        section: Some(Section::Memory),
        fields: &[human("used_memory_rss")],
        ..GAUGE
    };
    MEMORY_TEXT = Def { section: Some(Section::Memory), read: Read::Text("memory"), ..TEXT };
    MEMORY_MAX = Def {
        name: "turnstile_memory_max_bytes",
        unit: Unit::Bytes,
        help: "The --maxmemory limit; 0 = none.",
        read: Read::With(|r, _| r.maxmemory),
        json: Some(("memory.max", 1)),
        ..GAUGE
    };
    /// Bytes held by clients' read and write buffers (Redis's
    /// `mem_clients_normal`), kept up by the connections. `--maxmemory`
    /// never evicts a key to make room that these took.
    CLIENT_BUFFERS = Def {
        read: Read::Own,
        section: Some(Section::Memory),
        fields: &[field("mem_clients_normal")],
        ..GAUGE
    };
    LUA_MEMORY = Def {
        name: "turnstile_lua_memory_bytes",
        unit: Unit::Bytes,
        help: "Bytes the Lua heap holds (INFO used_memory_lua).",
        read: Read::With(|r, _| r.lua_memory as u64),
        section: Some(Section::Memory),
        fields: &[human("used_memory_lua")],
        ..GAUGE
    };
    SCRIPTS_CACHED = Def {
        name: "turnstile_scripts_cached",
        help: "Scripts in the cache (SCRIPT LOAD, EVAL), shared by every connection.",
        read: Read::With(|r, _| r.scripts_cached as u64),
        section: Some(Section::Memory),
        fields: &[field("number_of_cached_scripts")],
        ..GAUGE
    };

    // # Persistence: the snapshot's fields, then the append-only file's.
    PERSISTENCE_TEXT = Def { section: Some(Section::Persistence), read: Read::Text("persistence"), ..TEXT };
    SNAPSHOT_CHANGES_PENDING = Def {
        name: "turnstile_snapshot_changes_pending",
        help: "Write commands since the last snapshot: what a crash now would lose.",
        read: Read::With(|r, _| r.persist.map_or(0, |p| p.changes_since_save(r.stats.writes()))),
        section: Some(Section::Persistence),
        fields: &[field("rdb_changes_since_last_save")],
        when: snapshots_on,
        ..GAUGE
    };
    SNAPSHOT_IN_PROGRESS = Def {
        section: Some(Section::Persistence),
        read: Read::Text("rdb_bgsave_in_progress"),
        when: snapshots_on,
        ..TEXT
    };
    SNAPSHOT_LAST_SUCCESS = Def {
        name: "turnstile_snapshot_last_success_timestamp_seconds",
        unit: Unit::Seconds,
        help: "Unix time of the last snapshot written (of the start, before one).",
        read: Read::With(|r, _| snapshot(r, |p| Stats::read(&p.last_save))),
        section: Some(Section::Persistence),
        fields: &[field("rdb_last_save_time")],
        when: snapshots_on,
        ..GAUGE
    };
    SNAPSHOT_STATUS = Def {
        section: Some(Section::Persistence),
        read: Read::Text("rdb_last_bgsave_status"),
        when: snapshots_on,
        ..TEXT
    };
    /// Read in microseconds.
    SNAPSHOT_DURATION = Def {
        name: "turnstile_snapshot_duration_seconds",
        unit: Unit::Seconds,
        help: "How long the last snapshot took to write.",
        read: Read::With(|r, _| snapshot(r, |p| Stats::read(&p.last_duration_us))),
        scale: 1e6,
        section: Some(Section::Persistence),
        fields: &[field("rdb_last_bgsave_time_usec")],
        when: snapshots_on,
        ..GAUGE
    };
    SNAPSHOTS = Def {
        name: "turnstile_snapshots_total",
        help: "Snapshots written (result=ok) and failed (result=error).",
        series: Series::Each(label::RESULT, &["ok", "error"]),
        read: Read::With(|r, i| match i {
            0 => snapshot(r, |p| Stats::read(&p.saves)),
            _ => snapshot(r, |p| Stats::read(&p.failures)),
        }),
        section: Some(Section::Persistence),
        fields: &[at("rdb_saves", 0), at("snapshot_failures", 1)],
        when: snapshots_on,
        ..COUNTER
    };
    SNAPSHOT_LAST_KEYS = Def {
        read: Read::With(|r, _| snapshot(r, |p| Stats::read(&p.last_keys))),
        section: Some(Section::Persistence),
        fields: &[field("snapshot_last_keys")],
        when: snapshots_on,
        ..GAUGE
    };
    AOF_ENABLED = Def {
        name: "turnstile_aof_enabled",
        help: "1 while the append-only file is on (--appendonly, CONFIG SET appendonly), else 0 (INFO aof_enabled).",
        read: Read::With(|r, _| u64::from(r.aof.is_on())),
        section: Some(Section::Persistence),
        fields: &[field("aof_enabled")],
        ..GAUGE
    };
    AOF_REWRITE_TEXT = Def { section: Some(Section::Persistence), read: Read::Text("aof_rewrite"), ..TEXT };
    AOF_REWRITES = Def {
        name: "turnstile_aof_rewrites_total",
        help: "Append-only file rewrites (BGREWRITEAOF, auto-aof-rewrite-*, the base written when the file is turned on), by result: ok, or error (the old file stayed; INFO aof_last_bgrewrite_status).",
        series: Series::Each(label::RESULT, &["ok", "error"]),
        read: Read::With(|r, i| Stats::read([&r.aof.rewrites, &r.aof.rewrite_failures][i])),
        section: Some(Section::Persistence),
        fields: &[at("aof_rewrites", 0)],
        ..COUNTER
    };
    AOF_WRITE_TEXT = Def { section: Some(Section::Persistence), read: Read::Text("aof_last_write_status"), ..TEXT };
    AOF_SIZE = Def {
        read: Read::With(|r, _| Stats::read(&r.aof.size)),
        section: Some(Section::Persistence),
        fields: &[field("aof_current_size")],
        when: aof_on,
        ..GAUGE
    };
    AOF_BASE_SIZE = Def {
        read: Read::With(|r, _| Stats::read(&r.aof.base_size)),
        section: Some(Section::Persistence),
        fields: &[field("aof_base_size")],
        when: aof_on,
        ..GAUGE
    };
    AOF_PENDING = Def {
        name: "turnstile_aof_pending_bytes",
        unit: Unit::Bytes,
        help: "Bytes of effects waiting to be written to the append-only file.",
        read: Read::With(|r, _| Stats::read(&r.aof.pending)),
        section: Some(Section::Persistence),
        fields: &[field("aof_buffer_length")],
        when: aof_on,
        ..GAUGE
    };
    AOF_PATH_TEXT = Def {
        section: Some(Section::Persistence),
        read: Read::Text("aof_path"),
        when: aof_on,
        ..TEXT
    };
    AOF_WRITE_OK = Def {
        name: "turnstile_aof_last_write_ok",
        help: "1 if the append-only file's last write succeeded (or it is off), 0 while it fails: write commands are refused with -MISCONF then.",
        read: Read::With(|r, _| u64::from(r.aof.write_error().is_none())),
        ..GAUGE
    };
    /// Read in nanoseconds.
    AOF_FSYNC_LAG = Def {
        name: "turnstile_aof_fsync_lag_seconds",
        unit: Unit::Seconds,
        help: "How long the oldest write not yet in the append-only file as --appendfsync promises (fsynced; written, with no) has waited; 0 when caught up or off. Up to 1 with everysec; more means late fsyncs (Redis's aof_delayed_fsync) or failing writes.",
        read: Read::With(|r, _| r.aof.fsync_lag().as_nanos() as u64),
        scale: 1e9,
        ..GAUGE
    };

    // # Policies
    POLICIES_PATH_TEXT = Def { section: Some(Section::Policies), read: Read::Text("policies_path"), ..TEXT };
    POLICIES_LOADED = Def {
        name: "turnstile_policies_loaded",
        help: "Policies in force (from --policies).",
        read: Read::With(|r, _| r.policies.current().len() as u64),
        section: Some(Section::Policies),
        fields: &[field("policies_loaded")],
        ..GAUGE
    };
    POLICIES_DOMAINS = Def {
        read: Read::With(|r, _| r.policies.current().domains() as u64),
        section: Some(Section::Policies),
        fields: &[field("policies_domains")],
        ..GAUGE
    };
    POLICIES_SHADOW_TEXT = Def { section: Some(Section::Policies), read: Read::Text("policies_shadow"), ..TEXT };
    POLICY_RELOADS = Def {
        name: "turnstile_policy_reloads_total",
        help: "Policy loads, by result: ok, or error (a bad file refused; the policies in force stayed).",
        series: Series::Each(label::RESULT, &["ok", "error"]),
        read: Read::With(|r, i| Stats::read([&r.policies.reloads_ok, &r.policies.reloads_failed][i])),
        section: Some(Section::Policies),
        fields: &[at("policies_reloads_ok", 0), at("policies_reloads_failed", 1)],
        ..COUNTER
    };
    POLICIES_STATUS_TEXT = Def { section: Some(Section::Policies), read: Read::Text("policies_status"), ..TEXT };
    POLICY_UNMATCHED = Def {
        name: "turnstile_policy_unmatched_total",
        help: "Descriptors that matched no policy and were allowed (RL.CHECK in a loaded domain, the rate limit service in any): a misspelled key or domain shows here.",
        read: Read::With(|r, _| Stats::read(&r.policies.unmatched)),
        section: Some(Section::Policies),
        fields: &[field("policies_unmatched")],
        ..COUNTER
    };
    POLICY_HITS = Def {
        name: "turnstile_policy_hits_total",
        help: "Request units checked against each policy, by domain, policy name and stat, as envoyproxy/ratelimit keeps them: total_hits, over_limit, near_limit (past 80% of the limit), within_limit, shadow_mode (over the limit but let through).",
        series: Series::Dynamic(&[label::DOMAIN, label::POLICY, label::STAT]),
        read: Read::Dynamic,
        ..COUNTER
    };
    POLICY_DETAILED_HITS = Def {
        name: "turnstile_policy_detailed_hits_total",
        help: "turnstile_policy_hits_total per descriptor value (domain.key_value...), for policies with detailed_metric: true only; at most 1000 values per policy, further ones under descriptor=\"_other_\".",
        series: Series::Dynamic(&[label::DOMAIN, label::POLICY, label::DESCRIPTOR, label::STAT]),
        read: Read::Dynamic,
        ..COUNTER
    };

    // # Stats
    CONNECTIONS_RECEIVED = Def {
        name: "turnstile_connections_received_total",
        help: "Connections accepted.",
        section: Some(Section::Stats),
        fields: &[field("total_connections_received")],
        ..COUNTER
    };
    COMMANDS_PROCESSED = Def {
        section: Some(Section::Stats),
        fields: &[field("total_commands_processed")],
        ..COUNTER
    };
    NET_INPUT_BYTES = Def {
        name: "turnstile_net_input_bytes_total",
        unit: Unit::Bytes,
        help: "Bytes read from clients.",
        section: Some(Section::Stats),
        fields: &[field("total_net_input_bytes")],
        ..COUNTER
    };
    NET_OUTPUT_BYTES = Def {
        name: "turnstile_net_output_bytes_total",
        unit: Unit::Bytes,
        help: "Bytes written to clients.",
        section: Some(Section::Stats),
        fields: &[field("total_net_output_bytes")],
        ..COUNTER
    };
    /// By reason: `--maxclients`, protected mode (non-loopback, no
    /// password set), the metrics endpoint's cap, `--rls-maxclients`.
    CONNECTIONS_REJECTED = Def {
        name: "turnstile_connections_rejected_total",
        help: "Connections refused, by reason.",
        series: Series::Each("reason", &["maxclients", "protected_mode", "metrics_endpoint", "rls_maxclients"]),
        section: Some(Section::Stats),
        fields: &[at("rejected_connections", 0)],
        ..COUNTER
    };
    KEYS_EXPIRED = Def {
        name: "turnstile_keys_expired_total",
        help: "Keys removed because their TTL passed.",
        read: Read::With(|r, _| r.expired),
        section: Some(Section::Stats),
        fields: &[field("expired_keys")],
        ..COUNTER
    };
    KEYS_EVICTED = Def {
        name: "turnstile_keys_evicted_total",
        help: "Keys evicted to stay under --maxmemory.",
        read: Read::With(|r, _| r.evicted),
        section: Some(Section::Stats),
        fields: &[field("evicted_keys")],
        ..COUNTER
    };
    SCRIPTS_EVICTED = Def {
        read: Read::With(|r, _| r.scripts_evicted),
        section: Some(Section::Stats),
        fields: &[field("evicted_scripts")],
        ..COUNTER
    };
    REPLICATION_SYNCS = Def {
        name: "turnstile_replication_syncs_total",
        help: "Resyncs served to replicas, by kind: full (a copy of the keyspace), partial (resumed from the backlog), partial_refused (asked to resume, but the backlog no longer held the gap: a full copy followed).",
        series: Series::Each("kind", &["full", "partial", "partial_refused"]),
        read: Read::With(|r, i| {
            let repl = r.replication;
            Stats::read([&repl.full_syncs, &repl.partial_ok, &repl.partial_err][i])
        }),
        section: Some(Section::Stats),
        fields: &[at("sync_full", 0), at("sync_partial_ok", 1), at("sync_partial_err", 2)],
        ..COUNTER
    };
    PUBSUB_CHANNELS = Def {
        read: Read::With(|r, _| r.pubsub[0] as u64),
        section: Some(Section::Stats),
        fields: &[field("pubsub_channels")],
        ..GAUGE
    };
    PUBSUB_PATTERNS = Def {
        read: Read::With(|r, _| r.pubsub[1] as u64),
        section: Some(Section::Stats),
        fields: &[field("pubsub_patterns")],
        ..GAUGE
    };
    /// Redis's `acl_access_denied_auth`.
    AUTH_FAILURES = Def {
        name: "turnstile_auth_failures_total",
        help: "Wrong passwords given to AUTH or HELLO.",
        section: Some(Section::Stats),
        fields: &[field("acl_access_denied_auth")],
        ..COUNTER
    };
    /// Tallied per connection and flushed per batch (`stats::Local`).
    ERROR_REPLIES = Def {
        name: "turnstile_error_replies_total",
        help: "Error replies of every kind, rejected commands (unknown, wrong arity, NOAUTH, MOVED) included.",
        read: Read::With(|r, _| Stats::read(&r.stats.error_replies)),
        section: Some(Section::Stats),
        fields: &[field("total_error_replies")],
        ..COUNTER
    };
    PROTOCOL_ERRORS = Def {
        name: "turnstile_protocol_errors_total",
        help: "Malformed requests (each closed its connection).",
        section: Some(Section::Stats),
        fields: &[field("protocol_errors")],
        ..COUNTER
    };
    /// By [`crate::stats::TxOutcome`], in its order.
    TRANSACTIONS = Def {
        name: "turnstile_transactions_total",
        help: "Transactions ended, by result: executed, watch_aborted (a WATCHed key changed), discarded, execabort (refused at EXEC).",
        series: Series::Each(label::RESULT, &["executed", "watch_aborted", "discarded", "execabort"]),
        section: Some(Section::Stats),
        fields: &[
            at("transactions_executed", 0),
            at("transactions_watch_aborted", 1),
            at("transactions_discarded", 2),
            at("transactions_execabort", 3),
        ],
        ..COUNTER
    };
    /// By [`crate::stats::ScriptOutcome`], in its order.
    SCRIPTS = Def {
        name: "turnstile_scripts_total",
        help: "Script runs (EVAL, EVALSHA and their _RO forms) ended, by result: ok, error (raised, did not compile, out of memory), killed (SCRIPT KILL).",
        series: Series::Each(label::RESULT, &["ok", "error", "killed"]),
        section: Some(Section::Stats),
        fields: &[at("scripts_ok", 0), at("scripts_error", 1), at("scripts_killed", 2)],
        ..COUNTER
    };
    /// Script runs answered by the native catalogue (`cmd/script/native`),
    /// not the Lua VM; also counted in `SCRIPTS`.
    SCRIPTS_NATIVE = Def {
        section: Some(Section::Stats),
        fields: &[field("scripts_native")],
        ..COUNTER
    };
    /// By [`crate::stats::LeaseEvent`], in its order; leases that lapsed
    /// with their key are the store's count, added to `expired`.
    LEASES = Def {
        name: "turnstile_leases_total",
        help: "Lease events (RL.ACQUIRE, RL.RELEASE, RL.RENEW, RL.ALLOWMANY LEASE): acquired, denied (the limit's units were held), retried (an acquire with a live lease's id), released, renewed, expired (lapsed at its TTL unreleased: holders are crashing or hanging).",
        series: Series::Each("event", &["acquired", "denied", "retried", "released", "renewed", "expired"]),
        read: Read::OwnAnd(|r, i| if i == 5 { r.lapsed_leases } else { 0 }),
        section: Some(Section::Stats),
        fields: &[
            at("leases_acquired", 0),
            at("leases_denied", 1),
            at("leases_retried", 2),
            at("leases_released", 3),
            at("leases_renewed", 4),
            at("leases_expired", 5),
        ],
        ..COUNTER
    };
    DECISION_LINES = Def { section: Some(Section::Stats), read: Read::Lines(decision_lines), ..TEXT };
    /// These three are tallied per connection, per algorithm
    /// (`stats::Local`), and registered by the exporter.
    DECISIONS = Def {
        name: "turnstile_decisions_total",
        help: "Limiter decisions, by algorithm and result (allowed or limited).",
        series: Series::Dynamic(&[label::ALGORITHM, label::RESULT]),
        read: Read::Dynamic,
        ..COUNTER
    };
    UNITS_CONSUMED = Def {
        name: "turnstile_units_consumed_total",
        help: "Units charged by admitted requests, by algorithm.",
        series: Series::Dynamic(&[label::ALGORITHM]),
        read: Read::Dynamic,
        ..COUNTER
    };
    NEAR_LIMIT_DECISIONS = Def {
        name: "turnstile_near_limit_decisions_total",
        help: "Admissions that left less than a tenth of the limit.",
        series: Series::Dynamic(&[label::ALGORITHM]),
        read: Read::Dynamic,
        ..COUNTER
    };
    COMMANDS = Def {
        name: "turnstile_commands_total",
        help: "Commands run, by command and status (ok or error).",
        series: Series::Dynamic(&[label::COMMAND, label::STATUS]),
        read: Read::Dynamic,
        ..COUNTER
    };
    COMMAND_DURATION = Def {
        name: "turnstile_command_duration_seconds",
        kind: Kind::Histogram,
        unit: Unit::Seconds,
        help: "Time to run a command and encode its reply.",
        series: Series::Dynamic(&[label::COMMAND]),
        read: Read::Dynamic,
        ..COUNTER
    };
    RLS_REQUESTS = Def {
        name: "turnstile_rls_requests_total",
        help: "Rate limit service calls (gRPC ShouldRateLimit and POST /json) answered, by code: ok, over_limit, error (refused: UNAVAILABLE, or HTTP 400).",
        series: Series::Each("code", &["ok", "over_limit", "error"]),
        ..COUNTER
    };
    KEYS = Def {
        name: "turnstile_keys",
        help: "Keys in the keyspace (expired ones not yet swept included).",
        read: Read::With(|r, _| r.keys.keys as u64),
        json: Some(("keys", 1)),
        ..GAUGE
    };
    KEYS_WITH_EXPIRY = Def {
        name: "turnstile_keys_with_expiry",
        help: "Keys with a TTL.",
        read: Read::With(|r, _| r.keys.volatile as u64),
        ..GAUGE
    };
    BUILD_INFO = Def {
        name: "turnstile_build_info",
        help: "Always 1; the labels say which build is running.",
        series: Series::Dynamic(&[label::VERSION, label::REDIS_VERSION]),
        read: Read::Dynamic,
        ..GAUGE
    };

    // # Replication: the `INFO` command's, as the role decides.
    REPLICATION_TEXT = Def { section: Some(Section::Replication), read: Read::Text("replication"), ..TEXT };
    REPLICATION_ROLE = Def {
        name: "turnstile_replication_role",
        help: "1 for this server's role (role=primary or role=replica), 0 for the other.",
        series: Series::Each("role", &["primary", "replica"]),
        read: Read::With(|r, i| u64::from(r.replication.is_replica() == (i == 1))),
        ..GAUGE
    };
    REPLICATION_OFFSET = Def {
        name: "turnstile_replication_offset_bytes",
        unit: Unit::Bytes,
        help: "The replication stream's offset (INFO master_repl_offset): bytes of effects written (a primary) or applied (a replica).",
        read: Read::With(|r, _| r.repl_offset),
        ..GAUGE
    };
    REPLICAS_CONNECTED = Def {
        name: "turnstile_replicas_connected",
        help: "Replicas attached to this server (INFO connected_slaves).",
        read: Read::With(|r, _| r.replication.replicas.lock().len() as u64),
        ..GAUGE
    };
    REPLICA_LAG = Def {
        name: "turnstile_replica_lag_bytes",
        unit: Unit::Bytes,
        help: "Per attached replica (replica=\"ip:port\"): stream bytes written here that it has not acknowledged: what a failover to it now would lose.",
        series: Series::Dynamic(&[label::REPLICA]),
        read: Read::Dynamic,
        ..GAUGE
    };
    REPLICA_ACK_AGE = Def {
        name: "turnstile_replica_ack_age_seconds",
        unit: Unit::Seconds,
        help: "Per attached replica: seconds since its last acknowledgement (INFO slaveN lag; replicas acknowledge every second).",
        series: Series::Dynamic(&[label::REPLICA]),
        read: Read::Dynamic,
        ..GAUGE
    };
    REPLICATION_LINK_UP = Def {
        name: "turnstile_replication_link_up",
        help: "On a replica: 1 while its link to the primary is up and in sync (INFO master_link_status), else 0.",
        read: Read::With(|r, _| {
            let repl = r.replication;
            u64::from(repl.is_replica() && repl.link() == crate::replication::Link::Up)
        }),
        ..GAUGE
    };

    // The sections written whole by the `INFO` command.
    CPU_TEXT = Def { section: Some(Section::Cpu), read: Read::Text("cpu"), ..TEXT };
    COMMANDSTATS_TEXT = Def { section: Some(Section::Commandstats), read: Read::Text("commandstats"), ..TEXT };
    ERRORSTATS_TEXT = Def { section: Some(Section::Errorstats), read: Read::Text("errorstats"), ..TEXT };
    // # Cluster
    CLUSTER_TEXT = Def { section: Some(Section::Cluster), read: Read::Text("cluster"), ..TEXT };
    CLUSTER_STATE_OK = Def {
        name: "turnstile_cluster_state_ok",
        help: "1 while this node serves keyed requests (CLUSTER INFO cluster_state:ok: every slot served, a majority of primaries reachable), else 0. Only with --cluster-enabled.",
        read: Read::With(|r, _| r.cluster.map_or(0, |c| u64::from(c.ok))),
        when: cluster_on,
        ..GAUGE
    };
    CLUSTER_KNOWN_NODES = Def {
        name: "turnstile_cluster_known_nodes",
        help: "Nodes this node knows, itself included (CLUSTER INFO cluster_known_nodes).",
        read: Read::With(|r, _| r.cluster.map_or(0, |c| c.known_nodes as u64)),
        when: cluster_on,
        ..GAUGE
    };
    CLUSTER_CURRENT_EPOCH = Def {
        name: "turnstile_cluster_current_epoch",
        help: "The cluster's current epoch as this node knows it: it rises with every failover and every slot a node takes.",
        read: Read::With(|r, _| r.cluster.map_or(0, |c| c.current_epoch)),
        when: cluster_on,
        ..GAUGE
    };
    CLUSTER_FAILOVERS_WON = Def {
        name: "turnstile_cluster_failovers_won_total",
        help: "Elections this node won as a replica, taking its primary's slots (automatic or CLUSTER FAILOVER).",
        read: Read::With(|r, _| r.cluster.map_or(0, |c| c.failovers_won)),
        when: cluster_on,
        ..COUNTER
    };
    CLUSTER_MESSAGES = Def {
        name: "turnstile_cluster_messages_total",
        help: "Cluster bus messages, by direction: sent or received (CLUSTER INFO cluster_stats_messages_*).",
        series: Series::Each("direction", &["sent", "received"]),
        read: Read::With(|r, i| r.cluster.map_or(0, |c| if i == 0 { c.messages_sent } else { c.messages_received })),
        when: cluster_on,
        ..COUNTER
    };
    KEYSPACE_TEXT = Def { section: Some(Section::Keyspace), read: Read::Text("keyspace"), ..TEXT };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{LeaseEvent, RlsOutcome, ScriptOutcome, TxOutcome};

    /// The enums call sites count by index each name a label value.
    #[test]
    fn outcome_enums_match_their_label_values() {
        for (id, n) in [
            (TRANSACTIONS, TxOutcome::ALL.len()),
            (SCRIPTS, ScriptOutcome::ALL.len()),
            (RLS_REQUESTS, RlsOutcome::ALL.len()),
            (LEASES, LeaseEvent::ALL.len()),
        ] {
            assert_eq!(id.def().series.count(), n, "{}", id.def().name);
        }
    }

    /// Names are unique, a metric has help, and an INFO field is in a
    /// section; a row kept by the server has atomics.
    #[test]
    fn rows_are_well_formed() {
        let mut seen = std::collections::BTreeSet::new();
        for (row, d) in TABLE.iter().enumerate() {
            if !d.name.is_empty() {
                assert!(seen.insert(d.name), "{} twice", d.name);
                assert!(!d.help.is_empty(), "{} has no help", d.name);
                assert!(d.name.starts_with("turnstile_"), "{}", d.name);
                assert_eq!(
                    d.kind == Kind::Counter,
                    d.name.ends_with("_total"),
                    "{}: counters end in _total",
                    d.name
                );
            }
            assert!(d.fields.is_empty() || d.section.is_some(), "row {row}");
            for f in d.fields {
                assert!(f.series < d.series.count().max(1), "{}", f.name);
            }
            let own = matches!(d.read, Read::Own | Read::OwnAnd(_));
            assert_eq!(own, FIRST_SLOTS.0[row] != usize::MAX, "row {row}");
        }
        let _ = SLOTS;
    }
}
