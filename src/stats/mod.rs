//! The counters behind `INFO` and `/metrics` that are tallied per
//! connection (commands, error replies, decisions), and the heavy hitters'
//! sketches; the others are `metrics::table`'s rows. Both read the same
//! atomics, so `redis-cli INFO` and a Prometheus scrape always agree.
//!
//! The request path never touches a shared atomic per command: each
//! connection tallies into its own [`Local`] with plain integers and adds it
//! to the shared [`Stats`] once per batch of pipelined commands.

pub mod top;

use std::sync::atomic::{AtomicU64, Ordering};

use crate::limiter::{add_usage, Algorithm, Decision, MAX_USAGE};

/// Server-wide counters.
pub struct Stats {
    /// Every error reply, rejected commands (unknown, wrong arity, NOAUTH,
    /// MOVED) included: Redis's `total_error_replies`.
    pub error_replies: AtomicU64,
    /// Per command-table entry: calls, calls answered with an error, and
    /// requests refused before running (arity, OOM, NOAUTH, ...: Redis's
    /// `rejected_calls`, not counted in `calls`).
    calls: Box<[AtomicU64]>,
    failed: Box<[AtomicU64]>,
    rejected: Box<[AtomicU64]>,
    /// Error replies per error code, Redis's `INFO errorstats` (see
    /// [`ErrorCode`]), at most [`ERROR_CODES_MAX`] codes.
    errors: parking_lot::Mutex<Vec<(ErrorCode, u64)>>,
    /// Per command-table entry: whether it writes (for [`Stats::writes`]).
    writes: Box<[bool]>,
    /// Per algorithm: decisions `[allowed, limited]`, units consumed, and
    /// admissions that left less than a tenth of the limit.
    decisions: [[AtomicU64; 2]; Algorithm::COUNT],
    units: [AtomicU64; Algorithm::COUNT],
    near_limit: [AtomicU64; Algorithm::COUNT],
    /// The keys most denied, admitted and shadow-denied (`RL.TOP`).
    pub top: top::Top,
    /// `metrics::table`'s own counters.
    pub counters: Counters,
}

/// A row's place: its index in the table, and its first atomic in
/// [`Counters`] (rows read elsewhere have none).
#[derive(Debug, Clone, Copy)]
pub struct Id {
    pub row: usize,
    pub slot: usize,
}

impl Id {
    pub const fn new(row: usize, slot: usize) -> Id {
        Id { row, slot }
    }
}

/// The atomics of `metrics::table`'s rows the server counts itself
/// (`Read::Own`), one per series. Counting an event is one relaxed add to
/// a slot fixed at compile time: no lookup by name, no lock.
pub struct Counters {
    own: Box<[AtomicU64]>,
    /// Per atomic: a gauge, which `CONFIG RESETSTAT` leaves.
    gauge: Box<[bool]>,
}

impl Counters {
    /// One atomic per entry of `gauge` (`metrics::table::counters()`),
    /// all 0.
    pub fn new(gauge: Box<[bool]>) -> Self {
        Counters {
            own: gauge.iter().map(|_| AtomicU64::new(0)).collect(),
            gauge,
        }
    }

    /// `CONFIG RESETSTAT`: every counter back to 0 (gauges stay).
    fn reset(&self) {
        for (c, gauge) in self.own.iter().zip(&self.gauge) {
            if !gauge {
                c.store(0, Ordering::Relaxed);
            }
        }
    }

    /// One more of `id`'s event.
    #[inline]
    pub fn inc(&self, id: Id) {
        self.add_at(id, 0, 1);
    }

    /// `n` more of `id`'s event.
    #[inline]
    pub fn add(&self, id: Id, n: u64) {
        self.add_at(id, 0, n);
    }

    /// `n` more of `id`'s event, in its series `series` (a label value's
    /// index).
    #[inline]
    pub fn add_at(&self, id: Id, series: usize, n: u64) {
        self.cell_at(id, series).fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self, id: Id) -> u64 {
        self.get_at(id, 0)
    }

    pub fn get_at(&self, id: Id, series: usize) -> u64 {
        self.cell_at(id, series).load(Ordering::Relaxed)
    }

    /// The atomic itself, for a gauge kept up by its owner (client
    /// buffers' bytes).
    pub fn cell(&self, id: Id) -> &AtomicU64 {
        self.cell_at(id, 0)
    }

