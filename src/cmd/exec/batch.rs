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
use crate::state::State;
use crate::store::{Keyspace, PREFETCH_MAX};

/// Replies beyond this are written mid-batch, so one huge pipeline cannot
/// grow the write buffer without bound before its first byte leaves.
pub const FLUSH_AT: usize = 64 * 1024;

/// Bytes of requests one turn runs before its connection writes and lets
/// the others run ([`Step::Yield`]): Redis reads at most 16 KiB a client
/// per turn of its event loop. Twice the connection's usual read, so a
/// read of the usual size is one turn; what it bounds is a read into a
/// buffer a large request grew, which may bring megabytes of pipeline.
pub const TURN_BYTES: usize = 32 * 1024;

/// What one turn of a connection has run: its requests, published by
/// [`finish`], and their bytes, against [`TURN_BYTES`].
#[derive(Debug, Default)]
pub struct Turn {
    pub commands: u64,
    pub bytes: usize,
}

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
    /// The turn ran [`TURN_BYTES`] of requests: write the replies, let the
    /// other clients run, then run again before reading more.
    Yield,
    /// A command parked the connection (`session.parked`): write the
    /// replies so far, do what it asks, then run again.
    Park,
    /// End the connection.
    End(End),
}

/// Decodes and runs every complete request in `buf`, each reply appended
/// to `out`, until the buffer holds no complete request, the replies need
/// writing, the turn has run its share, or the connection must end.
/// Counts the requests it ran and their bytes into `turn`; [`finish`]
/// publishes the count once per turn.
pub fn run(
    state: &State,
    registry: &'static Registry,
    session: &mut Session,
    decoder: &mut Decoder,
    buf: &mut BytesMut,
    out: &mut ReplyBuf,
    turn: &mut Turn,
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
        let before = buf.len();
        match decoder.decode(buf, limits) {
            Ok(Some(req)) => {
                turn.commands += 1;
                turn.bytes += before - buf.len();
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
                state
                    .stats
                    .counters
                    .inc(crate::metrics::table::PROTOCOL_ERRORS);
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
        // Only with input left: a turn that ran its buffer out is over
        // anyway, and one with nothing to run would count for the buffer's
        // round of small requests (`server/connection.rs`).
        if turn.bytes >= TURN_BYTES && !buf.is_empty() {
            return Step::Yield;
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

/// Publishes what a turn's batches did: the command count and the
/// session's tallies, once per turn rather than per command.
pub fn finish(state: &State, session: &mut Session, commands: u64) {
    if commands > 0 {
        state
            .stats
            .counters
            .add(crate::metrics::table::COMMANDS_PROCESSED, commands);
        session.stats.flush(&state.stats);
        session.info.touch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::cmd::registry::table::REGISTRY;
    use crate::config::Config;
    use std::net::SocketAddr;
    use std::sync::Arc;

    fn client() -> (Arc<State>, Session) {
        let config = Config {
            metrics_addr: "off".into(),
            ..Config::for_tests()
        };
        let addr: SocketAddr = ([127, 0, 0, 1], 6379).into();
        let clock = Arc::new(ManualClock::new(Nanos(1_700_000_000 * Nanos::PER_SEC)));
        let state = Arc::new(State::new(&config, None, clock, addr, &REGISTRY.catalog()));
        let info = state.clients.register(([127, 0, 0, 1], 50000).into(), addr);
        let session = Session::new(info, false, REGISTRY.commands().len());
        (state, session)
    }

    /// A pipeline of three turns' worth runs in turns of at least
    /// [`TURN_BYTES`] (and less than one request more), each answered
    /// in full and in order before the next starts; the last turn ends
    /// with the buffer, and so does a turn whose one request was larger
    /// than a turn's share.
    #[test]
    fn a_pipeline_runs_a_turn_at_a_time() {
        let (state, mut session) = client();
        let mut decoder = Decoder::new();
        let mut out = ReplyBuf::default();
        let ping = b"*1\r\n$4\r\nPING\r\n";
        let total = 3 * TURN_BYTES / ping.len() + 100;
        let mut buf = BytesMut::from(&ping.repeat(total)[..]);
        let (mut answered, mut turns) = (0, 0);
        loop {
            let mut turn = Turn::default();
            let step = batch_run(
                &state,
                &mut session,
                &mut decoder,
                &mut buf,
                &mut out,
                &mut turn,
            );
            turns += 1;
            assert_eq!(out.len(), turn.commands as usize * b"+PONG\r\n".len());
            answered += turn.commands as usize;
            out.buffer().clear();
            match step {
                Step::Yield => {
                    assert!(turn.bytes >= TURN_BYTES && turn.bytes < TURN_BYTES + ping.len());
                    assert_eq!(buf.len(), (total - answered) * ping.len());
                }
                Step::Drained => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!((answered, turns, buf.len()), (total, 4, 0));

        let big = crate::harness::encode_request(&["SET", "k", &"v".repeat(2 * TURN_BYTES)]);
        let mut buf = BytesMut::from(&big[..]);
        let mut turn = Turn::default();
        let step = batch_run(
            &state,
            &mut session,
            &mut decoder,
            &mut buf,
            &mut out,
            &mut turn,
        );
        assert_eq!((step, turn.commands), (Step::Drained, 1));
        assert_eq!(&out.buffer()[..], b"+OK\r\n");
    }

    fn batch_run(
        state: &State,
        session: &mut Session,
        decoder: &mut Decoder,
        buf: &mut BytesMut,
        out: &mut ReplyBuf,
        turn: &mut Turn,
    ) -> Step {
        run(state, &REGISTRY, session, decoder, buf, out, turn)
    }
}
