//! Failover on the simulated network: detection, elections, manual
//! failover, partitions and a stopped process, on a driven clock.

use super::*;

impl Sim {
    /// `primaries` primaries with the slots split evenly and epochs 1..,
    /// then the rest as replicas: node `primaries + k` replicates node
    /// `k % primaries`. Converged, with every link up.
    pub(super) fn cluster(primaries: usize, replicas: usize, seed: u64) -> Self {
        let n = primaries + replicas;
        let mut sim = Sim::seeded(n, seed);
        let per = SLOTS as usize / primaries;
        for i in 0..primaries {
            let last = if i + 1 == primaries {
                SLOTS as usize
            } else {
                (i + 1) * per
            };
            let slots: Vec<u16> = (i * per..last).map(|s| s as u16).collect();
            sim.nodes[i].add_slots(&slots).unwrap();
            sim.nodes[i].set_config_epoch(i as i64 + 1).unwrap();
        }
        for i in 1..n {
            sim.meet(i, 0);
        }
        assert!(sim.settle(300), "the cluster did not form");
        for r in primaries..n {
            let p = sim.nodes[(r - primaries) % primaries].myself.clone();
            sim.nodes[r].replicate(&p, false).unwrap();
        }
        for _ in 0..30 {
            sim.tick();
        }
        assert!(sim.converged());
        sim
    }

    pub(super) fn id(&self, i: usize) -> String {
        self.nodes[i].myself.clone()
    }

    /// Whether every node up agrees that `winner` owns `slot` and is a
    /// primary.
    pub(super) fn agree_owner(&self, slot: u16, winner: usize) -> bool {
        let w = self.id(winner);
        (0..self.nodes.len()).filter(|&i| !self.down[i]).all(|i| {
            self.nodes[i].owner(slot) == Some(w.as_str())
                && self.nodes[i].nodes.get(&w).is_some_and(|n| n.is_primary())
        })
    }

    /// Hands what a command asked to send to the network.
    pub(super) fn send(&mut self, fx: Effects) {
        let queue = fx.send.into_iter().map(|(l, m)| (l, m, true)).collect();
        self.run(queue);
    }
}

#[test]
fn routing_agrees_with_the_state_on_every_slot() {
    let mut sim = Sim::new(3);
    sim.nodes[0]
        .add_slots(&(0..5000).collect::<Vec<_>>())
        .unwrap();
    sim.nodes[1]
        .add_slots(&(5000..5003).collect::<Vec<_>>())
        .unwrap();
    sim.nodes[2].add_slots(&[9000, 16383]).unwrap();
    for i in 1..3 {
        sim.meet(i, 0);
    }
    assert!(sim.settle(300));
    for st in &sim.nodes {
        let r = crate::cluster::routing::Routing::from_state(st);
        for s in 0..SLOTS {
            assert_eq!(r.owner(s).map(|n| n.id.as_str()), st.owner(s), "slot {s}");
        }
    }
}

#[test]
fn a_dead_primarys_replica_takes_its_slots_within_the_timeout_and_everyone_agrees() {
    let mut sim = Sim::cluster(3, 3, 0xfa11);
    let timeout = sim.nodes[0].node_timeout;
    sim.down[0] = true;
    let killed = sim.now;
    let mut promoted = None;
    for _ in 0..200 {
        sim.tick();
        if sim.agree_owner(0, 3) {
            promoted = Some(sim.now - killed);
            break;
        }
    }
    let took = promoted.unwrap_or_else(|| panic!("no failover:\n{}", sim.nodes[1].nodes_text()));
    // Detection (the timeout, then a majority's reports), 0.5-1 s of wait,
    // one round of votes.
    assert!(took <= timeout + 3000, "took {took} ms");
    let st = &sim.nodes[3];
    assert!(st.me().is_primary());
    assert_eq!(st.me().slots.len(), SLOTS as usize / 3);
    assert!(st.me().config_epoch > 3, "a new epoch, above every other");
    // The election's epoch reached the voters' files: each voted once in it.
    for v in 1..3 {
        assert_eq!(sim.nodes[v].last_vote_epoch, st.me().config_epoch);
    }
    for i in 1..6 {
        assert!(sim.nodes[i].state_ok(sim.now), "node {i} serves again");
        assert_eq!(sim.signature(i), sim.signature(1));
    }
}

