//! Named policies: limits kept in server-side files, in
//! envoyproxy/ratelimit's configuration format, reloaded while the server
//! runs. `file.rs` reads one file; this module builds the match tree of
//! every file under `--policies`, resolves a descriptor to its most
//! specific policy, derives the counter key, and swaps a reloaded set in
//! atomically (`RL.CHECK`, `RL.ALLOW ... POLICY` and the rate limit
//! service read the set in force through one atomic pointer).
//! `watch.rs` reloads on file changes.

pub mod file;
pub mod rls;
pub mod step;
pub mod watch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;

use crate::limiter::add_usage;
pub use file::{Action, Unit};
use file::{RawDescriptor, RawFile};

/// The prefix of every counter key a policy derives: `rl:{domain}.k_v...`.
pub const KEY_PREFIX: &[u8] = b"rl:";

/// One limit from a file, with what it has counted.
#[derive(Debug)]
pub struct Policy {
    /// `rate_limit.name`, or else the descriptor's path
    /// (`domain.key_value.key`), as envoyproxy/ratelimit names its stats.
    pub name: String,
    pub domain: String,
    /// The descriptor's path, `domain.key_value.key`.
    pub path: String,
    pub def: Def,
    /// The file and line it came from.
    pub source: String,
    /// Unix milliseconds since which this definition has been in force.
    pub since_ms: u64,
    pub stats: Arc<PolicyStats>,
}

/// What a policy says, compared across reloads: an unchanged definition
/// keeps its `since`, and its counters (which live in the keyspace) keep
/// counting either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Def {
    pub action: Action,
    pub shadow: bool,
    pub detailed_metric: bool,
    pub replaces: Vec<String>,
    pub unit: Option<Unit>,
    pub requests_per_unit: u32,
}

/// envoyproxy/ratelimit's per-limit stats, in request units (hits).
#[derive(Debug, Default)]
pub struct PolicyStats {
    pub total_hits: AtomicU64,
    pub over_limit: AtomicU64,
    pub near_limit: AtomicU64,
    pub within_limit: AtomicU64,
    pub shadow_mode: AtomicU64,
    /// `detailed_metric`: the same stats per descriptor value
    /// (`domain.key_value...`), at most [`MAX_DETAILED_VALUES`] of them.
    /// Keyed by counter key (looked up without allocating).
    detailed: Mutex<HashMap<Box<[u8]>, [u64; 5]>>,
}

/// Distinct descriptor values a `detailed_metric` policy keeps stats for;
/// hits of further values are counted under [`OTHER_VALUES`], so request
/// values cannot grow the metrics without bound.
pub const MAX_DETAILED_VALUES: usize = 1_000;

/// The descriptor under which values past [`MAX_DETAILED_VALUES`] count.
pub const OTHER_VALUES: &str = "_other_";

impl PolicyStats {
    /// The stat names, in the order [`PolicyStats::read`] gives them.
    pub const NAMES: [&'static str; 5] = [
        "total_hits",
        "over_limit",
        "near_limit",
        "within_limit",
        "shadow_mode",
    ];

    fn counters(&self) -> [&AtomicU64; 5] {
        [
            &self.total_hits,
            &self.over_limit,
            &self.near_limit,
            &self.within_limit,
            &self.shadow_mode,
        ]
    }

    pub fn read(&self) -> [u64; 5] {
        self.counters().map(|c| c.load(Ordering::Relaxed))
    }

    /// Each descriptor value's stats (`detailed_metric`), sorted.
    pub fn read_detailed(&self) -> Vec<(String, [u64; 5])> {
        let mut v: Vec<_> = self
            .detailed
            .lock()
            .iter()
            .map(|(k, n)| (detailed_name(k), *n))
            .collect();
        v.sort_unstable();
        v
    }

