//! Per-connection state that commands read and change.

use std::sync::Arc;

use crate::clients::ClientInfo;
use crate::cmd::multi::TxState;
use crate::stats::Local;

/// One command in this many is timed for the latency histogram.
pub const LATENCY_SAMPLE_EVERY: u32 = 16;

#[derive(Debug)]
pub struct Session {
    pub info: Arc<ClientInfo>,
    /// False while a password is set and not yet given.
    pub authenticated: bool,
    /// Close the connection once the replies so far are written (QUIT).
    pub close_after_reply: bool,
    /// Counters since the last batch, flushed into `Stats` after it.
    pub stats: Local,
    /// `MULTI`'s queue and the `WATCH`ed keys.
    pub tx: TxState,
    /// The transaction queue or the watched keys passed
    /// `--client-query-buffer-limit`: close the connection.
    pub query_limit_hit: bool,
    /// A buffer commands reuse for keys they derive (`RL.CHECK`'s counter
    /// key), so the hot path allocates nothing once it has grown.
    pub scratch: Vec<u8>,
    /// Commands seen, for sampling latency.
    commands_seen: u32,
}

impl Session {
    pub fn new(info: Arc<ClientInfo>, password_set: bool) -> Self {
        Session {
            info,
            authenticated: !password_set,
            close_after_reply: false,
            stats: Local::new(super::COMMANDS.len()),
            tx: TxState::default(),
            query_limit_hit: false,
            scratch: Vec::new(),
            commands_seen: 0,
        }
    }

    /// Whether to time this command for the latency histogram: the first
    /// command of a connection and one in every `LATENCY_SAMPLE_EVERY`
    /// after it. Timing every command (three clock reads and a histogram
    /// push) cost about 10% of `RL.ALLOW` throughput; sampled, the cost
    /// disappears into the noise while p50/p99 stay estimated from tens of
    /// thousands of samples a second under load.
    pub fn sample_latency(&mut self) -> bool {
        let sample = self.commands_seen.is_multiple_of(LATENCY_SAMPLE_EVERY);
        self.commands_seen = self.commands_seen.wrapping_add(1);
        sample
    }
}
