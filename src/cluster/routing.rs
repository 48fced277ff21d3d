//! The routing table a request reads: each slot's owner, this node's
//! role, and the slots being moved. Built from the cluster state whenever
//! it changes and swapped in whole, so the request path reads it without
//! the state's lock (one atomic load and an array index per request).

use std::collections::HashMap;

use super::slot::SLOTS;
use super::state::ClusterState;

const NONE: u16 = u16::MAX;

/// A node as routing names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteNode {
    pub id: String,
    pub ip: String,
    pub port: u16,
}

impl RouteNode {
    /// `ip:port`, as `MOVED` and `ASK` give it.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }
}

/// Where a keyed request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Local,
    Moved(u16, String),
    Ask(u16, String),
    TryAgain,
    Unbound,
    Down,
}

#[derive(Debug)]
pub struct Routing {
    owner: Box<[u16]>,
    pub nodes: Vec<RouteNode>,
    pub me: u16,
    /// Whose slots this node serves reads of, when it is a replica.
    pub my_primary: Option<u16>,
    migrating: HashMap<u16, u16>,
    importing: HashMap<u16, u16>,
    /// Every slot served by a node not failed (`cluster_state:ok`).
    pub ok: bool,
    /// Until when (wall ms) a majority of primaries is known reachable
    /// (the state's, updated every tick without a new table).
    quorum_until: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// This primary pauses writes for a replica's manual failover.
    pub writes_paused: bool,
}

impl Routing {
    pub fn from_state(st: &ClusterState) -> Self {
        let mut index: HashMap<&str, u16> = HashMap::new();
        let mut nodes = Vec::new();
        for n in st.nodes.values().filter(|n| !n.in_handshake()) {
            index.insert(n.id.as_str(), nodes.len() as u16);
            nodes.push(RouteNode {
                id: n.id.clone(),
                ip: n.ip.clone(),
                port: n.port,
            });
        }
        let idx = |id: &str| index.get(id).copied().unwrap_or(NONE);
        // Filled from each node's ranges: one id lookup per node, not one
        // per slot (16,384 string hashes were most of a SETSLOT's cost).
        let mut owner: Box<[u16]> = vec![NONE; SLOTS as usize].into_boxed_slice();
        for n in st.nodes.values().filter(|n| !n.in_handshake()) {
            let i = idx(&n.id);
            // A node's slot set and the state's owners are kept together
            // (`set_owner`, `clear_owner`), so its ranges are its slots.
            for (a, b) in n.slots.ranges() {
                owner[a as usize..=b as usize].fill(i);
            }
        }
        // A freed slot goes to the node that gave it away until a claim
        // lands: it redirects to the taker.
        for (s, prev) in st.released() {
            if owner[s as usize] == NONE {
                owner[s as usize] = idx(prev);
            }
        }
        let open = |m: &std::collections::BTreeMap<u16, String>| {
            m.iter()
                .filter(|(_, id)| index.contains_key(id.as_str()))
                .map(|(&s, id)| (s, idx(id)))
                .collect()
        };
        Routing {
            owner,
            me: idx(&st.myself),
            my_primary: st.me().primary.as_deref().map(idx).filter(|&i| i != NONE),
            migrating: open(&st.migrating),
            importing: open(&st.importing),
            nodes,
            ok: st.is_ok(),
            quorum_until: st.quorum_until.clone(),
            writes_paused: st.writes_paused(),
        }
    }

    /// Whether this node still knows a majority of primaries reachable at
    /// `now_ms`: a node cut off in a minority refuses keyed requests.
    pub fn in_majority(&self, now_ms: u64) -> bool {
        now_ms <= self.quorum_until.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn owner(&self, slot: u16) -> Option<&RouteNode> {
        self.nodes.get(*self.owner.get(slot as usize)? as usize)
    }

    /// Whether this node owns `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.owner.get(slot as usize) == Some(&self.me)
    }

    pub fn migrating_to(&self, slot: u16) -> Option<&RouteNode> {
        self.migrating
            .get(&slot)
            .and_then(|&i| self.nodes.get(i as usize))
    }

    /// Whether `slot` is being moved to or from this node.
    pub fn is_open(&self, slot: u16) -> bool {
        (!self.migrating.is_empty() || !self.importing.is_empty())
            && (self.migrating.contains_key(&slot) || self.importing.contains_key(&slot))
    }

    pub fn importing(&self, slot: u16) -> bool {
        self.importing.contains_key(&slot)
    }

    /// Redis's `getNodeByQuery` for a request whose keys all hash to
    /// `slot`. `exists` says whether a key is here (asked only while the
    /// slot is being moved); `asking` is the connection's `ASKING` (or the
    /// command's own, `RESTORE-ASKING`); `read_replica` a `READONLY`
    /// connection's read.
    pub fn route<'k>(
        &self,
        slot: u16,
        keys: impl Iterator<Item = &'k [u8]>,
        exists: impl Fn(&[u8]) -> bool,
        asking: bool,
        read_replica: bool,
        is_migrate: bool,
    ) -> Route {
        let Some(owner) = self
            .owner
            .get(slot as usize)
            .copied()
            .filter(|&o| o != NONE)
        else {
            return Route::Unbound;
        };
        if !self.ok {
            return Route::Down;
        }
        let migrating = owner == self.me && self.migrating.contains_key(&slot);
        let importing = self.importing.contains_key(&slot);
        let (mut missing, mut existing, mut multiple) = (0usize, 0usize, false);
        if migrating || importing {
            if is_migrate {
                return Route::Local;
            }
            let mut first: Option<&[u8]> = None;
            for k in keys {
                match first {
                    None => first = Some(k),
                    Some(f) if f != k => multiple = true,
                    Some(_) => {}
                }
                if exists(k) {
                    existing += 1;
                } else {
                    missing += 1;
                }
            }
        }
        if migrating && missing > 0 {
            if existing > 0 {
                return Route::TryAgain;
            }
            if let Some(to) = self.migrating_to(slot) {
                return Route::Ask(slot, to.addr());
            }
        }
        if importing && asking {
            return if multiple && missing > 0 {
                Route::TryAgain
            } else {
                Route::Local
            };
        }
        if read_replica && self.my_primary == Some(owner) {
            return Route::Local;
        }
        if owner != self.me {
            return Route::Moved(slot, self.nodes[owner as usize].addr());
        }
        Route::Local
    }
}
