//! The append-only file (`--appendonly yes`): every write's effect, so a
//! crash loses at most what `--appendfsync` allows, not everything since
//! the last snapshot.
//!
//! The record is the replication stream (`store/effects.rs`): each write
//! leaves its key's resulting state (or its deletion) in the stream under
//! the key's shard lock, and the stream is also kept for this file while
//! it is on. The file is a base, then the stream from the base on:
//!
//! ```text
//! base    a snapshot (store/snapshot.rs: header, records, trailer with CRC)
//! marker  "TSAOF2\r\n": the tail is in checksummed blocks
//! tail    blocks, one per write of the file:
//!           len: u32 (LE)  crc: u32 (LE, CRC-32 of the 4 len bytes)
//!           payload[len]   crc: u32 (LE, CRC-32 of the payload)
//!         the payload: effects frames, whole, as the replication stream
//!         carries them: kind: u8  len: u32 (LE)  body[len]
//!           1 SET  one snapshot record   2 DEL  key   3 FLUSH
//!           4 PING, 5 GETACK (a replica's stream carries them; skipped)
//! ```
//!
//! Only the last block may be torn (its bytes run past the end of the
//! file, or it ends the file and its payload does not check, as a file
//! extended by a crash before its last pages were written reads); any
//! other block that does not check is corruption, and the server refuses
//! to start naming its byte, the file untouched. The length has its own
//! checksum so that a flipped length mid-file is not taken for a torn
//! tail. A file without the marker (written before it existed: frames
//! straight after the base) still loads, and is rewritten in this format
//! before anything is appended to it.
//!
//! One server per file: a lock (`flock`) on `NAME.lock` beside it, held
//! while the file is on, makes a second server refuse to start (two
//! writers would overwrite each other's records). The file is opened
//! `O_APPEND | O_NOFOLLOW`, and temporary files of a rewrite cut short
//! (`.NAME.tmp-*`) are removed once the lock is held.
//!
//! A state is idempotent, so a base walked while writes go on, followed by
//! every effect from the walk's start, converges to the keyspace (the
//! argument a replica's full copy rests on). A rewrite (`BGREWRITEAOF`, or
//! the file past `auto-aof-rewrite-*`) writes a fresh base to a temporary
//! file while the old file keeps growing, keeps the effects written since
//! its start in memory, appends them to the new file under the writer's
//! lock, fsyncs, and renames it over the old one (then fsyncs the
//! directory): a crash at any point leaves one whole file.
//!
//! Acknowledgement: with `always`, a connection writes no reply before the
//! file holds, fsynced, every effect in the stream when its batch ended
//! ([`Aof::wait_durable`]); one fsync covers every connection waiting
//! (group commit). With `everysec` and `no` the writer thread is asked to
//! write after each batch and replies go at once; `everysec` fsyncs once a
//! second, `no` leaves it to the OS.
//!
//! A write that fails (a full disk): with `always` the server exits (the
//! writer thread, `server/aof.rs`), no reply for what was not written
//! having gone out; with `everysec` and `no`, write commands are refused
//! with Redis's `-MISCONF` ([`Aof::write_error`]) until a write succeeds
//! again, so what is acknowledged is what the file can take. What waits
//! for the file is bounded ([`MAX_PENDING`]).

use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::clock::Nanos;
use crate::store::snapshot::{self, ErrorKind};
use crate::store::Store;

mod format;
mod lock;
pub use format::{encode_blocks, replay, ReplayError, Replayed, TAIL_MAGIC};

/// While writes come, how often the writer thread writes them to the file
/// with `everysec` or `no` (a crash of the process loses at most this much
/// of what was acknowledged; of the machine, what was not fsynced).
pub const BUSY_POLL: Duration = Duration::from_millis(1);

/// The most the writer keeps for the file while writes fail. Writes are
/// refused then, but a replica applies its primary's stream and keys
/// expire: past this the bytes are dropped, and the file is started again
/// from a fresh base (which holds their effects) once the disk takes one.
pub const MAX_PENDING: usize = 64 << 20;

/// `--appendfsync`, as Redis names its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Fsync {
    /// Before any reply that follows a write.
    Always = 0,
    /// Once a second, in the background.
    #[default]
    Everysec = 1,
    /// When the OS decides.
    No = 2,
}