/// Killed when no PING to it was out (each peer had its PONG): its links
/// break, so no PING can go; each peer times it from its first attempt to
/// reconnect, as Redis does, and the failover comes within the timeout
/// plus an election.
#[test]
fn a_primary_killed_between_pings_is_failed_over_in_time() {
    let mut sim = Sim::cluster(3, 3, 0xdead);
    let timeout = sim.nodes[0].node_timeout;
    let id0 = sim.id(0);
    // Tick until no peer has a PING out to node 0.
    for _ in 0..50 {
        if (1..6).all(|i| sim.nodes[i].nodes[&id0].ping_sent == 0) {
            break;
        }
        sim.tick();
    }
    assert!((1..6).all(|i| sim.nodes[i].nodes[&id0].ping_sent == 0));
    sim.kill(0);
    let killed = sim.now;
    let mut promoted = None;
    for _ in 0..200 {
        sim.tick();
        if sim.agree_owner(0, 3) {
            promoted = Some(sim.now - killed);
            break;
        }
    }
    let took = promoted.expect("no failover");
    assert!(took <= timeout + 3000, "took {took} ms");
}

#[test]
fn the_old_primary_returning_becomes_a_replica_of_the_winner() {
    for restart in [false, true] {
        let mut sim = Sim::cluster(3, 3, 0xbac0);
        sim.down[0] = true;
        for _ in 0..100 {
            sim.tick();
        }
        assert!(sim.agree_owner(0, 3), "failed over");
        if restart {
            // kill -9 and a restart from its file: it still claims its
            // slots at its old epoch.
            let text = sim.nodes[0].config_text();
            sim.nodes[0] =
                ClusterState::from_config(&text, port(0), port(0) + 10000, 1000).unwrap();
            sim.nodes[0].me_mut().ip = IP.into();
            let links: Vec<LinkId> = sim.links.drain().map(|(l, _)| l).collect();
            for l in links {
                for st in sim.nodes.iter_mut() {
                    st.link_down(l);
                }
            }
        }
        // Before it hears of the failover it must not serve its old slots.
        assert!(!sim.nodes[0].state_ok(sim.now + 1), "restart {restart}");
        sim.down[0] = false;
        for _ in 0..100 {
            sim.tick();
        }
        let winner = sim.id(3);
        assert_eq!(
            sim.nodes[0].me().primary.as_deref(),
            Some(winner.as_str()),
            "restart {restart}:\n{}",
            sim.nodes[0].nodes_text()
        );
        assert!(sim.nodes[0].me().slots.is_empty());
        assert!(sim.agree_owner(0, 3));
        assert!(sim.converged());
    }
}

#[test]
fn a_primary_cut_off_in_a_minority_stops_serving_after_the_timeout() {
    let mut sim = Sim::cluster(3, 3, 0x5917);
    let timeout = sim.nodes[0].node_timeout;
    // Node 0 alone on one side; its replica and the others on the other.
    sim.side[0] = 1;
    let cut = sim.now;
    let mut refused_at = None;
    for _ in 0..100 {
        sim.tick();
        if refused_at.is_none() && !sim.nodes[0].state_ok(sim.now) {
            refused_at = Some(sim.now - cut);
        }
    }
    let refused = refused_at.expect("the minority side kept serving");
    assert!(refused <= timeout + 200, "refused after {refused} ms");
    // The majority side failed over meanwhile.
    let winner = sim.id(3);
    assert!((1..6).all(|i| sim.nodes[i].owner(0) == Some(winner.as_str())));
    assert!(
        sim.nodes[3].me().is_primary(),
        "the majority side failed over"
    );
    for i in 1..6 {
        assert!(sim.nodes[i].state_ok(sim.now), "majority node {i} serves");
    }
    // Healed: the old primary follows the winner, and serves nothing of
    // its own.
    sim.side[0] = 0;
    for _ in 0..100 {
        sim.tick();
    }
    assert_eq!(
        sim.nodes[0].me().primary.as_deref(),
        Some(sim.id(3).as_str())
    );
    assert!(sim.converged());
}

