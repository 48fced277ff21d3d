//! A connection's transaction state: the queue between `MULTI` and
//! `EXEC` and the watched keys. The commands that drive it are
//! `multi.rs`; this file names no command type, so the session can hold it
//! without reaching the command table.

use bytes::Bytes;
use std::ops::Range;

use crate::protocol::Request;
use crate::store::{Store, WatchMark};

/// Bytes a queued command costs beyond its frame: its entry and spans.
const QUEUED_OVERHEAD: usize =
    std::mem::size_of::<Queued>() + 2 * std::mem::size_of::<Range<usize>>();

/// One command waiting for `EXEC`: its frame (a view of the bytes it
/// arrived in, not a copy) and where its arguments are.
#[derive(Debug)]
pub struct Queued {
    frame: Bytes,
    /// Into [`Transaction::spans`].
    args: Range<usize>,
    /// The command's position in the table, and its subcommand's.
    pub cmd: usize,
    pub sub: Option<usize>,
}

impl Queued {
    /// The request again, a view of its frame (`spans` is
    /// [`Transaction::spans`]).
    pub fn request<'a>(&self, spans: &'a [Range<usize>]) -> Request<'a> {
        Request::new(self.frame.clone(), &spans[self.args.clone()])
    }
}

/// A connection between `MULTI` and `EXEC`/`DISCARD`.
#[derive(Debug, Default)]
pub struct Transaction {
    pub queue: Vec<Queued>,
    /// Argument spans of every queued command, end to end: one vector for
    /// the whole queue instead of one per command.
    pub spans: Vec<Range<usize>>,
    /// A command was refused while queueing: `EXEC` will discard it all.
    pub dirty: bool,
    /// Bytes the queue holds, frames and bookkeeping.
    bytes: usize,
    /// The shards `EXEC` locks for the queued keys, kept with the spare
    /// buffers so a looping client's `EXEC` allocates none.
    pub shards: Vec<usize>,
}

/// What a connection's transaction state holds: the queue, if in `MULTI`,
/// and the watched keys.
#[derive(Debug, Default)]
pub struct TxState {
    pub multi: Option<Transaction>,
    pub watched: Vec<(Bytes, WatchMark)>,
    /// Bytes the watched keys hold.
    pub watch_bytes: usize,
    /// The last transaction's buffers, emptied, for the next `MULTI`: a
    /// connection that runs transactions in a loop allocates its queue
    /// once.
    spare: Transaction,
}

impl TxState {
    pub fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// A command was refused while queueing (Redis's `flagTransaction`).
    pub fn flag(&mut self) {
        if let Some(tx) = &mut self.multi {
            tx.dirty = true;
        }
    }

    /// Forgets the queue and the watched keys (`DISCARD`, `RESET`, a
    /// closed connection), giving the watches back to the store.
    pub fn clear(&mut self, store: &Store) {
        self.unwatch(store);
        if let Some(tx) = self.multi.take() {
            self.recycle(tx);
        }
    }

    /// Forgets the watched keys, giving their marks back to the store.
    pub fn unwatch(&mut self, store: &Store) {
        store.unwatch(self.watched.iter().map(|(_, m)| m));
        self.forget_watches();
    }

    /// Forgets the watched keys whose marks were given back already.
    pub fn forget_watches(&mut self) {
        self.watched.clear();
        self.watch_bytes = 0;
    }

    /// Starts a transaction (`MULTI`), in the spare buffers.
    pub fn begin(&mut self) {
        self.multi = Some(std::mem::take(&mut self.spare));
    }

    /// Keeps an ended transaction's buffers for the next one, unless they
    /// grew large (a long queue's memory goes back).
    pub fn recycle(&mut self, mut tx: Transaction) {
        if tx.queue.capacity() <= 64 && tx.spans.capacity() <= 512 && tx.shards.capacity() <= 512 {
            tx.queue.clear();
            tx.spans.clear();
            tx.shards.clear();
            tx.dirty = false;
            tx.bytes = 0;
            self.spare = tx;
        }
    }

    /// Bytes held by the queue and the watched keys, counted against
    /// `--client-query-buffer-limit` (a client that queues or watches
    /// for ever is disconnected, never grows memory without bound).
    pub fn bytes(&self) -> usize {
        self.watch_bytes + self.multi.as_ref().map_or(0, |tx| tx.bytes)
    }

    /// Queues `req`, resolved to the command at `cmd` in the table (and
    /// its subcommand at `sub`). Returns false if the queue
    /// would pass `limit` bytes: the client is then disconnected.
    pub fn queue(&mut self, req: &Request<'_>, cmd: usize, sub: Option<usize>, limit: u64) -> bool {
        let Some(tx) = &mut self.multi else {
            return true;
        };
        let (frame, spans) = req.parts();
        tx.bytes += frame.len() + QUEUED_OVERHEAD;
        if (self.watch_bytes + tx.bytes) as u64 > limit {
            return false;
        }
        let start = tx.spans.len();
        tx.spans.extend_from_slice(spans);
        tx.queue.push(Queued {
            frame: frame.clone(),
            args: start..tx.spans.len(),
            cmd,
            sub,
        });
        true
    }
}
