//! Messages and the clock: what a node does with a PING, PONG, MEET,
//! FAIL or UPDATE, and every 100 ms (Redis's `clusterProcessPacket` and
//! `clusterCron`).

use super::*;

impl ClusterState {
    // --- messages ---------------------------------------------------------

    /// The header every message of this node carries.
    pub fn message(&mut self, kind: Kind, now: Millis) -> Message {
        let me = self.me();
        let primary = me.primary.clone();
        let (config_epoch, slots) = match primary.as_ref().and_then(|p| self.nodes.get(p)) {
            Some(p) => (p.config_epoch, p.slots.ranges()),
            None => (me.config_epoch, me.slots.ranges()),
        };
        let mut m = Message {
            kind,
            sender: me.id.clone(),
            ip: me.ip.clone(),
            port: me.port,
            cport: me.cport,
            flags: me.flags & !flag::MYSELF,
            primary,
            current_epoch: self.current_epoch,
            config_epoch,
            repl_offset: me.repl_offset,
            slots,
            gossip: Vec::new(),
            paused: false,
        };
        if matches!(m.kind, Kind::Ping | Kind::Pong | Kind::Meet) {
            m.gossip = self.gossip_section(now);
        }
        self.messages_sent += 1;
        m
    }

    /// A few nodes this node knows, for the receiver to learn of: a tenth
    /// of them, at least three (Redis's `wanted`), plus every node this
    /// node thinks is failing, so reports spread fast.
    fn gossip_section(&mut self, _now: Millis) -> Vec<Gossip> {
        let candidates: Vec<String> = self
            .nodes
            .values()
            .filter(|n| n.id != self.myself && !n.in_handshake() && !n.has(flag::NOADDR))
            .map(|n| n.id.clone())
            .collect();
        let wanted = (self.nodes.len() / 10).max(3).min(candidates.len());
        let mut chosen: Vec<String> = Vec::with_capacity(wanted);
        let mut tries = 0;
        while chosen.len() < wanted && tries < wanted * 3 {
            tries += 1;
            let i = (self.random() % candidates.len() as u64) as usize;
            if !chosen.contains(&candidates[i]) {
                chosen.push(candidates[i].clone());
            }
        }
        for n in self.nodes.values() {
            if n.has(flag::PFAIL) && !chosen.contains(&n.id) {
                chosen.push(n.id.clone());
            }
        }
        chosen
            .iter()
            .filter_map(|id| self.nodes.get(id))
            .map(|n| Gossip {
                id: n.id.clone(),
                ip: n.ip.clone(),
                port: n.port,
                cport: n.cport,
                flags: n.flags & !flag::MYSELF,
                ping_sent: n.ping_sent,
                pong_received: n.pong_received,
            })
            .collect()
    }

    /// Handles one message. `peer_ip` is the link's remote address,
    /// `local_ip` this end's (how a node learns its own address from the
    /// first MEET it gets, as Redis does). What arrived moves the quorum's
    /// deadline at once: between ticks the request path reads it, and a
    /// busy machine that delays a tick must not refuse requests its peers'
    /// messages have shown it may serve.
    pub fn receive(
        &mut self,
        msg: &Message,
        from: From,
        peer_ip: &str,
        local_ip: &str,
        now: Millis,
    ) -> Effects {
        let fx = self.handle(msg, from, peer_ip, local_ip, now);
        self.update_quorum(now);
        fx
    }