impl Fsync {
    pub const NAMES: [&'static str; 3] = ["always", "everysec", "no"];

    pub fn parse(s: &str) -> Result<Fsync, String> {
        match s.to_ascii_lowercase().as_str() {
            "always" => Ok(Fsync::Always),
            "everysec" => Ok(Fsync::Everysec),
            "no" => Ok(Fsync::No),
            _ => Err("argument(s) must be one of the following: always, everysec, no".into()),
        }
    }

    pub fn from_index(i: u8) -> Fsync {
        match i {
            0 => Fsync::Always,
            2 => Fsync::No,
            _ => Fsync::Everysec,
        }
    }

    pub fn name(self) -> &'static str {
        Fsync::NAMES[self as usize]
    }
}

/// An append-only file that cannot be loaded: the server refuses to start
/// rather than serve with limits forgotten. Names the file, the byte and
/// the way out.
#[derive(Debug, thiserror::Error)]
pub enum AofError {
    #[error("append-only file {}: {kind} (in its base, a snapshot)", path.display())]
    Base { path: PathBuf, kind: ErrorKind },
    #[error("append-only file {}: corrupted at byte {at}: {why}; restore it from a backup, or truncate it to {at} bytes to keep what precedes (what follows is lost)", path.display())]
    Corrupt { path: PathBuf, at: u64, why: String },
    #[error("append-only file {}: the last record is torn at byte {at} (a write cut short by a crash); start with --aof-load-truncated yes to load up to it and truncate the rest", path.display())]
    Torn { path: PathBuf, at: u64 },
    #[error("append-only file {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("append-only file {}: another server has it open (it holds the lock {}); two servers on one file would overwrite each other's writes", path.display(), lock.display())]
    Locked { path: PathBuf, lock: PathBuf },
    #[error("append-only file {}: is a symbolic link; it is not followed (as snapshots are not): point --snapshot's directory at the real file", path.display())]
    Symlink { path: PathBuf },
}

/// The file, and the bytes of the stream on their way to it.
#[derive(Debug, Default)]
struct Writer {
    file: Option<File>,
    /// Bytes in the file, all whole frames.
    len: u64,
    /// Taken from the stream, not yet written (kept after a failed write,
    /// to be written again).
    pending: Vec<u8>,
    /// Number of the last byte of the stream in `pending` (or written).
    end: u64,
    /// Written but not fsynced.
    dirty: bool,
    /// A rewrite is on: what is written meanwhile, for the new file.
    tail: Option<Vec<u8>>,
    /// The blocks of one write, reused.
    blocks: Vec<u8>,
    /// The file lacks effects it should hold (dropped past
    /// [`MAX_PENDING`], or a failed write that could not be cut off):
    /// only a fresh base brings it back.
    need_base: bool,
}

#[derive(Debug, Default)]
struct Wake {
    rewrite: bool,
    stop: bool,
}

/// The append-only file of one server.
pub struct Aof {
    path: PathBuf,
    /// Open and taking the stream: `always` connections wait on it.
    on: AtomicBool,
    /// `--appendfsync` in force, an [`Fsync`] (read by every reply write).
    fsync: AtomicU8,
    /// `CONFIG SET appendonly yes` was answered and the base is not in
    /// place yet: `always` replies wait for it.
    starting: AtomicBool,
    writer: Mutex<Writer>,
    /// Stream offsets: the last byte the file holds (written), and the last
    /// it holds fsynced.
    written: AtomicU64,
    synced: AtomicU64,
    /// The highest offset a connection asked to be written.
    requested: AtomicU64,
    /// The writer thread found nothing to write and sleeps until asked:
    /// only then does a connection with `everysec` or `no` wake it (while
    /// writes come, it looks every [`BUSY_POLL`] instead, so a reply costs
    /// no wake-up of another thread).
    idle: AtomicBool,
    /// What else the writer thread is asked (a rewrite, to stop), read
    /// when it wakes.
    wake: Mutex<Wake>,
    /// The writer thread, which sleeps in [`Aof::wait`] until unparked:
    /// a connection wakes it without a lock (a token left by `unpark`
    /// makes a sleep that had not begun return at once, so none is lost).
    sleeper: std::sync::OnceLock<std::thread::Thread>,
    /// The writer thread is about to sleep, or sleeps: a connection that
    /// asks for a write unparks it only then.
    sleeping: AtomicBool,
    /// Woken after each write of the file: `always` connections wait on it.
    pub durable: tokio::sync::Notify,
    rewriting: AtomicBool,
    pub last_rewrite_ok: AtomicBool,
    pub last_write_ok: AtomicBool,
    /// The last failed write's `errno` (for `-MISCONF` and the log).
    last_errno: AtomicI32,
    /// Write commands are refused (`-MISCONF`): the file is on and its
    /// last write failed. One load on every write command.
    refusing: AtomicBool,
    /// Bytes taken from the stream and not yet in the file.
    pub pending: AtomicU64,
    /// The lock on `NAME.lock` beside the file, held while it is on.
    lock: Mutex<Option<File>>,
    /// For tests: writes fail with this `errno` (0: they do not).
    fail_with: AtomicI32,
    /// What a failed write under `always` does instead of exiting (tests).
    on_fatal: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    pub rewrites: AtomicU64,
    /// Rewrites that failed (the old file stayed), for `/metrics`.
    pub rewrite_failures: AtomicU64,
    pub last_rewrite_secs: AtomicU64,
    pub size: AtomicU64,
    pub base_size: AtomicU64,
    /// Since when (µs after `epoch`, plus one; 0: nothing) effects taken
    /// for the file have waited to be in it as `appendfsync` promises
    /// (fsynced; written, with `no`). Set and cleared under the writer's
    /// lock; read by a scrape without it ([`Aof::fsync_lag`]).
    owed_since: AtomicU64,
    epoch: Instant,
}

