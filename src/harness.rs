//! The server without sockets: bytes in, replies out, on a manual clock.
//! For fuzzing (every command's parser and algorithm reached through the
//! connection's own batch loop, `cmd/exec/batch.rs`) and for tests that need no
//! network.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;

use crate::clock::{ManualClock, Nanos};
use crate::cmd::exec::batch::{self, Step};
use crate::cmd::exec::session::{Park, Session};
use crate::cmd::registry::table::REGISTRY;
use crate::config::Config;
use crate::protocol::{Decoder, ReplyBuf};
use crate::state::State;

/// A request as a client sends it: a RESP array of bulk strings. The one
/// request encoder of the fuzz targets and the tests.
pub fn encode_request<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One in-process client of an in-process server.
pub struct Harness {
    pub state: Arc<State>,
    pub clock: ManualClock,
    session: Session,
    decoder: Decoder,
    input: BytesMut,
    out: ReplyBuf,
    closed: bool,
}

impl Harness {
    /// A standalone server with default settings, its clock at `start`.
    pub fn new(start: Nanos) -> Harness {
        let config = Config {
            metrics_addr: "off".into(),
            ..Config::for_tests()
        };
        let clock = ManualClock::new(start);
        let addr: SocketAddr = ([127, 0, 0, 1], 6379).into();
        let state = Arc::new(State::new(
            &config,
            None,
            Arc::new(clock.clone()),
            addr,
            &REGISTRY.catalog(),
        ));
        let info = state.clients.register(([127, 0, 0, 1], 50000).into(), addr);
        Harness {
            session: Session::new(info, false, REGISTRY.commands().len()),
            state,
            clock,
            decoder: Decoder::new(),
            input: BytesMut::new(),
            out: ReplyBuf::default(),
            closed: false,
        }
    }

    /// Feeds bytes as if read from the socket and returns the replies they
    /// produced. After a protocol error or `QUIT` the connection is closed
    /// and further input is ignored, as the server would.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        if self.closed {
            return Vec::new();
        }
        self.input.extend_from_slice(bytes);
        let mut turn = batch::Turn::default();
        loop {
            let step = batch::run(
                &self.state,
                &REGISTRY,
                &mut self.session,
                &mut self.decoder,
                &mut self.input,
                &mut self.out,
                &mut turn,
            );
            match step {
                // Nothing to write to, and no other client to let run:
                // the replies are returned whole.
                Step::Flush | Step::Yield => continue,
                // Nothing runs a parked reply here (it answers what its
                // command says then), and `PSYNC` has no socket to take.
                Step::Park => match self.session.parked.take() {
                    Some(Park::Later(later)) => {
                        later.unserved.write(&mut self.out, &mut self.session.stats)
                    }
                    _ => self.out.error("ERR PSYNC needs a socket"),
                },
                Step::Drained => break,
                Step::End(_) => {
                    self.closed = true;
                    break;
                }
            }
        }
        batch::finish(&self.state, &mut self.session, turn.commands);
        let replies = self.out.buffer().to_vec();
        self.out.buffer().clear();
        replies
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_in_replies_out() {
        let mut h = Harness::new(Nanos(1_700_000_000 * Nanos::PER_SEC));
        assert_eq!(h.feed(b"PING\r\n"), b"+PONG\r\n");
        assert_eq!(
            h.feed(b"*5\r\n$8\r\nRL.ALLOW\r\n$1\r\nk\r\n$1\r\n1\r\n$2\r\n60\r\n$0\r\n\r\n"),
            b"-ERR unknown option ''\r\n"
        );
        let r = h.feed(b"*4\r\n$8\r\nRL.ALLOW\r\n$1\r\nk\r\n$1\r\n1\r\n$2\r\n60\r\n");
        assert!(
            r.starts_with(b"*5\r\n:1\r\n:1\r\n:0\r\n:-1\r\n"),
            "{:?}",
            String::from_utf8_lossy(&r)
        );
        assert_eq!(
            h.feed(b"*1\r\n$-5\r\n"),
            b"-ERR Protocol error: invalid bulk length\r\n"
        );
        assert!(h.is_closed());
        assert!(h.feed(b"PING\r\n").is_empty());
    }

    /// A parked reply answers what its command says where nothing runs it:
    /// `WAIT` finds no replica, and the next command is served after it.
    #[test]
    fn a_parked_reply_is_its_unserved_answer() {
        let mut h = Harness::new(Nanos(1_700_000_000 * Nanos::PER_SEC));
        assert_eq!(h.feed(b"SET k v\r\n"), b"+OK\r\n");
        assert_eq!(h.feed(b"WAIT 1 100\r\nPING\r\n"), b":0\r\n+PONG\r\n");
    }
}
