//! The cluster topology: which shard owns which slots, which nodes serve
//! each shard, and which of them is its primary now. Every node is given
//! the same node list (or file), so every node derives the same map and
//! the same node ids without talking to the others; a shard's primary
//! changes when Redis Sentinel fails it over (`server/sentinel.rs` hears
//! it and calls [`Topology::set_primary`]).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Deserialize;

use super::slot::SLOTS;

/// One node of the cluster: a shard's primary or one of its replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// 40 hex characters, derived from the address.
    pub id: String,
    pub host: String,
    pub port: u16,
    /// Its shard's inclusive slot ranges, ascending.
    pub ranges: Vec<(u16, u16)>,
    /// Index of its shard in [`Topology::shards`].
    pub shard: usize,
}

impl Node {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// A set of slots served by one primary and its replicas.
#[derive(Debug)]
pub struct Shard {
    /// The master name Sentinel knows the shard by (`--cluster-sentinels`).
    pub name: String,
    /// Its nodes (indices into [`Topology::nodes`]), the configured
    /// primary first.
    pub members: Vec<usize>,
    /// The member that is its primary now.
    primary: AtomicUsize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    #[error("invalid node address '{0}': expected HOST:PORT")]
    BadAddress(String),
    #[error("node {0} is listed twice")]
    Duplicate(String),
    #[error("--cluster-announce {0} is not one of the cluster's nodes")]
    NotAMember(String),
    #[error("invalid slot range '{0}': expected N or N-M with 0 <= N <= M <= 16383")]
    BadRange(String),
    #[error("slot {0} is assigned to two nodes")]
    Overlap(u16),
    #[error("the cluster has no nodes")]
    Empty,
    #[error("{0}")]
    File(String),
}

/// The cluster as this node sees it.
#[derive(Debug)]
pub struct Topology {
    pub nodes: Vec<Node>,
    pub shards: Vec<Shard>,
    /// Index of this node in `nodes`.
    pub me: usize,
    /// Owner (index into `shards`) of every slot; `u16::MAX` if unassigned.
    owner: Box<[u16]>,
}

/// The cluster file (`--cluster-config`): explicit slot ranges per shard,
/// and its replicas.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    node: Vec<FileNode>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileNode {
    addr: String,
    slots: Vec<String>,
    #[serde(default)]
    replicas: Vec<String>,
    /// Sentinel's master name for the shard; default `shard-N` (N its
    /// position in the file, from 0).
    name: Option<String>,
}

impl Topology {
    /// Splits the slots into contiguous ranges in list order, as
    /// `redis-cli --cluster create` does (0-5460, 5461-10922, 10923-16383
    /// for three nodes).
    pub fn even(addrs: &[String], announce: &str) -> Result<Topology, TopologyError> {
        if addrs.is_empty() {
            return Err(TopologyError::Empty);
        }
        let per = f64::from(SLOTS) / addrs.len() as f64;
        let mut cursor = 0.0f64;
        let mut first = 0u16;
        let mut shards = Vec::with_capacity(addrs.len());
        for (i, addr) in addrs.iter().enumerate() {
            let last = if i + 1 == addrs.len() {
                SLOTS - 1
            } else {
                ((cursor + per - 1.0).round() as u16).min(SLOTS - 1)
            };
            shards.push((
                format!("shard-{i}"),
                vec![addr.clone()],
                vec![(first, last)],
            ));
            first = last + 1;
            cursor += per;
        }
        Self::build(shards, announce)
    }

