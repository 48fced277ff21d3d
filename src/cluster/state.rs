//! A node's view of a growing cluster, as Redis Cluster keeps it
//! (`cluster.c`): the nodes it knows with their roles, slots and config
//! epochs, the cluster's current epoch, and the slots being moved. Pure:
//! no sockets, no clock, no files. The bus (`server/cluster_bus.rs`) feeds
//! it messages and the time, and sends what it answers.
//!
//! The rules are Redis's, so that a cluster converges as Redis's does:
//! - a node learns others through MEET and then gossip (each PING names a
//!   few nodes the sender knows; an unknown one gets a handshake);
//! - a slot belongs to whoever claims it with the higher config epoch
//!   (`update_slots`); a node whose claim is stale gets an UPDATE;
//! - two primaries with the same config epoch are told apart by node id:
//!   the smaller id takes a new epoch (`epoch_collision`), so after
//!   convergence no two primaries share one and no slot has two owners;
//! - a node that does not answer a PING within the node timeout is
//!   `pfail` to whoever noticed, and `fail` once a majority of the
//!   primaries that serve slots report it;
//! - a replica of a `fail` primary asks every primary for its vote in a
//!   new epoch, and one voted for by a majority of the primaries serving
//!   slots takes its primary's slots at that epoch (`state/failover.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::bus::{Gossip, Kind, Message};
use super::slot::SLOTS;

/// Node flags, the bits Redis uses in `CLUSTER NODES`.
pub mod flag {
    pub const MYSELF: u16 = 1;
    pub const MASTER: u16 = 2;
    pub const REPLICA: u16 = 4;
    pub const PFAIL: u16 = 8;
    pub const FAIL: u16 = 16;
    pub const HANDSHAKE: u16 = 32;
    pub const NOADDR: u16 = 64;
    pub const MEET: u16 = 128;
    pub const NOFAILOVER: u16 = 512;
}

const SLOT_WORDS: usize = SLOTS as usize / 64;

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// A link's number, given by the bus when it connects one.
pub type LinkId = u64;

/// A set of slots, one bit each.
#[derive(Clone, PartialEq, Eq)]
pub struct SlotSet(Box<[u64; SLOT_WORDS]>);

impl Default for SlotSet {
    fn default() -> Self {
        SlotSet(Box::new([0; SLOT_WORDS]))
    }
}

impl std::fmt::Debug for SlotSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.ranges())
    }
}

impl SlotSet {
    pub fn contains(&self, slot: u16) -> bool {
        self.0[slot as usize / 64] >> (slot % 64) & 1 == 1
    }
    pub fn insert(&mut self, slot: u16) {
        self.0[slot as usize / 64] |= 1 << (slot % 64);
    }
    pub fn remove(&mut self, slot: u16) {
        self.0[slot as usize / 64] &= !(1 << (slot % 64));
    }
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
    /// The slots in this set and not in `other`, ascending: what a claim
    /// adds to a view, found a word at a time.
    pub fn minus<'a>(&'a self, other: &'a SlotSet) -> impl Iterator<Item = u16> + 'a {
        self.0
            .iter()
            .zip(other.0.iter())
            .enumerate()
            .flat_map(|(i, (&a, &b))| {
                let mut w = a & !b;
                std::iter::from_fn(move || {
                    (w != 0).then(|| {
                        let bit = w.trailing_zeros();
                        w &= w - 1;
                        (i * 64) as u16 + bit as u16
                    })
                })
            })
    }
    /// The set as ascending inclusive ranges, found a run of bits at a
    /// time (`trailing_zeros`/`trailing_ones`): every routing rebuild,
    /// `CLUSTER NODES` line and gossip message walks each node's set, and
    /// a bit at a time across a move's mixed words it was the largest
    /// part of a rebuild.
    pub fn ranges(&self) -> Vec<(u16, u16)> {
        let mut out = Vec::new();
        let mut start: Option<u16> = None;
        for (i, &word) in self.0.iter().enumerate() {
            let base = (i * 64) as u16;
            // Bits of `word` below `pos` are done; `pos` < 64 in the loop,
            // so every shift is in range.
            let mut pos = 0u32;
            while pos < 64 {
                let rest = word >> pos;
                match start {
                    None if rest == 0 => break,
                    None => {
                        pos += rest.trailing_zeros();
                        start = Some(base + pos as u16);
                    }
                    Some(a) => {
                        // The shifted-in high bits are zeros: a run of ones
                        // ends within the word or at its top.
                        pos += rest.trailing_ones();
                        if pos < 64 {
                            out.push((a, base + pos as u16 - 1));
                            start = None;
                        }
                    }
                }
            }
        }
        if let Some(a) = start {
            out.push((a, SLOTS - 1));
        }
        out
    }
    pub fn from_ranges(ranges: &[(u16, u16)]) -> Self {
        let mut set = SlotSet::default();
        for &(a, b) in ranges {
            for s in a..=b.min(SLOTS - 1) {
                set.insert(s);
            }
        }
        set
    }
}