    fn handle(
        &mut self,
        msg: &Message,
        from: From,
        peer_ip: &str,
        local_ip: &str,
        now: Millis,
    ) -> Effects {
        self.messages_received += 1;
        let mut fx = Effects::default();
        let known = self
            .nodes
            .get(&msg.sender)
            .is_some_and(|n| !n.in_handshake());
        if let Some(n) = self.nodes.get_mut(&msg.sender) {
            n.data_received = now;
        }
        if known {
            if msg.current_epoch > self.current_epoch {
                self.current_epoch = msg.current_epoch;
                self.save_needed = true;
            }
            let sender = self.nodes.get_mut(&msg.sender).expect("known");
            if msg.primary.is_none() && msg.config_epoch > sender.config_epoch {
                sender.config_epoch = msg.config_epoch;
                self.touch();
            }
            let sender = self.nodes.get_mut(&msg.sender).expect("known");
            sender.repl_offset = msg.repl_offset;
            self.note_paused(msg);
        }

        let ping = matches!(msg.kind, Kind::Ping | Kind::Meet);
        if ping {
            // A node learns its own address from the first MEET it gets.
            if self.me().ip.is_empty() && !local_ip.is_empty() {
                self.me_mut().ip = local_ip.to_string();
                self.touch();
            }
            if !known && msg.kind == Kind::Meet && !self.forgotten.contains_key(&msg.sender) {
                let ip = if msg.ip.is_empty() { peer_ip } else { &msg.ip };
                self.start_handshake(ip, msg.port, msg.cport, now);
                self.process_gossip(msg, now);
            }
            fx.reply = Some(self.message(Kind::Pong, now));
        }

        if matches!(msg.kind, Kind::Ping | Kind::Pong | Kind::Meet) {
            // The answer on a link we opened to a node in handshake names it.
            if let From::Outbound(link) = from {
                let linked = self
                    .nodes
                    .values()
                    .find(|n| n.link == Some(link))
                    .map(|n| n.id.clone());
                if let Some(hs) = linked.clone().filter(|id| self.nodes[id].in_handshake()) {
                    if msg.kind != Kind::Pong {
                        return fx;
                    }
                    let mut node = self.nodes.remove(&hs).expect("linked");
                    if self.nodes.contains_key(&msg.sender)
                        || self.forgotten.contains_key(&msg.sender)
                    {
                        // Already known under its real id (or forgotten):
                        // the handshake was a duplicate, and its link goes.
                        self.unlinked.extend(node.link);
                        self.changed = true;
                        return fx;
                    }
                    node.id = msg.sender.clone();
                    node.flags &= !(flag::HANDSHAKE | flag::MEET);
                    node.flags |= if msg.primary.is_some() {
                        flag::REPLICA
                    } else {
                        flag::MASTER
                    };
                    node.config_epoch = msg.config_epoch;
                    node.pong_received = now;
                    node.ping_sent = 0;
                    self.nodes.insert(node.id.clone(), node);
                    self.touch();
                    // Fall through: take its role and slots below.
                } else if let Some(id) = linked {
                    if msg.kind == Kind::Pong && id == msg.sender {
                        let n = self.nodes.get_mut(&id).expect("linked");
                        n.pong_received = now;
                        n.ping_sent = 0;
                        if n.has(flag::PFAIL) {
                            n.flags &= !flag::PFAIL;
                            self.changed = true;
                        }
                        self.clear_failure_if_needed(&id, now);
                    }
                }
            }
            if self.nodes.get(&msg.sender).is_none_or(|n| n.in_handshake()) {
                return fx;
            }
            // An inbound PING from a node whose address moved (a pod
            // rescheduled): take the new address, as Redis does.
            if from == From::Inbound && msg.kind == Kind::Ping && msg.sender != self.myself {
                let ip = if msg.ip.is_empty() { peer_ip } else { &msg.ip };
                let n = self.nodes.get_mut(&msg.sender).expect("known");
                if n.ip != ip || n.port != msg.port || n.cport != msg.cport {
                    n.ip = ip.to_string();
                    n.port = msg.port;
                    n.cport = msg.cport;
                    // The link to the old address goes; the next tick
                    // dials the new one.
                    self.unlinked.extend(n.link.take());
                    self.touch();
                }
            }
            self.take_role(msg);
            fx.merge(self.take_slots(msg, now));
            self.epoch_collision(msg);
            self.process_gossip(msg, now);
        }

        match &msg.kind {
            Kind::Fail { id } if known => {
                if let Some(n) = self.nodes.get_mut(id) {
                    if !n.has(flag::FAIL) && *id != self.myself {
                        n.flags = (n.flags | flag::FAIL) & !flag::PFAIL;
                        n.fail_time = now;
                        tracing::warn!("cluster: node {id} reported failing by {}", msg.sender);
                        self.touch();
                    }
                }
            }
            Kind::Update {
                id,
                config_epoch,
                slots,
            } if known => {
                let Some(n) = self.nodes.get(id) else {
                    return fx;
                };
                if n.config_epoch >= *config_epoch {
                    return fx;
                }
                let id = id.clone();
                if self.nodes[&id].is_replica() {
                    let n = self.nodes.get_mut(&id).expect("known");
                    n.flags = (n.flags & !flag::REPLICA) | flag::MASTER;
                    n.primary = None;
                }
                self.nodes.get_mut(&id).expect("known").config_epoch = *config_epoch;
                self.touch();
                fx.merge(self.update_slots(&id, *config_epoch, &SlotSet::from_ranges(slots)));
            }
            Kind::AuthRequest { force } if known => {
                fx.reply = self.vote(msg, *force, now);
            }
            Kind::AuthAck if known => fx.merge(self.count_vote(msg, now)),
            Kind::MfStart if known => self.manual_start(msg, now),
            _ => {}
        }
        fx
    }

