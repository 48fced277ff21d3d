//! Per-connection state that commands read and change.

use std::sync::Arc;

use super::tx::TxState;
use crate::clients::ClientInfo;
use crate::limiter::LimitSpec;
use crate::protocol::request::ArgsMemo;
use crate::stats::Local;

/// One command in this many, on average, is timed for the latency
/// histogram (a power of two).
pub const LATENCY_SAMPLE_EVERY: u64 = 16;

/// Top-level commands a connection's "seen" bitmap covers.
pub const SEEN_BITS: usize = 256;

#[derive(Debug)]
pub struct Session {
    pub info: Arc<ClientInfo>,
    /// The ACL user it authenticated as; `None` for `default`
    /// (`State::acl`'s), which every connection starts as.
    pub user: Option<Arc<crate::acl::UserCell>>,
    /// False while a password is set and not yet given.
    pub authenticated: bool,
    /// Close the connection once the replies so far are written (QUIT).
    pub close_after_reply: bool,
    /// Counters since the last batch, flushed into `Stats` after it.
    pub stats: Local,
    /// A script run's counters, added to `stats` if the run counts (kept
    /// between runs: a run allocates none).
    pub run_stats: Option<Box<Local>>,
    /// `MULTI`'s queue and the `WATCH`ed keys.
    pub tx: TxState,
    /// The transaction queue or the watched keys passed
    /// `--client-query-buffer-limit`: close the connection.
    pub query_limit_hit: bool,
    /// A buffer commands reuse for keys they derive (`RL.CHECK`'s counter
    /// key), so the hot path allocates nothing once it has grown.
    pub scratch: Vec<u8>,
    /// The command the connection named last, by its place in the table
    /// (`Registry::resolve_remembered`).
    pub command_memo: ArgsMemo<usize>,
    /// The last inline limit (and cost) `RL.ALLOW` or `RL.PEEK` parsed
    /// (`cmd/limit/parse.rs`, `allow_request_memo`).
    pub limit_memo: ArgsMemo<(LimitSpec, u64)>,
    /// Which commands this connection has run (by table position), so the
    /// first of each kind is always timed.
    seen: [u64; SEEN_BITS / 64],
    /// State of the sampler's generator (a 64-bit LCG; its top bits are
    /// uniform enough to pick one command in sixteen).
    sampler: u64,
    /// Channels and patterns this connection subscribes to, and where
    /// their messages wait; None until its first `(P)SUBSCRIBE`.
    pub subs: Option<Box<Subscriptions>>,
    /// What the connection must do before running the next request
    /// (`PSYNC`, `WAIT`): set by the command, taken by the connection.
    pub parked: Option<Park>,
    /// What a replica said of itself with `REPLCONF` before `PSYNC`.
    pub replica_hello: Option<ReplicaHello>,
    /// `READONLY` (cluster mode): reads of this node's shard are served
    /// here even while it is a replica.
    pub readonly: bool,
    /// `ASKING` was sent: the next command may use a slot this node is
    /// importing (cleared after it, as Redis clears `CLIENT_ASKING`).
    pub asking: bool,
    /// While a script runs that may be stopped and run again (`cmd/script`):
    /// the messages it published, delivered once its run is the one that
    /// counts, so a re-run never delivers a message twice.
    pub publish_later: Option<Vec<Published>>,
    /// The script just run failed with (or returned) a command's error,
    /// which was counted when the command failed: its `EVAL`'s error reply
    /// is not counted again, as Redis counts it (`cmd::run` takes it).
    pub error_counted: bool,
}

/// A message a script published: channel, message.
pub type Published = (Box<[u8]>, Box<[u8]>);

/// A command the connection finishes, off the batch loop.
#[derive(Debug)]
pub enum Park {
    /// `PSYNC`: this connection is a replica's link from now on.
    Psync { replid: String, offset: i64 },
    /// A reply that comes later (`WAIT`, `SAVE`, `RL.POLICY RELOAD`).
    Later(Later),
}

/// The future a parked command's reply waits on, made from the server's
/// state; boxed, so that a new asynchronous command is its handler alone
/// (the connection awaits any of them the same way).
pub type Waiting<'s> = std::pin::Pin<Box<dyn std::future::Future<Output = Deferred> + Send + 's>>;

/// A reply that comes later: the connection awaits `run` within its stops
/// (a shutdown, a `CLIENT KILL` or the idle timeout end the wait) and
/// writes what it gives; where nothing runs it (`harness.rs`: no sockets,
/// no replicas, no threads) the reply is `unserved`.
pub struct Later {
    pub run: Box<dyn for<'s> FnOnce(&'s crate::state::State) -> Waiting<'s> + Send>,
    pub unserved: Deferred,
}

