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
//! tail    effects frames: kind: u8  len: u32 (LE)  body[len]
//!           1 SET  one snapshot record   2 DEL  key   3 FLUSH
//!           4 PING, 5 GETACK (a replica's stream carries them; skipped)
//! ```
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

use parking_lot::{Condvar, Mutex};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::clock::Nanos;
use crate::store::effects::{self, ApplyError};
use crate::store::snapshot::{self, ErrorKind, Loaded};
use crate::store::Store;

/// While writes come, how often the writer thread writes them to the file
/// with `everysec` or `no` (a crash of the process loses at most this much
/// of what was acknowledged; of the machine, what was not fsynced).
pub const BUSY_POLL: Duration = Duration::from_millis(1);

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
}

/// What loading the file found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// The base's load (its keys, and when it was written).
    pub base: Loaded,
    /// Effects applied after the base.
    pub effects: u64,
    /// Bytes cut off a torn tail (0: none).
    pub truncated: u64,
    /// The file's length after loading, and its base's.
    pub size: u64,
    pub base_size: u64,
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
}

#[derive(Debug, Default)]
struct Wake {
    rewrite: bool,
    stop: bool,
}

/// The append-only file of one server.
#[derive(Debug)]
pub struct Aof {
    path: PathBuf,
    /// Open and taking the stream: `always` connections wait on it.
    on: AtomicBool,
    /// `appendfsync always` is in force (read by every reply write).
    always: AtomicBool,
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
    wake: Mutex<Wake>,
    cond: Condvar,
    /// Woken after each write of the file: `always` connections wait on it.
    pub durable: tokio::sync::Notify,
    rewriting: AtomicBool,
    pub last_rewrite_ok: AtomicBool,
    pub last_write_ok: AtomicBool,
    pub rewrites: AtomicU64,
    pub last_rewrite_secs: AtomicU64,
    pub size: AtomicU64,
    pub base_size: AtomicU64,
}

