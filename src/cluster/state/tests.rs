//! The state's rules in a simulated network on a driven clock: nodes
//! exchange messages through in-memory links, so meets, slot changes,
//! collisions and restarts can be replayed and checked for convergence.

use std::collections::{HashMap, VecDeque};

use super::*;
use proptest::prelude::*;

struct Sim {
    nodes: Vec<ClusterState>,
    /// link id -> (owner node, target node)
    links: HashMap<LinkId, (usize, usize)>,
    /// Nodes that are down: they neither send nor receive.
    down: Vec<bool>,
    next_link: LinkId,
    now: Millis,
    /// Each node's side of a partition: messages cross only within one.
    side: Vec<u8>,
    /// Nodes whose timer does not fire (a busy machine delays it) while
    /// they still receive and answer.
    no_tick: Vec<bool>,
    /// Percent of messages dropped, and percent held to the next tick.
    drop_pct: u64,
    delay_pct: u64,
    rng: u64,
    later: VecDeque<(LinkId, Message, bool)>,
}

const IP: &str = "127.0.0.1";

fn port(i: usize) -> u16 {
    7000 + i as u16
}

impl Sim {
    fn new(n: usize) -> Self {
        Self::seeded(n, 0x5eed)
    }

    /// Node ids from `seed`, so that a failing case replays exactly (the
    /// order of ids decides epoch collisions).
    fn seeded(n: usize, seed: u64) -> Self {
        let nodes = (0..n)
            .map(|i| {
                let h = (seed ^ (i as u64 + 1)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let id = format!("{:016x}{:024x}", h, i);
                ClusterState::new(id, String::new(), port(i), port(i) + 10000, 1000)
            })
            .collect();
        Sim {
            nodes,
            links: HashMap::new(),
            down: vec![false; n],
            next_link: 1,
            now: 1_000_000,
            side: vec![0; n],
            no_tick: vec![false; n],
            drop_pct: 0,
            delay_pct: 0,
            rng: seed | 1,
            later: VecDeque::new(),
        }
    }

    fn by_cport(&self, cport: u16) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| port(i) + 10000 == cport)
    }

    /// Delivers `msg` from node `from` on its outbound link `link`, and the
    /// answers it causes, until the network is quiet.
    fn run(&mut self, mut queue: VecDeque<(LinkId, Message, bool)>) {
        // (link, message, towards_target)
        let mut steps = 0;
        while let Some((link, msg, forward)) = queue.pop_front() {
            steps += 1;
            assert!(steps < 100_000, "message storm");
            let Some(&(owner, target)) = self.links.get(&link) else {
                continue;
            };
            let (to, from) = if forward {
                (target, From::Inbound)
            } else {
                (owner, From::Outbound(link))
            };
            if self.down[to] || self.side[owner] != self.side[target] {
                continue;
            }
            if self.drop_pct + self.delay_pct > 0 {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                let r = self.rng % 100;
                if r < self.drop_pct {
                    continue;
                }
                if r < self.drop_pct + self.delay_pct {
                    self.later.push_back((link, msg, forward));
                    continue;
                }
            }
            let fx = self.nodes[to].receive(&msg, from, IP, IP, self.now);
            if let Some(r) = fx.reply {
                queue.push_back((link, r, !forward));
            }
            for (l, m) in fx.send {
                queue.push_back((l, m, true));
            }
        }
    }

    fn tick(&mut self) {
        self.now += 100;
        let mut queue = std::mem::take(&mut self.later);
        for i in 0..self.nodes.len() {
            if self.down[i] || self.no_tick[i] {
                continue;
            }
            for (id, _ip, cport) in self.nodes[i].wanted_links() {
                let Some(t) = self.by_cport(cport) else {
                    continue;
                };
                if self.down[t] || self.side[t] != self.side[i] {
                    continue;
                }
                let link = self.next_link;
                self.next_link += 1;
                if let Some(m) = self.nodes[i].link_up(&id, link, self.now) {
                    self.links.insert(link, (i, t));
                    queue.push_back((link, m, true));
                }
            }
            let fx = self.nodes[i].tick(self.now);
            for l in fx.close {
                self.links.remove(&l);
            }
            self.assert_every_link_held(i);
            for (l, m) in fx.send {
                queue.push_back((l, m, true));
            }
        }
        self.run(queue);
    }

    /// Right after its tick, node `i`'s open outbound links are exactly
    /// those its nodes hold: none is left open with no node to use it.
    fn assert_every_link_held(&self, i: usize) {
        let mut open: Vec<LinkId> = self
            .links
            .iter()
            .filter(|(_, &(owner, _))| owner == i)
            .map(|(&l, _)| l)
            .collect();
        let mut held: Vec<LinkId> = self.nodes[i]
            .nodes
            .values()
            .filter_map(|n| n.link)
            .collect();
        open.sort_unstable();
        held.sort_unstable();
        assert_eq!(
            open, held,
            "node {i}'s open links against the links its nodes hold"
        );
    }

    /// `kill -9`: the node stops, and every link to or from it breaks (a
    /// dead process's sockets close), so no PING can go to it.
    fn kill(&mut self, i: usize) {
        self.down[i] = true;
        let broken: Vec<LinkId> = self
            .links
            .iter()
            .filter(|(_, &(o, t))| o == i || t == i)
            .map(|(&l, _)| l)
            .collect();
        for l in broken {
            self.links.remove(&l);
            for st in &mut self.nodes {
                st.link_down(l);
            }
        }
    }

    fn meet(&mut self, a: usize, b: usize) {
        let now = self.now;
        self.nodes[a].start_handshake(IP, port(b), port(b) + 10000, now);
    }

    /// Every node's view of who owns what, as redis-cli's signature sees it.
    fn signature(&self, i: usize) -> Vec<(String, Vec<(u16, u16)>)> {
        let mut sig: Vec<_> = self.nodes[i]
            .nodes
            .values()
            .filter(|n| !n.in_handshake() && !n.slots.is_empty())
            .map(|n| (n.id.clone(), n.slots.ranges()))
            .collect();
        sig.sort();
        sig
    }

    fn converged(&self) -> bool {
        // `is_ok` counts each node's slots: it must agree with the slots'
        // owners, one by one.
        for st in &self.nodes {
            let by_slot = (0..SLOTS).all(|s| {
                st.released.contains_key(&s)
                    || st
                        .owner(s)
                        .and_then(|id| st.nodes.get(id))
                        .is_some_and(|n| !n.has(flag::FAIL))
            });
            assert_eq!(st.is_ok(), by_slot);
        }
        let n = self.nodes.len();
        (0..n).all(|i| {
            self.nodes[i]
                .nodes
                .values()
                .filter(|x| !x.in_handshake())
                .count()
                == n
        }) && (1..n).all(|i| self.signature(i) == self.signature(0))
    }

    /// Three nodes met through the first, which owns slots 0-2; the
    /// second owns slot 3.
    fn three_met() -> Self {
        let mut sim = Sim::new(3);
        sim.nodes[0].add_slots(&[0, 1, 2]).unwrap();
        sim.nodes[1].add_slots(&[3]).unwrap();
        for i in 1..3 {
            sim.meet(i, 0);
        }
        assert!(sim.settle(300));
        sim
    }

    fn settle(&mut self, max_ticks: usize) -> bool {
        for _ in 0..max_ticks {
            self.tick();
            if self.converged() {
                return true;
            }
        }
        false
    }
}

