//! Prometheus metrics, served by the process itself on `--metrics-addr`
//! (`GET /metrics`, `GET /healthz`; the endpoint is `server/http.rs`).
//!
//! Names follow Prometheus conventions, after redis_exporter: prefix
//! `turnstile_`, units in names, counters end in `_total`. A limited key is
//! never a label (unbounded cardinality); labels are only the command, the
//! algorithm, the result and the status.
//!
//! Every metric is a row of [`table`], which `INFO` and `/status.json`
//! read too. Counters are copied from their readings at scrape time
//! (`Counter::absolute`), so `INFO` and `/metrics` read the same atomics and
//! always agree, and the request path increments nothing of the exporter's.
//! Only the latency histogram is recorded on the request path, through a
//! handle registered once per command.

pub mod counters;
pub mod table;

use std::fmt::Write;
use std::sync::OnceLock;
use std::time::Duration;

pub use counters::{ClusterReadings, Readings};

use crate::limiter::Algorithm;
use crate::stats::Stats;
use counters::{Id, Kind, Series};
use table::{label, TABLE};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString};
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

const LATENCY: &str = table::COMMAND_DURATION.def().name;

/// One series of a row, registered once at start.
enum Handle {
    Counter(Counter),
    Gauge(Gauge),
}

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
    /// Per row of the table, its series (none for rows INFO's only or
    /// registered as they appear).
    rows: Vec<Vec<Handle>>,
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
        let counter = |name: &'static str, labels: Vec<Label>| {
            r.register_counter(&Key::from_parts(name, labels), &meta)
        };

        let rows = TABLE
            .iter()
            .map(|d| {
                if d.name.is_empty() {
                    return Vec::new();
                }
                r.describe_counter(
                    KeyName::from(d.name),
                    Some(d.unit),
                    SharedString::from(d.help),
                );
                let labels: Vec<Vec<Label>> = match d.series {
                    Series::One => vec![vec![]],
                    Series::Each(name, values) => {
                        values.iter().map(|v| vec![Label::new(name, *v)]).collect()
                    }
                    Series::None | Series::Dynamic(_) => vec![],
                };
                labels
                    .into_iter()
                    .map(|labels| {
                        let key = Key::from_parts(d.name, labels);
                        match d.kind {
                            Kind::Gauge => Handle::Gauge(r.register_gauge(&key, &meta)),
                            _ => Handle::Counter(r.register_counter(&key, &meta)),
                        }
                    })
                    .collect()
            })
            .collect();

        r.register_gauge(
            &Key::from_parts(
                table::BUILD_INFO.def().name,
                vec![
                    Label::new(label::VERSION, env!("CARGO_PKG_VERSION")),
                    Label::new(label::REDIS_VERSION, crate::protocol::REDIS_VERSION),
                ],
            ),
            &meta,
        )
        .set(1.0);
        let latency = catalog.names.iter().map(|_| OnceLock::new()).collect();
        let commands = catalog.names.iter().map(|_| OnceLock::new()).collect();
        let decisions = Algorithm::ALL
            .into_iter()
            .map(|a| {
                let result = |res: &'static str| {
                    counter(
                        table::DECISIONS.def().name,
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
                    counter(table::UNITS_CONSUMED.def().name, algo.clone()),
                    counter(table::NEAR_LIMIT_DECISIONS.def().name, algo),
                )
            })
            .collect();
        Metrics {
            latency,
            commands,
            names: catalog.names.clone().into_boxed_slice(),
            decisions,
            rows,
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
            self.recorder.register_counter(
                &Key::from_parts(table::COMMANDS.def().name, labels),
                &self.meta,
            )
        };
        (status("ok"), status("error"))
    }

    /// Folds recorded histogram samples into their buckets, so memory stays
    /// bounded between scrapes.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }

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
        for (row, (def, series)) in TABLE.iter().zip(&self.rows).enumerate() {
            let id = table::id(row);
            for (i, h) in series.iter().enumerate() {
                let v = read(def, id, r, i);
                match h {
                    Handle::Counter(c) => c.absolute(v),
                    Handle::Gauge(g) => g.set(v as f64 / def.scale),
                }
            }
        }
        let repl = r.replication;
        let attached = repl.replicas.lock().clone();
        let meta = Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
        // One series per attached replica: a handful, never a key.
        for a in &attached {
            let name = format!("{}:{}", a.ip.lock(), Stats::read(&a.port));
            let labels = || vec![Label::new(label::REPLICA, name.clone())];
            let acked = Stats::read(&a.acked);
            self.recorder
                .register_gauge(
                    &Key::from_parts(table::REPLICA_LAG.def().name, labels()),
                    &meta,
                )
                .set(r.repl_offset.saturating_sub(acked) as f64);
            let age = r.now_ms.saturating_sub(Stats::read(&a.acked_at_ms));
            self.recorder
                .register_gauge(
                    &Key::from_parts(table::REPLICA_ACK_AGE.def().name, labels()),
                    &meta,
                )
                .set(age as f64 / 1000.0);
        }
        let set = r.policies.current();
        // One series per policy and stat: names come from the files, never
        // from request values, so the count is bounded by the files.
        let meta = Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));
        for p in set.iter() {
            for (stat, n) in crate::policy::PolicyStats::NAMES.iter().zip(p.stats.read()) {
                let key = Key::from_parts(
                    table::POLICY_HITS.def().name,
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
                        table::POLICY_DETAILED_HITS.def().name,
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

/// Series `i` of `def`, read.
pub fn read(def: &counters::Def, id: Id, r: &Readings<'_>, i: usize) -> u64 {
    match def.read {
        counters::Read::Own => r.stats.counters.get_at(id, i),
        counters::Read::OwnAnd(f) => r.stats.counters.get_at(id, i) + f(r, i),
        counters::Read::With(f) => f(r, i),
        counters::Read::Lines(_) | counters::Read::Text(_) | counters::Read::Dynamic => 0,
    }
}

/// Section `section` of `INFO`, heading first: the table's rows in
/// order, `text` writing the lines of `counters::Read::Text` rows.
pub fn info(
    section: counters::Section,
    r: &Readings<'_>,
    t: &mut String,
    text: &mut dyn FnMut(&str, &mut String),
) {
    t.push_str(section.name().1);
    t.push_str("\r\n");
    for (row, def) in TABLE.iter().enumerate() {
        if def.section != Some(section) || !(def.when)(r) {
            continue;
        }
        match def.read {
            counters::Read::Text(key) => text(key, t),
            counters::Read::Lines(f) => f(r, t),
            _ => {
                let id = table::id(row);
                for f in def.fields {
                    let v = read(def, id, r, f.series);
                    // Writing to a String cannot fail.
                    let _ = match f.show {
                        counters::Show::Plain => write!(t, "{}:{v}\r\n", f.name),
                        counters::Show::Div(d) => write!(t, "{}:{}\r\n", f.name, v / d),
                        counters::Show::Human => write!(
                            t,
                            "{}:{v}\r\n{}_human:{}\r\n",
                            f.name,
                            f.name,
                            crate::util::human_bytes(v)
                        ),
                    };
                }
            }
        }
    }
}

/// The rows `/status.json` shows, as a JSON object (`a.b` keys nested).
pub fn json(r: &Readings<'_>) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for (row, def) in TABLE.iter().enumerate() {
        let Some((key, d)) = def.json else { continue };
        let v = read(def, table::id(row), r, 0) / d;
        let mut obj = &mut out;
        let mut parts = key.split('.').peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                obj.insert(part.to_owned(), v.into());
                break;
            }
            obj = obj
                .entry(part)
                .or_insert_with(|| serde_json::Value::Object(Default::default()))
                .as_object_mut()
                .expect("a key nests only in objects");
        }
    }
    out
}
