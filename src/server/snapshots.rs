//! Snapshots while running: a thread writes one every `--snapshot-interval`
//! when anything was written since the last, `BGSAVE` asks it for one now,
//! `SAVE` writes one on the caller's thread, and shutdown writes a final
//! one after the last reply. The file format is `store::snapshot`'s.
//!
//! A failed write (disk full, directory gone) is logged and counted and the
//! previous snapshot stays in place; the server keeps deciding, since a
//! limiter that refused every request over a full disk would take the
//! fleet behind it down with it.

use parking_lot::{Condvar, Mutex};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::state::State;
use crate::store::snapshot::{self, SnapshotError};

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

    /// Write commands run since the last successful snapshot.
    pub fn changes_since_save(&self, state: &State) -> u64 {
        let (now, then) = (
            state.stats.writes(),
            self.writes_at_save.load(Ordering::Relaxed),
        );
        // Below the mark only after CONFIG RESETSTAT: count it as changed.
        now.checked_sub(then).unwrap_or(now.max(1))
    }

    /// Writes a snapshot now, on this thread. Returns the keys written.
    pub fn save(&self, state: &State) -> Result<u64, SnapshotError> {
        let _one = self.writing.lock();
        self.in_progress.store(true, Ordering::Relaxed);
        // Read before walking the store: a write that lands during the walk
        // may be missed by it, and then it still counts as a change.
        let writes = state.stats.writes();
        let started = Instant::now();
        let result = snapshot::save(&state.store, &self.path, state.clock.now());
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
}

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The snapshot thread. Stops, without a final snapshot, when dropped;
/// [`PersistGuard::finish`] stops it and writes the final one.
pub struct PersistGuard {
    state: Arc<State>,
    thread: Option<thread::JoinHandle<()>>,
}

impl PersistGuard {
    /// Where the snapshot goes.
    pub fn path(&self) -> &std::path::Path {
        self.state
            .persist
            .as_ref()
            .map_or(std::path::Path::new(""), |p| p.path())
    }

    /// Stops the thread and writes a last snapshot of everything served;
    /// its error, if it failed (the process then exits non-zero: the
    /// writes since the last snapshot are lost, and that must not pass
    /// quietly).
    pub fn finish(mut self) -> Result<(), SnapshotError> {
        self.stop();
        if let Some(p) = &self.state.persist {
            match p.save(&self.state) {
                Ok(keys) => tracing::info!(
                    keys,
                    path = %p.path.display(),
                    "final snapshot written"
                ),
                Err(e) => {
                    tracing::error!("final snapshot failed: {e}");
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(p) = &self.state.persist {
            p.wake.lock().stop = true;
            p.cond.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PersistGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the snapshot thread, if `--snapshot` is set.
pub fn spawn(state: Arc<State>) -> Option<PersistGuard> {
    state.persist.as_ref()?;
    let thread_state = state.clone();
    let thread = thread::Builder::new()
        .name("turnstile-snapshot".into())
        .spawn(move || run(&thread_state))
        .expect("spawning the snapshot thread");
    Some(PersistGuard {
        state,
        thread: Some(thread),
    })
}

fn run(state: &State) {
    let Some(p) = &state.persist else { return };
    loop {
        let requested = {
            let mut wake = p.wake.lock();
            if !wake.stop && !wake.requested {
                p.cond.wait_for(&mut wake, p.interval);
            }
            if wake.stop {
                return;
            }
            std::mem::take(&mut wake.requested)
        };
        if requested || p.changes_since_save(state) > 0 {
            // Failures are logged and counted inside; the next tick retries.
            let _ = p.save(state);
        }
    }
}