/// One node as this node sees it.
#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    pub ip: String,
    pub port: u16,
    pub cport: u16,
    pub flags: u16,
    pub primary: Option<String>,
    pub config_epoch: u64,
    /// When the PING now awaiting its PONG went out (0: none).
    pub ping_sent: Millis,
    pub pong_received: Millis,
    /// Last time anything arrived from it.
    pub data_received: Millis,
    pub repl_offset: u64,
    pub slots: SlotSet,
    /// The outbound link the bus keeps to it.
    pub link: Option<LinkId>,
    pub link_since: Millis,
    /// Primaries that reported it `pfail` or `fail`, and when.
    pub fail_reports: Vec<(String, Millis)>,
    pub fail_time: Millis,
    /// When it was created (a handshake that never completes is dropped).
    pub ctime: Millis,
    /// When this node last voted for one of its replicas (a primary's
    /// replicas get one vote per two node timeouts, as Redis's).
    pub voted_time: Millis,
}

impl Node {
    fn new(id: String, ip: String, port: u16, cport: u16, flags: u16, now: Millis) -> Self {
        Node {
            id,
            ip,
            port,
            cport,
            flags,
            primary: None,
            config_epoch: 0,
            ping_sent: 0,
            pong_received: 0,
            data_received: 0,
            repl_offset: 0,
            slots: SlotSet::default(),
            link: None,
            link_since: 0,
            fail_reports: Vec::new(),
            fail_time: 0,
            ctime: now,
            voted_time: 0,
        }
    }
    pub fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }
    pub fn is_primary(&self) -> bool {
        self.has(flag::MASTER)
    }
    pub fn is_replica(&self) -> bool {
        self.has(flag::REPLICA)
    }
    pub fn in_handshake(&self) -> bool {
        self.has(flag::HANDSHAKE)
    }
    /// `ip:port@cport`, as `CLUSTER NODES` shows it.
    pub fn address(&self) -> String {
        format!("{}:{}@{}", self.ip, self.port, self.cport)
    }
}

/// What handling a message or a tick asks the bus and the server to do.
#[derive(Debug, Default)]
pub struct Effects {
    /// Send on the link the message came in on.
    pub reply: Option<Message>,
    /// Send on these outbound links.
    pub send: Vec<(LinkId, Message)>,
    /// This node's primary changed: replicate from it (`Some`) or stop
    /// replicating (`None` inside `Some`).
    pub follow: Option<Option<(String, u16)>>,
    /// Slots this node lost while holding keys in them: delete those keys.
    pub dirty_slots: Vec<u16>,
    /// Outbound links to close (silent too long: a fresh one is opened).
    pub close: Vec<LinkId>,
}

impl Effects {
    fn merge(&mut self, other: Effects) {
        if other.reply.is_some() {
            self.reply = other.reply;
        }
        self.send.extend(other.send);
        if other.follow.is_some() {
            self.follow = other.follow;
        }
        self.dirty_slots.extend(other.dirty_slots);
        self.close.extend(other.close);
    }
}

/// Where a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// A link the peer opened to us.
    Inbound,
    /// The link we keep to a node.
    Outbound(LinkId),
}

