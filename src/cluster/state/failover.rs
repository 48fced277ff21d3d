//! Failover, as Redis Cluster runs it (`cluster.c`): a replica of a
//! `fail` primary waits a moment ranked by its replication offset, takes
//! a new epoch and asks every primary for its vote; a primary votes once
//! per epoch; a replica voted for by a majority of the primaries serving
//! slots takes its primary's slots with the election's epoch as its
//! config epoch, which wins them everywhere by the ordinary slot rule.
//! `CLUSTER FAILOVER` runs the same election on purpose, after the
//! primary paused writes and the replica caught up with it. And a node
//! that has not heard from a majority of the primaries for the node
//! timeout refuses keyed requests (`-CLUSTERDOWN`), so a primary cut off
//! in a minority stops taking writes about when the majority side's
//! replica may start replacing it.

use std::sync::atomic::Ordering;

use super::*;

/// How long a manual failover may take (Redis's `CLUSTER_MF_TIMEOUT`).
pub const MANUAL_TIMEOUT: Millis = 5000;

/// How long a primary has paused writes before it reports its offset to
/// the replica taking over: a write that passed the routing check just
/// before the pause is applied by then, so the offset reported is final.
const PAUSE_SETTLE: Millis = 100;

/// A restarted primary with slots refuses requests this long (Redis's
/// `CLUSTER_WRITABLE_DELAY`), time to learn that its slots were taken
/// while it was away.
const WRITABLE_DELAY: Millis = 2000;

impl ClusterState {
    /// The server's replication offset now (the replica's applied one).
    pub fn set_repl_offset(&mut self, offset: u64) {
        self.me_mut().repl_offset = offset;
    }

    /// Whether this primary refuses writes for a manual failover.
    pub fn writes_paused(&self) -> bool {
        self.me().is_primary() && self.manual.replica.is_some()
    }

    /// `cluster_state:ok`: every slot served by a node not `fail`, and a
    /// majority of the primaries reachable.
    pub fn state_ok(&self, now: Millis) -> bool {
        self.is_ok() && now <= self.quorum_until.load(Ordering::Relaxed)
    }

    /// Redis's `clusterGetSlaveRank`: how many replicas of the same
    /// primary have a greater offset (the best placed goes first).
    fn replica_rank(&self) -> usize {
        let me = self.me();
        let Some(p) = me.primary.as_deref() else {
            return 0;
        };
        self.nodes
            .values()
            .filter(|n| {
                n.id != me.id
                    && n.primary.as_deref() == Some(p)
                    && n.is_replica()
                    && !n.has(flag::NOFAILOVER)
                    && n.repl_offset > me.repl_offset
            })
            .count()
    }

    /// Redis's `clusterHandleSlaveFailover`, on every tick of a replica.
    pub(super) fn handle_failover(&mut self, now: Millis) -> Effects {
        let mut fx = Effects::default();
        let me = self.me();
        if me.is_primary() {
            return fx;
        }
        let Some(p) = me.primary.clone() else {
            return fx;
        };
        let Some(pn) = self.nodes.get(&p) else {
            return fx;
        };
        let manual = self.manual.end != 0 && self.manual.can_start;
        if (!pn.has(flag::FAIL) && !manual) || pn.slots.is_empty() {
            return fx;
        }
        let auth_timeout = (self.node_timeout * 2).max(2000) as i64;
        let auth_retry = auth_timeout * 2;
        let auth_age = now as i64 - self.election.time as i64;
        if self.election.time == 0 || auth_age > auth_retry {
            // Schedule an election: half a second, a random half second
            // so two replicas seldom ask together, a second per replica
            // with a greater offset.
            let rank = self.replica_rank();
            // The generator is seeded by the node id; the time mixed in keeps
            // replicas of one primary from drawing in step.
            let jitter = (self.random() ^ now.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17) % 500;
            let e = &mut self.election;
            e.time = now + 500 + jitter + rank as Millis * 1000;
            e.votes.clear();
            e.sent = false;
            e.rank = rank;
            if manual {
                e.time = now;
                e.rank = 0;
            }
            tracing::info!(
                "cluster: failover election in {} ms (rank {rank})",
                self.election.time - now
            );
            // Tell the other replicas this one's offset, for their ranks.
            fx.merge(self.broadcast_pong(now));
            return fx;
        }
        if !self.election.sent && !manual {
            let rank = self.replica_rank();
            if rank > self.election.rank {
                self.election.time += (rank - self.election.rank) as Millis * 1000;
                self.election.rank = rank;
            }
        }
        if now < self.election.time || auth_age > auth_timeout {
            // Not yet, or this election timed out: the next one waits for
            // the retry time.
            return fx;
        }
        if !self.election.sent {
            self.current_epoch = self.current_epoch.saturating_add(1);
            self.election.epoch = self.current_epoch;
            self.election.sent = true;
            self.save_needed = true;
            tracing::info!("cluster: asking for votes in epoch {}", self.election.epoch);
            let mut m = self.message(Kind::AuthRequest { force: manual }, now);
            m.paused = false;
            self.broadcast(&mut fx, m);
            return fx;
        }
        fx.merge(self.win_if_elected(now));
        fx
    }