impl Aof {
    pub fn new(path: PathBuf) -> Aof {
        Aof {
            path,
            on: AtomicBool::new(false),
            always: AtomicBool::new(false),
            writer: Mutex::new(Writer::default()),
            written: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            requested: AtomicU64::new(0),
            idle: AtomicBool::new(true),
            wake: Mutex::new(Wake::default()),
            cond: Condvar::new(),
            durable: tokio::sync::Notify::new(),
            rewriting: AtomicBool::new(false),
            last_rewrite_ok: AtomicBool::new(true),
            last_write_ok: AtomicBool::new(true),
            rewrites: AtomicU64::new(0),
            last_rewrite_secs: AtomicU64::new(0),
            size: AtomicU64::new(0),
            base_size: AtomicU64::new(0),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub fn rewriting(&self) -> bool {
        self.rewriting.load(Ordering::Relaxed)
    }

    /// Sets the fsync policy the reply path follows.
    pub fn set_fsync(&self, fsync: Fsync) {
        self.always.store(fsync == Fsync::Always, Ordering::Relaxed);
    }

    /// Before replies leave, the one check every reply path makes: with
    /// `appendfsync always`, the offset they must wait for
    /// ([`Aof::wait_durable`]): every byte of the stream so far, unless the
    /// file already holds it fsynced. With `everysec` or `no`, wakes the
    /// writer thread if it sleeps with the stream not written, and answers
    /// `None`. One load without the file.
    #[inline]
    pub fn reply_gate(&self, stream_end: impl FnOnce() -> u64) -> Option<u64> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let target = stream_end();
        if self.always.load(Ordering::Relaxed) {
            return (self.synced.load(Ordering::Acquire) < target).then_some(target);
        }
        if self.idle.load(Ordering::SeqCst) {
            self.request(target);
        }
        None
    }

    /// Asks the writer thread to write the stream up to `target`: a
    /// wake-up only when no one asked for as much already.
    fn request(&self, target: u64) {
        if !self.on.load(Ordering::Relaxed) || self.written.load(Ordering::Acquire) >= target {
            return;
        }
        if self.requested.fetch_max(target, Ordering::AcqRel) >= target {
            return;
        }
        let _w = self.wake.lock();
        self.cond.notify_one();
    }

    /// Resolves once the file holds byte `target` of the stream, fsynced
    /// (or the file was turned off).
    pub async fn wait_durable(&self, target: u64) {
        self.request(target);
        loop {
            let n = self.durable.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if self.synced.load(Ordering::Acquire) >= target || !self.is_on() {
                return;
            }
            n.await;
        }
    }

    /// For the writer thread: waits up to `timeout` for a request to write
    /// or rewrite. `None` once stopped, else whether a rewrite was asked.
    pub fn wait(&self, timeout: Duration) -> Option<bool> {
        let mut w = self.wake.lock();
        // A request left over from before the file was turned off is no
        // reason to stay awake (the thread would spin while it is off).
        let asked = |w: &Wake| {
            w.stop
                || w.rewrite
                || (self.is_on() && self.requested.load(Ordering::Acquire) > self.taken())
        };
        if !asked(&w) {
            self.cond.wait_for(&mut w, timeout);
        }
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
        self.cond.notify_one();
    }

    /// Wakes the writer thread to look at its settings again.
    pub fn poke(&self) {
        let _w = self.wake.lock();
        self.cond.notify_one();
    }

    /// Tells the writer thread to stop (after its last write).
    pub fn stop(&self) {
        self.wake.lock().stop = true;
        self.cond.notify_one();
    }

    /// Loads the file into `store`: its base, then its effects in order.
    /// `Ok(None)` if there is no file. A torn last frame is cut off (with
    /// `truncated_ok`, Redis's `aof-load-truncated yes`), anything else
    /// that does not read is an error naming the byte.
    pub fn load(
        &self,
        store: &Store,
        now: Nanos,
        truncated_ok: bool,
    ) -> Result<Option<Replayed>, AofError> {
        let path = &self.path;
        let io_err = |source| AofError::Io {
            path: path.clone(),
            source,
        };
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(e)),
        };
        let replayed = replay(store, &bytes, now).map_err(|e| e.at(path))?;
        let mut replayed = match replayed {
            Ok(r) => r,
            Err((r, at)) if truncated_ok => {
                tracing::warn!(
                    path = %path.display(),
                    at,
                    cut = bytes.len() as u64 - at,
                    "append-only file: the last record is torn (a write cut short by a crash); loaded up to it and truncated the rest (aof-load-truncated yes)"
                );
                OpenOptions::new()
                    .write(true)
                    .open(path)
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
    /// on goes after what it holds.
    pub fn open_existing(&self, store: &Store, replayed: &Replayed) -> io::Result<()> {
        let mut file = OpenOptions::new().write(true).open(&self.path)?;
        file.seek(SeekFrom::Start(replayed.size))?;
        let mut w = self.writer.lock();
        store.effects.set_capture(true);
        w.end = store.effects.take_captured(&mut w.pending);
        w.pending.clear();
        w.file = Some(file);
        w.len = replayed.size;
        self.size.store(replayed.size, Ordering::Relaxed);
        self.base_size.store(replayed.base_size, Ordering::Relaxed);
        self.mark(w.end, true);
        self.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Starts the file from the keyspace as it is (none was loaded, or
    /// `CONFIG SET appendonly yes`): takes the stream, writes a base, and
    /// is on once the base is in place.
    pub fn start(&self, store: &Store, now: Nanos) -> Result<(), ErrorKind> {
        if self.rewriting() {
            return Err(ErrorKind::Io(io::Error::other(
                "a rewrite of the previous file is still running; try again",
            )));
        }
        {
            let mut w = self.writer.lock();
            store.effects.set_capture(true);
            w.pending.clear();
            w.end = store.effects.take_captured(&mut w.pending);
            w.pending.clear();
            w.file = None;
        }
        self.rewrite(store, now)?;
        self.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops the file (`CONFIG SET appendonly no`, shutdown): what the
    /// stream holds is written and fsynced first.
    pub fn close(&self, store: &Store) -> io::Result<()> {
        let result = self.flush(store, true);
        let mut w = self.writer.lock();
        self.on.store(false, Ordering::Release);
        store.effects.set_capture(false);
        w.file = None;
        // A rewrite under way finds no tail to finish with, and gives up.
        w.tail = None;
        w.pending = Vec::new();
        drop(w);
        self.durable.notify_waiters();
        result
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
        if end < before {
            // The stream's offsets went back (a replica took its primary's
            // history): what was asked for before is past it now.
            self.requested.store(end, Ordering::Release);
        }
        let Writer {
            file,
            len,
            pending,
            dirty,
            tail,
            ..
        } = w;
        let Some(f) = file.as_mut() else {
            // A first base is being written: the bytes are its tail.
            if let Some(t) = tail {
                t.extend_from_slice(pending);
            }
            pending.clear();
            self.mark(end, true);
            return Ok(());
        };
        if !pending.is_empty() {
            if let Err(e) = f.write_all(pending) {
                // Back to the last whole frame, to be written again.
                let _ = f.set_len(*len).and_then(|()| f.seek(SeekFrom::Start(*len)));
                self.last_write_ok.store(false, Ordering::Relaxed);
                return Err(e);
            }
            *len += pending.len() as u64;
            if let Some(t) = tail {
                t.extend_from_slice(pending);
            }
            pending.clear();
            *dirty = true;
            self.size.store(*len, Ordering::Relaxed);
        }
        self.written.store(end, Ordering::Release);
        if sync && *dirty {
            f.sync_data().inspect_err(|_| {
                self.last_write_ok.store(false, Ordering::Relaxed);
            })?;
            *dirty = false;
        }
        self.last_write_ok.store(true, Ordering::Relaxed);
        if !*dirty {
            self.synced.store(end, Ordering::Release);
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
                let mut bw = BufWriter::with_capacity(1 << 20, file);
                snapshot::write(store, now, &mut bw)?;
                let mut file = bw.into_inner().map_err(|e| e.into_error())?;
                let base = file.stream_position()?;
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
            file.write_all(&tail)?;
            file.sync_data()?;
            snapshot::install(&tmp, &self.path).map_err(|e| match e {
                ErrorKind::Io(e) => e,
                other => io::Error::other(other.to_string()),
            })?;
            Ok::<u64, io::Error>(base + tail.len() as u64)
        })();
        match switched {
            Ok(len) => {
                w.file = Some(file);
                w.len = len;
                w.dirty = false;
                self.size.store(len, Ordering::Relaxed);
                self.base_size.store(base, Ordering::Relaxed);
                self.mark(w.end, true);
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

/// Why a replay stopped short: an error at a byte, before the file's path
/// is known.
#[derive(Debug)]
pub enum ReplayError {
    Base(ErrorKind),
    Corrupt { at: u64, why: String },
}

impl ReplayError {
    fn at(self, path: &Path) -> AofError {
        match self {
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
}

/// Loads a file's bytes into `store`. `Ok(Err((what loaded, at)))` when
/// the last frame is torn at byte `at` (cut short, or followed by nothing
/// but zeros, as a file extended but not written before a crash reads).
/// The fuzz target `aof` runs this on arbitrary bytes.
#[allow(clippy::type_complexity)]
pub fn replay(
    store: &Store,
    bytes: &[u8],
    now: Nanos,
) -> Result<Result<Replayed, (Replayed, u64)>, ReplayError> {
    let mut r = Replayed::default();
    if bytes.is_empty() {
        return Ok(Ok(r));
    }
    let (base, _, base_len) =
        snapshot::read_prefix(store, bytes, now).map_err(ReplayError::Base)?;
    r.base = base;
    r.base_size = base_len;
    let mut at = base_len as usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let Some((kind, body, n)) = effects::next_frame(rest) else {
            if effects::is_stream_kind(rest[0]) || rest.iter().all(|&b| b == 0) {
                r.size = at as u64;
                return Ok(Err((r, at as u64)));
            }
            return Err(ReplayError::Corrupt {
                at: at as u64,
                why: ApplyError::Kind(rest[0]).to_string(),
            });
        };
        if kind == 0 && rest.iter().all(|&b| b == 0) {
            r.size = at as u64;
            return Ok(Err((r, at as u64)));
        }
        store
            .apply_frame(kind, body, now)
            .map_err(|e| ReplayError::Corrupt {
                at: at as u64,
                why: e.to_string(),
            })?;
        r.effects += 1;
        at += n;
    }
    r.size = at as u64;
    Ok(Ok(r))
}
