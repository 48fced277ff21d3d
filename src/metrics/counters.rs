//! What a row of the counters' table ([`super::table`]) says; the loops
//! that render `INFO`, `/metrics` and `/status.json` from the table are
//! `metrics/mod.rs`, the atomics of the rows the server counts itself
//! `stats::Counters`.
//!
//! A row is read one way and shown three: its reading (a `u64`) is a
//! Prometheus sample (divided by [`Def::scale`]), the value of its INFO
//! fields, and its `/status.json` value, so the three never disagree.

use std::time::Duration;

pub use metrics::Unit;

use crate::clock::ForwardSteps;
use crate::persist::Persist;
pub use crate::stats::Id;
use crate::stats::Stats;
use crate::store::Counts;

/// What a scrape or an `INFO` reads beyond the table's own counters,
/// gathered from the server's state (`State::readings`), so the table
/// depends on the services it reads and not on `State`.
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
    /// Scripts in the cache, scripts evicted from it, and the Lua heap's
    /// bytes.
    pub scripts_cached: usize,
    pub scripts_evicted: u64,
    pub lua_memory: usize,
    /// Pub/Sub channels and patterns with subscribers.
    pub pubsub: [usize; 2],
    pub policies: &'a crate::policy::Policies,
    /// Leases that lapsed unreleased with their key (the store's count).
    pub lapsed_leases: u64,
    pub replication: &'a crate::replication::Replication,
    /// The replication stream's offset (`master_repl_offset`).
    pub repl_offset: u64,
    /// Server time, ms (replicas' acknowledgement ages).
    pub now_ms: u64,
    /// With `--cluster-enabled`: the cluster as this node sees it.
    pub cluster: Option<ClusterReadings>,
}

/// What the metrics show of a growing cluster, read under its lock once per
/// scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClusterReadings {
    pub ok: bool,
    pub known_nodes: usize,
    pub current_epoch: u64,
    pub failovers_won: u64,
    pub messages_sent: u64,
    pub messages_received: u64,
}

/// What a Prometheus series is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// INFO's sections, in INFO's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Server,
    Clients,
    Memory,
    Persistence,
    Policies,
    Stats,
    Replication,
    Cpu,
    Commandstats,
    Errorstats,
    Cluster,
    Keyspace,
}

impl Section {
    pub const ALL: [Section; 12] = [
        Section::Server,
        Section::Clients,
        Section::Memory,
        Section::Persistence,
        Section::Policies,
        Section::Stats,
        Section::Replication,
        Section::Cpu,
        Section::Commandstats,
        Section::Errorstats,
        Section::Cluster,
        Section::Keyspace,
    ];

    /// The name `INFO` takes, and the section's heading line.
    pub fn name(self) -> (&'static str, &'static str) {
        match self {
            Section::Server => ("server", "# Server"),
            Section::Clients => ("clients", "# Clients"),
            Section::Memory => ("memory", "# Memory"),
            Section::Persistence => ("persistence", "# Persistence"),
            Section::Policies => ("policies", "# Policies"),
            Section::Stats => ("stats", "# Stats"),
            Section::Replication => ("replication", "# Replication"),
            Section::Cpu => ("cpu", "# CPU"),
            Section::Commandstats => ("commandstats", "# Commandstats"),
            Section::Errorstats => ("errorstats", "# Errorstats"),
            Section::Cluster => ("cluster", "# Cluster"),
            Section::Keyspace => ("keyspace", "# Keyspace"),
        }
    }
}