    /// With votes from a majority of the primaries serving slots: take
    /// the primary's slots.
    fn win_if_elected(&mut self, now: Millis) -> Effects {
        let quorum = self.size() / 2 + 1;
        if !self.election.sent || self.election.votes.len() < quorum || self.me().is_primary() {
            return Effects::default();
        }
        if self.me().config_epoch < self.election.epoch {
            let e = self.election.epoch;
            self.me_mut().config_epoch = e;
        }
        tracing::info!(
            "cluster: elected in epoch {} with {} votes, taking over",
            self.election.epoch,
            self.election.votes.len()
        );
        self.election.won += 1;
        self.replace_primary(now)
    }

    /// Redis's `clusterFailoverReplaceYourMaster`: this replica becomes
    /// a primary with its primary's slots, and says so to everyone.
    fn replace_primary(&mut self, now: Millis) -> Effects {
        let Some(old) = self.me().primary.clone() else {
            return Effects::default();
        };
        let slots: Vec<u16> = self
            .nodes
            .get(&old)
            .map(|n| n.slots.ranges())
            .unwrap_or_default()
            .into_iter()
            .flat_map(|(a, b)| a..=b)
            .collect();
        let me = self.me_mut();
        me.flags = (me.flags & !flag::REPLICA) | flag::MASTER;
        me.primary = None;
        let id = self.myself.clone();
        for s in slots {
            self.set_owner(s, &id);
        }
        self.migrating.clear();
        self.importing.clear();
        self.manual = Manual::default();
        self.election.sent = false;
        self.election.votes.clear();
        self.touch();
        let mut fx = Effects {
            follow: Some(None),
            ..Effects::default()
        };
        fx.merge(self.broadcast_pong(now));
        fx
    }

    /// Redis's `clusterSendFailoverAuthIfNeeded`: a primary serving slots
    /// votes for `msg`'s sender once per epoch, if the sender's primary
    /// is `fail` (or the request is a manual failover's), no replica of
    /// that primary got a vote within two node timeouts, and no slot the
    /// sender claims is known here at a greater config epoch.
    pub(super) fn vote(&mut self, msg: &Message, force: bool, now: Millis) -> Option<Message> {
        let me = self.me();
        if !me.is_primary() || me.slots.is_empty() {
            return None;
        }
        if msg.current_epoch < self.current_epoch || self.last_vote_epoch == self.current_epoch {
            return None;
        }
        let p = msg.primary.as_deref()?;
        let primary = self.nodes.get(p)?;
        if !self.nodes.contains_key(&msg.sender) || (!primary.has(flag::FAIL) && !force) {
            return None;
        }
        if now.saturating_sub(primary.voted_time) < self.node_timeout * 2 {
            return None;
        }
        for (a, b) in &msg.slots {
            for s in *a..=(*b).min(SLOTS - 1) {
                let stale = self
                    .owner(s)
                    .and_then(|o| self.nodes.get(o))
                    .is_some_and(|o| o.config_epoch > msg.config_epoch);
                if stale {
                    return None;
                }
            }
        }
        self.last_vote_epoch = self.current_epoch;
        self.nodes.get_mut(p).expect("known").voted_time = now;
        self.save_needed = true;
        tracing::info!(
            "cluster: voted for {} in epoch {}",
            msg.sender,
            self.current_epoch
        );
        Some(self.message(Kind::AuthAck, now))
    }