#[test]
fn three_nodes_met_through_one_learn_each_other_and_their_slots() {
    let mut sim = Sim::new(3);
    let thirds = [(0u16, 5460u16), (5461, 10922), (10923, 16383)];
    for (i, &(a, b)) in thirds.iter().enumerate() {
        sim.nodes[i]
            .add_slots(&(a..=b).collect::<Vec<_>>())
            .unwrap();
        sim.nodes[i].set_config_epoch(i as i64 + 1).unwrap();
    }
    sim.meet(1, 0);
    sim.meet(2, 0);
    assert!(sim.settle(200), "did not converge");
    for i in 0..3 {
        let st = &sim.nodes[i];
        assert_eq!(st.me().ip, IP, "node {i} learned its address");
        assert_eq!(st.assigned(), SLOTS as usize);
        assert!(st.is_ok());
        let text = st.nodes_text();
        assert_eq!(text.lines().count(), 3, "{text}");
    }
}

#[test]
fn colliding_config_epochs_are_resolved_by_node_id() {
    let mut sim = Sim::new(4);
    for i in 0..4 {
        sim.nodes[i].add_slots(&[i as u16]).unwrap();
    }
    for i in 1..4 {
        sim.meet(i, 0);
    }
    assert!(sim.settle(300));
    for _ in 0..50 {
        sim.tick();
    }
    let epochs: std::collections::BTreeSet<u64> =
        sim.nodes.iter().map(|s| s.me().config_epoch).collect();
    assert_eq!(
        epochs.len(),
        4,
        "every primary ends with its own epoch: {epochs:?}"
    );
}