/// A metric's series: one, one per value of a label, or registered by
/// code as they appear (per command, policy, replica).
#[derive(Debug, Clone, Copy)]
pub enum Series {
    /// Not a metric (an INFO field or lines only).
    None,
    One,
    /// One series per value of the label, in this order: a reading's
    /// `usize` is the value's index.
    Each(&'static str, &'static [&'static str]),
    /// Series whose labels come from elsewhere, registered by the
    /// exporter's own code (`metrics/mod.rs`).
    Dynamic(&'static [&'static str]),
}

impl Series {
    /// How many series the table itself keeps.
    pub const fn count(&self) -> usize {
        match self {
            Series::One => 1,
            Series::Each(_, values) => values.len(),
            Series::None | Series::Dynamic(_) => 0,
        }
    }
}

/// Where a row's reading comes from.
#[derive(Clone, Copy)]
pub enum Read {
    /// The row's own atomics (`stats::Counters`), one per series, which the
    /// server adds to where the event happens.
    Own,
    /// Its own atomics plus what this function adds (counts kept
    /// elsewhere too: leases that lapsed with their key).
    OwnAnd(fn(&Readings<'_>, usize) -> u64),
    /// Series `i`'s reading, taken when rendered.
    With(fn(&Readings<'_>, usize) -> u64),
    /// INFO lines written from the readings by this function (several
    /// values on a line, or a line per algorithm).
    Lines(fn(&Readings<'_>, &mut String)),
    /// INFO lines the `INFO` command writes itself, named by this key:
    /// settings and statuses, which are not counters.
    Text(&'static str),
    /// Series the exporter registers and sets itself.
    Dynamic,
}

/// How an INFO field shows its reading.
#[derive(Debug, Clone, Copy)]
pub enum Show {
    Plain,
    /// `name:N` and `name_human:` N in Redis's units (`1.50M`).
    Human,
    /// The reading divided by this (nanoseconds shown as seconds).
    Div(u64),
}

/// One INFO field of a row: its name, which series, and how it shows.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub series: usize,
    pub show: Show,
}

/// The row's series 0 as INFO field `name`.
pub const fn field(name: &'static str) -> Field {
    Field {
        name,
        series: 0,
        show: Show::Plain,
    }
}

/// Series `series` as INFO field `name`.
pub const fn at(name: &'static str, series: usize) -> Field {
    Field {
        name,
        series,
        show: Show::Plain,
    }
}

/// Series 0 as `name` and `name_human`.
pub const fn human(name: &'static str) -> Field {
    Field {
        name,
        series: 0,
        show: Show::Human,
    }
}

/// Series 0 divided by `div` as `name`.
pub const fn div(name: &'static str, div: u64) -> Field {
    Field {
        name,
        series: 0,
        show: Show::Div(div),
    }
}

/// One counter, gauge or histogram, declared once: how Prometheus names
/// and describes it, where its reading comes from, and where INFO and
/// `/status.json` show it. Rows are written as `Def { .., ..COUNTER }`.
#[derive(Clone, Copy)]
pub struct Def {
    /// The Prometheus name; empty when the row is INFO's only.
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub help: &'static str,
    pub series: Series,
    pub read: Read,
    /// The Prometheus sample is the reading divided by this.
    pub scale: f64,
    /// The INFO section its fields are in, and the fields, in order.
    pub section: Option<Section>,
    pub fields: &'static [Field],
    /// INFO shows the fields only when this holds (persistence's fields
    /// with snapshots on).
    pub when: fn(&Readings<'_>) -> bool,
    /// `/status.json`'s key (`a.b` nests), and the divisor of its value.
    pub json: Option<(&'static str, u64)>,
}

fn always(_: &Readings<'_>) -> bool {
    true
}

/// A counter the server counts itself: add the fields that differ.
pub const COUNTER: Def = Def {
    name: "",
    kind: Kind::Counter,
    unit: Unit::Count,
    help: "",
    series: Series::One,
    read: Read::Own,
    scale: 1.0,
    section: None,
    fields: &[],
    when: always,
    json: None,
};

/// A gauge (its `read` is set by the row).
pub const GAUGE: Def = Def {
    kind: Kind::Gauge,
    ..COUNTER
};

/// INFO lines the `INFO` command writes itself (set `section` and
/// `read: Read::Text(key)`).
pub const TEXT: Def = Def {
    series: Series::None,
    read: Read::Text(""),
    ..COUNTER
};

/// Each row's first atomic, and how many atomics all `Read::Own` rows
/// need.
pub const fn slots<const N: usize>(table: &[Def]) -> ([usize; N], usize) {
    let mut first = [usize::MAX; N];
    let mut next = 0;
    let mut i = 0;
    while i < N {
        if let Read::Own | Read::OwnAnd(_) = table[i].read {
            first[i] = next;
            next += table[i].series.count();
        }
        i += 1;
    }
    (first, next)
}