    #[inline]
    fn cell_at(&self, id: Id, series: usize) -> &AtomicU64 {
        debug_assert!(id.slot != usize::MAX, "row {} has no atomics", id.row);
        &self.own[id.slot + series]
    }
}

/// Distinct error codes `INFO errorstats` tracks: scripts choose their
/// own (`redis.error_reply`), so the table is bounded; errors with a code
/// first seen past it are counted in `total_error_replies` only (Redis 7.0
/// keeps every code; 7.2 bounds them at the same 128).
pub const ERROR_CODES_MAX: usize = 128;

/// An error reply's code as Redis's `afterErrorReply` takes it: the text
/// before the first space within the first 31 bytes, `ERR` when there is
/// none. Inline, so counting an error allocates nothing.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ErrorCode {
    len: u8,
    bytes: [u8; 31],
}

impl ErrorCode {
    /// The code of an error reply's text (without the leading `-`).
    pub fn of(text: &[u8]) -> Self {
        let head = &text[..text.len().min(31)];
        let code = match head.iter().position(|&b| b == b' ') {
            Some(i) => &head[..i],
            None => b"ERR",
        };
        let mut bytes = [0; 31];
        bytes[..code.len()].copy_from_slice(code);
        ErrorCode {
            len: code.len() as u8,
            bytes,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// How a transaction ended: an index into `metrics::table::TRANSACTIONS`'
/// series, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxOutcome {
    /// `EXEC` ran the queue.
    Executed,
    /// `EXEC` found a watched key changed and ran nothing.
    WatchAborted,
    /// `DISCARD` (or `RESET`) dropped the queue.
    Discarded,
    /// `EXEC` refused the queue: a command was refused while queueing, or
    /// the transaction as a whole was (`--maxmemory`, `CROSSSLOT`).
    ExecAbort,
}

impl TxOutcome {
    pub const ALL: [TxOutcome; 4] = [
        TxOutcome::Executed,
        TxOutcome::WatchAborted,
        TxOutcome::Discarded,
        TxOutcome::ExecAbort,
    ];
}

/// How a script run (`EVAL`, `EVALSHA` and their `_RO` forms) ended: an
/// index into `metrics::table::SCRIPTS`' series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptOutcome {
    /// It returned a reply (an error reply it returned on purpose, too).
    Ok,
    /// It raised an error, or did not compile, or ran out of memory.
    Error,
    /// `SCRIPT KILL` stopped it.
    Killed,
}

impl ScriptOutcome {
    pub const ALL: [ScriptOutcome; 3] = [
        ScriptOutcome::Ok,
        ScriptOutcome::Error,
        ScriptOutcome::Killed,
    ];
}

/// How a rate limit service call (`ShouldRateLimit`, `POST /json`) was
/// answered: an index into `metrics::table::RLS_REQUESTS`' series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RlsOutcome {
    Ok,
    OverLimit,
    /// Refused (`UNAVAILABLE`, or HTTP 400).
    Error,
}

impl RlsOutcome {
    pub const ALL: [RlsOutcome; 3] = [RlsOutcome::Ok, RlsOutcome::OverLimit, RlsOutcome::Error];
}

/// What happened to a lease (`RL.ACQUIRE` and friends): an index into
/// `metrics::table::LEASES`' series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEvent {
    Acquired,
    /// Refused: the limit's units were held.
    Denied,
    /// An acquire retried with the id of a live lease: admitted again,
    /// nothing more held.
    Retried,
    Released,
    Renewed,
    /// Lapsed at its TTL without a release: its holder crashed, hung or
    /// forgot (found by the key's next operation).
    Expired,
}

impl LeaseEvent {
    pub const ALL: [LeaseEvent; 6] = [
        LeaseEvent::Acquired,
        LeaseEvent::Denied,
        LeaseEvent::Retried,
        LeaseEvent::Released,
        LeaseEvent::Renewed,
        LeaseEvent::Expired,
    ];
}

/// Why a connection was refused: an index into
/// `metrics::table::CONNECTIONS_REJECTED`' series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// `--maxclients`.
    Maxclients,
    /// Protected mode: not from the loopback, and no password set.
    ProtectedMode,
    /// The metrics endpoint's cap.
    MetricsEndpoint,
    /// `--rls-maxclients`.
    RlsMaxclients,
}

impl Rejected {
    pub const ALL: [Rejected; 4] = [
        Rejected::Maxclients,
        Rejected::ProtectedMode,
        Rejected::MetricsEndpoint,
        Rejected::RlsMaxclients,
    ];
}