    /// Reads explicit ranges from a TOML file:
    /// `[[node]] addr = "10.0.0.1:6379"  slots = ["0-8191"]`, with
    /// `replicas = ["10.0.0.4:6379"]` and `name = "shard-a"` optional.
    pub fn from_file(path: &Path, announce: &str) -> Result<Topology, TopologyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| TopologyError::File(format!("cannot read {}: {e}", path.display())))?;
        let file: File = toml::from_str(&text)
            .map_err(|e| TopologyError::File(format!("{}: {e}", path.display())))?;
        let shards = file
            .node
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                let ranges = n
                    .slots
                    .iter()
                    .map(|r| parse_range(r))
                    .collect::<Result<_, _>>()?;
                let members = std::iter::once(n.addr).chain(n.replicas).collect();
                Ok((
                    n.name.unwrap_or_else(|| format!("shard-{i}")),
                    members,
                    ranges,
                ))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::build(shards, announce)
    }

    /// `shards`: (name, member addresses with the primary first, ranges).
    #[allow(clippy::type_complexity)]
    fn build(
        shards: Vec<(String, Vec<String>, Vec<(u16, u16)>)>,
        announce: &str,
    ) -> Result<Topology, TopologyError> {
        if shards.is_empty() {
            return Err(TopologyError::Empty);
        }
        let mut owner = vec![u16::MAX; SLOTS as usize].into_boxed_slice();
        let mut nodes: Vec<Node> = Vec::new();
        let mut out = Vec::with_capacity(shards.len());
        for (i, (name, members, mut ranges)) in shards.into_iter().enumerate() {
            ranges.sort_unstable();
            for &(a, b) in &ranges {
                for s in a..=b {
                    if owner[s as usize] != u16::MAX {
                        return Err(TopologyError::Overlap(s));
                    }
                    owner[s as usize] = i as u16;
                }
            }
            let first = nodes.len();
            for addr in &members {
                let mut n = node(addr, ranges.clone())?;
                n.shard = i;
                if nodes.iter().any(|m| m.host == n.host && m.port == n.port) {
                    return Err(TopologyError::Duplicate(n.addr()));
                }
                nodes.push(n);
            }
            out.push(Shard {
                name,
                members: (first..nodes.len()).collect(),
                primary: AtomicUsize::new(first),
            });
        }
        let (host, port) = split_addr(announce)?;
        let me = nodes
            .iter()
            .position(|n| n.host == host && n.port == port)
            .ok_or_else(|| TopologyError::NotAMember(announce.to_string()))?;
        Ok(Topology {
            nodes,
            shards: out,
            me,
            owner,
        })
    }

    /// The primary of shard `shard` now (an index into `nodes`).
    pub fn primary_of(&self, shard: usize) -> usize {
        self.shards[shard].primary.load(Ordering::Acquire)
    }

    /// Makes node `node` its shard's primary; false if it already was.
    pub fn set_primary(&self, node: usize) -> bool {
        let shard = &self.shards[self.nodes[node].shard];
        shard.primary.swap(node, Ordering::AcqRel) != node
    }

    /// Whether node `i` is its shard's primary now.
    pub fn is_primary(&self, i: usize) -> bool {
        self.primary_of(self.nodes[i].shard) == i
    }

    /// The node listening at `host:port`.
    pub fn find(&self, host: &str, port: u16) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.host == host && n.port == port)
    }

    /// The shard Sentinel knows as `name`.
    pub fn shard_named(&self, name: &str) -> Option<usize> {
        self.shards.iter().position(|s| s.name == name)
    }

    /// The shard that owns `slot`, if any.
    pub fn shard_of(&self, slot: u16) -> Option<usize> {
        match self.owner[slot as usize] {
            u16::MAX => None,
            i => Some(i as usize),
        }
    }

    pub fn myself(&self) -> &Node {
        &self.nodes[self.me]
    }

    /// The node that serves `slot`'s writes now (its shard's primary), if
    /// any.
    pub fn owner(&self, slot: u16) -> Option<(usize, &Node)> {
        let p = self.primary_of(self.shard_of(slot)?);
        Some((p, &self.nodes[p]))
    }

    /// Slots with an owner.
    pub fn assigned(&self) -> usize {
        self.owner.iter().filter(|&&o| o != u16::MAX).count()
    }
}

fn split_addr(addr: &str) -> Result<(String, u16), TopologyError> {
    crate::util::parse_host_port(addr.trim())
        .ok()
        .filter(|&(_, port)| port != 0)
        .ok_or_else(|| TopologyError::BadAddress(addr.to_string()))
}

fn node(addr: &str, ranges: Vec<(u16, u16)>) -> Result<Node, TopologyError> {
    let (host, port) = split_addr(addr)?;
    Ok(Node {
        id: node_id(&host, port),
        host,
        port,
        ranges,
        shard: 0,
    })
}