/// Errors of the state's own operations (commands map them to Redis's
/// wording).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    #[error("Unknown node {0}")]
    UnknownNode(String),
    #[error("Slot {0} is already busy")]
    SlotBusy(u16),
    #[error("Slot {0} is already unassigned")]
    SlotUnassigned(u16),
    #[error("I'm not the owner of hash slot {0}")]
    NotOwner(u16),
    #[error("I'm already the owner of hash slot {0}")]
    AlreadyOwner(u16),
    #[error("Please use SETSLOT only with masters.")]
    NotPrimary,
    #[error("I tried hard but I can't forget myself...")]
    ForgetMyself,
    #[error("Can't forget my master!")]
    ForgetPrimary,
    #[error("Can't replicate myself")]
    ReplicateMyself,
    #[error("I can only replicate a master, not a replica.")]
    ReplicateReplica,
    #[error("To set a master the node must be empty and without assigned slots.")]
    NotEmpty,
    #[error("The user can assign a config epoch only when the node does not know any other node.")]
    EpochNotAlone,
    #[error("Node config epoch is already non-zero")]
    EpochNonZero,
    #[error("Invalid config epoch specified: {0}")]
    EpochInvalid(i64),
    #[error("Target node is not a master")]
    TargetNotPrimary,
    #[error(
        "Can't assign hashslot {0} to a different node while I still hold keys for this hash slot."
    )]
    SlotKeys(u16),
    #[error("You should send CLUSTER FAILOVER to a replica")]
    FailoverNotReplica,
    #[error("I'm a replica but my master is unknown to me")]
    FailoverPrimaryUnknown,
    #[error("Master is down or failed, please use CLUSTER FAILOVER FORCE")]
    FailoverPrimaryDown,
}

/// `CLUSTER FAILOVER`'s option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailoverMode {
    /// Pause the primary, catch up, then the election.
    Default,
    /// The election at once (the primary is unreachable).
    Force,
    /// No election: a new epoch, and the slots are taken.
    Takeover,
}

/// A replica's election (Redis's `failover_auth_*`).
#[derive(Debug, Default)]
pub struct Election {
    /// When the vote requests go out (0: none scheduled yet).
    pub time: Millis,
    pub sent: bool,
    pub rank: usize,
    pub epoch: u64,
    /// Primaries that voted for this replica in `epoch`.
    pub votes: BTreeSet<String>,
    /// Elections won and lost (timed out), for `CLUSTER INFO`.
    pub won: u64,
}

/// A manual failover (Redis's `mf_*`), on either side.
#[derive(Debug, Default)]
pub struct Manual {
    /// When it gives up (0: none under way).
    pub end: Millis,
    /// On the primary: the replica taking over, and when writes paused.
    pub replica: Option<String>,
    pub paused_since: Millis,
    /// On the replica: the primary's final offset, once it reported it.
    pub primary_offset: Option<u64>,
    /// On the replica: the election may start.
    pub can_start: bool,
}

/// The state a node keeps about the cluster.
#[derive(Debug)]
pub struct ClusterState {
    pub myself: String,
    pub nodes: BTreeMap<String, Node>,
    pub current_epoch: u64,
    pub last_vote_epoch: u64,
    /// Each slot's owner, by node id.
    owners: Vec<Option<String>>,
    /// Slots freed because their owner stopped claiming them (it gave them
    /// away, or dropped them): unowned, so any claim takes one at any
    /// epoch, but counted as covered by `cluster_state` until a claim
    /// lands. Redis keeps such a slot on the old owner instead, and a
    /// stale UPDATE can then take it back from its real owner (the
    /// convergence property found it, and keeping the owner here failed
    /// the same property); counting it as uncovered made `cluster_state`
    /// fail on every node for as long as the taker's claim took to arrive
    /// (CI: `-CLUSTERDOWN` mid-rebalance).
    /// Each freed slot and the owner that stopped claiming it: routing and
    /// `CLUSTER SLOTS` still name that node (it redirects to the taker), so
    /// a client's slot map has no hole meanwhile.
    released: BTreeMap<u16, String>,
    pub migrating: BTreeMap<u16, String>,
    pub importing: BTreeMap<u16, String>,
    /// Ids `CLUSTER FORGET` dropped, not to be re-added by gossip until
    /// the time given.
    forgotten: HashMap<String, Millis>,
    /// Outbound links no node holds any more (its node forgotten, a
    /// duplicate handshake, an address that moved): the next tick closes
    /// them, or each stayed open, idle, for as long as its peer kept it.
    unlinked: Vec<LinkId>,
    pub node_timeout: Millis,
    /// Whether the configuration changed since the file was written.
    pub save_needed: bool,
    /// Whether routing must be republished.
    pub changed: bool,
    pub messages_sent: u64,
    pub messages_received: u64,
    ticks: u64,
    rng: u64,
    /// The election this replica runs when its primary fails.
    pub election: Election,
    /// A manual failover under way, on the replica or its primary.
    pub manual: Manual,
    /// Until when (wall milliseconds) this node is known to reach a
    /// majority of the primaries serving slots: past it, keyed requests
    /// get `-CLUSTERDOWN` (a primary cut off in a minority stops taking
    /// writes). Shared with the routing table, read per request.
    pub quorum_until: Arc<AtomicU64>,
    /// The first tick's time, and when the node may serve again after it
    /// lost the majority (Redis's writable and rejoin delays).
    started: Millis,
    rejoin_at: Millis,
    /// When the quorum was last worked out (every tick and message).
    quorum_checked: Millis,
}