/// Three met nodes after slot 1 moved from node 0 to node 2 as redis-cli
/// moves it (importing on the target, migrating on the source, then NODE
/// on the target first) and 40 ticks passed; node 2's id.
fn slot_1_moved_to_node_2() -> (Sim, String) {
    let mut sim = Sim::three_met();
    for _ in 0..30 {
        sim.tick();
    }
    let id0 = sim.nodes[0].myself.clone();
    let id2 = sim.nodes[2].myself.clone();
    sim.nodes[2].set_importing(1, &id0).unwrap();
    sim.nodes[0].set_migrating(1, &id2).unwrap();
    sim.nodes[2].set_node(1, &id2, 0).unwrap();
    for _ in 0..40 {
        sim.tick();
    }
    (sim, id2)
}

#[test]
fn a_slot_moved_with_setslot_node_reaches_every_node_and_a_stale_owner_yields() {
    let (sim, id2) = slot_1_moved_to_node_2();
    for i in 0..3 {
        assert_eq!(sim.nodes[i].owner(1), Some(id2.as_str()), "node {i}");
    }
    assert!(
        sim.nodes[0].migrating.is_empty(),
        "the source's open slot closed by the claim"
    );
}

/// In a reshard the taker's PONG and redis-cli's `SETSLOT NODE` tell the
/// giver and every other primary the same news: whichever comes second
/// changes nothing, so it neither rewrites the config file nor rebuilds
/// the routing.
#[test]
fn a_setslot_node_the_view_already_holds_writes_nothing() {
    let (mut sim, id2) = slot_1_moved_to_node_2();
    for i in 0..2 {
        let st = &mut sim.nodes[i];
        assert_eq!(st.owner(1), Some(id2.as_str()), "node {i}");
        (st.save_needed, st.changed) = (false, false);
        let fx = st.set_node(1, &id2, 0).unwrap();
        assert!(fx.dirty_slots.is_empty() && fx.follow.is_none());
        assert!(!st.save_needed && !st.changed, "node {i}");
    }
}

/// The giver's header can reach a third node before the taker's claim
/// (each link has its own pace): the slot stays covered meanwhile, as in
/// Redis, so the third node keeps serving, and the claim then lands. CI
/// once saw a node answer -CLUSTERDOWN mid-rebalance because the slot was
/// freed in between.
#[test]
fn a_slot_given_away_stays_covered_until_the_takers_claim_arrives() {
    let mut sim = Sim::new(3);
    sim.nodes[0]
        .add_slots(&(0..8192).collect::<Vec<_>>())
        .unwrap();
    sim.nodes[1]
        .add_slots(&(8192..SLOTS).collect::<Vec<_>>())
        .unwrap();
    for i in 1..3 {
        sim.meet(i, 0);
    }
    assert!(sim.settle(300));
    for _ in 0..30 {
        sim.tick();
    }
    let (id0, id1) = (sim.id(0), sim.id(1));
    let now = sim.now;
    assert!(sim.nodes[2].state_ok(now));
    // The move redis-cli makes; the taker's news is held back.
    sim.nodes[1].set_importing(1, &id0).unwrap();
    sim.nodes[0].set_migrating(1, &id1).unwrap();
    sim.nodes[1].set_node(1, &id1, 0).unwrap();
    sim.nodes[0].set_node(1, &id1, 0).unwrap();
    let from_giver = sim.nodes[0].message(Kind::Ping, now);
    let _ = sim.nodes[2].receive(&from_giver, From::Inbound, IP, IP, now);
    assert!(sim.nodes[2].is_ok(), "the slot stays covered");
    assert_eq!(sim.nodes[2].owner(1), None, "freed: any claim takes it");
    let from_taker = sim.nodes[1].message(Kind::Ping, now);
    let _ = sim.nodes[2].receive(&from_taker, From::Inbound, IP, IP, now);
    assert_eq!(sim.nodes[2].owner(1), Some(id1.as_str()));
    assert!(sim.nodes[2].is_ok());
}