    /// What one decision of `hits` units adds to each stat: `over` when it
    /// was denied (in shadow mode too, as envoyproxy/ratelimit counts it),
    /// `used` the units taken after it, `limit` the limit; near-limit hits
    /// are those past 80% of it.
    fn deltas(hits: u64, over: bool, shadow: bool, used: u64, limit: u64) -> [u64; 5] {
        if over {
            return [hits, hits, 0, 0, if shadow { hits } else { 0 }];
        }
        let near = limit * 4 / 5;
        let near_hits = if used > near {
            hits.min(used - near)
        } else {
            0
        };
        [hits, 0, near_hits, hits, 0]
    }

    /// Counts one decision (see [`PolicyStats::deltas`]). Each stat stops
    /// at [`crate::limiter::MAX_USAGE`] (what `RL.POLICY GET` can show):
    /// a descriptor's `hits_addend` is any u64 a caller sends (over the
    /// limit, and still counted), `RL.CHARGE`'s any up to 2^63 - 1, so a
    /// few of them would wrap a sum.
    pub fn record(&self, hits: u64, over: bool, shadow: bool, used: u64, limit: u64) {
        let add = Self::deltas(hits, over, shadow, used, limit);
        for (c, n) in self.counters().into_iter().zip(add) {
            if n > 0 {
                crate::stats::Stats::add_usage(c, n);
            }
        }
    }

    /// Counts one decision under its counter key too.
    fn record_value(&self, key: &[u8], add: [u64; 5]) {
        let mut map = self.detailed.lock();
        if !map.contains_key(key) && map.len() >= MAX_DETAILED_VALUES {
            return self.record_other(&mut map, add);
        }
        let slot = match map.get_mut(key) {
            Some(slot) => slot,
            None => map.entry(key.into()).or_default(),
        };
        for (c, n) in slot.iter_mut().zip(add) {
            *c = add_usage(*c, n);
        }
    }

    fn record_other(&self, map: &mut HashMap<Box<[u8]>, [u64; 5]>, add: [u64; 5]) {
        let slot = map.entry(OTHER_VALUES.as_bytes().into()).or_default();
        for (c, n) in slot.iter_mut().zip(add) {
            *c = add_usage(*c, n);
        }
    }
}

impl Policy {
    /// Counts one decision on counter `key` in the policy's stats, and
    /// under the descriptor's values when the policy has
    /// `detailed_metric`.
    pub fn record(&self, key: &[u8], hits: u64, over: bool, shadow: bool, used: u64, limit: u64) {
        self.stats.record(hits, over, shadow, used, limit);
        if self.def.detailed_metric {
            let add = PolicyStats::deltas(hits, over, shadow, used, limit);
            self.stats.record_value(key, add);
        }
    }
}

/// A counter key as envoyproxy/ratelimit names a detailed stat:
/// `rl:{domain}.k_v` reads `domain.k_v`; another key (`RL.ALLOW ... POLICY`'s
/// own) stays as it is.
fn detailed_name(key: &[u8]) -> String {
    let named = key
        .strip_prefix(KEY_PREFIX)
        .and_then(|k| k.strip_prefix(b"{"))
        .and_then(|k| {
            let close = memchr::memchr(b'}', k)?;
            Some([&k[..close], &k[close + 1..]].concat())
        });
    String::from_utf8_lossy(named.as_deref().unwrap_or(key)).into_owned()
}

/// The descriptors under one key at one level of a domain's tree.
#[derive(Debug, Default)]
struct Keyed {
    by_value: HashMap<Box<[u8]>, Node>,
    /// Values with `*`, in file order, each split at its stars.
    wildcards: Vec<(Vec<Box<[u8]>>, Node)>,
    /// The descriptor with no value: every value, each counted apart.
    any: Option<Box<Node>>,
}

#[derive(Debug, Default)]
struct Node {
    policy: Option<Arc<Policy>>,
    /// `share_threshold`: every value this wildcard matches shares one
    /// counter, keyed by the pattern.
    shared: Option<Box<[u8]>>,
    children: HashMap<Box<[u8]>, Keyed>,
}

