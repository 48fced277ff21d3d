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

use std::time::Duration;

use crate::clock::ForwardSteps;
use crate::limiter::Algorithm;
use crate::persist::Persist;
use crate::stats::{Stats, TxOutcome};
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
}
use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

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
    latency: Box<[Histogram]>,
    commands: Box<[(Counter, Counter)]>,
    decisions: Vec<(Algorithm, [Counter; 2], Counter, Counter)>,
    connections_received: Counter,
    rejected_maxclients: Counter,
    rejected_protected: Counter,
    rejected_metrics: Counter,
    protocol_errors: Counter,
    error_replies: Counter,
    auth_failures: Counter,
    transactions: Vec<(TxOutcome, Counter)>,
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
        let describe = |name: &'static str, unit: Unit, help: &'static str| {
            r.describe_counter(KeyName::from(name), Some(unit), SharedString::from(help));
        };
        let counter = |name: &'static str, labels: Vec<Label>| {
            r.register_counter(&Key::from_parts(name, labels), &meta)
        };
        let gauge = |name: &'static str, labels: Vec<Label>| {
            r.register_gauge(&Key::from_parts(name, labels), &meta)
        };

        describe(
            "turnstile_build_info",
            Unit::Count,
            "Always 1; the labels say which build is running.",
        );
        describe(
            "turnstile_decisions_total",
            Unit::Count,
            "Limiter decisions, by algorithm and result (allowed or limited).",
        );
        describe(
            "turnstile_units_consumed_total",
            Unit::Count,
            "Units charged by admitted requests, by algorithm.",
        );
        describe(
            "turnstile_transactions_total",
            Unit::Count,
            "Transactions ended, by result: executed, watch_aborted (a WATCHed key changed), discarded, execabort (refused at EXEC).",
        );
        describe(
            "turnstile_auth_failures_total",
            Unit::Count,
            "Wrong passwords given to AUTH or HELLO.",
        );
        describe(
            "turnstile_clock_backward_steps_total",
            Unit::Count,
            "Steps backwards seen in the wall clock (server time never follows them).",
        );
        describe(
            "turnstile_clock_forward_steps_total",
            Unit::Count,
            "Forward steps of the wall clock over 1 s that lasted 10 s and were followed.",
        );
        describe(
            "turnstile_clock_forward_steps_ignored_total",
            Unit::Count,
            "Forward steps of the wall clock over 1 s that reverted within 10 s and were ignored.",
        );
        describe(
            "turnstile_error_replies_total",
            Unit::Count,
            "Error replies of every kind, rejected commands (unknown, wrong arity, NOAUTH, MOVED) included.",
        );
        describe(
            "turnstile_near_limit_decisions_total",
            Unit::Count,
            "Admissions that left less than a tenth of the limit.",
        );
        describe(
            "turnstile_commands_total",
            Unit::Count,
            "Commands run, by command and status (ok or error).",
        );
        describe(
            LATENCY,
            Unit::Seconds,
            "Time to run a command and encode its reply.",
        );
        describe(
            "turnstile_connected_clients",
            Unit::Count,
            "Clients connected now.",
        );
        describe(
            "turnstile_max_clients",
            Unit::Count,
            "The --maxclients limit.",
        );
        describe(
            "turnstile_connections_received_total",
            Unit::Count,
            "Connections accepted.",
        );
        describe(
            "turnstile_connections_rejected_total",
            Unit::Count,
            "Connections refused, by reason.",
        );
        describe(
            "turnstile_protocol_errors_total",
            Unit::Count,
            "Malformed requests (each closed its connection).",
        );
        describe(
            "turnstile_keys",
            Unit::Count,
            "Keys in the keyspace (expired ones not yet swept included).",
        );
        describe(
            "turnstile_keys_with_expiry",
            Unit::Count,
            "Keys with a TTL.",
        );
        describe(
            "turnstile_keys_expired_total",
            Unit::Count,
            "Keys removed because their TTL passed.",
        );
        describe(
            "turnstile_keys_evicted_total",
            Unit::Count,
            "Keys evicted to stay under --maxmemory.",
        );
        describe(
            "turnstile_memory_used_bytes",
            Unit::Bytes,
            "Heap bytes in use (RSS where the counting allocator is absent).",
        );
        describe(
            "turnstile_memory_max_bytes",
            Unit::Bytes,
            "The --maxmemory limit; 0 = none.",
        );
        describe(
            "turnstile_net_input_bytes_total",
            Unit::Bytes,
            "Bytes read from clients.",
        );
        describe(
            "turnstile_net_output_bytes_total",
            Unit::Bytes,
            "Bytes written to clients.",
        );
        describe(
            "turnstile_snapshots_total",
            Unit::Count,
            "Snapshots written (result=ok) and failed (result=error).",
        );
        describe(
            "turnstile_snapshot_last_success_timestamp_seconds",
            Unit::Seconds,
            "Unix time of the last snapshot written (of the start, before one).",
        );
        describe(
            "turnstile_snapshot_duration_seconds",
            Unit::Seconds,
            "How long the last snapshot took to write.",
        );
        describe(
            "turnstile_snapshot_changes_pending",
            Unit::Count,
            "Write commands since the last snapshot: what a crash now would lose.",
        );
        describe(
            "turnstile_uptime_seconds",
            Unit::Seconds,
            "Seconds since the server started.",
        );

        gauge(
            "turnstile_build_info",
            vec![
                Label::new("version", env!("CARGO_PKG_VERSION")),
                Label::new("redis_version", crate::REDIS_VERSION),
            ],
        )
        .set(1.0);
        let latency = catalog
            .names
            .iter()
            .map(|&name| {
                r.register_histogram(
                    &Key::from_parts(LATENCY, vec![Label::new("command", name)]),
                    &meta,
                )
            })
            .collect();
        let commands = catalog
            .names
            .iter()
            .map(|&name| {
                let status = |s: &'static str| {
                    counter(
                        "turnstile_commands_total",
                        vec![Label::new("command", name), Label::new("status", s)],
                    )
                };
                (status("ok"), status("error"))
            })
            .collect();
        let decisions = Algorithm::ALL
            .into_iter()
            .map(|a| {
                let result = |res: &'static str| {
                    counter(
                        "turnstile_decisions_total",
                        vec![Label::new("algorithm", a.name()), Label::new("result", res)],
                    )
                };
                let algo = vec![Label::new("algorithm", a.name())];
                (
                    a,
                    [result("allowed"), result("limited")],
                    counter("turnstile_units_consumed_total", algo.clone()),
                    counter("turnstile_near_limit_decisions_total", algo),
                )
            })
            .collect();
        Metrics {
            latency,
            commands,
            decisions,
            connections_received: counter("turnstile_connections_received_total", vec![]),
            rejected_maxclients: counter(
                "turnstile_connections_rejected_total",
                vec![Label::new("reason", "maxclients")],
            ),
            rejected_protected: counter(
                "turnstile_connections_rejected_total",
                vec![Label::new("reason", "protected_mode")],
            ),
            rejected_metrics: counter(
                "turnstile_connections_rejected_total",
                vec![Label::new("reason", "metrics_endpoint")],
            ),
            protocol_errors: counter("turnstile_protocol_errors_total", vec![]),
            error_replies: counter("turnstile_error_replies_total", vec![]),
            auth_failures: counter("turnstile_auth_failures_total", vec![]),
            transactions: TxOutcome::ALL
                .into_iter()
                .map(|o| {
                    let labels = vec![Label::new("result", o.name())];
                    (o, counter("turnstile_transactions_total", labels))
                })
                .collect(),
            clock_backward_steps: counter("turnstile_clock_backward_steps_total", vec![]),
            clock_forward_steps: counter("turnstile_clock_forward_steps_total", vec![]),
            clock_forward_steps_ignored: counter(
                "turnstile_clock_forward_steps_ignored_total",
                vec![],
            ),
            expired: counter("turnstile_keys_expired_total", vec![]),
            evicted: counter("turnstile_keys_evicted_total", vec![]),
            net_input: counter("turnstile_net_input_bytes_total", vec![]),
            net_output: counter("turnstile_net_output_bytes_total", vec![]),
            clients: gauge("turnstile_connected_clients", vec![]),
            maxclients: gauge("turnstile_max_clients", vec![]),
            keys: gauge("turnstile_keys", vec![]),
            keys_volatile: gauge("turnstile_keys_with_expiry", vec![]),
            memory_used: gauge("turnstile_memory_used_bytes", vec![]),
            memory_max: gauge("turnstile_memory_max_bytes", vec![]),
            uptime: gauge("turnstile_uptime_seconds", vec![]),
            snapshots_ok: counter(
                "turnstile_snapshots_total",
                vec![Label::new("result", "ok")],
            ),
            snapshots_failed: counter(
                "turnstile_snapshots_total",
                vec![Label::new("result", "error")],
            ),
            snapshot_last_success: gauge(
                "turnstile_snapshot_last_success_timestamp_seconds",
                vec![],
            ),
            snapshot_duration: gauge("turnstile_snapshot_duration_seconds", vec![]),
            snapshot_pending: gauge("turnstile_snapshot_changes_pending", vec![]),
            recorder,
            handle,
        }
    }

    /// Records one command's latency (command-table index `i`).
    pub fn observe(&self, i: usize, elapsed: Duration) {
        self.latency[i].record(elapsed.as_secs_f64());
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
        for (i, (ok, err)) in self.commands.iter().enumerate() {
            let (calls, failed) = stats.command(i);
            ok.absolute(calls - failed.min(calls));
            err.absolute(failed);
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
        self.protocol_errors
            .absolute(Stats::read(&stats.protocol_errors));
        self.error_replies
            .absolute(Stats::read(&stats.error_replies));
        self.auth_failures
            .absolute(Stats::read(&stats.auth_failures));
        for (outcome, counter) in &self.transactions {
            counter.absolute(stats.transactions(*outcome));
        }
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
        // Keep the recorder alive and in use for the handles above.
        let _ = &self.recorder;
        self.handle.render()
    }
}
