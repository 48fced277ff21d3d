//! Connections `MIGRATE` keeps to its targets between calls, as Redis's
//! `migrateGetSocket` does: `redis-cli --cluster` sends one `MIGRATE` per
//! slot with keys, and a new connection (and the target's accept) for
//! each was a good part of a slot's move.

use std::collections::HashMap;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Idle connections by target `host:port`, each dropped after
/// [`SocketCache::TTL`] unused; at most [`SocketCache::MAX`] are kept.
#[derive(Default)]
pub struct SocketCache {
    idle: Mutex<HashMap<(String, u16), (TcpStream, Instant)>>,
}

impl SocketCache {
    /// Redis's `MIGRATE_SOCKET_CACHE_TTL`.
    pub const TTL: Duration = Duration::from_secs(10);
    /// Redis's `MIGRATE_SOCKET_CACHE_ITEMS`.
    pub const MAX: usize = 64;

    /// A connection to `host:port` left by an earlier call, if one is
    /// still fresh; the caller owns it until it gives it back.
    pub fn take(&self, host: &str, port: u16) -> Option<TcpStream> {
        let mut idle = self.idle.lock();
        let now = Instant::now();
        idle.retain(|_, (_, used)| now.duration_since(*used) < Self::TTL);
        idle.remove(&(host.to_string(), port)).map(|(s, _)| s)
    }

    /// Keeps a connection that finished its exchange cleanly.
    pub fn put(&self, host: &str, port: u16, stream: TcpStream) {
        let mut idle = self.idle.lock();
        if idle.len() >= Self::MAX {
            // The least recently used goes, as Redis evicts a random one.
            if let Some(oldest) = idle
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            {
                idle.remove(&oldest);
            }
        }
        idle.insert((host.to_string(), port), (stream, Instant::now()));
    }
}