/// Whether `value` matches a wildcard split at its stars (each star
/// matches any run of bytes, as envoyproxy/ratelimit's `wildcardMatch`).
fn wildcard_match(parts: &[Box<[u8]>], value: &[u8]) -> bool {
    let (first, last) = (&parts[0], &parts[parts.len() - 1]);
    if parts.len() == 1 {
        return **first == *value;
    }
    if !value.starts_with(first) || !value.ends_with(last) {
        return false;
    }
    if value.len() < parts.iter().map(|p| p.len()).sum() {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match memchr::memmem::find(rest, part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// A descriptor resolved: the policy that applies and the counter key.
#[derive(Debug)]
pub struct Match<'a> {
    pub policy: &'a Arc<Policy>,
}

/// Every policy in force, built from every file at once.
#[derive(Debug, Default)]
pub struct PolicySet {
    domains: HashMap<Box<[u8]>, Node>,
    by_name: HashMap<String, Option<Arc<Policy>>>,
    /// Sorted by domain, then path.
    list: Vec<Arc<Policy>>,
    pub files: Vec<PathBuf>,
}

impl PolicySet {
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn domains(&self) -> usize {
        self.domains.len()
    }

    /// Whether a file declares `domain`.
    pub fn has_domain(&self, domain: &[u8]) -> bool {
        self.domains.contains_key(domain)
    }

    /// The domains declared, sorted (for errors naming them).
    pub fn domain_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .domains
            .keys()
            .map(|d| String::from_utf8_lossy(d).into_owned())
            .collect();
        names.sort();
        names
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Policy>> {
        self.list.iter()
    }

    /// A policy by name (`rate_limit.name`, or the descriptor's path).
    pub fn get(&self, name: &str) -> Result<&Arc<Policy>, NameError> {
        match self.by_name.get(name) {
            Some(Some(p)) => Ok(p),
            Some(None) => Err(NameError::Ambiguous),
            None => Err(NameError::Unknown),
        }
    }

    /// The most specific policy for a descriptor's entries in `domain`, as
    /// envoyproxy/ratelimit resolves it: at each level the exact value,
    /// then the first wildcard that matches, then the key with no value;
    /// a limit applies only at the level of the descriptor's last entry.
    /// When one applies, `key` is set to its counter key.
    pub fn resolve<'a>(
        &'a self,
        domain: &[u8],
        entries: &[(&[u8], &[u8])],
        key: &mut Vec<u8>,
    ) -> Option<Match<'a>> {
        let mut node = self.domains.get(domain)?;
        key.clear();
        key.extend_from_slice(KEY_PREFIX);
        key.push(b'{');
        key.extend_from_slice(domain);
        key.push(b'}');
        let mut found = None;
        for (i, (k, v)) in entries.iter().enumerate() {
            let keyed = node.children.get(*k)?;
            let next = keyed
                .by_value
                .get(*v)
                .or_else(|| {
                    keyed
                        .wildcards
                        .iter()
                        .find(|(parts, _)| wildcard_match(parts, v))
                        .map(|(_, n)| n)
                })
                .or(keyed.any.as_deref())?;
            key.push(b'.');
            key.extend_from_slice(k);
            key.push(b'_');
            key.extend_from_slice(next.shared.as_deref().unwrap_or(v));
            if i == entries.len() - 1 {
                found = next.policy.as_ref();
            }
            if next.children.is_empty() {
                break;
            }
            node = next;
        }
        found.map(|policy| Match { policy })
    }

    /// Builds the set from parsed files (`(path, file)`), carrying over
    /// from `previous` the `since` of unchanged definitions and the stats
    /// of every policy that keeps its domain and name.
    fn build(
        files: Vec<(PathBuf, RawFile)>,
        previous: &PolicySet,
        now_ms: u64,
    ) -> Result<PolicySet, LoadError> {
        let mut set = PolicySet {
            files: files.iter().map(|(p, _)| p.clone()).collect(),
            ..PolicySet::default()
        };
        // The policies in force by (domain, name): what a reload carries
        // over from.
        let before: HashMap<(&str, &str), &Arc<Policy>> = previous
            .list
            .iter()
            .map(|p| ((p.domain.as_str(), p.name.as_str()), p))
            .collect();
        let mut seen: HashMap<String, PathBuf> = HashMap::new();
        for (path, f) in files {
            if let Some(other) = seen.insert(f.domain.clone(), path.clone()) {
                return Err(LoadError::at(
                    &path,
                    None,
                    format!(
                        "duplicate domain '{}' in config file (also in {})",
                        f.domain,
                        other.display()
                    ),
                ));
            }
            let mut root = Node::default();
            let mut names: HashMap<String, String> = HashMap::new();
            let cx = BuildCx {
                path: &path,
                domain: &f.domain,
                before: &before,
                now_ms,
            };
            for d in f.descriptors {
                cx.add(&mut root, d, &f.domain, &mut set.list, &mut names)?;
            }
            set.domains.insert(f.domain.as_bytes().into(), root);
        }
        set.list
            .sort_by(|a, b| (&a.domain, &a.path).cmp(&(&b.domain, &b.path)));
        for p in &set.list {
            set.by_name
                .entry(p.name.clone())
                .and_modify(|e| *e = None)
                .or_insert_with(|| Some(p.clone()));
            if p.name != p.path {
                set.by_name
                    .entry(p.path.clone())
                    .or_insert_with(|| Some(p.clone()));
            }
        }
        Ok(set)
    }
}

