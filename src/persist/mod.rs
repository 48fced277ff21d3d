//! Snapshots while running: the snapshot thread (`server/snapshots.rs`)
//! writes one every `--snapshot-interval` when anything was written since
//! the last, `BGSAVE` asks it for one now, `SAVE` writes one on the caller's
//! thread, and shutdown writes a final one after the last reply. This is
//! what they share: the settings, one writer at a time, the thread's wake
//! signal and what the last attempts did. The file format is
//! `store::snapshot`'s.
//!
//! A failed write (disk full, directory gone) is logged and counted and the
//! previous snapshot stays in place; the server keeps deciding, since a
//! limiter that refused every request over a full disk would take the
//! fleet behind it down with it.
//!
//! The append-only file (`--appendonly`), which records every write between
//! snapshots, is [`aof`].

pub mod aof;

use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::clock::Nanos;
use crate::store::snapshot::{self, SnapshotError};
use crate::store::Store;

/// Snapshot settings and what the last attempts did (for `INFO`,
/// `LASTSAVE` and `/metrics`).
#[derive(Debug)]
pub struct Persist {
    path: PathBuf,
    interval: Duration,
    /// One writer at a time: the thread, `SAVE` and shutdown share a path.
    writing: Mutex<()>,
    in_progress: AtomicBool,
    wake: Mutex<Wake>,
    cond: Condvar,
    /// `Stats::writes()` as of the last successful snapshot.
    writes_at_save: AtomicU64,
    /// Unix seconds of the last successful snapshot (start time until one).
    pub last_save: AtomicU64,
    pub last_ok: AtomicBool,
    pub last_duration_us: AtomicU64,
    pub last_keys: AtomicU64,
    pub saves: AtomicU64,
    pub failures: AtomicU64,
}

#[derive(Debug, Default)]
struct Wake {
    requested: bool,
    stop: bool,
}

impl Persist {
    pub fn new(path: PathBuf, interval: Duration) -> Self {
        Persist {
            path,
            interval,
            writing: Mutex::new(()),
            in_progress: AtomicBool::new(false),
            wake: Mutex::new(Wake::default()),
            cond: Condvar::new(),
            writes_at_save: AtomicU64::new(0),
            last_save: AtomicU64::new(unix_secs()),
            last_ok: AtomicBool::new(true),
            last_duration_us: AtomicU64::new(0),
            last_keys: AtomicU64::new(0),
            saves: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    pub fn in_progress(&self) -> bool {
        self.in_progress.load(Ordering::Relaxed)
    }

    /// Write commands run since the last successful snapshot, given the
    /// count of write commands run so far (`Stats::writes`).
    pub fn changes_since_save(&self, writes: u64) -> u64 {
        let (now, then) = (writes, self.writes_at_save.load(Ordering::Relaxed));
        // Below the mark only after CONFIG RESETSTAT: count it as changed.
        now.checked_sub(then).unwrap_or(now.max(1))
    }

    /// Writes a snapshot of `store` now, on this thread, stamped `now`.
    /// `writes` is the count of write commands run so far, read before the
    /// walk: a write that lands during the walk may be missed by it, and
    /// then it still counts as a change. Returns the keys written.
    pub fn save(&self, store: &Store, now: Nanos, writes: u64) -> Result<u64, SnapshotError> {
        let _one = self.writing.lock();
        self.in_progress.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let result = snapshot::save(store, &self.path, now);
        self.in_progress.store(false, Ordering::Relaxed);
        self.last_duration_us
            .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        match &result {
            Ok(keys) => {
                self.writes_at_save.store(writes, Ordering::Relaxed);
                self.last_save.store(unix_secs(), Ordering::Relaxed);
                self.last_keys.store(*keys, Ordering::Relaxed);
                self.last_ok.store(true, Ordering::Relaxed);
                self.saves.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.last_ok.store(false, Ordering::Relaxed);
                self.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!("{e}");
            }
        }
        result
    }

    /// Asks the snapshot thread for a snapshot now (`BGSAVE`).
    pub fn request(&self) {
        self.wake.lock().requested = true;
        self.cond.notify_one();
    }

    /// For the snapshot thread: waits up to `timeout` for a request or a
    /// stop. `None` once stopped, else whether a snapshot was asked for.
    pub fn wait(&self, timeout: Duration) -> Option<bool> {
        let mut wake = self.wake.lock();
        if !wake.stop && !wake.requested {
            self.cond.wait_for(&mut wake, timeout);
        }
        if wake.stop {
            return None;
        }
        Some(std::mem::take(&mut wake.requested))
    }

    /// Tells the snapshot thread to stop.
    pub fn stop(&self) {
        self.wake.lock().stop = true;
        self.cond.notify_one();
    }
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
