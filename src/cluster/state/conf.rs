//! `CLUSTER NODES` lines and the config file (`nodes.conf`), in Redis's
//! format, and reading that file back.

use super::*;

impl ClusterState {
    // --- rendering and the config file -------------------------------------

    fn flags_text(n: &Node) -> String {
        let mut parts = Vec::new();
        for (f, name) in [
            (flag::MYSELF, "myself"),
            (flag::MASTER, "master"),
            (flag::REPLICA, "slave"),
            (flag::PFAIL, "fail?"),
            (flag::FAIL, "fail"),
            (flag::HANDSHAKE, "handshake"),
            (flag::NOADDR, "noaddr"),
            (flag::NOFAILOVER, "nofailover"),
        ] {
            if n.has(f) {
                parts.push(name);
            }
        }
        if parts.is_empty() {
            "noflags".into()
        } else {
            parts.join(",")
        }
    }

    /// One `CLUSTER NODES` line (without its newline).
    pub fn node_line(&self, n: &Node) -> String {
        let mine = n.id == self.myself;
        let epoch = match n.primary.as_ref().and_then(|p| self.nodes.get(p)) {
            Some(p) if n.is_replica() => p.config_epoch,
            _ => n.config_epoch,
        };
        let mut line = format!(
            "{} {} {} {} {} {} {} {}",
            n.id,
            n.address(),
            Self::flags_text(n),
            n.primary.as_deref().unwrap_or("-"),
            if mine { 0 } else { n.ping_sent },
            if mine { 0 } else { n.pong_received },
            epoch,
            if mine || n.link.is_some() {
                "connected"
            } else {
                "disconnected"
            },
        );
        for (a, b) in n.slots.ranges() {
            if a == b {
                let _ = write!(line, " {a}");
            } else {
                let _ = write!(line, " {a}-{b}");
            }
        }
        if mine {
            for (s, to) in &self.migrating {
                let _ = write!(line, " [{s}->-{to}]");
            }
            for (s, from) in &self.importing {
                let _ = write!(line, " [{s}-<-{from}]");
            }
        }
        line
    }

    /// `CLUSTER NODES`: every node but those in handshake.
    pub fn nodes_text(&self) -> String {
        let mut text = String::new();
        for n in self.nodes.values().filter(|n| !n.in_handshake()) {
            text.push_str(&self.node_line(n));
            text.push('\n');
        }
        text
    }

    /// The config file's text: `CLUSTER NODES` plus the epochs line.
    pub fn config_text(&self) -> String {
        let mut text = self.nodes_text();
        let _ = writeln!(
            text,
            "vars currentEpoch {} lastVoteEpoch {}",
            self.current_epoch, self.last_vote_epoch
        );
        text
    }