fn parse_range(r: &str) -> Result<(u16, u16), TopologyError> {
    let bad = || TopologyError::BadRange(r.to_string());
    let num = |s: &str| {
        s.trim()
            .parse::<u16>()
            .ok()
            .filter(|&n| n < SLOTS)
            .ok_or_else(bad)
    };
    let (a, b) = match r.split_once('-') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => (num(r)?, num(r)?),
    };
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// A node id: 40 hex characters, the same on every node for an address.
/// Redis draws ids at random and gossips them; with a static topology every
/// node must compute them alike, so they come from FNV-1a over the address
/// (hand-written: a few lines, and it must never change between releases,
/// which a general-purpose hasher does not promise).
fn node_id(host: &str, port: u16) -> String {
    let addr = format!("{host}:{port}");
    let mut out = String::with_capacity(48);
    for seed in 0u64..3 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for b in addr.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // splitmix64's finaliser, so nearby addresses give unlike ids.
        h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 31;
        out.push_str(&format!("{h:016x}"));
    }
    out.truncate(40);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn even_split_matches_redis_cli() {
        let t = Topology::even(&addrs(&["a:1", "b:2", "c:3"]), "b:2").unwrap();
        let r: Vec<_> = t.nodes.iter().map(|n| n.ranges.clone()).collect();
        assert_eq!(
            r,
            vec![vec![(0, 5460)], vec![(5461, 10922)], vec![(10923, 16383)]]
        );
        assert_eq!(t.me, 1);
        assert_eq!(t.owner(5461).unwrap().0, 1);
        assert_eq!(t.assigned(), 16384);
        let one = Topology::even(&addrs(&["a:1"]), "a:1").unwrap();
        assert_eq!(one.nodes[0].ranges, vec![(0, 16383)]);
    }

    #[test]
    fn ids_are_deterministic_and_distinct() {
        let a = Topology::even(
            &addrs(&["127.0.0.1:7000", "127.0.0.1:7001"]),
            "127.0.0.1:7000",
        )
        .unwrap();
        let b = Topology::even(
            &addrs(&["127.0.0.1:7000", "127.0.0.1:7001"]),
            "127.0.0.1:7001",
        )
        .unwrap();
        assert_eq!(a.nodes, b.nodes);
        assert_eq!(a.nodes[0].id.len(), 40);
        assert_ne!(a.nodes[0].id, a.nodes[1].id);
        assert!(a.nodes[0].id.bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn errors() {
        assert_eq!(
            Topology::even(&addrs(&["a:1"]), "b:2").unwrap_err(),
            TopologyError::NotAMember("b:2".into())
        );
        assert!(matches!(
            Topology::even(&addrs(&["a"]), "a:1"),
            Err(TopologyError::BadAddress(_))
        ));
        assert!(matches!(
            Topology::even(&addrs(&["a:1", "a:1"]), "a:1"),
            Err(TopologyError::Duplicate(_))
        ));
        assert_eq!(
            parse_range("5-3"),
            Err(TopologyError::BadRange("5-3".into()))
        );
        assert_eq!(
            parse_range("16384"),
            Err(TopologyError::BadRange("16384".into()))
        );
        assert_eq!(parse_range("7"), Ok((7, 7)));
    }

    #[test]
    fn shards_with_replicas_follow_their_primary() {
        let path =
            std::env::temp_dir().join(format!("turnstile-cluster-r-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "[[node]]\naddr = \"h:1\"\nslots = [\"0-8191\"]\nreplicas = [\"h:3\"]\nname = \"a\"\n[[node]]\naddr = \"h:2\"\nslots = [\"8192-16383\"]\nreplicas = [\"h:4\"]\n",
        )
        .unwrap();
        let t = Topology::from_file(&path, "h:3").unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(t.nodes.len(), 4);
        assert_eq!(t.me, 1);
        assert_eq!(t.nodes[t.me].shard, 0);
        assert_eq!(t.owner(5).unwrap().1.addr(), "h:1");
        assert!(!t.is_primary(t.me));
        assert_eq!(t.shard_named("a"), Some(0));
        assert_eq!(t.shard_named("shard-1"), Some(1));
        assert!(t.set_primary(t.me));
        assert!(!t.set_primary(t.me));
        assert_eq!(t.owner(5).unwrap().1.addr(), "h:3");
        assert_eq!(t.owner(9000).unwrap().1.addr(), "h:2");
        assert_eq!(t.find("h:4".split(':').next().unwrap(), 4), Some(3));
    }

    #[test]
    fn explicit_ranges_from_a_file() {
        let path =
            std::env::temp_dir().join(format!("turnstile-cluster-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "[[node]]\naddr = \"h:1\"\nslots = [\"0-99\", \"200\"]\n[[node]]\naddr = \"h:2\"\nslots = [\"100-199\"]\n",
        )
        .unwrap();
        let t = Topology::from_file(&path, "h:2").unwrap();
        assert_eq!(t.owner(200).unwrap().0, 0);
        assert_eq!(t.shards[1].name, "shard-1");
        assert_eq!(t.owner(150).unwrap().0, 1);
        assert!(t.owner(201).is_none());
        assert_eq!(t.assigned(), 201);
        std::fs::remove_file(&path).unwrap();
    }
}