/// What the counters know of the command table, which the command layer
/// provides (`cmd::table::catalog`): each command's name, its position
/// being its index in every per-command table, and whether it writes.
/// Counters never import the table itself.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub names: Vec<&'static str>,
    pub writes: Vec<bool>,
}

impl Stats {
    /// Counters for the commands of `catalog`, with the default heavy
    /// hitters' sketches and none of the table's (the unit tests').
    pub fn new(catalog: &Catalog) -> Self {
        let window = std::time::Duration::from_secs(60);
        Self::with_top(
            catalog,
            top::Top::new(top::DEFAULT_KEYS, window, top::DEFAULT_SAMPLE),
            Counters::new(Box::new([])),
        )
    }

    /// Counters for the commands of `catalog`, `top`, and the table's
    /// `counters`.
    pub fn with_top(catalog: &Catalog, top: top::Top, counters: Counters) -> Self {
        let per_command = || {
            (0..catalog.names.len())
                .map(|_| AtomicU64::new(0))
                .collect()
        };
        Stats {
            error_replies: AtomicU64::new(0),
            calls: per_command(),
            failed: per_command(),
            rejected: per_command(),
            errors: parking_lot::Mutex::new(Vec::new()),
            writes: catalog.writes.clone().into_boxed_slice(),
            decisions: Default::default(),
            units: Default::default(),
            near_limit: Default::default(),
            top,
            counters,
        }
    }
}

/// Index of an algorithm in the per-algorithm arrays.
fn algo_index(a: Algorithm) -> usize {
    a.index()
}

/// Decision counts of one algorithm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecisionCounts {
    pub allowed: u64,
    pub limited: u64,
    pub units: u64,
    pub near_limit: u64,
}