    /// Reads a config file as Redis's `clusterLoadConfig` does. Links all
    /// start down and nobody is `pfail`; `myself`'s address in the file is
    /// kept (operators patch it when a pod moves), its port is
    /// `port`/`cport` as started.
    pub fn from_config(
        text: &str,
        port: u16,
        cport: u16,
        node_timeout: Millis,
    ) -> Result<Self, String> {
        let mut state: Option<ClusterState> = None;
        let mut nodes: Vec<Node> = Vec::new();
        let mut migrating = BTreeMap::new();
        let mut importing = BTreeMap::new();
        let mut owners: Vec<(u16, String)> = Vec::new();
        let (mut current, mut last_vote) = (0u64, 0u64);
        let mut myself: Option<String> = None;
        for (no, line) in text.lines().enumerate() {
            let bad = |what: &str| format!("line {}: {what}: '{}'", no + 1, line.escape_debug());
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.is_empty() {
                continue;
            }
            if words[0] == "vars" {
                let mut i = 1;
                while i + 1 < words.len() {
                    let v: u64 = words[i + 1].parse().map_err(|_| bad("bad epoch"))?;
                    match words[i] {
                        "currentEpoch" => current = v,
                        "lastVoteEpoch" => last_vote = v,
                        _ => {}
                    }
                    i += 2;
                }
                continue;
            }
            if words.len() < 8 {
                return Err(bad("expected at least 8 fields"));
            }
            let id = words[0];
            if id.len() != 40 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad("bad node id"));
            }
            let addr = words[1].split(',').next().unwrap_or("");
            let (hostport, bus) = addr.split_once('@').ok_or_else(|| bad("bad address"))?;
            let (ip, p) = hostport
                .rsplit_once(':')
                .ok_or_else(|| bad("bad address"))?;
            let p: u16 = p.parse().map_err(|_| bad("bad port"))?;
            let bus: u16 = bus.parse().map_err(|_| bad("bad bus port"))?;
            let mut flags = 0u16;
            for f in words[2].split(',') {
                flags |= match f {
                    "myself" => flag::MYSELF,
                    "master" => flag::MASTER,
                    "slave" => flag::REPLICA,
                    "fail?" => 0,
                    "fail" => flag::FAIL,
                    "handshake" => flag::HANDSHAKE,
                    "noaddr" => flag::NOADDR,
                    "nofailover" => flag::NOFAILOVER,
                    "noflags" => 0,
                    _ => return Err(bad("unknown flag")),
                };
            }
            if nodes.iter().any(|n: &Node| n.id == id) {
                return Err(bad("a node listed twice"));
            }
            let mut node = Node::new(id.to_string(), ip.to_string(), p, bus, flags, 0);
            if flags & flag::MYSELF != 0 {
                if myself.is_some() {
                    return Err(bad("a second 'myself'"));
                }
                myself = Some(id.to_string());
                node.port = port;
                node.cport = cport;
                node.flags &= !flag::FAIL;
            }
            if words[3] != "-" {
                node.primary = Some(words[3].to_string());
            }
            node.config_epoch = words[6].parse().map_err(|_| bad("bad config epoch"))?;
            for w in &words[8..] {
                if let Some(inner) = w.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
                    if let Some((s, to)) = inner.split_once("->-") {
                        migrating.insert(
                            s.parse::<u16>().map_err(|_| bad("bad slot"))?,
                            to.to_string(),
                        );
                    } else if let Some((s, from)) = inner.split_once("-<-") {
                        importing.insert(
                            s.parse::<u16>().map_err(|_| bad("bad slot"))?,
                            from.to_string(),
                        );
                    } else {
                        return Err(bad("bad open slot"));
                    }
                    continue;
                }
                let (a, b) = match w.split_once('-') {
                    Some((a, b)) => (a.parse::<u16>(), b.parse::<u16>()),
                    None => (w.parse::<u16>(), w.parse::<u16>()),
                };
                let (Ok(a), Ok(b)) = (a, b) else {
                    return Err(bad("bad slot range"));
                };
                if a > b || b >= SLOTS {
                    return Err(bad("bad slot range"));
                }
                for s in a..=b {
                    owners.push((s, id.to_string()));
                }
            }
            nodes.push(node);
        }
        let Some(me) = myself else {
            return Err("no 'myself' node in the file".into());
        };
        for n in nodes {
            let st = state.get_or_insert_with(|| {
                let mut s = ClusterState::new(me.clone(), String::new(), port, cport, node_timeout);
                s.nodes.clear();
                s
            });
            st.nodes.insert(n.id.clone(), n);
        }
        let mut st = state.expect("at least myself");
        for (s, id) in owners {
            if st.owners[s as usize].is_some() {
                return Err(format!("slot {s} is listed twice"));
            }
            st.set_owner(s, &id);
        }
        st.migrating = migrating;
        st.importing = importing;
        st.current_epoch =
            current.max(st.nodes.values().map(|n| n.config_epoch).max().unwrap_or(0));
        st.last_vote_epoch = last_vote;
        // A primary restarted with slots serves nothing until its first
        // tick starts the writable delay (`update_quorum`).
        if st.me().is_primary() && !st.me().slots.is_empty() && st.nodes.len() > 1 {
            st.quorum_until
                .store(0, std::sync::atomic::Ordering::Relaxed);
        }
        st.save_needed = false;
        st.changed = true;
        Ok(st)
    }
}
