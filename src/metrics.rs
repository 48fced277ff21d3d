//! Prometheus metrics, served by the process itself on `--metrics-addr`
//! (`GET /metrics`, `GET /healthz`; the endpoint is `server/http.rs`).
//!
//! Names follow Prometheus conventions, after redis_exporter: prefix
//! `turnstile_`, units in names, counters end in `_total`. A limited key is
//! never a label (unbounded cardinality); labels are only the command, the
//! algorithm, the result and the status.
//!
//! Counters are copied from [`crate::stats::Stats`] at scrape time
//! (`Counter::absolute`), so `INFO` and `/metrics` read the same atomics and
//! always agree, and the request path increments nothing of the exporter's.
//! Only the latency histogram is recorded on the request path, through a
//! handle registered once per command.

use std::sync::OnceLock;
use std::time::Duration;

use crate::clock::ForwardSteps;
use crate::limiter::Algorithm;
use crate::persist::Persist;
use crate::stats::{LeaseEvent, RlsOutcome, ScriptOutcome, Stats, TxOutcome};
use crate::store::Counts;

/// What a scrape reads beyond the exporter's own handles, gathered by the
/// endpoint (`server/http.rs`) from the server's state, so the exporter
/// depends on the counters it renders and not on `State`.
pub struct Readings<'a> {
    pub stats: &'a Stats,
    pub backward_steps: u64,
    pub forward_steps: ForwardSteps,
    pub expired: u64,
    pub evicted: u64,
    pub keys: Counts,
    pub clients: usize,
    pub maxclients: u64,
    pub maxmemory: u64,
    pub uptime: Duration,
    pub persist: Option<&'a Persist>,
    /// The append-only file (its write state, its pending bytes).
    pub aof: &'a crate::persist::aof::Aof,
    /// Scripts in the cache, and the Lua heap's bytes.
    pub scripts_cached: usize,
    pub lua_memory: usize,
    pub policies: &'a crate::policy::Policies,
    /// Leases that lapsed unreleased with their key (the store's count).
    pub lapsed_leases: u64,
    pub replication: &'a crate::replication::Replication,
    /// The replication stream's offset (`master_repl_offset`).
    pub repl_offset: u64,
    /// Server time, ms (replicas' acknowledgement ages).
    pub now_ms: u64,
}
use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

/// One metric, declared once: its name, unit and help; every series of it
/// (one per label set) is registered from this, and `ALL` describes each
/// to the recorder. `docs/operations.md`'s table lists them.
pub struct Def {
    pub name: &'static str,
    pub unit: Unit,
    pub help: &'static str,
}

pub const BUILD_INFO: Def = Def {
    name: "turnstile_build_info",
    unit: Unit::Count,
    help: "Always 1; the labels say which build is running.",
};

pub const DECISIONS_TOTAL: Def = Def {
    name: "turnstile_decisions_total",
    unit: Unit::Count,
    help: "Limiter decisions, by algorithm and result (allowed or limited).",
};

pub const UNITS_CONSUMED_TOTAL: Def = Def {
    name: "turnstile_units_consumed_total",
    unit: Unit::Count,
    help: "Units charged by admitted requests, by algorithm.",
};

pub const TRANSACTIONS_TOTAL: Def = Def {
    name: "turnstile_transactions_total",
    unit: Unit::Count,
    help: "Transactions ended, by result: executed, watch_aborted (a WATCHed key changed), discarded, execabort (refused at EXEC).",
};

pub const SCRIPTS_TOTAL: Def = Def {
    name: "turnstile_scripts_total",
    unit: Unit::Count,
    help: "Script runs (EVAL, EVALSHA and their _RO forms) ended, by result: ok, error (raised, did not compile, out of memory), killed (SCRIPT KILL).",
};

pub const SCRIPTS_CACHED: Def = Def {
    name: "turnstile_scripts_cached",
    unit: Unit::Count,
    help: "Scripts in the cache (SCRIPT LOAD, EVAL), shared by every connection.",
};

pub const LUA_MEMORY_BYTES: Def = Def {
    name: "turnstile_lua_memory_bytes",
    unit: Unit::Bytes,
    help: "Bytes the Lua heap holds (INFO used_memory_lua).",
};

pub const AUTH_FAILURES_TOTAL: Def = Def {
    name: "turnstile_auth_failures_total",
    unit: Unit::Count,
    help: "Wrong passwords given to AUTH or HELLO.",
};

pub const CLOCK_BACKWARD_STEPS_TOTAL: Def = Def {
    name: "turnstile_clock_backward_steps_total",
    unit: Unit::Count,
    help: "Steps backwards seen in the wall clock (server time never follows them).",
};