/// `redis-cli --cluster fix` on a half-moved slot: the owner's header
/// that briefly omits the slot (its DELSLOTS before ADDSLOTS) must not
/// free it on the node importing it, which takes no claim for it; CI saw
/// that node's view differ from every other's for good. A freed slot is
/// shown under its previous owner, so DELSLOTS deletes it.
#[test]
fn an_importing_node_keeps_the_owner_and_delslots_takes_a_freed_slot() {
    let mut sim = Sim::three_met();
    let (id0, id1) = (sim.id(0), sim.id(1));
    sim.nodes[1].set_importing(1, &id0).unwrap();
    sim.nodes[0].set_migrating(1, &id1).unwrap();
    sim.nodes[0].del_slots(&[1]).unwrap();
    let now = sim.now;
    let header = sim.nodes[0].message(Kind::Ping, now);
    let _ = sim.nodes[1].receive(&header, From::Inbound, IP, IP, now);
    let _ = sim.nodes[2].receive(&header, From::Inbound, IP, IP, now);
    assert_eq!(
        sim.nodes[1].owner(1),
        Some(id0.as_str()),
        "the importer keeps the owner"
    );
    assert_eq!(sim.nodes[2].owner(1), None, "another node frees it");
    sim.nodes[2]
        .del_slots(&[1])
        .expect("a freed slot can be deleted");
    assert_eq!(sim.nodes[2].released().count(), 0);
    assert!(matches!(
        sim.nodes[2].del_slots(&[1]),
        Err(StateError::SlotUnassigned(1))
    ));
    // The owner claims it again at a new epoch: every view agrees.
    sim.nodes[0].add_slots(&[1]).unwrap();
    sim.nodes[0].bump_epoch();
    sim.nodes[1].set_stable(1).unwrap();
    for _ in 0..40 {
        sim.tick();
    }
    for i in 0..3 {
        assert_eq!(sim.nodes[i].owner(1), Some(id0.as_str()), "node {i}");
    }
}

#[test]
fn a_primary_that_loses_its_last_slot_follows_the_taker() {
    let mut sim = Sim::new(2);
    sim.nodes[0].add_slots(&[9]).unwrap();
    sim.meet(1, 0);
    assert!(sim.settle(300));
    let id0 = sim.nodes[0].myself.clone();
    let id1 = sim.nodes[1].myself.clone();
    sim.nodes[1].set_importing(9, &id0).unwrap();
    sim.nodes[0].set_migrating(9, &id1).unwrap();
    sim.nodes[1].set_node(9, &id1, 0).unwrap();
    let fx = sim.nodes[0].set_node(9, &id1, 0).unwrap();
    assert!(matches!(fx.follow, Some(Some((_, p))) if p == port(1)));
    assert_eq!(sim.nodes[0].me().primary.as_deref(), Some(id1.as_str()));
}

/// A MEET of a node already known (`redis-cli --cluster add-node` and the
/// operators meet every node again) is a handshake that turns out a
/// duplicate: it is dropped with its link, and so is the link to an
/// address a node left. Each tick checks that no link is left open.
#[test]
fn a_duplicate_handshake_and_a_moved_address_leave_no_link_open() {
    let mut sim = Sim::three_met();
    let links = sim.links.len();
    sim.meet(1, 0);
    sim.meet(2, 0);
    for _ in 0..20 {
        sim.tick();
    }
    assert!(sim.converged());
    assert_eq!(sim.links.len(), links, "the duplicates' links are closed");
    // Node 2 tells node 0 of another bus port (a pod moved): node 0 takes
    // it and closes the link to the old one.
    let id2 = sim.nodes[2].myself.clone();
    let old = sim.nodes[0].nodes[&id2].link.expect("linked");
    let mut ping = sim.nodes[2].message(Kind::Ping, sim.now);
    ping.cport += 1;
    let now = sim.now;
    sim.nodes[0].receive(&ping, From::Inbound, IP, IP, now);
    assert_eq!(sim.nodes[0].nodes[&id2].link, None);
    let fx = sim.nodes[0].tick(now + 100);
    assert!(fx.close.contains(&old), "{:?}", fx.close);
}