struct BuildCx<'a> {
    path: &'a Path,
    domain: &'a str,
    before: &'a HashMap<(&'a str, &'a str), &'a Arc<Policy>>,
    now_ms: u64,
}

impl BuildCx<'_> {
    fn add(
        &self,
        parent: &mut Node,
        d: RawDescriptor,
        parent_path: &str,
        list: &mut Vec<Arc<Policy>>,
        names: &mut HashMap<String, String>,
    ) -> Result<(), LoadError> {
        let composite = match &d.value {
            Some(v) => format!("{}_{v}", d.key),
            None => d.key.clone(),
        };
        let path = format!("{parent_path}.{composite}");
        let mut node = Node::default();
        if let Some(limit) = d.limit {
            let def = Def {
                action: limit.action,
                shadow: d.shadow_mode,
                detailed_metric: d.detailed_metric,
                replaces: limit.replaces,
                unit: limit.unit,
                requests_per_unit: limit.requests_per_unit,
            };
            let name = limit.name.unwrap_or_else(|| path.clone());
            if let Some(first) = names.insert(name.clone(), path.clone()) {
                return Err(LoadError::at(
                    self.path,
                    None,
                    format!("rate limit name '{name}' is used by both '{first}' and '{path}'"),
                ));
            }
            let old = self.before.get(&(self.domain, name.as_str())).copied();
            let since_ms = match old {
                Some(p) if p.def == def && p.path == path => p.since_ms,
                _ => self.now_ms,
            };
            let policy = Arc::new(Policy {
                name,
                domain: self.domain.to_string(),
                path: path.clone(),
                def,
                source: self.path.display().to_string(),
                since_ms,
                stats: old.map(|p| p.stats.clone()).unwrap_or_default(),
            });
            list.push(policy.clone());
            node.policy = Some(policy);
        }
        if d.share_threshold {
            node.shared = d.value.as_deref().map(|v| v.as_bytes().into());
        }
        for child in d.descriptors {
            self.add(&mut node, child, &path, list, names)?;
        }
        let keyed = parent.children.entry(d.key.as_bytes().into()).or_default();
        match d.value {
            None => keyed.any = Some(Box::new(node)),
            Some(v) if v.contains('*') => {
                let parts = v.as_bytes().split(|&b| b == b'*').map(Into::into).collect();
                keyed.wildcards.push((parts, node));
            }
            Some(v) => {
                keyed.by_value.insert(v.as_bytes().into(), node);
            }
        }
        Ok(())
    }
}

