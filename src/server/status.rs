//! The status page on `--metrics-addr`: `/` is one self-contained HTML page
//! (`status.html`: no external scripts, styles or fonts) whose inline
//! script polls `/status.json` on the same port; `/status.json` carries the
//! same data for scripts. Read-only; nothing in it comes from a password,
//! a TLS key or any other secret setting.

use std::collections::VecDeque;

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::limiter::Algorithm;
use crate::replication::{Link, Role};
use crate::state::State;
use crate::stats::top::{Kind, Period};

/// The page (served as is).
pub const PAGE: &str = include_str!("status.html");

/// Seconds of decision rates the chart shows (one sample a second).
pub const HISTORY_SECONDS: usize = 300;

/// Keys shown per top table.
const TOP_SHOWN: usize = 10;

/// Decision totals sampled once a second by the endpoint's task, for the
/// chart of decisions a second.
#[derive(Default)]
pub struct History {
    /// Unix ms, allowed and denied totals so far.
    samples: Mutex<VecDeque<(u64, u64, u64)>>,
}

impl History {
    /// Takes this second's sample.
    pub fn sample(&self, state: &State) {
        let (allowed, denied) = totals(state);
        let mut s = self.samples.lock();
        if s.len() > HISTORY_SECONDS {
            s.pop_front();
        }
        s.push_back((unix_ms(), allowed, denied));
    }

    /// Decisions a second between consecutive samples: time (unix ms),
    /// allowed, denied.
    fn rates(&self) -> Vec<Value> {
        let s = self.samples.lock();
        s.iter()
            .zip(s.iter().skip(1))
            .map(|(a, b)| {
                let secs = (b.0.saturating_sub(a.0)).max(1) as f64 / 1000.0;
                let per_s = |x: u64, y: u64| (y.saturating_sub(x) as f64 / secs).round();
                json!({"t": b.0, "allowed": per_s(a.1, b.1), "denied": per_s(a.2, b.2)})
            })
            .collect()
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Allowed and denied decisions so far, every algorithm.
fn totals(state: &State) -> (u64, u64) {
    Algorithm::ALL.into_iter().fold((0, 0), |(a, d), algo| {
        let c = state.stats.decisions(algo);
        (a + c.allowed, d + c.limited)
    })
}

/// `/status.json`.
pub fn json(state: &State, history: &History) -> String {
    let now = state.clock.now();
    let top = &state.stats.top;
    let hitters = |kind: Kind| -> Vec<Value> {
        top.read(kind, TOP_SHOWN, None, Period::Recent(top.window_ns()), now)
            .into_iter()
            .map(|h| json!({"key": String::from_utf8_lossy(&h.key), "count": h.count}))
            .collect()
    };
    let (allowed, denied) = totals(state);
    let policies: Vec<Value> = state
        .policies
        .current()
        .iter()
        .map(|p| {
            let [total, over, near, within, shadow] = p.stats.read();
            json!({
                "name": p.name, "domain": p.domain, "shadow_mode": p.def.shadow,
                "total_hits": total, "over_limit": over, "near_limit": near,
                "within_limit": within, "shadow_hits": shadow,
            })
        })
        .collect();
    let repl = &state.replication;
    let replication = match repl.role() {
        Role::Primary => json!({
            "role": "primary",
            "replicas": repl.connected(),
            "offset": state.store.effects.offset(),
        }),
        Role::Replica { host, port } => json!({
            "role": "replica",
            "primary": format!("{host}:{port}"),
            "link": match repl.link() {
                Link::Down => "down",
                Link::Connecting => "connecting",
                Link::Sync => "sync",
                Link::Up => "up",
            },
            "offset": state.store.effects.offset(),
        }),
    };
    let mut out = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "redis_version": crate::protocol::REDIS_VERSION,
        "role": replication["role"],
        "decisions": {"allowed": allowed, "denied": denied},
        "rates": history.rates(),
        "top": {
            "window_seconds": top.window_ns() / 1_000_000_000,
            "denied": hitters(Kind::Denied),
            "shadow": hitters(Kind::Shadow),
        },
        "policies": policies,
        "replication": replication,
    });
    // Uptime, memory, clients and keys: the counters' table's rows with a
    // `json` key.
    if let Value::Object(o) = &mut out {
        o.extend(crate::metrics::json(&state.readings()));
    }
    out.to_string()
}