pub const CLOCK_FORWARD_STEPS_TOTAL: Def = Def {
    name: "turnstile_clock_forward_steps_total",
    unit: Unit::Count,
    help: "Forward steps of the wall clock over 1 s that lasted 10 s and were followed.",
};

pub const CLOCK_FORWARD_STEPS_IGNORED_TOTAL: Def = Def {
    name: "turnstile_clock_forward_steps_ignored_total",
    unit: Unit::Count,
    help: "Forward steps of the wall clock over 1 s that reverted within 10 s and were ignored.",
};

pub const ERROR_REPLIES_TOTAL: Def = Def {
    name: "turnstile_error_replies_total",
    unit: Unit::Count,
    help: "Error replies of every kind, rejected commands (unknown, wrong arity, NOAUTH, MOVED) included.",
};

pub const NEAR_LIMIT_DECISIONS_TOTAL: Def = Def {
    name: "turnstile_near_limit_decisions_total",
    unit: Unit::Count,
    help: "Admissions that left less than a tenth of the limit.",
};

pub const COMMANDS_TOTAL: Def = Def {
    name: "turnstile_commands_total",
    unit: Unit::Count,
    help: "Commands run, by command and status (ok or error).",
};

pub const CONNECTED_CLIENTS: Def = Def {
    name: "turnstile_connected_clients",
    unit: Unit::Count,
    help: "Clients connected now.",
};

pub const MAX_CLIENTS: Def = Def {
    name: "turnstile_max_clients",
    unit: Unit::Count,
    help: "The --maxclients limit.",
};

pub const CONNECTIONS_RECEIVED_TOTAL: Def = Def {
    name: "turnstile_connections_received_total",
    unit: Unit::Count,
    help: "Connections accepted.",
};

pub const CONNECTIONS_REJECTED_TOTAL: Def = Def {
    name: "turnstile_connections_rejected_total",
    unit: Unit::Count,
    help: "Connections refused, by reason.",
};

pub const PROTOCOL_ERRORS_TOTAL: Def = Def {
    name: "turnstile_protocol_errors_total",
    unit: Unit::Count,
    help: "Malformed requests (each closed its connection).",
};

pub const KEYS: Def = Def {
    name: "turnstile_keys",
    unit: Unit::Count,
    help: "Keys in the keyspace (expired ones not yet swept included).",
};

pub const KEYS_WITH_EXPIRY: Def = Def {
    name: "turnstile_keys_with_expiry",
    unit: Unit::Count,
    help: "Keys with a TTL.",
};

pub const KEYS_EXPIRED_TOTAL: Def = Def {
    name: "turnstile_keys_expired_total",
    unit: Unit::Count,
    help: "Keys removed because their TTL passed.",
};

pub const KEYS_EVICTED_TOTAL: Def = Def {
    name: "turnstile_keys_evicted_total",
    unit: Unit::Count,
    help: "Keys evicted to stay under --maxmemory.",
};

pub const MEMORY_USED_BYTES: Def = Def {
    name: "turnstile_memory_used_bytes",
    unit: Unit::Bytes,
    help: "Heap bytes in use (RSS where the counting allocator is absent).",
};

pub const MEMORY_MAX_BYTES: Def = Def {
    name: "turnstile_memory_max_bytes",
    unit: Unit::Bytes,
    help: "The --maxmemory limit; 0 = none.",
};

pub const NET_INPUT_BYTES_TOTAL: Def = Def {
    name: "turnstile_net_input_bytes_total",
    unit: Unit::Bytes,
    help: "Bytes read from clients.",
};

pub const NET_OUTPUT_BYTES_TOTAL: Def = Def {
    name: "turnstile_net_output_bytes_total",
    unit: Unit::Bytes,
    help: "Bytes written to clients.",
};

pub const SNAPSHOTS_TOTAL: Def = Def {
    name: "turnstile_snapshots_total",
    unit: Unit::Count,
    help: "Snapshots written (result=ok) and failed (result=error).",
};

pub const SNAPSHOT_LAST_SUCCESS_TIMESTAMP_SECONDS: Def = Def {
    name: "turnstile_snapshot_last_success_timestamp_seconds",
    unit: Unit::Seconds,
    help: "Unix time of the last snapshot written (of the start, before one).",
};

pub const SNAPSHOT_DURATION_SECONDS: Def = Def {
    name: "turnstile_snapshot_duration_seconds",
    unit: Unit::Seconds,
    help: "How long the last snapshot took to write.",
};

pub const SNAPSHOT_CHANGES_PENDING: Def = Def {
    name: "turnstile_snapshot_changes_pending",
    unit: Unit::Count,
    help: "Write commands since the last snapshot: what a crash now would lose.",
};

