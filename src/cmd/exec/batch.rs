//! The decode-and-execute loop of one connection, without its socket: the
//! server's connection task (`server/connection.rs`) and the fuzzing
//! harness (`harness.rs`) both run exactly this, so the fuzzers drive the
//! loop the server runs.

use bytes::BytesMut;

use super::dispatch::execute;
use super::session::Session;
use crate::clock::Nanos;
use crate::cmd::registry::spec::{Ctx, Registry};
use crate::protocol::{peek, Decoder, Limits, ReplyBuf};
use crate::state::{State, Stats};
use crate::store::{Keyspace, PREFETCH_MAX};

/// Replies beyond this are written mid-batch, so one huge pipeline cannot
/// grow the write buffer without bound before its first byte leaves.
pub const FLUSH_AT: usize = 64 * 1024;

/// Why a batch asks for the connection to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `QUIT`: once the replies so far are written.
    Quit,
    /// `CLIENT KILL` named this connection.
    Killed,
    /// A malformed request: its error reply is the last.
    Protocol,
    /// The transaction queue or the watched keys passed
    /// `--client-query-buffer-limit`: closed without a reply, as Redis.
    QueryBufferLimit,
}

/// Where [`run`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// No complete request is left in the buffer: read more.
    Drained,
    /// The replies passed [`FLUSH_AT`]: write them, then run again.
    Flush,
    /// A command parked the connection (`session.parked`): write the
    /// replies so far, do what it asks, then run again.
    Park,
    /// End the connection.
    End(End),
}

/// Decodes and runs every complete request in `buf`, each reply appended
/// to `out`, until the buffer holds no complete request, the replies need
/// writing, or the connection must end. Counts the requests it ran into
/// `commands`; [`finish`] publishes them once per read.
pub fn run(
    state: &State,
    registry: &'static Registry,
    session: &mut Session,
    decoder: &mut Decoder,
    buf: &mut BytesMut,
    out: &mut ReplyBuf,
    commands: &mut u64,
) -> Step {
    // Requests left before the next look ahead.
    let mut ahead = 0;
    // Time is read once per command that runs, as Redis caches it per
    // command call. A command that arrives in MULTI is only checked and
    // queued (its transaction runs at EXEC's time, which EXEC reads), so
    // it reuses this batch's last reading: never older than a command
    // before it saw, and one clock read instead of one per queued command.
    let mut last: Option<Nanos> = None;
    loop {
        if ahead == 0 {
            ahead = prefetch(state, buf);
        }
        ahead = ahead.saturating_sub(1);
        let limits = Limits {
            max_bulk_len: i64::try_from(state.settings.get(&state.settings.proto_max_bulk_len))
                .unwrap_or(i64::MAX),
            unauthenticated: !session.authenticated,
        };
        match decoder.decode(buf, limits) {
            Ok(Some(req)) => {
                *commands += 1;
                let now = match last {
                    Some(t) if session.tx.in_multi() => t,
                    _ => *last.insert(state.clock.now()),
                };
                let mut ctx = Ctx {
                    state,
                    session: &mut *session,
                    out: &mut *out,
                    db: Keyspace::Store(&state.store),
                    now,
                    registry,
                };
                execute(&mut ctx, &req);
            }
            Ok(None) => return Step::Drained,
            Err(e) => {
                Stats::add(&state.stats.protocol_errors, 1);
                tracing::debug!(client = session.info.id, error = %e, "protocol error");
                out.error(&format!("ERR {e}"));
                return Step::End(End::Protocol);
            }
        }
        if session.parked.is_some() {
            return Step::Park;
        }
        if session.close_after_reply {
            return Step::End(End::Quit);
        }
        if session.query_limit_hit {
            tracing::warn!(client = session.info.id, addr = %session.info.addr, "closing client that reached max query buffer length (transaction queue or watched keys)");
            return Step::End(End::QueryBufferLimit);
        }
        if session.info.is_killed() {
            return Step::End(End::Killed);
        }
        if out.len() >= FLUSH_AT {
            return Step::Flush;
        }
    }
}

/// When the keyspace has outgrown the caches ([`crate::store::Store::prefetching`]),
/// looks at the next requests waiting in `buf` (up to [`PREFETCH_MAX`]
/// keys) and has the store start loading what their lookups will read, if
/// there are two keys or more: one request alone gains nothing from a hint
/// given just before its own lookup. Returns how many requests it looked
/// past, at least one, so the caller looks again after running them.
fn prefetch(state: &State, buf: &BytesMut) -> usize {
    if !state.store.prefetching() {
        return usize::MAX;
    }
    let mut keys = [&b""[..]; PREFETCH_MAX];
    let (requests, n) = peek::second_args(buf, &mut keys);
    if n >= 2 {
        state.store.prefetch(&keys[..n]);
    }
    requests.max(1)
}

/// Publishes what a read's batches did: the command count and the
/// session's tallies, once per read rather than per command.
pub fn finish(state: &State, session: &mut Session, commands: u64) {
    if commands > 0 {
        Stats::add(&state.stats.commands_processed, commands);
        session.stats.flush(&state.stats);
        session.info.touch();
    }
}