    /// A vote arrived: counted if from a primary serving slots, for this
    /// election's epoch.
    pub(super) fn count_vote(&mut self, msg: &Message, now: Millis) -> Effects {
        let voter = self
            .nodes
            .get(&msg.sender)
            .is_some_and(|n| n.is_primary() && !n.slots.is_empty());
        if voter && self.election.sent && msg.current_epoch >= self.election.epoch {
            self.election.votes.insert(msg.sender.clone());
            return self.win_if_elected(now);
        }
        Effects::default()
    }

    /// A replica of this primary asks it to pause for a manual failover.
    pub(super) fn manual_start(&mut self, msg: &Message, now: Millis) {
        let ours = self
            .nodes
            .get(&msg.sender)
            .is_some_and(|n| n.primary.as_deref() == Some(self.myself.as_str()))
            && msg.primary.as_deref() == Some(self.myself.as_str());
        if !ours || !self.me().is_primary() {
            return;
        }
        tracing::warn!(
            "cluster: manual failover requested by replica {}: writes paused",
            msg.sender
        );
        self.manual = Manual {
            end: now + MANUAL_TIMEOUT,
            replica: Some(msg.sender.clone()),
            paused_since: now,
            ..Manual::default()
        };
        self.changed = true;
    }

    /// `CLUSTER FAILOVER [FORCE|TAKEOVER]` on this replica.
    pub fn manual_failover(
        &mut self,
        mode: FailoverMode,
        now: Millis,
    ) -> Result<Effects, StateError> {
        if self.me().is_primary() {
            return Err(StateError::FailoverNotReplica);
        }
        let primary = self
            .me()
            .primary
            .as_ref()
            .and_then(|p| self.nodes.get(p))
            .ok_or(StateError::FailoverPrimaryUnknown)?;
        if mode == FailoverMode::Default && (primary.has(flag::FAIL) || primary.link.is_none()) {
            return Err(StateError::FailoverPrimaryDown);
        }
        let link = primary.link;
        self.manual = Manual {
            end: now + MANUAL_TIMEOUT,
            ..Manual::default()
        };
        let mut fx = Effects::default();
        match mode {
            FailoverMode::Takeover => {
                // Redis's clusterBumpConfigEpochWithoutConsensus.
                let max = self
                    .nodes
                    .values()
                    .map(|n| n.config_epoch)
                    .max()
                    .unwrap_or(0);
                if self.me().config_epoch == 0 || self.me().config_epoch != max {
                    self.current_epoch = self.current_epoch.saturating_add(1);
                    let e = self.current_epoch;
                    self.me_mut().config_epoch = e;
                }
                fx.merge(self.replace_primary(now));
            }
            FailoverMode::Force => self.manual.can_start = true,
            FailoverMode::Default => {
                if let Some(link) = link {
                    let m = self.message(Kind::MfStart, now);
                    fx.send.push((link, m));
                }
            }
        }
        Ok(fx)
    }

    /// The manual failover's part of the tick: give up at the timeout; a
    /// paused primary reports its offset to the replica; the replica
    /// starts the election once it has caught up.
    pub(super) fn handle_manual(&mut self, now: Millis) -> Effects {
        let mut fx = Effects::default();
        if self.manual.end == 0 {
            return fx;
        }
        if now > self.manual.end {
            tracing::warn!("cluster: manual failover timed out");
            if self.manual.replica.is_some() {
                self.changed = true;
            }
            self.manual = Manual::default();
            return fx;
        }
        if let Some(r) = self.manual.replica.clone() {
            if now.saturating_sub(self.manual.paused_since) >= PAUSE_SETTLE {
                if let Some(link) = self.nodes.get(&r).and_then(|n| n.link) {
                    let mut m = self.message(Kind::Ping, now);
                    m.paused = true;
                    if let Some(n) = self.nodes.get_mut(&r) {
                        if n.ping_sent == 0 {
                            n.ping_sent = now;
                        }
                    }
                    fx.send.push((link, m));
                }
            }
            return fx;
        }
        if !self.manual.can_start {
            if let Some(o) = self.manual.primary_offset {
                if self.me().repl_offset >= o {
                    tracing::info!("cluster: caught up with the primary's offset {o}");
                    self.manual.can_start = true;
                }
            }
        }
        fx
    }