/// A busy machine delays a node's timer, not its peers' messages: while
/// they arrive, the deadline they move keeps it serving (CI once saw a
/// node refuse with -CLUSTERDOWN mid-reshard under load).
#[test]
fn a_primary_whose_timer_is_late_keeps_serving_while_its_peers_are_heard() {
    let mut sim = Sim::cluster(3, 3, 0x7a1e);
    let timeout = sim.nodes[0].node_timeout;
    assert!(sim.nodes[0].state_ok(sim.now));
    sim.no_tick[0] = true;
    let until = sim.now + 4 * timeout;
    while sim.now < until {
        sim.tick();
        assert!(sim.nodes[0].state_ok(sim.now), "refused at {}", sim.now);
    }
    // Cut off as well, it stops at the timeout though its timer is late.
    sim.side[0] = 1;
    let cut = sim.now;
    while sim.nodes[0].state_ok(sim.now) {
        sim.tick();
        assert!(sim.now - cut <= timeout + 100, "still serving");
    }
}

#[test]
fn manual_failover_waits_for_the_replica_to_reach_the_paused_primarys_offset() {
    let mut sim = Sim::cluster(3, 3, 0x3a1);
    sim.nodes[0].set_repl_offset(500);
    sim.nodes[3].set_repl_offset(400);
    // The errors Redis gives.
    let now = sim.now;
    assert_eq!(
        sim.nodes[0]
            .manual_failover(FailoverMode::Default, now)
            .err(),
        Some(StateError::FailoverNotReplica)
    );
    let fx = sim.nodes[3]
        .manual_failover(FailoverMode::Default, now)
        .unwrap();
    sim.send(fx);
    assert!(sim.nodes[0].writes_paused(), "the primary paused writes");
    for _ in 0..20 {
        sim.tick();
    }
    assert_eq!(sim.nodes[3].manual.primary_offset, Some(500));
    assert!(sim.nodes[3].me().is_replica(), "not before catching up");
    assert!(sim.agree_owner(0, 0));
    sim.nodes[3].set_repl_offset(500);
    let caught_up = sim.now;
    let mut switched = None;
    for _ in 0..20 {
        sim.tick();
        if sim.agree_owner(0, 3) {
            switched = Some(sim.now - caught_up);
            break;
        }
    }
    let took = switched.expect("no switch after catching up");
    assert!(took <= 500, "took {took} ms");
    for _ in 0..5 {
        sim.tick();
    }
    assert_eq!(
        sim.nodes[0].me().primary.as_deref(),
        Some(sim.id(3).as_str())
    );
    assert!(!sim.nodes[0].writes_paused());
    assert!(sim.converged());
}

#[test]
fn a_manual_failover_that_never_catches_up_times_out_and_unpauses() {
    let mut sim = Sim::cluster(3, 3, 0x7e0);
    sim.nodes[0].set_repl_offset(500);
    let now = sim.now;
    let fx = sim.nodes[3]
        .manual_failover(FailoverMode::Default, now)
        .unwrap();
    sim.send(fx);
    assert!(sim.nodes[0].writes_paused());
    for _ in 0..55 {
        sim.tick();
    }
    assert!(!sim.nodes[0].writes_paused(), "paused past the timeout");
    assert!(sim.nodes[3].me().is_replica());
    assert!(sim.agree_owner(0, 0));
}