/// How long a forgotten node stays out (Redis: 60 s).
const FORGET_TTL: Millis = 60_000;

/// A fresh node id: 40 hex digits from the OS's random source.
pub fn random_id() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 20];
    // The OS random source failing is not something to limp on with a
    // guessable id: fall back to the time and the process id, still unique.
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes[..16].copy_from_slice(&t.to_le_bytes());
        bytes[16..].copy_from_slice(&std::process::id().to_le_bytes());
    }
    let mut id = String::with_capacity(40);
    for b in bytes {
        let _ = write!(id, "{b:02x}");
    }
    id
}

impl ClusterState {
    /// A new node: alone, a primary without slots.
    pub fn new(myself: String, ip: String, port: u16, cport: u16, node_timeout: Millis) -> Self {
        let seed = myself.bytes().fold(0x9e37_79b9_7f4a_7c15u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let mut me = Node::new(
            myself.clone(),
            ip,
            port,
            cport,
            flag::MYSELF | flag::MASTER,
            0,
        );
        me.link = None;
        let mut nodes = BTreeMap::new();
        nodes.insert(myself.clone(), me);
        ClusterState {
            myself,
            nodes,
            current_epoch: 0,
            last_vote_epoch: 0,
            owners: vec![None; SLOTS as usize],
            released: BTreeMap::new(),
            migrating: BTreeMap::new(),
            importing: BTreeMap::new(),
            forgotten: HashMap::new(),
            unlinked: Vec::new(),
            node_timeout,
            save_needed: true,
            changed: true,
            messages_sent: 0,
            messages_received: 0,
            ticks: 0,
            rng: seed | 1,
            election: Election::default(),
            manual: Manual::default(),
            quorum_until: Arc::new(AtomicU64::new(u64::MAX)),
            started: 0,
            rejoin_at: 0,
            quorum_checked: 0,
        }
    }

    /// `--cluster-announce-ip`: the address this node gives others.
    pub fn set_my_ip(&mut self, ip: &str) {
        self.me_mut().ip = ip.to_string();
        self.touch();
    }

    pub fn me(&self) -> &Node {
        &self.nodes[&self.myself]
    }

    fn me_mut(&mut self) -> &mut Node {
        self.nodes
            .get_mut(&self.myself)
            .expect("myself is always known")
    }

    pub fn owner(&self, slot: u16) -> Option<&str> {
        self.owners[slot as usize].as_deref()
    }

    fn touch(&mut self) {
        self.save_needed = true;
        self.changed = true;
    }

    fn random(&mut self) -> u64 {
        // xorshift64*: only picks which nodes to ping and gossip about.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The node this node's slots come from: itself if a primary.
    pub fn my_primary(&self) -> &str {
        self.me().primary.as_deref().unwrap_or(&self.myself)
    }

    /// Primaries serving at least one slot: the quorum's base.
    pub fn size(&self) -> usize {
        self.nodes
            .values()
            .filter(|n| n.is_primary() && !n.slots.is_empty())
            .count()
    }

    /// Whether every slot is served by a node not `fail`.
    pub fn is_ok(&self) -> bool {
        // Each slot is in exactly its owner's set (`set_owner`,
        // `clear_owner`): counting bits per node is a few hundred word
        // reads, where a lookup per slot cost most of a SETSLOT.
        self.nodes
            .values()
            .filter(|n| !n.has(flag::FAIL))
            .map(|n| n.slots.len())
            .sum::<usize>()
            + self.released.len()
            == SLOTS as usize
    }

    /// Slots freed by their owner and not yet claimed, with that owner.
    pub fn released(&self) -> impl Iterator<Item = (u16, &str)> + '_ {
        self.released.iter().map(|(&s, id)| (s, id.as_str()))
    }

    pub fn assigned(&self) -> usize {
        self.owners.iter().filter(|o| o.is_some()).count()
    }

    // --- slots -----------------------------------------------------------

    fn set_owner(&mut self, slot: u16, id: &str) {
        // Already so: nothing to publish or write. In a reshard the taker's
        // PONG and redis-cli's `SETSLOT NODE` tell the giver and every
        // other primary the same news; the second rewrote the config file
        // and rebuilt the routing for nothing, a third of a slot's writes.
        if self.owners[slot as usize].as_deref() == Some(id) && !self.released.contains_key(&slot) {
            return;
        }
        self.released.remove(&slot);
        if let Some(old) = self.owners[slot as usize].take() {
            if let Some(n) = self.nodes.get_mut(&old) {
                n.slots.remove(slot);
            }
        }
        if let Some(n) = self.nodes.get_mut(id) {
            n.slots.insert(slot);
            self.owners[slot as usize] = Some(id.to_string());
        }
        self.touch();
    }

    fn clear_owner(&mut self, slot: u16) {
        self.released.remove(&slot);
        if let Some(old) = self.owners[slot as usize].take() {
            if let Some(n) = self.nodes.get_mut(&old) {
                n.slots.remove(slot);
            }
        }
        self.touch();
    }

    /// `CLUSTER ADDSLOTS`: every slot must be free; all or nothing.
    pub fn add_slots(&mut self, slots: &[u16]) -> Result<(), StateError> {
        if let Some(&s) = slots.iter().find(|&&s| self.owners[s as usize].is_some()) {
            return Err(StateError::SlotBusy(s));
        }
        let me = self.myself.clone();
        for &s in slots {
            self.importing.remove(&s);
            self.set_owner(s, &me);
        }
        Ok(())
    }

    /// `CLUSTER DELSLOTS`: every slot must be assigned; all or nothing.
    pub fn del_slots(&mut self, slots: &[u16]) -> Result<(), StateError> {
        // A freed slot is still shown under its previous owner (routing,
        // `CLUSTER SLOTS`), so it is assigned as far as a caller can see:
        // redis-cli's fix deletes it and checks `CLUSTER SLOTS` on error.
        if let Some(&s) = slots
            .iter()
            .find(|&&s| self.owners[s as usize].is_none() && !self.released.contains_key(&s))
        {
            return Err(StateError::SlotUnassigned(s));
        }
        for &s in slots {
            self.clear_owner(s);
            self.migrating.remove(&s);
            self.importing.remove(&s);
        }
        Ok(())
    }

    /// `CLUSTER SETSLOT slot MIGRATING id`.
    pub fn set_migrating(&mut self, slot: u16, id: &str) -> Result<(), StateError> {
        if !self.me().is_primary() {
            return Err(StateError::NotPrimary);
        }
        if self.owner(slot) != Some(&self.myself) {
            return Err(StateError::NotOwner(slot));
        }
        let target = self
            .nodes
            .get(id)
            .ok_or_else(|| StateError::UnknownNode(id.into()))?;
        if !target.is_primary() {
            return Err(StateError::TargetNotPrimary);
        }
        self.migrating.insert(slot, id.to_string());
        self.touch();
        Ok(())
    }

    /// `CLUSTER SETSLOT slot IMPORTING id`.
    pub fn set_importing(&mut self, slot: u16, id: &str) -> Result<(), StateError> {
        if !self.me().is_primary() {
            return Err(StateError::NotPrimary);
        }
        if self.owner(slot) == Some(&self.myself) {
            return Err(StateError::AlreadyOwner(slot));
        }
        let source = self
            .nodes
            .get(id)
            .ok_or_else(|| StateError::UnknownNode(id.into()))?;
        if !source.is_primary() {
            return Err(StateError::TargetNotPrimary);
        }
        self.importing.insert(slot, id.to_string());
        self.touch();
        Ok(())
    }

    /// `CLUSTER SETSLOT slot STABLE`.
    pub fn set_stable(&mut self, slot: u16) -> Result<(), StateError> {
        if !self.me().is_primary() {
            return Err(StateError::NotPrimary);
        }
        self.migrating.remove(&slot);
        self.importing.remove(&slot);
        self.touch();
        Ok(())
    }

    /// `CLUSTER SETSLOT slot NODE id`. `keys_in_slot` is how many keys this
    /// node holds in it: a node may not give away a slot it still has keys
    /// in. Returns what the move asks of the server.
    pub fn set_node(
        &mut self,
        slot: u16,
        id: &str,
        keys_in_slot: usize,
    ) -> Result<Effects, StateError> {
        if !self.me().is_primary() {
            return Err(StateError::NotPrimary);
        }
        if !self.nodes.contains_key(id) {
            return Err(StateError::UnknownNode(id.into()));
        }
        if !self.nodes[id].is_primary() {
            return Err(StateError::TargetNotPrimary);
        }
        let mine = self.owner(slot) == Some(&self.myself);
        if mine && id != self.myself && keys_in_slot > 0 {
            return Err(StateError::SlotKeys(slot));
        }
        let mut effects = Effects::default();
        // Given away with no keys left: the move is over on this side.
        if mine && id != self.myself {
            self.migrating.remove(&slot);
        }
        // Taking a slot this node was importing: bump its config epoch
        // without consensus (Redis's clusterBumpConfigEpochWithoutConsensus)
        // so the claim wins everywhere.
        if id == self.myself && self.importing.remove(&slot).is_some() {
            self.bump_epoch();
            self.touch();
        }
        self.set_owner(slot, id);
        // A primary that gave its last slot away follows the node that took
        // it, as Redis 7 does with cluster-allow-replica-migration.
        if id != self.myself && self.me().slots.is_empty() && mine {
            effects.merge(self.follow(id));
        }
        Ok(effects)
    }

    /// Gives this node a config epoch above every other one, if it does not
    /// have the greatest yet and unique. Returns whether it changed.
    pub fn bump_epoch(&mut self) -> bool {
        let mine = self.me().config_epoch;
        let max = self
            .nodes
            .values()
            .filter(|n| n.id != self.myself)
            .map(|n| n.config_epoch)
            .max()
            .unwrap_or(0);
        let shared = self
            .nodes
            .values()
            .any(|n| n.id != self.myself && n.config_epoch == mine);
        if mine == 0 || mine <= max || shared {
            self.current_epoch = self.current_epoch.saturating_add(1);
            let e = self.current_epoch;
            self.me_mut().config_epoch = e;
            self.touch();
            true
        } else {
            false
        }
    }

    /// `CLUSTER SET-CONFIG-EPOCH`.
    pub fn set_config_epoch(&mut self, epoch: i64) -> Result<(), StateError> {
        if epoch < 0 {
            return Err(StateError::EpochInvalid(epoch));
        }
        if self.nodes.len() > 1 {
            return Err(StateError::EpochNotAlone);
        }
        if self.me().config_epoch != 0 {
            return Err(StateError::EpochNonZero);
        }
        let e = epoch as u64;
        self.me_mut().config_epoch = e;
        self.current_epoch = self.current_epoch.max(e);
        self.touch();
        Ok(())
    }

    // --- membership -------------------------------------------------------

    /// `CLUSTER MEET`, and a node heard of in gossip: a handshake with a
    /// provisional id, replaced by the real one when it answers. Returns
    /// false if one is already under way to that address.
    pub fn start_handshake(&mut self, ip: &str, port: u16, cport: u16, now: Millis) -> bool {
        if self
            .nodes
            .values()
            .any(|n| n.in_handshake() && n.ip == ip && n.port == port && n.cport == cport)
        {
            return false;
        }
        let id = random_id();
        let node = Node::new(
            id.clone(),
            ip.to_string(),
            port,
            cport,
            flag::HANDSHAKE | flag::MEET,
            now,
        );
        self.nodes.insert(id, node);
        self.changed = true;
        true
    }

    /// `CLUSTER FORGET id`.
    pub fn forget(&mut self, id: &str, now: Millis) -> Result<(), StateError> {
        if id == self.myself {
            return Err(StateError::ForgetMyself);
        }
        if !self.nodes.contains_key(id) {
            return Err(StateError::UnknownNode(id.into()));
        }
        if self.me().primary.as_deref() == Some(id) {
            return Err(StateError::ForgetPrimary);
        }
        self.forgotten.insert(id.to_string(), now + FORGET_TTL);
        self.remove_node(id);
        Ok(())
    }

    fn remove_node(&mut self, id: &str) {
        if let Some(node) = self.nodes.remove(id) {
            self.unlinked.extend(node.link);
            for s in node.slots.ranges().into_iter().flat_map(|(a, b)| a..=b) {
                self.owners[s as usize] = None;
            }
        }
        self.migrating.retain(|_, to| to != id);
        self.importing.retain(|_, from| from != id);
        for n in self.nodes.values_mut() {
            n.fail_reports.retain(|(r, _)| r != id);
            if n.primary.as_deref() == Some(id) && n.id != self.myself {
                n.primary = None;
            }
        }
        self.touch();
    }

    /// `CLUSTER REPLICATE id`: this node follows `id`.
    pub fn replicate(&mut self, id: &str, has_keys: bool) -> Result<Effects, StateError> {
        if id == self.myself {
            return Err(StateError::ReplicateMyself);
        }
        let target = self
            .nodes
            .get(id)
            .ok_or_else(|| StateError::UnknownNode(id.into()))?;
        if target.is_replica() {
            return Err(StateError::ReplicateReplica);
        }
        if self.me().is_primary() && (!self.me().slots.is_empty() || has_keys) {
            return Err(StateError::NotEmpty);
        }
        Ok(self.follow(id))
    }

    /// Makes this node a replica of `id` (which must be known).
    fn follow(&mut self, id: &str) -> Effects {
        let (ip, port) = {
            let t = &self.nodes[id];
            (t.ip.clone(), t.port)
        };
        let mine: Vec<u16> = self
            .me()
            .slots
            .ranges()
            .into_iter()
            .flat_map(|(a, b)| a..=b)
            .collect();
        for s in mine {
            self.clear_owner(s);
        }
        self.migrating.clear();
        self.importing.clear();
        let me = self.me_mut();
        me.flags = (me.flags & !flag::MASTER) | flag::REPLICA;
        me.primary = Some(id.to_string());
        self.manual = Manual::default();
        self.touch();
        Effects {
            follow: Some(Some((ip, port))),
            ..Effects::default()
        }
    }

    /// This node becomes a primary again (its replication was ended by
    /// hand: `REPLICAOF NO ONE`, `CLUSTER RESET`).
    pub fn set_primary_self(&mut self) {
        let me = self.me_mut();
        me.flags = (me.flags & !flag::REPLICA) | flag::MASTER;
        me.primary = None;
        self.touch();
    }

    /// `CLUSTER RESET SOFT|HARD`: forget every other node, drop all slots;
    /// HARD also takes a new id and zeroes the epochs.
    pub fn reset(&mut self, hard: bool) -> Effects {
        let was_replica = self.me().is_replica();
        let others: Vec<String> = self
            .nodes
            .keys()
            .filter(|k| **k != self.myself)
            .cloned()
            .collect();
        for id in others {
            self.remove_node(&id);
        }
        for s in 0..SLOTS {
            self.owners[s as usize] = None;
        }
        self.released.clear();
        self.me_mut().slots = SlotSet::default();
        self.migrating.clear();
        self.importing.clear();
        self.set_primary_self();
        if hard {
            self.current_epoch = 0;
            self.last_vote_epoch = 0;
            let mut me = self.nodes.remove(&self.myself).expect("myself");
            me.config_epoch = 0;
            me.id = random_id();
            self.myself = me.id.clone();
            self.nodes.insert(me.id.clone(), me);
        }
        self.touch();
        Effects {
            follow: was_replica.then_some(None),
            ..Effects::default()
        }
    }
}

mod conf;
mod failover;
mod gossip;

#[cfg(test)]
mod tests;