    /// A message from this replica's primary marked `paused` gives its
    /// final offset.
    pub(super) fn note_paused(&mut self, msg: &Message) {
        if msg.paused
            && self.manual.end != 0
            && self.me().primary.as_deref() == Some(msg.sender.as_str())
        {
            let o = self.manual.primary_offset.unwrap_or(0).max(msg.repl_offset);
            self.manual.primary_offset = Some(o);
        }
    }

    /// Until when a majority of the primaries serving slots is known
    /// reachable: the quorum-th most recent contact plus the node timeout
    /// (this node counts as reached now). A node that lost it, or a
    /// primary restarted with slots, waits a little before serving again
    /// (Redis's rejoin and writable delays).
    pub(super) fn update_quorum(&mut self, now: Millis) {
        if self.started == 0 {
            self.started = now;
            if self.me().is_primary() && !self.me().slots.is_empty() && self.nodes.len() > 1 {
                self.rejoin_at = now + WRITABLE_DELAY;
            }
        }
        let mut contacts: Vec<Millis> = self
            .nodes
            .values()
            .filter(|n| n.is_primary() && !n.slots.is_empty() && !n.in_handshake())
            .map(|n| {
                if n.id == self.myself {
                    now
                } else {
                    n.data_received.max(self.started)
                }
            })
            .collect();
        let until = if contacts.is_empty() {
            u64::MAX
        } else {
            contacts.sort_unstable_by(|a, b| b.cmp(a));
            contacts[contacts.len() / 2] + self.node_timeout
        };
        // Lost: now, or while this node was frozen (a stopped process
        // resumed, and the messages queued for it while it was stopped
        // arrived first: they prove others reachable, not that it knows
        // what they decided meanwhile). Frozen means nothing ran here for
        // half a timeout, not just a late tick: a busy machine delays
        // ticks and messages by a little, and a 3-second rejoin delay for
        // each such lapse turned load into -CLUSTERDOWN.
        let was = self.quorum_until.load(Ordering::Relaxed);
        let idle = now.saturating_sub(self.quorum_checked);
        let frozen =
            self.quorum_checked != 0 && idle > self.node_timeout / 2 && was != 0 && now > was;
        self.quorum_checked = now;
        if now > until || frozen {
            if self.rejoin_at <= now {
                if frozen {
                    tracing::warn!(
                        "cluster: nothing ran here for {idle} ms, past the quorum's deadline \
                         (the process was stopped or starved): refusing requests until \
                         it has heard the cluster again"
                    );
                } else {
                    let heard: Vec<String> = self
                        .nodes
                        .values()
                        .filter(|n| {
                            n.is_primary()
                                && !n.slots.is_empty()
                                && !n.in_handshake()
                                && n.id != self.myself
                        })
                        .map(|n| {
                            let ago = now.saturating_sub(n.data_received.max(self.started));
                            format!("{}:{} {ago} ms ago", n.ip, n.port)
                        })
                        .collect();
                    tracing::warn!(
                        "cluster: a majority of the primaries is unreachable (last heard: {}): \
                         refusing requests",
                        heard.join(", ")
                    );
                }
            }
            self.rejoin_at = now + self.node_timeout.clamp(500, 5000);
        }
        let published = if now < self.rejoin_at { 0 } else { until };
        let before = self.quorum_until.swap(published, Ordering::Relaxed);
        if (before >= now) != (published >= now) {
            self.changed = true;
            if published >= now {
                tracing::info!("cluster: a majority of the primaries is reachable: serving");
            }
        }
    }
}