#[test]
fn failover_force_and_takeover() {
    let mut sim = Sim::cluster(3, 3, 0xf0);
    let now = sim.now;
    // FORCE: an election at once, the primary not consulted.
    let fx = sim.nodes[4]
        .manual_failover(FailoverMode::Force, now)
        .unwrap();
    sim.send(fx);
    let mut ok = false;
    for _ in 0..20 {
        sim.tick();
        if sim.agree_owner(SLOTS / 3, 4) {
            ok = true;
            break;
        }
    }
    assert!(ok, "FORCE switched");
    // TAKEOVER: no vote, even with every other primary unreachable.
    sim.down[0] = true;
    sim.down[1] = true;
    sim.down[2] = true;
    let now = sim.now;
    let fx = sim.nodes[5]
        .manual_failover(FailoverMode::Takeover, now)
        .unwrap();
    assert!(matches!(fx.follow, Some(None)), "promoted at once");
    assert!(sim.nodes[5].me().is_primary());
    assert_eq!(sim.nodes[5].owner(SLOTS - 1), Some(sim.id(5).as_str()));
    sim.down = vec![false; 6];
    for _ in 0..50 {
        sim.tick();
    }
    assert!(sim.agree_owner(SLOTS - 1, 5));
    assert!(sim.converged());
    // A failed primary: FORCE is needed.
    let p = sim.nodes[3].me().primary.clone().unwrap();
    sim.nodes[3].nodes.get_mut(&p).unwrap().flags |= flag::FAIL;
    let now = sim.now;
    assert_eq!(
        sim.nodes[3]
            .manual_failover(FailoverMode::Default, now)
            .err(),
        Some(StateError::FailoverPrimaryDown)
    );
    sim.nodes[3].me_mut().primary = Some("0".repeat(40));
    assert_eq!(
        sim.nodes[3].manual_failover(FailoverMode::Force, now).err(),
        Some(StateError::FailoverPrimaryUnknown)
    );
}