impl std::fmt::Debug for Later {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Later")
            .field("unserved", &self.unserved)
            .finish_non_exhaustive()
    }
}

/// A parked command's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deferred {
    Int(i64),
    Ok,
    /// Written `-ERR <text>`.
    Err(String),
    /// No reply: the connection closes (a `SHUTDOWN` that went ahead,
    /// which Redis never answers).
    Close,
}

impl Deferred {
    /// Writes the reply; an error counts in `INFO errorstats` as any does.
    pub fn write(&self, out: &mut crate::protocol::ReplyBuf, stats: &mut Local) {
        match self {
            Deferred::Int(n) => out.int(*n),
            Deferred::Ok => out.ok(),
            Deferred::Close => {}
            Deferred::Err(e) => {
                let text = format!("ERR {e}");
                out.error(&text);
                stats.error_reply(text.as_bytes());
            }
        }
    }
}

/// A replica's `REPLCONF listening-port` and `ip-address`.
#[derive(Debug, Clone, Default)]
pub struct ReplicaHello {
    pub port: u16,
    pub ip: Option<String>,
}

/// A connection's Pub/Sub subscriptions.
#[derive(Debug)]
pub struct Subscriptions {
    pub mailbox: Arc<crate::pubsub::Mailbox>,
    /// In the order subscribed (an unsubscribe with no names replies in
    /// this order).
    pub channels: Vec<Box<[u8]>>,
    pub patterns: Vec<Box<[u8]>>,
}

impl Session {
    /// Becomes `user` (AUTH, HELLO ... AUTH), or `default` with `None`
    /// (RESET), and says so in `CLIENT LIST`.
    pub fn set_user(&mut self, user: Option<Arc<crate::acl::UserCell>>) {
        *self.info.user.lock() = user.as_ref().map(|u| u.load().name.clone());
        self.user = user;
    }

    /// A connection's state; `commands` is the size of the command table
    /// (its counters have one slot per command).
    pub fn new(info: Arc<ClientInfo>, password_set: bool, commands: usize) -> Self {
        let sampler = info.id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        Session {
            info,
            user: None,
            authenticated: !password_set,
            close_after_reply: false,
            stats: Local::new(commands),
            run_stats: None,
            tx: TxState::default(),
            query_limit_hit: false,
            scratch: Vec::new(),
            command_memo: Default::default(),
            limit_memo: Default::default(),
            seen: [0; SEEN_BITS / 64],
            sampler,
            subs: None,
            parked: None,
            replica_hello: None,
            readonly: false,
            asking: false,
            publish_later: None,
            error_counted: false,
        }
    }

    /// Channels and patterns subscribed to.
    pub fn subscriptions(&self) -> usize {
        self.subs
            .as_ref()
            .map_or(0, |s| s.channels.len() + s.patterns.len())
    }

    /// Whether to time this command (table position `i`) for the latency
    /// histogram: the first of each command on a connection, then one in
    /// `LATENCY_SAMPLE_EVERY` at random. Timing every command (three clock
    /// reads and a histogram push) cost about 10% of `RL.ALLOW` throughput.
    /// A fixed stride would be cheaper still but blind: a client that
    /// pipelines the same cycle of commands would have some never timed.
    pub fn sample_latency(&mut self, i: usize) -> bool {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        if let Some(w) = self.seen.get_mut(word).filter(|w| **w & bit == 0) {
            *w |= bit;
            return true;
        }
        crate::util::lcg_step(&mut self.sampler) >> (64 - LATENCY_SAMPLE_EVERY.trailing_zeros())
            == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_is_timed_first_then_about_one_in_sixteen() {
        let clients = crate::clients::Clients::default();
        let addr = ([127, 0, 0, 1], 6379).into();
        let mut s = Session::new(clients.register(addr, addr), false, 16);
        // A pipeline that repeats a cycle of 16 commands: a fixed stride
        // would time only one of them, ever.
        let mut timed = [0u32; 16];
        for round in 0..4000 {
            for (i, t) in timed.iter_mut().enumerate() {
                if s.sample_latency(i) {
                    *t += 1;
                }
                if round == 0 {
                    assert!(*t == 1, "the first of command {i} is timed");
                }
            }
        }
        // 4000 draws at 1/16: mean 250, sd ~15; 150..350 is > 6 sd.
        for (i, t) in timed.iter().enumerate() {
            assert!((150..350).contains(t), "command {i} timed {t} times");
        }
    }
}