pub const AOF_WRITE_OK: Def = Def {
    name: "turnstile_aof_last_write_ok",
    unit: Unit::Count,
    help: "1 if the append-only file's last write succeeded (or it is off), 0 while it fails: write commands are refused with -MISCONF then.",
};

pub const AOF_PENDING_BYTES: Def = Def {
    name: "turnstile_aof_pending_bytes",
    unit: Unit::Bytes,
    help: "Bytes of effects waiting to be written to the append-only file.",
};

pub const AOF_ENABLED: Def = Def {
    name: "turnstile_aof_enabled",
    unit: Unit::Count,
    help: "1 while the append-only file is on (--appendonly, CONFIG SET appendonly), else 0 (INFO aof_enabled).",
};

pub const AOF_FSYNC_LAG_SECONDS: Def = Def {
    name: "turnstile_aof_fsync_lag_seconds",
    unit: Unit::Seconds,
    help: "How long the oldest write not yet in the append-only file as --appendfsync promises (fsynced; written, with no) has waited; 0 when caught up or off. Up to 1 with everysec; more means late fsyncs (Redis's aof_delayed_fsync) or failing writes.",
};

pub const AOF_REWRITES_TOTAL: Def = Def {
    name: "turnstile_aof_rewrites_total",
    unit: Unit::Count,
    help: "Append-only file rewrites (BGREWRITEAOF, auto-aof-rewrite-*, the base written when the file is turned on), by result: ok, or error (the old file stayed; INFO aof_last_bgrewrite_status).",
};

pub const UPTIME_SECONDS: Def = Def {
    name: "turnstile_uptime_seconds",
    unit: Unit::Seconds,
    help: "Seconds since the server started.",
};

pub const COMMAND_DURATION_SECONDS: Def = Def {
    name: LATENCY,
    unit: Unit::Seconds,
    help: "Time to run a command and encode its reply.",
};

/// Every metric.
pub const POLICIES_LOADED: Def = Def {
    name: "turnstile_policies_loaded",
    unit: Unit::Count,
    help: "Policies in force (from --policies).",
};

pub const POLICY_RELOADS_TOTAL: Def = Def {
    name: "turnstile_policy_reloads_total",
    unit: Unit::Count,
    help:
        "Policy loads, by result: ok, or error (a bad file refused; the policies in force stayed).",
};

pub const POLICY_UNMATCHED_TOTAL: Def = Def {
    name: "turnstile_policy_unmatched_total",
    unit: Unit::Count,
    help: "Descriptors that matched no policy and were allowed (RL.CHECK in a loaded domain, the rate limit service in any): a misspelled key or domain shows here.",
};

pub const POLICY_HITS_TOTAL: Def = Def {
    name: "turnstile_policy_hits_total",
    unit: Unit::Count,
    help: "Request units checked against each policy, by domain, policy name and stat, as envoyproxy/ratelimit keeps them: total_hits, over_limit, near_limit (past 80% of the limit), within_limit, shadow_mode (over the limit but let through).",
};

pub const POLICY_DETAILED_HITS_TOTAL: Def = Def {
    name: "turnstile_policy_detailed_hits_total",
    unit: Unit::Count,
    help: "turnstile_policy_hits_total per descriptor value (domain.key_value...), for policies with detailed_metric: true only; at most 1000 values per policy, further ones under descriptor=\"_other_\".",
};

pub const RLS_REQUESTS_TOTAL: Def = Def {
    name: "turnstile_rls_requests_total",
    unit: Unit::Count,
    help: "Rate limit service calls (gRPC ShouldRateLimit and POST /json) answered, by code: ok, over_limit, error (refused: UNAVAILABLE, or HTTP 400).",
};

pub const LEASES_TOTAL: Def = Def {
    name: "turnstile_leases_total",
    unit: Unit::Count,
    help: "Lease events (RL.ACQUIRE, RL.RELEASE, RL.RENEW, RL.ALLOWMANY LEASE): acquired, denied (the limit's units were held), retried (an acquire with a live lease's id), released, renewed, expired (lapsed at its TTL unreleased: holders are crashing or hanging).",
};

pub const REPLICATION_ROLE: Def = Def {
    name: "turnstile_replication_role",
    unit: Unit::Count,
    help: "1 for this server's role (role=primary or role=replica), 0 for the other.",
};

pub const REPLICATION_OFFSET_BYTES: Def = Def {
    name: "turnstile_replication_offset_bytes",
    unit: Unit::Bytes,
    help: "The replication stream's offset (INFO master_repl_offset): bytes of effects written (a primary) or applied (a replica).",
};