#[test]
fn the_replica_with_the_greater_offset_is_elected() {
    let mut sim = Sim::cluster(3, 4, 0x0ff5e7);
    // Nodes 3 and 6 both replicate node 0; 6 is ahead.
    sim.nodes[3].set_repl_offset(100);
    sim.nodes[6].set_repl_offset(900);
    for _ in 0..30 {
        sim.tick();
    }
    sim.down[0] = true;
    for _ in 0..100 {
        sim.tick();
    }
    assert!(sim.agree_owner(0, 6), "{}", sim.nodes[1].nodes_text());
    assert_eq!(
        sim.nodes[3].me().primary.as_deref(),
        Some(sim.id(6).as_str()),
        "the other replica follows the winner"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// Two replicas of a dead primary, offsets, late messages at
    /// random: never two winners in one epoch, and once the network is
    /// healthy one of them owns the slots everywhere and the other follows.
    #[test]
    fn two_replicas_one_winner_per_epoch(
        seed in any::<u64>(),
        offsets in (0u64..3, 0u64..3),
        delay_pct in 0u64..40,
    ) {
        let mut sim = Sim::cluster(3, 4, seed);
        sim.nodes[3].set_repl_offset(offsets.0);
        sim.nodes[6].set_repl_offset(offsets.1);
        // Late messages (reordered across ticks); not lost ones: the bus
        // is TCP, which loses a link, not a message.
        sim.delay_pct = delay_pct;
        sim.down[0] = true;
        let mut winners: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
        for t in 0..300 {
            if t == 200 {
                sim.delay_pct = 0;
            }
            sim.tick();
            for r in [3, 6] {
                let me = sim.nodes[r].me();
                if me.is_primary() && !me.slots.is_empty() {
                    winners.entry(me.config_epoch).or_default().insert(r);
                }
            }
        }
        for (epoch, w) in &winners {
            prop_assert_eq!(w.len(), 1, "epoch {} has winners {:?}", epoch, w);
        }
        let won: Vec<usize> = [3, 6].into_iter().filter(|&r| sim.agree_owner(0, r)).collect();
        prop_assert_eq!(won.len(), 1, "{}", sim.nodes[1].nodes_text());
        let (w, l) = if won[0] == 3 { (3, 6) } else { (6, 3) };
        prop_assert_eq!(sim.nodes[l].me().primary.clone(), Some(sim.id(w)));
        for s in 0..SLOTS {
            let owners: BTreeSet<Option<&str>> = (1..7).map(|i| sim.nodes[i].owner(s)).collect();
            prop_assert_eq!(owners.len(), 1, "slot {} has owners {:?}", s, owners);
        }
    }
}

#[test]
fn a_stopped_primary_resumed_refuses_even_once_queued_messages_arrive_first() {
    let mut sim = Sim::cluster(3, 3, 0x5107);
    // SIGSTOP: it does nothing while the others fail it over.
    sim.down[0] = true;
    for _ in 0..60 {
        sim.tick();
    }
    assert!(sim.agree_owner(0, 3));
    // SIGCONT: the PINGs queued for it while it was stopped are read
    // before its first tick, and before any word of the failover.
    let now = sim.now;
    for i in 1..3 {
        let m = sim.nodes[i].message(Kind::Ping, now);
        sim.nodes[0].receive(&m, From::Inbound, IP, IP, now);
    }
    assert!(!sim.nodes[0].state_ok(now), "before its first tick");
    sim.nodes[0].tick(now + 1);
    assert!(
        !sim.nodes[0].state_ok(now + 1),
        "a majority heard from again is not enough: it must learn what they decided"
    );
}

/// A peer (past the password) announcing the largest epoch cannot make
/// this node's next epoch overflow.
#[test]
fn the_largest_epoch_from_a_peer_saturates() {
    let mut sim = Sim::new(2);
    sim.meet(1, 0);
    assert!(sim.settle(300));
    let mut m = sim.nodes[1].message(Kind::Ping, sim.now);
    m.current_epoch = u64::MAX;
    let now = sim.now;
    let _ = sim.nodes[0].receive(&m, From::Inbound, IP, IP, now);
    assert_eq!(sim.nodes[0].current_epoch, u64::MAX);
    assert!(sim.nodes[0].bump_epoch());
    assert_eq!(sim.nodes[0].me().config_epoch, u64::MAX);
}

/// A node hears every other node itself at least every half timeout:
/// gossip refreshes a node's `pong_received` (as Redis's does), which
/// spared it the PING while the majority is judged by what a node hears
/// itself. Seven nodes under two busy loops, one of them broadcasting its
/// claims through a rebalance, went -CLUSTERDOWN every few seconds that
/// way (a replica silent for 3.4 s with a pong "1.8 s ago").
#[test]
fn every_node_is_heard_directly_within_half_the_timeout() {
    let mut sim = Sim::cluster(6, 6, 0x9055);
    let timeout = sim.nodes[0].node_timeout;
    let until = sim.now + 60 * timeout;
    let mut worst = 0;
    while sim.now < until {
        // A rebalance: the node taking slots broadcasts a PONG on each.
        for _ in 0..5 {
            let fx = sim.nodes[3].broadcast_pong(sim.now);
            sim.send(fx);
        }
        sim.tick();
        for st in &sim.nodes {
            assert!(
                st.state_ok(sim.now),
                "{} refused at {}",
                st.me().port,
                sim.now
            );
            for n in st.nodes.values().filter(|n| n.id != st.myself) {
                worst = worst.max(sim.now - n.data_received);
            }
        }
    }
    assert!(
        worst <= timeout / 2 + 200,
        "a node was silent for {worst} ms"
    );
}