    /// The sender's role as its header states it.
    fn take_role(&mut self, msg: &Message) {
        let n = self.nodes.get_mut(&msg.sender).expect("known");
        match &msg.primary {
            None => {
                if !n.is_primary() {
                    n.flags = (n.flags & !flag::REPLICA) | flag::MASTER;
                    n.primary = None;
                    self.touch();
                }
            }
            Some(p) => {
                if !n.is_replica() || n.primary.as_ref() != Some(p) {
                    let had: Vec<u16> = n
                        .slots
                        .ranges()
                        .into_iter()
                        .flat_map(|(a, b)| a..=b)
                        .collect();
                    n.flags = (n.flags & !flag::MASTER) | flag::REPLICA;
                    n.primary = Some(p.clone());
                    // A primary turned replica serves nothing of its own.
                    for s in had {
                        self.clear_owner(s);
                    }
                    self.touch();
                }
            }
        }
    }

    /// A primary's claimed slots, or an UPDATE back if its claim is stale.
    fn take_slots(&mut self, msg: &Message, _now: Millis) -> Effects {
        let mut fx = Effects::default();
        if msg.primary.is_some() {
            return fx;
        }
        let claimed = SlotSet::from_ranges(&msg.slots);
        let sender = &self.nodes[&msg.sender];
        if sender.slots != claimed {
            // A slot this view gives the sender that the sender itself no
            // longer claims: it gave it away (or dropped it). Redis keeps
            // such a slot on the sender until a higher claim arrives; if
            // that claim was itself superseded, the view stays stale and
            // its UPDATEs take the slot back from its real owner. Marked
            // released, the slot takes the real owner's claim at any
            // epoch, and stays covered until then. A slot being imported
            // here stays with the view's owner, as a claim for it is left
            // alone (`update_slots`): freed, no claim could take it back,
            // and this view would differ from the others' for good.
            let released: Vec<u16> = sender
                .slots
                .minus(&claimed)
                .filter(|s| !self.importing.contains_key(s))
                .collect();
            for s in released {
                self.clear_owner(s);
                self.released.insert(s, msg.sender.clone());
            }
            fx.merge(self.update_slots(&msg.sender.clone(), msg.config_epoch, &claimed));
            // A slot the sender claims that a node with a greater epoch
            // owns: tell the sender (Redis sends one UPDATE, for the first
            // found). Only when the claim differs from this view, as Redis
            // checks: a claim this view already agrees with needs no
            // walk over its slots.
            let added: Vec<u16> = claimed.minus(&self.nodes[&msg.sender].slots).collect();
            for s in added {
                let Some(owner) = self.owner(s) else { continue };
                let o = &self.nodes[owner];
                if o.config_epoch > msg.config_epoch {
                    let update = Kind::Update {
                        id: o.id.clone(),
                        config_epoch: o.config_epoch,
                        slots: o.slots.ranges(),
                    };
                    let m = self.message(update, 0);
                    if let Some(link) = self.nodes[&msg.sender].link {
                        fx.send.push((link, m));
                    }
                    break;
                }
            }
        }
        fx
    }