pub const REPLICAS_CONNECTED: Def = Def {
    name: "turnstile_replicas_connected",
    unit: Unit::Count,
    help: "Replicas attached to this server (INFO connected_slaves).",
};

pub const REPLICA_LAG_BYTES: Def = Def {
    name: "turnstile_replica_lag_bytes",
    unit: Unit::Bytes,
    help: "Per attached replica (replica=\"ip:port\"): stream bytes written here that it has not acknowledged: what a failover to it now would lose.",
};

pub const REPLICA_ACK_AGE_SECONDS: Def = Def {
    name: "turnstile_replica_ack_age_seconds",
    unit: Unit::Seconds,
    help: "Per attached replica: seconds since its last acknowledgement (INFO slaveN lag; replicas acknowledge every second).",
};

pub const REPLICATION_LINK_UP: Def = Def {
    name: "turnstile_replication_link_up",
    unit: Unit::Count,
    help: "On a replica: 1 while its link to the primary is up and in sync (INFO master_link_status), else 0.",
};

pub const REPLICATION_SYNCS_TOTAL: Def = Def {
    name: "turnstile_replication_syncs_total",
    unit: Unit::Count,
    help: "Resyncs served to replicas, by kind: full (a copy of the keyspace), partial (resumed from the backlog), partial_refused (asked to resume, but the backlog no longer held the gap: a full copy followed).",
};

pub const ALL: &[&Def] = &[
    &REPLICATION_ROLE,
    &REPLICATION_OFFSET_BYTES,
    &REPLICAS_CONNECTED,
    &REPLICA_LAG_BYTES,
    &REPLICA_ACK_AGE_SECONDS,
    &REPLICATION_LINK_UP,
    &REPLICATION_SYNCS_TOTAL,
    &LEASES_TOTAL,
    &POLICIES_LOADED,
    &POLICY_RELOADS_TOTAL,
    &POLICY_UNMATCHED_TOTAL,
    &POLICY_HITS_TOTAL,
    &POLICY_DETAILED_HITS_TOTAL,
    &RLS_REQUESTS_TOTAL,
    &COMMAND_DURATION_SECONDS,
    &BUILD_INFO,
    &DECISIONS_TOTAL,
    &UNITS_CONSUMED_TOTAL,
    &TRANSACTIONS_TOTAL,
    &SCRIPTS_TOTAL,
    &SCRIPTS_CACHED,
    &LUA_MEMORY_BYTES,
    &AUTH_FAILURES_TOTAL,
    &CLOCK_BACKWARD_STEPS_TOTAL,
    &CLOCK_FORWARD_STEPS_TOTAL,
    &CLOCK_FORWARD_STEPS_IGNORED_TOTAL,
    &ERROR_REPLIES_TOTAL,
    &NEAR_LIMIT_DECISIONS_TOTAL,
    &COMMANDS_TOTAL,
    &CONNECTED_CLIENTS,
    &MAX_CLIENTS,
    &CONNECTIONS_RECEIVED_TOTAL,
    &CONNECTIONS_REJECTED_TOTAL,
    &PROTOCOL_ERRORS_TOTAL,
    &KEYS,
    &KEYS_WITH_EXPIRY,
    &KEYS_EXPIRED_TOTAL,
    &KEYS_EVICTED_TOTAL,
    &MEMORY_USED_BYTES,
    &MEMORY_MAX_BYTES,
    &NET_INPUT_BYTES_TOTAL,
    &NET_OUTPUT_BYTES_TOTAL,
    &SNAPSHOTS_TOTAL,
    &SNAPSHOT_LAST_SUCCESS_TIMESTAMP_SECONDS,
    &SNAPSHOT_DURATION_SECONDS,
    &SNAPSHOT_CHANGES_PENDING,
    &AOF_WRITE_OK,
    &AOF_PENDING_BYTES,
    &AOF_ENABLED,
    &AOF_FSYNC_LAG_SECONDS,
    &AOF_REWRITES_TOTAL,
    &UPTIME_SECONDS,
];

/// The label names series carry.
pub mod label {
    pub const ALGORITHM: &str = "algorithm";
    pub const COMMAND: &str = "command";
    pub const CODE: &str = "code";
    pub const DESCRIPTOR: &str = "descriptor";
    pub const DOMAIN: &str = "domain";
    pub const EVENT: &str = "event";
    pub const KIND: &str = "kind";
    pub const REPLICA: &str = "replica";
    pub const ROLE: &str = "role";
    pub const POLICY: &str = "policy";
    pub const STAT: &str = "stat";
    pub const REASON: &str = "reason";
    pub const REDIS_VERSION: &str = "redis_version";
    pub const RESULT: &str = "result";
    pub const STATUS: &str = "status";
    pub const VERSION: &str = "version";
}

