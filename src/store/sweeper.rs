//! Active expiry: a background thread that walks the shards so expired keys
//! (and their memory) go within about a second even if nobody touches them.
//!
//! Each tick sweeps a tenth of the shards, one shard lock at a time, so a
//! full pass takes a second and no lock is held for more than one shard's
//! walk. It runs on its own OS thread, not a tokio worker, so a long pass
//! never delays the connections scheduled on that worker.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::Store;
use crate::clock::Clock;

/// Interval between ticks; `TICKS_PER_PASS` ticks cover every shard.
pub const TICK: Duration = Duration::from_millis(100);
const TICKS_PER_PASS: usize = 10;

/// Stops the sweeper thread when dropped, and waits for it.
#[derive(Debug)]
pub struct SweeperGuard {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for SweeperGuard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the sweeper over `store`, reading time from `clock`.
pub fn spawn(store: Arc<Store>, clock: Arc<dyn Clock>) -> SweeperGuard {
    let (tx, rx) = mpsc::channel::<()>();
    let thread = thread::Builder::new()
        .name("turnstile-sweeper".into())
        .spawn(move || {
            crate::util::set_background(true);
            let per_tick = store.shard_count().div_ceil(TICKS_PER_PASS);
            let mut next = 0;
            loop {
                match rx.recv_timeout(TICK) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                for _ in 0..per_tick {
                    store.sweep_shard(next, clock.now());
                    next = (next + 1) % store.shard_count();
                }
            }
        })
        .expect("spawning the sweeper thread");
    SweeperGuard {
        stop: Some(tx),
        thread: Some(thread),
    }
}

/// Sweeps every shard once, now: for tests, and for shutdown.
pub fn sweep_all(store: &Store, clock: &dyn Clock) -> usize {
    (0..store.shard_count())
        .map(|i| store.sweep_shard(i, clock.now()))
        .sum()
}