    /// Redis's `clusterUpdateSlotsConfigWith`: `sender` claims `slots` at
    /// `epoch`; each slot that is free or owned at a lower epoch moves to
    /// it. A slot being imported here is left alone (the move decides it).
    fn update_slots(&mut self, sender: &str, epoch: u64, slots: &SlotSet) -> Effects {
        let mut fx = Effects::default();
        if sender == self.myself {
            return fx;
        }
        let cur_primary = self.my_primary().to_string();
        let mut new_primary = false;
        // Only the slots this view does not give the sender yet: a claim
        // is mostly what the view already holds, and a rebalance sends
        // one per slot moved to every node.
        let added: Vec<u16> = match self.nodes.get(sender) {
            Some(n) => slots.minus(&n.slots).collect(),
            None => slots.minus(&SlotSet::default()).collect(),
        };
        for s in added {
            if self.importing.contains_key(&s) {
                continue;
            }
            let owner = self.owner(s);
            let owner_epoch = owner
                .and_then(|o| self.nodes.get(o))
                .map(|n| n.config_epoch);
            if owner_epoch.is_none_or(|e| e < epoch) {
                if owner == Some(self.myself.as_str()) {
                    fx.dirty_slots.push(s);
                }
                if owner == Some(cur_primary.as_str()) {
                    new_primary = true;
                }
                self.migrating.remove(&s);
                self.set_owner(s, sender);
            }
        }
        // This node's primary (or itself) lost its last slot to the sender:
        // follow the sender, as Redis 7 does.
        let primary_empty = self
            .nodes
            .get(&cur_primary)
            .is_some_and(|n| n.slots.is_empty());
        if new_primary && primary_empty {
            fx.dirty_slots.clear();
            fx.merge(self.follow(sender));
        }
        fx
    }

    /// Redis's `clusterHandleConfigEpochCollision`.
    fn epoch_collision(&mut self, msg: &Message) {
        let me = self.me();
        if msg.primary.is_some() || !me.is_primary() || msg.config_epoch != me.config_epoch {
            return;
        }
        // The node with the smaller id moves.
        if msg.sender.as_str() <= self.myself.as_str() {
            return;
        }
        self.current_epoch = self.current_epoch.saturating_add(1);
        let e = self.current_epoch;
        self.me_mut().config_epoch = e;
        self.touch();
    }

    /// Redis's `clusterProcessGossipSection`.
    fn process_gossip(&mut self, msg: &Message, now: Millis) {
        let sender_primary = self
            .nodes
            .get(&msg.sender)
            .is_some_and(|n| n.is_primary() && !n.in_handshake());
        let sender_known = self
            .nodes
            .get(&msg.sender)
            .is_some_and(|n| !n.in_handshake());
        for g in &msg.gossip {
            if g.id.len() != 40 || !g.id.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            if let Some(node) = self.nodes.get_mut(&g.id) {
                if sender_primary && g.id != self.myself {
                    if g.flags & (flag::FAIL | flag::PFAIL) != 0 {
                        match node.fail_reports.iter_mut().find(|(r, _)| *r == msg.sender) {
                            Some(r) => r.1 = now,
                            None => node.fail_reports.push((msg.sender.clone(), now)),
                        }
                        let id = g.id.clone();
                        self.mark_failing_if_needed(&id, now);
                        continue;
                    }
                    node.fail_reports.retain(|(r, _)| *r != msg.sender);
                }
                let node = self.nodes.get_mut(&g.id).expect("known");
                if g.flags & (flag::FAIL | flag::PFAIL) == 0
                    && node.ping_sent == 0
                    && node.fail_reports.is_empty()
                    && g.pong_received > node.pong_received
                    && g.pong_received <= now + 500
                {
                    node.pong_received = g.pong_received;
                }
                // An unreachable node announced at another address.
                if node.has(flag::PFAIL | flag::FAIL)
                    && node.link.is_none()
                    && (node.ip != g.ip || node.port != g.port || node.cport != g.cport)
                    && !g.ip.is_empty()
                {
                    node.ip = g.ip.clone();
                    node.port = g.port;
                    node.cport = g.cport;
                    node.flags &= !flag::NOADDR;
                    self.touch();
                }
            } else if sender_known
                && g.flags & flag::NOADDR == 0
                && !g.ip.is_empty()
                && !self.forgotten.contains_key(&g.id)
            {
                self.start_handshake(&g.ip, g.port, g.cport, now);
            }
        }
    }