/// Upper bounds of the latency buckets, in seconds: 0.5 us to 100 ms.
pub const LATENCY_BUCKETS: [f64; 17] = [
    0.000_000_5,
    0.000_001,
    0.000_002_5,
    0.000_005,
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
];

const LATENCY: &str = "turnstile_command_duration_seconds";

/// Every metric, registered once at start.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Per command-table entry, registered at first use.
    latency: Box<[OnceLock<Histogram>]>,
    commands: Box<[OnceLock<(Counter, Counter)>]>,
    /// Command names by table index, for the series registered later.
    names: Box<[&'static str]>,
    meta: Metadata<'static>,
    decisions: Vec<(Algorithm, [Counter; 2], Counter, Counter)>,
    connections_received: Counter,
    rejected_maxclients: Counter,
    rejected_protected: Counter,
    rejected_metrics: Counter,
    rejected_rls: Counter,
    protocol_errors: Counter,
    error_replies: Counter,
    auth_failures: Counter,
    transactions: Vec<(TxOutcome, Counter)>,
    scripts: Vec<(ScriptOutcome, Counter)>,
    rls: Vec<(RlsOutcome, Counter)>,
    leases: Vec<(LeaseEvent, Counter)>,
    scripts_cached: Gauge,
    lua_memory: Gauge,
    clock_backward_steps: Counter,
    clock_forward_steps: Counter,
    clock_forward_steps_ignored: Counter,
    expired: Counter,
    evicted: Counter,
    net_input: Counter,
    net_output: Counter,
    clients: Gauge,
    maxclients: Gauge,
    keys: Gauge,
    keys_volatile: Gauge,
    memory_used: Gauge,
    memory_max: Gauge,
    uptime: Gauge,
    snapshots_ok: Counter,
    snapshots_failed: Counter,
    snapshot_last_success: Gauge,
    snapshot_duration: Gauge,
    snapshot_pending: Gauge,
    aof_write_ok: Gauge,
    aof_pending: Gauge,
    aof_enabled: Gauge,
    aof_fsync_lag: Gauge,
    /// result=ok, result=error.
    aof_rewrites: [Counter; 2],
    policies_loaded: Gauge,
    policy_reloads: [Counter; 2],
    policy_unmatched: Counter,
    /// role=primary, role=replica.
    repl_role: [Gauge; 2],
    repl_offset: Gauge,
    repl_replicas: Gauge,
    repl_link_up: Gauge,
    /// full, partial, partial_refused.
    repl_syncs: [Counter; 3],
}

impl Metrics {
    /// The exporter for a server whose command table `catalog` describes.
    pub fn new(catalog: &crate::stats::Catalog) -> Metrics {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Full(LATENCY.into()), &LATENCY_BUCKETS)
            .expect("buckets are non-empty")
            .build_recorder();
        let handle = recorder.handle();
        let r = &recorder;
        let meta = Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
        let counter = |def: &Def, labels: Vec<Label>| {
            r.register_counter(&Key::from_parts(def.name, labels), &meta)
        };
        let gauge = |def: &Def, labels: Vec<Label>| {
            r.register_gauge(&Key::from_parts(def.name, labels), &meta)
        };

        for d in ALL {
            r.describe_counter(
                KeyName::from(d.name),
                Some(d.unit),
                SharedString::from(d.help),
            );
        }

