//! The append-only file's writer thread: it writes the stream to the file
//! when a connection asks (after each batch that wrote), fsyncs as
//! `appendfsync` says, rewrites the file when `BGREWRITEAOF` asks or it
//! has grown past `auto-aof-rewrite-*`, and follows `CONFIG SET
//! appendonly`. The file itself is [`crate::persist::aof`]'s.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::persist::aof::{Fsync, BUSY_POLL};
use crate::state::State;

/// Before a reply leaves: with `appendfsync always`, waits until the file
/// holds, fsynced, every effect in the stream now (the reply's among
/// them); otherwise asks the writer thread to write them and returns.
/// Every path that answers a decision (a client's batch, Envoy's gRPC
/// call, `POST /json`) goes through here.
pub async fn before_reply(state: &State) {
    let (aof, fx) = (&state.aof, &state.store.effects);
    if let Some(target) = aof.reply_gate(|| fx.offset()) {
        aof.wait_durable(target).await;
    }
}

/// The writer thread. Dropping it stops the thread after a last write and
/// fsync of everything served.
pub struct AofGuard {
    state: Arc<State>,
    thread: Option<thread::JoinHandle<()>>,
}

impl AofGuard {
    /// Stops the thread: the file then holds every effect, fsynced.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.state.aof.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AofGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the writer thread (it idles while the file is off).
pub fn spawn(state: Arc<State>) -> AofGuard {
    let thread_state = state.clone();
    let thread = thread::Builder::new()
        .name("turnstile-aof".into())
        .spawn(move || run(&thread_state))
        .expect("spawning the append-only file thread");
    AofGuard {
        state,
        thread: Some(thread),
    }
}

/// How long the thread sleeps with nothing asked (a `CONFIG SET
/// appendonly` wakes it at once).
const IDLE: Duration = Duration::from_secs(1);
/// `everysec`'s period.
const SECOND: Duration = Duration::from_secs(1);

/// How long the thread waits for a request before its next round. With
/// the file off there is nothing to sync: it only looks at the settings
/// (turning the file on wakes it at once). It used to wait out
/// `everysec`'s second from a last sync that never came, which is no wait
/// at all: the thread woke every 100 µs, about 10% of a core on an idle
/// server with the file off, the default.
fn round_timeout(on: bool, busy: bool, fsync: Fsync, since_sync: Duration) -> Duration {
    match fsync {
        _ if !on => IDLE,
        _ if busy => BUSY_POLL,
        Fsync::Everysec => SECOND.saturating_sub(since_sync),
        _ => IDLE,
    }
    .max(Duration::from_micros(100))
}

/// While the file's writes fail, how often they are tried again (and,
/// when the file lacks effects, a fresh base).
const RETRY: Duration = Duration::from_millis(100);
const REBASE_EVERY: Duration = Duration::from_secs(1);

fn run(state: &Arc<State>) {
    let (aof, s) = (&state.aof, &state.settings);
    let mut last_sync = Instant::now();
    let mut failing = false;
    let mut wrote = false;
    let mut last_rebase: Option<Instant> = None;
    let mut background = None;
    loop {
        // `CONFIG SET appendfsync` sets the file's policy itself, and
        // `appendonly` wakes this thread to follow it (their rows' apply).
        let fsync = aof.fsync();
        // Background work, unless replies wait for it.
        let yields = fsync != Fsync::Always;
        if background != Some(yields) {
            crate::util::set_background(yields);
            background = Some(yields);
        }
        follow_setting(state);
        // While writes come (and the last round found some), look again
        // in a millisecond instead of being woken by every batch.
        let offset = state.store.effects.offset();
        let busy = aof.is_on() && fsync != Fsync::Always && !aof.set_idle(!wrote, offset);
        let mut timeout = round_timeout(aof.is_on(), busy, fsync, last_sync.elapsed());
        if failing {
            timeout = timeout.min(RETRY);
        }
        let Some(rewrite) = aof.wait(timeout) else {
            break;
        };
        aof.set_idle(false, 0);
        if !aof.is_on() {
            wrote = false;
            continue;
        }
        let before = aof.size.load(Ordering::Relaxed);
        let sync = match fsync {
            Fsync::Always => true,
            Fsync::Everysec => last_sync.elapsed() >= SECOND,
            Fsync::No => false,
        };
        let flushed = aof.flush(&state.store, sync);
        wrote = aof.size.load(Ordering::Relaxed) != before;
        match flushed {
            Ok(()) => {
                if sync {
                    last_sync = Instant::now();
                }
                if failing && aof.write_error().is_none() {
                    tracing::warn!(path = %aof.path().display(), "append-only file written again: write commands are accepted again");
                    failing = false;
                }
            }
            Err(e) => {
                if fsync == Fsync::Always {
                    // Replies wait for this write: exit rather than hang
                    // every client (or, in tests, the hook's say).
                    aof.fatal(&e);
                }
                // Logged once per failing spell; retried every RETRY.
                if !failing {
                    tracing::error!(
                        path = %aof.path().display(),
                        "append-only file write failed: {}; write commands are refused (-MISCONF) until a write succeeds again",
                        crate::util::strerror(&e)
                    );
                    failing = true;
                }
                thread::sleep(RETRY);
            }
        }
        // The file lacks effects (the disk took none for too long): a
        // fresh base, tried at most once a second.
        if aof.needs_base() && last_rebase.is_none_or(|t| t.elapsed() >= REBASE_EVERY) {
            last_rebase = Some(Instant::now());
            failing = true;
            if aof.rewrite(&state.store, state.clock.now()).is_ok() {
                tracing::warn!(path = %aof.path().display(), "append-only file started again from a fresh base: write commands are accepted again");
                failing = false;
            }
        }
        let (pct, min) = (
            s.get(&s.auto_aof_rewrite_percentage),
            s.get(&s.auto_aof_rewrite_min_size),
        );
        if (rewrite || aof.wants_rewrite(pct, min)) && !aof.rewriting() {
            rewrite_in_background(state.clone());
        }
    }
    if aof.is_on() {
        match aof.close(&state.store) {
            Ok(()) => {
                tracing::info!(path = %aof.path().display(), "append-only file written and fsynced")
            }
            Err(e) => {
                tracing::error!(path = %aof.path().display(), "append-only file: the last write failed: {e}")
            }
        }
    }
    aof.release();
}

/// Starts or stops the file when `CONFIG SET appendonly` changed it.
fn follow_setting(state: &State) {
    let (aof, fx) = (&state.aof, &state.store.effects);
    let wanted = state.settings.appendonly.load(Ordering::Relaxed);
    if wanted == aof.is_on() {
        if !wanted {
            // Turned on and off again before this thread looked.
            aof.done_starting();
        }
        return;
    }
    if wanted {
        // Logged before the base is walked: what the walk misses, the
        // stream has.
        if !state.replication.is_replica() {
            fx.set_emitting(true);
        }
        match aof.start(&state.store, state.clock.now()) {
            Ok(()) => tracing::info!(path = %aof.path().display(), "append-only file on"),
            Err(e) => {
                tracing::error!(path = %aof.path().display(), "append-only file could not start: {e}");
                fx.set_capture(false);
                state.settings.appendonly.store(false, Ordering::Relaxed);
            }
        }
    } else {
        if let Err(e) = aof.close(&state.store) {
            tracing::error!(path = %aof.path().display(), "append-only file: the last write failed: {e}");
        }
        // Effects stay logged only for a backlog.
        if !fx.active() {
            fx.set_emitting(false);
        }
        tracing::info!(path = %aof.path().display(), "append-only file off");
    }
}

/// A rewrite on its own thread: the writer keeps writing the old file
/// meanwhile.
pub fn rewrite_in_background(state: Arc<State>) {
    let spawned = thread::Builder::new()
        .name("turnstile-aof-rewrite".into())
        .spawn(move || {
            crate::util::set_background(true);
            // The outcome is logged and kept for INFO by the rewrite.
            let _ = state.aof.rewrite(&state.store, state.clock.now());
        });
    if let Err(e) = spawned {
        tracing::error!("append-only file rewrite: cannot start its thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_with_the_file_off_waits_a_second() {
        let long_ago = Duration::from_secs(3600);
        for fsync in [Fsync::Always, Fsync::Everysec, Fsync::No] {
            assert_eq!(round_timeout(false, false, fsync, long_ago), IDLE);
        }
        // On: everysec syncs when its second is up, not later.
        assert_eq!(
            round_timeout(true, false, Fsync::Everysec, long_ago),
            Duration::from_micros(100)
        );
        assert_eq!(
            round_timeout(true, false, Fsync::Everysec, Duration::from_millis(400)),
            Duration::from_millis(600)
        );
        assert_eq!(
            round_timeout(true, true, Fsync::Everysec, long_ago),
            BUSY_POLL.max(Duration::from_micros(100))
        );
    }
}