    /// Redis's `markNodeAsFailingIfNeeded`: `pfail` here and reported by a
    /// majority of the primaries serving slots turns `fail`, told to all.
    fn mark_failing_if_needed(&mut self, id: &str, now: Millis) -> Option<Message> {
        let quorum = self.size() / 2 + 1;
        let validity = self.node_timeout * 2;
        let me_primary = self.me().is_primary();
        let node = self.nodes.get_mut(id)?;
        node.fail_reports
            .retain(|(_, t)| now.saturating_sub(*t) <= validity);
        if !node.has(flag::PFAIL) || node.has(flag::FAIL) {
            return None;
        }
        let votes = node.fail_reports.len() + usize::from(me_primary);
        if votes < quorum {
            return None;
        }
        node.flags = (node.flags | flag::FAIL) & !flag::PFAIL;
        node.fail_time = now;
        tracing::warn!("cluster: marking node {id} as failing (quorum reached)");
        self.touch();
        Some(self.message(Kind::Fail { id: id.to_string() }, now))
    }

    /// Redis's `clearNodeFailureIfNeeded`: a `fail` replica, or a primary
    /// with no slots, is cleared as soon as it answers; a primary with
    /// slots only when nobody took them within a while.
    fn clear_failure_if_needed(&mut self, id: &str, now: Millis) {
        let timeout = self.node_timeout;
        let Some(n) = self.nodes.get_mut(id) else {
            return;
        };
        if !n.has(flag::FAIL) {
            return;
        }
        if n.is_replica() || n.slots.is_empty() || now.saturating_sub(n.fail_time) > timeout * 2 {
            n.flags &= !flag::FAIL;
            tracing::info!("cluster: clear FAIL state for node {id}: it is reachable again");
            self.touch();
        }
    }

    // --- the clock ----------------------------------------------------------

    /// Nodes the bus should keep a link to and has none.
    pub fn wanted_links(&self) -> Vec<(String, String, u16)> {
        self.nodes
            .values()
            .filter(|n| {
                n.id != self.myself && n.link.is_none() && !n.has(flag::NOADDR) && !n.ip.is_empty()
            })
            .map(|n| (n.id.clone(), n.ip.clone(), n.cport))
            .collect()
    }

    /// The bus connected `link` to node `id`: the first message to send on
    /// it (MEET for a node met by hand or heard of, else PING).
    pub fn link_up(&mut self, id: &str, link: LinkId, now: Millis) -> Option<Message> {
        let n = self.nodes.get_mut(id)?;
        n.link = Some(link);
        n.link_since = now;
        let kind = if n.has(flag::MEET) {
            Kind::Meet
        } else {
            Kind::Ping
        };
        n.flags &= !flag::MEET;
        if n.ping_sent == 0 {
            n.ping_sent = now;
        }
        self.changed = true;
        Some(self.message(kind, now))
    }

    /// The link to whichever node had it is gone.
    pub fn link_down(&mut self, link: LinkId) {
        for n in self.nodes.values_mut() {
            if n.link == Some(link) {
                n.link = None;
                self.changed = true;
            }
        }
    }