        gauge(
            &BUILD_INFO,
            vec![
                Label::new(label::VERSION, env!("CARGO_PKG_VERSION")),
                Label::new(label::REDIS_VERSION, crate::protocol::REDIS_VERSION),
            ],
        )
        .set(1.0);
        let latency = catalog.names.iter().map(|_| OnceLock::new()).collect();
        let commands = catalog.names.iter().map(|_| OnceLock::new()).collect();
        let decisions = Algorithm::ALL
            .into_iter()
            .map(|a| {
                let result = |res: &'static str| {
                    counter(
                        &DECISIONS_TOTAL,
                        vec![
                            Label::new(label::ALGORITHM, a.name()),
                            Label::new(label::RESULT, res),
                        ],
                    )
                };
                let algo = vec![Label::new(label::ALGORITHM, a.name())];
                (
                    a,
                    [result("allowed"), result("limited")],
                    counter(&UNITS_CONSUMED_TOTAL, algo.clone()),
                    counter(&NEAR_LIMIT_DECISIONS_TOTAL, algo),
                )
            })
            .collect();
        Metrics {
            latency,
            commands,
            names: catalog.names.clone().into_boxed_slice(),
            decisions,
            connections_received: counter(&CONNECTIONS_RECEIVED_TOTAL, vec![]),
            rejected_maxclients: counter(
                &CONNECTIONS_REJECTED_TOTAL,
                vec![Label::new(label::REASON, "maxclients")],
            ),
            rejected_protected: counter(
                &CONNECTIONS_REJECTED_TOTAL,
                vec![Label::new(label::REASON, "protected_mode")],
            ),
            rejected_metrics: counter(
                &CONNECTIONS_REJECTED_TOTAL,
                vec![Label::new(label::REASON, "metrics_endpoint")],
            ),
            rejected_rls: counter(
                &CONNECTIONS_REJECTED_TOTAL,
                vec![Label::new(label::REASON, "rls_maxclients")],
            ),
            protocol_errors: counter(&PROTOCOL_ERRORS_TOTAL, vec![]),
            error_replies: counter(&ERROR_REPLIES_TOTAL, vec![]),
            auth_failures: counter(&AUTH_FAILURES_TOTAL, vec![]),
            transactions: TxOutcome::ALL
                .into_iter()
                .map(|o| {
                    let labels = vec![Label::new(label::RESULT, o.name())];
                    (o, counter(&TRANSACTIONS_TOTAL, labels))
                })
                .collect(),
            scripts: ScriptOutcome::ALL
                .into_iter()
                .map(|o| {
                    let labels = vec![Label::new(label::RESULT, o.name())];
                    (o, counter(&SCRIPTS_TOTAL, labels))
                })
                .collect(),
            rls: RlsOutcome::ALL
                .into_iter()
                .map(|o| {
                    let labels = vec![Label::new(label::CODE, o.name())];
                    (o, counter(&RLS_REQUESTS_TOTAL, labels))
                })
                .collect(),
            leases: LeaseEvent::ALL
                .into_iter()
                .map(|e| {
                    let labels = vec![Label::new(label::EVENT, e.name())];
                    (e, counter(&LEASES_TOTAL, labels))
                })
                .collect(),
            scripts_cached: gauge(&SCRIPTS_CACHED, vec![]),
            lua_memory: gauge(&LUA_MEMORY_BYTES, vec![]),
            clock_backward_steps: counter(&CLOCK_BACKWARD_STEPS_TOTAL, vec![]),
            clock_forward_steps: counter(&CLOCK_FORWARD_STEPS_TOTAL, vec![]),
            clock_forward_steps_ignored: counter(&CLOCK_FORWARD_STEPS_IGNORED_TOTAL, vec![]),
            expired: counter(&KEYS_EXPIRED_TOTAL, vec![]),
            evicted: counter(&KEYS_EVICTED_TOTAL, vec![]),
            net_input: counter(&NET_INPUT_BYTES_TOTAL, vec![]),
            net_output: counter(&NET_OUTPUT_BYTES_TOTAL, vec![]),
            clients: gauge(&CONNECTED_CLIENTS, vec![]),
            maxclients: gauge(&MAX_CLIENTS, vec![]),
            keys: gauge(&KEYS, vec![]),
            keys_volatile: gauge(&KEYS_WITH_EXPIRY, vec![]),
            memory_used: gauge(&MEMORY_USED_BYTES, vec![]),
            memory_max: gauge(&MEMORY_MAX_BYTES, vec![]),
            uptime: gauge(&UPTIME_SECONDS, vec![]),
            snapshots_ok: counter(&SNAPSHOTS_TOTAL, vec![Label::new(label::RESULT, "ok")]),
            snapshots_failed: counter(&SNAPSHOTS_TOTAL, vec![Label::new(label::RESULT, "error")]),
            snapshot_last_success: gauge(&SNAPSHOT_LAST_SUCCESS_TIMESTAMP_SECONDS, vec![]),
            snapshot_duration: gauge(&SNAPSHOT_DURATION_SECONDS, vec![]),
            snapshot_pending: gauge(&SNAPSHOT_CHANGES_PENDING, vec![]),
            aof_write_ok: gauge(&AOF_WRITE_OK, vec![]),
            aof_pending: gauge(&AOF_PENDING_BYTES, vec![]),
            aof_enabled: gauge(&AOF_ENABLED, vec![]),
            aof_fsync_lag: gauge(&AOF_FSYNC_LAG_SECONDS, vec![]),
            aof_rewrites: ["ok", "error"]
                .map(|r| counter(&AOF_REWRITES_TOTAL, vec![Label::new(label::RESULT, r)])),
            policies_loaded: gauge(&POLICIES_LOADED, vec![]),
            policy_reloads: ["ok", "error"]
                .map(|r| counter(&POLICY_RELOADS_TOTAL, vec![Label::new(label::RESULT, r)])),
            policy_unmatched: counter(&POLICY_UNMATCHED_TOTAL, vec![]),
            repl_role: ["primary", "replica"]
                .map(|r| gauge(&REPLICATION_ROLE, vec![Label::new(label::ROLE, r)])),
            repl_offset: gauge(&REPLICATION_OFFSET_BYTES, vec![]),
            repl_replicas: gauge(&REPLICAS_CONNECTED, vec![]),
            repl_link_up: gauge(&REPLICATION_LINK_UP, vec![]),
            repl_syncs: ["full", "partial", "partial_refused"]
                .map(|k| counter(&REPLICATION_SYNCS_TOTAL, vec![Label::new(label::KIND, k)])),
            recorder,
            handle,
            meta,
        }
    }

    /// Records one command's latency (command-table index `i`).
    /// The command's histogram is registered at its first sample: a
    /// command that never ran has no series (as Redis's `commandstats`).
    pub fn observe(&self, i: usize, elapsed: Duration) {
        self.latency[i]
            .get_or_init(|| self.register_latency(i))
            .record(elapsed.as_secs_f64());
    }

    fn register_latency(&self, i: usize) -> Histogram {
        let key = Key::from_parts(LATENCY, vec![Label::new(label::COMMAND, self.names[i])]);
        self.recorder.register_histogram(&key, &self.meta)
    }

    /// The command's `ok` and `error` counters, registered when first
    /// needed: a command never called has none.
    fn register_command(&self, i: usize) -> (Counter, Counter) {
        let status = |s: &'static str| {
            let labels = vec![
                Label::new(label::COMMAND, self.names[i]),
                Label::new(label::STATUS, s),
            ];
            self.recorder
                .register_counter(&Key::from_parts(COMMANDS_TOTAL.name, labels), &self.meta)
        };
        (status("ok"), status("error"))
    }

    /// Folds recorded histogram samples into their buckets, so memory stays
    /// bounded between scrapes.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The text exposition, with every counter and gauge brought up to date
    /// from the server's state first.
    /// The exposition, with every counter and gauge set from `r`.
    pub fn render(&self, r: &Readings<'_>) -> String {
        let stats = r.stats;
        for (i, slot) in self.commands.iter().enumerate() {
            let (calls, failed) = stats.command(i);
            let rejected = stats.rejected(i);
            if calls == 0 && rejected == 0 && slot.get().is_none() {
                continue;
            }
            let (ok, err) = slot.get_or_init(|| self.register_command(i));
            ok.absolute(calls - failed.min(calls));
            // Refused requests are errors here, as before INFO's
            // `rejected_calls` took them out of `calls`.
            err.absolute(failed + rejected);
        }
        for (algo, [allowed, limited], units, near) in &self.decisions {
            let d = stats.decisions(*algo);
            allowed.absolute(d.allowed);
            limited.absolute(d.limited);
            units.absolute(d.units);
            near.absolute(d.near_limit);
        }
        self.connections_received
            .absolute(Stats::read(&stats.connections_received));
        self.rejected_maxclients
            .absolute(Stats::read(&stats.rejected_connections));
        self.rejected_protected
            .absolute(Stats::read(&stats.rejected_protected));
        self.rejected_metrics
            .absolute(Stats::read(&stats.rejected_metrics));
        self.rejected_rls.absolute(Stats::read(&stats.rejected_rls));
        self.protocol_errors
            .absolute(Stats::read(&stats.protocol_errors));
        self.error_replies
            .absolute(Stats::read(&stats.error_replies));
        self.auth_failures
            .absolute(Stats::read(&stats.auth_failures));
        for (outcome, counter) in &self.transactions {
            counter.absolute(stats.transactions(*outcome));
        }
        for (outcome, counter) in &self.scripts {
            counter.absolute(stats.scripts(*outcome));
        }
        for (outcome, counter) in &self.rls {
            counter.absolute(stats.rls_calls(*outcome));
        }
        for (event, counter) in &self.leases {
            let with_keys = match event {
                LeaseEvent::Expired => r.lapsed_leases,
                _ => 0,
            };
            counter.absolute(stats.leases(*event) + with_keys);
        }
        self.scripts_cached.set(r.scripts_cached as f64);
        self.lua_memory.set(r.lua_memory as f64);
        self.clock_backward_steps.absolute(r.backward_steps);
        self.clock_forward_steps.absolute(r.forward_steps.adopted);
        self.clock_forward_steps_ignored
            .absolute(r.forward_steps.ignored);
        self.net_input.absolute(Stats::read(&stats.net_input_bytes));
        self.net_output
            .absolute(Stats::read(&stats.net_output_bytes));
        self.expired.absolute(r.expired);
        self.evicted.absolute(r.evicted);
        self.keys.set(r.keys.keys as f64);
        self.keys_volatile.set(r.keys.volatile as f64);
        self.clients.set(r.clients as f64);
        self.maxclients.set(r.maxclients as f64);
        self.memory_used.set(crate::alloc::used_memory() as f64);
        self.memory_max.set(r.maxmemory as f64);
        self.uptime.set(r.uptime.as_secs_f64());
        if let Some(p) = r.persist {
            self.snapshots_ok.absolute(Stats::read(&p.saves));
            self.snapshots_failed.absolute(Stats::read(&p.failures));
            self.snapshot_last_success
                .set(Stats::read(&p.last_save) as f64);
            self.snapshot_duration
                .set(Stats::read(&p.last_duration_us) as f64 / 1e6);
            self.snapshot_pending
                .set(p.changes_since_save(stats.writes()) as f64);
        }
        self.aof_write_ok
            .set(f64::from(u8::from(r.aof.write_error().is_none())));
        self.aof_pending.set(Stats::read(&r.aof.pending) as f64);
        self.aof_enabled.set(f64::from(u8::from(r.aof.is_on())));
        self.aof_fsync_lag.set(r.aof.fsync_lag().as_secs_f64());
        self.aof_rewrites[0].absolute(Stats::read(&r.aof.rewrites));
        self.aof_rewrites[1].absolute(Stats::read(&r.aof.rewrite_failures));
        let repl = r.replication;
        let replica = repl.is_replica();
        self.repl_role[0].set(f64::from(u8::from(!replica)));
        self.repl_role[1].set(f64::from(u8::from(replica)));
        self.repl_offset.set(r.repl_offset as f64);
        self.repl_link_up.set(f64::from(u8::from(
            replica && repl.link() == crate::replication::Link::Up,
        )));
        self.repl_syncs[0].absolute(Stats::read(&repl.full_syncs));
        self.repl_syncs[1].absolute(Stats::read(&repl.partial_ok));
        self.repl_syncs[2].absolute(Stats::read(&repl.partial_err));
        let attached = repl.replicas.lock().clone();
        self.repl_replicas.set(attached.len() as f64);
        let meta = Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
        // One series per attached replica: a handful, never a key.
        for a in &attached {
            let name = format!("{}:{}", a.ip.lock(), Stats::read(&a.port));
            let labels = || vec![Label::new(label::REPLICA, name.clone())];
            let acked = Stats::read(&a.acked);
            self.recorder
                .register_gauge(&Key::from_parts(REPLICA_LAG_BYTES.name, labels()), &meta)
                .set(r.repl_offset.saturating_sub(acked) as f64);
            let age = r.now_ms.saturating_sub(Stats::read(&a.acked_at_ms));
            self.recorder
                .register_gauge(
                    &Key::from_parts(REPLICA_ACK_AGE_SECONDS.name, labels()),
                    &meta,
                )
                .set(age as f64 / 1000.0);
        }
        let policies = r.policies;
        let set = policies.current();
        self.policies_loaded.set(set.len() as f64);
        self.policy_reloads[0].absolute(Stats::read(&policies.reloads_ok));
        self.policy_reloads[1].absolute(Stats::read(&policies.reloads_failed));
        self.policy_unmatched
            .absolute(Stats::read(&policies.unmatched));
        // One series per policy and stat: names come from the files, never
        // from request values, so the count is bounded by the files.
        let meta = Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
        for p in set.iter() {
            for (stat, n) in crate::policy::PolicyStats::NAMES.iter().zip(p.stats.read()) {
                let key = Key::from_parts(
                    POLICY_HITS_TOTAL.name,
                    vec![
                        Label::new(label::DOMAIN, p.domain.clone()),
                        Label::new(label::POLICY, p.name.clone()),
                        Label::new(label::STAT, *stat),
                    ],
                );
                self.recorder.register_counter(&key, &meta).absolute(n);
            }
            if !p.def.detailed_metric {
                continue;
            }
            for (descriptor, counts) in p.stats.read_detailed() {
                for (stat, n) in crate::policy::PolicyStats::NAMES.iter().zip(counts) {
                    let key = Key::from_parts(
                        POLICY_DETAILED_HITS_TOTAL.name,
                        vec![
                            Label::new(label::DOMAIN, p.domain.clone()),
                            Label::new(label::POLICY, p.name.clone()),
                            Label::new(label::DESCRIPTOR, descriptor.clone()),
                            Label::new(label::STAT, *stat),
                        ],
                    );
                    self.recorder.register_counter(&key, &meta).absolute(n);
                }
            }
        }
        // Keep the recorder alive and in use for the handles above.
        let _ = &self.recorder;
        self.handle.render()
    }
}