#[test]
fn forget_keeps_a_node_out_of_gossip_for_a_minute() {
    let mut sim = Sim::new(3);
    for i in 1..3 {
        sim.meet(i, 0);
    }
    assert!(sim.settle(300));
    let id2 = sim.nodes[2].myself.clone();
    sim.down[2] = true;
    let now = sim.now;
    sim.nodes[0].forget(&id2, now).unwrap();
    sim.nodes[1].forget(&id2, now).unwrap();
    for _ in 0..100 {
        sim.tick();
    }
    assert!(!sim.nodes[0].nodes.contains_key(&id2));
    assert!(!sim.nodes[1].nodes.contains_key(&id2));
    let me0 = sim.nodes[0].myself.clone();
    assert_eq!(
        sim.nodes[0].forget(&me0, now),
        Err(StateError::ForgetMyself)
    );
}

#[test]
fn a_silent_node_turns_pfail_then_fail_with_a_majority() {
    let mut sim = Sim::new(4);
    for i in 0..4 {
        sim.nodes[i].add_slots(&[i as u16]).unwrap();
        sim.nodes[i].set_config_epoch(i as i64 + 1).unwrap();
    }
    for i in 1..4 {
        sim.meet(i, 0);
    }
    assert!(sim.settle(300));
    let id3 = sim.nodes[3].myself.clone();
    sim.down[3] = true;
    let mut failed = false;
    for _ in 0..200 {
        sim.tick();
        if (0..3).all(|i| sim.nodes[i].nodes[&id3].has(flag::FAIL)) {
            failed = true;
            break;
        }
    }
    assert!(failed, "{}", sim.nodes[0].nodes_text());
    assert!(!sim.nodes[0].is_ok());
}

