//! Moving a key's value between servers: DUMP, RESTORE, RESTORE-ASKING and
//! MIGRATE. The payload is `store/dump.rs`'s (the record codec's bytes,
//! versioned and checksummed), so any key Turnstile holds, limiter state
//! included, moves whole.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::args::{int, is};
use super::{CmdError, Ctx};
use crate::protocol::Request;
use crate::store::dump;
use crate::store::entry::passed;
use crate::store::keys::Keys;
use crate::util::sockets::SocketCache;

/// ```text
/// DUMP key
/// ```
/// The key's value as a payload only RESTORE on a Turnstile reads; nil
/// when the key is absent.
pub fn dump(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    match ctx.db.get(req.arg(1), ctx.now, dump::encode) {
        Some(payload) => ctx.out.bulk(&payload),
        None => ctx.out.null(),
    }
    Ok(())
}

/// ```text
/// DEBUG DIGEST-VALUE key [key ...]
/// ```
/// Each key's value digest, 40 hex digits (forty zeros for a key that is
/// absent), as Redis replies: `redis-cli --cluster fix` compares the two
/// copies of a key that a move interrupted by a crash left on both nodes,
/// and replaces the importing node's only when they are equal. The digest
/// is SHA-1 over the key's DUMP payload, so equal values (limiter state
/// included) give equal digests. DIGEST-VALUE is the only subcommand: the
/// others Redis has crash, reload or stall a server, which no client of a
/// limiter needs (Redis refuses DEBUG by default for them).
pub fn debug(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let sub = req.arg(1);
    if !is(sub, "digest-value") {
        return Err(CmdError::UnknownSubcommand {
            sub: String::from_utf8_lossy(sub).into_owned(),
            cmd: "DEBUG".into(),
        });
    }
    ctx.out.array(req.len() - 2);
    for j in 2..req.len() {
        let digest = ctx.db.get(req.arg(j), ctx.now, |e| {
            crate::script::sha1hex(&dump::encode(e))
        });
        let hex = digest.as_ref().map_or(ZERO_DIGEST, |d| {
            std::str::from_utf8(d).expect("hex digits are ASCII")
        });
        ctx.out.simple(hex);
    }
    Ok(())
}

const ZERO_DIGEST: &str = "0000000000000000000000000000000000000000";