/// Why `RL.ALLOW ... POLICY name` found no policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    Unknown,
    /// Two domains use the name: the descriptor path names either.
    Ambiguous,
}

/// A policy file refused: its path, where in it (when known), and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.text())]
pub struct LoadError {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub reason: String,
}

impl LoadError {
    fn at(path: &Path, line: Option<usize>, reason: String) -> LoadError {
        LoadError {
            path: path.to_path_buf(),
            line,
            column: None,
            reason,
        }
    }

    fn text(&self) -> String {
        match (self.line, self.column) {
            (Some(l), Some(c)) => format!("{}:{l}:{c}: {}", self.path.display(), self.reason),
            (Some(l), None) => format!("{}:{l}: {}", self.path.display(), self.reason),
            _ => format!("{}: {}", self.path.display(), self.reason),
        }
    }
}

/// The YAML files `path` names: itself, or a directory's `*.yaml` and
/// `*.yml` (not recursive; names starting with `.` skipped, as editors'
/// swap files and Kubernetes' `..data` links are), in name order.
pub fn files_of(path: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let meta = std::fs::metadata(path).map_err(|e| LoadError::at(path, None, e.to_string()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let rd = std::fs::read_dir(path).map_err(|e| LoadError::at(path, None, e.to_string()))?;
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| LoadError::at(path, None, e.to_string()))?;
        let p = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
        if yaml && !name.starts_with('.') && p.is_file() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Reads and checks every file under `path` into a set; nothing is
/// returned unless all of it is valid. A file over `max_file_size` bytes
/// is refused unread past the cap (a FIFO or a device named as the path
/// included).
pub fn load(
    path: &Path,
    previous: &PolicySet,
    now_ms: u64,
    max_file_size: u64,
) -> Result<PolicySet, LoadError> {
    let mut texts = Vec::new();
    for p in files_of(path)? {
        texts.push((p.clone(), read_capped(&p, max_file_size)?));
    }
    parse_all(texts, previous, now_ms)
}

/// A file's text, refused if it is over `cap` bytes.
fn read_capped(path: &Path, cap: u64) -> Result<String, LoadError> {
    use std::io::Read;
    let io = |e: std::io::Error| LoadError::at(path, None, e.to_string());
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > cap {
        let size = size.max(bytes.len() as u64);
        return Err(LoadError::at(
            path,
            None,
            format!(
                "policy file {} is {}, over the cap of {} (--policies-max-file-size)",
                path.file_name().map_or_else(
                    || path.display().to_string(),
                    |n| n.to_string_lossy().into_owned()
                ),
                crate::util::human_bytes(size),
                crate::util::human_bytes(cap),
            ),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| LoadError::at(path, None, "stream did not contain valid UTF-8".into()))
}

/// Parses policies from text, each named as if it were a file (tests).
pub fn from_texts(
    texts: &[(&str, &str)],
    previous: &PolicySet,
    now_ms: u64,
) -> Result<PolicySet, LoadError> {
    let texts = texts
        .iter()
        .map(|(name, text)| (PathBuf::from(name), text.to_string()));
    parse_all(texts, previous, now_ms)
}

/// Parses every `(path, text)` and builds the set, or names the first
/// file that is wrong.
fn parse_all(
    texts: impl IntoIterator<Item = (PathBuf, String)>,
    previous: &PolicySet,
    now_ms: u64,
) -> Result<PolicySet, LoadError> {
    let mut files = Vec::new();
    for (path, text) in texts {
        match file::parse(&text) {
            Ok(f) => files.push((path, f)),
            Err(f) => {
                return Err(LoadError {
                    path,
                    line: f.line,
                    column: f.column,
                    reason: f.reason,
                })
            }
        }
    }
    PolicySet::build(files, previous, now_ms)
}

/// How the last reload went, for `INFO` and `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct ReloadStatus {
    /// Unix ms of the last successful load (0: never).
    pub last_ok_ms: u64,
    /// The last attempt's error, cleared by a success.
    pub last_error: Option<String>,
}

/// The policies in force and their reloading: the service the command
/// layer, the rate limit service and the watcher share.
///
/// Reloads run on a thread of their own, never on an async worker (a
/// 60,000-descriptor file held one for seconds), and requests made while
/// one runs are coalesced: `RL.POLICY RELOAD`, SIGHUP and the watcher each
/// take a ticket, and the next load, which starts after every ticket taken
/// so far, answers them all.
#[derive(Debug)]
pub struct Policies {
    path: Option<PathBuf>,
    current: ArcSwap<PolicySet>,
    /// One reload at a time, so two cannot both build from the same
    /// previous set and the later lose the earlier's carried-over stats.
    reloading: Mutex<()>,
    queue: Mutex<Queue>,
    /// The last load's ticket and outcome, for those waiting on theirs.
    outcome: tokio::sync::watch::Sender<Outcome>,
    /// `--policies-shadow`: every policy reports but never denies.
    pub shadow_all: AtomicBool,
    status: Mutex<ReloadStatus>,
    pub reloads_ok: AtomicU64,
    pub reloads_failed: AtomicU64,
    /// Descriptors that matched no policy (`RL.CHECK` in a loaded domain,
    /// Envoy's service in any): allowed, and counted so a misspelled key
    /// or domain shows.
    pub unmatched: AtomicU64,
    /// When each domain's unmatched descriptor was last logged (server
    /// milliseconds): at most once a minute per domain.
    unmatched_logged: Mutex<HashMap<Box<[u8]>, u64>>,
}

/// How often an unmatched descriptor is logged, per domain.
const UNMATCHED_LOG_EVERY_MS: u64 = 60_000;

/// Domains whose last unmatched log is remembered; past it the memory
/// starts again (a client naming new domains cannot grow it).
const UNMATCHED_LOG_DOMAINS: usize = 1024;

/// Reload requests not yet served.
#[derive(Debug, Default)]
struct Queue {
    /// Tickets handed out so far (the last one's number).
    tickets: u64,
    /// What the latest request asks the next load to use, if one is due.
    due: Option<LoadArgs>,
    /// The reload thread is running.
    running: bool,
}

/// What a load reads with: the server time to stamp it with, and
/// `--policies-max-file-size` as it is when the reload is asked for.
#[derive(Debug, Clone, Copy)]
pub struct LoadArgs {
    pub now_ms: u64,
    pub max_file_size: u64,
}

/// A reload request's place in line: it is answered by the first load
/// whose ticket is at least this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64);

#[derive(Debug, Clone)]
struct Outcome {
    ticket: u64,
    result: Result<usize, ReloadError>,
}

impl Policies {
    /// Counts a descriptor of `domain` that matched no policy, and logs it
    /// at most once a minute per domain.
    pub fn note_unmatched(&self, domain: &[u8], entries: &[(&[u8], &[u8])], now_ms: u64) {
        self.unmatched.fetch_add(1, Ordering::Relaxed);
        let mut logged = self.unmatched_logged.lock();
        if logged
            .get(domain)
            .is_some_and(|&at| now_ms.saturating_sub(at) < UNMATCHED_LOG_EVERY_MS)
        {
            return;
        }
        if logged.len() >= UNMATCHED_LOG_DOMAINS {
            logged.clear();
        }
        logged.insert(domain.into(), now_ms);
        drop(logged);
        let shown: Vec<String> = entries
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(v)
                )
            })
            .collect();
        tracing::info!(
            domain = %String::from_utf8_lossy(domain),
            descriptor = %shown.join(","),
            "a descriptor matched no policy and was allowed (logged at most once a minute per domain; INFO policies_unmatched counts them all)"
        );
    }

    /// Loads `path` (if any) at start; a bad file is an error then.
    pub fn new(
        path: Option<PathBuf>,
        shadow_all: bool,
        args: LoadArgs,
    ) -> Result<Policies, LoadError> {
        let set = match &path {
            Some(p) => load(p, &PolicySet::default(), args.now_ms, args.max_file_size)?,
            None => PolicySet::default(),
        };
        let ok = path.is_some();
        Ok(Policies {
            path,
            current: ArcSwap::from_pointee(set),
            reloading: Mutex::new(()),
            queue: Mutex::new(Queue::default()),
            outcome: tokio::sync::watch::Sender::new(Outcome {
                ticket: 0,
                result: Ok(0),
            }),
            shadow_all: AtomicBool::new(shadow_all),
            status: Mutex::new(ReloadStatus {
                last_ok_ms: if ok { args.now_ms } else { 0 },
                last_error: None,
            }),
            reloads_ok: AtomicU64::new(ok as u64),
            reloads_failed: AtomicU64::new(0),
            unmatched: AtomicU64::new(0),
            unmatched_logged: Mutex::new(HashMap::new()),
        })
    }

    /// No policy path: `RL.CHECK` finds nothing, `RL.POLICY RELOAD`
    /// says why.
    pub fn empty(shadow_all: bool) -> Policies {
        let args = LoadArgs {
            now_ms: 0,
            max_file_size: 0,
        };
        Policies::new(None, shadow_all, args).expect("nothing to load")
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The set in force, for one request.
    pub fn current(&self) -> arc_swap::Guard<Arc<PolicySet>> {
        self.current.load()
    }

    pub fn shadow_all(&self) -> bool {
        self.shadow_all.load(Ordering::Relaxed)
    }

    pub fn status(&self) -> ReloadStatus {
        self.status.lock().clone()
    }

    /// Whether the reload thread is running (a load under way or due).
    pub fn is_reloading(&self) -> bool {
        self.queue.lock().running
    }

    /// Asks for a reload on the reload thread (started if it is not
    /// running) and returns at once; [`Policies::reloaded`] waits for its
    /// outcome, which is also logged and counted.
    pub fn request_reload(self: &Arc<Self>, args: LoadArgs) -> Result<Ticket, ReloadError> {
        if self.path.is_none() {
            return Err(ReloadError::NoPath);
        }
        let mut q = self.queue.lock();
        q.tickets += 1;
        let ticket = Ticket(q.tickets);
        q.due = Some(args);
        if !q.running {
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name("policy-reload".into())
                .spawn(move || me.serve_requests());
            if let Err(e) = spawned {
                q.due = None;
                let e = ReloadError::Thread(e.to_string());
                self.outcome.send_replace(Outcome {
                    ticket: ticket.0,
                    result: Err(e.clone()),
                });
                return Err(e);
            }
            q.running = true;
        }
        Ok(ticket)
    }

    /// The reload thread: loads while requests are due, one load for all
    /// the requests made before it starts.
    fn serve_requests(&self) {
        loop {
            let (ticket, args) = {
                let mut q = self.queue.lock();
                match q.due.take() {
                    Some(args) => (q.tickets, args),
                    None => {
                        q.running = false;
                        return;
                    }
                }
            };
            let result = self.reload(args);
            self.outcome.send_replace(Outcome { ticket, result });
        }
    }

    /// The outcome of the load that answers `ticket`: how many policies
    /// are in force, or why the files were refused.
    pub async fn reloaded(&self, ticket: Ticket) -> Result<usize, ReloadError> {
        let mut rx = self.outcome.subscribe();
        let outcome = rx.wait_for(|o| o.ticket >= ticket.0).await;
        match outcome {
            Ok(o) => o.result.clone(),
            // The sender lives as long as `self`.
            Err(_) => Err(ReloadError::Thread("the reload thread is gone".into())),
        }
    }

    /// Reads every file again and swaps the new set in whole, or keeps the
    /// set in force and reports why not. Returns the policies now loaded.
    /// Runs on the calling thread: servers go through
    /// [`Policies::request_reload`].
    pub fn reload(&self, args: LoadArgs) -> Result<usize, ReloadError> {
        let path = self.path.as_deref().ok_or(ReloadError::NoPath)?;
        let _one = self.reloading.lock();
        let previous = self.current.load_full();
        match load(path, &previous, args.now_ms, args.max_file_size) {
            Ok(set) => {
                let n = set.len();
                self.current.store(Arc::new(set));
                self.reloads_ok.fetch_add(1, Ordering::Relaxed);
                *self.status.lock() = ReloadStatus {
                    last_ok_ms: args.now_ms,
                    last_error: None,
                };
                tracing::info!(path = %path.display(), policies = n, "policies reloaded");
                Ok(n)
            }
            Err(e) => {
                self.reloads_failed.fetch_add(1, Ordering::Relaxed);
                self.status.lock().last_error = Some(e.to_string());
                tracing::warn!(error = %e, "policy reload refused; the policies in force stay");
                Err(ReloadError::Invalid(e))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    #[error("no policy path is set (start with --policies PATH)")]
    NoPath,
    #[error("{0}")]
    Invalid(LoadError),
    #[error("cannot start the policy reload thread: {0}")]
    Thread(String),
}

/// The decision of `requests_per_unit: 0`: denied, nothing to wait for.
pub const DENY_ALL: crate::limiter::Decision = crate::limiter::Decision {
    allowed: false,
    limit: 0,
    remaining: 0,
    retry_after: None,
    reset_after: 0,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> LoadArgs {
        LoadArgs {
            now_ms: 5,
            max_file_size: 1 << 20,
        }
    }

    /// Requests made while a reload runs are answered by one more load,
    /// not one each, and each gets the outcome of a load that started
    /// after it asked.
    #[tokio::test]
    async fn reload_requests_coalesce() {
        let dir = std::env::temp_dir().join(format!("turnstile-coalesce-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.yaml");
        let v = |n: u32| {
            format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: {n}}}\n")
        };
        std::fs::write(&file, v(1)).unwrap();
        let p = Arc::new(Policies::new(Some(file.clone()), false, args()).unwrap());
        let loads =
            || p.reloads_ok.load(Ordering::Relaxed) + p.reloads_failed.load(Ordering::Relaxed);
        let before = loads();
        // Hold the reload lock: the first request's load waits on it.
        let held = p.reloading.lock();
        let first = p.request_reload(args()).unwrap();
        let tickets: Vec<Ticket> = (0..50).map(|_| p.request_reload(args()).unwrap()).collect();
        std::fs::write(&file, v(7)).unwrap();
        let last = p.request_reload(args()).unwrap();
        drop(held);
        assert_eq!(p.reloaded(first).await, Ok(1));
        for t in tickets {
            assert_eq!(p.reloaded(t).await, Ok(1));
        }
        assert_eq!(p.reloaded(last).await, Ok(1));
        // The first load, and at most one for the 51 requests after it.
        let ran = loads() - before;
        assert!((1..=2).contains(&ran), "{ran} loads for 52 requests");
        // The last request saw the file as written before it.
        let set = p.current();
        let Action::Limit(spec) = set.iter().next().unwrap().def.action else {
            panic!("a limit")
        };
        assert_eq!(spec.params.limit(), 7);
        drop(set);
        // Once idle, a new request starts a new load.
        std::fs::write(&file, "domain: [").unwrap();
        let t = p.request_reload(args()).unwrap();
        let err = p.reloaded(t).await.unwrap_err().to_string();
        assert!(err.contains("p.yaml"), "{err}");
        assert_eq!(loads() - before, ran + 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_path_is_refused_at_once() {
        let p = Arc::new(Policies::empty(false));
        assert_eq!(p.request_reload(args()), Err(ReloadError::NoPath));
    }
}