#[test]
fn the_config_file_reads_back_what_it_wrote() {
    let mut sim = Sim::new(3);
    sim.nodes[0]
        .add_slots(&(0..100).collect::<Vec<_>>())
        .unwrap();
    sim.nodes[1].add_slots(&[200, 300]).unwrap();
    for i in 1..3 {
        sim.meet(i, 0);
    }
    assert!(sim.settle(300));
    let id1 = sim.nodes[1].myself.clone();
    sim.nodes[0].set_migrating(5, &id1).unwrap();
    sim.nodes[2].replicate(&id1, false).unwrap();
    let text = sim.nodes[0].config_text();
    let back = ClusterState::from_config(&text, port(0), port(0) + 10000, 1000).unwrap();
    assert_eq!(back.myself, sim.nodes[0].myself);
    assert_eq!(back.migrating, sim.nodes[0].migrating);
    assert_eq!(back.current_epoch, sim.nodes[0].current_epoch);
    // Links come back down and ping times restart, so the lines agree on
    // everything else.
    let stable = |t: &str| -> Vec<String> {
        t.lines()
            .map(|l| {
                l.split(' ')
                    .enumerate()
                    .filter(|(i, _)| !matches!(i, 4 | 5 | 7) || l.starts_with("vars"))
                    .map(|(_, w)| w)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    assert_eq!(stable(&back.config_text()), stable(&text));
    let text2 = sim.nodes[2].config_text();
    let back2 = ClusterState::from_config(&text2, port(2), port(2) + 10000, 1000).unwrap();
    assert_eq!(back2.me().primary.as_deref(), Some(id1.as_str()));
}

#[test]
fn a_hostile_config_file_is_refused_not_panicked_on() {
    for text in [
        "",
        "garbage\n",
        "vars currentEpoch x lastVoteEpoch 0\n",
        "0123456789012345678901234567890123456789 127.0.0.1:1@2 myself,master - 0 0 0 connected 0-99999\n",
        "0123456789012345678901234567890123456789 127.0.0.1:1@2 myself,master - 0 0 0 connected 9-3\n",
        "0123456789012345678901234567890123456789 127.0.0.1:1 myself,master - 0 0 0 connected\n",
        "0123456789012345678901234567890123456789 127.0.0.1:1@2 myself,bogus - 0 0 0 connected\n",
        "0123456789012345678901234567890123456789 127.0.0.1:1@2 myself,master - 0 0 0 connected 1\n\
         0123456789012345678901234567890123456789 127.0.0.1:1@2 myself,master - 0 0 0 connected 1\n",
        // Found by the fuzzer: one id as myself and again as a replica.
        "0123456789012345678901234567890123456789 127.0.0.1:1@2 myself,master - 0 0 0 connected\n\
         0123456789012345678901234567890123456789 127.0.0.1:3@4 slave - 0 0 0 connected\n",
    ] {
        assert!(ClusterState::from_config(text, 1, 2, 1000).is_err(), "{text:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random meets, random slot claims (some overlapping, with random
    /// epochs) and restarts from the config file converge to one owner per
    /// slot that every node agrees on.
    #[test]
    fn random_meets_and_claims_converge_to_one_owner_per_slot(
        n in 2usize..6,
        meets in proptest::collection::vec((0usize..6, 0usize..6), 1..10),
        claims in proptest::collection::vec((0usize..6, 0u16..64, 1u16..16), 0..12),
        restart in proptest::option::of(0usize..6),
        seed in any::<u64>(),
    ) {
        let mut sim = Sim::seeded(n, seed);
        for (i, first, len) in claims {
            let i = i % n;
            let slots: Vec<u16> = (first..first + len).filter(|s| sim.nodes[i].owner(*s).is_none()).collect();
            sim.nodes[i].add_slots(&slots).unwrap();
        }
        // Every node is met by someone, so the graph is connected.
        for i in 1..n {
            sim.meet(i, (i - 1) / 2);
        }
        for (a, b) in meets {
            let (a, b) = (a % n, b % n);
            if a != b {
                sim.meet(a, b);
            }
        }
        for _ in 0..50 {
            sim.tick();
        }
        if let Some(r) = restart {
            let r = r % n;
            let text = sim.nodes[r].config_text();
            sim.kill(r);
            sim.nodes[r] = ClusterState::from_config(&text, port(r), port(r) + 10000, 1000).unwrap();
            sim.nodes[r].me_mut().ip = IP.into();
            sim.down[r] = false;
        }
        prop_assert!(sim.settle(600), "no convergence:\n{}", sim.nodes.iter().map(|s| s.nodes_text()).collect::<Vec<_>>().join("--\n"));
        for _ in 0..50 {
            sim.tick();
        }
        prop_assert!(sim.converged());
        for s in 0..SLOTS {
            let owners: std::collections::BTreeSet<Option<&str>> = sim.nodes.iter().map(|st| st.owner(s)).collect();
            prop_assert_eq!(owners.len(), 1, "slot {} has owners {:?}", s, owners);
        }
        let epochs: Vec<u64> = sim.nodes.iter().filter(|s| !s.me().slots.is_empty()).map(|s| s.me().config_epoch).collect();
        let distinct: std::collections::BTreeSet<_> = epochs.iter().collect();
        prop_assert_eq!(distinct.len(), epochs.len(), "primaries share an epoch: {:?}", epochs);
    }
}

proptest! {
    /// Ranges step over runs of bits; they must name exactly the set
    /// (single slots, runs across word edges, whole words).
    #[test]
    fn slot_ranges_name_exactly_the_set(slots in proptest::collection::btree_set(0u16..SLOTS, 0..400), runs in proptest::collection::vec((0u16..SLOTS, 0u16..300), 0..20), fill in proptest::option::of((0u16..256, 0u16..256))) {
        let mut set = SlotSet::default();
        for &s in &slots {
            set.insert(s);
        }
        for &(a, n) in &runs {
            for s in a..a.saturating_add(n).min(SLOTS) {
                set.insert(s);
            }
        }
        if let Some((w, n)) = fill {
            for s in (w * 64)..((w * 64 + n * 64).min(SLOTS)) {
                set.insert(s);
            }
        }
        let back = SlotSet::from_ranges(&set.ranges());
        prop_assert_eq!(&back, &set);
        let ranges = set.ranges();
        for pair in ranges.windows(2) {
            prop_assert!(pair[0].1 + 1 < pair[1].0, "adjacent ranges not merged: {:?}", pair);
        }
        prop_assert_eq!(ranges.iter().map(|(a, b)| (b - a) as usize + 1).sum::<usize>(), set.len());
    }

    #[test]
    fn minus_is_the_set_difference(a in proptest::collection::btree_set(0u16..SLOTS, 0..600), b in proptest::collection::btree_set(0u16..SLOTS, 0..600)) {
        let (mut x, mut y) = (SlotSet::default(), SlotSet::default());
        a.iter().for_each(|&s| x.insert(s));
        b.iter().for_each(|&s| y.insert(s));
        let want: Vec<u16> = a.difference(&b).copied().collect();
        prop_assert_eq!(x.minus(&y).collect::<Vec<u16>>(), want);
    }
}

mod failover;
