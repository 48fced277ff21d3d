//! The snapshot thread: it writes a snapshot every `--snapshot-interval`
//! when anything changed, or when `BGSAVE` asks; shutdown stops it and
//! writes the final one. What it shares with `SAVE` and `INFO` is
//! [`crate::persist::Persist`].

use std::sync::Arc;
use std::thread;

use crate::state::State;
use crate::store::snapshot::SnapshotError;

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
            match save(&self.state) {
                Ok(keys) => tracing::info!(
                    keys,
                    path = %p.path().display(),
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
            p.stop();
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

/// Snapshots start every interval measured from the previous one's start,
/// not its end: a write is in a snapshot that completes at most one
/// interval plus one snapshot's duration after it (it used to be up to two
/// durations more, about twice the interval when a snapshot takes it).
fn run(state: &State) {
    let Some(p) = &state.persist else { return };
    crate::util::set_background(true);
    let mut started = std::time::Instant::now();
    while let Some(requested) = p.wait(p.interval().saturating_sub(started.elapsed())) {
        if requested || p.changes_since_save(state.stats.writes()) > 0 {
            started = std::time::Instant::now();
            // Failures are logged and counted inside; the next tick retries.
            let _ = save(state);
        } else {
            started = std::time::Instant::now();
        }
    }
}

/// Writes a snapshot of the server's store now, on this thread (`SAVE`,
/// the thread, the final one). `Ok(0)` without `--snapshot`.
pub fn save(state: &State) -> Result<u64, SnapshotError> {
    let Some(p) = &state.persist else {
        return Ok(0);
    };
    p.save(&state.store, state.clock.now(), state.stats.writes())
}