/// ```text
/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]
/// RESTORE-ASKING key ttl payload [...]
/// ```
/// Creates `key` from a DUMP payload, with `ttl` ms to live (0: none;
/// with ABSTTL, a Unix time in ms). IDLETIME and FREQ are checked as Redis
/// checks them and otherwise ignored: no eviction policy here reads them.
/// The checks come in Redis's order (options, BUSYKEY, TTL, payload); the
/// write is one store update, so it reaches replicas and the append-only
/// file as any write does.
pub fn restore(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let (mut replace, mut absttl, mut idle, mut freq) = (false, false, false, false);
    let mut j = 4;
    while j < req.len() {
        let (arg, more) = (req.arg(j), req.len() - j - 1);
        if is(arg, "replace") {
            replace = true;
        } else if is(arg, "absttl") {
            absttl = true;
        } else if is(arg, "idletime") && more >= 1 && !freq {
            if int(req, j + 1)? < 0 {
                return Err(CmdError::err("Invalid IDLETIME value, must be >= 0"));
            }
            (idle, j) = (true, j + 1);
        } else if is(arg, "freq") && more >= 1 && !idle {
            if !(0..=255).contains(&int(req, j + 1)?) {
                return Err(CmdError::err("Invalid FREQ value, must be >= 0 and <= 255"));
            }
            (freq, j) = (true, j + 1);
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let ttl = int(req, 2);
    // Decoded before the lock is taken: a large payload holds no shard.
    let entry = dump::decode(req.arg(3));
    let now = ctx.now;
    ctx.db.update(req.arg(1), now, |slot| {
        if !replace && slot.is_some() {
            return Err(CmdError::Prefixed(
                "BUSYKEY Target key name already exists.".into(),
            ));
        }
        let ttl = ttl?;
        if ttl < 0 {
            return Err(CmdError::err("Invalid TTL value, must be >= 0"));
        }
        let mut entry = entry.map_err(|e| CmdError::err(e.to_string()))?;
        let at_ms = match ttl as u64 {
            0 => None,
            t if absttl => Some(t),
            t => Some(now.as_millis().saturating_add(t)),
        };
        match at_ms {
            // Already past: as in Redis, the key is only deleted (REPLACE).
            Some(at) if passed(at, now) => *slot = None,
            _ => {
                entry.set_expiry_ms(at_ms);
                *slot = Some(entry);
            }
        }
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

/// What MIGRATE was asked to do.
struct Migration<'r> {
    host: &'r [u8],
    port: &'r [u8],
    timeout: Duration,
    copy: bool,
    replace: bool,
    /// AUTH's (user, password): user `None` for AUTH, given for AUTH2.
    auth: Option<(Option<&'r [u8]>, &'r [u8])>,
    keys: Vec<&'r [u8]>,
}

/// Reads MIGRATE's arguments, in Redis's order of checks.
fn migration<'r>(req: &'r Request<'_>) -> Result<Migration<'r>, CmdError> {
    let (mut copy, mut replace, mut auth) = (false, false, None);
    let mut keys = vec![req.arg(3)];
    let mut j = 6;
    while j < req.len() {
        let (arg, more) = (req.arg(j), req.len() - 1 - j);
        if is(arg, "copy") {
            copy = true;
        } else if is(arg, "replace") {
            replace = true;
        } else if is(arg, "auth") && more >= 1 {
            auth = Some((None, req.arg(j + 1)));
            j += 1;
        } else if is(arg, "auth2") && more >= 2 {
            auth = Some((Some(req.arg(j + 1)), req.arg(j + 2)));
            j += 2;
        } else if is(arg, "keys") {
            if !req.arg(3).is_empty() {
                return Err(CmdError::err(
                    "When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            keys = req.args().skip(j + 1).collect();
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let timeout = int(req, 5)?;
    let db = int(req, 4)?;
    if db != 0 {
        // One database, as SELECT says.
        return Err(CmdError::err("DB index is out of range"));
    }
    Ok(Migration {
        host: req.arg(1),
        port: req.arg(2),
        // Redis's default for a timeout of 0 or less.
        timeout: Duration::from_millis(if timeout <= 0 { 1000 } else { timeout as u64 }),
        copy,
        replace,
        auth,
        keys,
    })
}

/// ```text
/// MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
///     [AUTH password | AUTH2 username password] [KEYS key [key ...]]
/// ```
/// Moves keys to another server: RESTORE-ASKING for each (REPLACE if
/// asked), pipelined in one write after AUTH, then deletes each key the
/// target took (unless COPY). Each key is decided by one node at any
/// instant: the keys' shards stay write-locked from their DUMP through
/// the target's replies and the deletes, so no admission on the source
/// slips between the state read and its removal. The round trip runs on
/// this thread, off the async worker (`Store::blocking_section`): the
/// locks are `parking_lot` guards of this thread, which a parked command
/// answered later could only keep by handing them to another thread or
/// letting them go across the wait. Waits are bounded by `timeout` (the
/// connect, the write, and each reply); the locks go when it does.
pub fn migrate(ctx: &mut Ctx<'_>, req: &Request<'_>) -> Result<(), CmdError> {
    let m = migration(req)?;
    let now = ctx.now;
    // In a growing cluster, wait for requests that found their keys here
    // to finish, and hold the next ones until the move is done (they then
    // find the keys gone and are sent on with ASK).
    let node = ctx.state.cluster_node.clone();
    let store = &ctx.state.store;
    let _gate = node
        .as_ref()
        .map(|n| n.close_gate(&mut |wait| store.blocking_section(wait)));
    let mut lock = ctx.db.lock_many(m.keys.iter().copied());
    // Each live key's payload and TTL (0: none; at least 1 ms, as Redis).
    let mut moving = Vec::new();
    for &key in &m.keys {
        let found = lock.get(key, now, |e| {
            (dump::encode(e), e.pttl_ms(now).map_or(0, |ms| ms.max(1)))
        });
        if let Some((payload, ttl)) = found {
            moving.push((key, payload, ttl));
        }
    }
    if moving.is_empty() {
        ctx.out.simple("NOKEY");
        return Ok(());
    }
    let mut batch = Vec::new();
    let mut replies = moving.len();
    if let Some((user, password)) = m.auth {
        let mut args = vec![&b"AUTH"[..]];
        args.extend(user);
        args.push(password);
        command(&mut batch, &args);
        replies += 1;
    }
    for (key, payload, ttl) in &moving {
        let ttl = ttl.to_string();
        let mut args = vec![&b"RESTORE-ASKING"[..], key, ttl.as_bytes(), payload];
        if m.replace {
            args.push(b"REPLACE");
        }
        command(&mut batch, &args);
    }
    let outcome = round_trip(&m, &batch, replies, &ctx.state.migrate_sockets, &|wait| {
        ctx.state.store.blocking_section(wait)
    });
    // The AUTH reply first: refused, nothing was restored.
    let mut answers = outcome?.into_iter();
    if m.auth.is_some() {
        if let Some(Reply::Error(e)) = answers.next() {
            return Err(from_target(&e));
        }
    }
    let mut first_error = None;
    let mut lost = false;
    for (key, _, _) in &moving {
        match answers.next() {
            Some(Reply::Ok) if !m.copy => {
                lock.update(key, now, |e| *e = None);
            }
            Some(Reply::Ok) => {}
            Some(Reply::Error(e)) => {
                first_error.get_or_insert(e);
            }
            None => lost = true,
        }
    }
    drop(lock);
    if lost {
        return Err(Failure::Read.into());
    }
    match first_error {
        Some(e) => Err(from_target(&e)),
        None => {
            ctx.out.ok();
            Ok(())
        }
    }
}

/// A reply line from the target.
enum Reply {
    Ok,
    Error(Vec<u8>),
}

/// Why the round trip failed, in Redis's words.
#[derive(Debug)]
enum Failure {
    Connect,
    Write,
    Read,
}

impl From<Failure> for CmdError {
    fn from(f: Failure) -> Self {
        CmdError::Prefixed(
            match f {
                Failure::Connect => "IOERR error or timeout connecting to the client",
                Failure::Write => "IOERR error or timeout writing to target instance",
                Failure::Read => "IOERR error or timeout reading to target instance",
            }
            .into(),
        )
    }
}

fn from_target(e: &[u8]) -> CmdError {
    CmdError::err(format!(
        "Target instance replied with error: {}",
        String::from_utf8_lossy(e)
    ))
}

/// One command as a RESP array of bulk strings.
fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// The longest reply line read from a target: a RESTORE's reply is a
/// status or an error line.
const MAX_LINE: usize = 64 * 1024;

/// How long `MIGRATE` waits for its target's replies on the async worker
/// before it moves the wait off it (`Store::blocking_section`). A target
/// on the same host or network answers a batch within it (the round trip
/// of `redis-cli --cluster reshard`'s batches is ~0.1 ms here), and moving
/// the worker to another thread, two thread wake-ups, cost more than the
/// round trip: with every wait moved, a reshard's source node switched
/// threads 1.7 times as often and spent 1.6 times the CPU. Redis waits
/// the whole round trip in its one thread; a slow or silent target still
/// holds no worker longer than this.
const ON_WORKER: Duration = Duration::from_millis(1);

/// The largest batch written on the worker: a socket's send buffer takes
/// it at once. A larger one may wait for the target to read, so it is
/// written off the worker with its replies read there.
const ON_WORKER_BATCH: usize = 16 * 1024;

/// How a long wait leaves the worker (`Store::blocking_section`).
type OffWorker<'a> = &'a dyn Fn(&mut dyn FnMut());

/// Writes `batch` to the target and reads up to `replies` reply lines,
/// each within `m.timeout`. Replies read before a failure are returned
/// (their keys were restored); a failure before the first is the error.
/// The connection is one kept from an earlier call if there is one (a
/// cached connection the target has closed fails at once, and the batch
/// goes once more on a new one, as Redis retries), and is kept for the
/// next call when every reply came back. A small batch is written, and
/// its replies awaited for [`ON_WORKER`], on this thread; the rest of a
/// wait, a connect and a large batch run through `off`.
fn round_trip(
    m: &Migration<'_>,
    batch: &[u8],
    replies: usize,
    cache: &SocketCache,
    off: OffWorker<'_>,
) -> Result<Vec<Reply>, Failure> {
    let host = std::str::from_utf8(m.host).map_err(|_| Failure::Connect)?;
    // As Redis's atoi: a port that is no number connects nowhere.
    let port: u16 = std::str::from_utf8(m.port)
        .ok()
        .and_then(|p| p.parse().ok())
        .ok_or(Failure::Connect)?;
    if let Some(stream) = cache.take(host, port) {
        let started = Instant::now();
        match exchange(stream, m, batch, replies, off) {
            Ok((answers, kept)) => {
                if let Some(stream) = kept {
                    cache.put(host, port, stream);
                }
                return Ok(answers);
            }
            // Not a timeout: the target closed it while it was idle.
            Err(_) if started.elapsed() < m.timeout => {}
            Err(f) => return Err(f),
        }
    }
    let mut stream = Err(Failure::Connect);
    off(&mut || stream = connect(host, port, m.timeout));
    let (answers, kept) = exchange(stream?, m, batch, replies, off)?;
    if let Some(stream) = kept {
        cache.put(host, port, stream);
    }
    Ok(answers)
}

fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, Failure> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|_| Failure::Connect)?;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            // Redis connects without blocking and hears of a refusal at
            // its first write.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(Failure::Write)
            }
            Err(_) => {}
        }
    }
    Err(Failure::Connect)
}

/// One exchange on `stream`: the replies, and the stream back if it ended
/// clean (every reply read, nothing left over) for the next call to use.
fn exchange(
    stream: TcpStream,
    m: &Migration<'_>,
    batch: &[u8],
    replies: usize,
    off: OffWorker<'_>,
) -> Result<(Vec<Reply>, Option<TcpStream>), Failure> {
    let mut x = Exchange {
        reader: BufReader::new(stream),
        answers: Vec::with_capacity(replies),
        line: Vec::new(),
        replies,
        timeout: m.timeout,
        broken: false,
    };
    let small = batch.len() <= ON_WORKER_BATCH;
    if small {
        x.write(batch)?;
        if x.read(Some(Instant::now() + ON_WORKER)) {
            return x.finish();
        }
    }
    let mut written = Ok(());
    off(&mut || {
        if !small {
            written = x.write(batch);
        }
        if written.is_ok() {
            x.read(None);
        }
    });
    written?;
    x.finish()
}

/// The replies of one exchange as they are read, which may go on in
/// another thread than the one it started in.
struct Exchange {
    reader: BufReader<TcpStream>,
    answers: Vec<Reply>,
    /// The reply line read so far.
    line: Vec<u8>,
    replies: usize,
    timeout: Duration,
    /// A reply did not come, or came as no status or error line.
    broken: bool,
}

impl Exchange {
    fn write(&mut self, batch: &[u8]) -> Result<(), Failure> {
        let stream = self.reader.get_mut();
        stream
            .set_write_timeout(Some(self.timeout))
            .map_err(|_| Failure::Write)?;
        stream.write_all(batch).map_err(|_| Failure::Write)
    }

    /// Reads replies, each within the timeout, until every one came or
    /// one failed (true), or until `until` passed first (false: the wait
    /// goes on with the next call).
    fn read(&mut self, until: Option<Instant>) -> bool {
        let mut reply_started = Instant::now();
        while self.answers.len() < self.replies && !self.broken {
            let deadline = reply_started + self.timeout;
            let limit = until.map_or(deadline, |u| u.min(deadline));
            match self.read_line(limit) {
                Some(true) => {
                    match parse_reply(&self.line) {
                        Some(r) => self.answers.push(r),
                        None => self.broken = true,
                    }
                    self.line.clear();
                    reply_started = Instant::now();
                }
                // The worker's share of the wait is over, not the reply's.
                Some(false) if until.is_some_and(|u| u < deadline) => return false,
                _ => self.broken = true,
            }
        }
        true
    }

    /// Adds to `line` until it ends: `Some(true)` once it does,
    /// `Some(false)` when `limit` passed first, `None` on a closed or
    /// failed connection or a line over [`MAX_LINE`].
    fn read_line(&mut self, limit: Instant) -> Option<bool> {
        loop {
            if self.reader.buffer().is_empty() {
                // Only a read that must wait is given a timeout: the
                // replies of a batch mostly arrive in one segment.
                let Some(left) = limit.checked_duration_since(Instant::now()) else {
                    return Some(false);
                };
                self.reader
                    .get_ref()
                    .set_read_timeout(Some(left.max(Duration::from_micros(1))))
                    .ok()?;
            }
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Some(false)
                }
                Err(_) => return None,
            };
            if buf.is_empty() {
                return None;
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            self.line.extend_from_slice(&buf[..take]);
            self.reader.consume(take);
            if self.line.len() > MAX_LINE {
                return None;
            }
            if done {
                return Some(true);
            }
        }
    }

    /// The replies read, and the stream if it is clean for the next call.
    fn finish(self) -> Result<(Vec<Reply>, Option<TcpStream>), Failure> {
        if self.answers.is_empty() && self.replies > 0 {
            return Err(Failure::Read);
        }
        let clean = !self.broken && self.reader.buffer().is_empty();
        Ok((self.answers, clean.then(|| self.reader.into_inner())))
    }
}

/// A status or error line (a reply that is neither is no confirmation
/// that a key was restored, so its key stays).
fn parse_reply(line: &[u8]) -> Option<Reply> {
    let body = line.strip_suffix(b"\r\n")?;
    match body.split_first()? {
        (b'+', _) => Some(Reply::Ok),
        (b'-', e) => Some(Reply::Error(e.to_vec())),
        _ => None,
    }
}

/// MIGRATE's keys: the third argument, or, when it is empty, every one
/// after KEYS (for cluster routing and `--maxmemory`, as `COMMAND GETKEYS`
/// finds them in Redis).
pub fn migrate_keys(args: &[&[u8]]) -> Vec<usize> {
    match args.get(3) {
        Some(key) if !key.is_empty() => vec![3],
        Some(_) => match args.iter().skip(6).position(|a| is(a, "keys")) {
            Some(at) => (at + 7..args.len()).collect(),
            None => Vec::new(),
        },
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::harness::{encode_request, Harness};

    /// Waits the store moved off the worker (its `blocking_section`).
    static MOVED: AtomicUsize = AtomicUsize::new(0);

    fn counted(wait: &mut dyn FnMut()) {
        MOVED.fetch_add(1, Ordering::SeqCst);
        wait();
    }

    /// A target answering `+OK` to every RESTORE-ASKING it reads, on a
    /// thread of its own; `silent`: reads and never answers.
    fn target(silent: bool) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        if silent {
                            continue;
                        }
                        let asked = buf[..n]
                            .windows(14)
                            .filter(|w| w == b"RESTORE-ASKING")
                            .count();
                        if conn.write_all(&b"+OK\r\n".repeat(asked)).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    /// A target that answers at once is waited for on the worker: moving
    /// the wait off it costs two thread wake-ups per MIGRATE, more than
    /// the round trip. A target that does not answer within the worker's
    /// share of the wait is waited for off it, until the timeout.
    #[test]
    fn migrate_waits_for_a_prompt_target_on_its_thread_and_for_a_slow_one_off_it() {
        let mut h = Harness::new(crate::clock::Nanos(
            1_700_000_000 * crate::clock::Nanos::PER_SEC,
        ));
        h.state.store.set_blocking(counted);
        let port = target(false).to_string();
        const MOVES: usize = 20;
        for i in 0..MOVES {
            let key = format!("k{i}");
            assert_eq!(h.feed(&encode_request(&["SET", &key, "v"])), b"+OK\r\n");
            let reply = h.feed(&encode_request(&[
                "MIGRATE",
                "127.0.0.1",
                &port,
                &key,
                "0",
                "5000",
            ]));
            assert_eq!(reply, b"+OK\r\n", "{}", String::from_utf8_lossy(&reply));
        }
        assert_eq!(h.feed(&encode_request(&["DBSIZE"])), b":0\r\n");
        // The first call connects off the worker; a thread preempted now
        // and then on a busy machine may miss the short wait.
        let moved = MOVED.swap(0, Ordering::SeqCst);
        assert!(moved < MOVES / 2, "{moved} of {MOVES} waits moved");

        let port = target(true).to_string();
        assert_eq!(h.feed(&encode_request(&["SET", "kept", "v"])), b"+OK\r\n");
        let reply = h.feed(&encode_request(&[
            "MIGRATE",
            "127.0.0.1",
            &port,
            "kept",
            "0",
            "200",
        ]));
        assert_eq!(
            reply,
            b"-IOERR error or timeout reading to target instance\r\n"
        );
        // The connect and the rest of the wait.
        assert_eq!(MOVED.swap(0, Ordering::SeqCst), 2);
        assert_eq!(h.feed(&encode_request(&["EXISTS", "kept"])), b":1\r\n");
    }
}