    /// Redis's `clusterCron`, called every 100 ms: handshakes that timed
    /// out are dropped, a PING goes to a node not heard from lately, and a
    /// node silent past the timeout turns `pfail`.
    pub fn tick(&mut self, now: Millis) -> Effects {
        let mut fx = Effects::default();
        self.ticks += 1;
        self.forgotten.retain(|_, until| *until > now);
        let handshake_timeout = self.node_timeout.max(1000);
        let stale: Vec<String> = self
            .nodes
            .values()
            .filter(|n| n.in_handshake() && now.saturating_sub(n.ctime) > handshake_timeout)
            .map(|n| n.id.clone())
            .collect();
        for id in stale {
            let node = self.nodes.remove(&id).expect("stale");
            self.unlinked.extend(node.link);
            self.changed = true;
        }
        fx.close.append(&mut self.unlinked);
        let mut ping: Vec<String> = Vec::new();
        // Once a second, the node of five random ones heard from longest ago.
        if self.ticks.is_multiple_of(10) {
            let idle: Vec<&Node> = self
                .nodes
                .values()
                .filter(|n| {
                    n.id != self.myself && n.link.is_some() && n.ping_sent == 0 && !n.in_handshake()
                })
                .collect();
            if !idle.is_empty() {
                let picks: Vec<usize> = (0..5)
                    .map(|i| (self.rng.wrapping_add(i * 7919) % idle.len() as u64) as usize)
                    .collect();
                if let Some(oldest) = picks
                    .iter()
                    .map(|&i| idle[i])
                    .min_by_key(|n| n.pong_received)
                {
                    ping.push(oldest.id.clone());
                }
            }
            self.random();
        }
        let half = self.node_timeout / 2;
        let timeout = self.node_timeout;
        let mut newly_pfail = Vec::new();
        for n in self.nodes.values_mut() {
            if n.id == self.myself || n.in_handshake() || n.has(flag::NOADDR) {
                continue;
            }
            // No link: the bus tries to connect on this tick, and Redis
            // queues a PING on a new link at once, so a node that cannot
            // be reached is timed from the first attempt (without this, a
            // node killed while no PING was out was never timed at all).
            if n.link.is_none() && n.ping_sent == 0 && !n.ip.is_empty() {
                n.ping_sent = now;
            }
            // Nothing heard on a link for half the timeout while a PING
            // waits: reconnect it, as Redis does (a link can stay open
            // while carrying nothing: a stopped process, a partition).
            if let Some(link) = n.link {
                if now.saturating_sub(n.link_since) > timeout
                    && n.ping_sent != 0
                    && now.saturating_sub(n.ping_sent) > half
                    && now.saturating_sub(n.data_received) > half
                {
                    n.link = None;
                    fx.close.push(link);
                    self.changed = true;
                    continue;
                }
            }
            // Redis's rule (no PONG for half the timeout), and nothing
            // heard from it directly for as long: gossip refreshes
            // `pong_received` with what others heard, which spared the PING
            // while this node's majority is judged by what it hears itself.
            if n.link.is_some()
                && n.ping_sent == 0
                && (now.saturating_sub(n.pong_received) > half
                    || now.saturating_sub(n.data_received) > half)
                && !ping.contains(&n.id)
            {
                ping.push(n.id.clone());
            }
            // Redis's rule: silent past the timeout since both the PING
            // and the last data it sent (any message proves it alive).
            if n.ping_sent != 0
                && now.saturating_sub(n.ping_sent) > timeout
                && now.saturating_sub(n.data_received) > timeout
                && !n.has(flag::PFAIL | flag::FAIL)
            {
                n.flags |= flag::PFAIL;
                newly_pfail.push(n.id.clone());
            }
        }
        if !newly_pfail.is_empty() {
            self.changed = true;
        }
        for id in newly_pfail {
            if let Some(m) = self.mark_failing_if_needed(&id, now) {
                self.broadcast(&mut fx, m);
            }
        }
        for id in ping {
            let Some(link) = self.nodes[&id].link else {
                continue;
            };
            let m = self.message(Kind::Ping, now);
            let n = self.nodes.get_mut(&id).expect("known");
            if n.ping_sent == 0 {
                n.ping_sent = now;
            }
            fx.send.push((link, m));
        }
        fx.merge(self.handle_manual(now));
        fx.merge(self.handle_failover(now));
        self.update_quorum(now);
        fx
    }

    /// Queues `m` for every linked node.
    pub(super) fn broadcast(&self, fx: &mut Effects, m: Message) {
        for n in self.nodes.values() {
            if let Some(link) = n.link {
                if !n.in_handshake() {
                    fx.send.push((link, m.clone()));
                }
            }
        }
    }

    /// A PONG to every linked node, telling them this node's new config
    /// at once (Redis's `clusterBroadcastPong`).
    pub fn broadcast_pong(&mut self, now: Millis) -> Effects {
        let mut fx = Effects::default();
        let m = self.message(Kind::Pong, now);
        self.broadcast(&mut fx, m);
        fx
    }
}