impl Stats {
    /// Algorithm `i`'s shared decision counters: admitted, denied, units,
    /// near-limit.
    fn decision_counters(&self, i: usize) -> [&AtomicU64; 4] {
        let [admitted, denied] = &self.decisions[i];
        [admitted, denied, &self.units[i], &self.near_limit[i]]
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds units a client chose (`RL.CHARGE` up to 2^63 - 1, a
    /// descriptor's `hits_addend` any u64) to a shared total that stops at
    /// [`MAX_USAGE`]: one add, and a total past it is set back to it (each
    /// term is within it, so only two adds racing there wrap, and both
    /// then store it).
    pub fn add_usage(counter: &AtomicU64, n: u64) {
        let before = counter.fetch_add(n, Ordering::Relaxed);
        if before.saturating_add(n) > MAX_USAGE {
            counter.store(MAX_USAGE, Ordering::Relaxed);
        }
    }

    pub fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Calls and failed calls of the command at table index `i`.
    pub fn command(&self, i: usize) -> (u64, u64) {
        (Self::read(&self.calls[i]), Self::read(&self.failed[i]))
    }

    /// Requests for the command at table index `i` refused before running.
    pub fn rejected(&self, i: usize) -> u64 {
        Self::read(&self.rejected[i])
    }

    /// Error replies per code, in code order (`INFO errorstats`).
    pub fn error_codes(&self) -> Vec<(ErrorCode, u64)> {
        self.errors.lock().clone()
    }

    /// Calls of write commands so far: a snapshot is due when this moved
    /// since the last one. Summed when asked (once a second), so the
    /// request path pays nothing for it.
    pub fn writes(&self) -> u64 {
        self.writes
            .iter()
            .zip(self.calls.iter())
            .filter(|(writes, _)| **writes)
            .map(|(_, calls)| Self::read(calls))
            .sum()
    }

    pub fn decisions(&self, a: Algorithm) -> DecisionCounts {
        let i = algo_index(a);
        DecisionCounts {
            allowed: Self::read(&self.decisions[i][0]),
            limited: Self::read(&self.decisions[i][1]),
            units: Self::read(&self.units[i]),
            near_limit: Self::read(&self.near_limit[i]),
        }
    }

    /// `CONFIG RESETSTAT` (with `metrics::Counters::reset`).
    pub fn reset(&self) {
        let all = [&self.error_replies]
            .into_iter()
            .chain(self.calls.iter())
            .chain(self.failed.iter())
            .chain(self.rejected.iter())
            .chain(self.decisions.iter().flatten())
            .chain(self.units.iter())
            .chain(self.near_limit.iter());
        for c in all {
            c.store(0, Ordering::Relaxed);
        }
        self.errors.lock().clear();
        self.top.reset();
        self.counters.reset();
    }
}

/// One connection's tally since its last flush.
#[derive(Debug)]
pub struct Local {
    error_replies: u64,
    /// Error replies by code since the last flush (few distinct ones).
    errors: Vec<(ErrorCode, u64)>,
    calls: Vec<u64>,
    failed: Vec<u64>,
    rejected: Vec<u64>,
    /// A bit per command whose `calls` or `failed` is not 0, so a flush
    /// visits the commands that ran, not the whole table (which cost
    /// about 5,000 instructions per flush, once per read: as much as the
    /// rest of a `PING`'s work).
    touched: Vec<u64>,
    decisions: [[u64; 2]; Algorithm::COUNT],
    units: [u64; Algorithm::COUNT],
    near_limit: [u64; Algorithm::COUNT],
    dirty: bool,
    /// The algorithms (bit [`algo_index`]) that counted a decision or
    /// units since the last flush.
    decided: u64,
    /// Decisions by key, for the heavy hitters' sketches ([`Stats::top`]).
    pub top: top::Pending,
    /// `--top-sample`, as of the last flush (1 until then: every
    /// admission counted, each weighing 1; 0 with the sketches off), and
    /// the draw that picks which.
    top_sample: u32,
    top_draw: u64,
}

impl Local {
    /// A tally for a table of `commands` commands.
    pub fn new(commands: usize) -> Self {
        Local {
            error_replies: 0,
            errors: Vec::new(),
            calls: vec![0; commands],
            failed: vec![0; commands],
            rejected: vec![0; commands],
            touched: vec![0; commands.div_ceil(64)],
            decisions: [[0; 2]; Algorithm::COUNT],
            units: [0; Algorithm::COUNT],
            near_limit: [0; Algorithm::COUNT],
            dirty: false,
            decided: 0,
            top: top::Pending::default(),
            top_sample: 1,
            top_draw: 0x9E37_79B9_7F4A_7C15,
        }
    }
}

impl Local {
    /// A command at table index `i` ran (`ok` = not answered with an error).
    pub fn command(&mut self, i: usize, ok: bool) {
        self.calls[i] += 1;
        self.failed[i] += !ok as u64;
        self.touched[i / 64] |= 1 << (i % 64);
        self.dirty = true;
    }

    /// A request for the command at table index `i` was refused before
    /// it ran.
    pub fn rejected(&mut self, i: usize) {
        self.rejected[i] += 1;
        self.touched[i / 64] |= 1 << (i % 64);
        self.dirty = true;
    }

    /// An error reply was written; `text` is its line without the `-`.
    pub fn error_reply(&mut self, text: &[u8]) {
        self.error_replies += 1;
        let code = ErrorCode::of(text);
        match self.errors.iter_mut().find(|(c, _)| *c == code) {
            Some((_, n)) => *n += 1,
            None => self.errors.push((code, 1)),
        }
        self.dirty = true;
    }

    /// A limiter decision; `charged` is the units it consumed (0 if denied).
    pub fn decision(&mut self, a: Algorithm, d: &Decision, charged: u64) {
        let i = algo_index(a);
        self.decisions[i][!d.allowed as usize] += 1;
        self.units[i] = add_usage(self.units[i], charged);
        // Less than a tenth of the limit left: a client close to its limit.
        if d.allowed && d.remaining.saturating_mul(10) < d.limit {
            self.near_limit[i] += 1;
        }
        self.dirty = true;
        self.decided |= 1 << i;
    }

    /// A decision on `key` for the heavy hitters (`RL.TOP`): `allowed` by
    /// the limit, a denial let through if `shadow`, under `policy` if one
    /// decided. Copies the key into a buffer this tally reuses.
    pub fn key_decision(
        &mut self,
        key: &[u8],
        allowed: bool,
        shadow: bool,
        policy: Option<&str>,
        at: crate::clock::Nanos,
    ) {
        // The sketches are off (`--top-keys 0`): nothing to note.
        if self.top_sample == 0 {
            return;
        }
        let kind = top::Kind::of(allowed, shadow);
        let mut weight = 1;
        if kind == top::Kind::Allowed && self.top_sample > 1 {
            // One admission in `top_sample`, at random: a fixed stride
            // would never count some keys of a client that cycles through
            // them.
            let draw = crate::util::lcg_step(&mut self.top_draw);
            if !(draw >> 32).is_multiple_of(u64::from(self.top_sample)) {
                return;
            }
            weight = self.top_sample;
        }
        self.top.note(kind, key, policy, at, weight);
    }

    /// Units consumed by one more limit of a multi-limit request.
    pub fn units(&mut self, a: Algorithm, charged: u64) {
        let i = algo_index(a);
        self.units[i] = add_usage(self.units[i], charged);
        self.dirty = true;
        self.decided |= 1 << i;
    }

    /// A tally for one script run that may be stopped and run again (see
    /// [`Local::enter_run`]).
    pub fn for_a_run(&self) -> Local {
        Local::new(self.calls.len())
    }

    /// Counts into `run`'s (empty) tally from now until
    /// [`Local::leave_run`]; `run` holds this one meanwhile.
    pub fn enter_run(&mut self, run: &mut Local) {
        run.top_sample = self.top_sample;
        run.top_draw = self.top_draw;
        std::mem::swap(self, run);
    }

    /// Counts here again, with the run's tally added (`keep`: the run
    /// counts) or forgotten (it was stopped to run again); `run` is left
    /// empty for the next. An abandoned run's commands, errors and
    /// decisions are not counted twice.
    pub fn leave_run(&mut self, run: &mut Local, keep: bool) {
        std::mem::swap(self, run);
        self.absorb(run, keep);
    }

    fn absorb(&mut self, run: &mut Local, keep: bool) {
        let add = |to: &mut u64, from: &mut u64| *to += std::mem::take(from) * keep as u64;
        add(&mut self.error_replies, &mut run.error_replies);
        for (code, n) in run.errors.drain(..) {
            if !keep {
                continue;
            }
            match self.errors.iter_mut().find(|(c, _)| *c == code) {
                Some((_, m)) => *m += n,
                None => self.errors.push((code, n)),
            }
        }
        if keep {
            for (to, from) in self.touched.iter_mut().zip(&run.touched) {
                *to |= from;
            }
        }
        for i in take_bits(&mut run.touched) {
            add(&mut self.calls[i], &mut run.calls[i]);
            add(&mut self.failed[i], &mut run.failed[i]);
            add(&mut self.rejected[i], &mut run.rejected[i]);
        }
        let decided = std::mem::take(&mut run.decided);
        for i in take_bits(&mut [decided]) {
            for (to, from) in self.decision_counters(i).zip(run.decision_counters(i)) {
                add(to, from);
            }
        }
        if keep {
            self.decided |= decided;
        }
        self.dirty |= std::mem::take(&mut run.dirty) && keep;
        if keep {
            self.top.append(&mut run.top);
            self.top_draw = run.top_draw;
        } else {
            run.top.clear();
        }
    }

    /// Algorithm `i`'s decision counters, in the order of
    /// [`Stats::decision_counters`]: admitted, denied, units, near-limit.
    fn decision_counters(&mut self, i: usize) -> impl Iterator<Item = &mut u64> {
        let [admitted, denied] = &mut self.decisions[i];
        [
            admitted,
            denied,
            &mut self.units[i],
            &mut self.near_limit[i],
        ]
        .into_iter()
    }

    /// Adds the tally to `stats` and clears it.
    pub fn flush(&mut self, stats: &Stats) {
        self.top_sample = match stats.top.keys() {
            0 => 0,
            _ => stats.top.sample(),
        };
        if !self.top.is_empty() {
            self.top.flush(&stats.top);
        }
        if !self.dirty {
            return;
        }
        if self.error_replies != 0 {
            stats
                .error_replies
                .fetch_add(self.error_replies, Ordering::Relaxed);
            self.error_replies = 0;
            let mut shared = stats.errors.lock();
            for (code, n) in self.errors.drain(..) {
                match shared.binary_search_by(|(c, _)| c.cmp(&code)) {
                    Ok(i) => shared[i].1 += n,
                    Err(i) if shared.len() < ERROR_CODES_MAX => shared.insert(i, (code, n)),
                    Err(_) => {}
                }
            }
        }
        for i in take_bits(&mut self.touched) {
            for (local, shared) in [
                (&mut self.calls[i], &stats.calls[i]),
                (&mut self.failed[i], &stats.failed[i]),
                (&mut self.rejected[i], &stats.rejected[i]),
            ] {
                if *local != 0 {
                    shared.fetch_add(*local, Ordering::Relaxed);
                    *local = 0;
                }
            }
        }
        self.dirty = false;
        // Only the algorithms that decided: with one request a batch (no
        // pipelining) this runs per request, and walking all twenty
        // counters cost more than the request's decision.
        for i in take_bits(&mut [std::mem::take(&mut self.decided)]) {
            for (local, shared) in self.decision_counters(i).zip(stats.decision_counters(i)) {
                if *local != 0 {
                    Stats::add_usage(shared, *local);
                    *local = 0;
                }
            }
        }
    }
}

const _: () = assert!(Algorithm::COUNT <= 64, "Local::decided is one word");

/// The indexes of the bits set in `bits` (a tally's touched commands, its
/// algorithms that decided), lowest first, clearing them as they are
/// taken.
fn take_bits(bits: &mut [u64]) -> impl Iterator<Item = usize> + '_ {
    bits.iter_mut().enumerate().flat_map(|(w, word)| {
        std::iter::from_fn(move || {
            if *word == 0 {
                return None;
            }
            let i = w * 64 + word.trailing_zeros() as usize;
            *word &= *word - 1;
            Some(i)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shared counters for a table of `n` commands.
    fn stats_for(n: usize) -> Stats {
        Stats::new(&Catalog {
            names: vec!["cmd"; n],
            writes: vec![false; n],
        })
    }

    #[test]
    fn a_run_counts_only_if_it_is_kept() {
        let n = 70;
        let stats = stats_for(n);
        let mut local = Local::new(n);
        let mut run = local.for_a_run();
        local.command(1, true);
        for keep in [false, true] {
            local.enter_run(&mut run);
            local.command(65, false);
            local.error_reply(b"ERR no");
            let d = Decision {
                allowed: true,
                limit: 10,
                remaining: 8,
                retry_after: None,
                reset_after: 0,
            };
            local.decision(Algorithm::Gcra, &d, 2);
            local.leave_run(&mut run, keep);
        }
        local.flush(&stats);
        assert_eq!(stats.command(1), (1, 0));
        assert_eq!(
            stats.command(65),
            (1, 1),
            "the abandoned run's call is not counted"
        );
        assert_eq!(stats.error_replies.load(Ordering::Relaxed), 1);
        assert_eq!(
            stats.units[algo_index(Algorithm::Gcra)].load(Ordering::Relaxed),
            2
        );
    }

    /// Only the algorithms that decided are walked at a flush: each lands
    /// in its own counters, the others stay 0, and a second flush adds
    /// nothing.
    #[test]
    fn a_flush_publishes_each_algorithm_that_decided() {
        let stats = stats_for(1);
        let mut local = Local::new(1);
        let d = |allowed, remaining| Decision {
            allowed,
            limit: 10,
            remaining,
            retry_after: None,
            reset_after: 0,
        };
        local.decision(Algorithm::Window, &d(true, 0), 3);
        local.decision(Algorithm::Window, &d(false, 0), 0);
        local.decision(Algorithm::Fixed, &d(true, 5), 1);
        for _ in 0..2 {
            local.flush(&stats);
            for a in Algorithm::ALL {
                let i = algo_index(a);
                let got = stats
                    .decision_counters(i)
                    .map(|c| c.load(Ordering::Relaxed));
                let want = match a {
                    Algorithm::Window => [1, 1, 3, 1],
                    Algorithm::Fixed => [1, 0, 1, 0],
                    _ => [0; 4],
                };
                assert_eq!(got, want, "{a:?}");
            }
        }
    }

    #[test]
    fn a_flush_publishes_every_command_that_ran_once() {
        let n = 130;
        let stats = stats_for(n);
        let mut local = Local::new(n);
        // Both sides of each 64-bit word of the touched set.
        let ran = [0, 1, 63, 64, 65, n - 1];
        for (k, &i) in ran.iter().enumerate() {
            for _ in 0..=k {
                local.command(i, k % 2 == 0);
            }
        }
        local.flush(&stats);
        for (k, &i) in ran.iter().enumerate() {
            let failed = if k % 2 == 0 { 0 } else { k as u64 + 1 };
            assert_eq!(stats.command(i), (k as u64 + 1, failed), "command {i}");
        }
        let others: u64 = (0..n)
            .filter(|i| !ran.contains(i))
            .map(|i| stats.command(i).0)
            .sum();
        assert_eq!(others, 0);
        // Nothing is published twice.
        local.command(1, true);
        local.flush(&stats);
        local.flush(&stats);
        assert_eq!(stats.command(1), (3, 2));
        assert_eq!(stats.command(64), (4, 4));
    }
}