impl Aof {
    pub fn new(path: PathBuf) -> Aof {
        Aof {
            path,
            on: AtomicBool::new(false),
            fsync: AtomicU8::new(Fsync::Everysec as u8),
            starting: AtomicBool::new(false),
            writer: Mutex::new(Writer::default()),
            written: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            requested: AtomicU64::new(0),
            idle: AtomicBool::new(true),
            wake: Mutex::new(Wake::default()),
            sleeper: std::sync::OnceLock::new(),
            sleeping: AtomicBool::new(false),
            durable: tokio::sync::Notify::new(),
            rewriting: AtomicBool::new(false),
            last_rewrite_ok: AtomicBool::new(true),
            last_write_ok: AtomicBool::new(true),
            last_errno: AtomicI32::new(0),
            refusing: AtomicBool::new(false),
            pending: AtomicU64::new(0),
            lock: Mutex::new(None),
            fail_with: AtomicI32::new(0),
            on_fatal: Mutex::new(None),
            rewrites: AtomicU64::new(0),
            rewrite_failures: AtomicU64::new(0),
            last_rewrite_secs: AtomicU64::new(0),
            size: AtomicU64::new(0),
            base_size: AtomicU64::new(0),
            owed_since: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// How long the oldest effect taken for the file has waited to be in
    /// it as `appendfsync` promises: fsynced (`always`, `everysec`: up to
    /// a second there when all is well; more is Redis's
    /// `aof_delayed_fsync`, a disk slow to fsync), or written (`no`).
    /// Zero with nothing waiting or the file off; it grows while writes
    /// fail, and while a new base is awaited.
    pub fn fsync_lag(&self) -> Duration {
        match self.owed_since.load(Ordering::Relaxed) {
            _ if !self.is_on() => Duration::ZERO,
            0 => Duration::ZERO,
            t => self
                .epoch
                .elapsed()
                .saturating_sub(Duration::from_micros(t - 1)),
        }
    }

    /// Effects wait for the file from now, unless older ones already do.
    /// Under the writer's lock.
    fn owe(&self) {
        if self.owed_since.load(Ordering::Relaxed) == 0 {
            let now = self.epoch.elapsed().as_micros() as u64;
            self.owed_since.store(now + 1, Ordering::Relaxed);
        }
    }

    /// Nothing waits for the file any more. Under the writer's lock.
    fn settled(&self) {
        self.owed_since.store(0, Ordering::Relaxed);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// While the file is on and its last write failed: the error, for
    /// write commands' `-MISCONF` (Redis refuses writes then, under every
    /// `appendfsync`, until a write succeeds again). One relaxed load
    /// when all is well.
    #[inline]
    pub fn write_error(&self) -> Option<io::Error> {
        if !self.refusing.load(Ordering::Relaxed) {
            return None;
        }
        Some(io::Error::from_raw_os_error(
            self.last_errno.load(Ordering::Relaxed),
        ))
    }

    /// For tests: every write (and fsync) of the file fails with `errno`
    /// from now on, as a full disk's do (`libc::ENOSPC`); 0 ends it.
    #[doc(hidden)]
    pub fn fail_writes_with(&self, errno: i32) {
        self.fail_with.store(errno, Ordering::Relaxed);
        self.poke();
    }

    /// For tests: what a failed write under `appendfsync always` does
    /// instead of exiting the process.
    #[doc(hidden)]
    pub fn on_fatal(&self, f: impl Fn() + Send + Sync + 'static) {
        *self.on_fatal.lock() = Some(Box::new(f));
    }

    /// A write failed under `appendfsync always`: the promise (no reply
    /// before its write is on disk) cannot be kept, and waiting would
    /// hang every client, so the process exits as Redis's does. No reply
    /// for an effect not in the file went out: replies wait for the
    /// fsynced offset, which did not move.
    pub fn fatal(&self, e: &io::Error) {
        tracing::error!(
            path = %self.path.display(),
            "append-only file: cannot write ({}) with appendfsync always: exiting (no reply for a write not in the file went out); free space, then restart",
            crate::util::strerror(e)
        );
        if let Some(f) = self.on_fatal.lock().as_ref() {
            f();
            return;
        }
        std::process::exit(1);
    }

    fn failed(&self, e: &io::Error) {
        self.last_errno
            .store(e.raw_os_error().unwrap_or(libc::EIO), Ordering::Relaxed);
        self.last_write_ok.store(false, Ordering::Relaxed);
        self.refusing.store(self.is_on(), Ordering::Relaxed);
    }

    fn succeeded(&self) {
        self.last_write_ok.store(true, Ordering::Relaxed);
        self.refusing.store(false, Ordering::Relaxed);
    }

    /// The test hook's failure, if set.
    fn injected(&self) -> io::Result<()> {
        match self.fail_with.load(Ordering::Relaxed) {
            0 => Ok(()),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub fn rewriting(&self) -> bool {
        self.rewriting.load(Ordering::Relaxed)
    }

    /// Sets the fsync policy the reply path follows.
    pub fn set_fsync(&self, fsync: Fsync) {
        self.fsync.store(fsync as u8, Ordering::Relaxed);
    }

    /// The fsync policy in force (`appendfsync`'s apply step sets it).
    pub fn fsync(&self) -> Fsync {
        Fsync::from_index(self.fsync.load(Ordering::Relaxed))
    }

    /// Before replies leave, the one check every reply path makes: with
    /// `appendfsync always`, the offset they must wait for
    /// ([`Aof::wait_durable`]): every byte of the stream so far, unless the
    /// file already holds it fsynced. With `everysec` or `no`, wakes the
    /// writer thread if it sleeps with the stream not written, and answers
    /// `None`. One load without the file.
    #[inline]
    pub fn reply_gate(&self, stream_end: impl FnOnce() -> u64) -> Option<u64> {
        if !self.on.load(Ordering::Relaxed) && !self.starting.load(Ordering::Relaxed) {
            return None;
        }
        let target = stream_end();
        if self.fsync.load(Ordering::Relaxed) == Fsync::Always as u8 {
            let starting = self.starting.load(Ordering::Acquire);
            return (starting || self.synced.load(Ordering::Acquire) < target).then_some(target);
        }
        if self.idle.load(Ordering::SeqCst) {
            self.request(target);
        }
        None
    }

    /// Asks the writer thread to write the stream up to `target`: a
    /// wake-up only when no one asked for as much already, and the thread
    /// sleeps. No lock: one the thread held while the scheduler kept it
    /// waiting for a CPU held the worker's every client with it (up to
    /// 4.3 ms in a cluster move on a busy host, `perf record`).
    fn request(&self, target: u64) {
        if !self.on.load(Ordering::Relaxed) || self.written.load(Ordering::Acquire) >= target {
            return;
        }
        // SeqCst with `sleeping` (both here and in `wait`): either the
        // thread sees this request before it sleeps, or this sees it
        // sleeping and unparks it.
        if self.requested.fetch_max(target, Ordering::SeqCst) >= target {
            return;
        }
        if self.sleeping.load(Ordering::SeqCst) {
            self.unpark();
        }
    }

    /// Wakes the writer thread (or, if it is not asleep, makes its next
    /// sleep return at once).
    fn unpark(&self) {
        if let Some(thread) = self.sleeper.get() {
            thread.unpark();
        }
    }

    /// Resolves once the file holds byte `target` of the stream, fsynced
    /// (or the file was turned off).
    pub async fn wait_durable(&self, target: u64) {
        self.request(target);
        loop {
            let n = self.durable.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            let starting = self.starting.load(Ordering::Acquire);
            if !starting && (self.synced.load(Ordering::Acquire) >= target || !self.is_on()) {
                return;
            }
            n.await;
        }
    }

    /// For the writer thread: waits up to `timeout` for a request to write
    /// or rewrite. `None` once stopped, else whether a rewrite was asked.
    /// Called from one thread only (the first to call it is the one
    /// woken).
    pub fn wait(&self, timeout: Duration) -> Option<bool> {
        self.sleeper.get_or_init(std::thread::current);
        // A request left over from before the file was turned off is no
        // reason to stay awake (the thread would spin while it is off).
        let asked = || {
            let w = self.wake.lock();
            w.stop
                || w.rewrite
                || (self.is_on() && self.requested.load(Ordering::SeqCst) > self.taken())
        };
        self.sleeping.store(true, Ordering::SeqCst);
        if !asked() {
            std::thread::park_timeout(timeout);
        }
        self.sleeping.store(false, Ordering::SeqCst);
        let mut w = self.wake.lock();
        if w.stop {
            return None;
        }
        Some(std::mem::take(&mut w.rewrite))
    }

    /// For the writer thread: whether it goes to sleep until asked (no
    /// write came in its last round) or looks again in [`BUSY_POLL`].
    /// Returns false, and stays awake, if the stream moved past what the
    /// file holds meanwhile (a connection that looked before `idle` was
    /// set did not wake it).
    pub fn set_idle(&self, idle: bool, stream_end: u64) -> bool {
        self.idle.store(idle, Ordering::SeqCst);
        if idle && stream_end > self.taken() {
            self.idle.store(false, Ordering::SeqCst);
            return false;
        }
        idle
    }

    fn taken(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Asks the writer thread for a rewrite (`BGREWRITEAOF`).
    pub fn request_rewrite(&self) {
        self.wake.lock().rewrite = true;
        self.unpark();
    }

    /// `CONFIG SET` changed the settings: with `appendonly` turned on,
    /// from this reply on every `always` reply waits until the writer
    /// thread has the base in place (a write acknowledged meanwhile is
    /// in the file, fsynced, before its reply); then wakes the thread.
    pub fn follow(&self, appendonly: bool) {
        if appendonly && !self.is_on() {
            self.starting.store(true, Ordering::Release);
        } else if !appendonly {
            self.done_starting();
        }
        self.poke();
    }

    /// The start asked for is over (in place, failed, or called off).
    pub fn done_starting(&self) {
        if self.starting.swap(false, Ordering::AcqRel) {
            self.durable.notify_waiters();
        }
    }

    /// Wakes the writer thread to look at its settings again.
    pub fn poke(&self) {
        self.unpark();
    }

    /// Tells the writer thread to stop (after its last write).
    pub fn stop(&self) {
        self.wake.lock().stop = true;
        self.unpark();
    }

    /// Loads the file into `store`: its base, then its effects in order.
    /// `Ok(None)` if there is no file, or an empty one (as `touch` or a
    /// restore tool leaves it: no effects since a base it does not hold;
    /// the snapshot is loaded instead, and a base written before anything
    /// is appended). A torn last block is cut off (with `truncated_ok`,
    /// Redis's `aof-load-truncated yes`), anything else that does not
    /// read is an error naming the byte, the file untouched. Takes the
    /// lock first ([`Aof::acquire`]).
    pub fn load(
        &self,
        store: &Store,
        now: Nanos,
        truncated_ok: bool,
    ) -> Result<Option<Replayed>, AofError> {
        self.acquire()?;
        let path = &self.path;
        let io_err = |source| AofError::Io {
            path: path.clone(),
            source,
        };
        let mut bytes = Vec::new();
        match open_nofollow(path, OpenOptions::new().read(true)) {
            Ok(mut f) => f.read_to_end(&mut bytes).map_err(io_err)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(AofError::Symlink { path: path.clone() })
            }
            Err(e) => return Err(io_err(e)),
        };
        if bytes.is_empty() {
            tracing::warn!(path = %path.display(), "append-only file is empty (no base): loading the snapshot, then writing a base in its place");
            return Ok(None);
        }
        let replayed = replay(store, &bytes, now).map_err(|e| located(e, path))?;
        let mut replayed = match replayed {
            Ok(r) => r,
            Err((r, at)) if truncated_ok => {
                tracing::warn!(
                    path = %path.display(),
                    at,
                    cut = bytes.len() as u64 - at,
                    "append-only file: the last record is torn (a write cut short by a crash); loaded up to it and truncated the rest (aof-load-truncated yes)"
                );
                open_nofollow(path, OpenOptions::new().write(true))
                    .and_then(|f| {
                        f.set_len(at)?;
                        f.sync_all()
                    })
                    .map_err(io_err)?;
                r
            }
            Err((_, at)) => {
                return Err(AofError::Torn {
                    path: path.clone(),
                    at,
                })
            }
        };
        replayed.truncated = bytes.len() as u64 - replayed.size;
        Ok(Some(replayed))
    }

    /// Opens the loaded file for appending: the stream from `stream_end`
    /// on goes after what it holds. A file of the format before
    /// checksummed blocks is rewritten first (a fresh base of what it
    /// loaded), so that no file mixes the two.
    pub fn open_existing(&self, store: &Store, replayed: &Replayed, now: Nanos) -> io::Result<()> {
        if !replayed.checksummed {
            tracing::warn!(path = %self.path.display(), "append-only file of the format before checksummed blocks: loaded, now rewritten in the new one");
            return self.start(store, now).map_err(|e| match e {
                ErrorKind::Io(e) => e,
                other => io::Error::other(other.to_string()),
            });
        }
        let file = open_nofollow(&self.path, OpenOptions::new().append(true))?;
        let mut w = self.writer.lock();
        store.effects.set_capture(true);
        w.end = store.effects.take_captured(&mut w.pending);
        w.pending.clear();
        w.file = Some(file);
        w.len = replayed.size;
        w.need_base = false;
        self.size.store(replayed.size, Ordering::Relaxed);
        self.base_size.store(replayed.base_size, Ordering::Relaxed);
        self.mark(w.end, true);
        self.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Starts the file from the keyspace as it is (none was loaded, or
    /// `CONFIG SET appendonly yes`): takes the stream, writes a base, and
    /// is in place once the base is. It is on from the start: with
    /// `always`, a write acknowledged while the base is written waits
    /// for the base and its effect to be in the file, fsynced.
    pub fn start(&self, store: &Store, now: Nanos) -> Result<(), ErrorKind> {
        let started = self.start_inner(store, now);
        self.done_starting();
        started
    }

    fn start_inner(&self, store: &Store, now: Nanos) -> Result<(), ErrorKind> {
        if self.rewriting() {
            return Err(ErrorKind::Io(io::Error::other(
                "a rewrite of the previous file is still running; try again",
            )));
        }
        self.acquire().map_err(|e| match e {
            AofError::Io { source, .. } => ErrorKind::Io(source),
            other => ErrorKind::Io(io::Error::other(other.to_string())),
        })?;
        {
            let mut w = self.writer.lock();
            store.effects.set_capture(true);
            w.pending.clear();
            w.end = store.effects.take_captured(&mut w.pending);
            w.pending.clear();
            w.file = None;
            w.need_base = true;
            self.on.store(true, Ordering::Release);
        }
        if let Err(e) = self.rewrite(store, now) {
            let mut w = self.writer.lock();
            self.on.store(false, Ordering::Release);
            w.pending = Vec::new();
            drop(w);
            self.release();
            self.durable.notify_waiters();
            return Err(e);
        }
        Ok(())
    }

    /// Stops the file (`CONFIG SET appendonly no`, shutdown): what the
    /// stream holds is written and fsynced first; the lock is let go.
    pub fn close(&self, store: &Store) -> io::Result<()> {
        let result = self.flush(store, true);
        let mut w = self.writer.lock();
        self.on.store(false, Ordering::Release);
        self.refusing.store(false, Ordering::Relaxed);
        store.effects.set_capture(false);
        w.file = None;
        // A rewrite under way finds no tail to finish with, and gives up.
        w.tail = None;
        w.pending = Vec::new();
        w.need_base = false;
        self.pending.store(0, Ordering::Relaxed);
        self.settled();
        drop(w);
        self.release();
        self.durable.notify_waiters();
        result
    }

    /// Whether the file lacks effects and waits for a fresh base (the
    /// writer thread rewrites it).
    pub fn needs_base(&self) -> bool {
        self.is_on() && !self.rewriting() && self.writer.lock().need_base
    }

    /// Writes what the stream holds to the file, and fsyncs it if `sync`
    /// (or it was asked to stay in step, `always`). Wakes the connections
    /// waiting for it.
    pub fn flush(&self, store: &Store, sync: bool) -> io::Result<()> {
        let mut w = self.writer.lock();
        let result = self.flush_locked(&mut w, store, sync);
        drop(w);
        self.durable.notify_waiters();
        result
    }

    fn flush_locked(&self, w: &mut Writer, store: &Store, sync: bool) -> io::Result<()> {
        let before = w.end;
        w.end = store.effects.take_captured(&mut w.pending);
        let end = w.end;
        if !w.pending.is_empty() {
            self.owe();
        }
        if end < before {
            // The stream's offsets went back (a replica took its primary's
            // history): what was asked for before is past it now.
            self.requested.store(end, Ordering::Release);
        }
        if w.pending.len() > MAX_PENDING && w.file.is_some() {
            // The disk has taken nothing for a while and the stream goes
            // on (a replica's, expiries): drop the bytes, and start the
            // file again from a base, which holds their effects.
            tracing::error!(
                path = %self.path.display(),
                bytes = w.pending.len(),
                "append-only file: more than {MAX_PENDING} bytes wait for a disk that takes none; dropped, the file will be started again from a fresh base"
            );
            w.pending = Vec::new();
            w.file = None;
            w.tail = None;
            w.need_base = true;
        }
        let Writer {
            file,
            len,
            pending,
            dirty,
            tail,
            blocks,
            need_base,
            ..
        } = w;
        let Some(f) = file.as_mut() else {
            // A base is being written: the bytes are its tail (or, before
            // its walk starts, in the keyspace it walks). Written, not
            // fsynced: `always` replies wait for the base to be in place.
            if let Some(t) = tail {
                t.extend_from_slice(pending);
            }
            pending.clear();
            self.pending.store(0, Ordering::Relaxed);
            self.mark(end, false);
            return Ok(());
        };
        if !pending.is_empty() {
            blocks.clear();
            encode_blocks(blocks, pending);
            if let Err(e) = self.injected().and_then(|()| f.write_all(blocks)) {
                // Back to the last whole block, to be written again; if
                // even that fails, the file is started again from a base.
                if f.set_len(*len).is_err() {
                    *file = None;
                    *need_base = true;
                    pending.clear();
                    *tail = None;
                }
                self.pending.store(pending.len() as u64, Ordering::Relaxed);
                self.failed(&e);
                return Err(e);
            }
            *len += blocks.len() as u64;
            if let Some(t) = tail {
                t.extend_from_slice(pending);
            }
            pending.clear();
            *dirty = true;
            self.size.store(*len, Ordering::Relaxed);
            self.pending.store(0, Ordering::Relaxed);
        }
        self.written.store(end, Ordering::Release);
        if sync && *dirty {
            self.injected()
                .and_then(|()| f.sync_data())
                .inspect_err(|e| self.failed(e))?;
            *dirty = false;
        }
        self.succeeded();
        if !*dirty {
            self.synced.store(end, Ordering::Release);
        }
        if !*need_base && (!*dirty || self.fsync() == Fsync::No) {
            self.settled();
        }
        Ok(())
    }

    /// The file holds the stream up to `end` (`synced`: fsynced too).
    fn mark(&self, end: u64, synced: bool) {
        self.written.store(end, Ordering::Release);
        if synced {
            self.synced.store(end, Ordering::Release);
        }
    }

    /// Whether the file has grown past `auto-aof-rewrite-percentage`
    /// (0: never) over its base, and past `min_size` bytes.
    pub fn wants_rewrite(&self, percentage: u64, min_size: u64) -> bool {
        let (size, base) = (
            self.size.load(Ordering::Relaxed),
            self.base_size.load(Ordering::Relaxed),
        );
        percentage > 0
            && !self.rewriting()
            && size >= min_size
            && size.saturating_sub(base).saturating_mul(100)
                >= base.max(1).saturating_mul(percentage)
    }

    /// Rewrites the file: a base of the keyspace now, then the effects
    /// written during the walk, in a temporary file renamed over the old
    /// one. The old file is written meanwhile, and stays if this fails.
    pub fn rewrite(&self, store: &Store, now: Nanos) -> Result<(), ErrorKind> {
        if self.rewriting.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let started = Instant::now();
        let result = self.rewrite_inner(store, now);
        self.rewriting.store(false, Ordering::Release);
        self.last_rewrite_ok
            .store(result.is_ok(), Ordering::Relaxed);
        self.last_rewrite_secs
            .store(started.elapsed().as_secs(), Ordering::Relaxed);
        match &result {
            Ok(()) => {
                self.rewrites.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    path = %self.path.display(),
                    bytes = self.size.load(Ordering::Relaxed),
                    ms = started.elapsed().as_millis() as u64,
                    "append-only file rewritten"
                );
            }
            Err(e) => {
                self.rewrite_failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(path = %self.path.display(), "append-only file rewrite failed: {e}")
            }
        }
        result
    }

    fn rewrite_inner(&self, store: &Store, now: Nanos) -> Result<(), ErrorKind> {
        {
            // From here on, what is written is kept for the new file too.
            let mut w = self.writer.lock();
            self.flush_locked(&mut w, store, false)?;
            w.tail = Some(Vec::new());
        }
        let made = (|| {
            let (file, tmp) = snapshot::create_temp(&self.path)?;
            let base = (|| {
                set_append(&file)?;
                let mut bw = BufWriter::with_capacity(1 << 20, file);
                snapshot::write(store, now, &mut bw)?;
                bw.write_all(TAIL_MAGIC)?;
                let mut file = bw.into_inner().map_err(|e| e.into_error())?;
                let base = file.stream_position()?;
                self.injected()?;
                file.sync_data()?;
                Ok((file, base))
            })();
            if base.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            base.map(|(file, base)| (file, tmp, base))
        })();
        let mut w = self.writer.lock();
        let (mut file, tmp, base) = match made {
            Ok(m) => m,
            Err(e) => {
                w.tail = None;
                return Err(ErrorKind::Io(e));
            }
        };
        let switched = (|| {
            self.flush_locked(&mut w, store, false)?;
            let tail = w.tail.take().ok_or_else(|| {
                io::Error::other("the append-only file was turned off during the rewrite")
            })?;
            let mut blocks = Vec::new();
            encode_blocks(&mut blocks, &tail);
            self.injected()?;
            file.write_all(&blocks)?;
            file.sync_data()?;
            snapshot::install(&tmp, &self.path).map_err(|e| match e {
                ErrorKind::Io(e) => e,
                other => io::Error::other(other.to_string()),
            })?;
            Ok::<u64, io::Error>(base + blocks.len() as u64)
        })();
        match switched {
            Ok(len) => {
                w.file = Some(file);
                w.len = len;
                w.dirty = false;
                w.need_base = false;
                self.size.store(len, Ordering::Relaxed);
                self.base_size.store(base, Ordering::Relaxed);
                self.mark(w.end, true);
                self.succeeded();
                self.settled();
                drop(w);
                self.durable.notify_waiters();
                Ok(())
            }
            Err(e) => {
                w.tail = None;
                let _ = std::fs::remove_file(&tmp);
                Err(ErrorKind::Io(e))
            }
        }
    }
}

impl std::fmt::Debug for Aof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aof")
            .field("path", &self.path)
            .field("on", &self.is_on())
            .finish_non_exhaustive()
    }
}

/// Opens `path` without following a symbolic link (`O_NOFOLLOW`: a link
/// planted there fails with `ELOOP` instead of sending writes elsewhere).
/// A replay's error with the file it was read from.
fn located(e: ReplayError, path: &Path) -> AofError {
    match e {
        ReplayError::Base(kind) => AofError::Base {
            path: path.to_owned(),
            kind,
        },
        ReplayError::Corrupt { at, why } => AofError::Corrupt {
            path: path.to_owned(),
            at,
            why,
        },
    }
}

fn open_nofollow(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    options.custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Makes every write of `file` go at its end (`O_APPEND`), as the loaded
/// file is opened.
fn set_append(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor `file` owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_APPEND) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A connection asks the writer thread for a write after each batch
    /// that wrote; it must not wait for the lock the thread holds while it
    /// wakes (parking_lot may hand the lock to the woken thread, which then
    /// holds it until the scheduler runs it: milliseconds on a busy host,
    /// with every client of the worker waiting). The thread still wakes
    /// for the request.
    #[test]
    fn asking_the_writer_for_a_write_never_waits_for_its_lock() {
        let aof = Arc::new(Aof::new(PathBuf::from("unused.aof")));
        aof.on.store(true, Ordering::Release);
        let writer = {
            let aof = aof.clone();
            std::thread::spawn(move || aof.wait(Duration::from_secs(3600)))
        };
        let held = aof.wake.lock();
        let (done, returned) = std::sync::mpsc::channel();
        let asker = {
            let aof = aof.clone();
            std::thread::spawn(move || {
                aof.request(1);
                let _ = done.send(());
            })
        };
        // A bound on a hang, not a window: the request waits for nothing.
        let waited = returned.recv_timeout(Duration::from_secs(10));
        drop(held);
        asker.join().unwrap();
        assert!(waited.is_ok(), "the request waited for the writer's lock");
        assert_eq!(
            writer.join().unwrap(),
            Some(false),
            "the writer woke for it"
        );
    }
}
